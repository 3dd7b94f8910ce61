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
    /// served name). None only in a file written before there were several: its recipes
    /// then say (`models::settle`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) model: Option<String>,
    /// Every other model's production, by model (the file's top level only).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) models: BTreeMap<String, Production>,
}

impl Production {
    pub(crate) fn load(state: &StateDir) -> Result<Production> {
        let path = state.production_file();
        if !path.exists() {
            return Ok(Production::default());
        }
        state::read_json(&path)
    }

    /// The recipes production.json names as production, one per model, if it can be read:
    /// what the memory plan stops last.
    pub(crate) fn current_recipes(state: &StateDir) -> Vec<String> {
        let Ok(file) = Production::load(state) else {
            return Vec::new();
        };
        (file.lanes().into_values())
            .flat_map(|p| {
                let candidate = p.candidate.map(|c| c.upstream.recipe);
                p.current.map(|e| e.recipe).into_iter().chain(candidate)
            })
            .collect()
    }

    /// The model this production serves (`""`: the unnamed one).
    pub(crate) fn model_id(&self) -> &str {
        self.model.as_deref().unwrap_or_default()
    }

    /// Every model's production in the file, by model, each on its own.
    pub(crate) fn lanes(&self) -> BTreeMap<String, Production> {
        let mut out: BTreeMap<String, Production> = (self.models.iter())
            .map(|(m, p)| {
                let mut p = p.clone();
                p.model = Some(m.clone());
                p.models.clear();
                (m.clone(), p)
            })
            .collect();
        let mut top = self.clone();
        top.models.clear();
        top.model = Some(self.model_id().to_string());
        out.insert(self.model_id().to_string(), top);
        out
    }

    /// `model`'s production: empty when it has none yet.
    pub(crate) fn lane(&self, model: &str) -> Production {
        self.lanes().remove(model).unwrap_or_else(|| Production {
            model: Some(model.to_string()),
            ..Production::default()
        })
    }

    /// The file with `model`'s production replaced by `next`, the others as they are. The
    /// model at the top stays there unless it holds nothing (a first model then takes it:
    /// a setup of one model keeps the file it always had).
    pub(crate) fn with_lane(&self, model: &str, next: Production) -> Production {
        self.with_lane_as(model, model, next)
    }

    /// The file with `lane`'s production replaced by `next`, which serves `model` from now
    /// on: with one model served, another model's recipe takes its place (`up` of it, then
    /// `rollback`), the lane under its new name and in its old place.
    pub(crate) fn with_lane_as(&self, lane: &str, model: &str, next: Production) -> Production {
        let mut lanes = self.lanes();
        let was_top = self.model_id() == lane;
        lanes.remove(lane);
        let mut next = next;
        next.model = Some(model.to_string());
        next.models.clear();
        lanes.insert(model.to_string(), next);
        let holds = |m: &String| lanes.get(m).is_some_and(|p| !p.is_empty());
        let top = if was_top { model } else { self.model_id() };
        let top_id = [top, model]
            .into_iter()
            .map(String::from)
            .chain(lanes.keys().cloned())
            .find(holds)
            .unwrap_or_else(|| self.model_id().to_string());
        lanes.retain(|m, p| m == &top_id || !p.is_empty());
        let mut top = lanes.remove(&top_id).unwrap_or_default();
        top.models = (lanes.into_iter())
            .map(|(m, mut p)| {
                p.model = None;
                (m, p)
            })
            .collect();
        top
    }

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
        let file = Production::default().with_lane("chat", serving("chat-a"));
        assert_eq!(file.model.as_deref(), Some("chat"));
        assert_eq!(file.current.as_ref().unwrap().recipe, "chat-a");
        assert!(file.models.is_empty());
        // A second model goes under `models`; the first stays at the top.
        let file = file.with_lane("coder", serving("coder-a"));
        assert_eq!(file.current.as_ref().unwrap().recipe, "chat-a");
        let text = serde_json::to_value(&file).unwrap();
        assert_eq!(text["models"]["coder"]["current"]["recipe"], "coder-a");
        assert!(text["models"]["coder"].get("model").is_none(), "{text}");
        // Each reads back on its own, and a change of one leaves the other as it was.
        let back: Production = serde_json::from_value(text).unwrap();
        let lanes = back.lanes();
        assert_eq!(lanes.len(), 2);
        assert_eq!(lanes["coder"].model.as_deref(), Some("coder"));
        let next = back.with_lane("coder", promoted(back.lane("coder"), "coder-b"));
        assert_eq!(next.lane("chat").current.unwrap().recipe, "chat-a");
        assert_eq!(next.lane("coder").current.unwrap().recipe, "coder-b");
        assert_eq!(next.lane("coder").previous[0].recipe, "coder-a");
        // A model with nothing left drops out; the top moves to one that has something.
        let gone = next.with_lane("chat", Production::default());
        assert_eq!(gone.model.as_deref(), Some("coder"));
        assert!(gone.models.is_empty(), "{gone:?}");
        // One model's lane taken by another model's recipe: renamed in its place, the
        // stack kept, the other models untouched.
        let renamed = next.with_lane_as("chat", "talk", promoted(next.lane("chat"), "talk-a"));
        assert_eq!(renamed.model.as_deref(), Some("talk"));
        assert_eq!(renamed.lane("talk").previous[0].recipe, "chat-a");
        assert_eq!(renamed.lane("coder").current.unwrap().recipe, "coder-b");
        assert!(!renamed.lanes().contains_key("chat"), "{renamed:?}");
        // A file written before models is one model's, the unnamed one's until settled.
        let old: Production =
            serde_json::from_str(r#"{"current": {"recipe": "prod", "since": "x"}}"#).unwrap();
        assert_eq!(old.lanes().keys().collect::<Vec<_>>(), [""]);
    }
}
