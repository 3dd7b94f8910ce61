//! The process runtime: a host binary (the hand-built llama-server of the seeds) started
//! in its own session, its output in a log file under the state dir, remembered by pid and
//! start time so that a recycled pid is never taken for it.

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::{
    Deployment, Event, Exit, LineBuffer, LogSink, LogView, RunState, StartSpec, Started, Supervisor,
};
use crate::error::{Error, Result};
use crate::host::{self, ProcessId};
use crate::recipe::{Launch, Resolved, Runtime};
use crate::state::{self, StateDir};

/// What `deployments/NAME.json` holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    #[serde(flatten)]
    deployment: Deployment,
    process: ProcessId,
    program: String,
    args: Vec<String>,
}

pub(crate) struct ProcessRuntime {
    state: StateDir,
    /// Where records go when the disk is full, in a process that must keep going (the
    /// front door); without it, a record that cannot be written fails the start.
    deferred: Option<state::Deferred>,
}

impl ProcessRuntime {
    /// The state dir it keeps records in.
    pub(crate) fn state(&self) -> &StateDir {
        &self.state
    }
}

/// How often the log file and the process are looked at while waiting.
const POLL: Duration = Duration::from_millis(10);

impl ProcessRuntime {
    pub(crate) fn new(state: StateDir) -> Self {
        ProcessRuntime {
            state,
            deferred: None,
        }
    }

    /// Records that find the disk full are kept in `deferred` and written later.
    pub(crate) fn defer_writes(&mut self, deferred: state::Deferred) {
        self.deferred = Some(deferred);
    }

    fn write_record(&self, path: &Path, record: &Record) -> Result<()> {
        match &self.deferred {
            Some(d) => d.write_json(path, record).map(|_| ()),
            None => state::write_json(path, record),
        }
    }

    fn read_record(&self, path: &Path) -> Result<Record> {
        match &self.deferred {
            Some(d) => d.read_json(path),
            None => state::read_json(path),
        }
    }

    /// Every deployment record that reads, newest first, and the damaged ones (which
    /// `Runtimes::list` reports as warnings instead of failing `status` whole).
    pub(crate) fn list_records(&self) -> Result<(Vec<Deployment>, Vec<state::Damaged>)> {
        let (mut records, damaged) =
            state::read_json_files::<Record>(self.state.deployment_records()?);
        if let Some(d) = &self.deferred {
            // Records still waiting for room are read from memory, as they will be.
            let dir = self.state.root().join("deployments");
            for path in d.pending_in(&dir) {
                if let Ok(r) = d.read_json::<Record>(&path) {
                    records.retain(|(p, _)| *p != path);
                    records.push((path, r));
                }
            }
        }
        let mut out: Vec<Deployment> = records
            .into_iter()
            .map(|(_, r)| Self::deployment_of(r))
            .collect();
        out.sort_by_key(|d| std::cmp::Reverse(d.started_at));
        Ok((out, damaged))
    }

    /// Recipe `name`'s deployment, from its record alone.
    pub(crate) fn find(&self, name: &str) -> Option<Deployment> {
        let record = self.read_record(&self.state.deployment_record(name)).ok()?;
        Some(Self::deployment_of(record))
    }

    fn deployment_of(record: Record) -> Deployment {
        let mut d = record.deployment;
        if d.running() && !record.process.alive() {
            // It ended while nobody watched: the exit code went to whoever reaped it.
            d.state = RunState::Exited { exit: None };
        }
        d
    }

    fn process_of(&self, deployment: &Deployment) -> Result<ProcessId> {
        let record = self.read_record(&self.state.deployment_record(&deployment.name))?;
        Ok(record.process)
    }
}

/// The parts of a process launch, once its host variables are known to be set.
struct ProcessLaunch<'a> {
    program: &'a str,
    args: &'a [String],
    env: &'a std::collections::BTreeMap<String, String>,
    env_from_host: &'a [String],
}

/// The front door's own key, which its environment holds and no engine needs: a server
/// started by the door (or by a command that has the key set) does not inherit it, unless
/// its recipe names it.
const DOOR_KEY_VARS: [&str; 2] = [
    "SPARKCTL_FRONTDOOR_API_KEY",
    "SPARKCTL_FRONTDOOR_API_KEY_FILE",
];

