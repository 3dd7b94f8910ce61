//! `sparkctl rollback [--to NAME]`: the previous production (or NAME) serves again — a switch
//! of the front door: at once when it is still warm, after starting it otherwise, by the one
//! switch plan (blue/green when both fit, a swap when they do not: production stops first,
//! the front door holding requests). Back along the stack, it is the very digest that
//! served before (its entry's), whatever images.lock pins now: after an upgrade, the night
//! before; when that is production's own recipe, on another digest, it replaces
//! production's instance (a swap, as one recipe runs one instance on one port).

use std::sync::Mutex;

use super::switch::{
    self, interrupted, serving_now, timed, upstream_of, Hold, Plan, SwitchContext, Touched,
};
use super::StartOptions;
use crate::error::{Error, Interruption, Result};
use crate::history::{Command, Outcome, PhaseName, RunRecord};
use crate::lock::Pin;
use crate::production::{Entry, Production, Upstream};
use crate::progress::Progress;
use crate::runtime::Deployment;

/// How the target comes to serve.
enum Next {
    /// Its instance runs already (kept warm, or started by hand): a switch alone. The pin
    /// it runs, where known.
    Running(Upstream, &'static str, Option<Box<Pin>>),
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
    super::pin::healed(ctx.shared, dry_run, progress);
    let production = ctx.production().await?;
    let (target, back_to) = match to {
        Some(n) => (n.to_string(), None),
        None => match production.previous.last() {
            Some(e) => (e.recipe.clone(), Some(e)),
            None => {
                return Err(Error::BadFlag(
                    crate::error::FlagProblem::NothingToRollBackTo,
                ))
            }
        },
    };
    let loaded = ctx.recipes.get(&target)?;
    switch::refuse_production_port(ctx.settings(), &target, loaded.recipe.server.port)?;
    let mut record = RunRecord::new(Command::Rollback, &target);
    let current = production.serving().cloned();
    let from_stack = back_to.is_some();
    let next = next_of(ctx, &production, &target, back_to, &mut record).await?;
    if let Some(line) = back_to.and_then(|e| off_the_pin(&ctx.lock, e)) {
        progress.step(&line);
    }
    progress.step(&format!(
        "rollback: the front door switches from {} to {target}{}",
        current
            .as_ref()
            .map_or("nothing".into(), |u| u.recipe.clone()),
        match &next {
            Next::Running(_, why, _) => format!(" ({why}: at once)"),
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
        let (up, image) = match next {
            Next::Running(u, _, image) => (u, image.map(|p| *p)),
            Next::Start(mut plan) => {
                let image = plan.start.pin.clone();
                let u = start_target(ctx, &mut plan, &mut record, &touched, progress).await?;
                (u, image)
            }
        };
        let serves = crate::models::of(&ctx.recipes.get(&target)?.recipe);
        let mut next = next_production(
            &production,
            &target,
            (up, image),
            &record.run_id,
            from_stack,
        );
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
        _ = interrupted() => Err(Error::Interrupted(Interruption::Signal)),
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

/// The target's instance when it runs already (and runs the digest gone back to), else the
/// plan that starts it. `back_to`: the stack's entry rolled back to (None: `--to NAME`,
/// whatever images.lock pins).
async fn next_of(
    ctx: &SwitchContext<'_>,
    production: &Production,
    target: &str,
    back_to: Option<&Entry>,
    record: &mut RunRecord,
) -> Result<Next> {
    let image = back_to.and_then(|e| e.image.as_ref());
    let same =
        |known: Option<&Pin>| image.is_none_or(|p| known.is_some_and(|k| k.digest == p.digest));
    if let Some(u) = warm_instance(ctx, production, target).await {
        let known = image_of(production, &u.deployment);
        if same(known) {
            return Ok(Next::Running(u, "warm", known.cloned().map(Box::new)));
        }
    }
    let mut replacing = None;
    if let Some(d) = ctx.rt().find(target).await?.filter(|d| d.running()) {
        match image {
            // Production's own recipe on the digest an upgrade moved it to, say.
            Some(pin) if !runs(&d, pin, production) => replacing = Some(d),
            // Running already (e.g. started by hand with `sparkctl start`): that instance
            // serves.
            _ => {
                let known = image_of(production, &d.id).or(image).cloned();
                return Ok(Next::Running(
                    upstream_of(&d),
                    "running",
                    known.map(Box::new),
                ));
            }
        }
    }
    let loaded = ctx.recipes.get(target)?;
    let lock = ctx.lock.with_image(target, image);
    let opts = StartOptions {
        lock: &lock,
        // What served before may have been unpinned; going back is what was asked.
        allow_unpinned: true,
        replacing: replacing.as_ref(),
    };
    let plan = timed(
        record,
        PhaseName::Plan,
        Plan::new(ctx.shared, loaded, &opts),
    )
    .await?;
    record.plan = serde_json::to_value(&plan.start).ok();
    Ok(Next::Start(Box::new(plan)))
}

/// What a user is told when the digest gone back to is not the one images.lock pins (an
/// upgrade moved the pin on): the lock is theirs, and stays.
fn off_the_pin(lock: &crate::lock::Lock, back_to: &Entry) -> Option<String> {
    let image = back_to.image.as_ref()?;
    let pinned = lock.pin(&back_to.recipe).ok().flatten()?;
    (pinned.digest != image.digest).then(|| {
        format!(
            "{} goes back to {}, the digest it served before; images.lock still pins {} \
             (`sparkctl images pin` moves it, as does the next upgrade that is promoted)",
            back_to.recipe,
            crate::units::short_digest(&image.digest),
            crate::units::short_digest(&pinned.digest)
        )
    })
}

/// The pin the instance `deployment` was recorded running, by the production entries that
/// name it.
fn image_of<'p>(production: &'p Production, deployment: &str) -> Option<&'p Pin> {
    (production.current.iter())
        .chain(production.previous.iter().rev())
        .find(|e| {
            e.upstream
                .as_ref()
                .is_some_and(|u| u.deployment == deployment)
        })
        .and_then(|e| e.image.as_ref())
}

/// Whether the running instance `d` runs `pin`'s digest, as far as can be told: by its
/// image id where the pin knows it, else by the entry that names it; unknown counts as so
/// (it is used as it is, as before entries kept their digest).
fn runs(d: &Deployment, pin: &Pin, production: &Production) -> bool {
    match (&pin.image_id, image_of(production, &d.id)) {
        (Some(id), _) => d.artifact == *id,
        (None, Some(known)) => known.digest == pin.digest,
        (None, None) => true,
    }
}

/// Production once `target` (instance `up`, running `image`) serves: promoted over the
/// current one, or, rolling back along the stack, in place of it.
fn next_production(
    production: &Production,
    target: &str,
    (up, image): (Upstream, Option<Pin>),
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
        image,
        pin_move: None,
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
