//! The docker runtime, through the Engine API (bollard): never the docker CLI, never a
//! shell. Containers carry labels that say they are sparkctl's, from which state dir,
//! for which recipe and run; they are never auto-removed, so their logs outlive them.

use std::collections::HashMap;
use std::time::Duration;

use bollard::models::{
    ContainerCreateBody, ContainerSummaryStateEnum, DeviceRequest, HostConfig, PortBinding,
    ResourcesUlimits, RestartPolicy, RestartPolicyNameEnum,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, ListContainersOptionsBuilder, LogsOptions, LogsOptionsBuilder,
    RemoveContainerOptionsBuilder, StopContainerOptionsBuilder,
};
use bollard::Docker;
use futures_util::StreamExt;
use tokio::sync::mpsc;

use super::{
    Deployment, Event, Exit, LineBuffer, LogSink, LogView, RunState, StartSpec, Started, Supervisor,
};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::recipe::{ContainerLaunch, Launch, Resolved, Resources, Runtime};
use crate::state::StateDir;

/// Label keys on every container sparkctl creates.
pub(crate) mod label {
    /// `true`: sparkctl made it. Nothing without it is ever stopped or removed.
    pub(crate) const MANAGED: &str = "io.sparkctl.managed";
    /// The state dir that owns it (two state dirs never touch each other's containers).
    pub(crate) const STATE: &str = "io.sparkctl.state";
    pub(crate) const RECIPE: &str = "io.sparkctl.recipe";
    pub(crate) const RECIPE_HASH: &str = "io.sparkctl.recipe-hash";
    pub(crate) const RUN_ID: &str = "io.sparkctl.run-id";
    pub(crate) const ENGINE: &str = "io.sparkctl.engine";
    pub(crate) const IMAGE_REF: &str = "io.sparkctl.image";
    pub(crate) const HOST: &str = "io.sparkctl.host";
    pub(crate) const PORT: &str = "io.sparkctl.port";
    pub(crate) const HEALTH: &str = "io.sparkctl.health";
    pub(crate) const MEMORY_GB: &str = "io.sparkctl.memory-gb";
    pub(crate) const MODEL_FINGERPRINT: &str = "io.sparkctl.model-fingerprint";
    /// `true` when the image ran without a pin in images.lock (`--allow-unpinned`).
    pub(crate) const UNPINNED: &str = "io.sparkctl.unpinned";
}

pub(crate) struct DockerRuntime {
    docker: Docker,
    state_id: String,
}

/// An engine call that failed, said with what sparkctl was doing: an engine that went
/// away mid-call is the same fact as one that never answered.
pub(crate) fn engine_error(context: &str, e: bollard::errors::Error) -> Error {
    use bollard::errors::Error as E;
    match e {
        E::IOError { .. }
        | E::HyperResponseError { .. }
        | E::RequestTimeoutError
        | E::HyperLegacyError { .. }
        | E::SocketNotFoundError(_) => Error::EngineUnreachable {
            cause: crate::error::Reach::Doing {
                doing: context.to_string(),
                said: e.to_string(),
            },
        },
        _ => Error::EngineCall {
            doing: context.to_string(),
            cause: e.to_string(),
        },
    }
}

/// Connects to the local engine (DOCKER_HOST or the default socket) and agrees on an API version.
pub(crate) async fn connect() -> Result<Docker> {
    let unreachable = |e: bollard::errors::Error| Error::EngineUnreachable {
        cause: crate::error::Reach::Said(e.to_string()),
    };
    Docker::connect_with_local_defaults()
        .map_err(unreachable)?
        .negotiate_version()
        .await
        .map_err(unreachable)
}

