//! `up`, `rollback` and what they remember: which deployment is production (and the ones
//! before it, for rollback), and one run record per attempt. The flow reads like DESIGN §5:
//! plan → patch → make room → start → ready → bench → gates → promote, or put production back.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::{plan_start, start, Settings, StartOptions, STOP_GRACE};
use crate::bench::gates::GateOutcome;
use crate::bench::gates::GateResult;
use crate::bench::result::{BenchResult, Verdict};
use crate::error::{Error, Result};
use crate::lock::Lock;
use crate::recipe::{LoadedRecipe, RecipeSet};
use crate::runtime::{Deployment, Runtimes};
use crate::state::{self, StateDir};

/// One production backend.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Entry {
    pub recipe: String,
    pub since: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Its last benchmark result: what `vs_production_*` gates compare with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bench: Option<PathBuf>,
}

/// `STATE/production.json`: what serves now, and what served before (a stack).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Production {
    pub current: Option<Entry>,
    #[serde(default)]
    pub previous: Vec<Entry>,
}

impl Production {
    pub fn load(state: &StateDir) -> Result<Production> {
        let path = state.production_file();
        if !path.exists() {
            return Ok(Production::default());
        }
        state::read_json(&path)
    }

    fn save(&self, state: &StateDir) -> Result<()> {
        state::write_json(&state.production_file(), self)
    }

    /// Makes `entry` production; the old one goes on the stack.
    fn promote(&mut self, entry: Entry) {
        if let Some(old) = self.current.take() {
            self.previous.push(old);
        }
        self.current = Some(entry);
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Phase {
    pub name: String,
    pub ms: f64,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

/// How an `up` or `rollback` ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// The candidate passed and serves production.
    Promoted,
    /// The candidate passed; not promoted (`--no-promote`).
    Passed,
    /// The candidate failed its gates or its benchmark: production keeps serving.
    Rejected,
    /// The benchmark could not decide (transport faults, gates without evidence): the
    /// candidate is not promoted, and not blamed.
    Inconclusive,
    #[default]
    Failed,
    Interrupted,
    RolledBack,
    Planned,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Outcome::Promoted => "promoted",
            Outcome::Passed => "passed",
            Outcome::Rejected => "rejected",
            Outcome::Inconclusive => "inconclusive",
            Outcome::Failed => "failed",
            Outcome::Interrupted => "interrupted",
            Outcome::RolledBack => "rolled-back",
            Outcome::Planned => "planned",
        })
    }
}

/// `STATE/runs/RUN.json`: one `up` or `rollback`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunRecord {
    pub run_id: String,
    pub command: String,
    pub recipe: String,
    pub started_at: String,
    pub finished_at: String,
    pub outcome: Outcome,
    pub phases: Vec<Phase>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<serde_json::Value>,
    pub image: Option<String>,
    pub image_digest: Option<String>,
    pub unpinned: bool,
    pub model_fingerprint: Option<String>,
    pub patched: Vec<String>,
    /// What the patch changed, as `patch --dry-run` shows it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub patch_diff: String,
    pub bench: Option<PathBuf>,
    pub ttft_p50_ms: Option<f64>,
    pub decode_tps_p50: Option<f64>,
    pub gates: Vec<GateResult>,
    /// The candidate's output, copied before it was stopped.
    pub logs: Option<PathBuf>,
    pub error: Option<String>,
    /// What answers on the production port after this run.
    pub serving: Option<String>,
    /// What the candidate held once ready, against its declared `memory_gb`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_observed: Option<super::memory::MemoryObserved>,
    /// Things the user should know that did not stop the run (memory above its declaration).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl RunRecord {
    fn save(&self, state: &StateDir) -> Result<PathBuf> {
        let path = state.runs_dir()?.join(format!("{}.json", self.run_id));
        state::write_json(&path, self)?;
        Ok(path)
    }
}

