//! `sparkctl try NAME`: a recipe's variants side by side. The base is variant 0, as it is;
//! every combination of the changes asked (`vary`) is another, each a derived recipe with
//! its own name (`NAME.tryN`) and a free port. All are checked before anything starts (the
//! recipe checks, the suite, the memory plan beside what runs); then one at a time each is
//! started beside production (never touching it, unless `--allow-swap` lets the front
//! door hold production's requests while it stops for the variant), benchmarked with the
//! base's suite, gates and evaluation sets, its output kept, and stopped. The try is kept in
//! `STATE/tries/ID.json` with its HTML report beside it (`report`), one run record per
//! variant (`history`); `compare` reads it.

pub(crate) mod compare;
mod report;
pub(crate) mod vary;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::bench::gates::GateResult;
use crate::bench::result::Verdict;
use crate::deploy::switch::{self, Hold, Plan, SwitchContext, Touched};
use crate::deploy::{start, StartOptions, STOP_GRACE};
use crate::error::{Error, Result, TryProblem};
use crate::history::{Command, Outcome, PhaseName, RunRecord};
use crate::progress::Progress;
use crate::recipe::{LoadedRecipe, Recipe};
use crate::state::RunFile;
use vary::Change;

/// What a try is asked to do.
pub(crate) struct Options<'a> {
    pub(crate) with: Vec<String>,
    pub(crate) vary: Vec<String>,
    pub(crate) request: Vec<String>,
    /// Runs of the whole suite per variant (a spread needs two).
    pub(crate) repeat: usize,
    /// Variants beyond the base allowed.
    pub(crate) max: usize,
    pub(crate) allow_swap: bool,
    pub(crate) suite: Option<String>,
    pub(crate) runs: Option<usize>,
    pub(crate) warmup: Option<usize>,
    pub(crate) progress: &'a dyn Progress,
}

/// One try: its variants and what each measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Trial {
    pub(crate) id: String,
    pub(crate) recipe: String,
    pub(crate) started_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) finished_at: Option<String>,
    pub(crate) repeat: usize,
    pub(crate) variants: Vec<Variant>,
}

/// One variant: the recipe it runs and what it measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Variant {
    pub(crate) index: usize,
    pub(crate) name: String,
    /// What differs from the base, in words (`base` for variant 0).
    pub(crate) label: String,
    /// Fields set in every suite request (`--request`), by dotted path.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) request: Vec<(String, Value)>,
    /// The command it runs, as planned.
    pub(crate) command: Vec<String>,
    /// It needs production's memory: production is stopped while it runs (`--allow-swap`).
    #[serde(default)]
    pub(crate) swaps: bool,
    pub(crate) recipe: Recipe,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) measured: Option<Measured>,
}

/// What one variant measured, or why it measured nothing.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Measured {
    pub(crate) run_id: String,
    /// It did not start, or its benchmark did not run: the error, its fatal line first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) failed: Option<String>,
    pub(crate) bench: Option<PathBuf>,
    pub(crate) logs: Option<PathBuf>,
    /// The image it ran, by digest (a container's): what its tag resolved to at its start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) image_digest: Option<String>,
    /// From the start asked to its first token, s.
    pub(crate) start_s: Option<f64>,
    /// What it held once ready.
    pub(crate) held_gb: Option<f64>,
    pub(crate) ttft_p50_ms: Option<f64>,
    pub(crate) decode_tps_p50: Option<f64>,
    /// The 95% intervals of those p50s over the repeats.
    pub(crate) ttft_interval: Option<(f64, f64)>,
    pub(crate) decode_interval: Option<(f64, f64)>,
    pub(crate) gates: Vec<GateResult>,
    pub(crate) verdict: Option<Verdict>,
    pub(crate) eval_accuracy_pct: Option<f64>,
    /// Its evaluation answers paired item by item with variant 0's (exact McNemar).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) eval_vs_base: Option<String>,
}

