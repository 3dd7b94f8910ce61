//! `sparkctl bisect NAME --good REF --bad REF`: which digest of a recipe's image brought a
//! regression. The candidates are the digests between the two ends in the recipe's image
//! history; the ends are measured first (the yardstick), then each step starts the recipe
//! on one digest beside production (its own name and port, never promoted), benchmarks it
//! in rounds of repeated runs until its 95% interval decides good or bad, and halves the
//! range. Everything is recorded as it goes: Ctrl-C puts things back, `--resume` goes on.

mod judge;
pub mod record;
mod search;
mod step;

use std::sync::{Arc, Mutex};

pub use judge::{parse_metric, Criterion, Judgement, Verdict};
pub use record::{Answer, Bisect, Measurement, Plan, Role, Status};
pub use search::steps_for;
pub use step::candidate_name;

use crate::bench::result::BenchResult;
use crate::deploy::switch::{self, Ctx, Touched};
use crate::error::{Error, Result};
use crate::history::{Outcome, RunRecord};
use crate::images::history::{self as image_history, EventKind, History};
use crate::recipe::LoadedRecipe;
use search::Next;
use step::Env;

/// How a bisect runs, as asked.
pub struct Options<'a> {
    pub good: Option<String>,
    pub bad: Option<String>,
    pub criterion: Criterion,
    pub suite: Option<String>,
    pub runs: Option<usize>,
    pub warmup: Option<usize>,
    /// Runs of the suite per round (at least 2: an interval needs two).
    pub repeat: usize,
    /// Rounds a digest gets (per session) before it is left inconclusive.
    pub rounds: usize,
    pub allow_swap: bool,
    pub resume: bool,
    /// Abandon an unfinished bisect of the recipe and start over.
    pub fresh: bool,
    pub dry_run: bool,
    pub confirm: &'a dyn Fn(&str) -> bool,
    pub say: &'a dyn Fn(&str),
}

/// What a bisect found (or planned, for a dry run).
pub struct Report {
    pub bisect: Bisect,
    pub history: History,
    /// What changed between the last good and the first bad digest, or why it is not known.
    pub diff: Option<std::result::Result<crate::images::ImageDiff, String>>,
}

/// The image a recipe's digests are of.
fn image_of(loaded: &LoadedRecipe) -> Result<String> {
    let r = &loaded.recipe;
    if r.nodes.is_some() {
        return Err(Error::Usage(format!(
            "{}: a bisect starts one server per step; a multi-node recipe is not bisected",
            r.name
        )));
    }
    match (&r.image, r.runtime()) {
        (Some(image), crate::recipe::Runtime::Docker) => Ok(image.clone()),
        _ => Err(Error::Usage(format!(
            "{}: a bisect walks the digests of a container image; this recipe runs a host \
             process ({})",
            r.name,
            loaded.path.display()
        ))),
    }
}

pub async fn bisect(ctx: &Ctx<'_>, name: &str, opts: &Options<'_>) -> Result<Report> {
    let loaded = ctx.recipes.get(name)?;
    let reference = image_of(loaded)?;
    let docker = ctx.rt().docker()?.client();
    let state = ctx.state();
    let runs = crate::history::image_uses(state)?;
    let history = image_history::of(docker, state, &ctx.lock, (name, &reference), &runs).await?;
    if opts.dry_run {
        let bisect = begin(ctx, loaded, &history, opts).await?;
        return Ok(Report {
            bisect,
            history,
            diff: None,
        });
    }
    let _lock = lock_waiting(state, &format!("bisect {name}"), opts.say).await?;
    let mut b = match (opts.resume, record::unfinished(state, name)?) {
        (true, Some(b)) => resumed(b, opts),
        (true, None) => {
            return Err(Error::Usage(format!(
                "no unfinished bisect of {name} to resume; start one with --good REF --bad REF"
            )))
        }
        (false, Some(old)) if !opts.fresh => {
            return Err(Error::Usage(format!(
                "a bisect of {name} is unfinished ({} since {}, {} measurement(s) recorded); \
                 `sparkctl bisect {name} --resume` goes on with it, --fresh starts over",
                status_word(old.status),
                old.started_at,
                old.measurements.len()
            )))
        }
        (false, old) => {
            if let Some(mut old) = old {
                old.status = Status::Abandoned;
                old.save(state)?;
            }
            begin(ctx, loaded, &history, opts).await?
        }
    };
    b.status = Status::Running;
    b.why_stopped = None;
    b.save(state)?;
    clean_leftover(ctx, name, opts.say).await?;
    let suite = crate::bench::suite::Suite::load(&b.plan.suite, &ctx.recipes.dir.join("suites"))?;
    let env = Env {
        ctx,
        loaded,
        history: &history,
        suite: &suite,
        say: opts.say,
        confirm: opts.confirm,
        touched: Arc::new(Mutex::new(Touched::default())),
        current: Arc::new(Mutex::new(None)),
    };
    let outcome = tokio::select! {
        r = drive(&env, &mut b) => r,
        _ = switch::interrupted() => Err(Error::Interrupted("interrupted".into())),
    };
    match outcome {
        Ok(()) => finish(ctx, b, history).await,
        Err(e) => Err(stopped(&env, b, e).await),
    }
}

