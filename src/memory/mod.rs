//! After a start: does the deployment hold what its recipe declared (`server.memory_gb`)?
//!
//! The memory plan trusts declarations. Once a server is ready this measures what it really
//! holds, with every measure this machine offers, each saying how it was taken or why it
//! could not be:
//!
//! - **GPU**: the GPU memory of the deployment's processes (`nvidia-smi
//!   --query-compute-apps`). On a Spark the driver takes it from the unified pool; a GB10
//!   reports it per process although the device's own total is `[N/A]`.
//! - **resident**: CPU memory: the container's cgroup use, counted as `docker stats` counts it,
//!   or the VmRSS of a process deployment's session (the server and every worker it started).
//! - **MemAvailable** before the start vs after readiness: sees everything, the driver's
//!   allocations included, but every other process on the machine moves it too, so it is
//!   reported as noisy and used only when nothing better was measured.
//!
//! The declaration is checked against the best of them (GPU + resident, either alone, then
//! MemAvailable), and a deployment holding more than it declared gets a warning: the plan
//! undercounts it, and the next start that trusts the plan may run out of memory.

use serde::{Deserialize, Serialize};

mod holder;
pub(crate) mod learned;
mod measure;
mod plan;
pub(crate) mod pools;

pub(crate) use holder::Holder;
pub(crate) use plan::{for_server, Floor, MemoryPlan};

use crate::host::{self, MemInfo};
use crate::runtime::{Deployment, Runtimes};
use measure::{gpu_figure, holdings};

/// The plan counts in decimal GB (`memory_gb` against MemTotal / 1e9); so does this.
const GB: f64 = 1e9;

pub(crate) fn format_gb(bytes: u64) -> String {
    format!("{:.2} GB", bytes as f64 / GB)
}

/// What the machine looked like just before a start.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Before {
    meminfo: Option<MemInfo>,
}

pub(crate) fn before_start() -> Before {
    Before {
        meminfo: host::meminfo(),
    }
}

/// How the deployment's processes were found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum PidSource {
    /// The process deployment's session (/proc: same session, or descended from it).
    ProcessSession,
    /// The Engine API's `top` (the processes of the container's cgroup, as host pids).
    DockerTop,
    /// The container's main process only (`top` failed; workers it forked are missed).
    ContainerMainPid,
    /// None found.
    Unknown,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Processes {
    /// Host pids (what nvidia-smi lists).
    pids: Vec<u32>,
    found_by: PidSource,
    detail: String,
}

/// Which instrument a figure comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Method {
    /// `nvidia-smi --query-compute-apps=pid,used_memory`, summed over the deployment's pids.
    NvidiaSmiComputeApps,
    /// The container's cgroup memory (Engine API one-shot stats), less inactive page cache.
    ContainerCgroup,
    /// VmRSS of /proc/PID/status summed over the process deployment's session.
    SessionRss,
}

/// One measured figure, or why there is none.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Figure {
    method: Method,
    /// None: not measured (`how` says why). Never a guess.
    bytes: Option<u64>,
    /// How it was measured, or why it could not be.
    how: String,
}

impl Figure {
    fn measured(method: Method, bytes: u64, how: impl Into<String>) -> Figure {
        Figure {
            method,
            bytes: Some(bytes),
            how: how.into(),
        }
    }

    fn missing(method: Method, why: impl Into<String>) -> Figure {
        Figure {
            method,
            bytes: None,
            how: format!("not measured: {}", why.into()),
        }
    }
}

/// MemAvailable (/proc/meminfo) just before the start and after readiness.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct MemAvailableDelta {
    before_bytes: Option<u64>,
    after_bytes: Option<u64>,
    /// before − after: what the machine lost meanwhile (negative: memory was freed).
    drop_bytes: Option<i64>,
    /// Always true: other processes and the page cache move MemAvailable as well.
    noisy: bool,
    how: String,
}

/// The measure the declaration is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Measure {
    GpuPlusResident,
    Resident,
    Gpu,
    MemAvailableDrop,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Best {
    measure: Measure,
    pub(crate) bytes: u64,
    /// The measure in words, with its limits.
    pub(crate) what: String,
}

