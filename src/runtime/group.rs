//! A group's containers across nodes (`node` creates them): found again by their labels
//! from any later command, and stopped as one — on every node — whichever part fails.
//! The API server carries the usual deployment labels, so `status`, `up`, the front door
//! and `rollback` see one deployment; the Ray containers carry the group's labels only.
//! Stopping lives here, beside the runtime, so no command can stop a group's API server
//! and leave its Ray head and workers holding memory on the other node.

use std::collections::HashMap;

use bollard::query_parameters::{
    ListContainersOptionsBuilder, RemoveContainerOptionsBuilder, StopContainerOptionsBuilder,
};
use bollard::Docker;
use serde::Serialize;

use super::docker::{copy_logs, engine_error, label as base};
use super::remote::{connect, reach, Connected};
use super::{Deployment, DockerRuntime, LogSink, LogView, Runtime, Runtimes};
use crate::error::{Error, Result};
use crate::recipe::nodes::Nodes;
use crate::recipe::Recipe;
use crate::state::StateDir;

/// Label keys of group containers (beside `io.sparkctl.managed`, `.state`, `.run-id`).
pub(crate) mod label {
    /// The recipe whose group it belongs to.
    pub(crate) const GROUP: &str = "io.sparkctl.group";
    pub(crate) const NODE: &str = "io.sparkctl.node";
    pub(crate) const ROLE: &str = "io.sparkctl.role";
    /// On the API server: the recipe's `nodes:` (JSON), so any later command can reach
    /// every node of the group without the recipe file.
    pub(crate) const NODES: &str = "io.sparkctl.nodes";
}

/// A container's part in the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Role {
    /// `ray start --head` on the head node.
    RayHead,
    /// `ray start --address HEAD:PORT` on every other node.
    RayWorker,
    /// The OpenAI-compatible server (`vllm serve`), on the head, once Ray has every node.
    Api,
}

impl Role {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Role::RayHead => "ray-head",
            Role::RayWorker => "ray-worker",
            Role::Api => "api",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<Role> {
        [Role::RayHead, Role::RayWorker, Role::Api]
            .into_iter()
            .find(|r| r.as_str() == text)
    }
}

/// One container of a running or ended group.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Placed {
    pub(crate) node: String,
    pub(crate) role: Role,
    id: String,
    pub(crate) running: bool,
    #[serde(skip)]
    docker: Option<Docker>,
}

fn run_filter(state_id: &str, run_id: &str) -> HashMap<&'static str, Vec<String>> {
    HashMap::from([(
        "label",
        vec![
            format!("{}=true", base::MANAGED),
            format!("{}={state_id}", base::STATE),
            format!("{}={run_id}", base::RUN_ID),
        ],
    )])
}

/// Every container of one run on the nodes that answer, with the nodes that do not.
pub(crate) async fn placed(conns: &[Connected], state_id: &str, run_id: &str) -> Vec<Placed> {
    let mut out = Vec::new();
    for c in conns {
        let opts = ListContainersOptionsBuilder::new()
            .all(true)
            .filters(&run_filter(state_id, run_id))
            .build();
        let Ok(list) = c.docker.list_containers(Some(opts)).await else {
            continue;
        };
        for s in list {
            let labels = s.labels.clone().unwrap_or_default();
            let (Some(role), Some(id)) = (
                labels.get(label::ROLE).and_then(|r| Role::parse(r)),
                s.id.clone(),
            ) else {
                continue;
            };
            out.push(Placed {
                node: labels.get(label::NODE).cloned().unwrap_or_default(),
                role,
                id,
                running: s.state == Some(bollard::models::ContainerSummaryStateEnum::RUNNING),
                docker: Some(c.docker.clone()),
            });
        }
    }
    // The API server first, then the workers, the head last: what depends stops first.
    out.sort_by_key(|p| match p.role {
        Role::Api => 0,
        Role::RayWorker => 1,
        Role::RayHead => 2,
    });
    out
}

