//! Starting a group, in the order the distributed engine needs: the image on every node,
//! Ray's head, the workers, Ray reporting every node and GPU, then the API server on the
//! head. Any part failing stops every part on every node, and the error shows each
//! node's last output.

use std::time::Duration;

use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::Docker;

use crate::runtime::docker::engine_error;
use futures_util::StreamExt;
use serde::Serialize;
use tokio::sync::mpsc;

use super::create::{create_and_start, member_body, ray_session_dir};
use super::plan::GroupPlan;
use super::ray::{parse_status, Cluster};
use crate::error::{Error, Interruption, Result, Undoing};
use crate::recipe::nodes::Nodes;
use crate::runtime::group::{self, Role};
use crate::runtime::remote::{connect_all, Connected};
use crate::runtime::{Deployment, Event, Exit, StartSpec, Started};
use crate::state::StateDir;

/// How long Ray may take to report every node when the recipe does not say.
const DEFAULT_JOIN_TIMEOUT: Duration = Duration::from_secs(180);

/// How the line that says a member ended starts, in the API server's output stream.
const MEMBER_ENDED: &str = "sparkctl group: ";

/// Everything a group start needs, decided and checked in the plan.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct GroupStart {
    pub(crate) plan: GroupPlan,
    pub(crate) nodes: Nodes,
    /// The image on each node: already there, or to be copied from the head.
    pub(crate) images: Vec<(String, bool)>,
    #[serde(skip)]
    conns: Vec<Connected>,
    /// Old runs kept on each node (`SPARKCTL_KEEP_EXITED`).
    #[serde(skip)]
    keep_exited: usize,
}

impl GroupStart {
    fn conn(&self, node: &str) -> &Connected {
        self.conns
            .iter()
            .find(|c| c.node.name == node)
            .expect("every member's node is connected in the plan")
    }

    fn join_timeout(&self) -> Duration {
        self.nodes
            .join_timeout
            .map_or(DEFAULT_JOIN_TIMEOUT, |d| d.0)
    }
}

/// Starts the group; the `Started` is the API server's, its events joined by every other
/// member's end (a worker exiting ends the group's readiness wait as the server's would).
pub(crate) async fn start(
    g: &GroupStart,
    spec: &StartSpec,
    artifact: &str,
    state: &StateDir,
    host_env: Vec<String>,
) -> Result<Started> {
    let state_id = state.id();
    let starting = Starting {
        g,
        spec,
        artifact,
        state,
    };
    let outcome = tokio::select! {
        r = starting.parts(host_env) => r,
        _ = tokio::signal::ctrl_c() => Err(Error::Interrupted(Interruption::Signal)),
    };
    match outcome {
        Ok(started) => Ok(started),
        Err(e) => {
            let stopped = group::stop_run(&g.conns, Some(state), &state_id, &spec.run_id).await;
            if stopped.is_empty() {
                return Err(e);
            }
            Err(match e {
                Error::Interrupted(cause) => Error::Interrupted(Interruption::GroupStopped {
                    cause: Box::new(cause),
                    stopped: group::summary(&stopped),
                }),
                _ => Error::Undone {
                    what: Undoing::NodeStart {
                        name: spec.resolved.name.clone(),
                        stopped: group::summary(&stopped),
                    },
                    cause: Box::new(e),
                },
            })
        }
    }
}

/// One start of a group: its plan, what runs, and the state dir of the run.
struct Starting<'a> {
    g: &'a GroupStart,
    spec: &'a StartSpec,
    artifact: &'a str,
    state: &'a StateDir,
}