/// What a deployment holds once ready, next to what it declared.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct MemoryObserved {
    /// `server.memory_gb`, what the memory plan counts for it.
    declared_gb: Option<f64>,
    processes: Processes,
    gpu: Figure,
    resident: Figure,
    mem_available: MemAvailableDelta,
    /// The most reliable measure taken; None when nothing could be measured.
    pub(crate) best: Option<Best>,
    /// `best` above `declared_gb`; None when either is missing.
    exceeds_declared: Option<bool>,
}

/// Measures what `d`, just turned ready, holds.
pub(crate) async fn observe(rt: &Runtimes, d: &Deployment, before: Before) -> MemoryObserved {
    // First, so the work below moves it as little as possible.
    let after = host::meminfo();
    let ((processes, resident), apps) =
        tokio::join!(holdings(rt, d), crate::nvidia::compute_apps());
    let gpu = gpu_figure(&processes.pids, apps);
    let mem_available = mem_available(before.meminfo, after);
    let best = best(&gpu, &resident, &mem_available);
    let exceeds_declared = exceeds(best.as_ref(), d.memory_gb);
    MemoryObserved {
        declared_gb: d.memory_gb,
        processes,
        gpu,
        resident,
        mem_available,
        best,
        exceeds_declared,
    }
}

/// What a running deployment holds now, beside what it declared (`status` shows it).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Held {
    declared_gb: Option<f64>,
    /// Its processes' GPU memory (nvidia-smi), or why it is not known.
    gpu: Figure,
    /// Its processes' resident memory (VmRSS, or the container's cgroup).
    resident: Figure,
    /// What the memory plan counts it holding (its GPU memory, and on unified memory its
    /// own resident pages, page cache left out); None: not measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) counted_gb: Option<f64>,
    /// It holds more than it declares: the plan counts what it holds.
    #[serde(default)]
    pub(crate) over_declared: bool,
}

impl Held {
    /// `GPU 3.47 GB + RSS 0.52 GB (declared 7.1 GB)`, with `-` for what is not known, and
    /// both figures when it holds more than it declares.
    pub(crate) fn summary(&self) -> String {
        let fig = |f: &Figure| f.bytes.map_or("-".into(), format_gb);
        let over = match (self.over_declared, self.counted_gb) {
            (true, Some(gb)) => format!(
                "; holds {gb:.2} GB, more than {}: planned at {gb:.2} GB",
                self.declared_gb
                    .map_or("none declared".into(), |g| format!("its declared {g} GB"))
            ),
            _ => String::new(),
        };
        format!(
            "GPU {} + RSS {} ({}){over}",
            fig(&self.gpu),
            fig(&self.resident),
            self.declared_gb
                .map_or("none declared".into(), |g| format!("declared {g} GB"))
        )
    }
}

/// What each of `running` holds now: one nvidia-smi query for all of them.
pub(crate) async fn held(rt: &Runtimes, running: &[&Deployment]) -> Vec<Held> {
    let (apps, devices) = tokio::join!(
        crate::nvidia::compute_apps(),
        crate::nvidia::device::Devices::probe()
    );
    let discrete = devices.kind() == crate::nvidia::device::Kind::Discrete;
    let listed = apps.clone().unwrap_or_default();
    let mut out = Vec::new();
    for d in running {
        let (processes, resident) = holdings(rt, d).await;
        let counted_gb = measure::share_of(d, &processes, &resident, &listed).gb(discrete);
        out.push(Held {
            declared_gb: d.memory_gb,
            gpu: gpu_figure(&processes.pids, apps.clone()),
            resident,
            over_declared: counted_gb.is_some_and(|gb| gb > d.memory_gb.unwrap_or(0.0)),
            counted_gb,
        });
    }
    out
}

fn exceeds(best: Option<&Best>, declared_gb: Option<f64>) -> Option<bool> {
    Some(best?.bytes as f64 > declared_gb? * GB)
}

