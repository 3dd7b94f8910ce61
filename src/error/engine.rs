//! Engines that do not answer and what failed on a node: the facts, worded here.

use std::fmt;
use std::time::Duration;

/// Why this machine's Docker Engine is said not to answer (`Error::EngineUnreachable`).
#[derive(Debug, Clone)]
pub enum Reach {
    /// The client's own words.
    Said(String),
    /// What was being done (`doing`), and the client's words.
    Doing { doing: String, said: String },
    /// It did not answer when the command began, and this needs it.
    Needed(EngineNeed),
}

/// What needed an engine that did not answer when the command began.
#[derive(Debug, Clone)]
pub enum EngineNeed {
    /// To `doing` (find, stop, start, inspect) the container `name`.
    Container { doing: &'static str, name: String },
    /// The chown step's helper container.
    ChownHelper,
}

impl fmt::Display for Reach {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reach::Said(said) => f.write_str(said),
            Reach::Doing { doing, said } => write!(f, "{doing}: {said}"),
            Reach::Needed(EngineNeed::Container { doing, name }) => {
                write!(f, "needed to {doing} container {name}")
            }
            Reach::Needed(EngineNeed::ChownHelper) => {
                f.write_str("needed for the chown step's helper container")
            }
        }
    }
}

/// What failed on a member node of a `nodes:` recipe (`Error::OnNode`).
#[derive(Debug)]
pub enum NodeProblem {
    /// Its container (`role`) ended (`exit`) before every node joined Ray.
    Ended { role: &'static str, exit: String },
    /// Ray saw fewer nodes or GPUs than the recipe's after `after` (`port`: Ray's).
    RayShort {
        nodes: (usize, usize),
        gpus: (u32, u32),
        after: Duration,
        port: u16,
    },
    /// The image copied from `head` has another id there (`got`; None: none).
    WrongImage {
        head: String,
        got: Option<String>,
        id: String,
    },
    /// It lacks image `id`, and copying it from `head` failed (`why`).
    CopyFailed {
        id: String,
        head: String,
        why: String,
    },
}

impl fmt::Display for NodeProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeProblem::Ended { role, exit } => {
                write!(f, "its {role} {exit} before every node joined Ray")
            }
            NodeProblem::RayShort {
                nodes,
                gpus,
                after,
                port,
            } => write!(
                f,
                "Ray reports {} of {} nodes ({} of {} GPUs) after {after:?}: a worker never \
                 joined; check that the nodes reach each other on their high-speed addresses \
                 (`sparkctl doctor RECIPE`) and that port {port} is open on the head",
                nodes.0, nodes.1, gpus.0, gpus.1
            ),
            NodeProblem::WrongImage { head, got, id } => write!(
                f,
                "the image copied from {head} has id {} there, not {id}; refusing to run \
                 different bits on different nodes",
                got.as_deref().unwrap_or("(none)")
            ),
            NodeProblem::CopyFailed { id, head, why } => write!(
                f,
                "it lacks image {} and copying it from {head} failed ({why}); load it there \
                 (`docker save` / `docker load`) or pull the pinned digest on that node",
                crate::units::short_id(id)
            ),
        }
    }
}
