//! What must be true before a recipe starts: its port free. Decided from facts, before
//! anything is touched (the memory side is `memory::MemoryPlan`).

use serde::Serialize;

use crate::host::Listener;

/// Who holds a port.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub(crate) enum PortOwner {
    /// One of sparkctl's deployments.
    Deployment {
        name: String,
    },
    /// A container sparkctl did not start (or another state dir's).
    Container {
        name: String,
    },
    Process {
        listener: Listener,
    },
}

impl std::fmt::Display for PortOwner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PortOwner::Deployment { name } => write!(f, "sparkctl deployment {name}"),
            PortOwner::Container { name } => write!(f, "container {name} (not sparkctl's)"),
            PortOwner::Process { listener } => write!(f, "{listener} (not sparkctl's)"),
        }
    }
}
