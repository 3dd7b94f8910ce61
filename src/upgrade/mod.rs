//! `sparkctl upgrade NAME`: following a recipe's tag unattended. Today's digest from the
//! registry; unchanged from the pin, nothing runs. New: fetched and kept first (a registry
//! that purges its old nightlies cannot lose it), then `up` with it as the candidate
//! (gates, golden prompts, evaluation) — images.lock untouched until it is promoted, when
//! the pin moves (the old digest stays in the pin's history and the image history). When
//! another command holds the state dir, the upgrade waits a while, then skips the deploy
//! and says so. Every run is a run record (`history`).

mod bisect;
mod follow;
mod notify;
pub(crate) mod schedule;

use std::time::Duration;

use serde::Serialize;

use crate::context::Context;
use crate::deploy::switch::SwitchContext;
use crate::deploy::up::{up_locked, UpOptions};
use crate::error::{Error, Result};
use crate::history::{Command, Outcome, RunRecord, UpgradeNote};
use crate::lock::Lock;
use crate::progress::Progress;
use crate::recipe::RecipeSet;

/// How an upgrade runs, as asked.
pub(crate) struct Options<'a> {
    /// Say what would happen; change nothing.
    pub(crate) dry_run: bool,
    /// Fetch and keep a new digest; do not deploy it (a later upgrade judges it).
    pub(crate) fetch_only: bool,
    /// How long another command may hold the state dir before the deploy is skipped.
    pub(crate) wait: Duration,
    pub(crate) progress: &'a dyn Progress,
}

/// What an upgrade came to.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Report {
    recipe: String,
    /// The image as the recipe names it: the tag followed.
    reference: String,
    /// The pinned digest before (None: never pinned).
    old: Option<String>,
    /// What the tag points to today.
    new: String,
    /// In history's words.
    outcome: Outcome,
    /// Its run record (none for a dry run).
    #[serde(skip_serializing_if = "Option::is_none")]
    run_id: Option<String>,
    /// What happened, in one line.
    summary: String,
    /// Why it was not promoted, as `up` said it.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// What answers on the production port afterwards.
    #[serde(skip_serializing_if = "Option::is_none")]
    serving: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    upgrade: Option<UpgradeNote>,
}

impl Report {
    pub(crate) fn recipe(&self) -> &str {
        &self.recipe
    }

    pub(crate) fn outcome(&self) -> Outcome {
        self.outcome
    }

    pub(crate) fn run_id(&self) -> Option<&str> {
        self.run_id.as_deref()
    }

    pub(crate) fn summary(&self) -> &str {
        &self.summary
    }

    pub(crate) fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// The error the command ends with: none when the upgrade did its part (promoted, the
    /// digest unchanged, fetched and skipped, or a dry run); else exit 1 with the summary.
    pub(crate) fn failure(&self) -> Option<Error> {
        match self.outcome {
            Outcome::Promoted | Outcome::Unchanged | Outcome::Skipped | Outcome::Planned => None,
            _ => Some(Error::Reported(crate::error::Summary::Upgrade {
                recipe: self.recipe.clone(),
                outcome: self.outcome.to_string(),
                summary: self.summary.clone(),
            })),
        }
    }
}

/// `upgrade NAME --schedule WHEN`: the recipe must have a tag to follow; then its timer.
pub(crate) fn schedule(
    ctx: &Context,
    recipes: &RecipeSet,
    name: &str,
    when: schedule::When,
) -> Result<schedule::Scheduled> {
    follow::tag_of(recipes.get(name)?)?;
    schedule::schedule(ctx, &recipes.dir, name, when)
}

/// `sparkctl upgrade NAME`: the tag followed, then the owner told (the recipe's `notify`).
pub(crate) async fn upgrade(
    ctx: &Context,
    recipes: &RecipeSet,
    name: &str,
    opts: &Options<'_>,
) -> Result<Report> {
    let report = follow_tag(ctx, recipes, name, opts).await?;
    let notify = recipes.get(name)?.recipe.notify.as_ref();
    match (notify, report.run_id.clone()) {
        (Some(n), Some(run_id)) => told(ctx, n, report, &run_id, opts.progress).await,
        _ => Ok(report),
    }
}

