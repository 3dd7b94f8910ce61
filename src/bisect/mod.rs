//! `sparkctl bisect NAME --good REF --bad REF`: which digest of a recipe's image brought a
//! regression. The candidates are the digests between the two ends in the recipe's image
//! history; the ends are measured first (the yardstick), then each step starts the recipe
//! on one digest beside production (its own name and port, never promoted), benchmarks it
//! in rounds of repeated runs until its 95% interval decides good or bad, and halves the
//! range. Everything is recorded as it goes: Ctrl-C puts things back, `--resume` goes on.

mod builds;
mod guard;
mod judge;
pub(crate) mod record;
mod search;
mod step;
mod verdict;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

pub(crate) use guard::lock_within;
pub(crate) use judge::{parse_metric, Criterion, Verdict};
pub(crate) use record::{Answer, Bisect, Measurement, Plan, Role, Status};
pub(crate) use search::steps_for;

use crate::bench::result::BenchResult;
use crate::deploy::switch::{self, SwitchContext, Touched};
use crate::error::{Error, Interruption, Result};
use crate::images::history::{self as image_history, EventKind, History};
use crate::progress::Progress;
use crate::recipe::LoadedRecipe;
use search::Next;
use step::Env;

/// How a bisect runs, as asked.
pub(crate) struct Options<'a> {
    pub(crate) good: Option<String>,
    pub(crate) bad: Option<String>,
    pub(crate) criterion: Criterion,
    pub(crate) suite: Option<String>,
    pub(crate) runs: Option<usize>,
    pub(crate) warmup: Option<usize>,
    /// Runs of the suite per round (at least 2: an interval needs two).
    pub(crate) repeat: usize,
    /// Rounds a digest gets (per session) before it is left inconclusive.
    pub(crate) rounds: usize,
    pub(crate) allow_swap: bool,
    /// A process recipe's builds to walk (its binary's name in DIR or right below it).
    pub(crate) builds: Option<std::path::PathBuf>,
    pub(crate) resume: bool,
    /// Abandon an unfinished bisect of the recipe and start over.
    pub(crate) fresh: bool,
    pub(crate) dry_run: bool,
    pub(crate) confirm: &'a dyn Fn(&str) -> bool,
    pub(crate) progress: &'a dyn Progress,
}

/// What a bisect found (or planned, for a dry run).
pub(crate) struct Report {
    bisect: Bisect,
    history: History,
    /// What changed between the last good and the first bad digest, or why it is not known.
    diff: Option<std::result::Result<crate::images::ImageDiff, String>>,
}

impl Report {
    pub(crate) fn bisect(&self) -> &Bisect {
        &self.bisect
    }

    pub(crate) fn history(&self) -> &History {
        &self.history
    }

    pub(crate) fn diff(&self) -> Option<&std::result::Result<crate::images::ImageDiff, String>> {
        self.diff.as_ref()
    }
}

/// What the candidates are: the digests of the recipe's image, or (`--builds`) the builds
/// of its binary (by sha256, with their paths).
async fn candidates(
    ctx: &SwitchContext<'_>,
    loaded: &LoadedRecipe,
    builds: Option<&std::path::Path>,
) -> Result<(History, Paths)> {
    if loaded.recipe.nodes.is_some() {
        return Err(Error::RecipeCannot {
            recipe: loaded.recipe.name.clone(),
            why: crate::error::RecipeProblem::MultiNodeBisect,
        });
    }
    if let Some(dir) = builds {
        return builds::history(loaded, dir);
    }
    let reference = image_of(loaded)?;
    let docker = ctx.rt().docker()?.client();
    let runs = crate::history::image_uses(ctx.state())?;
    let name = loaded.recipe.name.as_str();
    let h = image_history::of(docker, ctx.state(), &ctx.lock, (name, &reference), &runs).await?;
    Ok((h, Paths::new()))
}

/// A build's sha256 → its file.
type Paths = std::collections::BTreeMap<String, std::path::PathBuf>;

/// The image a recipe's digests are of.
fn image_of(loaded: &LoadedRecipe) -> Result<String> {
    let r = &loaded.recipe;
    match (&r.image, r.runtime()) {
        (Some(image), crate::recipe::Runtime::Docker) => Ok(image.clone()),
        _ => Err(Error::RecipeCannot {
            recipe: r.name.clone(),
            why: crate::error::RecipeProblem::HostProcessBisect {
                file: loaded.path.clone(),
            },
        }),
    }
}

