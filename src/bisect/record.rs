//! A bisect as it is kept: `STATE/bisect/ID.json`, rewritten whole after every benchmark
//! round, so an interrupted or killed bisect resumes from what it recorded (`--resume`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::judge::{Criterion, Judgement, Verdict};
use super::search::Known;
use crate::bench::gates::Metric;
use crate::bench::stats::Interval;
use crate::error::{Error, Result};
use crate::images::history::Order;
use crate::state::{self, StateDir};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Status {
    Running,
    /// Ctrl-C (or a signal): resumable.
    Interrupted,
    /// A step could not be judged within its rounds, or a step needs what the bisect may not
    /// do (production's memory): resumable once the cause is dealt with.
    Stopped,
    /// Started over with `--fresh`.
    Abandoned,
    Done,
}

/// How every digest is measured: the same for all of them, fixed when the bisect began.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Plan {
    pub(in crate::bisect) suite: String,
    /// Measured runs per case per repeat [default: the suite's].
    pub(in crate::bisect) runs: Option<usize>,
    pub(in crate::bisect) warmup: Option<usize>,
    /// Runs of the whole suite per round: the interval's runs.
    pub(in crate::bisect) repeat: usize,
    /// Rounds a digest gets before it is left inconclusive.
    pub(in crate::bisect) rounds: usize,
    /// Production may be held and stopped for a step that needs its memory.
    pub(in crate::bisect) allow_swap: bool,
}

impl Plan {
    pub(crate) fn suite(&self) -> &str {
        &self.suite
    }

    pub(crate) fn repeat(&self) -> usize {
        self.repeat
    }

    pub(crate) fn rounds(&self) -> usize {
        self.rounds
    }
}

/// Which part a measurement plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Role {
    GoodEnd,
    BadEnd,
    Step,
}

/// One digest in the range, in history order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Candidate {
    pub(in crate::bisect) digest: String,
    /// A build's file (`--builds`); images have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bisect) path: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bisect) created: Option<String>,
    pub(in crate::bisect) first_seen: String,
}

impl Candidate {
    pub(crate) fn digest(&self) -> &str {
        &self.digest
    }

    pub(crate) fn created(&self) -> Option<&str> {
        self.created.as_deref()
    }

    pub(crate) fn first_seen(&self) -> &str {
        &self.first_seen
    }
}

/// One benchmark of a digest (`repeat` runs of the suite).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Round {
    pub(in crate::bisect) run_id: String,
    pub(in crate::bisect) bench: PathBuf,
    /// Each metric's per-run p50 over this round's runs.
    pub(in crate::bisect) confidence: BTreeMap<Metric, Interval>,
    pub(in crate::bisect) seconds: f64,
}

/// Everything measured of one digest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Measurement {
    pub(in crate::bisect) role: Role,
    /// The step's number (1, 2, …); 0 for the ends.
    pub(in crate::bisect) step: usize,
    pub(in crate::bisect) rounds: Vec<Round>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bisect) judgement: Option<Judgement>,
    /// Why it could not be measured (pull or start failed): passed over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bisect) skipped: Option<String>,
    /// Wall time spent on it: image, start, rounds, stop.
    pub(in crate::bisect) seconds: f64,
}

impl Measurement {
    pub(crate) fn role(&self) -> Role {
        self.role
    }

    pub(crate) fn step(&self) -> usize {
        self.step
    }

    pub(crate) fn rounds(&self) -> &[Round] {
        &self.rounds
    }

    pub(crate) fn judgement(&self) -> Option<&Judgement> {
        self.judgement.as_ref()
    }

    pub(crate) fn skipped(&self) -> Option<&str> {
        self.skipped.as_deref()
    }

    pub(crate) fn seconds(&self) -> f64 {
        self.seconds
    }

    pub(crate) fn verdict(&self) -> Option<Verdict> {
        self.judgement.as_ref().map(|j| j.verdict)
    }

    /// Good or bad: nothing more to measure.
    pub(crate) fn decided(&self) -> bool {
        self.skipped.is_some() || matches!(self.verdict(), Some(Verdict::Good | Verdict::Bad))
    }

    /// Each metric pooled over every round.
    pub(crate) fn pooled(&self) -> BTreeMap<Metric, Interval> {
        let rounds: Vec<&BTreeMap<Metric, Interval>> =
            self.rounds.iter().map(|r| &r.confidence).collect();
        super::judge::pool_all(&rounds)
    }
}

/// The answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Answer {
    pub(in crate::bisect) last_good: String,
    pub(in crate::bisect) first_bad: String,
    /// Digests between the two that could not be measured: the change is in one of them
    /// or in the first bad.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(in crate::bisect) unmeasured: Vec<String>,
}

impl Answer {
    pub(crate) fn last_good(&self) -> &str {
        &self.last_good
    }

    pub(crate) fn first_bad(&self) -> &str {
        &self.first_bad
    }

