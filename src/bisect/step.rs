//! Measuring one digest: the image here (pulled by digest when it is not), the recipe
//! started on that digest under its own name and port (`NAME-bisect`, never promoted), the
//! benchmark in rounds until the verdict is decided or the rounds run out, its output kept,
//! then stopped. Each measurement is a run record (`history`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::judge::{Judgement, Verdict};
use super::record::{round_file, Bisect, Measurement, Role, Round};
use crate::bench::result::BenchResult;
use crate::bench::suite::Suite;
use crate::deploy::switch::{self, timed, Hold, Plan, SwitchContext, Touched};
use crate::deploy::{start, StartOptions, STOP_GRACE};
use crate::error::{Error, Result};
use crate::history::{BisectStep, Command, Outcome, PhaseName, RunRecord};
use crate::images::history::History;
use crate::lock::{Lock, Pin};
use crate::progress::Progress;
use crate::recipe::LoadedRecipe;
use crate::runtime::{Deployment, LogView};
use crate::state::RunFile;

/// The name a bisect's candidate runs under: never the recipe's own, so production of the
/// same recipe keeps serving and `status` says what it is.
pub(crate) fn candidate_name(recipe: &str) -> String {
    format!("{recipe}-bisect")
}

/// What every measurement shares.
pub(crate) struct Env<'a, 'b> {
    pub(in crate::bisect) ctx: &'a SwitchContext<'b>,
    pub(in crate::bisect) loaded: &'a LoadedRecipe,
    pub(in crate::bisect) history: &'a History,
    pub(in crate::bisect) suite: &'a Suite,
    pub(in crate::bisect) progress: &'a dyn Progress,
    /// Asked before production is stopped for a step; false refuses.
    pub(in crate::bisect) confirm: &'a dyn Fn(&str) -> bool,
    /// What the step in progress changed, for the way back after Ctrl-C.
    pub(in crate::bisect) touched: Arc<Mutex<Touched>>,
    /// The step in progress's run record, saved as interrupted after Ctrl-C.
    pub(in crate::bisect) current: Arc<Mutex<Option<RunRecord>>>,
    /// Production is being brought back after a step: Ctrl-C lets that finish, since a
    /// restore cut short leaves a production started that nothing routes to or owns.
    pub(in crate::bisect) restoring: Arc<AtomicBool>,
}

/// Marks a restore under way for as long as it lives.
struct Restoring<'r>(&'r AtomicBool);

