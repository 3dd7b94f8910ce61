//! The one way back after a failed or interrupted switch: never stop what the front door
//! routes to; if production was put to sleep to make room, wake it; if it was stopped (or
//! its wake failed), start it again; and switch the front door back to it.

use std::time::Instant;

use super::plan::{make_room, Hold, Plan};
use super::{refuse_production_port, upstream_of, SwitchContext, Touched};
use crate::deploy::{start, StartOptions, STOP_GRACE};
use crate::error::Result;
use crate::lock::Pin;
use crate::progress::Progress;
use crate::runtime::Deployment;

/// Starts production `name` again on its own port at `image` (the digest it ran; None:
/// images.lock's), through the one switch plan (what else holds its room stops first;
/// requests are held already), and waits until it serves.
async fn start_production(
    ctx: &SwitchContext<'_>,
    name: &str,
    image: Option<&Pin>,
    progress: &dyn Progress,
) -> Result<Deployment> {
    let loaded = ctx.recipes.get(name)?;
    refuse_production_port(ctx.settings(), name, loaded.recipe.server.port)?;
    let lock = ctx.lock.with_image(name, image);
    let opts = StartOptions {
        lock: &lock,
        // What served before may have been unpinned; leaving production dark is worse.
        allow_unpinned: true,
        replacing: None,
    };
    let mut plan = Plan::new(ctx.shared, loaded, &opts).await?;
    make_room(ctx.rt(), &mut plan, Hold::Held, None, progress).await?;
    Ok(start(ctx.rt(), &plan.start, None, |_| {}).await?.deployment)
}

/// Production put to sleep to make room, woken and handed the front door's hold: true. A
/// wake that fails stops it, and `t` then has it as stopped, to be started again.
async fn wake_back(
    ctx: &SwitchContext<'_>,
    t: &mut Touched,
    production: &crate::production::Production,
    notes: &mut Vec<String>,
    progress: &dyn Progress,
) -> bool {
    let Some((asleep, level)) = t.production_asleep.take() else {
        return false;
    };
    let limit = crate::starts::wake_limit(ctx.state(), &asleep.recipe);
    let instance = (asleep.recipe.as_str(), asleep.deployment.as_str());
    match crate::runtime::sleep::wake_instance(ctx.rt(), instance, level, limit).await {
        Ok(took) => {
            notes.push(format!(
                "{} woken in {:.2} s, not started again",
                asleep.recipe,
                took.as_secs_f64()
            ));
            if let Err(e) = ctx.door.switch(production, ctx.door_config.drain).await {
                notes.push(format!("switching back to {} failed: {e}", asleep.recipe));
            }
            true
        }
        Err(why) => {
            progress.step(&format!(
                "waking {} failed ({why}): stopped, started again",
                asleep.recipe
            ));
            if let Ok(Some(d)) = ctx.rt().instance(&asleep.recipe, &asleep.deployment).await {
                let _ = ctx.rt().stop(&d, STOP_GRACE).await;
            }
            notes.push(format!("waking {} failed: {why}", asleep.recipe));
            t.production_stopped = Some(asleep);
            false
        }
    }
}

/// Puts things back after a failure or an interrupt: whatever the front door routes to
/// keeps running; what the flow started otherwise stops (logs kept); production stopped to
/// make room starts again and the front door is switched back to it. Returns what was done.
pub(crate) async fn restore(
    ctx: &SwitchContext<'_>,
    mut t: Touched,
    recipe: &str,
    progress: &dyn Progress,
) -> Vec<String> {
    let mut notes = Vec::new();
    // A rollout this flow started (`up --shadow/--canary`) ends before anything is stopped:
    // the door sends the candidate nothing more and lets its canary answers finish.
    if let Ok(Some(_)) = ctx.door.rollout().await {
        let _ = ctx.door.end_rollout().await;
    }
    let door = ctx.door.status().await.ok();
    let routed = door.as_ref().and_then(|s| s.upstream.clone());
    // Interrupted before the start was recorded: an instance of this recipe carrying this
    // run's id is this flow's (any other was started by someone else, and stays). A
    // container only created may have its start request still on the way to the engine:
    // watched a moment for that.
    if t.started.is_none() && !t.run_id.is_empty() {
        let deadline = Instant::now() + std::time::Duration::from_secs(2);
        loop {
            let not_routed = |d: &Deployment| routed.as_ref().is_none_or(|u| u.deployment != d.id);
            let ours = ctx.rt().find(recipe).await.ok().flatten();
            match ours.filter(|d| d.run_id == t.run_id) {
                Some(d) if d.running() && not_routed(&d) => {
                    t.started = Some(d);
                    break;
                }
                Some(d)
                    if d.state == crate::runtime::RunState::Created
                        && Instant::now() < deadline =>
                {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                _ => break,
            }
        }
    }
    let serves = |c: &Deployment| routed.as_ref().is_some_and(|u| u.deployment == c.id);
    if !t.started.as_ref().is_some_and(serves) {
        // A multi-node start cut short leaves Ray's containers on other nodes.
        if let Ok(loaded) = ctx.recipes.get(recipe) {
            let leftovers =
                crate::runtime::group::stop_group_leftovers(ctx.rt(), &loaded.recipe, &t.run_id);
            for note in leftovers.await {
                notes.push(format!("stopped {note}"));
            }
        }
    }
    if let Some(c) = &t.started {
        if serves(c) {
            notes.push(format!("{} serves production already; kept", c.name));
        } else {
            let _ = ctx.rt().stop(c, STOP_GRACE).await;
            notes.push(format!(
                "stopped {} (its logs: `sparkctl logs {}`)",
                c.name, c.name
            ));
        }
    }
    let production = match &door {
        Some(s) => s.production.clone(),
        None => ctx.production_file().unwrap_or_default(),
    };
    // Production asleep to make room: woken, and the front door's hold released to it.
    if wake_back(ctx, &mut t, &production, &mut notes, progress).await {
        return notes;
    }
    let serving_alive = match &routed {
        Some(u) => crate::frontdoor::alive(ctx.rt(), u).await,
        None => false,
    };
    if serving_alive {
        return notes;
    }
    // Nothing answers behind the front door: production back, as it was.
    if let Some(prod) = t.production_stopped.as_ref().or(production.serving()) {
        progress.step(&format!("restoring production {}", prod.recipe));
        let image = (production.current.as_ref())
            .filter(|e| e.recipe == prod.recipe)
            .and_then(|e| e.image.as_ref());
        match start_production(ctx, &prod.recipe, image, progress).await {
            Ok(d) => {
                let mut next = production.clone();
                match next.current.as_mut() {
                    Some(e) if e.recipe == prod.recipe => e.upstream = Some(upstream_of(&d)),
                    _ => {}
                }
                match ctx.door.switch(&next, ctx.door_config.drain).await {
                    Ok(_) => notes.push(format!("{} serves production again", prod.recipe)),
                    Err(e) => notes.push(format!("switching back to {} failed: {e}", prod.recipe)),
                }
            }
            // The front door's watch may have brought it back meanwhile (its port taken).
            Err(e) => match ctx.door.status().await.ok().and_then(|s| s.upstream) {
                Some(u) if crate::frontdoor::alive(ctx.rt(), &u).await => {
                    notes.push(format!("the front door's watch brought {} back", u.recipe))
                }
                _ => notes.push(format!("restoring {} failed too: {e}", prod.recipe)),
            },
        }
    } else if t.held {
        // Held with nothing to go back to: let the front door answer 503 rather than wait.
        let _ = ctx.door.switch(&production, ctx.door_config.drain).await;
    }
    notes
}
