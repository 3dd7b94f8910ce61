//! Leaving things as they were: the state lock (waited for), a candidate an earlier bisect
//! left running, and the way back after an error or Ctrl-C (candidate stopped, production
//! serving, the bisect kept as recorded for `--resume`).

use super::record::{Bisect, Status};
use super::step::{candidate_name, Env};
use crate::deploy::switch::{self, SwitchContext, Touched};
use crate::error::{Error, Result};
use crate::history::{Outcome, RunRecord};
use crate::progress::Progress;

/// The state lock, waited for a while: after a bisect was killed while production was
/// stopped for its step, the front door's watch takes the lock again and again trying to
/// bring production back (which the leftover candidate's memory may prevent); the next
/// bisect gets in between, stops the leftover and brings production back itself.
pub(crate) async fn lock_waiting(
    state: &crate::state::StateDir,
    what: &str,
    progress: &dyn Progress,
) -> Result<crate::state::StateLock> {
    lock_within(state, what, std::time::Duration::from_secs(60), progress).await
}

/// The state lock, waited for up to `within` while another process holds it (`say` hears
/// once that it waits, and the holder); then the holder's error (`upgrade` waits so).
pub(crate) async fn lock_within(
    state: &crate::state::StateDir,
    what: &str,
    within: std::time::Duration,
    progress: &dyn Progress,
) -> Result<crate::state::StateLock> {
    let deadline = std::time::Instant::now() + within;
    let mut said = false;
    loop {
        match state.lock(what) {
            Err(e @ Error::StateLockHeld { .. }) if std::time::Instant::now() < deadline => {
                if !said {
                    progress.step(&format!(
                        "waiting (up to {}): {e}",
                        crate::units::format_duration(within)
                    ));
                    said = true;
                }
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            other => return other,
        }
    }
}

/// A candidate a killed bisect left running is stopped before anything starts, and a
/// production it had stopped for its step (its requests held) is brought back.
pub(crate) async fn clean_leftover(
    ctx: &SwitchContext<'_>,
    name: &str,
    progress: &dyn Progress,
) -> Result<()> {
    let candidate = candidate_name(name);
    let left = ctx
        .rt()
        .find(&candidate)
        .await?
        .filter(crate::runtime::Deployment::running);
    if let Some(d) = &left {
        progress.step(&format!(
            "stopping {candidate} ({}), left running by an earlier bisect",
            crate::units::short_id(&d.id)
        ));
    }
    let t = Touched {
        started: left,
        ..Default::default()
    };
    for note in put_back(ctx, t, name, progress).await {
        progress.step(&note);
    }
    Ok(())
}

/// What a step changed, undone: its candidate stopped, production serving again. Without
/// a front door answering there is no production to bring back: only the candidate stops.
async fn put_back(
    ctx: &SwitchContext<'_>,
    mut t: Touched,
    name: &str,
    progress: &dyn Progress,
) -> Vec<String> {
    let candidate = candidate_name(name);
    if ctx.door.status().await.is_ok() {
        return switch::restore(ctx, t, &candidate, progress).await;
    }
    if t.started.is_none() && !t.run_id.is_empty() {
        let found = ctx.rt().find(&candidate).await.ok().flatten();
        t.started = found.filter(|d| d.run_id == t.run_id);
    }
    match t.started.filter(crate::runtime::Deployment::running) {
        Some(d) => match ctx.rt().stop(&d, crate::deploy::STOP_GRACE).await {
            Ok(()) => vec![format!(
                "stopped {candidate} (its logs: `sparkctl logs {candidate}`)"
            )],
            Err(e) => vec![format!("stopping {candidate} failed: {e}")],
        },
        None => Vec::new(),
    }
}

/// After an error or an interrupt: what the step changed is put back, the bisect is kept
/// as recorded (resumable) and the error says where it stands.
pub(crate) async fn stopped(env: &Env<'_, '_>, b: Bisect, e: Error) -> Error {
    let ctx = env.ctx;
    let state = ctx.state();
    let t = std::mem::take(&mut *env.touched.lock().expect("touched"));
    let notes = put_back(ctx, t, &b.recipe, env.progress).await;
    // The file holds every finished round; the copy here may miss the step in progress.
    let mut b: Bisect = b
        .path(state)
        .and_then(|p| crate::state::read_json(&p))
        .unwrap_or(b);
    let interrupted = e.is_interrupted();
    b.status = if interrupted {
        Status::Interrupted
    } else {
        Status::Stopped
    };
    b.why_stopped = Some(e.to_string());
    let saved = b.save(state);
    let current: Option<RunRecord> = env.current.lock().expect("current").take();
    if let Some(mut r) = current {
        r.outcome = if interrupted {
            Outcome::Interrupted
        } else {
            Outcome::Failed
        };
        r.error = Some(e.to_string());
        r.finished_at = crate::units::now_utc();
        let _ = r.save(state);
    }
    Error::BisectStopped(Box::new(crate::error::BisectStopped {
        kept: saved
            .map(|()| b.measurements.len())
            .map_err(|w| w.to_string()),
        recipe: b.recipe,
        cause: e,
        put_back: notes,
    }))
}
