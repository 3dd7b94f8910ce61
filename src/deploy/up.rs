//! `sparkctl up NAME`, in the phases ARCHITECTURE.md lists ("The phases of `up`"):
//! plan → patch → make room → start → measure production → bench → judge → switch →
//! record. The instance that passed the gates is the one the front door switches to; on
//! any failure or interrupt one restore path (`switch::restore`) leaves
//! the front door routing to a backend that answers.

use std::sync::{Arc, Mutex};

use super::start;
use super::switch::{
    self, interrupted, serving_now, timed, Hold, Mode, Plan, SwitchContext, Touched,
};
use crate::bench::gates::GateOutcome;
use crate::bench::result::{BenchResult, Verdict};
use crate::bench::Baseline;
use crate::error::{Error, Interruption, Result};
use crate::history::{Command, Outcome, PhaseName, RunRecord};
use crate::lock::Lock;
use crate::production::{Production, Warm};
use crate::progress::Progress;
use crate::recipe::LoadedRecipe;
use crate::runtime::{Deployment, LogView};
use crate::state::{self, RunFile};

pub(crate) struct UpOptions<'a> {
    pub(crate) dry_run: bool,
    pub(crate) no_promote: bool,
    pub(crate) allow_unpinned: bool,
    /// Asked before production is stopped; false refuses.
    pub(crate) confirm: &'a dyn Fn(&str) -> bool,
    /// Progress lines for people.
    pub(crate) progress: &'a dyn Progress,
    /// The pins the candidate runs from instead of images.lock's (an upgrade's new digest);
    /// production, and every way back to it, keep images.lock's.
    pub(crate) lock: Option<&'a Lock>,
    /// The record this run writes (an upgrade's, carrying its digests); None: a new one.
    pub(crate) record: Option<RunRecord>,
    /// The pin's move that follows the promotion (an upgrade's), recorded with it (`pin`).
    pub(crate) pin_move: Option<crate::production::PinMove>,
    /// The candidate may be production's own recipe, whose instance it then replaces: a
    /// swap, as one recipe runs one instance on one port.
    pub(crate) replace: bool,
    /// What the flags ask of a rollout (shadow, canary) after the gates pass; the recipe's
    /// `rollout` section otherwise.
    pub(crate) rollout: crate::recipe::rollout::Asked,
}

/// `sparkctl up NAME`.
pub(crate) async fn up(
    ctx: &SwitchContext<'_>,
    name: &str,
    opts: &UpOptions<'_>,
) -> Result<RunRecord> {
    let state_lock = ctx.state().lock(&format!("up {name}"))?;
    super::pin::healed(ctx.shared, opts.dry_run, opts.progress);
    run(ctx, name, opts, Some(&state_lock)).await
}

/// `up`, for a caller that holds the state lock already (`upgrade`, which waited for it).
pub(crate) async fn up_locked(
    ctx: &SwitchContext<'_>,
    name: &str,
    opts: &UpOptions<'_>,
) -> Result<RunRecord> {
    run(ctx, name, opts, None).await
}

/// `up` under `state_lock` (None: the caller's, which a rollout then does not lend).
async fn run(
    ctx: &SwitchContext<'_>,
    name: &str,
    opts: &UpOptions<'_>,
    state_lock: Option<&crate::state::StateLock>,
) -> Result<RunRecord> {
    let loaded = ctx.recipes.get(name)?;
    switch::refuse_production_port(ctx.settings(), name, loaded.recipe.server.port)?;
    // Flags that cannot be used are refused before any record is made.
    super::rollout::spec(loaded, &opts.rollout)?;
    let mut record = opts
        .record
        .clone()
        .unwrap_or_else(|| RunRecord::new(Command::Up, name));
    if !opts.dry_run {
        switch::reserve_records(ctx.state(), &record)?;
    }
    let touched = Arc::new(Mutex::new(Touched::of_run(&record.run_id)));
    let outcome = {
        let mut flow = Flow {
            ctx,
            opts,
            loaded,
            record: &mut record,
            touched: touched.clone(),
            rollout: None,
            state_lock,
        };
        tokio::select! {
            r = flow.run() => r,
            _ = interrupted() => Err(Error::Interrupted(Interruption::Signal)),
        }
    };
    let e = match outcome {
        Ok(()) => {
            record.finished_at = crate::units::now_utc();
            record.serving = serving_now(ctx).await;
            if !opts.dry_run {
                record.save(ctx.state())?;
            }
            return Ok(record);
        }
        Err(e) => e,
    };
    if opts.dry_run {
        return Err(e);
    }
    let t = std::mem::take(&mut *touched.lock().expect("touched lock"));
    let notes = switch::restore(ctx, t, name, opts.progress).await;
    Err(switch::failed(ctx, &mut record, e, &notes, &format!("up {name}")).await)
}

