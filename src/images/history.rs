//! A recipe's image history: every digest its image was pinned to (the lock, with the
//! digests each pin replaced), pulled or kept on this machine (`STATE/images/RECIPE/`, one
//! file per event), or ran (the run records), with dates and the runs that used each.
//! Ordered by build (the image's `created`) where every digest's is known, else by when
//! this machine first saw it: the order `bisect` walks.

use std::collections::BTreeMap;

use bollard::Docker;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::lock::{repository, Lock, Pin, Source};
use crate::state::{self, StateDir};

/// What happened to a digest on this machine, remembered in the state dir.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum EventKind {
    Pinned,
    Pulled,
    /// Retained for good (`images keep`, or the pair a bisect found).
    Kept,
    /// A keep taken back (`images keep --release`).
    Released,
}

impl EventKind {
    fn as_str(self) -> &'static str {
        match self {
            EventKind::Pinned => "pinned",
            EventKind::Pulled => "pulled",
            EventKind::Kept => "kept",
            EventKind::Released => "released",
        }
    }
}

/// One event of one digest: `STATE/images/RECIPE/TIME-KIND.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Event {
    kind: EventKind,
    digest: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) image_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) created: Option<String>,
    at: String,
    /// Why (a keep's reason).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    note: Option<String>,
}

impl Event {
    pub(crate) fn now(kind: EventKind, digest: &str, note: Option<String>) -> Event {
        Event {
            kind,
            digest: digest.to_string(),
            image_id: None,
            created: None,
            at: crate::units::now_utc(),
            note,
        }
    }
}

/// Remembers `event` of `recipe`'s image; each event is a file of its own, written whole,
/// so two commands recording at once never lose one.
pub(crate) fn record(state: &StateDir, recipe: &str, event: &Event) -> Result<()> {
    let dir = state.image_events_dir(recipe)?;
    let file = format!("{}-{}.json", state::new_run_id(), event.kind.as_str());
    state::write_json(&dir.join(file), event)
}

/// The events of `recipe`'s image, oldest first, and the files that could not be read.
pub(crate) fn events(state: &StateDir, recipe: &str) -> Result<(Vec<Event>, Vec<state::Damaged>)> {
    let dir = state.image_events_dir(recipe)?;
    let files = state::json_files(&dir, |_| true)?;
    let (events, damaged) = state::read_json_files::<Event>(files);
    Ok((events.into_iter().map(|(_, e)| e).collect(), damaged))
}

/// How a digest came to this machine's knowledge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Seen {
    Pinned,
    Pulled,
    Ran,
}

impl Seen {
    /// The word `images history` shows, the same as in its JSON.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Seen::Pinned => "pinned",
            Seen::Pulled => "pulled",
            Seen::Ran => "ran",
        }
    }
}

/// A run that used an image, as the run records tell it (`crate::history::image_uses`).
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct RunUse {
    pub(crate) run_id: String,
    /// `up`, `rollback`, `bisect`, …
    pub(crate) command: String,
    /// `promoted`, `rejected`, `good`, …
    pub(crate) outcome: String,
    pub(crate) at: String,
    /// It served production: promoted, rolled back to, or brought back by the front
    /// door's watch (production's fallback included).
    pub(crate) served: bool,
    #[serde(skip)]
    pub(crate) recipe: String,
    /// The image as the recipe named it then.
    #[serde(skip)]
    pub(crate) image: String,
    /// The image id that ran.
    #[serde(skip)]
    pub(crate) image_id: String,
}

/// One digest of a recipe's image.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Entry {
    /// The registry digest (a local image id for an image built here).
    pub(crate) digest: String,
    /// `digest` is a registry's: `repo@digest` pulls it (else it is an image id, of an
    /// image built here or of a run whose registry digest is unknown).
    pub(crate) registry: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) image_id: Option<String>,
    /// When the image was built, where known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) created: Option<String>,
    pub(crate) first_seen: String,
    pub(crate) last_seen: String,
    pub(crate) seen: Vec<Seen>,
    /// What images.lock pins now.
    pub(crate) pinned: bool,
    pub(crate) runs: Vec<RunUse>,
    /// Kept for good, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) kept: Option<String>,
    /// On this machine now.
    pub(crate) present: bool,
}

impl Entry {
    fn new(digest: &str, at: &str) -> Entry {
        Entry {
            digest: digest.to_string(),
            registry: true,
            image_id: None,
            created: None,
            first_seen: at.to_string(),
            last_seen: at.to_string(),
            seen: Vec::new(),
            pinned: false,
            runs: Vec::new(),
            kept: None,
            present: false,
        }
    }

    fn saw(&mut self, how: Seen, at: &str) {
        if !self.seen.contains(&how) {
            self.seen.push(how);
        }
        if at < self.first_seen.as_str() {
            self.first_seen = at.to_string();
        }
        if at > self.last_seen.as_str() {
            self.last_seen = at.to_string();
        }
    }

