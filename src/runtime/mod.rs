//! Runtimes: how a resolved recipe becomes a running server and how sparkctl finds,
//! watches and stops it again. `docker` drives the Engine API; `process` supervises a
//! host binary. Both answer to one trait, so the flows above never ask which one runs.

pub(crate) mod docker;
pub(crate) mod group;
pub(crate) mod process;
pub mod ready;
pub(crate) mod remote;
pub(crate) mod sleep;

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::engine::Engine;
use crate::error::Result;
use crate::recipe::{Resolved, Runtime};

/// How long a stopped server gets between SIGTERM and SIGKILL.
pub(crate) const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

pub(crate) use docker::DockerRuntime;
pub(crate) use process::ProcessRuntime;

/// What a start needs beyond the resolved recipe.
#[derive(Debug, Clone)]
pub struct StartSpec {
    pub resolved: Resolved,
    pub recipe_hash: String,
    pub run_id: String,
    /// sha256 over the model's files, when the recipe has a model.
    pub model_fingerprint: Option<String>,
    /// Started with `--allow-unpinned` (recorded on the container).
    pub unpinned: bool,
    /// The image as the recipe names it (the launch holds the digest that runs).
    pub image_ref: Option<String>,
}

/// A server sparkctl started, running or not any more.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Deployment {
    /// The recipe it runs.
    pub name: String,
    pub runtime: Runtime,
    pub engine: Engine,
    /// Container id, or the pid of a process.
    pub id: String,
    pub run_id: String,
    pub recipe_hash: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_fingerprint: Option<String>,
    /// Image digest the container runs, or the binary path of a process.
    pub artifact: String,
    /// The image as the recipe names it (docker runtime).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_ref: Option<String>,
    pub host: String,
    pub port: u16,
    pub health_path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_gb: Option<f64>,
    /// Unix seconds.
    pub started_at: u64,
    #[serde(flatten)]
    pub state: RunState,
    /// Where a process's output goes (containers keep theirs in the engine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_file: Option<PathBuf>,
}

impl Deployment {
    /// The deployment a start just made: what the spec says, running now.
    pub(crate) fn started(
        spec: &StartSpec,
        runtime: Runtime,
        id: String,
        artifact: &str,
    ) -> Deployment {
        let r = &spec.resolved;
        Deployment {
            name: r.name.clone(),
            runtime,
            engine: r.engine,
            id,
            run_id: spec.run_id.clone(),
            recipe_hash: spec.recipe_hash.clone(),
            model_fingerprint: spec.model_fingerprint.clone(),
            artifact: artifact.to_string(),
            image_ref: None,
            host: r.host.clone(),
            port: r.port,
            health_path: r.health_path.clone(),
            memory_gb: r.memory_gb,
            started_at: crate::units::unix_now().as_secs(),
            state: RunState::Running,
            log_file: None,
        }
    }
}

/// Where a client reaches a server bound to `host:port` (a wildcard bind over loopback).
pub(crate) fn client_url(host: &str, port: u16) -> String {
    let host = match host {
        "0.0.0.0" | "::" | "" => "127.0.0.1",
        h => h,
    };
    if host.contains(':') {
        format!("http://[{host}]:{port}")
    } else {
        format!("http://{host}:{port}")
    }
}

impl Deployment {
    pub(crate) fn url(&self) -> String {
        client_url(&self.host, self.port)
    }

    pub(crate) fn running(&self) -> bool {
        self.state == RunState::Running
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum RunState {
    Running,
    /// Created, never started (a container whose start failed or was interrupted).
    Created,
    /// Ended; the exit details when the runtime still knows them.
    Exited {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit: Option<Exit>,
    },
}

/// How a server ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Exit {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) code: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) signal: Option<i32>,
    #[serde(default)]
    pub(crate) oom_killed: bool,
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.oom_killed {
            return write!(
                f,
                "killed by the kernel's out-of-memory killer (OOMKilled){}",
                self.code
                    .map(|c| format!(", exit code {c}"))
                    .unwrap_or_default()
            );
        }
        // A container's main process killed by signal N exits 128+N.
        let signal = self.signal.or(match self.code {
            Some(c) if c > 128 && c < 160 => Some((c - 128) as i32),
            _ => None,
        });
        match (self.code, signal) {
            (_, Some(9)) => write!(
                f,
                "killed by SIGKILL{} — on a DGX Spark usually memory: something else holds \
                 the unified memory it needs",
                self.code
                    .map(|c| format!(" (exit code {c})"))
                    .unwrap_or_default()
            ),
            (Some(c), Some(s)) => write!(f, "killed by signal {s} (exit code {c})"),
            (None, Some(s)) => write!(f, "killed by signal {s}"),
            (Some(c), None) => write!(f, "exited with code {c}"),
            (None, None) => write!(f, "exited"),
        }
    }
}

