//! `sparkctl run JOB | jobs | stop JOB | logs JOB`: rendering over `job`; the library
//! decides what runs, what is checked and what a run's outcome is.

use std::path::Path;
use std::time::Duration;

use clap::Args;

use super::{in_context, Globals, Output};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::job::{self, FollowEvent, Followed, JobRecord, JobState};

/// `sparkctl run`'s flags.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    name: String,
    /// Print the plan (image, user, memory, disk, command) and change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Start it and return at once.
    #[arg(long)]
    detach: bool,
    /// Do not ask before stopping the production backend to make room.
    #[arg(long)]
    yes: bool,
    /// Run an image that has no digest in images.lock (recorded in the run).
    #[arg(long)]
    allow_unpinned: bool,
}

impl RunArgs {
    pub(super) fn exec(self, g: &Globals, out: &Output) -> Result<()> {
        let recipes = g.recipes_dir().path;
        in_context(g, async |ctx| run(ctx, &recipes, self, out).await)
    }
}

/// `sparkctl jobs`: no flags.
#[derive(Debug, Args)]
pub(crate) struct JobsArgs;

impl JobsArgs {
    pub(super) fn exec(self, g: &Globals, out: &Output) -> Result<()> {
        in_context(g, async |ctx| list(ctx, out).await)
    }
}

/// `sparkctl stop`'s flags.
#[derive(Debug, Args)]
pub(crate) struct StopArgs {
    name: String,
    /// Time between SIGTERM and SIGKILL.
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    grace: crate::units::HumanDuration,
    /// Say what would be stopped; change nothing.
    #[arg(long)]
    dry_run: bool,
}

impl StopArgs {
    pub(super) fn exec(self, g: &Globals, out: &Output) -> Result<()> {
        in_context(g, async |ctx| {
            stop(ctx, &self.name, self.grace.0, self.dry_run, out).await
        })
    }
}

async fn run(ctx: &Context, recipes: &Path, args: RunArgs, out: &Output) -> Result<()> {
    let name = args.name.as_str();
    let loaded = job::load::find_job(&job::load::jobs_dir(recipes), name)?;
    let yes = args.yes;
    let confirm = move |q: &str| yes || out.confirm(q);
    let opts = job::run::RunOptions {
        confirm: &confirm,
        progress: out,
    };
    let rec = match job::run::run(ctx, &loaded, args.allow_unpinned, args.dry_run, &opts).await? {
        job::run::Ran::Planned(plan) if out.json => {
            out.print_json(&plan);
            return Ok(());
        }
        job::run::Ran::Planned(plan) => {
            print_plan(&plan, out);
            out.say("nothing was changed (--dry-run)");
            return Ok(());
        }
        job::run::Ran::Started(rec) => *rec,
    };
    out.note(format_args!(
        "job {name} started: run {}, container {} ({}), as user {}",
        rec.run_id(),
        rec.container_name(),
        crate::units::short_id(rec.container()),
        rec.user()
    ));
    if args.detach {
        return finish(&rec, out, false);
    }
    out.note("following its output; Ctrl-C detaches (the job keeps running)");
    let docker = ctx.runtimes.docker()?.client();
    match follow_with_bar(docker, &ctx.state, rec, out).await? {
        Followed::Detached(rec) => finish(&rec, out, true),
        Followed::Ended(rec) => finish(&rec, out, false),
    }
}

fn print_plan(plan: &job::run::JobPlan, out: &Output) {
    out.say(format_args!(
        "job:     {}  ({})",
        plan.job(),
        plan.recipe_file().display()
    ));
    out.say(format_args!(
        "image:   {} → {}{}",
        plan.image_ref(),
        plan.image(),
        if plan.unpinned() { " (UNPINNED)" } else { "" }
    ));
    out.say(format_args!(
        "user:    {} (outputs end owned by {})",
        plan.user(),
        plan.owner()
    ));
    out.say(format_args!("memory:  {}", plan.memory().describe()));
    for v in &plan.memory().must_stop {
        out.say(format_args!("stops:   {v} to make room"));
    }
    for d in plan.disk() {
        out.say(format_args!(
            "disk:    {} needs {}, {} free",
            d.output().display(),
            crate::units::ByteSize(d.needs()),
            crate::units::ByteSize(d.free())
        ));
    }
    out.say("# equivalent command, for review (sparkctl never runs a shell)");
    out.say(crate::recipe::resolve_shell_line(plan.command()));
}

/// Streams the output, with a progress bar when the recipe's pattern matches.
async fn follow_with_bar(
    docker: &bollard::Docker,
    state: &crate::state::StateDir,
    rec: JobRecord,
    out: &Output,
) -> Result<Followed> {
    let bar = out.hidden_bar();
    let terminal = out.draws_progress();
    let (mut shown, mut eta, mut last_tenth) = (false, job::progress::Eta::default(), None);
    let mut on = |e: FollowEvent| match e {
        FollowEvent::Line(l) => bar.suspend(|| out.say(l)),
        FollowEvent::Progress(done, total) if terminal => {
            if !shown {
                bar.draw("{bar:40} {pos}/{len} {percent}% elapsed {elapsed} eta {eta}");
                bar.at(done, total);
                bar.reset_eta();
                shown = true;
            }
            bar.at(done, total);
        }
        FollowEvent::Progress(done, total) => {
            // Not a terminal (CI, a log file): one line per tenth, with the time left.
            let left = eta.update(done, total);
            let tenth = (done * 10).checked_div(total).unwrap_or(0);
            if last_tenth != Some(tenth) {
                last_tenth = Some(tenth);
                out.note(format_args!(
                    "progress {done}/{total} ({}%){}",
                    (done * 100).checked_div(total).unwrap_or(0),
                    left.map_or(String::new(), |d| format!(
                        ", about {} left",
                        crate::units::format_duration(d)
                    ))
                ));
            }
        }
    };
    let followed = job::Runs { docker, state }.follow(rec, None, &mut on).await;
    bar.finish();
    followed
}