impl MemoryObserved {
    /// One line for people: the best figure against the declaration.
    pub(crate) fn summary(&self) -> String {
        let declared = self
            .declared_gb
            .map(|g| format!("declared {g} GB"))
            .unwrap_or_else(|| "no memory_gb declared".into());
        match &self.best {
            Some(b) => format!("holds {} ({}); {declared}", format_gb(b.bytes), b.what),
            None => format!(
                "nothing could be measured ({}; {}); {declared}",
                self.gpu.how, self.resident.how
            ),
        }
    }

    /// What the person who starts `name` should know: it holds more than the plan counts.
    pub(crate) fn warnings(&self, name: &str) -> Vec<String> {
        let Some(best) = &self.best else {
            return Vec::new();
        };
        let holds = format!("{} ({})", format_gb(best.bytes), best.what);
        match (self.declared_gb, self.exceeds_declared) {
            (Some(gb), Some(true)) => vec![format!(
                "{name} holds {holds}, more than its declared server.memory_gb {gb} GB; the memory \
                 plan counts what it held from now on (`sparkctl memory`), but raise memory_gb \
                 in its recipe, or make the server take less (e.g. --gpu-memory-utilization)"
            )],
            (None, _) => vec![format!(
                "{name} declares no server.memory_gb, so the memory plan counts 0 GB for it, but \
                 it holds {holds}; declare memory_gb in its recipe"
            )],
            _ => Vec::new(),
        }
    }
}

fn mem_available(before: Option<MemInfo>, after: Option<MemInfo>) -> MemAvailableDelta {
    let (before_bytes, after_bytes) = (before.map(|m| m.available), after.map(|m| m.available));
    let drop_bytes = match (before_bytes, after_bytes) {
        (Some(b), Some(a)) => Some(b as i64 - a as i64),
        _ => None,
    };
    MemAvailableDelta {
        before_bytes,
        after_bytes,
        drop_bytes,
        noisy: true,
        how: match drop_bytes {
            Some(_) => "MemAvailable (/proc/meminfo) just before the start minus after \
                        readiness; noisy: every other process and the page cache move it too"
                .into(),
            None => "not measured: /proc/meminfo has no MemAvailable here".into(),
        },
    }
}