fn launch_parts(resolved: &Resolved) -> Result<ProcessLaunch<'_>> {
    let Launch::Process {
        program,
        args,
        env,
        env_from_host,
    } = &resolved.launch
    else {
        return Err(Error::RecipeCannot {
            recipe: resolved.name.clone(),
            why: crate::error::RecipeProblem::NotProcess,
        });
    };
    // Host variables are inherited anyway; checked so a missing secret fails here, not
    // halfway through the server's start.
    if let Some(name) = env_from_host
        .iter()
        .find(|name| !crate::settings::host_var_is_set(name))
    {
        return Err(missing_host_var(&resolved.name, name));
    }
    Ok(ProcessLaunch {
        program,
        args,
        env,
        env_from_host,
    })
}

pub(crate) fn missing_host_var(recipe: &str, name: &str) -> Error {
    Error::HostVarUnset {
        recipe: recipe.to_string(),
        key: "server.env_from_host",
        name: name.to_string(),
    }
}

impl Supervisor for ProcessRuntime {
    async fn preflight(&self, resolved: &Resolved) -> Result<String> {
        let program = launch_parts(resolved)?.program;
        let path = PathBuf::from(program);
        if !host::is_executable(&path) {
            return Err(Error::RecipeCannot {
                recipe: resolved.name.clone(),
                why: crate::error::RecipeProblem::Binary {
                    exists: path.exists(),
                    path,
                },
            });
        }
        Ok(program.to_string())
    }

    async fn start(&self, spec: &StartSpec, artifact: &str) -> Result<Started> {
        let resolved = &spec.resolved;
        let ProcessLaunch {
            args,
            env,
            env_from_host,
            ..
        } = launch_parts(resolved)?;
        let log_path = self.state.log_file(&resolved.name, &spec.run_id)?;
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| Error::io(format!("cannot open {}", log_path.display()), e))?;
        let log_err = log
            .try_clone()
            .map_err(|e| Error::io("cannot share the log file", e))?;

