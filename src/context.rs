//! What the commands that run things share, built once by the CLI: the state dir, both
//! runtimes, where the image lock is, the machine's settings and this binary.

use serde::Serialize;

use crate::error::{Error, Result};
use crate::runtime::Runtimes;

pub(crate) struct Context {
    pub(crate) state: crate::state::StateDir,
    /// images.lock, which containers run their digests from.
    pub(crate) lock_path: std::path::PathBuf,
    pub(crate) runtimes: Runtimes,
    pub(crate) settings: Settings,
    /// This binary: what runs `sparkctl sim` for sim recipes on the host, and the front
    /// door's process.
    pub(crate) self_exe: String,
}

/// Machine-wide settings, from the environment (a config file can come with the state work).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Settings {
    /// GB the servers may use together (unified memory on a Spark, minus a reserve).
    pub(crate) memory_budget_gb: f64,
    /// Where the production backend answers (8003 in the seeds).
    pub(crate) production_port: u16,
    /// `SPARKCTL_MEMORY_RESERVE_GB`: what no start may push available memory under.
    pub(crate) memory_reserve_gb: f64,
    /// The pool is `SPARKCTL_MEMORY_GB`, a size declared, not the machine's MemTotal: what is
    /// available in it is then that pool less what runs, not MemAvailable.
    pub(crate) memory_declared: bool,
}

/// Left to the OS, desktop and page cache when the budget comes from MemTotal.
const DEFAULT_RESERVE_GB: f64 = 8.0;

fn env_number<T: std::str::FromStr>(name: &str) -> Result<Option<T>> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v.trim().parse().map(Some).map_err(|_| {
            Error::Usage(format!(
                "{name}={v} is not a number; unset it or give e.g. {name}=128"
            ))
        }),
        _ => Ok(None),
    }
}

/// A count from the environment (`SPARKCTL_KEEP_EXITED`, `SPARKCTL_KEEP_IMAGES`), or `default`.
pub(crate) fn env_count(name: &str, default: usize) -> Result<usize> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v.trim().parse().map_err(|_| {
            Error::Usage(format!(
                "{name}={v} is not a count; give a whole number such as {default} (0 keeps none)"
            ))
        }),
        _ => Ok(default),
    }
}

impl Settings {
    /// `SPARKCTL_MEMORY_GB` (the whole pool; default MemTotal), `SPARKCTL_MEMORY_RESERVE_GB`
    /// (default 8), `SPARKCTL_PRODUCTION_PORT` (default 8003).
    pub(crate) fn from_env() -> Result<Settings> {
        // The pool is MemTotal, not nvidia-smi's memory.total: a GB10's GPU has no memory
        // of its own (nvidia-smi says [N/A]) and allocates from the memory MemTotal counts.
        let declared = env_number::<f64>("SPARKCTL_MEMORY_GB")?;
        let total = match declared {
            Some(gb) => gb,
            None => {
                crate::host::mem_total_bytes().ok_or_else(|| {
                    Error::Failed(
                        "cannot read MemTotal from /proc/meminfo, so the memory plan has no \
                         pool; set SPARKCTL_MEMORY_GB to the machine's memory (128 on a Spark)"
                            .into(),
                    )
                })? as f64
                    / 1e9
            }
        };
        let reserve =
            env_number::<f64>("SPARKCTL_MEMORY_RESERVE_GB")?.unwrap_or(DEFAULT_RESERVE_GB);
        Ok(Settings {
            memory_budget_gb: (total - reserve).max(0.0),
            production_port: env_number("SPARKCTL_PRODUCTION_PORT")?.unwrap_or(8003),
            memory_reserve_gb: reserve.max(0.0),
            memory_declared: declared.is_some(),
        })
    }
}
