//! A model's server put to sleep instead of stopped (`serve.sleep: auto`), and woken for
//! its next request (`runtime::sleep`). A server whose sleep routes are not open is stopped
//! as before; a wake that fails, hangs, or takes longer than the recipe's start is given
//! up: the server is stopped and started cold.

use std::time::Duration;

use crate::context::Context;
use crate::production::Upstream;
use crate::recipe::serve::Sleep;
use crate::runtime::sleep;
use crate::runtime::Deployment;
use crate::server::Door;

/// `u`, the idle server of `door`'s model, put to sleep when its recipe asks for it and
/// its sleep routes answer; the level it sleeps at, or None (it is to be stopped).
pub(super) async fn put_to_sleep(ctx: &Context, door: &Door, u: &Upstream) -> Option<u8> {
    if door.demand.settings().sleep != Sleep::Auto {
        return None;
    }
    let d = ctx
        .runtimes
        .instance(&u.recipe, &u.deployment)
        .await
        .ok()??;
    match sleep::put_to_sleep(&d).await {
        Ok(level) => Some(level),
        Err(why) => {
            tracing::warn!("{}: not put to sleep, stopped instead: {why}", u.recipe);
            None
        }
    }
}

/// Wakes `u`, asleep at `level`, until it says it is awake and a one-token completion
/// answers, within `limit`; how long it took, or why not.
pub(super) async fn wake(
    ctx: &Context,
    u: &Upstream,
    level: u8,
    limit: Duration,
) -> Result<Duration, String> {
    sleep::wake_instance(&ctx.runtimes, (&u.recipe, &u.deployment), level, limit).await
}

/// Whether `d`'s own sleep ends at its next request (llama-server's idle sleep), where
/// vLLM's waits for a wake.
pub(super) fn woken_by_requests(d: &Deployment) -> bool {
    !matches!(
        d.engine,
        crate::engine::Engine::Vllm | crate::engine::Engine::Sim
    )
}

/// `u`, routed to and found asleep (a front door that stopped left it so), woken at the
/// level this machine's sleeps take.
pub(super) async fn wake_routed(ctx: &Context, u: &Upstream) -> Result<(), String> {
    let level = sleep::level().await;
    wake(ctx, u, level, Duration::from_secs(120))
        .await
        .map(|_| ())
}
