//! `sparkctl upgrade NAME`: rendering over `upgrade`.

use super::{with_recipes, Globals, Output};
use crate::context::Context;
use crate::error::Result;
use crate::recipe::RecipeSet;

/// `sparkctl upgrade`'s flags.
#[derive(Debug, clap::Args)]
pub(crate) struct UpgradeArgs {
    /// The recipe whose image tag to follow.
    name: String,
    /// Say what would happen (the registry is asked); change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Fetch and keep a new digest, and stop there: a later upgrade judges it.
    #[arg(long, conflicts_with = "dry_run")]
    fetch_only: bool,
    /// How long to wait while another sparkctl command changes state before skipping the
    /// deploy (the new digest is fetched and kept either way).
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = duration)]
    wait: std::time::Duration,
    /// Run it unattended: a systemd user timer, `daily` (midnight) or at HH:MM, and its
    /// service (this binary, this state dir, recipes and lock); a missed run catches up at
    /// the next boot. Nothing is upgraded now.
    #[arg(long, value_name = "daily|HH:MM", conflicts_with_all = ["dry_run", "fetch_only"])]
    schedule: Option<crate::upgrade::schedule::When>,
    /// Take the timer and its service away.
    #[arg(long, conflicts_with_all = ["dry_run", "fetch_only", "schedule"])]
    unschedule: bool,
}

fn duration(text: &str) -> std::result::Result<std::time::Duration, String> {
    crate::units::parse_duration(text)
}

impl UpgradeArgs {
    pub(super) fn exec(self, g: &Globals, out: &Output) -> Result<()> {
        with_recipes(g, out, async |ctx, recipes| {
            run(ctx, recipes, self, out).await
        })
    }
}

async fn run(ctx: &Context, recipes: &RecipeSet, args: UpgradeArgs, out: &Output) -> Result<()> {
    if let Some(when) = args.schedule {
        let s = crate::upgrade::schedule(ctx, recipes, &args.name, when)?;
        return show_schedule(out, &args.name, Some(s));
    }
    if args.unschedule {
        let s = crate::upgrade::schedule::unschedule(&args.name)?;
        return show_schedule(out, &args.name, s);
    }
    let opts = crate::upgrade::Options {
        dry_run: args.dry_run,
        fetch_only: args.fetch_only,
        wait: args.wait,
        progress: out,
    };
    let report = crate::upgrade::upgrade(ctx, recipes, &args.name, &opts).await?;
    if out.json {
        out.print_json(&report);
    } else {
        out.say(format_args!(
            "upgrade {} {}: {}{}",
            report.recipe(),
            report.outcome(),
            report.summary(),
            report
                .run_id()
                .map_or(String::new(), |r| format!("; run {r}"))
        ));
        if let Some(e) = report.error() {
            out.say(format_args!("  {e}"));
        }
    }
    match report.failure() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn show_schedule(
    out: &Output,
    name: &str,
    s: Option<crate::upgrade::schedule::Scheduled>,
) -> Result<()> {
    if out.json {
        out.print_json(&s);
        return Ok(());
    }
    match s {
        None => out.say(format_args!("no schedule of upgrade {name} is installed")),
        Some(s) => {
            match s.on_calendar() {
                Some(c) => out.say(format_args!(
                    "upgrade {name} scheduled (OnCalendar={c}): {} and {}",
                    s.timer().display(),
                    s.service().display()
                )),
                None => out.say(format_args!(
                    "upgrade {name} unscheduled: {} and {} removed",
                    s.timer().display(),
                    s.service().display()
                )),
            }
            out.say(format_args!("systemd: {}", s.systemd()));
        }
    }
    Ok(())
}
