//! Which digests of each recipe's image stay on this machine, so that a regression can
//! still be bisected and production brought back offline: the pinned one, the newest few
//! (`SPARKCTL_KEEP_IMAGES`, default 3), every one that served production (or a fallback),
//! and every one kept for good (`images keep`, the pair a bisect found). `prune` removes
//! the others, and only digests a registry can give back: an image built here never goes.

use std::collections::BTreeMap;

use bollard::query_parameters::RemoveImageOptionsBuilder;
use bollard::Docker;
use serde::Serialize;

use super::history::History;
use crate::lock::Source;

/// Why a digest stays.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Why {
    /// images.lock pins it: what `start` runs.
    Pinned,
    /// Among the newest `SPARKCTL_KEEP_IMAGES`.
    Newest,
    /// It served production (or a fallback) in this run.
    ServedProduction(String),
    /// Kept for good, for this reason.
    Kept(String),
    /// A container (running or stopped) still uses it; `prune` of old containers frees it.
    InUse(String),
}

impl std::fmt::Display for Why {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Why::Pinned => write!(f, "pinned"),
            Why::Newest => write!(f, "newest"),
            Why::ServedProduction(run) => write!(f, "served production (run {run})"),
            Why::Kept(why) => write!(f, "kept: {why}"),
            Why::InUse(c) => write!(f, "container {c} uses it"),
        }
    }
}

/// Each digest of `h` that stays, and why (digests not named go).
pub(crate) fn retained(h: &History, newest: usize) -> BTreeMap<String, Vec<Why>> {
    let mut out: BTreeMap<String, Vec<Why>> = BTreeMap::new();
    let n = h.entries.len();
    for (i, e) in h.entries.iter().enumerate() {
        let mut why = Vec::new();
        if e.pinned {
            why.push(Why::Pinned);
        }
        if i + newest >= n {
            why.push(Why::Newest);
        }
        if let Some(run) = e.served() {
            why.push(Why::ServedProduction(run.run_id.clone()));
        }
        if let Some(k) = &e.kept {
            why.push(Why::Kept(k.clone()));
        }
        if !why.is_empty() {
            out.insert(e.digest.clone(), why);
        }
    }
    out
}

/// One image `prune` would remove.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct OldImage {
    recipe: String,
    /// `repo@digest`: what is removed (the image goes once nothing else names it).
    reference: String,
    digest: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    created: Option<String>,
}

impl OldImage {
    pub(crate) fn recipe(&self) -> &str {
        &self.recipe
    }

    pub(crate) fn reference(&self) -> &str {
        &self.reference
    }
}

/// One digest that stays, and why.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct KeptImage {
    recipe: String,
    digest: String,
    present: bool,
    why: Vec<Why>,
}

impl KeptImage {
    pub(crate) fn recipe(&self) -> &str {
        &self.recipe
    }

    pub(crate) fn digest(&self) -> &str {
        &self.digest
    }

    pub(crate) fn present(&self) -> bool {
        self.present
    }

    pub(crate) fn why(&self) -> &[Why] {
        &self.why
    }
}

/// What `prune` decided about images; nothing removed yet.
#[derive(Debug, Clone, Serialize, Default)]
pub(crate) struct ImagePlan {
    keep_newest: usize,
    remove: Vec<OldImage>,
    kept: Vec<KeptImage>,
}

impl ImagePlan {
    pub(crate) fn keep_newest(&self) -> usize {
        self.keep_newest
    }

    pub(crate) fn remove(&self) -> &[OldImage] {
        &self.remove
    }

    pub(crate) fn kept(&self) -> &[KeptImage] {
        &self.kept
    }
}

/// Over every recipe's history: the digests on this machine that no rule keeps, nor a
/// container uses (`in_use`: image id → container). A digest two recipes share stays when
/// either keeps it.
pub(crate) fn plan(
    histories: &[History],
    newest: usize,
    in_use: &BTreeMap<String, String>,
) -> ImagePlan {
    let mut plan = ImagePlan {
        keep_newest: newest,
        ..Default::default()
    };
    let mut keep_any: BTreeMap<&str, ()> = BTreeMap::new();
    let per: Vec<BTreeMap<String, Vec<Why>>> = histories
        .iter()
        .map(|h| {
            let mut kept = retained(h, newest);
            for e in &h.entries {
                if let Some(c) = e.image_id.as_ref().and_then(|id| in_use.get(id)) {
                    kept.entry(e.digest.clone())
                        .or_default()
                        .push(Why::InUse(c.clone()));
                }
            }
            kept
        })
        .collect();
    for (h, kept) in histories.iter().zip(&per) {
        for e in &h.entries {
            if let Some(why) = kept.get(&e.digest) {
                keep_any.insert(&e.digest, ());
                plan.kept.push(KeptImage {
                    recipe: h.recipe.clone(),
                    digest: e.digest.clone(),
                    present: e.present,
                    why: why.clone(),
                });
            }
        }
    }
    for h in histories.iter().filter(|h| h.source == Source::Registry) {
        for e in &h.entries {
            let gone = !e.present || keep_any.contains_key(e.digest.as_str());
            let removable = e.registry && !gone;
            if removable && !plan.remove.iter().any(|o| o.digest == e.digest) {
                plan.remove.push(OldImage {
                    recipe: h.recipe.clone(),
                    reference: h.run_reference(&e.digest),
                    digest: e.digest.clone(),
                    created: e.created.clone(),
                });
            }
        }
    }
    plan
}

