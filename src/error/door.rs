//! What the front door, or work handed to a task of ours, did not do: the facts, worded
//! here.

use std::fmt;
use std::path::PathBuf;

/// The front door answered, but not as asked, or its process did not do what it should
/// (`Error::DoorFailed`, after "the front door ").
#[derive(Debug)]
pub enum DoorProblem {
    /// An answer to `route` this sparkctl cannot read (another version's, say).
    Unreadable { route: String, cause: String },
    /// The process just spawned exited before it answered (`status`: its exit status).
    ExitedAtOnce {
        status: String,
        log: PathBuf,
        tail: String,
    },
    /// The process just spawned did not answer within `secs`.
    Silent {
        secs: u64,
        log: PathBuf,
        tail: String,
    },
    /// Asked to stop, its process was still there after `secs`.
    NotStopped { pid: u32, secs: u64 },
    /// Asked to restart, no new server answered within `secs`.
    NotRestarted { secs: u64, log: PathBuf },
    /// A rollout (`mode`: shadow or canary) of `name` ended before it decided.
    RolloutEnded { mode: &'static str, name: String },
    /// Handed `name`'s instance (`id`), it routes elsewhere.
    NotRouting { name: String, id: String },
}

impl fmt::Display for DoorProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DoorProblem::Unreadable { route, cause } => {
                write!(f, "gave a {route} this sparkctl cannot read ({cause})")
            }
            DoorProblem::ExitedAtOnce { status, log, tail } => write!(
                f,
                "exited at once ({status}); its log {} says:\n{tail}",
                log.display()
            ),
            DoorProblem::Silent { secs, log, tail } => write!(
                f,
                "did not answer within {secs} s; its log {} says:\n{tail}",
                log.display()
            ),
            DoorProblem::NotStopped { pid, secs } => {
                write!(f, "(pid {pid}) did not stop within {secs} s")
            }
            DoorProblem::NotRestarted { secs, log } => write!(
                f,
                "did not restart within {secs} s; its log: {}",
                log.display()
            ),
            DoorProblem::RolloutEnded { mode, name } => {
                write!(f, "ended the {mode} of {name} before its decision")
            }
            DoorProblem::NotRouting { name, id } => {
                write!(
                    f,
                    "does not route to {name} ({})",
                    crate::units::short_id(id)
                )
            }
        }
    }
}

/// Work handed to another thread or task that never came back (`Error::TaskLost`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Task {
    /// One model's watch in the front door.
    ModelWatch,
    /// The front door's watch over production.
    DoorWatch,
    /// A state file written off the async threads.
    WritingState,
    /// A model's files hashed off the async threads.
    Fingerprinting,
}

impl fmt::Display for Task {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Task::ModelWatch => "a model's watch",
            Task::DoorWatch => "the front door's watch",
            Task::WritingState => "writing state",
            Task::Fingerprinting => "fingerprinting",
        })
    }
}