/// Past runs, newest first, and the run records that could not be read (one damaged
/// record must not hide the others).
pub fn history(state: &StateDir) -> Result<(Vec<RunRecord>, Vec<state::Damaged>)> {
    let dir = state.runs_dir()?;
    let (mut runs, damaged) =
        state::read_json_dir::<RunRecord>(&dir, |p| !p.to_string_lossy().ends_with("-bench.json"))?;
    runs.sort_by(|a, b| b.run_id.cmp(&a.run_id));
    Ok((runs, damaged))
}

pub fn run_record(state: &StateDir, run: &str) -> Result<RunRecord> {
    let path = state.runs_dir()?.join(format!("{run}.json"));
    if !path.exists() {
        return Err(Error::Usage(format!(
            "no run {run}; `sparkctl history` lists them"
        )));
    }
    state::read_json(&path)
}

/// What the flow needs from the machine.
pub struct Ctx<'a> {
    pub rt: &'a Runtimes,
    pub state: &'a StateDir,
    pub recipes: &'a RecipeSet,
    pub settings: &'a Settings,
    pub lock: &'a Lock,
    pub self_exe: &'a str,
}

pub struct UpOptions<'a> {
    pub dry_run: bool,
    pub no_promote: bool,
    pub allow_unpinned: bool,
    pub suite: Option<String>,
    pub runs: Option<usize>,
    /// Asked before production is stopped; false refuses.
    pub confirm: &'a dyn Fn(&str) -> bool,
    /// Progress lines for people.
    pub say: &'a dyn Fn(&str),
}

/// What the flow changed so far, for the cleanup after a failure or Ctrl-C.
#[derive(Default)]
struct Touched {
    candidate: Option<Deployment>,
    /// The production recipe this run stopped (to be put back on failure).
    production_stopped: Option<String>,
}

/// The recipe, moved to the production port.
fn on_production_port(loaded: &LoadedRecipe, settings: &Settings) -> LoadedRecipe {
    let mut l = loaded.clone();
    l.recipe.server.port = settings.production_port;
    l
}

async fn start_as_production(
    ctx: &Ctx<'_>,
    name: &str,
    allow_unpinned: bool,
    say: &dyn Fn(&str),
) -> Result<Deployment> {
    let loaded = on_production_port(ctx.recipes.get(name)?, ctx.settings);
    let opts = StartOptions {
        lock: ctx.lock,
        allow_unpinned,
        self_exe: ctx.self_exe,
    };
    let plan = plan_start(ctx.rt, ctx.state, &loaded, ctx.settings, &opts).await?;
    say(&format!(
        "starting {name} on the production port {}",
        ctx.settings.production_port
    ));
    Ok(start(ctx.rt, &plan, None, |_| {}).await?.deployment)
}

/// Stops whatever sparkctl runs on the production port. Returns its recipe.
async fn stop_production(ctx: &Ctx<'_>) -> Result<Option<String>> {
    let (all, _) = ctx.rt.latest_per_recipe().await?;
    let mut stopped = None;
    for d in all
        .into_iter()
        .filter(|d| d.running() && d.port == ctx.settings.production_port)
    {
        ctx.rt.stop(&d, STOP_GRACE).await?;
        stopped = Some(d.name.clone());
    }
    Ok(stopped)
}

fn now() -> String {
    crate::units::utc_stamp(crate::units::unix_now().as_secs())
}

