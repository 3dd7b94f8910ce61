//! `doctor`: is this machine ready to serve? Each check says what it found and, when
//! something is wrong, what to do.

mod nodes;

use serde::Serialize;

use crate::context::{Context, Settings};
use crate::deploy::{self, PortOwner};
use crate::nvidia::Gpu;
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

impl Verdict {
    /// How a check's line is marked.
    pub fn mark(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Warn => "warn",
            Verdict::Fail => "FAIL",
        }
    }
}

/// Ok unless a check failed: then how many did.
pub fn outcome(checks: &[Check]) -> crate::error::Result<()> {
    match checks.iter().filter(|c| c.verdict == Verdict::Fail).count() {
        0 => Ok(()),
        n => Err(crate::error::Error::Failed(format!(
            "{n} check(s) failed; see the FAIL lines above"
        ))),
    }
}

fn check(name: impl Into<String>, verdict: Verdict, detail: impl Into<String>) -> Check {
    Check {
        name: name.into(),
        verdict,
        detail: detail.into(),
    }
}

/// Every check, in the order `doctor` prints them.
pub async fn run(ctx: &Context, recipes: &RecipeSet) -> Vec<Check> {
    let mut checks = engine_checks(&ctx.runtimes, recipes).await;
    checks.extend(gpu_and_memory(&ctx.settings).await);
    // A recipe file that does not load is the user's to fix, not the machine's: a warning,
    // and its port is not checked (it cannot be known).
    for b in &recipes.broken {
        checks.push(check(
            format!("recipe {}", b.path.display()),
            Verdict::Warn,
            b.to_string(),
        ));
    }
    checks.extend(port_checks(&ctx.runtimes, recipes).await);
    checks.push(match ctx.state.check_writable() {
        Ok(()) => check(
            "state dir",
            Verdict::Ok,
            format!("{} is writable", ctx.state.root().display()),
        ),
        Err(e) => check("state dir", Verdict::Fail, e.to_string()),
    });
    checks.push(frontdoor_check(&ctx.state, &ctx.settings));
    // Multi-node recipes: every node they name.
    checks.extend(nodes::run(recipes).await);
    checks
}

/// The Docker Engine and its `nvidia` runtime; without an engine, a failure only when a
/// recipe needs containers.
async fn engine_checks(rt: &Runtimes, recipes: &RecipeSet) -> Vec<Check> {
    let docker_recipes = recipes
        .recipes
        .iter()
        .filter(|r| r.recipe.runtime() == Runtime::Docker);
    let gpu_recipes: Vec<&str> = docker_recipes
        .clone()
        .filter(|r| r.recipe.server.gpus.is_some())
        .map(|r| r.recipe.name.as_str())
        .collect();
    let docker = match rt.docker() {
        Ok(docker) => docker,
        Err(e) => {
            let verdict = match docker_recipes.count() {
                0 => Verdict::Warn,
                _ => Verdict::Fail,
            };
            return vec![check("docker engine", verdict, e.to_string())];
        }
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
        Err(e) => check("docker engine", Verdict::Fail, e.to_string()),
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

/// Each port the recipes use, once, with the recipes that use it and who holds it now.
async fn port_checks(rt: &Runtimes, recipes: &RecipeSet) -> Vec<Check> {
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
    let mut checks = Vec::new();
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
    checks
}

/// Whether the front door runs, and whether it comes back after a reboot.
fn frontdoor_check(state: &StateDir, settings: &Settings) -> Check {
    let running = crate::frontdoor::supervisor::running(state);
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
    let source = match std::env::var("SPARKCTL_MEMORY_GB") {
        Ok(v) if !v.is_empty() => format!("pool set by SPARKCTL_MEMORY_GB={v}"),
        _ => "pool = installed memory".to_string(),
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
        let settings = Settings {
            memory_budget_gb: 120.0,
            production_port: 8003,
        };
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
