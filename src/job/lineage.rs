//! A serving recipe's `model.produced_by: JOB`: the model is what that job wrote. Before a
//! start, the job's newest run must have succeeded (outputs verified), the model must be
//! one of its outputs, and no input may have changed since the run began — otherwise the
//! model is refused. What passes is recorded with the `up` run: inputs' fingerprints → job
//! image digest → outputs' fingerprint.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::record::{InputPrint, JobRecord, JobState, OutputResult};
use crate::error::{Error, Result};
use crate::state::StateDir;

/// Which job made a model, from what, with what.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Lineage {
    job: String,
    run_id: String,
    image: String,
    image_digest: String,
    inputs: Vec<InputPrint>,
    output: PathBuf,
    /// The output as the job left it (a serving recipe's patches may change it since).
    output_fingerprint: Option<String>,
    finished_at: Option<String>,
}

impl std::fmt::Display for Lineage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "made by job {} (run {}, image {}, finished {}; outputs {})",
            self.job,
            self.run_id,
            crate::units::short_digest(&self.image_digest),
            self.finished_at.as_deref().unwrap_or("?"),
            self.output_fingerprint
                .as_deref()
                .map_or("-", crate::units::short_id)
        )
    }
}

/// The lineage of the model at `model` produced by `job`, or why it may not serve.
pub(crate) async fn check(
    docker: &bollard::Docker,
    state: &StateDir,
    job: &str,
    model: &Path,
) -> Result<Lineage> {
    let rec = super::record::latest(state, job)?.ok_or_else(|| Error::ModelRefused {
        model: model.to_path_buf(),
        why: crate::error::Unfresh::NotRun {
            job: job.to_string(),
        },
    })?;
    let rec = super::finalize::finalize(docker, state, rec).await?;
    if rec.state != JobState::Succeeded {
        let ended = match rec.state {
            JobState::Running => None,
            s => Some((s.to_string(), rec.explanation.clone())),
        };
        return Err(Error::ModelRefused {
            model: model.to_path_buf(),
            why: crate::error::Unfresh::NotSucceeded {
                job: job.to_string(),
                run: rec.run_id.clone(),
                ended,
            },
        });
    }
    let out = output_holding(&rec, model)?;
    if let Some(reason) = super::finalize::incomplete_reason(&out.path) {
        return Err(Error::ModelRefused {
            model: model.to_path_buf(),
            why: crate::error::Unfresh::Incomplete { reason },
        });
    }
    inputs_unchanged(&rec, model)?;
    Ok(Lineage {
        job: job.to_string(),
        run_id: rec.run_id.clone(),
        image: rec.image.clone(),
        image_digest: rec.image_digest.clone(),
        inputs: rec.inputs.clone(),
        output: out.path.clone(),
        output_fingerprint: out.fingerprint.clone(),
        finished_at: rec.finished_at.clone(),
    })
}

/// The output of `rec` that holds `model` (the dir itself or a file in it).
fn output_holding<'r>(rec: &'r JobRecord, model: &Path) -> Result<&'r OutputResult> {
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let model_c = canon(model);
    rec.outputs
        .iter()
        .find(|o| model_c.starts_with(canon(&o.path)))
        .ok_or_else(|| {
            Error::Usage(format!(
                "model.path {} is not an output of job {} (its outputs: {}); fix \
                 model.produced_by or model.path",
                model.display(),
                rec.job,
                rec.outputs
                    .iter()
                    .map(|o| o.path.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
}

/// No input changed after the run began (modification times, to the second).
fn inputs_unchanged(rec: &JobRecord, model: &Path) -> Result<()> {
    for input in &rec.inputs {
        if let Some(when) = newest_change(&input.path) {
            if when > rec.started_unix {
                return Err(Error::ModelRefused {
                    model: model.to_path_buf(),
                    why: crate::error::Unfresh::Stale {
                        input: input.path.clone(),
                        when,
                        job: rec.job.clone(),
                        started_at: rec.started_at.clone(),
                    },
                });
            }
        }
    }
    Ok(())
}

/// The newest modification time (unix seconds) of `path` or anything under it.
fn newest_change(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let mut newest = None;
    let mut stack = vec![path.to_path_buf()];
    while let Some(p) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        let m = meta.mtime().max(0) as u64;
        newest = Some(newest.map_or(m, |n: u64| n.max(m)));
        if meta.is_dir() {
            if let Ok(rd) = std::fs::read_dir(&p) {
                stack.extend(rd.filter_map(|e| e.ok().map(|e| e.path())));
            }
        }
    }
    newest
}