/// `sparkctl up NAME`.
pub async fn up(ctx: &Ctx<'_>, name: &str, opts: &UpOptions<'_>) -> Result<RunRecord> {
    let _lock = ctx.state.lock(&format!("up {name}"))?;
    let loaded = ctx.recipes.get(name)?;
    if loaded.recipe.server.port == ctx.settings.production_port {
        return Err(Error::Usage(format!(
            "{name}: server.port is the production port {}; give the candidate its own port (it moves \
             to the production port when promoted)",
            ctx.settings.production_port
        )));
    }
    let mut record = RunRecord {
        run_id: state::new_run_id(),
        command: "up".into(),
        recipe: name.to_string(),
        started_at: now(),
        ..Default::default()
    };
    let touched = Arc::new(Mutex::new(Touched::default()));
    let flow = up_flow(ctx, loaded, opts, &mut record, touched.clone());
    let outcome = tokio::select! {
        r = flow => r,
        _ = tokio::signal::ctrl_c() => Err(Error::Interrupted("interrupted".into())),
    };
    let e = match outcome {
        Ok(()) => {
            record.finished_at = now();
            record.serving = serving_now(ctx).await;
            if !opts.dry_run {
                record.save(ctx.state)?;
            }
            return Ok(record);
        }
        Err(e) => e,
    };
    if opts.dry_run {
        return Err(e);
    }
    {
        // Put things back: candidate stopped (logs kept), production serving again.
        let mut t = std::mem::take(&mut *touched.lock().expect("touched lock"));
        let mut notes = Vec::new();
        // Interrupted mid-start, the candidate is not recorded yet: find it by name (a
        // running deployment of this recipe off the production port is this run's).
        if t.candidate.is_none() {
            t.candidate = ctx
                .rt
                .find(name)
                .await
                .ok()
                .flatten()
                .filter(|d| d.running() && d.port != ctx.settings.production_port);
        }
        if let Some(c) = &t.candidate {
            let _ = ctx.rt.stop(c, STOP_GRACE).await;
            notes.push(format!(
                "stopped the candidate {} (its logs: `sparkctl logs {}`)",
                c.name, c.name
            ));
        }
        if let Some(prod) = &t.production_stopped {
            (opts.say)(&format!("restoring production {prod}"));
            match start_as_production(ctx, prod, true, opts.say).await {
                Ok(_) => notes.push(format!(
                    "{prod} serves on port {} again",
                    ctx.settings.production_port
                )),
                Err(e2) => notes.push(format!("restoring {prod} failed too: {e2}")),
            }
        }
        record.outcome = if matches!(e, Error::Interrupted(_)) {
            Outcome::Interrupted
        } else if matches!(record.outcome, Outcome::Rejected | Outcome::Inconclusive) {
            record.outcome
        } else {
            Outcome::Failed
        };
        record.error = Some(e.to_string());
        record.serving = serving_now(ctx).await;
        record.finished_at = now();
        let path = record.save(ctx.state)?;
        let summary = format!(
            "up {name} {}: {e}\n  {}\n  serving on port {}: {}\n  run record: {}",
            record.outcome,
            notes.join("; "),
            ctx.settings.production_port,
            record.serving.clone().unwrap_or_else(|| "nothing".into()),
            path.display()
        );
        Err(if matches!(e, Error::Interrupted(_)) {
            Error::Interrupted(summary)
        } else {
            Error::Failed(summary)
        })
    }
}

async fn serving_now(ctx: &Ctx<'_>) -> Option<String> {
    let (all, _) = ctx.rt.latest_per_recipe().await.ok()?;
    all.into_iter()
        .find(|d| d.running() && d.port == ctx.settings.production_port)
        .map(|d| {
            format!(
                "{} ({} {})",
                d.name,
                d.runtime.as_str(),
                super::short(&d.id)
            )
        })
}

async fn timed<T>(
    record: &mut RunRecord,
    name: &str,
    f: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    let began = Instant::now();
    let r = f.await;
    record.phases.push(Phase {
        name: name.into(),
        ms: began.elapsed().as_secs_f64() * 1e3,
        ok: r.is_ok(),
        detail: r.as_ref().err().map(|e| e.to_string()).unwrap_or_default(),
    });
    r
}

