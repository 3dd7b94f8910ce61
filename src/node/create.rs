//! A group's containers created in order (Ray head, workers, API server), each with the
//! labels `runtime::group` finds them by again.

use std::collections::HashMap;

use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{CreateContainerOptionsBuilder, RemoveContainerOptionsBuilder};

use super::plan::Member;
use crate::error::Result;
use crate::recipe::nodes::Nodes;
use crate::runtime::docker::label as base;
use crate::runtime::group::{label, Role};
use crate::runtime::remote::Connected;
use crate::runtime::StartSpec;
use crate::state::StateDir;

/// Where the Ray head and the API server share Ray's session dir (its sockets): vLLM's
/// driver must find the head node's raylet, and they are two containers.
pub(crate) fn ray_session_dir(state: &StateDir, run_id: &str) -> std::path::PathBuf {
    state.root().join("ray").join(run_id)
}

/// The container body of one member: the recipe's container (image, mounts, GPUs, IPC,
/// shm, ulimits, user) with the member's command and environment, on the host's network
/// — NCCL and Ray need the node's real interfaces, not a bridge.
pub(crate) fn member_body(
    spec: &StartSpec,
    artifact: &str,
    state_id: &str,
    host_env: Vec<String>,
    member: &Member,
    nodes: &Nodes,
    ray_dir: Option<&str>,
) -> ContainerCreateBody {
    let mut body =
        crate::runtime::docker::container_spec(spec, artifact, state_id, host_env.clone());
    body.entrypoint = (!member.entrypoint.is_empty()).then(|| member.entrypoint.clone());
    body.cmd = Some(member.cmd.clone());
    body.env = Some(
        member
            .env
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .chain(host_env)
            .collect(),
    );
    body.exposed_ports = None;
    let labels = body.labels.get_or_insert_with(HashMap::new);
    labels.insert(label::GROUP.into(), spec.resolved.name.clone());
    labels.insert(label::NODE.into(), member.node.clone());
    labels.insert(label::ROLE.into(), member.role.as_str().into());
    if member.role == Role::Api {
        labels.insert(
            label::NODES.into(),
            serde_json::to_string(nodes).expect("nodes serialize"),
        );
    } else {
        // Not a deployment of its own: `status` and the front door see the API server only.
        for key in [base::RECIPE, base::PORT, base::HOST, base::HEALTH] {
            labels.remove(key);
        }
    }
    let host: &mut HostConfig = body.host_config.get_or_insert_with(Default::default);
    host.network_mode = Some("host".into());
    host.port_bindings = None;
    if let Some(dir) = ray_dir {
        host.binds
            .get_or_insert_with(Vec::new)
            .push(format!("{dir}:/tmp/ray"));
    }
    body
}

/// Creates and starts one member; its container name says run, node and role.
pub(crate) async fn create_and_start(
    conn: &Connected,
    spec: &StartSpec,
    member: &Member,
    body: ContainerCreateBody,
) -> Result<String> {
    let name = format!(
        "sparkctl-{}-{}-{}-{}",
        spec.resolved.name,
        spec.run_id,
        member.node,
        member.role.as_str()
    );
    let at = |e: bollard::errors::Error, doing: &str| {
        crate::runtime::docker::engine_error(&format!("node {}: {doing} {name}", conn.node.name), e)
    };
    let created = conn
        .docker
        .create_container(
            Some(CreateContainerOptionsBuilder::new().name(&name).build()),
            body,
        )
        .await
        .map_err(|e| at(e, "creating"))?;
    if let Err(e) = conn.docker.start_container(&created.id, None).await {
        let opts = RemoveContainerOptionsBuilder::new().force(true).build();
        let _ = conn.docker.remove_container(&created.id, Some(opts)).await;
        return Err(at(e, "starting"));
    }
    Ok(created.id)
}