pub(crate) async fn bisect(
    ctx: &SwitchContext<'_>,
    name: &str,
    opts: &Options<'_>,
) -> Result<Report> {
    let loaded = ctx.recipes.get(name)?;
    let state = ctx.state();
    // A resumed bisect walks what it began with.
    let builds = match (&opts.builds, opts.resume) {
        (None, true) => record::unfinished(state, name)?.and_then(|b| b.builds),
        (given, _) => given.clone(),
    };
    let (history, paths) = candidates(ctx, loaded, builds.as_deref()).await?;
    if opts.dry_run {
        let bisect = begin(ctx, loaded, (&history, &paths), opts).await?;
        return Ok(Report {
            bisect,
            history,
            diff: None,
        });
    }
    let _state_lock = guard::lock_waiting(state, &format!("bisect {name}"), opts.progress).await?;
    let mut b = match (opts.resume, record::unfinished(state, name)?) {
        (true, Some(b)) => resumed(b, opts),
        (true, None) => {
            return Err(Error::BadFlag(
                crate::error::FlagProblem::NoBisectToResume {
                    name: name.to_string(),
                },
            ))
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
            begin(ctx, loaded, (&history, &paths), opts).await?
        }
    };
    b.status = Status::Running;
    b.why_stopped = None;
    b.save(state)?;
    guard::clean_leftover(ctx, name, opts.progress).await?;
    let suite = crate::bench::suite::Suite::load(&b.plan.suite, &ctx.recipes.dir.join("suites"))?;
    let env = Env {
        ctx,
        loaded,
        history: &history,
        suite: &suite,
        progress: opts.progress,
        confirm: opts.confirm,
        touched: Arc::new(Mutex::new(Touched::default())),
        current: Arc::new(Mutex::new(None)),
        restoring: Arc::new(AtomicBool::new(false)),
    };
    let outcome = {
        let driving = drive(&env, &mut b);
        tokio::pin!(driving);
        tokio::select! {
            r = &mut driving => r,
            _ = switch::interrupted() => {
                // Production on its way back after a step arrives before the bisect stops.
                while env.restoring.load(Ordering::SeqCst) {
                    tokio::select! {
                        _ = &mut driving => break,
                        _ = tokio::time::sleep(std::time::Duration::from_millis(20)) => {}
                    }
                }
                Err(Error::Interrupted(Interruption::Signal))
            }
        }
    };
    match outcome {
        Ok(()) => finish(ctx, b, history).await,
        Err(e) => Err(guard::stopped(&env, b, e).await),
    }
}

/// Carries on: the plan stays as it began; only the rounds and --allow-swap may change.
fn resumed(mut b: Bisect, opts: &Options<'_>) -> Bisect {
    b.plan.rounds = opts.rounds.max(1);
    b.plan.allow_swap |= opts.allow_swap;
    opts.progress.step(&format!(
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
    ctx: &SwitchContext<'_>,
    loaded: &LoadedRecipe,
    (h, paths): (&History, &Paths),
    opts: &Options<'_>,
) -> Result<Bisect> {
    let name = &loaded.recipe.name;
    let need = |r: &Option<String>, which: &'static str| {
        r.clone().ok_or_else(|| {
            Error::BadFlag(crate::error::FlagProblem::EndNeeded {
                which,
                name: name.clone(),
            })
        })
    };
    let (good, bad) = (need(&opts.good, "good")?, need(&opts.bad, "bad")?);
    let (good, bad) = (builds::ref_of(paths, &good), builds::ref_of(paths, &bad));
    let (gi, bi) = (search::resolve(h, &good)?, search::resolve(h, &bad)?);
    if gi >= bi {
        return Err(Error::BadFlag(
            crate::error::FlagProblem::GoodNotBeforeBad {
                good: good.to_string(),
                bad: bad.to_string(),
                digests: Box::new((h.entries[gi].digest.clone(), h.entries[bi].digest.clone())),
                same: gi == bi,
                name: name.clone(),
            },
        ));
    }
    if opts.repeat < 2 {
        return Err(Error::BadFlag(crate::error::FlagProblem::RepeatUnderTwo));
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
        builds: opts.builds.clone(),
        order: h.order,
        digests: h.entries[gi..=bi]
            .iter()
            .map(|e| record::Candidate {
                path: paths.get(&e.digest).cloned(),
                digest: e.digest.clone(),
                created: e.created.clone(),
                first_seen: e.first_seen.clone(),
            })
            .collect(),
        measurements: Default::default(),
        answer: None,
    })
}

/// The ends, then the steps, until the answer or a stop.
async fn drive(env: &Env<'_, '_>, b: &mut Bisect) -> Result<()> {
    let judge = |b: &Bisect, m: &Measurement, r: &BenchResult| verdict::judge_one(b, m, r);
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
        verdict::check_end(b, &digest, role)?;
    }
    if b.criterion == Criterion::Differs && b.chosen.is_none() {
        let (good, bad) = (
            b.measurements[b.good_end()].pooled(),
            b.measurements[b.bad_end()].pooled(),
        );
        let (m, pct) = judge::most_different(&good, &bad).expect("the bad end was told apart");
        b.chosen = Some(m);
        env.progress.step(&format!(
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
                    return Err(verdict::undecided(b, i, m));
                }
            }
        }
    }
}

/// The answer: the pair kept for good, what changed between them.
async fn finish(ctx: &SwitchContext<'_>, mut b: Bisect, history: History) -> Result<Report> {
    let state = ctx.state();
    let answer = b.answer.clone().expect("set when done");
    if b.builds.is_some() {
        b.status = Status::Done;
        b.finished_at = Some(crate::units::now_utc());
        b.save(state)?;
        return Ok(Report {
            bisect: b,
            history,
            diff: None,
        });
    }
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