impl Starting<'_> {
    async fn parts(&self, host_env: Vec<String>) -> Result<Started> {
        let Starting {
            g,
            spec,
            artifact,
            state,
        } = *self;
        let head = &g.conns[0];
        // `plan_start` refused a running server, so anything of this recipe still running is
        // an orphan of a group whose server ended: it would hold the Ray port.
        for note in group::stop_leftovers(&g.conns, &state.id(), &spec.resolved.name).await {
            tracing::warn!("stopped {note}");
        }
        group::prune_old_runs(&g.conns, &state.id(), &spec.resolved.name, g.keep_exited).await;
        for c in &g.conns[1..] {
            if super::image::ensure(head, c, artifact).await? == super::image::Presence::Copied {
                tracing::info!("copied image {artifact} to node {}", c.node.name);
            }
        }
        self.same_model().await?;
        let ray_dir = ray_session_dir(state, &spec.run_id);
        std::fs::create_dir_all(&ray_dir)
            .map_err(|e| Error::io(format!("cannot create {}", ray_dir.display()), e))?;
        // Binds need an absolute path, whatever the state dir was given as.
        let ray_dir = std::fs::canonicalize(&ray_dir)
            .map_err(|e| Error::io(format!("cannot read {}", ray_dir.display()), e))?
            .display()
            .to_string();
        let state_id = state.id();
        let mut ids = Vec::new();
        let mut api = None;
        for m in &g.plan.members {
            if m.role == Role::Api {
                wait_joined(g, &ids).await?;
            }
            let conn = g.conn(&m.node);
            let shares_ray = m.node == head.node.name;
            let body = member_body(
                spec,
                artifact,
                &state_id,
                host_env.clone(),
                m,
                &g.nodes,
                shares_ray.then_some(ray_dir.as_str()),
            );
            let id = create_and_start(conn, spec, m, body).await?;
            if m.role == Role::Api {
                api = Some(id);
            } else {
                ids.push((conn.clone(), m.role, id));
            }
        }
        let api = api.expect("the plan ends with the API server");
        Ok(watch(head, &api, &ids, spec, artifact))
    }

    /// Every other node's copy of the model is the head's, file by file.
    async fn same_model(&self) -> Result<()> {
        let Starting {
            g,
            spec,
            artifact,
            state,
        } = *self;
        let crate::recipe::Launch::Docker(c) = &spec.resolved.launch else {
            return Ok(());
        };
        let Some(model) = c
            .mounts
            .first()
            .filter(|_| spec.model_fingerprint.is_some())
        else {
            return Ok(());
        };
        let path = std::path::Path::new(&model.host);
        let head = crate::patch::file_hashes_in_background(path, state).await?;
        let state_id = state.id();
        let check = super::model::ModelCheck {
            engine: spec.resolved.engine,
            image: artifact,
            host_path: &model.host,
            mount: &model.container,
            single_file: path.is_file(),
            state_id: &state_id,
            run_id: &spec.run_id,
        };
        for c in &g.conns[1..] {
            super::model::ensure_same(c, &check, &head).await?;
        }
        Ok(())
    }
}