/// The last `n` lines a member wrote.
pub(crate) async fn tail(p: &Placed, n: Option<usize>) -> Vec<String> {
    let Some(docker) = &p.docker else {
        return Vec::new();
    };
    let view = LogView {
        tail: n,
        follow: false,
    };
    let mut text = Vec::new();
    // What was read before an error is what there is.
    let _ = copy_logs(docker, &p.id, view, &mut text, |e| {
        engine_error("reading logs", e)
    })
    .await;
    String::from_utf8_lossy(&text)
        .lines()
        .map(str::to_string)
        .collect()
}

/// Stops every container of the run on every node that answers, keeps each one's full
/// output under the run (`runs/RUN/nodes/NODE-ROLE.log`), and returns every member's last
/// lines for the summary.
pub(crate) async fn stop_run(
    conns: &[Connected],
    state: Option<&StateDir>,
    state_id: &str,
    run_id: &str,
) -> Vec<(Placed, Vec<String>)> {
    let members = placed(conns, state_id, run_id).await;
    let opts = StopContainerOptionsBuilder::new().t(10).build();
    for p in &members {
        if let (true, Some(docker)) = (p.running, &p.docker) {
            let _ = docker.stop_container(&p.id, Some(opts.clone())).await;
        }
    }
    let mut out = Vec::new();
    for p in members {
        let lines = match state {
            // One read of the whole output: kept, and its end summarised.
            Some(state) => {
                let all = tail(&p, None).await;
                keep_log(state, run_id, &p, &all);
                all[all.len().saturating_sub(8)..].to_vec()
            }
            None => tail(&p, Some(8)).await,
        };
        out.push((p, lines));
    }
    out
}

fn keep_log(state: &StateDir, run_id: &str, p: &Placed, lines: &[String]) {
    let Ok(file) = state.node_log_file(run_id, &p.node, p.role.as_str()) else {
        return;
    };
    let _ = crate::state::write_atomic(&file, (lines.join("\n") + "\n").as_bytes());
}

/// Every member's last lines, for an error that explains a group's failure.
pub(crate) fn summary(stopped: &[(Placed, Vec<String>)]) -> String {
    let mut text = String::from("\n  every node's last output:");
    for (p, lines) in stopped {
        text.push_str(&format!("\n  [{} {}]", p.node, p.role.as_str()));
        for l in lines {
            text.push_str(&format!("\n  | {l}"));
        }
    }
    text
}

/// The nodes a group's API server container names (its `io.sparkctl.nodes` label).
pub(crate) async fn nodes_of(docker: &Docker, container: &str) -> Option<Nodes> {
    group_of(docker, container).await.map(|(nodes, _)| nodes)
}

/// A group API server's nodes and run id, from one inspect of its labels.
async fn group_of(docker: &Docker, container: &str) -> Option<(Nodes, String)> {
    let info = docker.inspect_container(container, None).await.ok()?;
    let labels = info.config?.labels?;
    let nodes = serde_json::from_str(labels.get(label::NODES)?).ok()?;
    Some((nodes, labels.get(base::RUN_ID).cloned().unwrap_or_default()))
}

/// When `container` is a group's API server: stops the rest of its group on every node
/// (Ray head and workers), keeping their logs. What `down`, `rollback` and a failed `up`
/// call through the runtime's stop. Nodes that cannot be reached are named.
pub(crate) async fn stop_rest(
    docker: &Docker,
    container: &str,
    state: Option<&StateDir>,
    state_id: &str,
) -> Vec<String> {
    let Some((nodes, run_id)) = group_of(docker, container).await else {
        return Vec::new();
    };
    let (conns, notes) = reach(&nodes).await;
    stop_run(&conns, state, state_id, &run_id).await;
    notes
}

