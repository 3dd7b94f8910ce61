//! `STATE/production.json`: which deployment serves behind the front door, which served
//! before (the rollback stack), and old ones kept warm for an instant rollback. Only the
//! front door writes it, as the first step of each switch: the file never names a backend
//! the door does not route to. Several models behind one port: the file is one model's
//! production (`model`) and every other model's under `models`, written whole, so one
//! write changes one model and leaves the others as they were.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::lock::Pin;
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
    /// The image it runs, exactly: the pin it was started from (without the pin's history).
    /// A rollback to it and a restart of it start this digest, whatever images.lock pins by
    /// then (an upgrade moves the pin on; the entry it replaced keeps its own night). None:
    /// a host process, an unpinned image, or a file written before entries kept it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) image: Option<Pin>,
    /// Promoted by an upgrade, whose next step moves images.lock's pin to `image`: kept so
    /// that a kill between the two is healed (`deploy::pin::heal`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) pin_move: Option<PinMove>,
}

/// The move of a recipe's pin that an upgrade's promotion asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PinMove {
    /// The digest images.lock pinned when the promotion was made (None: never pinned). The
    /// pin is moved only from there: a pin changed since is someone's choice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) from: Option<String>,
}

/// A replaced production left running so that `rollback` is a switch, not a start.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Warm {
    pub(crate) upstream: Upstream,
    /// Unix seconds when it is stopped.
    pub(crate) until: u64,
}

/// A candidate meeting a model's live traffic (shadow, canary) while its rollout runs: every
/// memory plan counts it as production (no other start may stop it), its `up` stops it at
/// the end, and the front door does when that `up` is gone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Candidate {
    pub(crate) upstream: Upstream,
    /// The `up` running the rollout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) owner: Option<crate::host::ProcessId>,
}

/// What serves now, and what served before (a stack).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Production {
    pub(crate) current: Option<Entry>,
    #[serde(default)]
    pub(crate) previous: Vec<Entry>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) warm: Vec<Warm>,
    /// A candidate meeting its traffic, while a rollout runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) candidate: Option<Candidate>,
    /// The model this is the production of (`crate::models`; `""`: recipes that name no
    /// served name). In production.json, the top model's alone (None in a file written
    /// before there were several: its recipes then say, `Book::settle`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) model: Option<String>,
}

/// production.json: every model's production, by model. The file keeps the shape it always
/// had — one model's production at its top, every other model's under `models` — and that
/// shape is read and written here only (`File`); everywhere else the book is this map.
#[derive(Debug, Clone, Default)]
pub(crate) struct Book {
    /// The model at the file's top: a setup of one model keeps the file it always had.
    top: String,
    /// Whether the top's model is known: a file written before there were several names
    /// none, and its recipes say which it is (`settle`).
    settled: bool,
    lanes: BTreeMap<String, Production>,
}

/// production.json as it is written.
#[derive(Serialize, Deserialize)]
struct File {
    #[serde(flatten)]
    top: Production,
    /// Every other model's production, by model.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    models: BTreeMap<String, Production>,
}

impl Serialize for Book {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut top = self.lanes.get(&self.top).cloned().unwrap_or_default();
        top.model = self.settled.then(|| self.top.clone());
        let models = (self.lanes.iter())
            .filter(|(m, _)| **m != self.top)
            .map(|(m, p)| {
                let mut p = p.clone();
                p.model = None;
                (m.clone(), p)
            })
            .collect();
        File { top, models }.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Book {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Book, D::Error> {
        let File { mut top, models } = File::deserialize(d)?;
        let settled = top.model.is_some();
        let name = top.model.clone().unwrap_or_default();
        top.model = Some(name.clone());
        let mut lanes: BTreeMap<String, Production> = (models.into_iter())
            .map(|(m, mut p)| {
                p.model = Some(m.clone());
                (m, p)
            })
            .collect();
        lanes.insert(name.clone(), top);
        Ok(Book {
            top: name,
            settled,
            lanes,
        })
    }
}

impl Book {
    pub(crate) fn load(state: &StateDir) -> Result<Book> {
        let path = state.production_file();
        if !path.exists() {
            return Ok(Book::default());
        }
        state::read_json(&path)
    }

