//! The container a job becomes, through the Engine API (never the docker CLI, never a
//! shell): labelled as this state dir's job, never auto-removed, never restarted.

use std::collections::HashMap;

use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::Docker;

use super::recipe::host_path;
use super::recipe::JobRecipe;
use crate::error::Result;
use crate::recipe::run_tail;
use crate::runtime::docker::{copy_logs, engine_error, is_not_found, label, resource_config};
use crate::runtime::{Exit, LogView};

/// Label naming the job a container runs (serving containers carry `io.sparkctl.recipe`).
pub(crate) const JOB_LABEL: &str = "io.sparkctl.job";

/// What the container needs beyond the recipe.
pub(crate) struct Spec<'a> {
    pub(in crate::job) recipe: &'a JobRecipe,
    pub(in crate::job) image: &'a str,
    pub(in crate::job) image_ref: &'a str,
    pub(in crate::job) run_id: &'a str,
    pub(in crate::job) state_id: &'a str,
    pub(in crate::job) user: &'a str,
    /// `NAME=value` of the `env_from_host` names, read now; never logged.
    pub(in crate::job) host_env: Vec<String>,
}

/// Host path → container path binds: inputs read-only, outputs and caches read-write.
pub(crate) fn binds(r: &JobRecipe) -> Vec<String> {
    let ro = r
        .inputs
        .iter()
        .map(|i| format!("{}:{}:ro", host_path(&i.path).display(), i.mount));
    let rw = r
        .outputs
        .iter()
        .map(|o| (&o.path, &o.mount))
        .chain(r.caches.iter().map(|c| (&c.path, &c.mount)))
        .map(|(p, m)| format!("{}:{m}", host_path(p).display()));
    ro.chain(rw).collect()
}

pub(crate) fn body(spec: &Spec) -> ContainerCreateBody {
    let r = spec.recipe;
    let env: Vec<String> = r
        .env
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .chain(spec.host_env.iter().cloned())
        .collect();
    let labels = HashMap::from([
        (label::MANAGED.to_string(), "true".to_string()),
        (label::STATE.to_string(), spec.state_id.to_string()),
        (JOB_LABEL.to_string(), r.name.clone()),
        (label::RUN_ID.to_string(), spec.run_id.to_string()),
        (label::IMAGE_REF.to_string(), spec.image_ref.to_string()),
        (label::RECIPE_HASH.to_string(), r.hash()),
    ]);
    let host_config = HostConfig {
        binds: Some(binds(r)),
        // The seeds lost an export's logs to `--rm`: the container stays until pruned.
        auto_remove: Some(false),
        ..resource_config(&r.resources())
    };
    ContainerCreateBody {
        image: Some(spec.image.to_string()),
        entrypoint: (!r.entrypoint.is_empty()).then(|| r.entrypoint.clone()),
        cmd: Some(r.argv.clone()),
        env: Some(env),
        user: Some(spec.user.to_string()),
        working_dir: r.workdir.clone(),
        labels: Some(labels),
        host_config: Some(host_config),
        ..Default::default()
    }
}

/// The command a person could type for the same container, for review. Secrets by name.
pub(crate) fn equivalent_command(r: &JobRecipe, image: &str, user: &str) -> Vec<String> {
    let mut v: Vec<String> = vec!["docker".into(), "run".into(), "-d".into()];
    v.extend(r.resources().run_flags());
    v.extend(["--user".into(), user.to_string()]);
    if let Some(w) = &r.workdir {
        v.extend(["-w".into(), w.clone()]);
    }
    for b in binds(r) {
        v.extend(["-v".into(), b]);
    }
    v.extend(run_tail(
        &r.env,
        &r.env_from_host,
        &r.entrypoint,
        image,
        &r.argv,
    ));
    v
}

/// How the container stands: None while it runs, its exit once it ended; Err(None) when
/// the engine no longer has it.
pub(crate) async fn ended(
    docker: &Docker,
    id: &str,
) -> Result<std::result::Result<Option<Exit>, ()>> {
    match docker.inspect_container(id, None).await {
        Ok(info) => {
            let s = info.state.unwrap_or_default();
            if s.running == Some(true) || s.restarting == Some(true) {
                return Ok(Ok(None));
            }
            Ok(Ok(Some(Exit {
                code: s.exit_code,
                signal: None,
                oom_killed: s.oom_killed.unwrap_or(false),
            })))
        }
        Err(e) if is_not_found(&e) => Ok(Err(())),
        Err(e) => Err(engine_error("inspecting the job container", e)),
    }
}

/// The container's whole output so far.
pub(crate) async fn output(docker: &Docker, id: &str) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    copy_logs(docker, id, LogView::default(), &mut out, |e| {
        engine_error("reading the job's output", e)
    })
    .await?;
    Ok(out)
}

/// The last `n` lines of the container's output ("" when it cannot be read).
pub(crate) async fn tail(docker: &Docker, id: &str, n: usize) -> String {
    let view = LogView {
        tail: Some(n),
        follow: false,
    };
    let mut out = Vec::new();
    // What was read before an error still says something.
    let _ = copy_logs(docker, id, view, &mut out, |e| {
        engine_error("reading the job's output", e)
    })
    .await;
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether the container carries this state dir's labels for `job`: nothing else is stopped.
pub(crate) async fn is_ours(docker: &Docker, id: &str, state_id: &str, job: &str) -> bool {
    let Ok(info) = docker.inspect_container(id, None).await else {
        return false;
    };
    let labels = info.config.and_then(|c| c.labels).unwrap_or_default();
    labels.get(label::MANAGED).map(String::as_str) == Some("true")
        && labels.get(label::STATE).map(String::as_str) == Some(state_id)
        && labels.get(JOB_LABEL).map(String::as_str) == Some(job)
}