struct Flow<'a, 'b> {
    ctx: &'a SwitchContext<'b>,
    opts: &'a UpOptions<'a>,
    loaded: &'a LoadedRecipe,
    record: &'a mut RunRecord,
    touched: Arc<Mutex<Touched>>,
    /// The rollout the candidate meets live traffic in, when one is asked.
    rollout: Option<crate::rollout::Spec>,
    /// Lent to other commands for the rollout's window.
    state_lock: Option<&'a crate::state::StateLock>,
}

impl Flow<'_, '_> {
    fn name(&self) -> &str {
        &self.loaded.recipe.name
    }

    fn step(&self, line: &str) {
        self.opts.progress.step(line)
    }

    async fn run(&mut self) -> Result<()> {
        switch::refuse_during_rollout(self.ctx).await?;
        let production = self.ctx.production().await?;
        let sets = super::evaluate::sets(self.ctx, self.loaded)?;
        let Some(mut plan) = self.plan(&production).await? else {
            return Ok(());
        };
        let way = plan.mode;
        let (ctx, loaded, progress) = (self.ctx, self.loaded, self.opts.progress);
        let asked =
            super::evaluate::production_answers(ctx, loaded, sets.as_ref(), &production, progress);
        let asked = asked.await?;
        let patched = self.patch().await?;
        self.make_room(&mut plan).await?;
        let candidate = self.start(plan, patched).await?;
        let baseline = self.measure_production(&production, way).await?;
        let (result, bench_path) = self.bench(&baseline, asked).await?;
        self.judge(&result, &candidate).await?;
        if let Some(spec) = self.rollout.clone() {
            let (ctx, progress) = (self.ctx, self.opts.progress);
            // The window only waits: other models start, evict and restart meanwhile; this
            // model is the rollout's (`refuse_during_rollout`).
            let lent = self.state_lock.map(crate::state::StateLock::lend);
            let judged = super::rollout::run(ctx, &spec, &candidate, self.record, progress);
            let judged = judged.await;
            drop(lent);
            judged?;
        }
        if self.opts.no_promote {
            self.record.outcome = Outcome::Passed;
            return self.keep_production(way, &candidate).await;
        }
        self.switch(production, &candidate, bench_path, way).await?;
        self.record.outcome = Outcome::Promoted;
        Ok(())
    }