    pub(crate) fn unmeasured(&self) -> &[String] {
        &self.unmeasured
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Bisect {
    pub(in crate::bisect) id: String,
    pub(in crate::bisect) recipe: String,
    /// The image as the recipe names it.
    pub(in crate::bisect) reference: String,
    pub(in crate::bisect) started_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bisect) finished_at: Option<String>,
    pub(in crate::bisect) status: Status,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bisect) why_stopped: Option<String>,
    pub(in crate::bisect) criterion: Criterion,
    /// The metric `Differs` chose once the ends were measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bisect) chosen: Option<Metric>,
    pub(in crate::bisect) plan: Plan,
    /// The model every digest serves: a bisect over a changed model compares nothing.
    pub(in crate::bisect) model_fingerprint: Option<String>,
    /// The directory of builds walked (`--builds`), for a process recipe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bisect) builds: Option<PathBuf>,
    pub(in crate::bisect) order: Order,
    /// The good end first, the bad end last, the digests between in history order.
    pub(in crate::bisect) digests: Vec<Candidate>,
    /// By digest.
    pub(in crate::bisect) measurements: BTreeMap<String, Measurement>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bisect) answer: Option<Answer>,
}

impl Bisect {
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    pub(crate) fn recipe(&self) -> &str {
        &self.recipe
    }

    pub(crate) fn reference(&self) -> &str {
        &self.reference
    }

    pub(crate) fn criterion(&self) -> &Criterion {
        &self.criterion
    }

    pub(crate) fn chosen(&self) -> Option<Metric> {
        self.chosen
    }

    pub(crate) fn plan(&self) -> &Plan {
        &self.plan
    }

    pub(crate) fn builds(&self) -> Option<&Path> {
        self.builds.as_deref()
    }

    pub(crate) fn order(&self) -> Order {
        self.order
    }

    pub(crate) fn digests(&self) -> &[Candidate] {
        &self.digests
    }

    pub(crate) fn measurements(&self) -> &BTreeMap<String, Measurement> {
        &self.measurements
    }

    pub(crate) fn answer(&self) -> Option<&Answer> {
        self.answer.as_ref()
    }

    pub(crate) fn path(&self, state: &StateDir) -> Result<PathBuf> {
        Ok(state.bisect_dir()?.join(format!("{}.json", self.id)))
    }

    /// Where its rounds' benchmark results go.
    pub(crate) fn rounds_dir(&self, state: &StateDir) -> Result<PathBuf> {
        let dir = state.bisect_dir()?.join(&self.id);
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
        Ok(dir)
    }

    pub(crate) fn save(&self, state: &StateDir) -> Result<()> {
        state::write_json(&self.path(state)?, self)
    }

    /// How people know a candidate: a build's path, or the image's `repo@digest`.
    pub(crate) fn label(&self, h: &crate::images::history::History, digest: &str) -> String {
        let path = self.digests.iter().find(|c| c.digest == digest);
        match path.and_then(|c| c.path.as_ref()) {
            Some(p) => format!("{} ({})", p.display(), crate::units::short_digest(digest)),
            None => h.run_reference(digest),
        }
    }

    pub(crate) fn good_end(&self) -> &str {
        &self.digests[0].digest
    }

    pub(crate) fn bad_end(&self) -> &str {
        &self.digests[self.digests.len() - 1].digest
    }

    /// What is known of each digest, in order (the search's input).
    pub(crate) fn known(&self) -> Vec<Known> {
        self.digests
            .iter()
            .map(|c| match self.measurements.get(&c.digest) {
                Some(m) if m.skipped.is_some() => Known::Skipped,
                Some(m) => match m.verdict() {
                    Some(Verdict::Good) => Known::Good,
                    Some(Verdict::Bad) => Known::Bad,
                    _ => Known::Unknown,
                },
                None => Known::Unknown,
            })
            .collect()
    }

    /// Steps measured (the ends not counted).
    pub(crate) fn steps(&self) -> usize {
        self.measurements
            .values()
            .filter(|m| m.role == Role::Step)
            .count()
    }

    /// The metric the steps are judged on, when a metric (not a gate).
    pub(crate) fn metric(&self) -> Option<Metric> {
        match &self.criterion {
            Criterion::Metric(m) => Some(*m),
            Criterion::Differs => self.chosen,
            Criterion::Gate(_) => None,
        }
    }
}

/// The newest bisect of `recipe` that has not finished (nor been abandoned).
pub(crate) fn unfinished(state: &StateDir, recipe: &str) -> Result<Option<Bisect>> {
    let dir = state.bisect_dir()?;
    let files = state::json_files(&dir, |_| true)?;
    let (all, damaged) = state::read_json_files::<Bisect>(files);
    for d in damaged {
        tracing::warn!("{d}");
    }
    Ok(all
        .into_iter()
        .map(|(_, b)| b)
        .filter(|b| b.recipe == recipe && !matches!(b.status, Status::Done | Status::Abandoned))
        .max_by(|a, b| a.id.cmp(&b.id)))
}

/// A round's benchmark result file: `bisect/ID/NN-DIGEST-rR.json`.
pub(crate) fn round_file(dir: &Path, index: usize, digest: &str, round: usize) -> PathBuf {
    dir.join(format!(
        "{index:02}-{}-r{round}.json",
        crate::units::short_id(digest)
    ))
}
