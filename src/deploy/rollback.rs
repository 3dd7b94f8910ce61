//! `sparkctl rollback [--to NAME]`: the previous production (or NAME) serves again — a switch
//! of the front door: at once when it is still warm, after starting it otherwise, by the one
//! switch plan (blue/green when both fit, a swap when they do not: production stops first,
//! the front door holding requests).

use std::sync::Mutex;

use super::switch::{
    self, interrupted, serving_now, timed, upstream_of, Hold, Plan, SwitchContext, Touched,
};
use crate::error::{Error, Result};
use crate::history::{Command, Outcome, PhaseName, RunRecord};
use crate::production::{Entry, Production, Upstream};
use crate::progress::Progress;

/// How the target comes to serve.
enum Next {
    /// Its instance runs already (kept warm, or started by hand): a switch alone.
    Running(Upstream, &'static str),
    /// It starts first, by this plan.
    Start(Box<Plan>),
}

pub(crate) async fn rollback(
    ctx: &SwitchContext<'_>,
    to: Option<&str>,
    dry_run: bool,
    progress: &dyn Progress,
) -> Result<RunRecord> {
    let _state_lock = ctx.state().lock("rollback")?;
    switch::refuse_during_rollout(ctx).await?;
    let production = ctx.production().await?;
    let (target, from_stack) = match to {
        Some(n) => (n.to_string(), false),
        None => match production.previous.last() {
            Some(e) => (e.recipe.clone(), true),
            None => {
                return Err(Error::BadFlag {
                    flag: "--to NAME".into(),
                    why: "is needed: there is no previous production to roll back to".into(),
                })
            }
        },
    };
    let loaded = ctx.recipes.get(&target)?;
    switch::refuse_production_port(ctx.settings(), &target, loaded.recipe.server.port)?;
    let mut record = RunRecord::new(Command::Rollback, &target);
    let current = production.serving().cloned();
    let next = next_of(ctx, &production, &target, &mut record).await?;
    progress.step(&format!(
        "rollback: the front door switches from {} to {target}{}",
        current
            .as_ref()
            .map_or("nothing".into(), |u| u.recipe.clone()),
        match &next {
            Next::Running(_, why) => format!(" ({why}: at once)"),
            Next::Start(plan) => format!(
                "; {}; {}",
                plan.start.memory.describe(),
                plan.how(
                    production.current.as_ref().map(|e| e.recipe.as_str()),
                    current.is_some()
                )
            ),
        }
    ));
    if dry_run {
        record.outcome = Outcome::Planned;
        return Ok(record);
    }
    let touched = Mutex::new(Touched::of_run(&record.run_id));
    let flow = async {
        let up = match next {
            Next::Running(u, _) => u,
            Next::Start(mut plan) => {
                start_target(ctx, &mut plan, &mut record, &touched, progress).await?
            }
        };
        let serves = crate::models::of(&ctx.recipes.get(&target)?.recipe);
        let mut next = next_production(&production, &target, up, &record.run_id, from_stack);
        // Its own model's name: a rollback across a replacement of one model by another's
        // recipe gives the lane its old name back.
        next.model = Some(serves);
        timed(
            &mut record,
            PhaseName::Switch,
            ctx.door.switch(&next, ctx.door_config.drain),
        )
        .await?;
        *touched.lock().expect("touched") = Touched::of_run(&record.run_id);
        switch::retire(ctx.rt(), &next, current.as_ref()).await
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
            let t = std::mem::take(&mut *touched.lock().expect("touched"));
            let notes = switch::restore(ctx, t, &target, progress).await;
            let what = format!("rollback to {target}");
            Err(switch::failed(ctx, &mut record, e, &notes, &what).await)
        }
    }
}

/// The target's instance when it runs already, else the plan that starts it.
async fn next_of(
    ctx: &SwitchContext<'_>,
    production: &Production,
    target: &str,
    record: &mut RunRecord,
) -> Result<Next> {
    if let Some(u) = warm_instance(ctx, production, target).await {
        return Ok(Next::Running(u, "warm"));
    }
    if let Some(d) = ctx.rt().find(target).await?.filter(|d| d.running()) {
        // Running already (e.g. started by hand with `sparkctl start`): that instance serves.
        return Ok(Next::Running(upstream_of(&d), "running"));
    }
    let loaded = ctx.recipes.get(target)?;
    let plan = timed(
        record,
        PhaseName::Plan,
        Plan::new(ctx.shared, loaded, &ctx.start_options(true)),
    )
    .await?;
    record.plan = serde_json::to_value(&plan.start).ok();
    Ok(Next::Start(Box::new(plan)))
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
async fn warm_instance(
    ctx: &SwitchContext<'_>,
    production: &Production,
    target: &str,
) -> Option<Upstream> {
    let w = production.warm_of(target)?;
    crate::frontdoor::alive(ctx.rt(), &w.upstream)
        .await
        .then(|| w.upstream.clone())
}

/// Starts the target on its own port by the switch plan: beside production when both fit,
/// after stopping it (the front door holding requests) when they do not.
async fn start_target(
    ctx: &SwitchContext<'_>,
    plan: &mut Plan,
    record: &mut RunRecord,
    touched: &Mutex<Touched>,
    progress: &dyn Progress,
) -> Result<Upstream> {
    plan.start.run_id = record.run_id.clone();
    let hold = Hold::Ask(&ctx.door, ctx.door_config.drain);
    switch::make_room(ctx.rt(), plan, hold, Some(touched), progress).await?;
    progress.step(&format!("starting {}", plan.start.name));
    let report = timed(
        record,
        PhaseName::Start,
        super::start(ctx.rt(), &plan.start, None, |_| {}),
    )
    .await?;
    let d = report.deployment;
    touched.lock().expect("touched").started = Some(d.clone());
    record.deployment = Some(d.id.clone());
    record.image_digest = (d.runtime == crate::recipe::Runtime::Docker).then(|| d.artifact.clone());
    record.model_fingerprint = d.model_fingerprint.clone();
    record.memory_observed = Some(report.memory_observed);
    Ok(upstream_of(&d))
}
