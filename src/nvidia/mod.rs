//! The NVIDIA driver's view of the machine, through `nvidia-smi` (a fixed argv, never a
//! shell).
//!
//! On a DGX Spark the GB10's GPU has no memory of its own: CPU and GPU share one unified
//! pool, NVML answers "Not Supported" for the device's memory, and nvidia-smi prints
//! `[N/A]` where a discrete GPU prints `122880 MiB`. Per-process use
//! (`--query-compute-apps`) is still reported. So every memory figure here is an Option:
//! None means "the driver gives no figure", never zero.

pub(crate) mod bandwidth;
pub(crate) mod device;

use std::time::Duration;

use serde::Serialize;

/// What `gpus()` asks; `parse_gpus` reads the fields in this order.
const GPU_QUERY: [&str; 2] = [
    "--query-gpu=name,memory.total,compute_cap",
    "--format=csv,noheader",
];
/// What `compute_apps()` asks; `parse_compute_apps` reads the fields in this order.
const APPS_QUERY: [&str; 2] = [
    "--query-compute-apps=pid,used_memory",
    "--format=csv,noheader,nounits",
];

/// What `free_memory()` asks: each GPU's free memory, in MiB.
const FREE_QUERY: [&str; 2] = ["--query-gpu=memory.free", "--format=csv,noheader,nounits"];

/// A wedged driver can make nvidia-smi hang; nothing sparkctl does should hang with it.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Why nvidia-smi gave no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SmiError {
    #[error("nvidia-smi is not on PATH (no NVIDIA driver on this machine?)")]
    NotInstalled,
    #[error("nvidia-smi did not run: {0}")]
    DidNotRun(String),
    #[error("nvidia-smi did not answer within {}s (is the driver wedged? try `nvidia-smi` by hand)", TIMEOUT.as_secs())]
    TimedOut,
    #[error("nvidia-smi failed: {0}")]
    Exited(String),
    #[error("nvidia-smi printed {line:?}, which sparkctl cannot read: {why}")]
    Unreadable { line: String, why: String },
}

/// One GPU as nvidia-smi reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Gpu {
    pub(crate) name: String,
    /// The GPU's own memory; None when the driver reports none (`[N/A]` on a GB10, whose GPU
    /// shares the system's memory).
    pub(crate) memory_total_bytes: Option<u64>,
    pub(crate) compute_capability: String,
}

impl Gpu {
    /// No memory of its own to report: on a Spark, the unified pool /proc/meminfo counts.
    pub(crate) fn shares_system_memory(&self) -> bool {
        self.memory_total_bytes.is_none()
    }
}

/// One process using a GPU, from `--query-compute-apps`. A process on several GPUs has one
/// row per GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct ComputeApp {
    pub(crate) pid: u32,
    /// None when nvidia-smi prints `[N/A]` for it (e.g. without permission to see it).
    pub(crate) used_bytes: Option<u64>,
}

/// The GPUs nvidia-smi lists.
pub(crate) async fn gpus() -> Result<Vec<Gpu>, SmiError> {
    parse_gpus(&query(&GPU_QUERY).await?)
}

/// GPU memory per process, on every GPU.
pub(crate) async fn compute_apps() -> Result<Vec<ComputeApp>, SmiError> {
    parse_compute_apps(&query(&APPS_QUERY).await?)
}

/// Each GPU's free memory now, in nvidia-smi's index order; None where it reports no figure
/// (`[N/A]` on a GB10, whose GPU has no memory of its own).
pub(crate) async fn free_memory() -> Result<Vec<Option<u64>>, SmiError> {
    query(&FREE_QUERY)
        .await?
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|line| memory_field(line).map_err(|why| unreadable(line, why)))
        .collect()
}

