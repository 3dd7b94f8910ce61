//! `STATE/production.json`: which deployment serves behind the front door, which served
//! before (the rollback stack), and old ones kept warm for an instant rollback. Only the
//! front door writes it, as the first step of each switch: the file never names a backend
//! the door does not route to.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::state::{self, StateDir};

/// One running instance the front door can send requests to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Upstream {
    pub recipe: String,
    /// Container id or process id: the very instance that was benchmarked.
    pub deployment: String,
    pub url: String,
}

/// One production backend.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Entry {
    pub(crate) recipe: String,
    pub(crate) since: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) run_id: Option<String>,
    /// Its last benchmark result: what `vs_production_*` gates compare with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) bench: Option<PathBuf>,
    /// The instance serving (while it is current or warm).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) upstream: Option<Upstream>,
}

/// A replaced production left running so that `rollback` is a switch, not a start.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Warm {
    pub(crate) upstream: Upstream,
    /// Unix seconds when it is stopped.
    pub(crate) until: u64,
}

/// What serves now, and what served before (a stack).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Production {
    pub(crate) current: Option<Entry>,
    #[serde(default)]
    pub(crate) previous: Vec<Entry>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) warm: Vec<Warm>,
}

impl Production {
    pub(crate) fn load(state: &StateDir) -> Result<Production> {
        let path = state.production_file();
        if !path.exists() {
            return Ok(Production::default());
        }
        state::read_json(&path)
    }

    /// Makes `entry` production; the old one goes on the stack.
    /// The recipe production.json names as production, if it can be read: what the memory
    /// plan stops last.
    pub(crate) fn current_recipe(state: &StateDir) -> Option<String> {
        Production::load(state).ok()?.current.map(|e| e.recipe)
    }

    pub(crate) fn promote(&mut self, entry: Entry) {
        if let Some(old) = self.current.take() {
            self.previous.push(old);
        }
        self.current = Some(entry);
    }

    /// Where requests should go now.
    pub(crate) fn serving(&self) -> Option<&Upstream> {
        self.current.as_ref().and_then(|e| e.upstream.as_ref())
    }

    /// The warm instance of `recipe`, if one is kept.
    pub(crate) fn warm_of(&self, recipe: &str) -> Option<&Warm> {
        self.warm.iter().find(|w| w.upstream.recipe == recipe)
    }
}