        let mut cmd = tokio::process::Command::new(artifact);
        for name in DOOR_KEY_VARS {
            if !env_from_host.iter().any(|n| n == name) {
                cmd.env_remove(name);
            }
        }
        cmd.args(args)
            .envs(env)
            .stdin(std::process::Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .kill_on_drop(false);
        // Its own session: a Ctrl-C at sparkctl's terminal does not reach the server, and
        // stopping it signals its whole process group (servers that fork workers).
        // SAFETY: new_session only calls setsid, which is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                crate::host::new_session()?;
                close_inherited();
                Ok(())
            });
        }
        let held = self.state.hold_deployment_records()?;
        if let Some(d) = self.find(&resolved.name).filter(Deployment::running) {
            return Err(Error::AlreadyRunning(crate::error::Running::Process {
                name: resolved.name.clone(),
                id: d.id.clone(),
            }));
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| Error::io(format!("cannot start {artifact}"), e))?;
        let pid = child.id().expect("a just-spawned child has a pid");
        let process = ProcessId::of(pid).ok_or_else(|| {
            Error::Stopped(crate::error::Gone::Ended {
                artifact: artifact.to_string(),
                pid,
            })
        })?;
        let deployment = Deployment {
            log_file: Some(log_path.clone()),
            ..Deployment::started(spec, Runtime::Process, pid.to_string(), artifact)
        };
        let record = Record {
            deployment: deployment.clone(),
            process,
            program: artifact.to_string(),
            args: args.to_vec(),
        };
        if let Err(e) = self.write_record(&self.state.deployment_record(&resolved.name), &record) {
            // Unrecorded, it could never be stopped by name: do not leave it running.
            let _ = child.start_kill();
            return Err(e);
        }
        drop(held);

        let (tx, rx) = mpsc::channel(256);
        let lines = tx.clone();
        tokio::spawn(async move {
            let _ = follow_file(&log_path, 0, &lines, || true).await;
        });
        tokio::spawn(async move {
            if let Ok(status) = child.wait().await {
                use std::os::unix::process::ExitStatusExt;
                let exit = Exit {
                    code: status.code().map(i64::from),
                    signal: status.signal(),
                    oom_killed: false,
                };
                let _ = tx.send(Event::Exited(exit)).await;
            }
        });
        Ok(Started {
            deployment,
            events: rx,
            completion_timeout: resolved.completion_timeout.0,
        })
    }

    async fn list(&self) -> Result<Vec<Deployment>> {
        Ok(self.list_records()?.0)
    }

    async fn stop(&self, deployment: &Deployment, grace: Duration) -> Result<()> {
        let process = self.process_of(deployment)?;
        if process.alive() {
            signal_group(process.pid, libc::SIGTERM);
            if !wait_gone(process, grace).await {
                signal_group(process.pid, libc::SIGKILL);
                if !wait_gone(process, Duration::from_secs(5)).await {
                    return Err(Error::NotEnded(crate::error::Stuck::Server {
                        name: deployment.name.clone(),
                        pid: process.pid,
                    }));
                }
            }
        }
        // The record stays, marked ended, so `status` and `logs` still find this run.
        let path = self.state.deployment_record(&deployment.name);
        let mut record = self.read_record(&path)?;
        record.deployment.state = RunState::Exited { exit: None };
        self.write_record(&path, &record)
    }

    async fn logs(&self, deployment: &Deployment, view: LogView, out: &mut LogSink) -> Result<()> {
        let path = deployment
            .log_file
            .clone()
            .or_else(|| self.state.latest_log(&deployment.name))
            .ok_or_else(|| Error::NeverRan {
                name: deployment.name.clone(),
                state_dir: self.state.root().to_path_buf(),
            })?;
        let text = std::fs::read(&path)
            .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
        let text = String::from_utf8_lossy(&text);
        write_out(out, super::last_lines(&text, view.tail))?;
        if view.follow && deployment.running() {
            let process = self.process_of(deployment)?;
            let (tx, mut rx) = mpsc::channel(256);
            let from = text.len() as u64;
            let follower =
                tokio::spawn(
                    async move { follow_file(&path, from, &tx, || process.alive()).await },
                );
            while let Some(Event::Line(line)) = rx.recv().await {
                write_out(out, &format!("{line}\n"))?;
            }
            let _ = follower.await;
        }
        Ok(())
    }
}

fn write_out(out: &mut (dyn std::io::Write + Send), text: &str) -> Result<()> {
    out.write_all(text.as_bytes())
        .and_then(|_| out.flush())
        .map_err(|e| Error::io("cannot write the logs", e))
}

/// Sends new lines of `path` from byte `from` on, until the receiver goes away or
/// `still_writing` says nobody will append any more (then the rest is drained).
async fn follow_file(
    path: &Path,
    from: u64,
    tx: &mpsc::Sender<Event>,
    still_writing: impl Fn() -> bool,
) -> std::io::Result<()> {
    let mut file = std::fs::File::open(path)?;
    file.seek(SeekFrom::Start(from))?;
    let mut lines = LineBuffer::default();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let writing = still_writing();
        let n = file.read(&mut chunk)?;
        for line in lines.push(&chunk[..n]) {
            if tx.send(Event::Line(line)).await.is_err() {
                return Ok(());
            }
        }
        if n == 0 {
            if !writing || tx.is_closed() {
                return Ok(());
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// In a child between fork and exec: every descriptor above stderr is marked
/// close-on-exec, so a server never keeps one of its starter's sockets (the front door's
/// production port, the control socket) or files open — whatever flag they were left with.
fn close_inherited() {
    // SAFETY: close_range is async-signal-safe; CLOEXEC only marks the child's descriptors
    // (std's own exec-error pipe is close-on-exec already). On a kernel without it, the
    // descriptors' own flags apply.
    unsafe {
        libc::close_range(
            3,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC as libc::c_int,
        );
    }
}

fn signal_group(pid: u32, signal: i32) {
    // The server leads its own session, so its process group id is its pid.
    unsafe {
        libc::kill(-(pid as i32), signal);
    }
}

async fn wait_gone(process: ProcessId, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while process.alive() {
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(POLL).await;
    }
    true
}
