//! What each recipe measurably held at its last starts (`STATE/memory/learned.json`): a plan
//! counts a server that is not running by the larger of its declaration and what it held,
//! so a guess (`memory_gb: 22` for a server that holds 88) costs one start, not every one.
//! A figure is keyed by what decides it — the recipe as it runs (its hash: arguments,
//! environment, image reference), the image digest and the model's fingerprint — and a
//! change of any is a new key; `sparkctl memory forget NAME` drops a recipe's figures.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::state::StateDir;

/// What decides what a server holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Key {
    pub(crate) recipe: String,
    pub(crate) recipe_hash: String,
    /// The image digest it ran (None: a process recipe, or unpinned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) digest: Option<String>,
    /// Its model dir's fingerprint (None: no model dir, or not taken).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) fingerprint: Option<String>,
}

/// One key's figure: the most it was seen holding.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Figure {
    pub(crate) key: Key,
    pub(crate) gb: f64,
    /// How it was measured (`MemoryObserved`'s best instrument).
    pub(crate) what: String,
    /// When it was last seen (UTC).
    pub(crate) at: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct File {
    /// By recipe, its figures (one per key).
    #[serde(default)]
    recipes: BTreeMap<String, Vec<Figure>>,
}

fn path(state: &StateDir) -> std::path::PathBuf {
    state.root().join("memory").join("learned.json")
}

fn read(state: &StateDir) -> File {
    crate::state::read_json(&path(state)).unwrap_or_default()
}

fn write(state: &StateDir, file: &File) -> Result<()> {
    let p = path(state);
    if let Some(dir) = p.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| crate::error::Error::io(format!("cannot create {}", dir.display()), e))?;
    }
    crate::state::write_json(&p, file)
}

/// `key` was seen holding `gb` (by `what`): kept when it is the most it has held.
pub(crate) fn record(state: &StateDir, key: Key, gb: f64, what: &str) -> Result<()> {
    let mut file = read(state);
    let figures = file.recipes.entry(key.recipe.clone()).or_default();
    let now = crate::units::now_utc();
    match figures.iter_mut().find(|f| f.key == key) {
        Some(f) if f.gb >= gb => f.at = now,
        Some(f) => {
            f.gb = gb;
            f.what = what.to_string();
            f.at = now;
        }
        None => figures.push(Figure {
            key,
            gb,
            what: what.to_string(),
            at: now,
        }),
    }
    write(state, &file)
}

/// What a start of `key` held before. A part the caller does not know (None) matches any,
/// the newest figure first.
pub(crate) fn of(state: &StateDir, key: &Key) -> Option<Figure> {
    let file = read(state);
    let matches = |f: &&Figure| {
        f.key.recipe_hash == key.recipe_hash
            && (key.digest.is_none() || f.key.digest == key.digest)
            && (key.fingerprint.is_none() || f.key.fingerprint == key.fingerprint)
    };
    let mut found: Vec<&Figure> = file
        .recipes
        .get(&key.recipe)?
        .iter()
        .filter(matches)
        .collect();
    found.sort_by(|a, b| b.at.cmp(&a.at));
    found.first().map(|f| (*f).clone())
}

/// A learned figure more than `DRIFT` off its recipe's declaration: the declaration is a
/// guess the plans no longer take (when it is lower) or a reserve that is never used.
pub(crate) const DRIFT: f64 = 0.20;

/// A recipe whose learned figure is off its declaration by more than `DRIFT`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Drift {
    pub(crate) recipe: String,
    pub(crate) declared_gb: Option<f64>,
    pub(crate) learned_gb: f64,
}

impl Drift {
    /// When `learned_gb` is more than `DRIFT` off `declared_gb` (none declared: always).
    pub(crate) fn of(recipe: &str, declared_gb: Option<f64>, learned_gb: f64) -> Option<Drift> {
        let off = match declared_gb {
            Some(d) if d > 0.0 => (learned_gb - d).abs() / d > DRIFT,
            _ => true,
        };
        off.then(|| Drift {
            recipe: recipe.to_string(),
            declared_gb,
            learned_gb,
        })
    }
}

impl std::fmt::Display for Drift {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (r, l) = (&self.recipe, self.learned_gb);
        let declared = self
            .declared_gb
            .map_or("declares none".into(), |d| format!("declares {d} GB"));
        let counted = self.declared_gb.map_or(l, |d| d.max(l));
        // What it held, rounded up where a declaration is written: to a tenth of a GB
        // below 10 GB, to a whole GB above.
        let fix = match l < 10.0 {
            true => format!("{}", (l * 10.0).ceil() / 10.0),
            false => format!("{}", l.ceil()),
        };
        write!(
            f,
            "{r} held {l:.2} GB at its starts and {declared}: plans count {counted:.2} GB; \
             set `server.memory_gb: {fix}` in its recipe (`sparkctl memory forget {r}` once \
             it changed)"
        )
    }
}

/// Every figure, by recipe (`sparkctl memory`).
pub(crate) fn all(state: &StateDir) -> BTreeMap<String, Vec<Figure>> {
    read(state).recipes
}

/// Drops `recipe`'s figures; how many there were.
pub(crate) fn forget(state: &StateDir, recipe: &str) -> Result<usize> {
    let mut file = read(state);
    let n = file.recipes.remove(recipe).map_or(0, |v| v.len());
    if n > 0 {
        write(state, &file)?;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_held_is_kept_per_key_and_a_changed_key_starts_again() {
        let dir = std::env::temp_dir().join(format!("sparkctl-learned-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let state = StateDir::open(&dir).unwrap();
        let key = |hash: &str, digest: Option<&str>| Key {
            recipe: "qwen".into(),
            recipe_hash: hash.into(),
            digest: digest.map(String::from),
            fingerprint: Some("sha256:m".into()),
        };
        record(&state, key("h1", Some("d1")), 88.0, "GPU").unwrap();
        record(&state, key("h1", Some("d1")), 60.0, "GPU").unwrap();
        assert_eq!(of(&state, &key("h1", Some("d1"))).unwrap().gb, 88.0);
        // Another digest, another recipe hash: nothing learned for them.
        assert!(of(&state, &key("h1", Some("d2"))).is_none());
        assert!(of(&state, &key("h2", Some("d1"))).is_none());
        // A part not known matches any.
        assert_eq!(of(&state, &key("h1", None)).unwrap().gb, 88.0);
        assert_eq!(forget(&state, "qwen").unwrap(), 1);
        assert!(of(&state, &key("h1", Some("d1"))).is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_figure_a_fifth_off_its_declaration_is_drift() {
        assert_eq!(Drift::of("q", Some(80.0), 88.0), None);
        let under = Drift::of("q", Some(22.0), 87.3).unwrap().to_string();
        assert!(under.contains("plans count 87.30 GB"), "{under}");
        assert!(under.contains("server.memory_gb: 88`"), "{under}");
        // Declared far more than it holds: said too, and the plan keeps the declaration.
        let over = Drift::of("q", Some(40.0), 10.0).unwrap().to_string();
        assert!(over.contains("plans count 40.00 GB"), "{over}");
        // A small server's fix is in tenths, not a whole GB it never holds.
        let small = Drift::of("b", Some(0.25), 0.17).unwrap().to_string();
        assert!(small.contains("declares 0.25 GB"), "{small}");
        assert!(small.contains("server.memory_gb: 0.2`"), "{small}");
        assert!(Drift::of("q", None, 3.0).is_some());
    }
}