async fn query(args: &[&str]) -> Result<String, SmiError> {
    let mut cmd = tokio::process::Command::new(&crate::settings::environment().nvidia_smi);
    cmd.args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let out = match tokio::time::timeout(TIMEOUT, cmd.output()).await {
        Err(_) => return Err(SmiError::TimedOut),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(SmiError::NotInstalled)
        }
        Ok(Err(e)) => return Err(SmiError::DidNotRun(e.to_string())),
        Ok(Ok(out)) => out,
    };
    if !out.status.success() {
        // nvidia-smi writes its reasons ("couldn't communicate with the NVIDIA driver") to stdout.
        let said = [&out.stderr[..], &out.stdout[..]]
            .iter()
            .map(|b| String::from_utf8_lossy(b).trim().to_string())
            .find(|s| !s.is_empty())
            .unwrap_or_else(|| format!("exit status {}", out.status));
        return Err(SmiError::Exited(said));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn unreadable(line: &str, why: impl Into<String>) -> SmiError {
    SmiError::Unreadable {
        line: line.to_string(),
        why: why.into(),
    }
}

/// A memory field: `122880 MiB`, `122880` (with `nounits`: MiB), or one of the placeholders
/// nvidia-smi prints instead of a figure (`[N/A]`, `[Not Supported]`,
/// `[Insufficient Permissions]`, `N/A`, empty), which mean "no figure".
fn memory_field(field: &str) -> Result<Option<u64>, String> {
    let field = field.trim();
    if field.is_empty() || field == "N/A" || (field.starts_with('[') && field.ends_with(']')) {
        return Ok(None);
    }
    let number = field.strip_suffix("MiB").unwrap_or(field).trim();
    number
        .parse::<u64>()
        .map(|mib| Some(mib << 20))
        .map_err(|_| format!("`{field}` is neither MiB nor a placeholder such as [N/A]"))
}

fn fields(line: &str, n: usize) -> Result<Vec<&str>, SmiError> {
    let fields: Vec<&str> = line.split(',').map(str::trim).collect();
    if fields.len() != n {
        return Err(unreadable(
            line,
            format!("{} comma-separated fields, expected {n}", fields.len()),
        ));
    }
    Ok(fields)
}

/// Lines of `--query-gpu=name,memory.total,compute_cap --format=csv,noheader`.
fn parse_gpus(csv: &str) -> Result<Vec<Gpu>, SmiError> {
    csv.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            // A GPU name never holds a comma; the fields are split from the right anyway,
            // so one would not shift the figures.
            let mut parts = line.rsplitn(3, ',').map(str::trim);
            let (cap, memory, name) = match (parts.next(), parts.next(), parts.next()) {
                (Some(c), Some(m), Some(n)) => (c, m, n),
                _ => return Err(unreadable(line, "expected name, memory.total, compute_cap")),
            };
            Ok(Gpu {
                name: name.to_string(),
                memory_total_bytes: memory_field(memory).map_err(|why| unreadable(line, why))?,
                compute_capability: cap.to_string(),
            })
        })
        .collect()
}

/// Lines of `--query-compute-apps=pid,used_memory --format=csv,noheader,nounits`.
fn parse_compute_apps(csv: &str) -> Result<Vec<ComputeApp>, SmiError> {
    csv.lines()
        .map(str::trim)
        // Some driver versions say so instead of printing nothing.
        .filter(|l| !l.is_empty() && !l.starts_with("No running processes found"))
        .map(|line| {
            let f = fields(line, 2)?;
            Ok(ComputeApp {
                pid: f[0]
                    .parse()
                    .map_err(|_| unreadable(line, format!("`{}` is not a pid", f[0])))?,
                used_bytes: memory_field(f[1]).map_err(|why| unreadable(line, why))?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gb10_reports_no_memory_of_its_own() {
        // What a DGX Spark prints: NVML says "Not Supported" for unified memory.
        let gpus = parse_gpus("NVIDIA GB10, [N/A], 12.1\n").unwrap();
        assert_eq!(
            gpus,
            vec![Gpu {
                name: "NVIDIA GB10".into(),
                memory_total_bytes: None,
                compute_capability: "12.1".into(),
            }]
        );
        assert!(gpus[0].shares_system_memory());
        let not_supported = parse_gpus("NVIDIA GB10, [Not Supported], 12.1\n").unwrap();
        assert_eq!(not_supported[0].memory_total_bytes, None);
    }

    #[test]
    fn a_discrete_gpu_reports_its_memory_in_mib() {
        let gpus = parse_gpus(
            "NVIDIA H100 80GB HBM3, 81559 MiB, 9.0\nNVIDIA GeForce RTX 4090, 24564 MiB, 8.9\n",
        )
        .unwrap();
        assert_eq!(gpus.len(), 2);
        assert_eq!(gpus[0].name, "NVIDIA H100 80GB HBM3");
        assert_eq!(gpus[0].memory_total_bytes, Some(81559 << 20));
        assert_eq!(gpus[1].memory_total_bytes, Some(24564 << 20));
        assert_eq!(gpus[1].compute_capability, "8.9");
        assert!(!gpus[1].shares_system_memory());
    }

    #[test]
    fn gpu_output_that_is_not_the_query_is_an_error_naming_the_line() {
        let err = parse_gpus("NVIDIA GB10, 12 GB, 12.1\n").unwrap_err();
        assert!(
            err.to_string().contains("NVIDIA GB10, 12 GB, 12.1"),
            "{err}"
        );
        assert!(err.to_string().contains("neither MiB"), "{err}");
        assert!(parse_gpus("NVIDIA GB10\n").is_err());
        assert_eq!(parse_gpus("").unwrap(), vec![]);
    }

    #[test]
    fn compute_apps_parse_with_and_without_figures() {
        // A GB10 still reports per-process use; a process another user owns may show [N/A].
        let apps = parse_compute_apps("4242, 98304\n4300, [N/A]\n4242, 2048\n").unwrap();
        assert_eq!(
            apps,
            vec![
                ComputeApp {
                    pid: 4242,
                    used_bytes: Some(98304 << 20)
                },
                ComputeApp {
                    pid: 4300,
                    used_bytes: None
                },
                ComputeApp {
                    pid: 4242,
                    used_bytes: Some(2048 << 20)
                },
            ]
        );
        assert_eq!(parse_compute_apps("").unwrap(), vec![]);
        assert_eq!(
            parse_compute_apps("No running processes found\n").unwrap(),
            vec![]
        );
        assert!(parse_compute_apps("python3, 100\n").is_err());
        assert!(parse_compute_apps("4242\n").is_err());
    }
}
