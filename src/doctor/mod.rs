//! `doctor`: is this machine ready to serve? Each check says what it found and, when
//! something is wrong, what to do.

mod nodes;
mod recipe;

use std::collections::VecDeque;

use serde::Serialize;

use crate::context::Context;
use crate::error::Result;
use crate::nvidia::Gpu;
use crate::recipe::{LoadedRecipe, RecipeSet, Runtime};
use crate::runtime::Runtimes;
use crate::settings::Settings;
use crate::state::StateDir;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Verdict {
    Ok,
    /// Works, with a limit worth knowing (no GPU, a port taken).
    Warn,
    /// Blocks sparkctl from working, or something in use or named.
    Fail,
    /// Not looked at (recipes neither in use nor named).
    Skip,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Check {
    pub(crate) name: String,
    pub(crate) verdict: Verdict,
    pub(crate) detail: String,
}

impl Verdict {
    /// How a check's line is marked.
    pub(crate) fn mark(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Warn => "warn",
            Verdict::Fail => "FAIL",
            Verdict::Skip => "-",
        }
    }
}

/// Ok unless a check failed: then how many did.
pub(crate) fn outcome(checks: &[Check]) -> Result<()> {
    match checks.iter().filter(|c| c.verdict == Verdict::Fail).count() {
        0 => Ok(()),
        // The checks are printed already (one JSON document with --json).
        n => Err(crate::error::Error::Reported(
            crate::error::Summary::ChecksFailed { n },
        )),
    }
}

fn check(name: impl Into<String>, verdict: Verdict, detail: impl Into<String>) -> Check {
    Check {
        name: name.into(),
        verdict,
        detail: detail.into(),
    }
}

/// What `doctor` checks beyond the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope<'a> {
    /// Production, its fallbacks, what runs and what `production.json` names.
    InUse,
    /// These recipes, deeply, whether in use or not.
    Named(&'a [String]),
}

/// Every check, in the order `doctor` prints them: the machine, then each recipe in scope.
/// Other recipes are not checked (one line says which, and how to check one).
pub(crate) async fn run(
    ctx: &Context,
    recipes: &RecipeSet,
    scope: Scope<'_>,
) -> Result<Vec<Check>> {
    let deployments = ctx
        .runtimes
        .list()
        .await
        .map(|(d, _)| d)
        .unwrap_or_default();
    let (subjects, mut checks) = match scope {
        Scope::Named(names) => {
            let mut subjects = Vec::new();
            for name in names {
                subjects.push((recipes.get(name)?, None));
            }
            (subjects, Vec::new())
        }
        Scope::InUse => in_use(&ctx.state, recipes, &deployments),
    };
    let needs_docker = subjects
        .iter()
        .any(|(r, _)| r.recipe.runtime() == Runtime::Docker);
    let mut machine = engine_checks(&ctx.runtimes, recipes, needs_docker).await;
    machine.extend(gpu_and_memory(&ctx.settings).await);
    machine.extend(held_check(&ctx.runtimes, &deployments).await);
    // A recipe file that does not load is the user's to fix, not the machine's: a warning.
    for b in &recipes.broken {
        machine.push(check(
            format!("recipe {}", b.path.display()),
            Verdict::Warn,
            b.to_string(),
        ));
    }
    machine.push(match ctx.state.check_writable() {
        Ok(()) => check(
            "state dir",
            Verdict::Ok,
            format!("{} is writable", ctx.state.root().display()),
        ),
        Err(e) => check("state dir", Verdict::Fail, e.to_string()),
    });
    machine.push(frontdoor_check(&ctx.state, &ctx.settings));
    machine.append(&mut checks);
    let lock = crate::lock::Lock::load(&ctx.lock_path);
    for (loaded, why) in &subjects {
        if let Some(why) = why {
            machine.push(check(
                format!("{} in use", loaded.recipe.name),
                Verdict::Ok,
                why.clone(),
            ));
        }
        let subject = recipe::Subject {
            loaded,
            running: deployments
                .iter()
                .find(|d| d.name == loaded.recipe.name && d.running()),
        };
        machine.extend(recipe::checks(ctx, &lock, &subject, &deployments).await);
    }
    let others: Vec<&str> = recipes
        .recipes
        .iter()
        .filter(|r| !subjects.iter().any(|(s, _)| s.recipe.name == r.recipe.name))
        .map(|r| r.recipe.name.as_str())
        .collect();
    if scope == Scope::InUse && !others.is_empty() {
        machine.push(check(
            "not checked",
            Verdict::Skip,
            format!(
                "{} (not in use); `sparkctl doctor RECIPE` checks one",
                others.join(", ")
            ),
        ));
    }
    Ok(machine)
}

