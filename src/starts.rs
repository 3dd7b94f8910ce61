//! What each start took, step by step (`STATE/starts.json`): kept per recipe, the last
//! `KEPT` of them, so `status`, the live page and `history starts` can show them and the
//! front door can weigh what a model costs to bring back (its p50) when it evicts.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::runtime::ready::Phases;
use crate::state::StateDir;

/// Starts kept per recipe: enough for a p50 that one slow start does not move.
const KEPT: usize = 20;

/// One start that served.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Start {
    /// When it was ready (UTC).
    pub(crate) at: String,
    /// The deployment it started.
    pub(crate) deployment: String,
    /// Its steps, from the start asked.
    pub(crate) phases: Phases,
}

/// A recipe's starts, as `status` and the page show them.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct Summary {
    /// The latest start's steps.
    pub(crate) last: Phases,
    /// The middle of the kept starts' totals, in seconds.
    pub(crate) p50_s: f64,
    /// How many starts the p50 is of.
    pub(crate) of: usize,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "last start {:.2} s ({}); p50 {:.2} s of {}",
            self.last.total_ms() / 1e3,
            self.last,
            self.p50_s,
            self.of
        )
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct File {
    #[serde(default)]
    recipes: BTreeMap<String, Vec<Start>>,
}

fn path(state: &StateDir) -> std::path::PathBuf {
    state.root().join("starts.json")
}

fn read(state: &StateDir) -> File {
    crate::state::read_json(&path(state)).unwrap_or_default()
}

/// `recipe` started and served, in `phases`: kept, the oldest beyond `KEPT` dropped.
pub(crate) fn record(
    state: &StateDir,
    recipe: &str,
    deployment: &str,
    phases: Phases,
) -> Result<()> {
    let mut file = read(state);
    let starts = file.recipes.entry(recipe.to_string()).or_default();
    starts.push(Start {
        at: crate::units::now_utc(),
        deployment: deployment.to_string(),
        phases,
    });
    let over = starts.len().saturating_sub(KEPT);
    starts.drain(..over);
    crate::state::write_json(&path(state), &file)
}

/// `recipe`'s kept starts, oldest first.
pub(crate) fn of(state: &StateDir, recipe: &str) -> Vec<Start> {
    read(state).recipes.remove(recipe).unwrap_or_default()
}

/// Every recipe's kept starts.
pub(crate) fn all(state: &StateDir) -> BTreeMap<String, Vec<Start>> {
    read(state).recipes
}

/// The latest start and the p50 of the kept ones; None before any.
pub(crate) fn summary(starts: &[Start]) -> Option<Summary> {
    let last = starts.last()?.phases;
    let mut totals: Vec<f64> = starts.iter().map(|s| s.phases.total_ms()).collect();
    totals.sort_by(f64::total_cmp);
    Some(Summary {
        last,
        p50_s: totals[(totals.len() - 1) / 2] / 1e3,
        of: totals.len(),
    })
}

/// The p50 of `recipe`'s starts in seconds, when it has started before.
pub(crate) fn p50_s(state: &StateDir, recipe: &str) -> Option<f64> {
    summary(&of(state, recipe)).map(|s| s.p50_s)
}

/// How long a wake of `recipe`'s sleeping server may take: what a start of it takes (the
/// p50 of its kept starts), else a minute; past that a cold start is the quicker way.
pub(crate) fn wake_limit(state: &StateDir, recipe: &str) -> std::time::Duration {
    p50_s(state, recipe).map_or(
        std::time::Duration::from_secs(60),
        std::time::Duration::from_secs_f64,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phases(total_ms: f64) -> Phases {
        Phases {
            launched_ms: 1.0,
            port_open_ms: 2.0,
            http_ms: 3.0,
            loaded_ms: total_ms - 1.0,
            first_token_ms: total_ms,
        }
    }

    #[test]
    fn the_last_starts_are_kept_and_their_middle_is_the_p50() {
        let dir = std::env::temp_dir().join(format!("sparkctl-starts-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let state = StateDir::open(&dir).unwrap();
        assert_eq!(p50_s(&state, "a"), None);
        for ms in [900.0, 1000.0, 30_000.0] {
            record(&state, "a", "d", phases(ms)).unwrap();
        }
        // One slow start does not move the middle.
        assert_eq!(p50_s(&state, "a"), Some(1.0));
        let s = summary(&of(&state, "a")).unwrap();
        assert_eq!((s.last.total_ms(), s.of), (30_000.0, 3));
        for _ in 0..KEPT {
            record(&state, "a", "d", phases(2000.0)).unwrap();
        }
        assert_eq!(of(&state, "a").len(), KEPT);
        assert_eq!(p50_s(&state, "a"), Some(2.0));
        assert!(of(&state, "b").is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