async fn up_flow(
    ctx: &Ctx<'_>,
    loaded: &LoadedRecipe,
    opts: &UpOptions<'_>,
    record: &mut RunRecord,
    touched: Arc<Mutex<Touched>>,
) -> Result<()> {
    let name = loaded.recipe.name.clone();
    let start_opts = StartOptions {
        lock: ctx.lock,
        allow_unpinned: opts.allow_unpinned,
        self_exe: ctx.self_exe,
    };
    let mut production = Production::load(ctx.state)?;
    let prod_name = production.current.as_ref().map(|e| e.recipe.clone());

    // Plan: every cheap check, nothing changed. Deployments in the way are the memory plan's.
    let plan = timed(
        record,
        "plan",
        plan_start(ctx.rt, ctx.state, loaded, ctx.settings, &start_opts),
    )
    .await?;
    record.plan = serde_json::to_value(&plan).ok();
    record.image = plan.image_ref.clone();
    record.unpinned = plan.unpinned;
    record.model_fingerprint = plan.model_fingerprint.clone();
    let swap = prod_name
        .as_ref()
        .is_some_and(|p| plan.memory.must_stop.contains(p));
    if !plan.memory.fits {
        return Err(Error::Failed(format!(
            "{name} does not fit in memory even alone: {}",
            plan.memory.describe()
        )));
    }
    (opts.say)(&format!(
        "plan: {} ({}), {}; {}",
        name,
        plan.runtime.as_str(),
        plan.memory.describe(),
        if swap {
            format!(
                "production {} must stop first (swap)",
                prod_name.clone().unwrap_or_default()
            )
        } else {
            "production keeps serving until the candidate passes (blue/green)".to_string()
        }
    ));
    if opts.dry_run {
        record.outcome = Outcome::Planned;
        return Ok(());
    }

    // Patch the model dir (idempotent; nothing to do when already patched).
    if loaded
        .recipe
        .model
        .as_ref()
        .is_some_and(|m| !m.patches.is_empty())
    {
        let docker = ctx.rt.docker().ok().map(|d| d.client());
        let applied = timed(record, "patch", async {
            let p = crate::patch::plan::plan(loaded, &crate::patch::repo_dir(loaded))?;
            crate::patch::apply(loaded, p, ctx.state, docker).await
        })
        .await?;
        record.patch_diff = applied.plan.diff();
        record.patched = applied.written;
    }

    // Make room.
    for victim in &plan.memory.must_stop {
        let is_prod = Some(victim) == prod_name.as_ref();
        if is_prod
            && !(opts.confirm)(&format!(
                "stop production {victim} to make room for {name}?"
            ))
        {
            return Err(Error::Usage(format!(
                "{name} needs production {victim} stopped first; confirm, or pass --yes"
            )));
        }
        if let Some(d) = ctx.rt.find(victim).await?.filter(Deployment::running) {
            (opts.say)(&format!("stopping {victim} to make room"));
            ctx.rt.stop(&d, STOP_GRACE).await?;
            if is_prod {
                touched.lock().expect("touched lock").production_stopped = Some(victim.clone());
            }
        }
    }

    // Start the candidate on its own port and wait until it serves.
    let plan = plan_start(ctx.rt, ctx.state, loaded, ctx.settings, &start_opts).await?;
    (opts.say)(&format!("starting {name}"));
    let report = timed(record, "start", start(ctx.rt, &plan, None, |_| {})).await?;
    for w in &report.warnings {
        (opts.say)(&format!("warning: {w}"));
    }
    record.warnings.extend(report.warnings.iter().cloned());
    record.memory_observed = Some(report.memory_observed.clone());
    let candidate = report.deployment.clone();
    record.image_digest =
        (candidate.runtime == crate::recipe::Runtime::Docker).then(|| candidate.artifact.clone());
    touched.lock().expect("touched lock").candidate = Some(candidate.clone());

    // Production's own result is what the relative gates compare with: a complete one, or
    // it is measured again now (it still serves in a blue/green run). Without one the
    // relative gates are inconclusive, never passed.
    let mut baseline = production_baseline(&production);
    let prod_running = match &prod_name {
        Some(p) => ctx.rt.find(p).await?.is_some_and(|d| d.running()),
        None => false,
    };
    if let (Some(p), true, Err(why)) = (prod_name.clone(), prod_running, &baseline) {
        (opts.say)(&format!("benchmarking production {p} first ({why})"));
        let path = ctx
            .state
            .runs_dir()?
            .join(format!("{}-production-bench.json", record.run_id));
        let result = timed(
            record,
            "bench-production",
            bench_recipe(ctx, &p, opts, Err("this is production's own measurement")),
        )
        .await?;
        state::write_json(&path, &result)?;
        baseline = match result.unusable_as_baseline() {
            None => {
                if let Some(e) = production.current.as_mut() {
                    e.bench = Some(path);
                }
                production.save(ctx.state)?;
                Ok(result)
            }
            Some(why) => Err(format!("production's measurement is unusable: {why}")),
        };
    }

    // Benchmark against production's last result.
    (opts.say)(&format!("benchmarking {name}"));
    let bench_path = ctx
        .state
        .runs_dir()?
        .join(format!("{}-bench.json", record.run_id));
    let result = timed(
        record,
        "bench",
        bench_recipe(ctx, &name, opts, baseline.as_ref().map_err(String::as_str)),
    )
    .await?;
    state::write_json(&bench_path, &result)?;
    record.bench = Some(bench_path.clone());
    record.ttft_p50_ms = result.ttft_p50_ms;
    record.decode_tps_p50 = result.decode_tps_p50;
    record.gates = result.gates.clone();
    // Keep its output with the run before anything stops it.
    let log_path = ctx.state.runs_dir()?.join(format!("{}.log", record.run_id));
    if let Ok(mut f) = std::fs::File::create(&log_path) {
        if ctx.rt.logs(&candidate, None, false, &mut f).await.is_ok() {
            record.logs = Some(log_path);
        }
    }
    // A candidate that died under the benchmark failed: its exit says why, not the
    // requests that could no longer reach it.
    if result.verdict != Verdict::Pass {
        if let Some(d) = ctx.rt.find(&name).await?.filter(|d| !d.running()) {
            let how = match &d.state {
                crate::runtime::RunState::Exited { exit: Some(exit) } => exit.to_string(),
                _ => "exited".into(),
            };
            return Err(Error::Failed(format!(
                "{name} stopped during the benchmark: it {how}; see `sparkctl logs {name}`"
            )));
        }
    }

    let gate_phase = Phase {
        name: "gates".into(),
        ms: 0.0,
        ok: result.verdict == Verdict::Pass,
        detail: format!("verdict {}: {}", result.verdict, result.verdict_reason),
    };
    record.phases.push(gate_phase);
    if result.verdict == Verdict::Inconclusive {
        record.outcome = Outcome::Inconclusive;
        return Err(Error::Failed(format!(
            "{name} was not promoted and not rejected: the benchmark was inconclusive ({}); \
             production keeps serving; run `sparkctl up {name}` again",
            result.verdict_reason
        )));
    }
    if result.verdict != Verdict::Pass {
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
            .chain(result.problems.iter().take(3).cloned())
            .collect();
        record.outcome = Outcome::Rejected;
        return Err(Error::Failed(format!(
            "{name} did not pass: {}",
            failed.join("; ")
        )));
    }
    if opts.no_promote {
        record.outcome = Outcome::Passed;
        // In a swap production was stopped; it serves again, the candidate keeps its port.
        let stopped = touched
            .lock()
            .expect("touched lock")
            .production_stopped
            .take();
        if let Some(prod) = stopped {
            ctx.rt.stop(&candidate, STOP_GRACE).await?;
            start_as_production(ctx, &prod, true, opts.say).await?;
        }
        return Ok(());
    }

    // Promote: the candidate moves to the production port.
    let run_id = record.run_id.clone();
    timed(record, "promote", async {
        if let Some(stopped) = stop_production(ctx).await? {
            touched
                .lock()
                .expect("touched lock")
                .production_stopped
                .get_or_insert(stopped);
        }
        ctx.rt.stop(&candidate, STOP_GRACE).await?;
        start_as_production(ctx, &name, opts.allow_unpinned, opts.say).await?;
        touched.lock().expect("touched lock").candidate = None;
        production.promote(Entry {
            recipe: name.clone(),
            since: now(),
            run_id: Some(run_id),
            bench: Some(bench_path.clone()),
        });
        production.save(ctx.state)?;
        Ok(())
    })
    .await?;
    touched.lock().expect("touched lock").production_stopped = None;
    record.outcome = Outcome::Promoted;
    Ok(())
}

