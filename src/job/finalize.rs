//! What happens once a job's container has ended, whoever notices first (`run` following
//! it, `jobs`, `logs`, `stop`, or `up` checking a model's producer): the exit explained,
//! its output copied into the run, known fatal lines named, root-written outputs given back,
//! outputs verified with the patch expectations, then fingerprinted — or marked incomplete.
//! Idempotent, and one finalizer per run at a time (a lock file in the run's directory).

use std::os::unix::io::AsRawFd;
use std::path::Path;

use serde::Serialize;

use super::container;
use super::fatal;
use super::record::{JobRecord, JobState};
use crate::error::{Error, Result};
use crate::patch::owner::{self, Owner};
use crate::state::{self, StateDir};

/// The marker in an output dir whose contents are not (yet) a verified result.
pub(crate) const INCOMPLETE: &str = ".sparkctl-incomplete.json";

#[derive(Debug, Serialize)]
struct Marker<'a> {
    job: &'a str,
    run_id: &'a str,
    reason: &'a str,
}

/// Creates an output dir (given to `owner`, so a container running as that user can
/// write and the user keeps the files) and marks it incomplete until the run is verified.
pub(crate) fn prepare_output(path: &Path, owner: Owner, job: &str, run_id: &str) -> Result<()> {
    let mut missing = Vec::new();
    let mut probe = path.to_path_buf();
    while !probe.exists() {
        missing.push(probe.clone());
        if !probe.pop() {
            break;
        }
    }
    std::fs::create_dir_all(path)
        .map_err(|e| Error::io(format!("cannot create the output {}", path.display()), e))?;
    mark(path, job, run_id, "the job is running")?;
    if owner::can_chown_directly() {
        // As root (sudo), what sparkctl creates would be root's: give it to the user.
        missing.push(path.join(INCOMPLETE));
        for p in &missing {
            std::os::unix::fs::lchown(p, Some(owner.uid), Some(owner.gid))
                .map_err(|e| Error::io(format!("cannot chown {}", p.display()), e))?;
        }
    }
    Ok(())
}

fn mark(dir: &Path, job: &str, run_id: &str, reason: &str) -> Result<()> {
    let marker = Marker {
        job,
        run_id,
        reason,
    };
    state::write_json(&dir.join(INCOMPLETE), &marker)
}

/// Whether `dir` holds partial outputs, and why.
pub(crate) fn incomplete_reason(dir: &Path) -> Option<String> {
    let v: serde_json::Value = state::read_json(&dir.join(INCOMPLETE)).ok()?;
    Some(format!(
        "{} (job {}, run {})",
        v["reason"].as_str().unwrap_or("unknown"),
        v["job"].as_str().unwrap_or("?"),
        v["run_id"].as_str().unwrap_or("?")
    ))
}