/// How a run stands, for people; a job that did not succeed is exit 1.
fn finish(rec: &JobRecord, out: &Output, detached: bool) -> Result<()> {
    if out.json {
        out.print_json(rec);
    } else if !rec.state().is_final() {
        out.say(format_args!(
            "job {} keeps running{} (run {}); `sparkctl logs {} -f` follows it, `sparkctl stop {}` \
             ends it, `sparkctl jobs` lists runs",
            rec.job(),
            if detached { ", detached" } else { "" },
            rec.run_id(),
            rec.job(),
            rec.job()
        ));
    } else {
        print_outcome(rec, out);
    }
    match rec.state() {
        JobState::Running | JobState::Succeeded => Ok(()),
        s => Err(Error::Reported(crate::error::Summary::Job {
            job: rec.job().to_string(),
            state: s.to_string(),
        })),
    }
}

fn print_outcome(rec: &JobRecord, out: &Output) {
    out.say(format_args!(
        "job {} {}: {}",
        rec.job(),
        rec.state(),
        rec.explanation().unwrap_or("-")
    ));
    for f in rec.findings() {
        out.say(format_args!(
            "  found: {}\n    cause: {}\n    fix: {}",
            f.line(),
            f.cause(),
            f.fix()
        ));
    }
    for o in rec.outputs() {
        for c in o.checks() {
            out.say(format_args!(
                "  {} {}: {} ({})",
                if c.ok { "ok  " } else { "FAIL" },
                o.path().display(),
                c.what,
                c.detail
            ));
        }
        match (o.fingerprint(), o.incomplete()) {
            (Some(fp), _) => out.say(format_args!(
                "  output {} fingerprint {fp}",
                o.path().display()
            )),
            (None, true) => out.say(format_args!(
                "  output {} is marked incomplete ({}): partial, not a result",
                o.path().display(),
                job::finalize::INCOMPLETE
            )),
            (None, false) => {}
        }
    }
    if rec.chowned() > 0 {
        out.say(format_args!(
            "  gave {} path(s) back to {}",
            rec.chowned(),
            rec.owner()
        ));
    }
    for w in rec.warnings() {
        out.say(format_args!("  warning: {w}"));
    }
    if let Some(log) = rec.log() {
        out.say(format_args!("  log kept: {}", log.display()));
    }
}

async fn list(ctx: &Context, out: &Output) -> Result<()> {
    let docker = ctx.runtimes.docker()?.client();
    let (runs, damaged) = job::finalize::refresh(docker, &ctx.state).await?;
    let none = || format!("no job runs yet (state dir {})", ctx.state.root().display());
    if out.list_said_all(&runs, &damaged, none) {
        return Ok(());
    }
    let mut t = out.table();
    t.set_header([
        "JOB",
        "RUN",
        "STATE",
        "PROGRESS",
        "STARTED",
        "HOW IT ENDED",
        "OUTPUTS",
    ]);
    for r in &runs {
        let outputs: Vec<String> = r
            .outputs()
            .iter()
            .map(|o| match (o.fingerprint(), o.incomplete()) {
                (Some(fp), _) => format!("{} {}", o.path().display(), crate::units::short_id(fp)),
                (None, true) => format!("{} (incomplete)", o.path().display()),
                (None, false) => o.path().display().to_string(),
            })
            .collect();
        t.add_row([
            r.job().to_string(),
            r.run_id().to_string(),
            r.state().to_string(),
            r.progress().map_or("-".into(), |(d, t)| format!("{d}/{t}")),
            r.started_at().to_string(),
            r.explanation().unwrap_or("-").to_string(),
            outputs.join(", "),
        ]);
    }
    out.print_table(&t);
    Ok(())
}

async fn stop(
    ctx: &Context,
    name: &str,
    grace: Duration,
    dry_run: bool,
    out: &Output,
) -> Result<()> {
    let runs = job::Runs::of(ctx)?;
    if dry_run {
        let rec = runs.latest(name).await?;
        match rec.state() {
            JobState::Running => out.say(format_args!(
                "would stop job {name} (run {}, container {}): SIGTERM, SIGKILL after {}; \
                 nothing was changed (--dry-run)",
                rec.run_id(),
                rec.container_name(),
                crate::units::format_duration(grace)
            )),
            s => out.say(format_args!(
                "job {name} is not running (its last run {} {s})",
                rec.run_id()
            )),
        }
        return Ok(());
    }
    let rec = runs.stop(name, grace).await?;
    if out.json {
        out.print_json(&rec);
    } else {
        print_outcome(&rec, out);
    }
    Ok(())
}

pub(crate) async fn logs(
    ctx: &Context,
    name: &str,
    view: crate::runtime::LogView,
    out: &Output,
) -> Result<()> {
    let runs = job::Runs::of(ctx)?;
    runs.logs(name, view, &mut out.log_sink()).await?;
    Ok(())
}
