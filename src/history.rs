//! Run records: one per `up`, `rollback`, or front-door event (a restart, a failover), in
//! `STATE/runs/RUN.json`, newest first in `history`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::bench::gates::GateResult;
use crate::error::{Error, Result};
use crate::state::{self, StateDir};

/// The phases of `up` (ARCHITECTURE.md, "The phases of `up`") and of `rollback`, as run
/// records name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum PhaseName {
    Plan,
    Patch,
    Start,
    MeasureProduction,
    Bench,
    Judge,
    /// The candidate met live traffic (shadow, canary) until the analysis decided.
    Rollout,
    Switch,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Phase {
    pub(crate) name: PhaseName,
    pub(crate) ms: f64,
    pub(crate) ok: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) detail: String,
}

/// What made a run record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Command {
    #[default]
    Up,
    Rollback,
    /// The front door's watch restarted production.
    Restart,
    /// The front door's watch switched to the recipe's fallback.
    Failover,
    /// One measurement of a `bisect`: a digest started on its own port and benchmarked.
    Bisect,
    /// `adopt`: the production port handed from a server sparkctl did not start to the
    /// front door, serving its recipe.
    Adopt,
    /// An `upgrade`: the tag's digest of today, judged by `up` when it is new.
    Upgrade,
    /// One variant of a `try`: started on its own port, benchmarked, stopped.
    Try,
}

impl std::fmt::Display for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Command::Up => "up",
            Command::Rollback => "rollback",
            Command::Restart => "restart",
            Command::Failover => "failover",
            Command::Bisect => "bisect",
            Command::Adopt => "adopt",
            Command::Upgrade => "upgrade",
            Command::Try => "try",
        })
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Outcome {
    /// The candidate passed and serves production.
    Promoted,
    /// The candidate passed; not promoted (`--no-promote`).
    Passed,
    /// The candidate failed its gates or its benchmark: production keeps serving.
    Rejected,
    /// The benchmark could not decide (transport faults, gates without evidence): the
    /// candidate is not promoted, and not blamed.
    Inconclusive,
    #[default]
    Failed,
    Interrupted,
    RolledBack,
    Planned,
    /// The watch brought production (or its fallback) back.
    Recovered,
    /// A bisect measurement judged like the good end.
    Good,
    /// A bisect measurement judged like the bad end.
    Bad,
    /// A bisect measurement that could not be made (the digest could not be pulled or
    /// did not start), or an upgrade that fetched a new digest and could not deploy it:
    /// skipped, never judged.
    Skipped,
    /// An upgrade that found the tag at the pinned digest: nothing ran.
    Unchanged,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Outcome::Promoted => "promoted",
            Outcome::Passed => "passed",
            Outcome::Rejected => "rejected",
            Outcome::Inconclusive => "inconclusive",
            Outcome::Failed => "failed",
            Outcome::Interrupted => "interrupted",
            Outcome::RolledBack => "rolled-back",
            Outcome::Planned => "planned",
            Outcome::Recovered => "recovered",
            Outcome::Good => "good",
            Outcome::Bad => "bad",
            Outcome::Skipped => "skipped",
            Outcome::Unchanged => "unchanged",
        })
    }
}

/// `STATE/runs/RUN.json`: one `up`, `rollback` or front-door event.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct RunRecord {
    pub(crate) run_id: String,
    pub(crate) command: Command,
    pub(crate) recipe: String,
    pub(crate) started_at: String,
    pub(crate) finished_at: String,
    pub(crate) outcome: Outcome,
    pub(crate) phases: Vec<Phase>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) plan: Option<serde_json::Value>,
    /// The instance this run started (container id or pid): the one benchmarked, and the
    /// one the front door switched to when promoted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) deployment: Option<String>,
    pub(crate) image: Option<String>,
    pub(crate) image_digest: Option<String>,
    pub(crate) unpinned: bool,
    pub(crate) model_fingerprint: Option<String>,
    /// The job that made the model, when the recipe names one (`model.produced_by`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) produced_by: Option<crate::job::lineage::Lineage>,
    pub(crate) patched: Vec<String>,
    /// What the patch changed, as `patch --dry-run` shows it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) patch_diff: String,
    pub(crate) bench: Option<PathBuf>,
    /// The benchmark's HTML report (the candidate beside production's last result).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) report: Option<PathBuf>,
    pub(crate) ttft_p50_ms: Option<f64>,
    pub(crate) decode_tps_p50: Option<f64>,
    pub(crate) gates: Vec<GateResult>,
    /// The candidate's output, copied before it was stopped.
    pub(crate) logs: Option<PathBuf>,
    pub(crate) error: Option<String>,
    /// What answers on the production port after this run.
    pub(crate) serving: Option<String>,
    /// What the candidate held once ready, against its declared `memory_gb`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) memory_observed: Option<crate::memory::MemoryObserved>,
    /// Things the user should know that did not stop the run (memory above its declaration).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) warnings: Vec<String>,
    /// The bisect this run measured a digest for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) bisect: Option<BisectStep>,
    /// The evaluation sets' answers item by item (the candidate's, production's beside).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) eval: Option<crate::eval::gate::Record>,
    /// What an `upgrade` followed and came to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) upgrade: Option<UpgradeNote>,
    /// What showed a production unhealthy on what it answered (a watch's restart or
    /// failover): the offending answers, trimmed, control characters escaped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) evidence: Vec<String>,
    /// The rollout the candidate met live traffic in (shadow, canary): its counts, the
    /// comparison and the decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) rollout: Option<crate::rollout::RolloutStatus>,
}