/// An exclusive lock on the run's directory, held while finalizing.
fn lock_run(state: &StateDir, run_id: &str) -> Result<std::fs::File> {
    let log = state.job_log_file(run_id)?;
    let path = log.with_file_name(".finalize.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| Error::io(format!("cannot open {}", path.display()), e))?;
    // SAFETY: flock on a descriptor this function owns; blocking: the other finalizer
    // finishes in seconds, and then this one finds the record final.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
    Ok(file)
}

/// Finalizes `rec` if its container has ended; returns it as it stands now.
pub(crate) async fn finalize(
    docker: &bollard::Docker,
    state: &StateDir,
    rec: JobRecord,
) -> Result<JobRecord> {
    if rec.state.is_final() {
        return Ok(rec);
    }
    let _run_lock = lock_run(state, &rec.run_id)?;
    // Re-read under the lock: another command may have finalized it meanwhile.
    let mut rec: JobRecord = state::read_json(&state.job_record_file(&rec.run_id)?)?;
    if rec.state.is_final() {
        return Ok(rec);
    }
    let exit = match container::ended(docker, &rec.container).await? {
        Ok(None) => return Ok(rec),
        Ok(Some(exit)) => Some(exit),
        Err(()) => None,
    };
    if exit.is_some() {
        let bytes = container::output(docker, &rec.container).await?;
        let path = state.job_log_file(&rec.run_id)?;
        state::write_atomic(&path, &bytes)?;
        rec.log = Some(path);
        let text = String::from_utf8_lossy(&bytes);
        rec.findings = fatal::scan(&text);
        rec.progress = super::progress::last_in(rec.recipe.progress.as_deref(), &text);
    }
    give_back(docker, state, &mut rec).await;
    verify(&mut rec);
    rec.state = match &exit {
        None => JobState::Lost,
        Some(e) if e.code == Some(0) && !e.oom_killed => {
            if rec.outputs.iter().all(|o| o.checks.iter().all(|c| c.ok)) {
                JobState::Succeeded
            } else {
                JobState::Unverified
            }
        }
        Some(_) if rec.stop_requested => JobState::Stopped,
        Some(_) => JobState::Failed,
    };
    if rec.state == JobState::Succeeded {
        // A warning that matched on the way to a verified result explains no failure.
        rec.findings.clear();
    }
    rec.explanation = Some(explanation(&rec, exit.as_ref()));
    rec.exit = exit;
    settle_outputs(state, &mut rec).await?;
    rec.finished_at = Some(crate::units::now_utc());
    rec.save(state)?;
    Ok(rec)
}

fn explanation(rec: &JobRecord, exit: Option<&crate::runtime::Exit>) -> String {
    let Some(exit) = exit else {
        return "its container is gone (removed outside sparkctl); how it ended is unknown".into();
    };
    let mut text = fatal::explain(exit, rec.stop_requested);
    if rec.state == JobState::Unverified {
        let failed: Vec<String> = rec
            .outputs
            .iter()
            .flat_map(|o| o.checks.iter().filter(|c| !c.ok))
            .map(|c| format!("{}: {}", c.what, c.detail))
            .collect();
        text.push_str(&format!(
            ", but its outputs fail their checks: {}",
            failed.join("; ")
        ));
    }
    text
}

/// Outputs a root container wrote go back to the owner (directly as root, else through a
/// helper container of the job's image).
async fn give_back(docker: &bollard::Docker, state: &StateDir, rec: &mut JobRecord) {
    let Ok(owner) = owner::resolve(&rec.owner) else {
        return;
    };
    if rec.user == rec.owner {
        return;
    }
    for out in &rec.outputs {
        let Ok(paths) = owner::not_owned_by(&out.path, owner) else {
            continue;
        };
        if paths.is_empty() {
            continue;
        }
        let done = if owner::can_chown_directly() {
            owner::chown_direct(&out.path, &paths, owner)
        } else {
            owner::chown_via_container(
                docker,
                &rec.image_digest,
                &state.id(),
                &out.path,
                &paths,
                owner,
            )
            .await
        };
        match done {
            Ok(()) => rec.chowned += paths.len(),
            Err(e) => rec.warnings.push(format!(
                "{} path(s) in {} are not the owner's ({e})",
                paths.len(),
                out.path.display()
            )),
        }
    }
}

fn verify(rec: &mut JobRecord) {
    for (out, spec) in rec.outputs.iter_mut().zip(&rec.recipe.outputs) {
        out.checks = crate::patch::expect::verify(&out.path, &spec.expect);
    }
}

/// A verified result is fingerprinted and unmarked; anything else stays marked incomplete,
/// with the reason.
async fn settle_outputs(state: &StateDir, rec: &mut JobRecord) -> Result<()> {
    let reason = format!(
        "job {} {}",
        rec.state,
        rec.explanation.as_deref().unwrap_or("")
    );
    for out in &mut rec.outputs {
        if rec.state == JobState::Succeeded {
            out.fingerprint = Some(
                crate::patch::fingerprint_in_background(&out.path, state)
                    .await?
                    .digest,
            );
            match std::fs::remove_file(out.path.join(INCOMPLETE)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io("cannot remove the incomplete marker", e)),
            }
            out.incomplete = false;
        } else if out.path.is_dir() {
            mark(&out.path, &rec.job, &rec.run_id, &reason)?;
            out.incomplete = true;
        }
    }
    Ok(())
}

/// Every job run, newest first, with the ones whose container has ended finalized now;
/// and the records that could not be read (one damaged record hides no other).
pub(crate) async fn refresh(
    docker: &bollard::Docker,
    state: &StateDir,
) -> Result<(Vec<JobRecord>, Vec<crate::state::Damaged>)> {
    let (runs, damaged) = super::record::all(state)?;
    let mut out = Vec::with_capacity(runs.len());
    for rec in runs {
        let mut rec = finalize(docker, state, rec).await?;
        if !rec.state.is_final() && rec.recipe.progress.is_some() {
            // Where it is now, from the end of its output (not stored: it moves).
            let tail = super::container::tail(docker, &rec.container, 200).await;
            rec.progress = super::progress::last_in(rec.recipe.progress.as_deref(), &tail);
        }
        out.push(rec);
    }
    Ok((out, damaged))
}
