//! `up` of production's own recipe on another digest (what an upgrade asks): the candidate
//! runs from the pins it is given, and replaces production's instance — a swap, as one
//! recipe runs one instance on one port.

use super::switch::SwitchContext;
use super::StartOptions;
use crate::error::Result;
use crate::lock::Lock;
use crate::production::Production;
use crate::runtime::Deployment;

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