/// The state lock, waited for a while: after a bisect was killed while production was
/// stopped for its step, the front door's watch takes the lock again and again trying to
/// bring production back (which the leftover candidate's memory may prevent); the next
/// bisect gets in between, stops the leftover and brings production back itself.
async fn lock_waiting(
    state: &crate::state::StateDir,
    what: &str,
    say: &dyn Fn(&str),
) -> Result<crate::state::StateLock> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut said = false;
    loop {
        match state.lock(what) {
            Ok(lock) => return Ok(lock),
            // Only a lock another process holds is waited for (that is its message).
            Err(e)
                if e.to_string().starts_with("another sparkctl")
                    && std::time::Instant::now() < deadline =>
            {
                if !said {
                    say(&format!("waiting (up to 60 s): {e}"));
                    said = true;
                }
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Carries on: the plan stays as it began; only the rounds and --allow-swap may change.
fn resumed(mut b: Bisect, opts: &Options<'_>) -> Bisect {
    b.plan.rounds = opts.rounds.max(1);
    b.plan.allow_swap |= opts.allow_swap;
    (opts.say)(&format!(
        "resuming bisect {} of {} ({} measurement(s) recorded, {} step(s))",
        b.id,
        b.recipe,
        b.measurements.len(),
        b.steps()
    ));
    b
}

fn status_word(s: Status) -> &'static str {
    match s {
        Status::Running => "running or killed",
        Status::Interrupted => "interrupted",
        Status::Stopped => "stopped",
        Status::Abandoned => "abandoned",
        Status::Done => "done",
    }
}

/// A new bisect over the digests from `--good` to `--bad`.
async fn begin(
    ctx: &Ctx<'_>,
    loaded: &LoadedRecipe,
    h: &History,
    opts: &Options<'_>,
) -> Result<Bisect> {
    let name = &loaded.recipe.name;
    let need = |r: &Option<String>, which: &str| {
        r.clone().ok_or_else(|| {
            Error::Usage(format!(
                "--{which} REF is needed (a digest, a run id or a date); `sparkctl images history \
                 {name}` lists the digests"
            ))
        })
    };
    let (good, bad) = (need(&opts.good, "good")?, need(&opts.bad, "bad")?);
    let (gi, bi) = (search::resolve(h, &good)?, search::resolve(h, &bad)?);
    let short = |i: usize| crate::units::short_digest(&h.entries[i].digest);
    if gi >= bi {
        return Err(Error::Usage(format!(
            "--good {good} ({}) is {} --bad {bad} ({}) in {name}'s image history; a bisect looks \
             for the first bad digest after a good one",
            short(gi),
            if gi == bi {
                "the same digest as"
            } else {
                "newer than"
            },
            short(bi)
        )));
    }
    if opts.repeat < 2 {
        return Err(Error::Usage(
            "--repeat must be at least 2: a round's interval needs two runs".into(),
        ));
    }
    let suite = opts.suite.clone().unwrap_or_else(|| {
        loaded
            .recipe
            .bench
            .as_ref()
            .map_or(crate::bench::suite::DEFAULT_SUITE.into(), |b| {
                b.suite.clone()
            })
    });
    let model_fingerprint = match &loaded.recipe.model {
        Some(m) => {
            let path = crate::recipe::expand_home(&m.path);
            let fp =
                crate::patch::fingerprint_in_background(std::path::Path::new(&path), ctx.state());
            Some(fp.await?.digest)
        }
        None => None,
    };
    Ok(Bisect {
        id: crate::state::new_run_id(),
        recipe: name.clone(),
        reference: h.reference.clone(),
        started_at: crate::units::now_utc(),
        finished_at: None,
        status: Status::Running,
        why_stopped: None,
        criterion: opts.criterion.clone(),
        chosen: None,
        plan: Plan {
            suite,
            runs: opts.runs,
            warmup: opts.warmup,
            repeat: opts.repeat,
            rounds: opts.rounds.max(1),
            allow_swap: opts.allow_swap,
        },
        model_fingerprint,
        order: h.order,
        digests: h.entries[gi..=bi]
            .iter()
            .map(|e| record::Candidate {
                digest: e.digest.clone(),
                created: e.created.clone(),
                first_seen: e.first_seen.clone(),
            })
            .collect(),
        measurements: Default::default(),
        answer: None,
    })
}

/// A candidate a killed bisect left running is stopped before anything starts, and a
/// production it had stopped for its step (its requests held) is brought back.
async fn clean_leftover(ctx: &Ctx<'_>, name: &str, say: &dyn Fn(&str)) -> Result<()> {
    let candidate = candidate_name(name);
    let left = ctx
        .rt()
        .find(&candidate)
        .await?
        .filter(crate::runtime::Deployment::running);
    if let Some(d) = &left {
        say(&format!(
            "stopping {candidate} ({}), left running by an earlier bisect",
            crate::units::short_id(&d.id)
        ));
    }
    let t = Touched {
        started: left,
        ..Default::default()
    };
    for note in put_back(ctx, t, name, say).await {
        say(&note);
    }
    Ok(())
}

/// What a step changed, undone: its candidate stopped, production serving again. Without
/// a front door answering there is no production to bring back: only the candidate stops.
async fn put_back(ctx: &Ctx<'_>, mut t: Touched, name: &str, say: &dyn Fn(&str)) -> Vec<String> {
    let candidate = candidate_name(name);
    if ctx.door.status().await.is_ok() {
        return switch::restore(ctx, t, &candidate, say).await;
    }
    if t.started.is_none() {
        t.started = ctx.rt().find(&candidate).await.ok().flatten();
    }
    match t.started.filter(crate::runtime::Deployment::running) {
        Some(d) => match ctx.rt().stop(&d, crate::deploy::STOP_GRACE).await {
            Ok(()) => vec![format!(
                "stopped {candidate} (its logs: `sparkctl logs {candidate}`)"
            )],
            Err(e) => vec![format!("stopping {candidate} failed: {e}")],
        },
        None => Vec::new(),
    }
}

/// The ends, then the steps, until the answer or a stop.
async fn drive(env: &Env<'_, '_>, b: &mut Bisect) -> Result<()> {
    let judge = |b: &Bisect, m: &Measurement, r: &BenchResult| judge_one(b, m, r);
    let last = b.digests.len() - 1;
    for (index, role) in [(0, Role::GoodEnd), (last, Role::BadEnd)] {
        let digest = b.digests[index].digest.clone();
        if !b
            .measurements
            .get(&digest)
            .is_some_and(Measurement::decided)
        {
            step::measure(env, b, index, role, &judge).await?;
        }
        check_end(b, &digest, role)?;
    }
    if b.criterion == Criterion::Differs && b.chosen.is_none() {
        let (good, bad) = (
            b.measurements[b.good_end()].pooled(),
            b.measurements[b.bad_end()].pooled(),
        );
        let (m, pct) = judge::most_different(&good, &bad).expect("the bad end was told apart");
        b.chosen = Some(m);
        (env.say)(&format!(
            "the ends differ most in {} p50 ({pct:+.0}%): the steps are judged on it",
            m.name()
        ));
        b.save(env.ctx.state())?;
    }
    loop {
        match search::next(&b.known()) {
            Next::Done {
                last_good,
                first_bad,
            } => {
                b.answer = Some(Answer {
                    last_good: b.digests[last_good].digest.clone(),
                    first_bad: b.digests[first_bad].digest.clone(),
                    unmeasured: b.digests[last_good + 1..first_bad]
                        .iter()
                        .map(|c| c.digest.clone())
                        .collect(),
                });
                return Ok(());
            }
            Next::Measure(i) => {
                step::measure(env, b, i, Role::Step, &judge).await?;
                let m = &b.measurements[&b.digests[i].digest];
                if !m.decided() {
                    return Err(undecided(b, i, m));
                }
            }
        }
    }
}

/// A step left inconclusive at the bound: the bisect stops there, with the range so far.
fn undecided(b: &Bisect, i: usize, m: &Measurement) -> Error {
    let known = b.known();
    let good = known[..i]
        .iter()
        .rposition(|k| *k == search::Known::Good)
        .unwrap_or(0);
    let bad = i + known[i..]
        .iter()
        .position(|k| *k == search::Known::Bad)
        .unwrap_or(known.len() - 1 - i);
    let short = |j: usize| crate::units::short_digest(&b.digests[j].digest);
    Error::Failed(format!(
        "step {} ({}) is still inconclusive after {} round(s): {}. It is not guessed: the first \
         bad digest lies after {} and up to {}. `sparkctl bisect {} --resume` measures it again \
         (its runs so far are pooled with the new ones); a quieter machine or a larger --repeat \
         narrows each round",
        m.step,
        short(i),
        m.rounds.len(),
        m.judgement
            .as_ref()
            .map_or("no figure", |j| j.detail.as_str()),
        short(good),
        short(bad),
        b.recipe
    ))
}

/// Each end must be what it is called, beyond the noise; else there is nothing to bisect.
fn check_end(b: &Bisect, digest: &str, role: Role) -> Result<()> {
    let m = &b.measurements[digest];
    let what = if role == Role::GoodEnd { "good" } else { "bad" };
    let short = crate::units::short_digest(digest);
    if let Some(why) = &m.skipped {
        return Err(Error::Failed(format!(
            "the {what} end {short} could not be measured ({why}); choose another end"
        )));
    }
    let detail = m.judgement.as_ref().map_or("", |j| j.detail.as_str());
    match (role, m.verdict()) {
        (Role::GoodEnd, Some(Verdict::Good)) | (Role::BadEnd, Some(Verdict::Bad)) => Ok(()),
        (_, Some(Verdict::Inconclusive) | None) => Err(Error::Failed(format!(
            "the {what} end {short} could not be told apart after {} round(s): {detail}; nothing \
             to bisect on this figure (`--resume` measures it again; a larger --repeat or \
             another --metric may tell them apart)",
            m.rounds.len()
        ))),
        _ => Err(Error::Failed(format!(
            "the {what} end {short} is not {what} by this measure: {detail}; nothing to bisect"
        ))),
    }
}

/// The verdict on a measurement after a round.
fn judge_one(b: &Bisect, m: &Measurement, last: &BenchResult) -> Judgement {
    let pooled = m.pooled();
    if let Some(rule) = b.criterion.gate() {
        let mut now = last.measures();
        now.confidence = pooled;
        return judge::by_gate(&rule, &now);
    }
    let ends = |d: &str| b.measurements.get(d).map(Measurement::pooled);
    match m.role {
        Role::GoodEnd => {
            let metric = b.metric();
            let figure = metric.and_then(|x| pooled.get(&x));
            Judgement {
                verdict: Verdict::Good,
                value: figure.map(|i| i.mean),
                interval: figure.map(|i| (i.low, i.high)),
                detail: "the good end: the steps are judged against it".into(),
            }
        }
        Role::BadEnd => {
            let Some(good) = ends(b.good_end()) else {
                return Judgement::inconclusive("the good end is not measured".into());
            };
            let told = match b.criterion {
                Criterion::Metric(x) => good
                    .get(&x)
                    .zip(pooled.get(&x))
                    .and_then(|(g, c)| Some((x, judge::ends_differ(g, c)?.0))),
                _ => judge::most_different(&good, &pooled),
            };
            match told {
                Some((x, pct)) => Judgement {
                    verdict: Verdict::Bad,
                    value: pooled.get(&x).map(|i| i.mean),
                    interval: pooled.get(&x).map(|i| (i.low, i.high)),
                    detail: format!(
                        "{} p50 {pct:+.0}% from the good end's, beyond the noise",
                        x.name()
                    ),
                },
                None => Judgement::inconclusive(format!(
                    "{} does not differ from the good end's beyond the noise yet",
                    b.criterion.describe(b.chosen)
                )),
            }
        }
        Role::Step => {
            let metric = b.metric().expect("chosen once the ends were measured");
            let (good, bad) = (ends(b.good_end()), ends(b.bad_end()));
            let get = |p: &Option<std::collections::BTreeMap<_, _>>| {
                p.as_ref().and_then(|p| p.get(&metric).cloned())
            };
            match (pooled.get(&metric), get(&good), get(&bad)) {
                (Some(c), Some(g), Some(x)) => judge::against_ends(metric, c, &g, &x),
                _ => Judgement::inconclusive(format!(
                    "no {} p50 measured over two runs or more ({} failed request(s))",
                    metric.name(),
                    last.problems.len()
                )),
            }
        }
    }
}

/// The answer: the pair kept for good, what changed between them.
async fn finish(ctx: &Ctx<'_>, mut b: Bisect, history: History) -> Result<Report> {
    let state = ctx.state();
    let answer = b.answer.clone().expect("set when done");
    for (digest, what) in [
        (&answer.last_good, "last good"),
        (&answer.first_bad, "first bad"),
    ] {
        let note = format!("bisect {}: {what}", b.id);
        let mut event = image_history::Event::now(EventKind::Kept, digest, Some(note));
        if let Some(e) = history.entries.iter().find(|e| &e.digest == digest) {
            event.image_id = e.image_id.clone();
            event.created = e.created.clone();
        }
        image_history::record(state, &b.recipe, &event)?;
    }
    b.status = Status::Done;
    b.finished_at = Some(crate::units::now_utc());
    b.save(state)?;
    let docker = ctx.rt().docker()?.client();
    let (old, new) = (
        history.run_reference(&answer.last_good),
        history.run_reference(&answer.first_bad),
    );
    let diff = Some(
        crate::images::diff(docker, &old, &new)
            .await
            .map_err(|e| e.to_string()),
    );
    Ok(Report {
        bisect: b,
        history,
        diff,
    })
}

/// After an error or an interrupt: what the step changed is put back, the bisect is kept
/// as recorded (resumable) and the error says where it stands.
async fn stopped(env: &Env<'_, '_>, b: Bisect, e: Error) -> Error {
    let ctx = env.ctx;
    let state = ctx.state();
    let t = std::mem::take(&mut *env.touched.lock().expect("touched"));
    let notes = put_back(ctx, t, &b.recipe, env.say).await;
    // The file holds every finished round; the copy here may miss the step in progress.
    let mut b: Bisect = b
        .path(state)
        .and_then(|p| crate::state::read_json(&p))
        .unwrap_or(b);
    let interrupted = matches!(e, Error::Interrupted(_));
    b.status = if interrupted {
        Status::Interrupted
    } else {
        Status::Stopped
    };
    b.why_stopped = Some(e.to_string());
    let saved = b.save(state);
    let current: Option<RunRecord> = env.current.lock().expect("current").take();
    if let Some(mut r) = current {
        r.outcome = if interrupted {
            Outcome::Interrupted
        } else {
            Outcome::Failed
        };
        r.error = Some(e.to_string());
        r.finished_at = crate::units::now_utc();
        let _ = r.save(state);
    }
    let put_back = if notes.is_empty() {
        String::new()
    } else {
        format!("\n  {}", notes.join("; "))
    };
    let kept = match saved {
        Ok(()) => format!(
            "{} measurement(s) recorded; `sparkctl bisect {} --resume` goes on from them",
            b.measurements.len(),
            b.recipe
        ),
        Err(w) => format!("the bisect's record was not written ({w})"),
    };
    let text = format!("bisect of {} stopped: {e}{put_back}\n  {kept}", b.recipe);
    if interrupted {
        Error::Interrupted(text)
    } else {
        Error::Failed(text)
    }
}