pub(crate) fn is_not_found(e: &bollard::errors::Error) -> bool {
    matches!(
        e,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

impl DockerRuntime {
    pub(crate) async fn connect(state: &StateDir) -> Result<Self> {
        Ok(DockerRuntime {
            docker: connect().await?,
            state_id: state.id(),
        })
    }

    pub(crate) fn client(&self) -> &Docker {
        &self.docker
    }

    /// The state dir's id its containers are labelled with.
    pub(crate) fn state_id(&self) -> &str {
        &self.state_id
    }

    /// Whether the engine has the NVIDIA runtime that `--gpus` needs.
    pub(crate) async fn has_nvidia_runtime(&self) -> Result<bool> {
        let info = self
            .docker
            .info()
            .await
            .map_err(|e| engine_error("docker info", e))?;
        Ok(info.runtimes.unwrap_or_default().contains_key("nvidia"))
    }

    fn filters(&self, recipe: Option<&str>) -> HashMap<&'static str, Vec<String>> {
        let mut labels = vec![
            format!("{}=true", label::MANAGED),
            format!("{}={}", label::STATE, self.state_id),
        ];
        if let Some(name) = recipe {
            labels.push(format!("{}={name}", label::RECIPE));
        }
        HashMap::from([("label", labels)])
    }

    /// This state dir's container `id`, if the engine still has it: one container asked
    /// for, not the whole list (the watch asks every few seconds).
    pub(crate) async fn by_id(&self, id: &str) -> Result<Option<Deployment>> {
        let mut filters = self.filters(None);
        filters.insert("id", vec![id.to_string()]);
        Ok(self
            .listed(&filters)
            .await?
            .into_iter()
            .find(|d| d.id == id))
    }

    /// This state dir's containers the `filters` select, as deployments (exit details
    /// not asked: they cost an inspect each).
    async fn listed(
        &self,
        filters: &HashMap<&'static str, Vec<String>>,
    ) -> Result<Vec<Deployment>> {
        let opts = ListContainersOptionsBuilder::new()
            .all(true)
            .filters(filters)
            .build();
        let list = self
            .docker
            .list_containers(Some(opts))
            .await
            .map_err(|e| engine_error("listing containers", e))?;
        Ok(list.iter().filter_map(deployment_of).collect())
    }

    /// A running container publishing `port` on the host, as (name, sparkctl recipe if ours).
    pub(crate) async fn publisher_of(&self, port: u16) -> Result<Option<(String, Option<String>)>> {
        let opts = ListContainersOptionsBuilder::new().build();
        let list = self
            .docker
            .list_containers(Some(opts))
            .await
            .map_err(|e| engine_error("listing containers", e))?;
        Ok(list.into_iter().find_map(|c| {
            let publishes = c
                .ports
                .as_ref()?
                .iter()
                .any(|p| p.public_port == Some(port));
            if !publishes {
                return None;
            }
            let name = c.names?.first()?.trim_start_matches('/').to_string();
            let labels = c.labels.unwrap_or_default();
            let ours = labels.get(label::STATE) == Some(&self.state_id);
            Some((
                name,
                ours.then(|| labels.get(label::RECIPE).cloned()).flatten(),
            ))
        }))
    }
}

impl DockerRuntime {
    /// Fills in how an exited container ended (exit code, OOMKilled).
    pub(crate) async fn exit_details(&self, d: &mut Deployment) {
        if let RunState::Exited { exit: exit @ None } = &mut d.state {
            *exit = exit_of(&self.docker, &d.id).await.ok();
        }
    }
}

/// How a container ended, as the engine recorded it.
async fn exit_of(docker: &Docker, id: &str) -> Result<Exit> {
    let info = docker
        .inspect_container(id, None)
        .await
        .map_err(|e| engine_error("inspecting the container", e))?;
    let state = info.state.unwrap_or_default();
    Ok(Exit {
        code: state.exit_code,
        signal: None,
        oom_killed: state.oom_killed.unwrap_or(false),
    })
}

/// `NAME=value` for each `env_from_host` name, read from sparkctl's environment now.
pub(crate) fn host_env(resolved: &Resolved) -> Result<Vec<String>> {
    let Launch::Docker(c) = &resolved.launch else {
        return Err(not_docker(resolved));
    };
    c.env_from_host
        .iter()
        .map(|name| {
            crate::settings::host_var(name)
                .map(|value| format!("{name}={value}"))
                .ok_or_else(|| super::process::missing_host_var(&resolved.name, name))
        })
        .collect()
}

fn not_docker(resolved: &Resolved) -> Error {
    Error::RecipeCannot {
        recipe: resolved.name.clone(),
        why: crate::error::RecipeProblem::NotDocker,
    }
}

/// The container a recipe becomes; `host_env` holds the values of its `env_from_host`
/// names. Public so tests can create it on engines without a GPU and read back what the
/// engine stored.
pub fn container_spec(
    spec: &StartSpec,
    image_id: &str,
    state_id: &str,
    host_env: Vec<String>,
) -> ContainerCreateBody {
    let Launch::Docker(c) = &spec.resolved.launch else {
        unreachable!("container_spec is only called for docker recipes")
    };
    let env: Vec<String> = c
        .env
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .chain(host_env)
        .collect();
    let port_key = format!("{}/tcp", c.container_port);
    let host_config = HostConfig {
        binds: Some(
            c.mounts
                .iter()
                .map(|m| {
                    let mode = if m.read_only { ":ro" } else { "" };
                    format!("{}:{}{mode}", m.host, m.container)
                })
                .collect(),
        ),
        port_bindings: Some(HashMap::from([(
            port_key.clone(),
            Some(vec![PortBinding {
                host_ip: Some(c.host_ip.clone()),
                host_port: Some(c.host_port.to_string()),
            }]),
        )])),
        // A crashed server stays down and keeps its logs; sparkctl decides what runs.
        restart_policy: Some(RestartPolicy {
            name: Some(RestartPolicyNameEnum::NO),
            maximum_retry_count: None,
        }),
        auto_remove: Some(false),
        ..resource_config(&c.resources)
    };
    ContainerCreateBody {
        image: Some(image_id.to_string()),
        entrypoint: (!c.entrypoint.is_empty()).then(|| c.entrypoint.clone()),
        cmd: Some(c.cmd.clone()),
        env: Some(env),
        user: c.user.clone(),
        labels: Some(server_labels(spec, c, state_id)),
        exposed_ports: Some(vec![port_key]),
        host_config: Some(host_config),
        ..Default::default()
    }
}

/// What `list` reads a deployment back from, so it needs no record beside the engine's.
fn server_labels(spec: &StartSpec, c: &ContainerLaunch, state_id: &str) -> HashMap<String, String> {
    let resolved = &spec.resolved;
    let mut labels = HashMap::from([
        (label::MANAGED, "true".to_string()),
        (label::STATE, state_id.to_string()),
        (label::RECIPE, resolved.name.clone()),
        (label::RECIPE_HASH, spec.recipe_hash.clone()),
        (label::RUN_ID, spec.run_id.clone()),
        (label::ENGINE, resolved.engine.to_string()),
        (
            label::IMAGE_REF,
            spec.image_ref.clone().unwrap_or_else(|| c.image.clone()),
        ),
        (label::HOST, c.host_ip.clone()),
        (label::PORT, c.host_port.to_string()),
        (label::HEALTH, resolved.health_path.clone()),
    ]);
    if let Some(gb) = resolved.memory_gb {
        labels.insert(label::MEMORY_GB, gb.to_string());
    }
    if spec.unpinned {
        labels.insert(label::UNPINNED, "true".into());
    }
    if let Some(fp) = &spec.model_fingerprint {
        labels.insert(label::MODEL_FINGERPRINT, fp.clone());
    }
    labels
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
}

/// A container's GPUs, IPC, shared memory and ulimits as the Engine API takes them; the
/// rest of the host config is the caller's.
pub(crate) fn resource_config(r: &Resources) -> HostConfig {
    let device_requests = r.gpus.as_ref().map(|g| {
        vec![DeviceRequest {
            driver: Some("nvidia".into()),
            // -1 is the engine's "all", as `--gpus all` sends it.
            count: Some(g.parse().unwrap_or(-1)),
            capabilities: Some(vec![vec!["gpu".into()]]),
            ..Default::default()
        }]
    });
    HostConfig {
        device_requests,
        ipc_mode: r.ipc.clone(),
        shm_size: r.shm_size.map(|b| b.0 as i64),
        ulimits: (!r.ulimits.is_empty()).then(|| {
            r.ulimits
                .iter()
                .map(|(name, v)| ResourcesUlimits {
                    name: Some(name.clone()),
                    soft: Some(*v),
                    hard: Some(*v),
                })
                .collect()
        }),
        ..Default::default()
    }
}

fn deployment_of(c: &bollard::models::ContainerSummary) -> Option<Deployment> {
    let labels = c.labels.as_ref()?;
    let get = |k: &str| labels.get(k).cloned();
    let engine: Engine = serde_json::from_value(serde_json::Value::String(get(label::ENGINE)?))
        .unwrap_or(Engine::Openai);
    let running = matches!(
        c.state,
        Some(ContainerSummaryStateEnum::RUNNING | ContainerSummaryStateEnum::RESTARTING)
    );
    Some(Deployment {
        name: get(label::RECIPE)?,
        runtime: Runtime::Docker,
        engine,
        id: c.id.clone()?,
        run_id: get(label::RUN_ID).unwrap_or_default(),
        recipe_hash: get(label::RECIPE_HASH).unwrap_or_default(),
        model_fingerprint: get(label::MODEL_FINGERPRINT),
        artifact: c.image_id.clone().unwrap_or_default(),
        image_ref: get(label::IMAGE_REF),
        host: get(label::HOST).unwrap_or_else(|| "127.0.0.1".into()),
        port: get(label::PORT)?.parse().ok()?,
        health_path: get(label::HEALTH).unwrap_or_else(|| "/health".into()),
        memory_gb: get(label::MEMORY_GB).and_then(|v| v.parse().ok()),
        started_at: c.created.unwrap_or(0).max(0) as u64,
        state: if running {
            RunState::Running
        } else if c.state == Some(ContainerSummaryStateEnum::CREATED) {
            // Never started: it has no exit code to report (not "exited with code 0").
            RunState::Created
        } else {
            RunState::Exited { exit: None }
        },
        log_file: None,
    })
}

impl Supervisor for DockerRuntime {
    async fn preflight(&self, resolved: &Resolved) -> Result<String> {
        let Launch::Docker(c) = &resolved.launch else {
            return Err(not_docker(resolved));
        };
        let image = &c.image;
        if let Some(g) = &c.resources.gpus {
            if !self.has_nvidia_runtime().await? {
                return Err(Error::NoNvidiaRuntime {
                    recipe: resolved.name.clone(),
                    gpus: Some(g.to_string()),
                });
            }
        }
        match self.docker.inspect_image(image).await {
            Ok(info) => info
                .id
                .ok_or_else(|| Error::Failed(format!("the engine gave image {image} no id"))),
            Err(e) if is_not_found(&e) => Err(Error::ImageMissing {
                image: image.clone(),
                needed: crate::error::ImageNeed::Start {
                    recipe: resolved.name.clone(),
                },
            }),
            Err(e) => Err(engine_error(&format!("inspecting image {image}"), e)),
        }
    }

    async fn start(&self, spec: &StartSpec, artifact: &str) -> Result<Started> {
        let resolved = &spec.resolved;
        let body = container_spec(spec, artifact, &self.state_id, host_env(resolved)?);
        let name = format!("sparkctl-{}-{}", resolved.name, spec.run_id);
        if let Launch::Docker(c) = &resolved.launch {
            tracing::debug!(
                spec = ?crate::secrets::redacted(&body, &c.env_from_host),
                "creating container {name}"
            );
        }
        let created = self
            .docker
            .create_container(
                Some(CreateContainerOptionsBuilder::new().name(&name).build()),
                body,
            )
            .await
            .map_err(|e| engine_error(&format!("creating container {name}"), e))?;
        let id = created.id;
        if let Err(e) = self.docker.start_container(&id, None).await {
            // Never started, so it has no logs worth keeping.
            let opts = RemoveContainerOptionsBuilder::new().force(true).build();
            let _ = self.docker.remove_container(&id, Some(opts)).await;
            return Err(engine_error(&format!("starting container {name}"), e));
        }

        let (tx, rx) = mpsc::channel(256);
        let lines = tx.clone();
        forward_log_lines(self.docker.clone(), id.clone(), lines);
        let (docker, wait_id) = (self.docker.clone(), id.clone());
        tokio::spawn(async move {
            // A non-zero exit arrives as an error item; either way the state says how it ended.
            let _ = docker.wait_container(&wait_id, None).next().await;
            let exit = exit_of(&docker, &wait_id).await.unwrap_or(Exit {
                code: None,
                signal: None,
                oom_killed: false,
            });
            let _ = tx.send(Event::Exited(exit)).await;
        });

        let Launch::Docker(c) = &resolved.launch else {
            unreachable!("checked by host_env")
        };
        Ok(Started {
            deployment: Deployment {
                image_ref: Some(spec.image_ref.clone().unwrap_or_else(|| c.image.clone())),
                ..Deployment::started(spec, Runtime::Docker, id, artifact)
            },
            events: rx,
            completion_timeout: resolved.completion_timeout.0,
        })
    }

    async fn list(&self) -> Result<Vec<Deployment>> {
        // Exit codes cost an inspect each; only the rows that are shown get them
        // (`exit_details`), however many old runs' containers are kept.
        let mut out = self.listed(&self.filters(None)).await?;
        out.sort_by(|a, b| {
            b.started_at
                .cmp(&a.started_at)
                .then(b.run_id.cmp(&a.run_id))
        });
        Ok(out)
    }

    async fn stop(&self, deployment: &Deployment, grace: Duration) -> Result<()> {
        let opts = StopContainerOptionsBuilder::new()
            .t(grace.as_secs().max(1) as i32)
            .build();
        match self.docker.stop_container(&deployment.id, Some(opts)).await {
            Ok(()) => Ok(()),
            // 304: already stopped.
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 304, ..
            }) => Ok(()),
            Err(e) => Err(engine_error(
                &format!(
                    "stopping {} ({})",
                    deployment.name,
                    crate::units::short_id(&deployment.id)
                ),
                e,
            )),
        }
    }

    async fn logs(&self, deployment: &Deployment, view: LogView, out: &mut LogSink) -> Result<()> {
        copy_logs(&self.docker, &deployment.id, view, out, |e| {
            engine_error("reading container logs", e)
        })
        .await
    }
}

