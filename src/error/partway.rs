//! What a flow stopped part-way left: what an interrupt (Ctrl-C, SIGTERM, SIGHUP)
//! stopped, what a failed flow put back, a bisect kept for `--resume`. The facts, worded
//! here.

use std::fmt;

use super::Error;

/// What was interrupted, and what was left of it.
#[derive(Debug)]
pub enum Interruption {
    /// The signal itself: the flow that meets it puts back what it changed and says so.
    Signal,
    /// A server's start, before it was ready: stopped, its logs kept; or its stop failed
    /// (`stop_failed`: why).
    BeforeReady {
        name: String,
        stop_failed: Option<String>,
    },
    /// A job's inputs, while they were fingerprinted: nothing was started.
    Fingerprinting { job: String },
    /// A node group's start: the group was stopped on every node (`stopped`: which, as the
    /// group says it, starting with its separator).
    GroupStopped {
        cause: Box<Interruption>,
        stopped: String,
    },
}

impl fmt::Display for Interruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Interruption::Signal => f.write_str("interrupted"),
            Interruption::BeforeReady {
                name,
                stop_failed: None,
            } => write!(
                f,
                "interrupted: stopped {name} before it was ready; its logs are kept \
                 (`sparkctl logs {name}`)"
            ),
            Interruption::BeforeReady {
                name,
                stop_failed: Some(e),
            } => write!(
                f,
                "interrupted, and stopping {name} failed ({e}); `sparkctl status` shows what \
                 runs"
            ),
            Interruption::Fingerprinting { job } => write!(
                f,
                "interrupted while fingerprinting the inputs of {job}; nothing was started"
            ),
            Interruption::GroupStopped { cause, stopped } => {
                write!(f, "{cause}; the group was stopped on every node{stopped}")
            }
        }
    }
}

/// A flow that failed after it began (`Error::Undone`), and what its way back did.
#[derive(Debug)]
pub enum Undoing {
    /// `adopt NAME`: what its way back put back (none: nothing had changed), and why its
    /// run record was not written, if it was not.
    Adopt {
        name: String,
        put_back: Vec<String>,
        unrecorded: Option<String>,
    },
    /// A start of `name` on its nodes: the group was stopped on every node (`stopped`:
    /// which, as the group says it, starting with its separator).
    NodeStart { name: String, stopped: String },
}

impl Undoing {
    /// What failed.
    pub(super) fn what(&self) -> String {
        match self {
            Undoing::Adopt { name, .. } => format!("adopt {name}"),
            Undoing::NodeStart { name, .. } => format!("starting {name} on its nodes"),
        }
    }

    /// What was put back.
    pub(super) fn put_back(&self) -> String {
        match self {
            Undoing::Adopt {
                put_back,
                unrecorded,
                ..
            } => {
                let mut notes = match put_back.is_empty() {
                    true => "nothing had changed".to_string(),
                    false => put_back.join("; "),
                };
                if let Some(w) = unrecorded {
                    notes.push_str(&format!("\n  run record not written: {w}"));
                }
                notes
            }
            Undoing::NodeStart { stopped, .. } => {
                format!("the group was stopped on every node{stopped}")
            }
        }
    }
}

/// A bisect that stopped on an error or an interrupt: what was put back, and what of it
/// is kept for `--resume`.
#[derive(Debug)]
pub struct BisectStopped {
    pub(crate) recipe: String,
    pub(crate) cause: Error,
    /// What the step's way back did, each in its own words.
    pub(crate) put_back: Vec<String>,
    /// The measurements recorded, or why the bisect's record was not written.
    pub(crate) kept: Result<usize, String>,
}

impl fmt::Display for BisectStopped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let recipe = &self.recipe;
        write!(f, "bisect of {recipe} stopped: {}", self.cause)?;
        if !self.put_back.is_empty() {
            write!(f, "\n  {}", self.put_back.join("; "))?;
        }
        match &self.kept {
            Ok(n) => write!(
                f,
                "\n  {n} measurement(s) recorded; `sparkctl bisect {recipe} --resume` goes on \
                 from them"
            ),
            Err(w) => write!(f, "\n  the bisect's record was not written ({w})"),
        }
    }
}