    /// Every cheap check; nothing changed. Whether production must stop first (swap).
    async fn plan(&mut self, production: &Production) -> Result<Option<Plan>> {
        let replacing =
            super::replace::replaced(self.ctx, self.opts.replace, production, self.name());
        let replacing = replacing.await?;
        let opts = super::replace::start_options(
            self.ctx,
            (self.opts.lock, self.opts.allow_unpinned),
            replacing.as_ref(),
        );
        let (confirm, progress) = (self.opts.confirm, self.opts.progress);
        let planned = super::evict::planned(self.ctx, self.loaded, &opts, confirm, progress);
        let plan = timed(self.record, PhaseName::Plan, planned).await?;
        let start = &plan.start;
        self.record.plan = serde_json::to_value(start).ok();
        self.record.image = start.image_ref.clone();
        self.record.unpinned = start.unpinned;
        self.record.model_fingerprint = start.model_fingerprint.clone();
        self.record.produced_by = start.produced_by.clone();
        if let Some(l) = &start.produced_by {
            self.step(&format!("model {l}"));
        }
        let serving = match production.serving() {
            Some(u) => crate::frontdoor::alive(self.ctx.rt(), u).await,
            None => false,
        };
        let prod = production.current.as_ref().map(|e| e.recipe.as_str());
        self.step(&format!(
            "plan: {} ({}{}), {}; {}",
            self.name(),
            start.runtime.as_str(),
            match &start.group {
                Some(g) => format!(
                    ", {} nodes: {}",
                    g.plan.nodes,
                    g.nodes
                        .members
                        .iter()
                        .map(|n| n.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None => String::new(),
            },
            start.memory.describe(),
            plan.how(prod, serving)
        ));
        let spec = super::rollout::spec(self.loaded, &self.opts.rollout)?;
        let asked = (self.opts.no_promote, production, serving);
        self.rollout = super::rollout::plan(self.name(), spec, &plan, asked, self.opts.progress)?;
        if self.opts.dry_run {
            self.record.outcome = Outcome::Planned;
            return Ok(None);
        }
        Ok(Some(plan))
    }

    /// The model dir's patch steps (idempotent; nothing to do when already patched).
    /// Whether any ran.
    async fn patch(&mut self) -> Result<bool> {
        let loaded = self.loaded;
        if loaded
            .recipe
            .model
            .as_ref()
            .is_none_or(|m| m.patches.is_empty())
        {
            return Ok(false);
        }
        let docker = self.ctx.rt().docker().ok().map(|d| d.client());
        let state = self.ctx.state();
        let applied = timed(self.record, PhaseName::Patch, async {
            let p = crate::patch::plan::plan(loaded, &crate::patch::repo_dir(loaded))?;
            crate::patch::apply(loaded, p, state, docker).await
        })
        .await?;
        self.record.patch_diff = applied.plan.diff();
        self.record.patched = applied.written;
        Ok(true)
    }

    /// Stops what the memory plan names; production last, after the front door holds, and
    /// only when confirmed.
    async fn make_room(&mut self, plan: &mut Plan) -> Result<()> {
        if let Some(p) = plan.stops_production().map(str::to_string) {
            let question = format!("stop production {p} to make room for {}?", self.name());
            if !(self.opts.confirm)(&question) {
                return Err(Error::NotConfirmed(crate::error::Unconfirmed::Swap {
                    name: self.name().to_string(),
                    production: p,
                }));
            }
            // Asleep, it is woken if the candidate fails: seconds, where a start takes
            // minutes.
            plan.production_may_sleep = (self.ctx.recipes.get(&p).ok())
                .and_then(|l| l.recipe.serve.as_ref().map(|s| s.sleep))
                == Some(crate::recipe::serve::Sleep::Auto);
        }
        let hold = Hold::Ask(&self.ctx.door, self.ctx.door_config.drain);
        switch::make_room(
            self.ctx.rt(),
            plan,
            hold,
            Some(&*self.touched),
            self.opts.progress,
        )
        .await
    }

    /// The candidate on its own port, until it serves.
    async fn start(&mut self, mut plan: Plan, patched: bool) -> Result<Deployment> {
        if patched {
            // The patch changed the model: its fingerprint is taken again.
            plan.start
                .refingerprint(self.ctx.shared, self.loaded)
                .await?;
        }
        // The instance carries this run's id: the way back stops it and nothing else.
        plan.start.run_id = self.record.run_id.clone();
        self.step(&format!("starting {}", self.name()));
        let report = timed(
            self.record,
            PhaseName::Start,
            start(self.ctx.rt(), &plan.start, None, |_| {}),
        )
        .await?;
        for w in &report.warnings {
            self.step(&format!("warning: {w}"));
        }
        self.record.warnings.extend(report.warnings.iter().cloned());
        self.record.memory_observed = Some(report.memory_observed.clone());
        let candidate = report.deployment;
        self.record.deployment = Some(candidate.id.clone());
        self.record.image_digest = (candidate.runtime == crate::recipe::Runtime::Docker)
            .then(|| candidate.artifact.clone());
        self.record.model_fingerprint = candidate
            .model_fingerprint
            .clone()
            .or(self.record.model_fingerprint.take());
        self.touched.lock().expect("touched").started = Some(candidate.clone());
        Ok(candidate)
    }

    /// Production's last complete result, or a new measurement of it while it still
    /// serves (blue/green). Without one the relative gates are inconclusive, never passed;
    /// with no production at all they do not apply.
    async fn measure_production(
        &mut self,
        production: &Production,
        way: Mode,
    ) -> Result<Baseline<BenchResult>> {
        let baseline = production_baseline(production);
        let (Some(current), Mode::BlueGreen, Baseline::Missing(why)) =
            (&production.current, way, &baseline)
        else {
            return Ok(baseline);
        };
        let Some(up) = current.upstream.clone() else {
            return Ok(baseline);
        };
        if !crate::frontdoor::alive(self.ctx.rt(), &up).await {
            return Ok(baseline);
        }
        self.step(&format!(
            "benchmarking production {} first ({why})",
            current.recipe
        ));
        let path = self
            .ctx
            .state()
            .run_file(&self.record.run_id, RunFile::ProductionBench)?;
        let (ctx, recipe) = (self.ctx, current.recipe.clone());
        let result = timed(self.record, PhaseName::MeasureProduction, async {
            let own = Baseline::missing("this is production's own measurement");
            bench_recipe(ctx, &recipe, &own, None).await
        })
        .await?;
        state::write_json(&path, &result)?;
        Ok(match result.unusable_as_baseline() {
            None => {
                let mut next = production.clone();
                if let Some(e) = next.current.as_mut() {
                    e.bench = Some(path);
                }
                // Kept for the next `up`; a failed write only costs a new measurement.
                let _ = self.ctx.door.update(&next).await;
                Baseline::Measured(result)
            }
            Some(why) => Baseline::missing(format!("production's measurement is unusable: {why}")),
        })
    }

    /// The candidate's benchmark against production's result.
    async fn bench(
        &mut self,
        baseline: &Baseline<BenchResult>,
        asked: Option<crate::eval::Report>,
    ) -> Result<(BenchResult, std::path::PathBuf)> {
        self.step(&format!("benchmarking {}", self.name()));
        let path = self
            .ctx
            .state()
            .run_file(&self.record.run_id, RunFile::Bench)?;
        let (ctx, name) = (self.ctx, self.name().to_string());
        let result = timed(self.record, PhaseName::Bench, async {
            bench_recipe(ctx, &name, baseline, asked).await
        })
        .await?;
        state::write_json(&path, &result)?;
        for g in result
            .gates
            .iter()
            .filter(|g| g.outcome == GateOutcome::NotApplied)
        {
            self.step(&format!("{}: {}", g.gate, g.detail));
        }
        self.record.bench = Some(path.clone());
        // The report puts the candidate beside the production result it was judged against.
        let report = self
            .ctx
            .state()
            .run_file(&self.record.run_id, RunFile::Report)?;
        let shown: Vec<&BenchResult> = baseline.measured().into_iter().chain([&result]).collect();
        state::write_atomic(&report, crate::bench::html::report(&shown).as_bytes())?;
        self.record.report = Some(report);
        self.record.ttft_p50_ms = result.ttft_p50_ms;
        self.record.decode_tps_p50 = result.decode_tps_p50;
        self.record.gates = result.gates.clone();
        self.record.eval = result.eval.as_ref().map(crate::eval::Evaluation::record);
        Ok((result, path))
    }

    /// Pass, or the reason it is not promoted.
    async fn judge(&mut self, result: &BenchResult, candidate: &Deployment) -> Result<()> {
        let name = self.name().to_string();
        // Its output goes with the run before anything can stop it.
        let log_path = self
            .ctx
            .state()
            .run_file(&self.record.run_id, RunFile::CandidateLog)?;
        if let Ok(mut f) = std::fs::File::create(&log_path) {
            if self
                .ctx
                .rt()
                .logs(candidate, LogView::default(), &mut f)
                .await
                .is_ok()
            {
                self.record.logs = Some(log_path);
            }
        }
        self.record.phases.push(crate::history::Phase {
            name: PhaseName::Judge,
            ms: 0.0,
            ok: result.verdict == Verdict::Pass,
            detail: format!("verdict {}: {}", result.verdict, result.verdict_reason),
        });
        if result.verdict == Verdict::Pass {
            return Ok(());
        }
        // A candidate that died under the benchmark failed: its exit says why, not the
        // requests that could no longer reach it.
        if let Some(d) = self.ctx.rt().find(&name).await?.filter(|d| !d.running()) {
            let how = match &d.state {
                crate::runtime::RunState::Exited { exit: Some(exit) } => exit.to_string(),
                _ => "exited".into(),
            };
            return Err(Error::Stopped(crate::error::Gone::DuringBench {
                name: name.clone(),
                how,
            }));
        }
        if result.verdict == Verdict::Inconclusive {
            self.record.outcome = Outcome::Inconclusive;
            return Err(Error::Inconclusive {
                name: name.clone(),
                what: "the benchmark",
                reason: result.verdict_reason.clone(),
            });
        }
        let failed: Vec<String> = result
            .gates
            .iter()
            .filter(|g| g.outcome == GateOutcome::Fail)
            .map(|g| {
                format!(
                    "{} {} (measured {})",
                    g.gate,
                    g.rule,
                    g.value.map_or("-".into(), |v| format!("{v:.1}"))
                )
            })
            .chain(
                result
                    .eval
                    .iter()
                    .filter_map(crate::eval::Evaluation::lost_line),
            )
            .chain(result.problems.iter().take(3).cloned())
            .collect();
        self.record.outcome = Outcome::Rejected;
        Err(Error::RejectedByGates { name, failed })
    }

    /// `--no-promote`: the candidate keeps its port; a production stopped for a swap serves
    /// again.
    async fn keep_production(&mut self, way: Mode, candidate: &Deployment) -> Result<()> {
        if way == Mode::BlueGreen {
            return Ok(());
        }
        self.ctx.rt().stop(candidate, super::STOP_GRACE).await?;
        let t = std::mem::take(&mut *self.touched.lock().expect("touched"));
        switch::restore(self.ctx, t, self.name(), self.opts.progress).await;
        Ok(())
    }

    /// The front door sends new requests to the candidate that passed; the old production's
    /// streams finish; then it is stopped, or kept warm for an instant rollback.
    async fn switch(
        &mut self,
        production: Production,
        candidate: &Deployment,
        bench: std::path::PathBuf,
        way: Mode,
    ) -> Result<()> {
        // Production as it is now: the watch may have restarted it meanwhile.
        let production = self.ctx.production().await.unwrap_or(production);
        let mut next = production.clone();
        // Its own model's name: with one model served, the lane takes it (`models::landing`).
        next.model = Some(crate::models::of(&self.loaded.recipe));
        let old = production.serving().cloned();
        let given = (self.opts.lock, self.opts.pin_move.clone());
        let entry = super::replace::promoted(self.ctx, given, self.record, (candidate, bench));
        next.promote(entry);
        let grace = self.ctx.door_config.warm_grace;
        let keep_warm = old
            .as_ref()
            .filter(|_| way == Mode::BlueGreen && !grace.is_zero());
        if let Some(u) = keep_warm {
            next.warm.retain(|w| w.upstream.recipe != u.recipe);
            next.warm.push(Warm {
                upstream: u.clone(),
                until: crate::units::unix_now().as_secs() + grace.as_secs(),
            });
        }
        let (ctx, drain) = (self.ctx, self.ctx.door_config.drain);
        let report = timed(self.record, PhaseName::Switch, async {
            ctx.door.switch(&next, drain).await
        })
        .await?;
        // Production now: nothing after this point undoes it.
        *self.touched.lock().expect("touched") = Touched::of_run(&self.record.run_id);
        self.step(&format!(
            "the front door sends production to {} ({}){}",
            self.name(),
            crate::units::short_id(&candidate.id),
            if report.left_in_flight > 0 {
                format!(
                    "; {} old streams were still running after the drain",
                    report.left_in_flight
                )
            } else {
                String::new()
            }
        ));
        if let Err(e) = switch::retire(self.ctx.rt(), &next, old.as_ref()).await {
            let recipe = old.as_ref().map_or("", |u| u.recipe.as_str());
            self.record
                .warnings
                .push(format!("stopping the old production {recipe}: {e}"));
        }
        if let Some(old) = keep_warm {
            self.step(&format!(
                "{} stays warm for {} s: `sparkctl rollback` switches back at once",
                old.recipe,
                grace.as_secs()
            ));
        }
        Ok(())
    }
}

/// Production's last result, when it is one the relative gates can trust; else why not.
fn production_baseline(production: &Production) -> Baseline<BenchResult> {
    let Some(current) = &production.current else {
        return Baseline::NoProduction;
    };
    let Some(path) = &current.bench else {
        return Baseline::missing(format!("production {} has no result yet", current.recipe));
    };
    let result: BenchResult = match state::read_json(path) {
        Ok(r) => r,
        Err(e) => return Baseline::missing(format!("its last result cannot be read ({e})")),
    };
    match result.unusable_as_baseline() {
        Some(why) => Baseline::missing(format!("its last result is unusable: {why}")),
        None => Baseline::Measured(result),
    }
}

/// Benchmarks a running recipe with its own bench section: suite, gates, objectives, load,
/// evaluation (beside production's answers `asked` just now, when there are any).
async fn bench_recipe(
    ctx: &SwitchContext<'_>,
    name: &str,
    baseline: &Baseline<BenchResult>,
    asked: Option<crate::eval::Report>,
) -> Result<BenchResult> {
    let mut plan = super::bench_plan(
        ctx.shared,
        ctx.recipes,
        name,
        crate::bench::Overrides::default(),
    )
    .await?;
    if let (Some(e), Some(a)) = (plan.options.eval.as_mut(), asked) {
        e.production = Some(Ok(a));
    }
    plan.run(baseline, |_, _, _| {}).await
}