/// Tells the notifiers; what each did goes into the run record and is said.
async fn told(
    ctx: &Context,
    n: &crate::recipe::notify::Notify,
    mut report: Report,
    run_id: &str,
    progress: &dyn Progress,
) -> Result<Report> {
    let mut record = crate::history::run_record(&ctx.state, run_id)?;
    let lines = notify::tell(n, &record).await;
    if lines.is_empty() {
        return Ok(report);
    }
    for l in &lines {
        progress.step(&format!("notify: {l}"));
    }
    let mut note = record.upgrade.clone().unwrap_or_default();
    note.notified = lines;
    record.upgrade = Some(note.clone());
    record.save(&ctx.state)?;
    report.upgrade = Some(note);
    Ok(report)
}

/// Today's digest of the tag: unchanged, fetched and skipped, or judged by `up`.
async fn follow_tag(
    ctx: &Context,
    recipes: &RecipeSet,
    name: &str,
    opts: &Options<'_>,
) -> Result<Report> {
    let loaded = recipes.get(name)?;
    let reference = follow::tag_of(loaded)?;
    // A pin an earlier upgrade's promotion left behind is moved first: tonight's digest is
    // judged against the one production runs. Another command holding the state dir now
    // leaves it for the check once this one holds it.
    if !opts.dry_run {
        let what = format!("upgrade {name}");
        for line in crate::deploy::pin::heal_if_free(&ctx.lock_path, &ctx.state, &what) {
            opts.progress.step(&line);
        }
    }
    let lock = Lock::load(&ctx.lock_path)?;
    let old = lock.pin(name)?.cloned();
    let mut run = Run {
        ctx,
        opts,
        record: RunRecord::new(Command::Upgrade, name),
        note: UpgradeNote {
            reference: reference.clone(),
            old: old.as_ref().map(|p| p.digest.clone()),
            ..Default::default()
        },
    };
    // A night the engine or the registry does not answer is a run too: recorded, failed.
    let docker = match ctx.runtimes.docker() {
        Ok(d) => d.client(),
        Err(e) => return run.ended(Outcome::Failed, e.to_string()),
    };
    let today = match follow::today(docker, &reference).await {
        Ok(p) => p,
        Err(e) => return run.ended(Outcome::Failed, e.to_string()),
    };
    run.note.new = today.digest.clone();
    let short = crate::units::short_digest(&today.digest);
    let said = |w: &str| format!("{reference} is {short}{w}");
    if old.as_ref().is_some_and(|p| p.digest == today.digest) {
        return run.ended(Outcome::Unchanged, said(", as pinned: nothing to do"));
    }
    let was = old.as_ref().map_or("never pinned".into(), |p| {
        format!("pinned {}", crate::units::short_digest(&p.digest))
    });
    if opts.dry_run {
        return run.ended(
            Outcome::Planned,
            said(&format!(
                " ({was}): an upgrade would pull and keep it, run `up {name}` with it as the \
                 candidate, and move the pin only if it is promoted"
            )),
        );
    }
    opts.progress
        .step(&said(&format!(" now ({was}): fetching it first")));
    let pin = follow::fetch_and_keep(
        docker,
        &ctx.state,
        name,
        today,
        &run.record.run_id,
        opts.progress,
    );
    let pin = match pin.await {
        Ok(p) => p,
        Err(e) => return run.ended(Outcome::Failed, format!("fetching it failed: {e}")),
    };
    if opts.fetch_only {
        return run.skipped("--fetch-only: fetched and kept; the next upgrade judges it".into());
    }
    let what = format!("upgrade {name}");
    let state_lock =
        match crate::bisect::lock_within(&ctx.state, &what, opts.wait, opts.progress).await {
            Ok(l) => l,
            Err(e @ Error::StateLockHeld { .. }) => {
                return run.skipped(format!(
                "{e} for {}; the new digest is fetched and kept, and the next upgrade judges it",
                crate::units::format_duration(opts.wait)
            ))
            }
            Err(e) => return Err(e),
        };
    if heal(ctx, opts.progress) {
        let now = Lock::load(&ctx.lock_path)?;
        if now.pin(name)?.is_some_and(|p| p.digest == run.note.new) {
            return run.ended(Outcome::Unchanged, said(", as pinned now: nothing to do"));
        }
    }
    let report = run.deploy(recipes, name, &pin).await?;
    drop(state_lock);
    conclude(ctx, recipes, report, opts.progress).await
}