/// The recipes something in use depends on: production now, before and kept warm (what
/// `rollback` and the watch would start), what runs, and the fallback of each. A name
/// `production.json` gives that no recipe has is a check of its own.
fn in_use<'r>(
    state: &StateDir,
    recipes: &'r RecipeSet,
    deployments: &[crate::runtime::Deployment],
) -> (Vec<(&'r LoadedRecipe, Option<String>)>, Vec<Check>) {
    let mut problems = Vec::new();
    let production = match crate::production::Book::load(state) {
        Ok(p) => p,
        Err(e) => {
            problems.push(check("production", Verdict::Fail, e.to_string()));
            crate::production::Book::default()
        }
    };
    let mut wanted: VecDeque<(String, String)> = VecDeque::new();
    let said = |what: &str| what.to_string();
    // Every model's production.
    for production in production.lanes().into_values() {
        wanted.extend(
            production
                .current
                .iter()
                .map(|e| (e.recipe.clone(), said("production"))),
        );
        wanted.extend(production.previous.iter().map(|e| {
            (
                e.recipe.clone(),
                said("an earlier production (`rollback` starts it)"),
            )
        }));
        wanted.extend(
            production
                .warm
                .iter()
                .map(|w| (w.upstream.recipe.clone(), said("kept warm for `rollback`"))),
        );
    }
    wanted.extend(
        deployments
            .iter()
            .filter(|d| d.running())
            .map(|d| (d.name.clone(), said("running"))),
    );
    let mut subjects: Vec<(&LoadedRecipe, Option<String>)> = Vec::new();
    while let Some((name, why)) = wanted.pop_front() {
        if subjects.iter().any(|(s, _)| s.recipe.name == name) {
            continue;
        }
        match recipes.recipes.iter().find(|r| r.recipe.name == name) {
            Some(r) => {
                if let Some(fallback) = &r.recipe.fallback {
                    wanted.push_back((fallback.clone(), format!("the fallback of {name}")));
                }
                subjects.push((r, Some(why)));
            }
            None if !problems.iter().any(|c| c.name == format!("recipe {name}")) => {
                problems.push(check(
                    format!("recipe {name}"),
                    Verdict::Fail,
                    format!(
                        "{why}, but {} has no recipe `{name}`; restore recipes/{name}.yaml \
                         or point --recipes at the directory that has it",
                        recipes.dir.display()
                    ),
                ));
            }
            None => {}
        }
    }
    (subjects, problems)
}

/// The Docker Engine and its `nvidia` runtime. Without an engine: a failure only when a
/// recipe in scope runs in containers. The runtime's absence is the machine's fact, a
/// warning; it fails the recipes in scope that ask for GPUs.
async fn engine_checks(rt: &Runtimes, recipes: &RecipeSet, needs_docker: bool) -> Vec<Check> {
    let gpu_recipes: Vec<&str> = recipes
        .recipes
        .iter()
        .filter(|r| r.recipe.runtime() == Runtime::Docker && r.recipe.server.gpus.is_some())
        .map(|r| r.recipe.name.as_str())
        .collect();
    let unreachable = match needs_docker {
        true => Verdict::Fail,
        false => Verdict::Warn,
    };
    let docker = match rt.docker() {
        Ok(docker) => docker,
        Err(e) => return vec![check("docker engine", unreachable, e.to_string())],
    };
    let engine = match docker.client().version().await {
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
        Err(e) => check("docker engine", unreachable, e.to_string()),
    };
    let nvidia = match docker.has_nvidia_runtime().await {
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
    };
    vec![engine, nvidia]
}

/// Running servers that hold more than their recipes declare: the memory plan counts what
/// they hold, and says so; both figures here.
async fn held_check(rt: &Runtimes, deployments: &[crate::runtime::Deployment]) -> Option<Check> {
    let running: Vec<&crate::runtime::Deployment> =
        deployments.iter().filter(|d| d.running()).collect();
    if running.is_empty() {
        return None;
    }
    let held = crate::memory::held(rt, &running).await;
    let over: Vec<String> = running
        .iter()
        .zip(&held)
        .filter(|(_, h)| h.over_declared)
        .map(|(d, h)| format!("{}: {}", d.name, h.summary()))
        .collect();
    Some(match over.is_empty() {
        true => check(
            "memory held",
            Verdict::Ok,
            format!(
                "{} running server(s) within their declarations",
                running.len()
            ),
        ),
        false => check(
            "memory held",
            Verdict::Warn,
            format!(
                "{}; raise server.memory_gb in their recipes",
                over.join("; ")
            ),
        ),
    })
}

async fn gpu_and_memory(settings: &Settings) -> [Check; 2] {
    let meminfo = crate::host::meminfo();
    let gpus = crate::nvidia::gpus().await;
    let gpu = match &gpus {
        Ok(gpus) if !gpus.is_empty() => check(
            "gpu",
            Verdict::Ok,
            gpu_detail(gpus, meminfo.map(|m| m.total)),
        ),
        Ok(_) => check("gpu", Verdict::Warn, "nvidia-smi lists no GPU"),
        Err(e) => check("gpu", Verdict::Warn, e.to_string()),
    };
    let kind = match &gpus {
        Ok(g) if g.is_empty() => None,
        Ok(g) if g.iter().all(Gpu::shares_system_memory) => Some(true),
        Ok(_) => Some(false),
        Err(_) => None,
    };
    [gpu, memory_check(meminfo, kind, settings)]
}

/// Whether the front door runs, and whether it comes back after a reboot.
fn frontdoor_check(state: &StateDir, settings: &Settings) -> Check {
    let running = crate::frontdoor::launch::running(state);
    let unit = crate::frontdoor::unit::installed();
    let now = match &running {
        Some(r) => format!("runs on {}:{} (pid {})", r.host, r.port, r.pid),
        None => format!(
            "not running (port {}; `up`, `rollback` or `sparkctl frontdoor start` starts it)",
            settings.production_port
        ),
    };
    match unit {
        Some(path) => check(
            "front door",
            Verdict::Ok,
            format!("{now}; starts at boot ({})", path.display()),
        ),
        None => check(
            "front door",
            Verdict::Warn,
            format!("{now}; not set up to come back after a reboot: `sparkctl frontdoor install`"),
        ),
    }
}

/// One GPU per clause. A GPU without memory of its own (nvidia-smi's `[N/A]`: a GB10) is
/// said to share the system's, with the size /proc/meminfo gives, never "[N/A]" as a size.
fn gpu_detail(gpus: &[Gpu], mem_total: Option<u64>) -> String {
    gpus.iter()
        .map(|g| {
            let memory = match (g.memory_total_bytes, mem_total) {
                (Some(own), _) => format!("{} MiB of its own", own >> 20),
                (None, Some(total)) => format!(
                    "shares the system's {:.1} GB (unified memory: nvidia-smi reports [N/A], \
                     /proc/meminfo counts it)",
                    total as f64 / 1e9
                ),
                (None, None) => "shares the system's memory (unified memory: nvidia-smi \
                                 reports [N/A])"
                    .to_string(),
            };
            let bandwidth = match crate::nvidia::bandwidth::lookup(&g.name) {
                Some(k) => format!("{} GB/s memory bandwidth", k.gb_per_s),
                None => "bandwidth not in sparkctl's table (set SPARKCTL_BANDWIDTH_GBPS for \
                         the roofline)"
                    .into(),
            };
            format!(
                "{}, compute capability {}, {memory}, {bandwidth}",
                g.name, g.compute_capability
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// `gpus_unified`: Some(true) on a Spark (one pool), Some(false) where GPUs have memory
/// of their own (host RAM is then only for servers that use no GPU), None without a GPU.
fn memory_check(
    meminfo: Option<crate::host::MemInfo>,
    gpus_unified: Option<bool>,
    settings: &Settings,
) -> Check {
    let Some(m) = meminfo else {
        return check(
            "memory",
            Verdict::Warn,
            "/proc/meminfo gives no MemTotal/MemAvailable; set SPARKCTL_MEMORY_GB to the \
             machine's memory",
        );
    };
    let source = match settings.as_set(&[crate::settings::MEMORY_GB]).pop() {
        Some(set) => format!("pool set by {set}"),
        None => "pool = installed memory".to_string(),
    };
    let (shared, who) = match gpus_unified {
        Some(true) => (", shared by CPU and GPU", "servers"),
        Some(false) => (
            " of host RAM",
            "servers that use no GPU (those on a GPU are planned against its own memory)",
        ),
        None => ("", "servers"),
    };
    check(
        "memory",
        Verdict::Ok,
        format!(
            "{:.1} GB installed{shared}, {:.1} GB available now; {who} may use {:.1} GB \
             together ({source}, minus SPARKCTL_MEMORY_RESERVE_GB, default 8)",
            m.total as f64 / 1e9,
            m.available as f64 / 1e9,
            settings.memory_budget_gb
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(name: &str, memory: Option<u64>, cap: &str) -> Gpu {
        Gpu {
            name: name.into(),
            memory_total_bytes: memory,
            compute_capability: cap.into(),
        }
    }

    #[test]
    fn a_gb10_is_said_to_share_system_memory_with_the_meminfo_size() {
        let spark = [gpu("NVIDIA GB10", None, "12.1")];
        let detail = gpu_detail(&spark, Some(128_526_000_000));
        assert_eq!(
            detail,
            "NVIDIA GB10, compute capability 12.1, shares the system's 128.5 GB (unified \
             memory: nvidia-smi reports [N/A], /proc/meminfo counts it), 273 GB/s memory \
             bandwidth"
        );
        assert!(gpu_detail(&spark, None).contains("shares the system's memory"));
    }

    #[test]
    fn a_discrete_gpu_shows_its_own_memory() {
        let detail = gpu_detail(
            &[gpu("NVIDIA GeForce RTX 4090", Some(24564 << 20), "8.9")],
            None,
        );
        assert_eq!(
            detail,
            "NVIDIA GeForce RTX 4090, compute capability 8.9, 24564 MiB of its own, 1008 GB/s \
             memory bandwidth"
        );
    }

    #[test]
    fn the_memory_check_says_shared_on_a_spark_and_warns_without_meminfo() {
        let settings = Settings::with_pool(120.0, false);
        let m = crate::host::MemInfo {
            total: 128_000_000_000,
            available: 100_000_000_000,
        };
        let c = memory_check(Some(m), Some(true), &settings);
        assert_eq!(c.verdict, Verdict::Ok);
        assert!(
            c.detail.starts_with("128.0 GB installed, shared by CPU and GPU, 100.0 GB available now; servers may use 120.0 GB"),
            "{}",
            c.detail
        );
        let discrete = memory_check(Some(m), Some(false), &settings).detail;
        assert!(!discrete.contains("shared"), "{discrete}");
        assert!(
            discrete.contains("servers that use no GPU (those on a GPU are planned against its own memory) may use 120.0 GB"),
            "{discrete}"
        );
        let c = memory_check(None, Some(true), &settings);
        assert_eq!(c.verdict, Verdict::Warn);
        assert!(c.detail.contains("SPARKCTL_MEMORY_GB"));
    }
}
