//! The summary a command ends with when it printed its details already
//! (`Error::Reported`): exit 1, and only this line on stderr.

use std::fmt;
use std::path::PathBuf;

/// What a command that printed its details ends with.
#[derive(Debug)]
pub enum Summary {
    /// `doctor`: `n` checks failed.
    ChecksFailed { n: usize },
    /// `run`/`logs` of a job whose run ended so (`state`).
    Job { job: String, state: String },
    /// `eval --gate`: the gate's outcome (`word`), not a pass.
    EvalGate { gate: String, word: &'static str },
    /// `images audit`: something to fix.
    AuditDrift,
    /// `bench`: failed its gates (`reason`), its result kept at `path`.
    BenchFailed {
        name: String,
        reason: String,
        path: PathBuf,
    },
    /// `bench`: could not decide.
    BenchInconclusive {
        name: String,
        reason: String,
        path: PathBuf,
    },
    /// `bench`: stopped on an error; `first`: the first failure, when the reason does not
    /// quote it already.
    BenchError {
        name: String,
        reason: String,
        first: Option<String>,
        path: PathBuf,
    },
    /// `upgrade`: it ended so (`outcome`), in `summary`'s words.
    Upgrade {
        recipe: String,
        outcome: String,
        summary: String,
    },
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Summary::ChecksFailed { n } => {
                write!(f, "{n} check(s) failed; see the FAIL lines above")
            }
            Summary::Job { job, state } => write!(f, "job {job} {state}"),
            Summary::EvalGate { gate, word } => write!(f, "eval_accuracy {gate}: {word}"),
            Summary::AuditDrift => f.write_str(
                "images audit found drift, missing pins or local images that differ (see above)",
            ),
            Summary::BenchFailed { name, reason, path } => {
                write!(f, "{name}: {reason} (result kept in {})", path.display())
            }
            Summary::BenchInconclusive { name, reason, path } => write!(
                f,
                "{name}: inconclusive: {reason} (result kept in {})",
                path.display()
            ),
            Summary::BenchError {
                name,
                reason,
                first,
                path,
            } => {
                write!(f, "{name}: {reason}")?;
                if let Some(first) = first {
                    write!(f, ": {first}")?;
                }
                write!(f, " (partial samples kept in {})", path.display())
            }
            Summary::Upgrade {
                recipe,
                outcome,
                summary,
            } => write!(f, "upgrade {recipe} {outcome}: {summary}"),
        }
    }
}