/// The Engine API's request for `view` of a container's output (stdout and stderr both).
pub(crate) fn log_options(view: LogView) -> LogsOptions {
    LogsOptionsBuilder::new()
        .follow(view.follow)
        .stdout(true)
        .stderr(true)
        .tail(&view.tail.map_or("all".to_string(), |n| n.to_string()))
        .build()
}

/// Copies a container's output to `out` as the engine streams it, flushing each chunk
/// (`logs -f` shows lines as they come); `engine` words the engine's errors.
pub(crate) async fn copy_logs(
    docker: &Docker,
    id: &str,
    view: LogView,
    out: &mut LogSink,
    engine: impl Fn(bollard::errors::Error) -> Error,
) -> Result<()> {
    let mut stream = docker.logs(id, Some(log_options(view)));
    while let Some(chunk) = stream.next().await {
        out.write_all(&chunk.map_err(&engine)?.into_bytes())
            .and_then(|_| out.flush())
            .map_err(|e| Error::io("cannot write the logs", e))?;
    }
    Ok(())
}

/// Follows a container's output and sends each whole line until the receiver is gone.
pub(crate) fn forward_log_lines(docker: Docker, id: String, lines: mpsc::Sender<Event>) {
    tokio::spawn(async move {
        let view = LogView {
            tail: None,
            follow: true,
        };
        let mut stream = docker.logs(&id, Some(log_options(view)));
        let mut buf = LineBuffer::default();
        while let Some(Ok(chunk)) = stream.next().await {
            for line in buf.push(&chunk.into_bytes()) {
                if lines.send(Event::Line(line)).await.is_err() {
                    return;
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    /// An engine that went away mid-call is the engine not answering, as at connect.
    #[test]
    fn a_call_that_lost_the_engine_is_engine_unreachable() {
        let lost = engine_error(
            "listing containers",
            bollard::errors::Error::RequestTimeoutError,
        );
        assert_eq!(lost.kind(), ErrorKind::EngineUnreachable);
        let refused = engine_error(
            "creating container x",
            bollard::errors::Error::DockerResponseServerError {
                status_code: 409,
                message: "conflict".into(),
            },
        );
        assert_eq!(refused.kind(), ErrorKind::Failed);
        assert_eq!(
            refused.to_string(),
            "creating container x: Docker responded with status code 409: conflict"
        );
    }
}