/// What a bisect measurement was: which bisect, which digest, and the figure it was judged on.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct BisectStep {
    pub(crate) bisect_id: String,
    /// The registry digest (or local image id) measured.
    pub(crate) digest: String,
    /// `good end`, `bad end`, or `step N`.
    pub(crate) role: String,
    /// Benchmark rounds it took (each of `repeat` runs of the suite).
    pub(crate) rounds: usize,
    /// What it was judged on (`ttft p50`, a gate) and the pooled 95% interval.
    pub(crate) judged_on: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) interval: Option<(f64, f64)>,
    /// Why the verdict is what it is.
    pub(crate) detail: String,
}

/// What an `upgrade` run was: the tag it follows, the digests, and what came of them.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct UpgradeNote {
    /// The image as the recipe names it: the tag followed.
    pub(crate) reference: String,
    /// The pinned digest before the run (None: never pinned).
    pub(crate) old: Option<String>,
    /// What the tag pointed to in the registry.
    pub(crate) new: String,
    /// The pin moved to `new` (images.lock; `old` stays in its history).
    pub(crate) pinned: bool,
    /// Why the new digest, fetched and kept, was not deployed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) skipped: Option<String>,
    /// The bisect over the digests skipped since the last good one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) bisect: Option<BisectNote>,
    /// How the owner was told: each notifier, sent or why not (never a secret).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) notified: Vec<String>,
}

/// The bisect an upgrade ran, and what it named.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct BisectNote {
    /// The bisect's id (`STATE/bisect/ID.json`), once it began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) id: Option<String>,
    /// What it was judged on.
    pub(crate) judged_on: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) last_good: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) first_bad: Option<String>,
    /// Why it found no answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
}

impl RunRecord {
    pub(crate) fn new(command: Command, recipe: &str) -> RunRecord {
        RunRecord {
            run_id: state::new_run_id(),
            command,
            recipe: recipe.to_string(),
            started_at: crate::units::now_utc(),
            ..Default::default()
        }
    }

    pub(crate) fn save(&self, state: &StateDir) -> Result<PathBuf> {
        let path = state.run_record_file(&self.run_id)?;
        state::write_json(&path, self)?;
        Ok(path)
    }
}

/// Past runs, newest first, and the run records that could not be read (one damaged
/// record must not hide the others).
pub(crate) fn history(state: &StateDir) -> Result<(Vec<RunRecord>, Vec<state::Damaged>)> {
    let dir = state.runs_dir()?;
    let (mut runs, damaged) = state::read_json_dir::<RunRecord>(&dir, |p| state.is_run_record(p))?;
    runs.sort_by(|a, b| b.run_id.cmp(&a.run_id));
    Ok((runs, damaged))
}

pub(crate) fn run_record(state: &StateDir, run: &str) -> Result<RunRecord> {
    let path = state.run_record_file(run)?;
    if !path.exists() {
        return Err(Error::NoSuch {
            what: crate::error::Thing::Run,
            name: run.to_string(),
            hint: crate::error::Hint::History,
        });
    }
    state::read_json(&path)
}

/// Every run that used a container image, as an image history reads it (damaged records
/// are left out, said at -v: `history` names them).
pub(crate) fn image_uses(state: &StateDir) -> Result<Vec<crate::images::history::RunUse>> {
    let (runs, damaged) = history(state)?;
    for d in damaged {
        tracing::info!("{d}");
    }
    Ok(runs
        .into_iter()
        .filter_map(|r| {
            Some(crate::images::history::RunUse {
                command: r.command.to_string(),
                outcome: r.outcome.to_string(),
                served: matches!(
                    r.outcome,
                    Outcome::Promoted | Outcome::RolledBack | Outcome::Recovered
                ),
                at: r.started_at,
                image: r.image?,
                image_id: r.image_digest?,
                recipe: r.recipe,
                run_id: r.run_id,
            })
        })
        .collect())
}