/// Production's last result, when it is one the relative gates can trust; else why not.
fn production_baseline(production: &Production) -> std::result::Result<BenchResult, String> {
    let Some(current) = &production.current else {
        return Err("there is no production".into());
    };
    let Some(path) = &current.bench else {
        return Err(format!("production {} has no result yet", current.recipe));
    };
    let result: BenchResult =
        state::read_json(path).map_err(|e| format!("its last result cannot be read ({e})"))?;
    match result.unusable_as_baseline() {
        Some(why) => Err(format!("its last result is unusable: {why}")),
        None => Ok(result),
    }
}

/// Benchmarks a running recipe with its own suite and gates.
async fn bench_recipe(
    ctx: &Ctx<'_>,
    name: &str,
    opts: &UpOptions<'_>,
    baseline: std::result::Result<&BenchResult, &str>,
) -> Result<BenchResult> {
    let (target, gates, suite_name) = super::bench_target(ctx.rt, ctx.recipes, name).await?;
    let suite = crate::bench::suite::Suite::load(
        opts.suite.as_deref().unwrap_or(&suite_name),
        &ctx.recipes.dir.join("suites"),
    )?;
    let bench_opts = crate::bench::Options {
        warmup: None,
        runs: opts.runs,
        concurrency: Vec::new(),
        gates,
    };
    crate::bench::run(&suite, target, &bench_opts, baseline, |_, _, _| {}).await
}