    /// The recipes production.json names as production, one per model, if it can be read:
    /// what the memory plan stops last.
    pub(crate) fn current_recipes(state: &StateDir) -> Vec<String> {
        let Ok(book) = Book::load(state) else {
            return Vec::new();
        };
        (book.lanes.into_values())
            .flat_map(|p| {
                let candidate = p.candidate.map(|c| c.upstream.recipe);
                p.current.map(|e| e.recipe).into_iter().chain(candidate)
            })
            .collect()
    }

    /// Whether the top's model is known (a file from before several models is not, until
    /// `settle`).
    pub(crate) fn settled(&self) -> bool {
        self.settled
    }

    /// A file written before there were several models: its top production serves `model`
    /// (its recipes say which).
    pub(crate) fn settle(&mut self, model: String) {
        if self.settled {
            return;
        }
        let mut top = self.lanes.remove(&self.top).unwrap_or_default();
        top.model = Some(model.clone());
        self.lanes.insert(model.clone(), top);
        self.top = model;
        self.settled = true;
    }

    /// The model at the file's top (`""`: the unnamed one).
    pub(crate) fn model_id(&self) -> &str {
        &self.top
    }

    /// Its top model's production.
    pub(crate) fn top(&self) -> Production {
        self.lane(&self.top)
    }

    /// Every model's production, by model, each on its own.
    pub(crate) fn lanes(&self) -> BTreeMap<String, Production> {
        let mut out = self.lanes.clone();
        out.entry(self.top.clone()).or_insert_with(|| Production {
            model: Some(self.top.clone()),
            ..Production::default()
        });
        out
    }

    /// `model`'s production: empty when it has none yet.
    pub(crate) fn lane(&self, model: &str) -> Production {
        self.lanes
            .get(model)
            .cloned()
            .unwrap_or_else(|| Production {
                model: Some(model.to_string()),
                ..Production::default()
            })
    }

    /// The book with `model`'s production replaced by `next`, the others as they are. The
    /// model at the top stays there unless it holds nothing (a first model then takes it:
    /// a setup of one model keeps the file it always had).
    pub(crate) fn with_lane(&self, model: &str, next: Production) -> Book {
        self.with_lane_as(model, model, next)
    }

    /// The book with `lane`'s production replaced by `next`, which serves `model` from now
    /// on: with one model served, another model's recipe takes its place (`up` of it, then
    /// `rollback`), the lane under its new name and in its old place.
    pub(crate) fn with_lane_as(&self, lane: &str, model: &str, next: Production) -> Book {
        let mut lanes = self.lanes();
        let was_top = self.top == lane;
        lanes.remove(lane);
        let mut next = next;
        next.model = Some(model.to_string());
        lanes.insert(model.to_string(), next);
        let holds = |m: &String| lanes.get(m).is_some_and(|p| !p.is_empty());
        let top = if was_top { model } else { &self.top };
        let top_id = [top, model]
            .into_iter()
            .map(String::from)
            .chain(lanes.keys().cloned())
            .find(holds)
            .unwrap_or_else(|| self.top.clone());
        lanes.retain(|m, p| m == &top_id || !p.is_empty());
        Book {
            top: top_id,
            settled: true,
            lanes,
        }
    }
}

impl Production {
    /// Nothing serves, served, stays warm, or is on trial.
    pub(crate) fn is_empty(&self) -> bool {
        self.current.is_none()
            && self.previous.is_empty()
            && self.warm.is_empty()
            && self.candidate.is_none()
    }

    /// Makes `entry` production; the old one goes on the stack.
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

#[cfg(test)]
mod tests {
    use super::*;

    fn serving(recipe: &str) -> Production {
        promoted(Production::default(), recipe)
    }

