//! `doctor`: is this machine ready to serve? Each check says what it found and, when
//! something is wrong, what to do.

use serde::Serialize;

use crate::deploy::{self, PortOwner, Settings};
use crate::recipe::{RecipeSet, Runtime};
use crate::runtime::Runtimes;
use crate::state::StateDir;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Ok,
    /// Works, with a limit worth knowing (no GPU, a port taken).
    Warn,
    /// Blocks sparkctl from working.
    Fail,
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: String,
    pub verdict: Verdict,
    pub detail: String,
}

fn check(name: impl Into<String>, verdict: Verdict, detail: impl Into<String>) -> Check {
    Check {
        name: name.into(),
        verdict,
        detail: detail.into(),
    }
}

pub async fn run(
    rt: &Runtimes,
    recipes: &RecipeSet,
    state: &StateDir,
    settings: &Settings,
) -> Vec<Check> {
    let mut checks = Vec::new();
    let docker_recipes: Vec<&str> = recipes
        .recipes
        .iter()
        .filter(|r| r.recipe.runtime() == Runtime::Docker)
        .map(|r| r.recipe.name.as_str())
        .collect();
    let gpu_recipes: Vec<&str> = recipes
        .recipes
        .iter()
        .filter(|r| r.recipe.runtime() == Runtime::Docker && r.recipe.server.gpus.is_some())
        .map(|r| r.recipe.name.as_str())
        .collect();

    match rt.docker() {
        Ok(docker) => {
            let client = docker.client();
            let version = client.version().await;
            checks.push(match version {
                Ok(v) => check(
                    "docker engine",
                    Verdict::Ok,
                    format!(
                        "Docker Engine {} (API {}), {}",
                        v.version.unwrap_or_default(),
                        v.api_version.unwrap_or_default(),
                        v.arch.unwrap_or_default()
                    ),
                ),
                Err(e) => check("docker engine", Verdict::Fail, e.to_string()),
            });
            checks.push(match docker.has_nvidia_runtime().await {
                Ok(true) => check("nvidia runtime", Verdict::Ok, "`nvidia` runtime registered"),
                Ok(false) => check(
                    "nvidia runtime",
                    Verdict::Warn,
                    format!(
                        "no `nvidia` runtime in the engine: GPU recipes ({}) cannot start; install \
                         the NVIDIA Container Toolkit",
                        if gpu_recipes.is_empty() {
                            "none here".to_string()
                        } else {
                            gpu_recipes.join(", ")
                        }
                    ),
                ),
                Err(e) => check("nvidia runtime", Verdict::Warn, e.to_string()),
            });
        }
        Err(e) => {
            let verdict = if docker_recipes.is_empty() {
                Verdict::Warn
            } else {
                Verdict::Fail
            };
            checks.push(check("docker engine", verdict, e.to_string()));
        }
    }

    checks.push(match crate::host::gpus() {
        Ok(gpus) if !gpus.is_empty() => check(
            "gpu",
            Verdict::Ok,
            gpus.iter()
                .map(|g| {
                    format!(
                        "{}, {}, compute capability {}",
                        g.name, g.memory, g.compute_capability
                    )
                })
                .collect::<Vec<_>>()
                .join("; "),
        ),
        Ok(_) => check("gpu", Verdict::Warn, "nvidia-smi lists no GPU"),
        Err(e) => check("gpu", Verdict::Warn, e),
    });

    let total = crate::host::mem_total_bytes().unwrap_or(0) as f64 / 1e9;
    let source = match std::env::var("SPARKCTL_MEMORY_GB") {
        Ok(v) if !v.is_empty() => format!("pool set by SPARKCTL_MEMORY_GB={v}"),
        _ => "pool = installed memory".to_string(),
    };
    checks.push(check(
        "memory",
        Verdict::Ok,
        format!(
            "{total:.1} GB installed; servers may use {:.1} GB together ({source}, minus \
             SPARKCTL_MEMORY_RESERVE_GB, default 8)",
            settings.memory_budget_gb
        ),
    ));

    let known = rt.list().await.map(|(d, _)| d).unwrap_or_default();
    let mut ports: Vec<(u16, Vec<&str>)> = Vec::new();
    for r in &recipes.recipes {
        let port = r.recipe.server.port;
        match ports.iter_mut().find(|(p, _)| *p == port) {
            Some((_, names)) => names.push(&r.recipe.name),
            None => ports.push((port, vec![&r.recipe.name])),
        }
    }
    ports.sort();
    for (port, names) in ports {
        let label = format!("port {port}");
        let used_by = names.join(", ");
        checks.push(match deploy::port_owner(rt, port, &known).await {
            None => check(label, Verdict::Ok, format!("free (for {used_by})")),
            Some(owner @ PortOwner::Deployment { .. }) => {
                check(label, Verdict::Ok, format!("{owner} (for {used_by})"))
            }
            Some(owner) => check(
                label,
                Verdict::Warn,
                format!("taken by {owner}; {used_by} cannot start until it is free"),
            ),
        });
    }

    checks.push(match state.check_writable() {
        Ok(()) => check(
            "state dir",
            Verdict::Ok,
            format!("{} is writable", state.root().display()),
        ),
        Err(e) => check("state dir", Verdict::Fail, e.to_string()),
    });
    checks
}