impl Variant {
    /// It measured, and passed every gate.
    pub(crate) fn passed(&self) -> bool {
        self.measured
            .as_ref()
            .is_some_and(|m| m.failed.is_none() && m.verdict == Some(Verdict::Pass))
    }
}

fn tries_dir(state: &crate::state::StateDir) -> Result<PathBuf> {
    let dir = state.root().join("tries");
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
    Ok(dir)
}

impl Trial {
    pub(crate) fn path(&self, state: &crate::state::StateDir) -> Result<PathBuf> {
        Ok(tries_dir(state)?.join(format!("{}.json", self.id)))
    }

    fn save(&self, state: &crate::state::StateDir) -> Result<()> {
        crate::state::write_json(&self.path(state)?, self)
    }

    /// A kept try, by its id.
    pub(crate) fn load(state: &crate::state::StateDir, id: &str) -> Result<Trial> {
        let dir = tries_dir(state)?;
        let missing = |why: String| {
            Error::Try(TryProblem::NoSuchTry {
                id: id.to_string(),
                dir: dir.clone(),
                why,
            })
        };
        let path = dir.join(format!("{id}.json"));
        let text = std::fs::read_to_string(&path).map_err(|e| missing(e.to_string()))?;
        serde_json::from_str(&text).map_err(|e| missing(format!("{}: {e}", path.display())))
    }
}

fn usage(e: vary::BadSpec) -> Error {
    Error::Try(TryProblem::Spec(e.0))
}

/// The variants `opts` asks for, each checked and planned; nothing is started or written.
pub(crate) async fn plan(ctx: &SwitchContext<'_>, name: &str, opts: &Options<'_>) -> Result<Trial> {
    let base = ctx.recipes.get(name)?;
    let with: Vec<Change> = (opts.with.iter())
        .map(|s| Ok(vary::recipe_axis("--with", s).map_err(usage)?.remove(0)))
        .collect::<Result<_>>()?;
    let mut axes = Vec::new();
    for s in &opts.vary {
        axes.push(vary::recipe_axis("--vary", s).map_err(usage)?);
    }
    for s in &opts.request {
        axes.push(vary::request_axis(s).map_err(usage)?);
    }
    let mut sets: Vec<Vec<Change>> = vec![Vec::new()];
    for combo in vary::combinations(&axes) {
        let changes: Vec<Change> = (with.iter().chain(&combo))
            .filter(|c| **c != Change::Unchanged)
            .cloned()
            .collect();
        if !changes.is_empty() && !sets.contains(&changes) {
            sets.push(changes);
        }
    }
    if sets.len() == 1 {
        let name = name.to_string();
        return Err(Error::Try(TryProblem::NothingToTry { name }));
    }
    if sets.len() - 1 > opts.max {
        let (asked, max) = (sets.len() - 1, opts.max);
        return Err(Error::Try(TryProblem::TooMany { asked, max }));
    }
    let mut variants = Vec::new();
    for (i, changes) in sets.iter().enumerate() {
        let v = variant(ctx, base, i, changes, opts)
            .await
            .map_err(|e| named(e, name, i, changes))?;
        variants.push(v);
    }
    Ok(Trial {
        id: crate::state::new_run_id(),
        recipe: name.to_string(),
        started_at: crate::units::now_utc(),
        finished_at: None,
        repeat: opts.repeat,
        variants,
    })
}

/// `e`, of variant `i`, said as that variant's.
fn named(e: Error, name: &str, i: usize, changes: &[Change]) -> Error {
    Error::Try(TryProblem::Variant {
        index: i,
        name: format!("{name}.try{i}"),
        label: label(changes),
        why: Box::new(e),
    })
}