    fn promoted(mut p: Production, recipe: &str) -> Production {
        p.promote(Entry {
            recipe: recipe.into(),
            since: "now".into(),
            run_id: None,
            bench: None,
            upstream: None,
            image: None,
            pin_move: None,
        });
        p
    }

    #[test]
    fn one_model_keeps_the_file_it_always_had_and_others_go_under_models() {
        // A first model takes the empty top, whatever its name.
        let book = Book::default().with_lane("chat", serving("chat-a"));
        assert_eq!(book.model_id(), "chat");
        assert_eq!(book.top().current.unwrap().recipe, "chat-a");
        let text = serde_json::to_value(&book).unwrap();
        assert_eq!(text["model"], "chat", "{text}");
        assert!(text.get("models").is_none(), "{text}");
        // A second model goes under `models`; the first stays at the top.
        let book = book.with_lane("coder", serving("coder-a"));
        assert_eq!(book.top().current.unwrap().recipe, "chat-a");
        let text = serde_json::to_value(&book).unwrap();
        assert_eq!(text["models"]["coder"]["current"]["recipe"], "coder-a");
        assert!(text["models"]["coder"].get("model").is_none(), "{text}");
        // Each reads back on its own, and a change of one leaves the other as it was.
        let back: Book = serde_json::from_value(text).unwrap();
        let lanes = back.lanes();
        assert_eq!(lanes.len(), 2);
        assert_eq!(lanes["coder"].model.as_deref(), Some("coder"));
        let next = back.with_lane("coder", promoted(back.lane("coder"), "coder-b"));
        assert_eq!(next.lane("chat").current.unwrap().recipe, "chat-a");
        assert_eq!(next.lane("coder").current.unwrap().recipe, "coder-b");
        assert_eq!(next.lane("coder").previous[0].recipe, "coder-a");
        // A model with nothing left drops out; the top moves to one that has something.
        let gone = next.with_lane("chat", Production::default());
        assert_eq!(gone.model_id(), "coder");
        assert_eq!(gone.lanes().len(), 1, "{gone:?}");
        // One model's lane taken by another model's recipe: renamed in its place, the
        // stack kept, the other models untouched.
        let renamed = next.with_lane_as("chat", "talk", promoted(next.lane("chat"), "talk-a"));
        assert_eq!(renamed.model_id(), "talk");
        assert_eq!(renamed.lane("talk").previous[0].recipe, "chat-a");
        assert_eq!(renamed.lane("coder").current.unwrap().recipe, "coder-b");
        assert!(!renamed.lanes().contains_key("chat"), "{renamed:?}");
    }

    /// production.json files as earlier releases wrote them: one model's, from before there
    /// were several (no `model`), and several models' — each loads, and is written back
    /// intact.
    #[test]
    fn files_from_earlier_releases_load_and_are_written_back_intact() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/production");
        for name in ["one-model-before-several.json", "several-models.json"] {
            let text = std::fs::read_to_string(dir.join(name)).unwrap();
            let book: Book = serde_json::from_str(&text).unwrap();
            let again: serde_json::Value = serde_json::to_value(&book).unwrap();
            let was: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(again, was, "{name}");
        }
        // The one from before several models is the unnamed model's until its recipes say.
        let text = std::fs::read_to_string(dir.join("one-model-before-several.json")).unwrap();
        let mut old: Book = serde_json::from_str(&text).unwrap();
        assert!(!old.settled());
        assert_eq!(old.lanes().keys().collect::<Vec<_>>(), [""]);
        old.settle("qwen".into());
        assert_eq!(old.lane("qwen").current.unwrap().recipe, "llama-9b");
        assert_eq!(serde_json::to_value(&old).unwrap()["model"], "qwen");
        let several: Book = serde_json::from_str(
            &std::fs::read_to_string(dir.join("several-models.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(several.lane("coder").previous[0].recipe, "coder-a");
        assert_eq!(several.model_id(), "chat");
    }
}
