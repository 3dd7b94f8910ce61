//! `STATE/jobs/RUN.json`: one job run, from its start to what it left behind; its output
//! copied to `STATE/jobs/RUN/job.log`. The record holds the recipe as it ran, so a later
//! edit of the file cannot change what the run is judged against.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::recipe::JobRecipe;
use crate::error::Result;
use crate::patch::expect::Check;
use crate::runtime::Exit;
use crate::state::{self, StateDir};

/// Where a job run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum JobState {
    /// Its container runs (or ran, and nobody has looked since).
    Running,
    /// Exit 0 and every output verified and fingerprinted.
    Succeeded,
    /// Exit 0, but an output failed its expectations: not a result.
    Unverified,
    /// A non-zero exit (OOM, a crash, a fatal line).
    Failed,
    /// `sparkctl stop` ended it.
    Stopped,
    /// Its container is gone (removed by hand) before sparkctl saw how it ended.
    Lost,
}

impl JobState {
    pub(crate) fn is_final(self) -> bool {
        self != JobState::Running
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            JobState::Running => "running",
            JobState::Succeeded => "succeeded",
            JobState::Unverified => "unverified",
            JobState::Failed => "failed",
            JobState::Stopped => "stopped",
            JobState::Lost => "lost",
        })
    }
}

/// A log line sparkctl knows, with what it means and the fix.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct Finding {
    pub(in crate::job) line: String,
    pub(in crate::job) cause: String,
    pub(in crate::job) fix: String,
}

impl Finding {
    pub(crate) fn line(&self) -> &str {
        &self.line
    }

    pub(crate) fn cause(&self) -> &str {
        &self.cause
    }

    pub(crate) fn fix(&self) -> &str {
        &self.fix
    }
}

/// An input as the job read it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct InputPrint {
    pub(in crate::job) path: PathBuf,
    pub(in crate::job) fingerprint: String,
}

/// An output as the job left it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct OutputResult {
    pub(in crate::job) path: PathBuf,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(in crate::job) checks: Vec<Check>,
    /// Set only when the run succeeded: a fingerprint is never taken of partial outputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::job) fingerprint: Option<String>,
    /// Marked with `.sparkctl-incomplete.json`: partial, never mistaken for a result.
    pub(in crate::job) incomplete: bool,
}

impl OutputResult {
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn checks(&self) -> &[Check] {
        &self.checks
    }

    pub(crate) fn fingerprint(&self) -> Option<&str> {
        self.fingerprint.as_deref()
    }

    pub(crate) fn incomplete(&self) -> bool {
        self.incomplete
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct JobRecord {
    pub(in crate::job) run_id: String,
    pub(in crate::job) job: String,
    pub(in crate::job) recipe_hash: String,
    pub(in crate::job) recipe_file: PathBuf,
    /// The recipe as it ran.
    pub(in crate::job) recipe: JobRecipe,
    pub(in crate::job) image: String,
    /// The image id the container ran.
    pub(in crate::job) image_digest: String,
    pub(in crate::job) unpinned: bool,
    pub(in crate::job) container: String,
    pub(in crate::job) container_name: String,
    /// `UID:GID` the container ran as.
    pub(in crate::job) user: String,
    /// Who the outputs belong to afterwards.
    pub(in crate::job) owner: String,
    pub(in crate::job) started_at: String,
    /// Unix seconds, for comparing with the inputs' modification times.
    pub(in crate::job) started_unix: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::job) finished_at: Option<String>,
    pub(in crate::job) state: JobState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::job) exit: Option<Exit>,
    /// How it ended, in words (exit code, OOM, who stopped it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::job) explanation: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(in crate::job) findings: Vec<Finding>,
    pub(in crate::job) inputs: Vec<InputPrint>,
    pub(in crate::job) outputs: Vec<OutputResult>,
    /// The container's output, copied when it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::job) log: Option<PathBuf>,
    /// Paths given back to the owner after a root container wrote them.
    #[serde(default)]
    pub(in crate::job) chowned: usize,
    /// `sparkctl stop` asked for the end (so a SIGKILL exit is not blamed on memory).
    #[serde(default)]
    pub(in crate::job) stop_requested: bool,
    /// Servers stopped to make room before the start.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(in crate::job) stopped_for_memory: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(in crate::job) warnings: Vec<String>,
    /// Progress last parsed from the log (done, total).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::job) progress: Option<(u64, u64)>,
}

impl JobRecord {
    pub(crate) fn run_id(&self) -> &str {
        &self.run_id
    }

    pub(crate) fn job(&self) -> &str {
        &self.job
    }

    pub(crate) fn recipe(&self) -> &JobRecipe {
        &self.recipe
    }

    pub(crate) fn container(&self) -> &str {
        &self.container
    }

    pub(crate) fn container_name(&self) -> &str {
        &self.container_name
    }

    pub(crate) fn user(&self) -> &str {
        &self.user
    }

    pub(crate) fn owner(&self) -> &str {
        &self.owner
    }

    pub(crate) fn started_at(&self) -> &str {
        &self.started_at
    }

    pub(crate) fn started_unix(&self) -> u64 {
        self.started_unix
    }

    pub(crate) fn finished_at(&self) -> Option<&str> {
        self.finished_at.as_deref()
    }

    pub(crate) fn state(&self) -> JobState {
        self.state
    }

    pub(crate) fn explanation(&self) -> Option<&str> {
        self.explanation.as_deref()
    }

    pub(crate) fn findings(&self) -> &[Finding] {
        &self.findings
    }

    pub(crate) fn outputs(&self) -> &[OutputResult] {
        &self.outputs
    }

    pub(crate) fn log(&self) -> Option<&Path> {
        self.log.as_deref()
    }

    pub(crate) fn chowned(&self) -> usize {
        self.chowned
    }

    pub(crate) fn warnings(&self) -> &[String] {
        &self.warnings
    }

    pub(crate) fn progress(&self) -> Option<(u64, u64)> {
        self.progress
    }

    pub(crate) fn save(&self, state: &StateDir) -> Result<PathBuf> {
        let path = state.job_record_file(&self.run_id)?;
        state::write_json(&path, self)?;
        Ok(path)
    }
}

/// Every job run, newest first, and the records that could not be read.
pub(crate) fn all(state: &StateDir) -> Result<(Vec<JobRecord>, Vec<state::Damaged>)> {
    // Read without creating `jobs/`: `start` of a server asks too, on state dirs with no jobs.
    let dir = state.root().join("jobs");
    let (mut runs, damaged) = state::read_json_dir::<JobRecord>(&dir, |_| true)?;
    runs.sort_by(|a, b| b.run_id.cmp(&a.run_id));
    Ok((runs, damaged))
}

/// The newest run of `job`.
pub(crate) fn latest(state: &StateDir, job: &str) -> Result<Option<JobRecord>> {
    Ok(all(state)?.0.into_iter().find(|r| r.job == job))
}