fn label(changes: &[Change]) -> String {
    match changes.is_empty() {
        true => "base".into(),
        false => changes
            .iter()
            .map(Change::label)
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// A free port on the recipe's host.
pub(crate) fn free_port(host: &str) -> Result<u16> {
    let listener = std::net::TcpListener::bind((host, 0))
        .or_else(|_| std::net::TcpListener::bind(("127.0.0.1", 0)))
        .map_err(|e| Error::io("cannot find a free port for a variant", e))?;
    Ok(listener
        .local_addr()
        .map_err(|e| Error::io("cannot find a free port for a variant", e))?
        .port())
}

/// Variant `i`: the base with `changes`, checked as a recipe file would be, and planned.
async fn variant(
    ctx: &SwitchContext<'_>,
    base: &LoadedRecipe,
    i: usize,
    changes: &[Change],
    opts: &Options<'_>,
) -> Result<Variant> {
    let mut recipe = base.recipe.clone();
    recipe.name = format!("{}.try{i}", base.recipe.name);
    recipe.server.port = free_port(&recipe.server.host)?;
    recipe.fallback = None;
    recipe.rollout = None;
    vary::apply(&mut recipe, changes).map_err(|e| Error::Try(TryProblem::Change(e)))?;
    let loaded = checked(base, recipe)?;
    let plan = plan_of(ctx, base, &loaded).await?;
    let others = plan.stops_others();
    let memory = plan.start.memory.describe();
    if !others.is_empty() {
        let others = others.iter().map(|s| s.to_string()).collect();
        return Err(Error::Try(TryProblem::NeedsOthers { others, memory }));
    }
    let swaps = plan.stops_production().is_some();
    if swaps && !opts.allow_swap {
        let production = plan.stops_production().unwrap_or_default().to_string();
        return Err(Error::Try(TryProblem::BesideProduction {
            production,
            memory,
        }));
    }
    Ok(Variant {
        index: i,
        name: loaded.recipe.name.clone(),
        label: label(changes),
        request: vary::request_fields(changes),
        command: plan.start.command.clone(),
        swaps,
        recipe: loaded.recipe,
        measured: None,
    })
}

/// `recipe` through the checks a recipe file gets (written out and read back).
fn checked(base: &LoadedRecipe, recipe: Recipe) -> Result<LoadedRecipe> {
    let yaml = serde_yaml_ng::to_string(&recipe)
        .map_err(|e| Error::Try(TryProblem::Serialize(e.to_string())))?;
    let path = base.path.with_file_name(format!("{}.yaml", recipe.name));
    crate::recipe::parse_recipe(&path, yaml.as_bytes())
}

/// The variant's start, planned beside what runs now.
async fn plan_of(
    ctx: &SwitchContext<'_>,
    base: &LoadedRecipe,
    loaded: &LoadedRecipe,
) -> Result<Plan> {
    // The base's pin runs the variant when its image is the base's; another image runs as
    // its tag resolves now (its digest recorded with what it measured).
    let same_image = loaded.recipe.image == base.recipe.image;
    let pin = (ctx.lock.images.get(&base.recipe.name)).filter(|_| same_image);
    let lock = ctx.lock.with_image(&loaded.recipe.name, pin);
    let opts = StartOptions {
        lock: &lock,
        allow_unpinned: !same_image,
        replacing: None,
    };
    Plan::new(ctx.shared, loaded, &opts).await
}

/// Runs every variant not measured yet, in order, saving the try after each; Ctrl-C stops
/// the variant running and brings production back as it was.
pub(crate) async fn run(
    ctx: &SwitchContext<'_>,
    mut trial: Trial,
    opts: &Options<'_>,
) -> Result<Trial> {
    let _lock = ctx.state().lock(&format!("try {}", trial.recipe))?;
    let base = ctx.recipes.get(&trial.recipe)?;
    trial.save(ctx.state())?;
    let touched = Arc::new(Mutex::new(Touched::default()));
    opts.progress.step(&format!(
        "try {} of {}: {} variants (`sparkctl try --resume {}` goes on after an interruption)",
        trial.id,
        trial.recipe,
        trial.variants.len(),
        trial.id
    ));
    for i in 0..trial.variants.len() {
        if trial.variants[i].measured.is_some() {
            continue;
        }
        let v = trial.variants[i].clone();
        opts.progress.step(&format!(
            "variant {i}/{}: {} ({})",
            trial.variants.len() - 1,
            v.name,
            v.label
        ));
        let measuring = measure(ctx, base, &v, opts, &touched);
        let measured = tokio::select! {
            m = measuring => m,
            _ = switch::interrupted() => {
                let t = std::mem::take(&mut *touched.lock().expect("touched"));
                for note in switch::restore(ctx, t, &v.name, opts.progress).await {
                    opts.progress.step(&note);
                }
                trial.save(ctx.state())?;
                return Err(Error::Interrupted(crate::error::Interruption::Signal));
            }
        };
        trial.variants[i].measured = Some(measured);
        trial.save(ctx.state())?;
    }
    pair_with_base(&mut trial);
    trial.finished_at = Some(crate::units::now_utc());
    trial.save(ctx.state())?;
    report::write(&trial, ctx.state())?;
    Ok(trial)
}

/// Each variant's evaluation answers paired item by item with variant 0's: the paired test
/// says whether it answers worse than the base, where accuracies alone cannot.
fn pair_with_base(trial: &mut Trial) {
    let answers = |v: &Variant| -> Option<crate::eval::Report> {
        let path = v.measured.as_ref()?.bench.as_ref()?;
        let r: crate::bench::result::BenchResult =
            serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
        Some(r.eval?.candidate().clone())
    };
    let Some(base) = trial.variants.first().and_then(answers) else {
        return;
    };
    for v in trial.variants.iter_mut().skip(1) {
        let Some(mine) = answers(v) else { continue };
        let paired = crate::eval::paired::pair(&mine, &base);
        if let Some(m) = v.measured.as_mut() {
            m.eval_vs_base = Some(paired.named(&format!("variant {}", v.index), "variant 0"));
        }
    }
}

/// One variant: planned again (memory changes between variants), room made if it swaps,
/// started, benchmarked, its output kept, stopped, production back. A variant that fails is
/// a row with its error, never the end of the try.
async fn measure(
    ctx: &SwitchContext<'_>,
    base: &LoadedRecipe,
    v: &Variant,
    opts: &Options<'_>,
    touched: &Arc<Mutex<Touched>>,
) -> Measured {
    let mut record = RunRecord::new(Command::Try, &v.name);
    let mut m = Measured {
        run_id: record.run_id.clone(),
        ..Measured::default()
    };
    let outcome = measure_into(ctx, base, v, opts, touched, &mut record, &mut m).await;
    if let Err(e) = outcome {
        opts.progress.step(&format!("  {}: {e}", v.name));
        m.failed = Some(e.to_string());
    }
    let t = std::mem::take(&mut *touched.lock().expect("touched"));
    if t.held || t.started.is_some() {
        for note in switch::restore(ctx, t, &v.name, opts.progress).await {
            opts.progress.step(&format!("  {note}"));
        }
    }
    record.outcome = match (&m.failed, m.verdict) {
        (Some(_), _) => Outcome::Failed,
        (_, Some(Verdict::Pass)) => Outcome::Passed,
        (_, Some(Verdict::Fail)) => Outcome::Rejected,
        _ => Outcome::Inconclusive,
    };
    record.error = m.failed.clone();
    record.finished_at = crate::units::now_utc();
    let _ = record.save(ctx.state());
    m
}

async fn measure_into(
    ctx: &SwitchContext<'_>,
    base: &LoadedRecipe,
    v: &Variant,
    opts: &Options<'_>,
    touched: &Arc<Mutex<Touched>>,
    record: &mut RunRecord,
    m: &mut Measured,
) -> Result<()> {
    // Checked again: a resumed try reads its variants back from the kept file.
    let loaded = checked(base, v.recipe.clone())?;
    let mut plan = switch::timed(record, PhaseName::Plan, plan_of(ctx, base, &loaded)).await?;
    if plan.stops_production().is_some() {
        let hold = Hold::Ask(&ctx.door, ctx.door_config.drain);
        switch::make_room(ctx.rt(), &mut plan, hold, Some(&**touched), opts.progress).await?;
    }
    plan.start.run_id = record.run_id.clone();
    touched.lock().expect("touched").run_id = plan.start.run_id.clone();
    opts.progress.step(&format!("  starting {}", v.name));
    let started = start(ctx.rt(), &plan.start, None, |_| {});
    let report = switch::timed(record, PhaseName::Start, started).await?;
    let d = report.deployment;
    touched.lock().expect("touched").started = Some(d.clone());
    record.deployment = Some(d.id.clone());
    if d.runtime == crate::recipe::Runtime::Docker {
        (record.image_digest, m.image_digest) =
            (Some(d.artifact.clone()), Some(d.artifact.clone()));
    }
    m.start_s = Some(report.ready_after_ms / 1e3);
    m.held_gb = (report.memory_observed.best.as_ref()).map(|b| b.bytes as f64 / 1e9);
    let measured = bench(ctx, base, v, &d, opts, record).await;
    if let Ok(path) = ctx.state().run_file(&record.run_id, RunFile::CandidateLog) {
        if let Ok(mut f) = std::fs::File::create(&path) {
            let view = crate::runtime::LogView::default();
            if ctx.rt().logs(&d, view, &mut f).await.is_ok() {
                m.logs = Some(path.clone());
                record.logs = Some(path);
            }
        }
    }
    ctx.rt().stop(&d, STOP_GRACE).await?;
    touched.lock().expect("touched").started = None;
    let result = measured?;
    let path = ctx.state().run_file(&record.run_id, RunFile::Bench)?;
    crate::state::write_json(&path, &result)?;
    use crate::bench::metric::Metric;
    let interval = |metric| result.confidence.get(&metric).map(|i| (i.low, i.high));
    *m = Measured {
        bench: Some(path.clone()),
        ttft_p50_ms: result.ttft_p50_ms,
        decode_tps_p50: result.decode_tps_p50,
        ttft_interval: interval(Metric::Ttft),
        decode_interval: interval(Metric::Decode),
        gates: result.gates.clone(),
        verdict: Some(result.verdict),
        eval_accuracy_pct: (result.eval.as_ref()).map(|e| e.candidate().accuracy_pct()),
        ..std::mem::take(m)
    };
    (record.bench, record.ttft_p50_ms) = (Some(path), result.ttft_p50_ms);
    (record.decode_tps_p50, record.gates) = (result.decode_tps_p50, result.gates);
    opts.progress.step(&format!(
        "  {}: {} (TTFT p50 {}, decode p50 {})",
        v.name,
        result.verdict,
        compare::ms(m.ttft_p50_ms),
        compare::tps(m.decode_tps_p50)
    ));
    Ok(())
}

/// The base's benchmark (suite, gates, evaluation sets) against variant `v`'s server `d`,
/// `repeat` times, with `v`'s request fields.
async fn bench(
    ctx: &SwitchContext<'_>,
    base: &LoadedRecipe,
    v: &Variant,
    d: &crate::runtime::Deployment,
    opts: &Options<'_>,
    record: &mut RunRecord,
) -> Result<crate::bench::result::BenchResult> {
    let section = crate::deploy::recipe_bench(base, &ctx.recipes.dir)?;
    let target = crate::deploy::target_of(&v.recipe, d, ctx.settings().bandwidth_gbps).await;
    let over = crate::bench::Overrides {
        suite: opts.suite.clone(),
        options: crate::bench::Options {
            runs: opts.runs,
            warmup: opts.warmup,
            repeat: Some(opts.repeat),
            ..Default::default()
        },
        ..Default::default()
    };
    let suites = ctx.recipes.dir.join("suites");
    let mut plan = crate::bench::Plan::new(target, section, over, &suites, ctx.state())?;
    plan.set_request_fields(&v.request);
    let baseline = crate::bench::Baseline::missing(
        "a try compares its variants with variant 0, not production",
    );
    plan.leave_out_relative_gates(&baseline);
    opts.progress.step(&format!("  benchmarking {}", v.name));
    switch::timed(record, PhaseName::Bench, plan.run(&baseline, |_, _, _| {})).await
}
