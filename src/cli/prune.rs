//! `sparkctl prune`: what would go (the default), and `--yes` to remove it.

use super::{with_recipes, Globals, Output};
use crate::error::Result;
use crate::recipe::RecipeSet;

/// `sparkctl prune`'s flags.
#[derive(Debug, clap::Args)]
pub(crate) struct PruneArgs {
    /// Exited containers to keep per recipe [default: SPARKCTL_KEEP_EXITED, else 5].
    #[arg(long, value_name = "N")]
    keep: Option<usize>,
    /// Newest image digests to keep per recipe [default: SPARKCTL_KEEP_IMAGES, else 3].
    #[arg(long, value_name = "N")]
    keep_images: Option<usize>,
    /// Remove them (without it, only list what would go).
    #[arg(long)]
    yes: bool,
}

impl PruneArgs {
    pub(super) fn exec(self, g: &Globals, out: &Output) -> Result<()> {
        with_recipes(g, out, async |ctx, recipes| {
            run(ctx, recipes, self, out).await
        })
    }
}

async fn run(
    ctx: &crate::context::Context,
    recipes: &RecipeSet,
    args: PruneArgs,
    out: &Output,
) -> Result<()> {
    let opts = crate::prune::Options {
        keep: args.keep,
        keep_images: args.keep_images,
        yes: args.yes,
    };
    let pruned = crate::prune::run(ctx, recipes, opts).await?;
    if out.json {
        out.print_json(&pruned);
    } else {
        print_containers(&pruned, out);
        print_images(pruned.images(), !pruned.dry_run(), out);
    }
    pruned.outcome()
}

/// The containers part: what goes (or went), and how many stay.
fn print_containers(pruned: &crate::prune::Pruned, out: &Output) {
    let mut t = out.table();
    t.set_header(vec!["RECIPE", "CONTAINER", "RUN", "CREATED"]);
    for o in pruned.remove() {
        t.add_row(vec![
            o.recipe.clone(),
            crate::units::short_id(&o.id).to_string(),
            o.run_id.clone(),
            crate::units::utc_stamp(o.created),
        ]);
    }
    if !pruned.remove().is_empty() {
        out.print_table(&t);
    }
    let kept = if pruned.protected().is_empty() {
        String::new()
    } else {
        format!(
            "; all of {} kept (production, fallback)",
            pruned.protected().join(", ")
        )
    };
    let (n, keep) = (pruned.remove().len(), pruned.keep_per_recipe());
    if n == 0 {
        out.say(format_args!(
            "nothing to remove: at most {keep} exited container(s) per recipe{kept}"
        ));
    } else if !pruned.dry_run() {
        out.say(format_args!(
            "removed {} old container(s), kept the newest {keep} exited per recipe{kept}",
            n - pruned.failed().len()
        ));
    } else {
        out.say(format_args!(
            "would remove {n} old container(s), keeping the newest {keep} exited per \
             recipe{kept}; nothing was removed: `sparkctl prune --yes` removes them"
        ));
    }
}

/// The images part: what goes (or went), and what stays and why.
fn print_images(images: &crate::prune::PrunedImages, yes: bool, out: &Output) {
    use crate::units::short_digest;
    for o in images.remove() {
        let done = images
            .removed()
            .iter()
            .find(|r| r.reference() == o.reference());
        let what = match (yes, done) {
            (false, _) => "would remove",
            (true, Some(r)) if r.deleted() => "removed",
            (true, Some(_)) => "untagged (another name still holds the image)",
            (true, None) => "could not remove",
        };
        out.say(format_args!(
            "image {what}: {} ({})",
            o.reference(),
            o.recipe()
        ));
    }
    let here: Vec<String> = images
        .kept()
        .iter()
        .filter(|k| k.present())
        .map(|k| {
            let why: Vec<String> = k.why().iter().map(ToString::to_string).collect();
            format!(
                "{} {} ({})",
                k.recipe(),
                short_digest(k.digest()),
                why.join(", ")
            )
        })
        .collect();
    if !here.is_empty() {
        out.say(format_args!(
            "images kept (newest {} per recipe, pinned, production's, kept for good): {}",
            images.keep_newest(),
            here.join("; ")
        ));
    }
    if !yes && !images.remove().is_empty() {
        out.say("no image was removed: `sparkctl prune --yes` removes them");
    }
}
