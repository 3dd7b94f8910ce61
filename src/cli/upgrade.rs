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
    let say = |line: &str| out.note(format_args!("==> {line}"));
    let opts = crate::upgrade::Options {
        dry_run: args.dry_run,
        fetch_only: args.fetch_only,
        wait: args.wait,
        say: &say,
    };
    let report = crate::upgrade::upgrade(ctx, recipes, &args.name, &opts).await?;
    if out.json {
        out.print_json(&report);
    } else {
        out.say(format_args!(
            "upgrade {} {}: {}{}",
            report.recipe,
            report.outcome,
            report.summary,
            report
                .run_id
                .as_deref()
                .map_or(String::new(), |r| format!("; run {r}"))
        ));
        if let Some(e) = &report.error {
            out.say(format_args!("  {e}"));
        }
    }
    match report.failure() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
