//! `sparkctl prune`: what would go (the default), and `--yes` to remove it.

use super::Output;
use crate::error::{Error, Result};
use crate::recipe::RecipeSet;

pub struct Args {
    pub keep: Option<usize>,
    pub yes: bool,
}

pub async fn run(
    state: &crate::state::StateDir,
    runtimes: &crate::runtime::Runtimes,
    recipes: &RecipeSet,
    args: Args,
    out: &Output,
) -> Result<()> {
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
    let failed = if args.yes {
        crate::prune::apply(docker, &plan.remove).await
    } else {
        Vec::new()
    };
    if out.json {
        out.print_json(&serde_json::json!({
            "dry_run": !args.yes,
            "keep_per_recipe": plan.keep_per_recipe,
            "protected": plan.protected,
            "remove": plan.remove,
            "failed": failed.iter().map(|(o, why)| serde_json::json!({"id": o.id, "error": why})).collect::<Vec<_>>(),
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
            println!("nothing to remove: at most {keep} exited container(s) per recipe{kept}");
        } else if args.yes {
            println!(
                "removed {} old container(s), kept the newest {keep} exited per recipe{kept}",
                n - failed.len()
            );
        } else {
            println!(
                "would remove {n} old container(s), keeping the newest {keep} exited per \
                 recipe{kept}; nothing was removed: `sparkctl prune --yes` removes them"
            );
        }
    }
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