/// What a runtime reports about a server while sparkctl waits for it.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// One line of its output (stdout or stderr).
    Line(String),
    /// It ended.
    Exited(Exit),
}

/// A server just started, with the stream of its output and its end.
pub struct Started {
    pub deployment: Deployment,
    pub events: mpsc::Receiver<Event>,
    /// How long readiness's one-token completion may take (`health.completion_timeout`).
    pub completion_timeout: Duration,
}

/// What `logs` shows: the last `tail` lines (all of them when `None`), then, while
/// `follow`, new ones until the server stops.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LogView {
    pub(crate) tail: Option<usize>,
    pub(crate) follow: bool,
}

/// Where `logs` writes: the terminal, or the file a run keeps.
pub(crate) type LogSink = dyn std::io::Write + Send;

/// The interface both runtimes implement.
#[allow(async_fn_in_trait)]
pub(crate) trait Supervisor {
    /// Checks what can be checked before anything changes (binary, image, GPU runtime);
    /// returns what will run (the image digest or the binary path).
    async fn preflight(&self, resolved: &Resolved) -> Result<String>;
    /// Starts the server; `artifact` is what `preflight` returned.
    async fn start(&self, spec: &StartSpec, artifact: &str) -> Result<Started>;
    /// sparkctl's deployments under this runtime, newest first, exited ones included.
    async fn list(&self) -> Result<Vec<Deployment>>;
    /// Stops it (SIGTERM, then SIGKILL after `grace`); its logs stay.
    async fn stop(&self, deployment: &Deployment, grace: Duration) -> Result<()>;
    /// Writes its output to `out` as `view` asks.
    async fn logs(&self, deployment: &Deployment, view: LogView, out: &mut LogSink) -> Result<()>;
}

/// Both runtimes, for commands that do not care which one a deployment uses. The Docker
/// Engine is optional here: without it, process deployments still list, stop and log.
pub(crate) struct Runtimes {
    pub(crate) process: ProcessRuntime,
    docker: std::result::Result<DockerRuntime, crate::error::Reach>,
}

impl Runtimes {
    pub(crate) async fn open(state: &crate::state::StateDir) -> Runtimes {
        Runtimes {
            process: ProcessRuntime::new(state.clone()),
            // The client's own words: `docker()` says them in the one message.
            docker: DockerRuntime::connect(state).await.map_err(|e| match e {
                crate::error::Error::EngineUnreachable { cause } => cause,
                other => crate::error::Reach::Said(other.to_string()),
            }),
        }
    }

    pub(crate) fn docker(&self) -> Result<&DockerRuntime> {
        self.docker
            .as_ref()
            .map_err(|cause| crate::error::Error::EngineUnreachable {
                cause: cause.clone(),
            })
    }

    /// Every deployment, newest first; containers are missing (with a warning) when the
    /// engine cannot be reached, at the start or since.
    pub(crate) async fn list(&self) -> Result<(Vec<Deployment>, Vec<String>)> {
        let (mut all, damaged) = self.process.list_records()?;
        let mut warnings: Vec<String> = damaged.iter().map(ToString::to_string).collect();
        // An engine that stopped answering since (dockerd restarting) is the same case as
        // one that never answered: process deployments still list.
        match &self.docker {
            Ok(docker) => match docker.list().await {
                Ok(containers) => all.extend(containers),
                Err(e) => warnings.push(format!("containers not shown: {e}")),
            },
            Err(cause) => warnings.push(format!(
                "containers not shown: {}",
                crate::error::Error::EngineUnreachable {
                    cause: cause.clone()
                }
            )),
        }
        all.sort_by(|a, b| {
            b.started_at
                .cmp(&a.started_at)
                .then(b.run_id.cmp(&a.run_id))
        });
        Ok((all, warnings))
    }

    /// One deployment per recipe, the one that matters: its running one, else its newest.
    /// Running ones first, then by name.
    pub(crate) async fn latest_per_recipe(&self) -> Result<(Vec<Deployment>, Vec<String>)> {
        let (all, warnings) = self.list().await?;
        let mut rows: Vec<Deployment> = Vec::new();
        for d in all {
            match rows.iter_mut().find(|r| r.name == d.name) {
                Some(r) if !r.running() && d.running() => *r = d,
                Some(_) => {}
                None => rows.push(d),
            }
        }
        rows.sort_by(|a, b| b.running().cmp(&a.running()).then(a.name.cmp(&b.name)));
        if let Ok(docker) = &self.docker {
            // One inspect per exited container, all at once.
            futures_util::future::join_all(
                rows.iter_mut()
                    .filter(|d| d.runtime == Runtime::Docker)
                    .map(|d| docker.exit_details(d)),
            )
            .await;
        }
        Ok((rows, warnings))
    }