/// `sparkctl rollback [--to NAME]`: the previous production (or NAME) serves again.
pub async fn rollback(
    ctx: &Ctx<'_>,
    to: Option<&str>,
    dry_run: bool,
    say: &dyn Fn(&str),
) -> Result<RunRecord> {
    let _lock = ctx.state.lock("rollback")?;
    let mut production = Production::load(ctx.state)?;
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
    ctx.recipes.get(&target)?;
    let mut record = RunRecord {
        run_id: state::new_run_id(),
        command: "rollback".into(),
        recipe: target.clone(),
        started_at: now(),
        ..Default::default()
    };
    let current = production.current.as_ref().map(|e| e.recipe.clone());
    say(&format!(
        "rollback: stop {} on port {}, start {target} there",
        current
            .clone()
            .unwrap_or_else(|| "whatever sparkctl runs".into()),
        ctx.settings.production_port
    ));
    if dry_run {
        record.outcome = Outcome::Planned;
        return Ok(record);
    }
    let stopped = timed(&mut record, "stop", stop_production(ctx)).await?;
    match timed(
        &mut record,
        "start",
        start_as_production(ctx, &target, true, say),
    )
    .await
    {
        Ok(d) => {
            record.image_digest =
                (d.runtime == crate::recipe::Runtime::Docker).then(|| d.artifact.clone());
            record.model_fingerprint = d.model_fingerprint.clone();
            let bench = if from_stack {
                production.previous.pop().and_then(|e| e.bench)
            } else {
                None
            };
            let entry = Entry {
                recipe: target.clone(),
                since: now(),
                run_id: Some(record.run_id.clone()),
                bench,
            };
            if from_stack {
                // The rolled-back one is dropped: it is what was wrong.
                production.current = Some(entry);
            } else {
                production.promote(entry);
            }
            production.save(ctx.state)?;
            record.outcome = Outcome::RolledBack;
        }
        Err(e) => {
            // Nothing serves: put back what did.
            if let Some(prev) = stopped {
                let _ = start_as_production(ctx, &prev, true, say).await;
            }
            record.outcome = Outcome::Failed;
            record.error = Some(e.to_string());
            record.serving = serving_now(ctx).await;
            record.finished_at = now();
            record.save(ctx.state)?;
            return Err(Error::Failed(format!(
                "rollback to {target} failed: {e}\n  serving on port {}: {}",
                ctx.settings.production_port,
                record.serving.clone().unwrap_or_else(|| "nothing".into())
            )));
        }
    }
    record.serving = serving_now(ctx).await;
    record.finished_at = now();
    record.save(ctx.state)?;
    Ok(record)
}