    /// The run in which it served production (promoted, rolled back to, or brought back
    /// by the front door's watch), if any.
    pub(crate) fn served(&self) -> Option<&RunUse> {
        self.runs.iter().find(|r| r.served)
    }
}

/// How the entries are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Order {
    /// By the image's build time: every entry has one.
    Created,
    /// By when this machine first saw each digest (some build time is unknown).
    FirstSeen,
}

/// A recipe's image history, oldest first.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct History {
    pub(crate) recipe: String,
    /// The image as the recipe names it.
    pub(crate) reference: String,
    pub(crate) source: Source,
    pub(crate) order: Order,
    pub(crate) entries: Vec<Entry>,
    /// Run records and event files that could not be read (left out, named).
    pub(crate) damaged: Vec<String>,
}

impl History {
    /// What the engine knows this digest as: `repo@digest`, or a local image id.
    pub(crate) fn run_reference(&self, digest: &str) -> String {
        if self.is_registry_digest(digest) {
            format!("{}@{digest}", repository(&self.reference))
        } else {
            digest.to_string()
        }
    }

    /// Whether `digest` is a registry's (pullable), not an image id.
    pub(crate) fn is_registry_digest(&self, digest: &str) -> bool {
        self.source == Source::Registry
            && self
                .entries
                .iter()
                .find(|e| e.digest == digest)
                .is_none_or(|e| e.registry)
    }

    pub(crate) fn position(&self, digest: &str) -> Option<usize> {
        self.entries.iter().position(|e| e.digest == digest)
    }

    /// The entry a digest or a unique prefix of one (`sha256:` optional, 6 characters at
    /// least) names.
    pub(crate) fn lookup(&self, text: &str) -> Result<&Entry> {
        let want = text.strip_prefix("sha256:").unwrap_or(text);
        let hex = want.len() >= 6 && want.chars().all(|c| c.is_ascii_hexdigit());
        let found: Vec<&Entry> = self
            .entries
            .iter()
            .filter(|e| {
                hex && e
                    .digest
                    .strip_prefix("sha256:")
                    .unwrap_or(&e.digest)
                    .starts_with(want)
            })
            .collect();
        match found.as_slice() {
            [one] => Ok(one),
            [] => Err(Error::NoSuch {
                what: crate::error::Thing::Digest,
                name: text.to_string(),
                hint: crate::error::Hint::ImageHistory {
                    recipe: self.recipe.clone(),
                },
            }),
            many => Err(Error::BadFlag(crate::error::FlagProblem::AmbiguousDigest {
                prefix: text.to_string(),
                many: many.len(),
                recipe: self.recipe.clone(),
            })),
        }
    }
}

/// What a history is assembled from.
pub(crate) struct Sources<'a> {
    pin: Option<&'a Pin>,
    events: &'a [Event],
    runs: &'a [RunUse],
    /// Image id → registry digest, for the image ids run records hold.
    ids: &'a BTreeMap<String, String>,
}

/// The history of `recipe`'s image `reference` from the lock, the events and the runs
/// (entries unordered, nothing asked of the engine).
pub(crate) fn assemble(recipe: &str, reference: &str, src: &Sources<'_>) -> History {
    let source = src.pin.map_or(Source::Registry, |p| p.source);
    let mut by: BTreeMap<String, Entry> = BTreeMap::new();
    fn touch<'m>(
        by: &'m mut BTreeMap<String, Entry>,
        digest: &str,
        at: &str,
        how: Seen,
    ) -> &'m mut Entry {
        let e = by
            .entry(digest.to_string())
            .or_insert_with(|| Entry::new(digest, at));
        e.saw(how, at);
        e
    }
    if let Some(pin) = src.pin {
        for old in &pin.history {
            let e = touch(&mut by, &old.digest, &old.pinned_at, Seen::Pinned);
            e.saw(Seen::Pinned, &old.replaced_at);
            e.image_id = e.image_id.take().or(old.image_id.clone());
            e.created = e.created.take().or(old.created.clone());
        }
        let e = touch(&mut by, &pin.digest, &pin.pinned_at, Seen::Pinned);
        e.pinned = true;
        e.image_id = e.image_id.take().or(pin.image_id.clone());
        e.created = e.created.take().or(pin.created.clone());
    }
    for ev in src.events {
        let how = match ev.kind {
            EventKind::Pinned => Some(Seen::Pinned),
            EventKind::Pulled => Some(Seen::Pulled),
            EventKind::Kept | EventKind::Released => None,
        };
        let e = match how {
            Some(how) => touch(&mut by, &ev.digest, &ev.at, how),
            None => by
                .entry(ev.digest.clone())
                .or_insert_with(|| Entry::new(&ev.digest, &ev.at)),
        };
        e.image_id = e.image_id.take().or(ev.image_id.clone());
        e.created = e.created.take().or(ev.created.clone());
        match ev.kind {
            EventKind::Kept => e.kept = Some(ev.note.clone().unwrap_or_else(|| "kept".into())),
            EventKind::Released => e.kept = None,
            _ => {}
        }
    }
    let repo = repository(reference);
    for r in src.runs.iter().filter(|r| r.recipe == recipe) {
        if repository(&r.image) != repo {
            continue;
        }
        let id = &r.image_id;
        let mapped = src.ids.get(id).cloned();
        let digest = mapped.clone().unwrap_or_else(|| id.clone());
        let e = touch(&mut by, &digest, &r.at, Seen::Ran);
        if mapped.is_none() && source == Source::Registry && !e.seen.contains(&Seen::Pinned) {
            e.registry = false;
            e.image_id = Some(id.clone());
        }
        e.runs.push(r.clone());
    }
    let mut entries: Vec<Entry> = by.into_values().collect();
    for e in &mut entries {
        e.registry &= source == Source::Registry;
        e.runs.sort_by(|a, b| a.run_id.cmp(&b.run_id));
    }
    let order = sort(&mut entries);
    History {
        recipe: recipe.to_string(),
        reference: reference.to_string(),
        source,
        order,
        entries,
        damaged: Vec::new(),
    }
}

