//! The detail of two failures with more to say than one line: a memory plan that cannot be
//! met, and an `up` or `rollback` that failed and took the way back.

use super::Error;

/// A failed `up` or `rollback`, after the way back.
#[derive(Debug, thiserror::Error)]
#[error(
    "{what} {outcome}: {cause}\n  {notes}\n  serving on port {port}: {serving}\n  run record: {}",
    match record {
        Ok(path) => path.display().to_string(),
        Err(e) => format!("not written ({e})"),
    }
)]
pub struct RunFailure {
    pub(crate) what: String,
    pub(crate) outcome: String,
    pub(crate) cause: Error,
    pub(crate) notes: String,
    pub(crate) port: u16,
    pub(crate) serving: String,
    /// Where the run record was written, or why it was not.
    pub(crate) record: Result<std::path::PathBuf, String>,
}

/// Why a memory plan cannot be met, and so what to do about it.
#[derive(Debug, Clone, PartialEq)]
pub enum Unfit {
    /// Not even with every other server stopped.
    Alone,
    /// Only while these jobs (`NAME N GB`) hold their memory.
    BesideJobs(Vec<String>),
    /// These deployments must stop first (`start` never stops anything itself).
    MustStop(Vec<String>),
    /// A job: not even with every server stopped; the running jobs (`NAME N GB`) that hold
    /// the rest.
    JobAlone(Vec<String>),
    /// It fits the budget, but would leave less available than `SPARKCTL_MEMORY_RESERVE_GB`.
    UnderFloor,
    /// Only if other models' productions (`RECIPE (model M)`) stopped, which a start never
    /// does: their clients would lose them.
    BesideModels(Vec<String>),
}

impl Unfit {
    pub(super) fn when(&self) -> String {
        match self {
            Unfit::Alone => " even alone".into(),
            Unfit::BesideJobs(jobs) => format!(" while job(s) {} run", jobs.join(", ")),
            Unfit::MustStop(_) => String::new(),
            Unfit::JobAlone(_) => " even with every server stopped".into(),
            Unfit::UnderFloor => " above the reserve".into(),
            Unfit::BesideModels(p) => format!(" beside other models' production {}", p.join(", ")),
        }
    }

    pub(super) fn fix(&self) -> String {
        match self {
            Unfit::Alone => "; lower its server.memory_gb (and what the server takes: \
                             --gpu-memory-utilization, -ngl, context size), give it more GPUs, \
                             or raise SPARKCTL_MEMORY_GB if the machine has more"
                .into(),
            Unfit::BesideJobs(_) => {
                "; wait for them (`sparkctl jobs`) or `sparkctl stop JOB`".into()
            }
            Unfit::MustStop(names) => {
                let stop: Vec<String> = names
                    .iter()
                    .map(|n| format!("`sparkctl down {n}`"))
                    .collect();
                format!("; stop {} first", stop.join(", "))
            }
            Unfit::JobAlone(held) if held.is_empty() => String::new(),
            Unfit::JobAlone(held) => format!("; running jobs hold {}", held.join(", ")),
            Unfit::UnderFloor => "; nothing was stopped or started. Free memory held outside \
                                  sparkctl's servers, lower its server.memory_gb, or lower \
                                  SPARKCTL_MEMORY_RESERVE_GB if the machine can spare it"
                .into(),
            Unfit::BesideModels(_) => "; nothing was stopped or started: another model's \
                                       production is not stopped to make room. Take it out of \
                                       production first (`sparkctl down RECIPE --force`), or \
                                       lower server.memory_gb"
                .into(),
        }
    }
}
