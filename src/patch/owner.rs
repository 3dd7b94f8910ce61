//! Who owns the model files, and giving them back: containers that exported a model as
//! root leave root-owned files the user cannot patch. As root sparkctl chowns directly;
//! otherwise a short-lived helper container (the recipe's own image, entrypoint `chown`)
//! does it through the Engine API, so no sudo is needed.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, LogsOptionsBuilder, RemoveContainerOptionsBuilder,
};
use futures_util::StreamExt;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::runtime::docker::label;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct Owner {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.uid, self.gid)
    }
}

/// `invoking-user` (the user behind sudo when there is one) or `UID:GID`.
pub(crate) fn resolve(to: &str) -> std::result::Result<Owner, String> {
    if to == "invoking-user" {
        // SAFETY: getters without side effects.
        let (euid, uid, gid) = unsafe { (libc::geteuid(), libc::getuid(), libc::getgid()) };
        if euid == 0 {
            if let Some((uid, gid)) = crate::settings::environment().sudo_user {
                return Ok(Owner { uid, gid });
            }
        }
        return Ok(Owner { uid, gid });
    }
    let (u, g) = to
        .split_once(':')
        .ok_or_else(|| format!("`{to}` is not an owner; write invoking-user or UID:GID"))?;
    match (u.parse(), g.parse()) {
        (Ok(uid), Ok(gid)) => Ok(Owner { uid, gid }),
        _ => Err(format!(
            "`{to}` is not an owner; write invoking-user or UID:GID"
        )),
    }
}

/// Paths under `root` (and "." for root itself) whose owner differs from `owner`.
pub(crate) fn not_owned_by(root: &Path, owner: Owner) -> std::result::Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(path) = stack.pop() {
        let meta =
            std::fs::symlink_metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        if meta.uid() != owner.uid || meta.gid() != owner.gid {
            let rel = path
                .strip_prefix(root)
                .expect("under root")
                .to_string_lossy()
                .into_owned();
            out.push(if rel.is_empty() { ".".into() } else { rel });
        }
        if meta.is_dir() {
            let entries =
                std::fs::read_dir(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            stack.extend(entries.filter_map(|e| e.ok().map(|e| e.path())));
        }
    }
    out.sort();
    Ok(out)
}

/// Whether this process may chown by itself. `SPARKCTL_CHOWN_HELPER=always` forces the
/// helper container even as root (for root-squashed mounts, and to test that path).
pub(crate) fn can_chown_directly() -> bool {
    // SAFETY: a getter without side effects.
    let root = unsafe { libc::geteuid() } == 0;
    root && !crate::settings::environment().chown_helper_always
}

pub(crate) fn chown_direct(root: &Path, paths: &[String], owner: Owner) -> Result<()> {
    for rel in paths {
        let path = root.join(rel);
        std::os::unix::fs::lchown(&path, Some(owner.uid), Some(owner.gid))
            .map_err(|e| Error::io(format!("cannot chown {}", path.display()), e))?;
    }
    Ok(())
}

/// Runs `chown -h UID:GID /model/...` in a container of `image` with the model dir
/// mounted, waits for it, and removes it (its output goes into the error if it fails).
pub(crate) async fn chown_via_container(
    docker: &bollard::Docker,
    image: &str,
    state_id: &str,
    root: &Path,
    paths: &[String],
    owner: Owner,
) -> Result<()> {
    let engine =
        |what: &str, e| crate::runtime::docker::engine_error(&format!("chown helper: {what}"), e);
    if docker.inspect_image(image).await.is_err() {
        return Err(Error::ImageMissing {
            image: image.to_string(),
            needed: crate::error::ImageNeed::ChownHelper {
                owner: owner.to_string(),
                root: root.to_path_buf(),
            },
        });
    }
    let mut cmd = vec!["-h".to_string(), owner.to_string()];
    cmd.extend(paths.iter().map(|rel| {
        if rel == "." {
            "/model".to_string()
        } else {
            format!("/model/{rel}")
        }
    }));
    let body = ContainerCreateBody {
        image: Some(image.to_string()),
        entrypoint: Some(vec!["chown".into()]),
        cmd: Some(cmd),
        user: Some("0:0".into()),
        network_disabled: Some(true),
        labels: Some(HashMap::from([
            (label::MANAGED.to_string(), "true".to_string()),
            (label::STATE.to_string(), state_id.to_string()),
            ("io.sparkctl.helper".to_string(), "chown".to_string()),
        ])),
        host_config: Some(HostConfig {
            binds: Some(vec![format!("{}:/model", root.display())]),
            network_mode: Some("none".into()),
            auto_remove: Some(false),
            ..Default::default()
        }),
        ..Default::default()
    };
    let name = format!("sparkctl-chown-{}", crate::state::new_run_id());
    let created = docker
        .create_container(
            Some(CreateContainerOptionsBuilder::new().name(&name).build()),
            body,
        )
        .await
        .map_err(|e| engine("create", e))?;
    let result = async {
        docker
            .start_container(&created.id, None)
            .await
            .map_err(|e| engine("start", e))?;
        // A non-zero exit arrives as an error item; the inspect below tells the code.
        let _ = docker.wait_container(&created.id, None).next().await;
        let state = docker
            .inspect_container(&created.id, None)
            .await
            .map_err(|e| engine("inspect", e))?
            .state
            .unwrap_or_default();
        if state.exit_code == Some(0) {
            return Ok(());
        }
        let mut output = String::new();
        let opts = LogsOptionsBuilder::new().stdout(true).stderr(true).build();
        let mut logs = docker.logs(&created.id, Some(opts));
        while let Some(Ok(chunk)) = logs.next().await {
            output.push_str(&chunk.to_string());
        }
        Err(Error::Failed(format!(
            "chown helper ({image}) exited with {:?}: {}",
            state.exit_code,
            output.trim()
        )))
    }
    .await;
    // Its work is done and its output is in the result: the helper is not kept.
    let opts = RemoveContainerOptionsBuilder::new().force(true).build();
    let _ = docker.remove_container(&created.id, Some(opts)).await;
    result
}
