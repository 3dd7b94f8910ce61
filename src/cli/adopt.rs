//! `sparkctl adopt NAME`: rendering over `adopt`.

use super::{with_recipes, Globals, Output};
use crate::adopt::{Handover, Options, Way};
use crate::error::Result;

/// `sparkctl adopt`'s flags.
#[derive(Debug, clap::Args)]
pub(crate) struct AdoptArgs {
    name: String,
    /// Stop the foreign server without asking.
    #[arg(long)]
    yes: bool,
    /// Say how it would go; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Run an image that has no digest in images.lock.
    #[arg(long)]
    allow_unpinned: bool,
}

impl AdoptArgs {
    pub(super) fn exec(self, g: &Globals, out: &Output) -> Result<()> {
        with_recipes(g, out, async |ctx, recipes| {
            run(ctx, recipes, self, out).await
        })
    }
}

async fn run(
    ctx: &crate::context::Context,
    recipes: &crate::recipe::RecipeSet,
    args: AdoptArgs,
    out: &Output,
) -> Result<()> {
    let name = args.name.as_str();
    let json = out.json;
    let confirm = |question: &str| args.yes || out.confirm(question);
    let opts = Options {
        dry_run: args.dry_run,
        allow_unpinned: args.allow_unpinned,
        confirm: &confirm,
        progress: out,
    };
    let report = crate::adopt::adopt(ctx, recipes, name, &opts).await?;
    if json {
        out.print_json(&report);
        return Ok(());
    }
    if report.planned {
        out.say("(dry run: nothing was changed)");
        return Ok(());
    }
    let how = match report.handover {
        Handover::SharedSocket => {
            "the port never closed (the front door shared its socket)".to_string()
        }
        Handover::Rebound { after_ms } => {
            format!("the front door bound the port {after_ms} ms after the stop began")
        }
    };
    let way = match report.way {
        Way::BlueGreen => "blue/green",
        Way::Swap => "swap, requests held meanwhile",
    };
    out.say(format_args!(
        "port {} is the front door's: production is {} ({}), {}; {} is stopped ({way})",
        report.port,
        report.recipe,
        crate::units::short_id(&report.deployment),
        how,
        report.foreign
    ));
    Ok(())
}