    /// The very instance `id` of recipe `name`, if sparkctl knows it: a process from its
    /// record (no engine asked: the watch must see a process production while the Docker
    /// Engine does not answer), a container from the engine.
    pub(crate) async fn instance(&self, name: &str, id: &str) -> Result<Option<Deployment>> {
        if let Some(d) = self.process.find(name).filter(|d| d.id == id) {
            return Ok(Some(d));
        }
        // A process's id is its pid; a container's is 64 hex digits.
        if id.chars().all(|c| c.is_ascii_digit()) {
            return Ok(None);
        }
        self.docker()?.by_id(id).await
    }

    pub(crate) async fn find(&self, name: &str) -> Result<Option<Deployment>> {
        let (rows, _) = self.latest_per_recipe().await?;
        Ok(rows.into_iter().find(|d| d.name == name))
    }

    /// Where `name`'s running deployment answers (what `eval NAME` asks).
    pub(crate) async fn url_of(&self, name: &str) -> Result<String> {
        self.find(name)
            .await?
            .filter(Deployment::running)
            .map(|d| d.url())
            .ok_or_else(|| crate::error::Error::NotRunning { name: name.into() })
    }

    pub(crate) async fn preflight(&self, resolved: &Resolved) -> Result<String> {
        match resolved.runtime {
            Runtime::Docker => self.docker()?.preflight(resolved).await,
            Runtime::Process => self.process.preflight(resolved).await,
        }
    }

    pub(crate) async fn start(&self, spec: &StartSpec, artifact: &str) -> Result<Started> {
        match spec.resolved.runtime {
            Runtime::Docker => self.docker()?.start(spec, artifact).await,
            Runtime::Process => self.process.start(spec, artifact).await,
        }
    }

    pub(crate) async fn stop(&self, deployment: &Deployment, grace: Duration) -> Result<()> {
        match deployment.runtime {
            Runtime::Docker => {
                let docker = self.docker()?;
                docker.stop(deployment, grace).await?;
                // A group's API server takes the rest of its group, on every node, with it.
                let (client, id) = (docker.client(), deployment.id.as_str());
                let state = Some(self.process.state());
                for note in group::stop_rest(client, id, state, docker.state_id()).await {
                    tracing::warn!("{note}");
                }
                Ok(())
            }
            Runtime::Process => self.process.stop(deployment, grace).await,
        }
    }

    pub(crate) async fn logs(
        &self,
        deployment: &Deployment,
        view: LogView,
        out: &mut LogSink,
    ) -> Result<()> {
        match deployment.runtime {
            Runtime::Docker => self.docker()?.logs(deployment, view, out).await,
            Runtime::Process => self.process.logs(deployment, view, out).await,
        }
    }
}

/// Splits a byte stream into lines across chunk boundaries.
#[derive(Default)]
pub(crate) struct LineBuffer {
    pending: Vec<u8>,
}

impl LineBuffer {
    pub(crate) fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        self.pending.extend_from_slice(bytes);
        let mut lines = Vec::new();
        while let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            lines.push(
                String::from_utf8_lossy(&line)
                    .trim_end_matches(['\n', '\r'])
                    .to_string(),
            );
        }
        lines
    }
}

/// The last `n` lines of `text` (all when `n` is None).
pub(crate) fn last_lines(text: &str, n: Option<usize>) -> &str {
    let Some(n) = n else { return text };
    let trimmed = text.trim_end_matches('\n');
    let mut start = trimmed.len();
    for _ in 0..n {
        match trimmed[..start].rfind('\n') {
            Some(i) => start = i,
            None => return text,
        }
    }
    &text[start + 1..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exits_explain_themselves() {
        let oom = Exit {
            code: Some(137),
            signal: None,
            oom_killed: true,
        };
        assert!(oom.to_string().contains("out-of-memory killer"));
        let killed = Exit {
            code: Some(137),
            signal: None,
            oom_killed: false,
        };
        assert!(killed.to_string().contains("SIGKILL"), "{killed}");
        let plain = Exit {
            code: Some(1),
            signal: None,
            oom_killed: false,
        };
        assert_eq!(plain.to_string(), "exited with code 1");
    }

    #[test]
    fn lines_are_split_across_chunks() {
        let mut buf = LineBuffer::default();
        assert!(buf.push(b"hel").is_empty());
        assert_eq!(buf.push(b"lo\nwor"), vec!["hello"]);
        assert_eq!(buf.push(b"ld\r\n"), vec!["world"]);
    }

    #[test]
    fn tails_count_lines_from_the_end() {
        assert_eq!(last_lines("a\nb\nc\n", Some(2)), "b\nc\n");
        assert_eq!(last_lines("a\nb\nc\n", Some(5)), "a\nb\nc\n");
        assert_eq!(last_lines("a\nb\nc\n", None), "a\nb\nc\n");
        assert_eq!(last_lines("a\nb\nc\n", Some(0)), "");
    }
}