/// Runs a command in a container through the Engine API (argv, no shell); its output.
async fn exec_output(docker: &Docker, container: &str, argv: &[String]) -> Result<String> {
    let exec = docker
        .create_exec(
            container,
            CreateExecOptions {
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                cmd: Some(argv.to_vec()),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| engine_error("asking Ray for its nodes", e))?;
    let started = docker
        .start_exec(&exec.id, None)
        .await
        .map_err(|e| engine_error("asking Ray for its nodes", e))?;
    let mut text = Vec::new();
    if let StartExecResults::Attached { mut output, .. } = started {
        while let Some(Ok(chunk)) = output.next().await {
            text.extend_from_slice(&chunk.into_bytes());
        }
    }
    Ok(String::from_utf8_lossy(&text).into_owned())
}

/// How a member ended, if it has.
async fn ended(docker: &Docker, id: &str) -> Option<Exit> {
    let info = docker.inspect_container(id, None).await.ok()?;
    let s = info.state?;
    if s.running == Some(true) {
        return None;
    }
    Some(Exit {
        code: s.exit_code,
        signal: None,
        oom_killed: s.oom_killed.unwrap_or(false),
    })
}

/// Until Ray reports every node and GPU. A member ending, or the join timeout, fails.
async fn wait_joined(g: &GroupStart, started: &[(Connected, Role, String)]) -> Result<()> {
    let (head_conn, _, head_id) = started
        .iter()
        .find(|(_, r, _)| *r == Role::RayHead)
        .expect("the Ray head starts first");
    let want = Cluster {
        nodes: g.plan.nodes,
        gpus: g.plan.gpus,
    };
    let deadline = tokio::time::Instant::now() + g.join_timeout();
    let mut seen = Cluster::default();
    loop {
        for (conn, role, id) in started {
            if let Some(exit) = ended(&conn.docker, id).await {
                return Err(Error::OnNode {
                    node: conn.node.name.clone(),
                    what: crate::error::NodeProblem::Ended {
                        role: role.as_str(),
                        exit: exit.to_string(),
                    },
                });
            }
        }
        let text = exec_output(&head_conn.docker, head_id, &g.plan.status_command).await?;
        if let Some(now) = parse_status(&text) {
            seen = now;
            if now.nodes >= want.nodes && now.gpus >= want.gpus {
                return Ok(());
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::OnNode {
                node: head_conn.node.name.clone(),
                what: crate::error::NodeProblem::RayShort {
                    nodes: (seen.nodes, want.nodes),
                    gpus: (seen.gpus, want.gpus),
                    after: g.join_timeout(),
                    port: g.nodes.ray_port,
                },
            });
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The API server as a `Started`: its lines and end, and every other member's end.
fn watch(
    head: &Connected,
    api: &str,
    others: &[(Connected, Role, String)],
    spec: &StartSpec,
    artifact: &str,
) -> Started {
    let (tx, rx) = mpsc::channel(256);
    crate::runtime::docker::forward_log_lines(head.docker.clone(), api.to_string(), tx.clone());
    let mut ends = vec![(head.clone(), "api".to_string(), api.to_string())];
    ends.extend(
        others
            .iter()
            .map(|(c, r, id)| (c.clone(), r.as_str().to_string(), id.clone())),
    );
    for (conn, role, id) in ends {
        let tx = tx.clone();
        tokio::spawn(async move {
            let _ = conn.docker.wait_container(&id, None).next().await;
            let exit = ended(&conn.docker, &id).await.unwrap_or(Exit {
                code: None,
                signal: None,
                oom_killed: false,
            });
            if role != "api" {
                let line = format!("{MEMBER_ENDED}node {}'s {role} {exit}", conn.node.name);
                let _ = tx.send(Event::Line(line)).await;
            }
            let _ = tx.send(Event::Exited(exit)).await;
        });
    }
    let resolved = &spec.resolved;
    Started {
        deployment: Deployment {
            image_ref: spec.image_ref.clone(),
            ..Deployment::started(
                spec,
                crate::recipe::Runtime::Docker,
                api.to_string(),
                artifact,
            )
        },
        events: rx,
        completion_timeout: resolved.completion_timeout.0,
    }
}

/// Checks a multi-node recipe's group before anything starts: every engine answers, the
/// image is on every node or can be copied from the head, each node's memory holds the
/// recipe's share. Changes nothing.
pub(crate) async fn prepare(
    recipe: &crate::recipe::Recipe,
    artifact: &str,
    settings: &crate::settings::Settings,
) -> Result<GroupStart> {
    let fallback_budget_gb = settings.memory_budget_gb;
    let plan = GroupPlan::new(recipe)?;
    let nodes = recipe.nodes.clone().expect("GroupPlan::new checked nodes");
    let conns = connect_all(&nodes).await?;
    let mut images = Vec::new();
    for c in &conns {
        let there = c
            .docker
            .inspect_image(artifact)
            .await
            .ok()
            .and_then(|i| i.id)
            .is_some_and(|id| id == artifact);
        images.push((c.node.name.clone(), there));
    }
    if let Some(need) = recipe.server.memory_gb {
        for c in &conns {
            memory_fits(
                recipe,
                c,
                need,
                fallback_budget_gb,
                c.node.name != conns[0].node.name,
            )
            .await?;
        }
    }
    Ok(GroupStart {
        plan,
        nodes,
        images,
        conns,
        keep_exited: settings.keep_exited,
    })
}

/// The memory plan of one node: the recipe's share fits its budget, beside what sparkctl
/// already runs there (on the head, the one-node memory plan counts that).
async fn memory_fits(
    recipe: &crate::recipe::Recipe,
    c: &Connected,
    need: f64,
    fallback_budget_gb: f64,
    count_running: bool,
) -> Result<()> {
    let budget = c.node.memory_gb.unwrap_or(fallback_budget_gb);
    let held = if count_running {
        held_on(&c.docker, &recipe.name).await
    } else {
        Vec::new()
    };
    let used: f64 = held.iter().map(|(_, gb)| gb).sum();
    if need + used <= budget {
        return Ok(());
    }
    let holders: Vec<String> = held.iter().map(|(n, gb)| format!("{n} {gb} GB")).collect();
    Err(Error::Failed(format!(
        "{}: node {} cannot hold its share ({need} GB, server.memory_gb) in its {budget} GB \
         (nodes.members.memory_gb){}; stop what runs there, lower --gpu-memory-utilization and \
         memory_gb, or raise the node's budget; nothing was started",
        recipe.name,
        c.node.name,
        if holders.is_empty() {
            String::new()
        } else {
            format!(" beside {}", holders.join(", "))
        }
    )))
}

/// Running sparkctl containers on a node that declared their memory: (name, GB). This
/// recipe's own are left out: orphans of it are stopped before it starts.
async fn held_on(docker: &Docker, recipe: &str) -> Vec<(String, f64)> {
    use crate::runtime::docker::label;
    let filters = std::collections::HashMap::from([(
        "label",
        vec![
            format!("{}=true", label::MANAGED),
            label::MEMORY_GB.to_string(),
        ],
    )]);
    let opts = bollard::query_parameters::ListContainersOptionsBuilder::new()
        .filters(&filters)
        .build();
    let list = docker.list_containers(Some(opts)).await.unwrap_or_default();
    list.into_iter()
        .filter_map(|c| {
            let labels = c.labels.as_ref()?;
            if labels.get(group::label::GROUP).map(String::as_str) == Some(recipe) {
                return None;
            }
            let gb = labels.get(label::MEMORY_GB)?.parse().ok()?;
            let name = c.names?.first()?.trim_start_matches('/').to_string();
            Some((name, gb))
        })
        .collect()
}

/// Why a started group failed, after it was stopped: the member that ended first when it
/// was not the API server (its line, which `watch` put in the server's output), else the
/// server's own fault; then every member's last lines.
pub(crate) async fn explain_fault(
    g: &GroupStart,
    fault: &crate::runtime::ready::Fault,
    name: &str,
    state_id: &str,
    run_id: &str,
) -> String {
    let member_line = match fault {
        crate::runtime::ready::Fault::Exited { last_lines, .. } => last_lines
            .iter()
            .rev()
            .find_map(|l| l.strip_prefix(MEMBER_ENDED).map(str::to_string)),
        _ => None,
    };
    let headline = match member_line {
        Some(line) => format!("{name}: {line} while the group was starting"),
        None => fault.explain(name),
    };
    let mut stopped = Vec::new();
    for p in group::placed(&g.conns, state_id, run_id).await {
        let lines = group::tail(&p, Some(8)).await;
        stopped.push((p, lines));
    }
    format!(
        "{headline}\n  the group was stopped on every node{}",
        group::summary(&stopped)
    )
}