/// `logs NAME --node NODE`: the output of the group's containers on that node (the Ray
/// head and the API server on the head node), each under a header.
pub(crate) async fn logs(
    docker: &DockerRuntime,
    d: &Deployment,
    node: &str,
    view: LogView,
    out: &mut LogSink,
) -> Result<()> {
    let Some(nodes) = nodes_of(docker.client(), &d.id).await else {
        return Err(Error::BadFlag(crate::error::FlagProblem::NodeOfOneEngine {
            name: d.name.clone(),
        }));
    };
    let Some(member) = nodes.members.iter().find(|n| n.name == node) else {
        let names: Vec<&str> = nodes.members.iter().map(|n| n.name.as_str()).collect();
        return Err(Error::BadFlag(crate::error::FlagProblem::NoSuchNode {
            name: d.name.clone(),
            node: node.to_string(),
            nodes: names.iter().map(|n| n.to_string()).collect(),
        }));
    };
    let conn = Connected {
        node: member.clone(),
        docker: connect(member).await?,
    };
    let parts = placed(std::slice::from_ref(&conn), docker.state_id(), &d.run_id).await;
    let many = parts.len() > 1 && !view.follow;
    for p in parts
        .iter()
        .filter(|p| !view.follow || p.role != Role::RayHead || parts.len() == 1)
    {
        if many {
            let _ = writeln!(out, "==> {} {} <==", p.node, p.role.as_str());
        }
        copy_logs(&conn.docker, &p.id, view, out, |e| {
            engine_error(&format!("node {node}: reading logs"), e)
        })
        .await?;
    }
    Ok(())
}

/// Stops what earlier runs of recipe `name` left running on these nodes (a group whose API
/// server ended leaves Ray's head and workers behind, holding the Ray port and memory), and
/// says what it stopped. Only this state dir's containers of that recipe are touched.
pub(crate) async fn stop_leftovers(conns: &[Connected], state_id: &str, name: &str) -> Vec<String> {
    stop_leftovers_of(conns, state_id, name, None).await
}

/// `stop_leftovers`, of one run only when `run_id` is given.
async fn stop_leftovers_of(
    conns: &[Connected],
    state_id: &str,
    name: &str,
    run_id: Option<&str>,
) -> Vec<String> {
    let mut labels = vec![
        format!("{}=true", base::MANAGED),
        format!("{}={state_id}", base::STATE),
        format!("{}={name}", label::GROUP),
    ];
    labels.extend(run_id.map(|r| format!("{}={r}", base::RUN_ID)));
    let filters = HashMap::from([("label", labels)]);
    let mut running = Vec::new();
    for c in conns {
        let opts = ListContainersOptionsBuilder::new()
            .filters(&filters)
            .build();
        let list = c
            .docker
            .list_containers(Some(opts))
            .await
            .unwrap_or_default();
        running.push((c, list));
    }
    let label_of = |s: &bollard::models::ContainerSummary, key: &str| {
        s.labels
            .as_ref()
            .and_then(|l| l.get(key).cloned())
            .unwrap_or_default()
    };
    // A run whose API server runs is a deployment, not leftovers: never touched here.
    let serving: Vec<String> = running
        .iter()
        .flat_map(|(_, list)| list.iter())
        .filter(|s| label_of(s, label::ROLE) == Role::Api.as_str())
        .map(|s| label_of(s, base::RUN_ID))
        .collect();
    let mut stopped = Vec::new();
    for (c, list) in running {
        for s in list {
            let (Some(id), false) = (s.id.clone(), serving.contains(&label_of(&s, base::RUN_ID)))
            else {
                continue;
            };
            let role = label_of(&s, label::ROLE);
            let opts = StopContainerOptionsBuilder::new().t(10).build();
            if c.docker.stop_container(&id, Some(opts)).await.is_ok() {
                stopped.push(format!(
                    "node {}: {role} {} of an earlier run",
                    c.node.name,
                    crate::units::short_id(&id)
                ));
            }
        }
    }
    stopped
}