/// `2026-05-01T12:00:00.5Z` as (seconds part, fraction): RFC 3339 stamps with fractions
/// of different lengths do not sort as text.
fn time_key(stamp: &str) -> (String, f64) {
    let (whole, frac) = match stamp.find('.') {
        Some(i) => (&stamp[..i], &stamp[i..]),
        None => (stamp.trim_end_matches('Z'), ""),
    };
    let digits: String = frac.chars().filter(char::is_ascii_digit).collect();
    let frac = format!("0.{digits}").parse().unwrap_or(0.0);
    (whole.chars().take(19).collect(), frac)
}

/// Orders by build time when every entry has one, else by first seen; says which.
fn sort(entries: &mut [Entry]) -> Order {
    let by_first_seen = |a: &Entry, b: &Entry| a.first_seen.cmp(&b.first_seen);
    if entries.iter().all(|e| e.created.is_some()) {
        entries.sort_by(|a, b| {
            let (ka, kb) = (
                time_key(a.created.as_deref().unwrap_or_default()),
                time_key(b.created.as_deref().unwrap_or_default()),
            );
            ka.0.cmp(&kb.0)
                .then(ka.1.total_cmp(&kb.1))
                .then(by_first_seen(a, b))
        });
        Order::Created
    } else {
        entries.sort_by(by_first_seen);
        Order::FirstSeen
    }
}

