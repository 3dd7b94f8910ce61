//! `sparkctl rollback [--to NAME]`: the previous production (or NAME) serves again — a switch
//! of the front door: at once when it is still warm, after starting it otherwise (production
//! stopped first only when memory needs it, with the front door holding requests).

use super::switch::{self, interrupted, serving_now, timed, upstream_of, Ctx, Touched};
use crate::error::{Error, Result};
use crate::history::{Command, Outcome, PhaseName, RunRecord};
use crate::production::{Entry, Production, Upstream};

pub(crate) async fn rollback(
    ctx: &Ctx<'_>,
    to: Option<&str>,
    dry_run: bool,
    say: &dyn Fn(&str),
) -> Result<RunRecord> {
    let _lock = ctx.state().lock("rollback")?;
    let production = ctx.production().await?;
    let (target, from_stack) = match to {
        Some(n) => (n.to_string(), false),
        None => match production.previous.last() {
            Some(e) => (e.recipe.clone(), true),
            None => {
                return Err(Error::Usage(
                    "there is no previous production to roll back to; name one: `sparkctl rollback --to NAME`".into(),
                ))
            }
        },
    };
    let loaded = ctx.recipes.get(&target)?;
    switch::refuse_production_port(ctx.settings(), &target, loaded.recipe.server.port)?;
    let mut record = RunRecord::new(Command::Rollback, &target);
    let current = production.serving().cloned();
    let warm = warm_instance(ctx, &production, &target).await;
    say(&format!(
        "rollback: the front door switches from {} to {target}{}",
        current
            .as_ref()
            .map_or("nothing".into(), |u| u.recipe.clone()),
        if warm.is_some() {
            " (warm: at once)"
        } else {
            ""
        }
    ));
    if dry_run {
        record.outcome = Outcome::Planned;
        return Ok(record);
    }
    let mut touched = Touched::of_run(&record.run_id);
    let flow = async {
        let up = match warm {
            Some(u) => u,
            None => {
                start_target(
                    ctx,
                    &target,
                    &current,
                    &production,
                    &mut record,
                    &mut touched,
                    say,
                )
                .await?
            }
        };
        let next = next_production(&production, &target, up, &record.run_id, from_stack);
        timed(
            &mut record,
            PhaseName::Switch,
            ctx.door.switch(&next, ctx.door_config.drain),
        )
        .await?;
        touched = Touched::of_run(&record.run_id);
        if let Some(old) = &current {
            if next
                .serving()
                .is_some_and(|u| u.deployment != old.deployment)
            {
                switch::stop_instance(ctx, old).await?;
            }
        }
        Ok::<(), Error>(())
    };
    let outcome = tokio::select! {
        r = flow => r,
        _ = interrupted() => Err(Error::Interrupted("interrupted".into())),
    };
    record.finished_at = crate::units::now_utc();
    match outcome {
        Ok(()) => {
            record.outcome = Outcome::RolledBack;
            record.serving = serving_now(ctx).await;
            record.save(ctx.state())?;
            Ok(record)
        }
        Err(e) => {
            let notes = switch::restore(ctx, touched, &target, say).await;
            let what = format!("rollback to {target}");
            Err(switch::failed(ctx, &mut record, e, &notes, &what).await)
        }
    }
}

/// Production once `target` (instance `up`) serves: promoted over the current one, or,
/// rolling back along the stack, in place of it.
fn next_production(
    production: &Production,
    target: &str,
    up: Upstream,
    run_id: &str,
    from_stack: bool,
) -> Production {
    let mut next = production.clone();
    next.warm.retain(|w| w.upstream.deployment != up.deployment);
    let mut entry = Entry {
        recipe: target.to_string(),
        since: crate::units::now_utc(),
        run_id: Some(run_id.to_string()),
        bench: None,
        upstream: Some(up),
    };
    if from_stack {
        // The rolled-back production is dropped from the stack: it is what was wrong.
        entry.bench = next.previous.pop().and_then(|e| e.bench);
        next.current = Some(entry);
    } else {
        next.promote(entry);
    }
    next
}

/// The target's instance kept warm after it was replaced, if it still runs.
async fn warm_instance(ctx: &Ctx<'_>, production: &Production, target: &str) -> Option<Upstream> {
    let w = production.warm_of(target)?;
    crate::frontdoor::alive(ctx.rt(), &w.upstream)
        .await
        .then(|| w.upstream.clone())
}

/// Starts the target on its own port: beside production when both fit, after stopping it
/// (the front door holding requests) when memory needs that.
async fn start_target(
    ctx: &Ctx<'_>,
    target: &str,
    current: &Option<Upstream>,
    production: &Production,
    record: &mut RunRecord,
    touched: &mut Touched,
    say: &dyn Fn(&str),
) -> Result<Upstream> {
    if let Some(d) = ctx.rt().find(target).await?.filter(|d| d.running()) {
        // Running already (e.g. started by hand with `sparkctl start`): that instance serves.
        return Ok(upstream_of(&d));
    }
    let loaded = ctx.recipes.get(target)?;
    let mut plan = super::plan_start(ctx.shared, loaded, &ctx.start_options(true)).await?;
    plan.run_id = record.run_id.clone();
    let prod = production.current.as_ref().map(|e| e.recipe.clone());
    for victim in &plan.memory.must_stop {
        let Some(d) = ctx.rt().find(victim).await?.filter(|d| d.running()) else {
            continue;
        };
        if Some(victim) == prod.as_ref() {
            ctx.door.hold(ctx.door_config.drain).await?;
            touched.held = true;
            touched.production_stopped = current.clone();
        }
        say(&format!("stopping {victim} to make room"));
        ctx.rt().stop(&d, super::STOP_GRACE).await?;
    }
    // What it was planned beside has stopped: the start is given the room as it is now.
    plan.memory = plan.memory.after_stops();
    say(&format!("starting {target}"));
    let d = timed(
        record,
        PhaseName::Start,
        super::start(ctx.rt(), &plan, None, |_| {}),
    )
    .await?
    .deployment;
    touched.started = Some(d.clone());
    record.deployment = Some(d.id.clone());
    record.image_digest = (d.runtime == crate::recipe::Runtime::Docker).then(|| d.artifact.clone());
    record.model_fingerprint = d.model_fingerprint.clone();
    Ok(upstream_of(&d))
}