impl<'r> Restoring<'r> {
    fn begin(flag: &'r AtomicBool) -> Restoring<'r> {
        flag.store(true, Ordering::SeqCst);
        Restoring(flag)
    }
}

impl Drop for Restoring<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// Judges a measurement after each round (with that round's full result).
pub(crate) type JudgeFn<'j> = &'j dyn Fn(&Bisect, &Measurement, &BenchResult) -> Judgement;

fn label(m: &Measurement) -> String {
    match m.role {
        Role::GoodEnd => "good end".into(),
        Role::BadEnd => "bad end".into(),
        Role::Step => format!("step {}", m.step),
    }
}

/// Measures the digest at `index` until it is decided or `rounds` more rounds are spent;
/// the measurement is in `b` (saved) afterwards. Errors are what stops the bisect itself;
/// a digest that cannot be pulled or started is recorded as skipped.
pub(crate) async fn measure(
    env: &Env<'_, '_>,
    b: &mut Bisect,
    index: usize,
    role: Role,
    judge: JudgeFn<'_>,
) -> Result<()> {
    let began = Instant::now();
    let digest = b.digests[index].digest.clone();
    let state = env.ctx.state();
    let step = match role {
        Role::Step => b
            .measurements
            .get(&digest)
            .map_or(b.steps() + 1, |m| m.step),
        _ => 0,
    };
    let mut m = b.measurements.remove(&digest).unwrap_or(Measurement {
        role,
        step,
        rounds: Vec::new(),
        judgement: None,
        skipped: None,
        seconds: 0.0,
    });
    let mut record = RunRecord::new(Command::Bisect, &b.recipe);
    record.image = b.builds.is_none().then(|| b.reference.clone());
    record.model_fingerprint = b.model_fingerprint.clone();
    record.bisect = Some(BisectStep {
        bisect_id: b.id.clone(),
        digest: digest.clone(),
        role: label(&m),
        judged_on: b.criterion.describe(b.chosen),
        ..Default::default()
    });
    *env.current.lock().expect("current") = Some(record.clone());
    let built = b.digests[index]
        .created
        .as_deref()
        .map_or(String::new(), |c| {
            format!(", built {}", &c[..c.len().min(19)])
        });
    env.progress.step(&format!(
        "{}: {}{built}",
        label(&m),
        crate::units::short_digest(&digest)
    ));
    let outcome = run(env, b, index, &mut m, &mut record, judge).await;
    m.seconds += began.elapsed().as_secs_f64();
    let step_note = record.bisect.as_mut().expect("set above");
    step_note.rounds = m.rounds.len();
    if let Some(j) = &m.judgement {
        step_note.interval = j.interval;
        step_note.detail = j.detail.clone();
    }
    record.outcome = match (&outcome, &m.skipped, m.verdict()) {
        (Err(e), _, _) if e.is_interrupted() => Outcome::Interrupted,
        (Err(_), _, _) => Outcome::Failed,
        (_, Some(why), _) => {
            step_note.detail = why.clone();
            Outcome::Skipped
        }
        (_, _, Some(Verdict::Good)) => Outcome::Good,
        (_, _, Some(Verdict::Bad)) => Outcome::Bad,
        _ => Outcome::Inconclusive,
    };
    if let Err(e) = &outcome {
        record.error = Some(e.to_string());
    }
    record.finished_at = crate::units::now_utc();
    b.measurements.insert(digest, m);
    b.save(state)?;
    // Interrupted: the caller records it once it has put things back.
    if !outcome.as_ref().is_err_and(Error::is_interrupted) {
        *env.current.lock().expect("current") = None;
        record.save(state)?;
    }
    outcome
}

/// The body of `measure`: every phase, the rounds, and the way back.
async fn run(
    env: &Env<'_, '_>,
    b: &mut Bisect,
    index: usize,
    m: &mut Measurement,
    record: &mut RunRecord,
    judge: JudgeFn<'_>,
) -> Result<()> {
    let digest = b.digests[index].digest.clone();
    let build = b.digests[index].path.clone();
    let mut derived = derived(env.loaded)?;
    // A build runs as the recipe's binary; an image digest through a lock that pins it.
    let lock = match &build {
        Some(path) if path.is_file() => {
            derived.recipe.binary = Some(path.display().to_string());
            Lock::default()
        }
        Some(path) => {
            m.skipped = Some(format!("not measured: {} is gone", path.display()));
            env.progress
                .step(&format!("skipped: {} is gone", path.display()));
            return Ok(());
        }
        None => {
            if let Err(e) = ensure_image(env, &digest).await {
                m.skipped = Some(format!("not measured: {e}"));
                env.progress.step(&format!("skipped: {e}"));
                return Ok(());
            }
            lock_for(&derived, env.history, &digest)
        }
    };
    let opts = StartOptions {
        lock: &lock,
        allow_unpinned: false,
        replacing: None,
    };
    let mut plan = timed(
        record,
        PhaseName::Plan,
        Plan::new(env.ctx.shared, &derived, &opts),
    )
    .await?;
    if plan.start.model_fingerprint != b.model_fingerprint {
        return Err(Error::Failed(format!(
            "{}'s model changed during the bisect (fingerprint {} now, {} when it began): the \
             digests would not be compared on one model; restore it, or start over with --fresh",
            b.recipe,
            plan.start.model_fingerprint.as_deref().unwrap_or("none"),
            b.model_fingerprint.as_deref().unwrap_or("none")
        )));
    }
    let swapped = make_room(env, b, &mut plan).await?;
    // Ctrl-C during the start (before it returns the deployment): the way back finds the
    // candidate by this run id.
    env.touched.lock().expect("touched").run_id = plan.start.run_id.clone();
    let started = timed(
        record,
        PhaseName::Start,
        start(env.ctx.rt(), &plan.start, None, |_| {}),
    )
    .await;
    let d = match started {
        Ok(report) => report.deployment,
        Err(e) if e.is_interrupted() => return Err(e),
        Err(e) => {
            put_back(env, swapped).await;
            m.skipped = Some(format!("did not start: {e}"));
            env.progress
                .step(&format!("skipped: it did not start ({e})"));
            return Ok(());
        }
    };
    env.touched.lock().expect("touched").started = Some(d.clone());
    record.deployment = Some(d.id.clone());
    if d.runtime == crate::recipe::Runtime::Docker {
        record.image_digest = Some(d.artifact.clone());
    }
    let measured = rounds(env, b, index, m, record, &d, judge).await;
    keep_logs(env, record, &d).await;
    env.ctx.rt().stop(&d, STOP_GRACE).await?;
    env.touched.lock().expect("touched").started = None;
    put_back(env, swapped).await;
    measured
}

/// Benchmark rounds until the verdict is good or bad, or `plan.rounds` rounds were spent.
async fn rounds(
    env: &Env<'_, '_>,
    b: &mut Bisect,
    index: usize,
    m: &mut Measurement,
    record: &mut RunRecord,
    d: &Deployment,
    judge: JudgeFn<'_>,
) -> Result<()> {
    let digest = b.digests[index].digest.clone();
    for _ in 0..b.plan.rounds.max(1) {
        let began = Instant::now();
        let n = m.rounds.len() + 1;
        let path = round_file(&b.rounds_dir(env.ctx.state())?, index, &digest, n);
        let result = timed(record, PhaseName::Bench, bench(env, b, d)).await;
        let result = match result {
            Ok(r) => r,
            Err(e) if e.is_interrupted() => return Err(e),
            Err(e) => {
                m.skipped = Some(format!("its benchmark failed: {e}"));
                env.progress
                    .step(&format!("skipped: its benchmark failed ({e})"));
                return Ok(());
            }
        };
        crate::state::write_json(&path, &result)?;
        m.rounds.push(Round {
            run_id: record.run_id.clone(),
            bench: path.clone(),
            confidence: result.confidence.clone(),
            seconds: began.elapsed().as_secs_f64(),
        });
        let j = judge(b, m, &result);
        record.bench = Some(path);
        record.ttft_p50_ms = result.ttft_p50_ms;
        record.decode_tps_p50 = result.decode_tps_p50;
        env.progress.step(&format!(
            "  round {n} ({} runs of the suite, {:.1} s): {} — {}",
            b.plan.repeat,
            began.elapsed().as_secs_f64(),
            verdict_word(j.verdict),
            j.detail
        ));
        m.judgement = Some(j);
        *env.current.lock().expect("current") = Some(record.clone());
        // Saved after every round: a kill loses at most the round in progress.
        b.measurements.insert(digest.clone(), m.clone());
        b.save(env.ctx.state())?;
        b.measurements.remove(&digest);
        if m.decided() {
            break;
        }
    }
    Ok(())
}

fn verdict_word(v: Verdict) -> &'static str {
    match v {
        Verdict::Good => "good",
        Verdict::Bad => "bad",
        Verdict::Inconclusive => "inconclusive",
    }
}