/// The most reliable measure taken: GPU + resident (on a Spark both come out of the one
/// pool), either alone, then the noisy MemAvailable drop.
fn best(gpu: &Figure, resident: &Figure, mem: &MemAvailableDelta) -> Option<Best> {
    let resident_words = match resident.method {
        Method::ContainerCgroup => "the container's cgroup memory",
        _ => "the resident memory (VmRSS) of its processes",
    };
    let pick = |measure, bytes, what: String| {
        Some(Best {
            measure,
            bytes,
            what,
        })
    };
    match (gpu.bytes, resident.bytes) {
        (Some(g), Some(r)) => pick(
            Measure::GpuPlusResident,
            g + r,
            format!(
                "GPU memory of its processes from nvidia-smi, {}, plus {resident_words}, {}",
                format_gb(g),
                format_gb(r)
            ),
        ),
        (None, Some(r)) => pick(
            Measure::Resident,
            r,
            format!("{resident_words}; GPU allocations not included: no GPU figure"),
        ),
        (Some(g), None) => pick(
            Measure::Gpu,
            g,
            "GPU memory of its processes from nvidia-smi; CPU memory not included: not \
             measurable"
                .into(),
        ),
        (None, None) => match mem.drop_bytes {
            Some(drop) if drop > 0 => pick(
                Measure::MemAvailableDrop,
                drop as u64,
                "the drop of MemAvailable during its start; noisy: other processes move it too"
                    .into(),
            ),
            _ => None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fig(method: Method, bytes: Option<u64>) -> Figure {
        match bytes {
            Some(b) => Figure::measured(method, b, "test"),
            None => Figure::missing(method, "test"),
        }
    }

    fn mem(drop: Option<i64>) -> MemAvailableDelta {
        let before = MemInfo {
            total: 100 << 30,
            available: 50 << 30,
        };
        let after = drop.map(|d| MemInfo {
            available: (before.available as i64 - d) as u64,
            ..before
        });
        mem_available(Some(before), after)
    }

    fn observed(declared_gb: Option<f64>, best: Option<Best>) -> MemoryObserved {
        let exceeds_declared = exceeds(best.as_ref(), declared_gb);
        MemoryObserved {
            declared_gb,
            processes: measure::no_processes("test".into()),
            gpu: fig(Method::NvidiaSmiComputeApps, None),
            resident: fig(Method::SessionRss, None),
            mem_available: mem(None),
            best,
            exceeds_declared,
        }
    }

    #[test]
    fn the_best_measure_prefers_gpu_plus_resident_and_uses_memavailable_last() {
        let gpu = fig(Method::NvidiaSmiComputeApps, Some(90 << 30));
        let res = fig(Method::ContainerCgroup, Some(3 << 30));
        let none = fig(Method::NvidiaSmiComputeApps, None);
        let no_res = fig(Method::SessionRss, None);
        let b = best(&gpu, &res, &mem(Some(200 << 30))).unwrap();
        assert_eq!((b.measure, b.bytes), (Measure::GpuPlusResident, 93 << 30));
        assert!(b.what.contains("cgroup"), "{}", b.what);
        let b = best(&none, &res, &mem(Some(200 << 30))).unwrap();
        assert_eq!((b.measure, b.bytes), (Measure::Resident, 3 << 30));
        assert!(b.what.contains("no GPU figure"), "{}", b.what);
        let b = best(&gpu, &no_res, &mem(None)).unwrap();
        assert_eq!((b.measure, b.bytes), (Measure::Gpu, 90 << 30));
        let b = best(&none, &no_res, &mem(Some(5 << 30))).unwrap();
        assert_eq!((b.measure, b.bytes), (Measure::MemAvailableDrop, 5 << 30));
        assert!(b.what.contains("noisy"), "{}", b.what);
        // Memory freed meanwhile (a negative drop) says nothing about the deployment.
        assert!(best(&none, &no_res, &mem(Some(-(1 << 30)))).is_none());
        assert!(best(&none, &no_res, &mem(None)).is_none());
    }

    #[test]
    fn memavailable_is_labelled_noisy_and_may_rise() {
        let m = mem(Some(-(1 << 30)));
        assert_eq!(m.drop_bytes, Some(-(1 << 30)));
        assert!(m.noisy && m.how.contains("noisy"));
        let m = mem_available(None, None);
        assert_eq!(m.drop_bytes, None);
        assert!(m.how.starts_with("not measured"));
    }

    #[test]
    fn a_deployment_over_its_declaration_is_warned_about_with_the_measure() {
        let b = Best {
            measure: Measure::Resident,
            bytes: 13_500_000_000,
            what: "the container's cgroup memory".into(),
        };
        let over = observed(Some(12.0), Some(b.clone()));
        assert_eq!(over.exceeds_declared, Some(true));
        let w = over.warnings("cand");
        assert_eq!(w.len(), 1);
        assert!(
            w[0].starts_with("cand holds 13.50 GB (the container's cgroup memory), more than"),
            "{}",
            w[0]
        );
        assert!(w[0].contains("declared server.memory_gb 12 GB"), "{}", w[0]);
        assert!(over.summary().contains("declared 12 GB"));

        let within = observed(Some(14.0), Some(b.clone()));
        assert_eq!(within.exceeds_declared, Some(false));
        assert!(within.warnings("cand").is_empty());

        let undeclared = observed(None, Some(b));
        assert_eq!(undeclared.exceeds_declared, None);
        assert!(undeclared.warnings("cand")[0].contains("declares no server.memory_gb"));
    }

    #[test]
    fn nothing_measured_says_so_and_warns_of_nothing() {
        let o = observed(Some(12.0), None);
        assert_eq!(o.exceeds_declared, None);
        assert!(o.warnings("cand").is_empty());
        assert!(o.summary().starts_with("nothing could be measured"));
    }
}
