//! `sparkctl prune`: what would go (the default), and `--yes` to remove it.

use super::{with_recipes, Globals, Output};
use crate::error::{Error, Result};
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
    let (state, runtimes) = (&ctx.state, &ctx.runtimes);
    // One writer at a time: a start in progress may be about to use these.
    let _lock = state.lock("prune")?;
    let docker = runtimes.docker()?;
    let keep = match args.keep {
        Some(k) => k,
        None => crate::prune::keep_from_env()?,
    };
    let protected = crate::prune::protected(state, recipes)?;
    let mut plan = crate::prune::plan(docker, protected, keep, None).await?;
    // Ended jobs' containers too: each run's output is already copied into its record.
    plan.remove
        .extend(crate::job::prune_plan(docker.client(), state, keep).await?);
    let newest = match args.keep_images {
        Some(k) => k,
        None => crate::images::retain::keep_from_env()?,
    };
    let lock = crate::lock::Lock::load(&ctx.lock_path)?.intact()?;
    let going = (newest, plan.remove.as_slice());
    let runs = crate::history::image_uses(state)?;
    let images =
        crate::prune::image_plan(docker.client(), state, &lock, recipes, &runs, going).await?;
    let mut failed = if args.yes {
        crate::prune::apply(docker, &plan.remove).await
    } else {
        Vec::new()
    };
    // Images after containers: an old container no longer holds its image.
    let (removed, image_failed) = if args.yes {
        crate::images::retain::apply(docker.client(), &images.remove).await
    } else {
        (Vec::new(), Vec::new())
    };
    if out.json {
        out.print_json(&serde_json::json!({
            "dry_run": !args.yes,
            "keep_per_recipe": plan.keep_per_recipe,
            "protected": plan.protected,
            "remove": plan.remove,
            "failed": failed.iter().map(|(o, why)| serde_json::json!({"id": o.id, "error": why})).collect::<Vec<_>>(),
            "images": {
                "keep_newest": images.keep_newest,
                "remove": images.remove,
                "kept": images.kept,
                "removed": removed,
                "failed": image_failed.iter().map(|(o, why)| serde_json::json!({"reference": o.reference, "error": why})).collect::<Vec<_>>(),
            },
        }));
    } else {
        let mut t = out.table();
        t.set_header(vec!["RECIPE", "CONTAINER", "RUN", "CREATED"]);
        for o in &plan.remove {
            t.add_row(vec![
                o.recipe.clone(),
                crate::units::short_id(&o.id).to_string(),
                o.run_id.clone(),
                crate::units::utc_stamp(o.created),
            ]);
        }
        if !plan.remove.is_empty() {
            out.print_table(&t);
        }
        let kept = if plan.protected.is_empty() {
            String::new()
        } else {
            format!(
                "; all of {} kept (production, fallback)",
                plan.protected.join(", ")
            )
        };
        let n = plan.remove.len();
        if n == 0 {
            out.say(format_args!(
                "nothing to remove: at most {keep} exited container(s) per recipe{kept}"
            ));
        } else if args.yes {
            out.say(format_args!(
                "removed {} old container(s), kept the newest {keep} exited per recipe{kept}",
                n - failed.len()
            ));
        } else {
            out.say(format_args!(
                "would remove {n} old container(s), keeping the newest {keep} exited per \
                 recipe{kept}; nothing was removed: `sparkctl prune --yes` removes them"
            ));
        }
    }
    if !out.json {
        print_images(&images, &removed, args.yes, out);
    }
    failed.extend(image_failed.into_iter().map(|(o, why)| {
        let old = crate::prune::Old {
            recipe: o.recipe,
            id: o.reference,
            run_id: String::new(),
            created: 0,
        };
        (old, why)
    }));
    if failed.is_empty() {
        Ok(())
    } else {
        Err(Error::Failed(
            failed
                .iter()
                .map(|(o, why)| {
                    format!("could not remove {}: {why}", crate::units::short_id(&o.id))
                })
                .collect::<Vec<_>>()
                .join("\n"),
        ))
    }
}

/// The images part: what goes (or went), and what stays and why.
fn print_images(
    images: &crate::images::retain::ImagePlan,
    removed: &[crate::images::retain::Removed],
    yes: bool,
    out: &Output,
) {
    use crate::units::short_digest;
    for o in &images.remove {
        let done = removed.iter().find(|r| r.reference == o.reference);
        let what = match (yes, done) {
            (false, _) => "would remove",
            (true, Some(r)) if r.deleted => "removed",
            (true, Some(_)) => "untagged (another name still holds the image)",
            (true, None) => "could not remove",
        };
        out.say(format_args!("image {what}: {} ({})", o.reference, o.recipe));
    }
    let here: Vec<String> = images
        .kept
        .iter()
        .filter(|k| k.present)
        .map(|k| {
            let why: Vec<String> = k.why.iter().map(ToString::to_string).collect();
            format!(
                "{} {} ({})",
                k.recipe,
                short_digest(&k.digest),
                why.join(", ")
            )
        })
        .collect();
    if !here.is_empty() {
        out.say(format_args!(
            "images kept (newest {} per recipe, pinned, production's, kept for good): {}",
            images.keep_newest,
            here.join("; ")
        ));
    }
    if !yes && !images.remove.is_empty() {
        out.say("no image was removed: `sparkctl prune --yes` removes them");
    }
}