/// One round: the suite `repeat` times against the candidate.
async fn bench(env: &Env<'_, '_>, b: &Bisect, d: &Deployment) -> Result<BenchResult> {
    let mut target =
        crate::deploy::target_of(&env.loaded.recipe, d, env.ctx.settings().bandwidth_gbps).await;
    target.recipe_hash = Some(env.loaded.recipe.hash());
    let gates = match b.criterion.gate() {
        Some(g) => crate::bench::gates::Gates::from([(g.name.clone(), g)]),
        None => Default::default(),
    };
    let opts = crate::bench::Options {
        warmup: b.plan.warmup,
        runs: b.plan.runs,
        repeat: Some(b.plan.repeat),
        gates,
        eval: b
            .criterion
            .eval_plan(&env.loaded.recipe, &env.ctx.recipes.dir)?,
        ..Default::default()
    };
    let no_baseline = crate::bench::Baseline::missing(
        "a bisect judges digests against each other, not production",
    );
    crate::bench::run(env.suite, target, &opts, &no_baseline, |_, _, _| {}).await
}

/// The digest's image on this machine: pulled by digest (and remembered) when it is not.
async fn ensure_image(env: &Env<'_, '_>, digest: &str) -> Result<()> {
    let docker = env.ctx.rt().docker()?.client();
    let reference = env.history.run_reference(digest);
    if crate::images::local(docker, &reference).await?.is_some() {
        return Ok(());
    }
    env.progress.step(&format!("pulling {reference}"));
    crate::images::pull_digest(
        docker,
        env.ctx.state(),
        env.history,
        digest,
        |_, _, _, _| {},
    )
    .await
}