/// The pin moves a kill left undone, made and said (the caller holds the state lock);
/// whether there were any.
fn heal(ctx: &Context, progress: &dyn Progress) -> bool {
    let said = crate::deploy::pin::heal(&ctx.lock_path, &ctx.state);
    for line in &said {
        progress.step(line);
    }
    !said.is_empty()
}

/// After the deploy: the keeps on judged digests taken back; after a rejection with nights
/// skipped, the bisect over the digests between the last good one and the rejected one
/// (the state lock released first: the bisect takes it itself).
async fn conclude(
    ctx: &Context,
    recipes: &RecipeSet,
    mut report: Report,
    progress: &dyn Progress,
) -> Result<Report> {
    let (name, run_id) = (
        report.recipe.clone(),
        report.run_id.clone().unwrap_or_default(),
    );
    let judged = matches!(report.outcome, Outcome::Promoted | Outcome::Rejected);
    let mut record = crate::history::run_record(&ctx.state, &run_id)?;
    let mut note = record.upgrade.clone().unwrap_or_default();
    let h = history_of(ctx, &name, &note.reference).await?;
    let skipped = match (&note.old, report.outcome) {
        (Some(old), Outcome::Rejected) => bisect::between(&h, old, &note.new).len(),
        _ => 0,
    };
    let mut release = judged;
    if skipped > 0 {
        let old = note.old.clone().unwrap_or_default();
        let found = match bisect::criterion(&record) {
            Some(c) => {
                progress.step(&format!(
                    "{skipped} digest(s) were fetched and kept since the last good {}: \
                     bisecting them on {}",
                    crate::units::short_digest(&old),
                    c.describe(None)
                ));
                let flow = SwitchContext::open(ctx, recipes, &[&name], false, false).await?;
                bisect::run(&flow, &name, (&old, &note.new), c, progress).await
            }
            None => crate::history::BisectNote {
                error: Some("no failed gate a bisect can judge on".into()),
                ..Default::default()
            },
        };
        // Unanswered, the digests stay kept for a bisect by hand.
        release = found.first_bad.is_some();
        report.summary = match (&found.first_bad, &found.error) {
            (Some(bad), _) => format!(
                "{}; first bad digest: {}",
                report.summary,
                crate::units::short_digest(bad)
            ),
            (None, e) => format!(
                "{}; the bisect over the skipped digests found no answer: {}",
                report.summary,
                e.as_deref().unwrap_or("-")
            ),
        };
        progress.step(&report.summary);
        note.bisect = Some(found);
    }
    if release {
        // As it stands now: the bisect's own keeps (its pair) are not the upgrade's.
        let h = history_of(ctx, &name, &note.reference).await?;
        follow::release_keeps(&h, &ctx.state)?;
    }
    record.upgrade = Some(note.clone());
    record.save(&ctx.state)?;
    report.upgrade = Some(note);
    Ok(report)
}

/// `name`'s image history as it stands (the lock read afresh).
async fn history_of(
    ctx: &Context,
    name: &str,
    reference: &str,
) -> Result<crate::images::history::History> {
    let docker = ctx.runtimes.docker()?.client();
    let lock = Lock::load(&ctx.lock_path)?;
    let runs = crate::history::image_uses(&ctx.state)?;
    crate::images::history::of(docker, &ctx.state, &lock, (name, reference), &runs).await
}

/// One upgrade's record and note, as it goes.
struct Run<'a> {
    ctx: &'a Context,
    opts: &'a Options<'a>,
    record: RunRecord,
    note: UpgradeNote,
}

