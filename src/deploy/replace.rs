//! `up` of production's own recipe on another digest (what an upgrade asks): the candidate
//! runs from the pins it is given, and replaces production's instance — a swap, as one
//! recipe runs one instance on one port; once promoted, its entry keeps that digest.

use super::switch::{upstream_of, SwitchContext};
use super::StartOptions;
use crate::error::Result;
use crate::history::RunRecord;
use crate::lock::Lock;
use crate::production::{Entry, PinMove, Production};
use crate::runtime::Deployment;

/// Production's entry once `up`'s candidate (benchmarked into `bench`) is promoted: with the
/// pin it runs (`lock`'s, else images.lock's; none when it ran unpinned or is a host
/// process), which a rollback to it or a restart of it starts again, and the move of the pin
/// its promotion asks for.
pub(super) fn promoted(
    ctx: &SwitchContext<'_>,
    (lock, pin_move): (Option<&Lock>, Option<PinMove>),
    record: &RunRecord,
    (candidate, bench): (&Deployment, std::path::PathBuf),
) -> Entry {
    let lock = lock.unwrap_or(&ctx.lock);
    let pin = lock.pin(&record.recipe).ok().flatten();
    let image = pin.filter(|_| !record.unpinned).map(|p| crate::lock::Pin {
        history: Vec::new(),
        ..p.clone()
    });
    Entry {
        recipe: record.recipe.clone(),
        since: crate::units::now_utc(),
        run_id: Some(record.run_id.clone()),
        bench: Some(bench),
        upstream: Some(upstream_of(candidate)),
        image,
        pin_move,
    }
}

/// The candidate's start: the lock it runs from (the given pins, else images.lock's), and
/// the instance it replaces, if any.
pub(super) fn start_options<'a>(
    ctx: &'a SwitchContext<'_>,
    (lock, allow_unpinned): (Option<&'a Lock>, bool),
    replacing: Option<&'a Deployment>,
) -> StartOptions<'a> {
    StartOptions {
        lock: lock.unwrap_or(&ctx.lock),
        allow_unpinned,
        replacing,
    }
}

/// Production's own running instance, when the candidate is production's recipe and may
/// replace it (`replace`, as `UpOptions::replace` says).
pub(super) async fn replaced(
    ctx: &SwitchContext<'_>,
    replace: bool,
    production: &Production,
    name: &str,
) -> Result<Option<Deployment>> {
    let ours = production
        .current
        .as_ref()
        .is_some_and(|e| e.recipe == name);
    if !(replace && ours) {
        return Ok(None);
    }
    Ok(ctx.rt().find(name).await?.filter(Deployment::running))
}