/// `recipe`'s image history, with what this machine has of each digest. `runs`: every
/// run that used an image (`crate::history::image_uses`).
pub(crate) async fn of(
    docker: &Docker,
    state: &StateDir,
    lock: &Lock,
    (recipe, reference): (&str, &str),
    runs: &[RunUse],
) -> Result<History> {
    let pin = lock.pin(recipe)?;
    let (events, damaged) = events(state, recipe)?;
    let repo = repository(reference);
    let mut ids: BTreeMap<String, String> = BTreeMap::new();
    let known = pin
        .into_iter()
        .flat_map(|p| {
            p.history
                .iter()
                .map(|h| (h.image_id.clone(), h.digest.clone()))
                .chain([(p.image_id.clone(), p.digest.clone())])
        })
        .chain(
            events
                .iter()
                .map(|e| (e.image_id.clone(), e.digest.clone())),
        );
    for (id, digest) in known {
        if let Some(id) = id {
            ids.insert(id, digest);
        }
    }
    // Runs record the image id they ran: this machine's image tells its registry digest.
    for r in runs.iter().filter(|r| r.recipe == recipe) {
        let id = &r.image_id;
        if ids.contains_key(id) {
            continue;
        }
        if let Some(digest) = super::local(docker, id)
            .await?
            .and_then(|i| i.digest_in(repo))
        {
            ids.insert(id.clone(), digest);
        }
    }
    let mut h = assemble(
        recipe,
        reference,
        &Sources {
            pin,
            events: &events,
            runs,
            ids: &ids,
        },
    );
    // Never pinned: an image built here (no digest from any registry) is known by its id.
    if pin.is_none() {
        if let Some(img) = super::local(docker, reference).await? {
            if img.digest_in(repo).is_none() {
                h.source = Source::Local;
                h.entries.iter_mut().for_each(|e| e.registry = false);
            }
        }
    }
    for i in 0..h.entries.len() {
        let reference = h.run_reference(&h.entries[i].digest);
        if let Some(img) = super::local(docker, &reference).await? {
            let e = &mut h.entries[i];
            e.present = true;
            e.image_id = Some(img.id);
            e.created = e.created.take().or(img.created);
        }
    }
    h.order = sort(&mut h.entries);
    h.damaged = damaged.iter().map(|d| d.to_string()).collect();
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::Replaced;

    fn pin(digest: &str, at: &str, history: Vec<Replaced>) -> Pin {
        Pin {
            reference: "r:5000/sim:nightly".into(),
            digest: digest.into(),
            source: Source::Registry,
            media_type: None,
            platform: None,
            image_id: Some(format!("id-{digest}")),
            created: None,
            pinned_at: at.into(),
            history,
        }
    }

    fn replaced(digest: &str, pinned: &str, replaced: &str) -> Replaced {
        Replaced {
            digest: digest.into(),
            image_id: Some(format!("id-{digest}")),
            created: None,
            pinned_at: pinned.into(),
            replaced_at: replaced.into(),
        }
    }

    #[test]
    fn pins_events_and_runs_make_one_entry_per_digest_in_order() {
        let p = pin(
            "sha256:cc",
            "2026-01-03T00:00:00Z",
            vec![
                replaced("sha256:bb", "2026-01-02T00:00:00Z", "2026-01-03T00:00:00Z"),
                replaced("sha256:aa", "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"),
            ],
        );
        let mut kept = Event::now(EventKind::Kept, "sha256:aa", Some("bisect x".into()));
        kept.at = "2026-01-05T00:00:00Z".into();
        let mut pulled = Event::now(EventKind::Pulled, "sha256:dd", None);
        pulled.at = "2026-01-04T00:00:00Z".into();
        let run = RunUse {
            run_id: "20260104-1".into(),
            recipe: "sim".into(),
            at: "2026-01-04T01:00:00Z".into(),
            served: true,
            image: "r:5000/sim:nightly".into(),
            image_id: "id-sha256:bb".into(),
            ..Default::default()
        };
        let other = RunUse {
            recipe: "other".into(),
            ..run.clone()
        };
        let ids = BTreeMap::from([("id-sha256:bb".to_string(), "sha256:bb".to_string())]);
        let src = Sources {
            pin: Some(&p),
            events: &[pulled, kept],
            runs: &[run, other],
            ids: &ids,
        };
        let h = assemble("sim", "r:5000/sim:nightly", &src);
        let digests: Vec<&str> = h.entries.iter().map(|e| e.digest.as_str()).collect();
        assert_eq!(
            digests,
            ["sha256:aa", "sha256:bb", "sha256:cc", "sha256:dd"]
        );
        assert_eq!(h.order, Order::FirstSeen);
        let bb = &h.entries[1];
        assert_eq!(bb.seen, [Seen::Pinned, Seen::Ran]);
        assert_eq!(bb.runs.len(), 1, "only this recipe's runs");
        assert!(bb.served().is_some());
        assert_eq!(bb.last_seen, "2026-01-04T01:00:00Z");
        assert_eq!(h.entries[0].kept.as_deref(), Some("bisect x"));
        assert!(h.entries[2].pinned && !h.entries[1].pinned);
        assert_eq!(h.lookup("bb0").unwrap_err().exit_code(), 2);
        assert_eq!(
            h.run_reference("sha256:aa"),
            "r:5000/sim@sha256:aa",
            "pulled by repository and digest"
        );
    }

    #[test]
    fn build_times_order_the_history_when_all_are_known() {
        let mut a = Entry::new("sha256:aaaaaaaa", "2026-01-02T00:00:00Z");
        a.created = Some("2026-01-01T00:00:01.5Z".into());
        let mut b = Entry::new("sha256:bbbbbbbb", "2026-01-01T00:00:00Z");
        b.created = Some("2026-01-01T00:00:01.25Z".into());
        let mut v = vec![a.clone(), b.clone()];
        assert_eq!(sort(&mut v), Order::Created);
        assert_eq!(v[0].digest, "sha256:bbbbbbbb");
        b.created = None;
        let mut v = vec![a, b];
        assert_eq!(sort(&mut v), Order::FirstSeen);
        assert_eq!(v[0].digest, "sha256:bbbbbbbb");
        let h = History {
            recipe: "sim".into(),
            reference: "r/sim:n".into(),
            source: Source::Registry,
            order: Order::FirstSeen,
            entries: v,
            damaged: vec![],
        };
        assert_eq!(h.lookup("aaaaaa").unwrap().digest, "sha256:aaaaaaaa");
        assert_eq!(h.lookup("sha256:bbbbbb").unwrap().digest, "sha256:bbbbbbbb");
        assert!(h.lookup("abc").is_err(), "too short to name one");
    }

    #[test]
    fn seen_reads_the_same_in_the_table_and_in_json() {
        for s in [Seen::Pinned, Seen::Pulled, Seen::Ran] {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
    }
}