/// The recipe as the candidate runs it: its own name and a free port, no fallback.
fn derived(loaded: &LoadedRecipe) -> Result<LoadedRecipe> {
    let mut recipe = loaded.recipe.clone();
    recipe.name = candidate_name(&loaded.recipe.name);
    let listener = std::net::TcpListener::bind((recipe.server.host.as_str(), 0))
        .or_else(|_| std::net::TcpListener::bind(("127.0.0.1", 0)))
        .map_err(|e| Error::io("cannot find a free port for the candidate", e))?;
    recipe.server.port = listener
        .local_addr()
        .map_err(|e| Error::io("cannot find a free port for the candidate", e))?
        .port();
    recipe.fallback = None;
    Ok(LoadedRecipe {
        recipe,
        path: loaded.path.clone(),
        source: loaded.source.clone(),
    })
}

/// A lock that pins the candidate to `digest` (the start runs what the lock pins).
fn lock_for(derived: &LoadedRecipe, h: &History, digest: &str) -> Lock {
    let e = h.entries.iter().find(|e| e.digest == digest);
    let mut lock = Lock::default();
    lock.images.insert(
        derived.recipe.name.clone(),
        Pin {
            reference: h.reference.clone(),
            digest: digest.to_string(),
            source: if h.is_registry_digest(digest) {
                crate::lock::Source::Registry
            } else {
                crate::lock::Source::Local
            },
            media_type: None,
            platform: None,
            image_id: e.and_then(|e| e.image_id.clone()),
            created: e.and_then(|e| e.created.clone()),
            pinned_at: crate::units::now_utc(),
            history: Vec::new(),
        },
    );
    lock
}

/// Room for the candidate, by the switch plan. Nothing but production is ever stopped, and
/// production only with `--allow-swap` (or a yes on a terminal): the front door holds its
/// requests, and it serves again after the step. Whether production was stopped.
async fn make_room(env: &Env<'_, '_>, b: &Bisect, plan: &mut Plan) -> Result<bool> {
    let mem = &plan.start.memory;
    let others = plan.stops_others();
    if let Some(first) = others.first() {
        return Err(Error::Failed(format!(
            "the candidate needs memory that {} hold(s): {}; stop them (`sparkctl down {first}`) \
             and `sparkctl bisect {} --resume` (a bisect stops nothing but production, and that \
             only with --allow-swap)",
            others.join(", "),
            mem.describe(),
            b.recipe
        )));
    }
    let Some(prod) = plan.stops_production().map(String::from) else {
        return Ok(false);
    };
    let question = format!(
        "this step needs production {prod}'s memory; hold production at the front door and stop \
         {prod} while it runs?"
    );
    if !(b.plan.allow_swap || (env.confirm)(&question)) {
        return Err(Error::Usage(format!(
            "the candidate needs production {prod}'s memory ({}); nothing was stopped. \
             `sparkctl bisect {} --resume --allow-swap` holds production's requests at the front \
             door and stops {prod} while each such step runs (it serves again between steps)",
            mem.describe(),
            b.recipe
        )));
    }
    env.progress.step(&format!(
        "holding production at the front door; stopping {prod} for this step"
    ));
    let hold = Hold::Ask(&env.ctx.door, env.ctx.door_config.drain);
    switch::make_room(env.ctx.rt(), plan, hold, Some(&*env.touched), env.progress).await?;
    Ok(true)
}

/// Production back after a step that stopped it.
async fn put_back(env: &Env<'_, '_>, swapped: bool) {
    if !swapped {
        return;
    }
    let _restoring = Restoring::begin(&env.restoring);
    let t = std::mem::take(&mut *env.touched.lock().expect("touched"));
    let name = candidate_name(&env.loaded.recipe.name);
    for note in switch::restore(env.ctx, t, &name, env.progress).await {
        env.progress.step(&note);
    }
}

/// The candidate's output, kept with its run before it is stopped.
async fn keep_logs(env: &Env<'_, '_>, record: &mut RunRecord, d: &Deployment) {
    let Ok(path) = env
        .ctx
        .state()
        .run_file(&record.run_id, RunFile::CandidateLog)
    else {
        return;
    };
    if let Ok(mut f) = std::fs::File::create(&path) {
        if env
            .ctx
            .rt()
            .logs(d, LogView::default(), &mut f)
            .await
            .is_ok()
        {
            record.logs = Some(path);
        }
    }
}