/// What became of one removal.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Removed {
    reference: String,
    /// The image itself is gone (else only this name of it: another still holds it).
    deleted: bool,
}

impl Removed {
    pub(crate) fn reference(&self) -> &str {
        &self.reference
    }

    pub(crate) fn deleted(&self) -> bool {
        self.deleted
    }
}

/// Removes each image's `repo@digest`, never forced: the engine refuses an image a
/// container (running or stopped) still uses. Returns what was removed and what was not.
pub(crate) async fn apply(
    docker: &Docker,
    old: &[OldImage],
) -> (Vec<Removed>, Vec<(OldImage, String)>) {
    let (mut done, mut failed) = (Vec::new(), Vec::new());
    for o in old {
        let opts = RemoveImageOptionsBuilder::new().force(false).build();
        match docker.remove_image(&o.reference, Some(opts), None).await {
            Ok(items) => done.push(Removed {
                reference: o.reference.clone(),
                deleted: items.iter().any(|i| i.deleted.is_some()),
            }),
            Err(e) => failed.push((o.clone(), e.to_string())),
        }
    }
    (done, failed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::images::history::{Entry, Order, RunUse};

    fn entry(d: &str, present: bool) -> Entry {
        let mut e = blank(d);
        e.present = present;
        e
    }

    fn blank(d: &str) -> Entry {
        Entry {
            digest: d.into(),
            registry: true,
            image_id: None,
            created: None,
            first_seen: String::new(),
            last_seen: String::new(),
            seen: vec![],
            pinned: false,
            runs: vec![],
            kept: None,
            present: false,
        }
    }

    fn history(recipe: &str, entries: Vec<Entry>) -> History {
        History {
            recipe: recipe.into(),
            reference: "r/sim:n".into(),
            source: Source::Registry,
            order: Order::Created,
            entries,
            damaged: vec![],
        }
    }

    #[test]
    fn pinned_newest_production_and_kept_digests_stay_the_rest_go() {
        let mut e: Vec<Entry> = (1..=8)
            .map(|i| entry(&format!("sha256:{i}"), true))
            .collect();
        e[7].pinned = true;
        e[0].runs.push(RunUse {
            run_id: "r1".into(),
            served: true,
            ..Default::default()
        });
        e[1].runs.push(RunUse {
            run_id: "r2".into(),
            ..Default::default()
        });
        e[3].kept = Some("bisect b: last good".into());
        e[4].kept = Some("bisect b: first bad".into());
        e[2].present = false;
        e[5].present = true;
        e[1].image_id = Some("id-2".into());
        let in_use = BTreeMap::from([("id-2".to_string(), "old-step".to_string())]);
        let p = plan(&[history("sim", e.clone())], 3, &in_use);
        assert!(p.remove.is_empty(), "2 is used by a container");
        assert_eq!(p.kept[1].why, [Why::InUse("old-step".into())]);
        let p = plan(&[history("sim", e)], 3, &BTreeMap::new());
        let gone: Vec<&str> = p.remove.iter().map(|o| o.digest.as_str()).collect();
        // 1 served production, 3 is not here, 4 and 5 are kept, 6-8 are the newest.
        assert_eq!(gone, ["sha256:2"]);
        assert_eq!(p.remove[0].reference, "r/sim@sha256:2");
        let why = |d: &str| &p.kept.iter().find(|k| k.digest == d).unwrap().why;
        assert_eq!(why("sha256:8"), &[Why::Pinned, Why::Newest]);
        assert_eq!(why("sha256:1"), &[Why::ServedProduction("r1".into())]);
        assert_eq!(why("sha256:4")[0].to_string(), "kept: bisect b: last good");
    }

    #[test]
    fn a_digest_another_recipe_keeps_stays_and_local_builds_never_go() {
        let a = history("a", vec![entry("sha256:1", true), entry("sha256:2", true)]);
        let mut b = history("b", vec![entry("sha256:1", true)]);
        b.entries[0].pinned = true;
        let p = plan(&[a.clone(), b], 0, &BTreeMap::new());
        assert_eq!(p.remove.len(), 1);
        assert_eq!(p.remove[0].digest, "sha256:2");
        let mut local = a;
        local.source = Source::Local;
        assert!(plan(&[local], 0, &BTreeMap::new()).remove.is_empty());
    }
}