/// A group deployment's containers on every node that answers (empty for one-engine
/// deployments), for `status`; unreachable nodes are named in the notes.
pub(crate) async fn members_of(rt: &Runtimes, d: &Deployment) -> (Vec<Placed>, Vec<String>) {
    let Ok(docker) = rt.docker() else {
        return (Vec::new(), Vec::new());
    };
    if d.runtime != Runtime::Docker {
        return (Vec::new(), Vec::new());
    }
    let Some(nodes) = nodes_of(docker.client(), &d.id).await else {
        return (Vec::new(), Vec::new());
    };
    let (conns, notes) = reach(&nodes).await;
    (placed(&conns, docker.state_id(), &d.run_id).await, notes)
}

/// After an interrupted or failed flow: whatever of recipe's group that flow's run
/// (`run_id`) still runs on its nodes (a start cut short before its server was known) is
/// stopped, and named. Other runs' containers are not the flow's to stop.
pub(crate) async fn stop_group_leftovers(
    rt: &Runtimes,
    recipe: &Recipe,
    run_id: &str,
) -> Vec<String> {
    let (Some(nodes), Ok(docker)) = (&recipe.nodes, rt.docker()) else {
        return Vec::new();
    };
    let (conns, mut notes) = reach(nodes).await;
    let name = &recipe.name;
    notes.extend(stop_leftovers_of(&conns, docker.state_id(), name, Some(run_id)).await);
    notes
}

/// Removes the Ray containers of this recipe's older ended runs on every node, beyond the
/// newest `keep` ended runs (`SPARKCTL_KEEP_EXITED`, as `prune` keeps servers); each run's
/// output was kept under `runs/RUN/nodes/` when it stopped. Returns what went.
pub(crate) async fn prune_old_runs(
    conns: &[Connected],
    state_id: &str,
    name: &str,
    keep: usize,
) -> usize {
    let filters = HashMap::from([(
        "label",
        vec![
            format!("{}={state_id}", base::STATE),
            format!("{}={name}", label::GROUP),
        ],
    )]);
    let mut all = Vec::new();
    for c in conns {
        let opts = ListContainersOptionsBuilder::new()
            .all(true)
            .filters(&filters)
            .build();
        for s in c
            .docker
            .list_containers(Some(opts))
            .await
            .unwrap_or_default()
        {
            let labels = s.labels.clone().unwrap_or_default();
            let run = labels.get(base::RUN_ID).cloned().unwrap_or_default();
            let role = labels.get(label::ROLE).cloned().unwrap_or_default();
            let up = s.state == Some(bollard::models::ContainerSummaryStateEnum::RUNNING);
            all.push((
                c,
                s.id.unwrap_or_default(),
                run,
                role,
                up,
                s.created.unwrap_or(0),
            ));
        }
    }
    // Runs with anything still running are not old; the rest, newest first.
    let live: Vec<&String> = all.iter().filter(|m| m.4).map(|m| &m.2).collect();
    let mut ended: Vec<(&String, i64)> = all
        .iter()
        .filter(|m| !live.contains(&&m.2))
        .map(|m| (&m.2, m.5))
        .collect();
    ended.sort_by(|a, b| b.1.cmp(&a.1).then(b.0.cmp(a.0)));
    ended.dedup_by(|a, b| a.0 == b.0);
    let old: Vec<&String> = ended.iter().skip(keep).map(|(r, _)| *r).collect();
    let mut removed = 0;
    let opts = RemoveContainerOptionsBuilder::new().build();
    for (c, id, run, role, _, _) in &all {
        // The API server is a deployment: `prune` and its protections own it.
        if !old.contains(&run) || role == Role::Api.as_str() {
            continue;
        }
        if c.docker
            .remove_container(id, Some(opts.clone()))
            .await
            .is_ok()
        {
            removed += 1;
        }
    }
    removed
}