impl Run<'_> {
    /// Ends without a deploy: recorded (but for a dry run), said, reported.
    fn ended(mut self, outcome: Outcome, summary: String) -> Result<Report> {
        self.record.outcome = outcome;
        self.record.finished_at = crate::units::now_utc();
        if outcome == Outcome::Failed {
            self.record.error = Some(summary.clone());
        }
        self.record.upgrade = Some(self.note.clone());
        let saved = outcome != Outcome::Planned;
        if saved {
            self.record.save(&self.ctx.state)?;
        }
        self.opts.progress.step(&summary);
        Ok(Report {
            recipe: self.record.recipe.clone(),
            reference: self.note.reference.clone(),
            old: self.note.old.clone(),
            new: self.note.new.clone(),
            outcome,
            run_id: saved.then(|| self.record.run_id.clone()),
            summary,
            error: self.record.error.clone(),
            serving: None,
            upgrade: Some(self.note),
        })
    }

    /// Fetched, not deployed: skipped, and why.
    fn skipped(mut self, why: String) -> Result<Report> {
        self.note.skipped = Some(why.clone());
        self.ended(Outcome::Skipped, why)
    }

    /// `up` with the new digest as the candidate, under the state lock the caller holds;
    /// the pin moves only when it was promoted.
    async fn deploy(
        mut self,
        recipes: &RecipeSet,
        name: &str,
        pin: &crate::lock::Pin,
    ) -> Result<Report> {
        let ctx = self.ctx;
        let flow = match SwitchContext::open(ctx, recipes, &[name], false, false).await {
            Ok(f) => f,
            Err(e) => return self.ended(Outcome::Failed, e.to_string()),
        };
        let candidate = follow::candidate_lock(&flow.lock, name, pin);
        self.record.image = Some(self.note.reference.clone());
        self.record.upgrade = Some(self.note.clone());
        // Unattended by design: replacing production's own instance is what was asked.
        let yes = |_: &str| true;
        let opts = UpOptions {
            dry_run: false,
            no_promote: false,
            allow_unpinned: false,
            confirm: &yes,
            progress: self.opts.progress,
            lock: Some(&candidate),
            record: Some(self.record.clone()),
            // Recorded with the promotion: a kill before the pin moves is healed.
            pin_move: Some(crate::production::PinMove {
                from: self.note.old.clone(),
            }),
            replace: true,
            // The new night runs on production's own port in its place: never beside it, so
            // no shadow nor canary (the recipe's `rollout` is for `up` of another recipe).
            rollout: crate::recipe::rollout::Asked::off(),
        };
        let run_id = self.record.run_id.clone();
        let error = match up_locked(&flow, name, &opts).await {
            Ok(_) => None,
            Err(e) if e.is_interrupted() => return Err(e),
            Err(e) => Some(e.to_string()),
        };
        // A run refused before it began (the production port as its port) wrote no record.
        let mut record = match crate::history::run_record(&ctx.state, &run_id) {
            Ok(r) => r,
            Err(_) => RunRecord {
                outcome: Outcome::Failed,
                error: error.clone(),
                finished_at: crate::units::now_utc(),
                ..self.record.clone()
            },
        };
        let mut note = record.upgrade.clone().unwrap_or_default();
        if record.outcome == Outcome::Promoted {
            crate::deploy::pin::move_pin(&ctx.lock_path, &ctx.state, name, pin)?;
            note.pinned = true;
        }

        let summary = match (&error, record.outcome) {
            (None, _) => format!(
                "{} promoted: the pin moved to {} ({} stays in its history)",
                name,
                crate::units::short_digest(&note.new),
                note.old
                    .as_deref()
                    .map_or("nothing".into(), crate::units::short_digest)
            ),
            (Some(_), outcome) => format!(
                "{name} at {} {outcome}: the pin stays at {}",
                crate::units::short_digest(&note.new),
                note.old
                    .as_deref()
                    .map_or("nothing".into(), crate::units::short_digest)
            ),
        };
        record.upgrade = Some(note.clone());
        record.save(&ctx.state)?;
        self.opts.progress.step(&summary);
        Ok(Report {
            recipe: name.to_string(),
            reference: note.reference.clone(),
            old: note.old.clone(),
            new: note.new.clone(),
            outcome: record.outcome,
            run_id: Some(run_id),
            summary,
            error,
            serving: record.serving.clone(),
            upgrade: Some(note),
        })
    }
}
