//! The same model on every node: each other node's copy of the model dir is hashed there,
//! file by file, in a short-lived container of the recipe's image (the Engine API is the
//! only way in; argv only), and compared with the head's fingerprint. Any file missing or
//! different is named, and the group does not start.

use std::collections::{BTreeMap, HashMap};

use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{LogsOptionsBuilder, RemoveContainerOptionsBuilder};
use futures_util::StreamExt;

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::runtime::docker::label as base;
use crate::runtime::remote::Connected;

/// The hashing command for an engine's image: coreutils' `sha256sum` in real images, the
/// sim's own in its FROM-scratch one.
fn hasher(engine: Engine) -> Vec<String> {
    match engine {
        Engine::Sim => ["/sparkctl", "sim", "--sha256-files"]
            .map(String::from)
            .to_vec(),
        _ => ["sha256sum", "--"].map(String::from).to_vec(),
    }
}

/// Where each of the head's files is inside the helper container.
fn paths(head: &BTreeMap<String, String>, mount: &str, single_file: bool) -> Vec<String> {
    head.keys()
        .map(|rel| {
            if single_file {
                mount.to_string()
            } else {
                format!("{}/{rel}", mount.trim_end_matches('/'))
            }
        })
        .collect()
}

/// What to hash on a node.
pub(crate) struct ModelCheck<'a> {
    pub(in crate::node) engine: Engine,
    pub(in crate::node) image: &'a str,
    pub(in crate::node) host_path: &'a str,
    pub(in crate::node) mount: &'a str,
    pub(in crate::node) single_file: bool,
    pub(in crate::node) state_id: &'a str,
    pub(in crate::node) run_id: &'a str,
}

/// Runs the hashing container on `node`; its `HASH  PATH` lines by path.
async fn hashes_on(
    node: &Connected,
    check: &ModelCheck<'_>,
    files: &[String],
) -> Result<HashMap<String, String>> {
    let at = |what: &str, e: bollard::errors::Error| {
        crate::runtime::docker::engine_error(
            &format!("node {}: {what} the model check", node.node.name),
            e,
        )
    };
    let labels = HashMap::from([
        (base::MANAGED.to_string(), "true".to_string()),
        (base::STATE.to_string(), check.state_id.to_string()),
        (base::RUN_ID.to_string(), check.run_id.to_string()),
    ]);
    let argv = hasher(check.engine);
    let body = ContainerCreateBody {
        image: Some(check.image.to_string()),
        entrypoint: Some(argv[..1].to_vec()),
        cmd: Some(
            argv[1..]
                .iter()
                .cloned()
                .chain(files.iter().cloned())
                .collect(),
        ),
        labels: Some(labels),
        network_disabled: Some(true),
        host_config: Some(HostConfig {
            binds: Some(vec![format!("{}:{}:ro", check.host_path, check.mount)]),
            network_mode: Some("none".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let docker = &node.docker;
    let id = docker
        .create_container(
            None::<bollard::query_parameters::CreateContainerOptions>,
            body,
        )
        .await
        .map_err(|e| at("creating", e))?
        .id;
    let run = async {
        docker
            .start_container(&id, None)
            .await
            .map_err(|e| at("starting", e))?;
        let _ = docker.wait_container(&id, None).next().await;
        let opts = LogsOptionsBuilder::new().stdout(true).build();
        let mut out = Vec::new();
        let mut logs = docker.logs(&id, Some(opts));
        while let Some(Ok(chunk)) = logs.next().await {
            out.extend_from_slice(&chunk.into_bytes());
        }
        Ok::<_, Error>(String::from_utf8_lossy(&out).into_owned())
    };
    let text = run.await;
    // A helper, not a deployment: nothing of it is worth keeping.
    let opts = RemoveContainerOptionsBuilder::new().force(true).build();
    let _ = docker.remove_container(&id, Some(opts)).await;
    Ok(text?
        .lines()
        .filter_map(|l| l.split_once("  "))
        .map(|(sha, path)| (path.to_string(), sha.to_string()))
        .collect())
}

/// Refuses when `node`'s copy differs from the head's (`head`: sha256 by relative path).
pub(crate) async fn ensure_same(
    node: &Connected,
    check: &ModelCheck<'_>,
    head: &BTreeMap<String, String>,
) -> Result<()> {
    let files = paths(head, check.mount, check.single_file);
    let there = hashes_on(node, check, &files).await?;
    let differing: Vec<String> = head
        .iter()
        .zip(&files)
        .filter_map(|((rel, sha), path)| match there.get(path) {
            Some(s) if s == sha => None,
            Some(_) => Some(format!("{rel} (differs)")),
            None => Some(format!("{rel} (missing or unreadable)")),
        })
        .collect();
    if differing.is_empty() {
        return Ok(());
    }
    let shown: Vec<&str> = differing.iter().take(10).map(String::as_str).collect();
    let more = differing.len().saturating_sub(shown.len());
    Err(Error::Failed(format!(
        "node {}'s model at {} is not the head's: {}{}; copy the head's model dir there \
         (e.g. rsync over the high-speed link) so every node serves the same weights; \
         nothing was started",
        node.node.name,
        check.host_path,
        shown.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    )))
}
