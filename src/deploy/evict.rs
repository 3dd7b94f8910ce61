//! `up --yes` of a model that does not fit beside other models' idle productions: the front
//! door evicts them as a start on demand would (idle ones only; never one that is kept,
//! busy or under a rollout), once confirmed, and the plan is made again. Without `--yes`
//! (and no terminal to ask) the refusal stands, nothing stopped.

use super::start::StartOptions;
use super::switch::{Plan, SwitchContext};
use crate::error::{Error, Result};
use crate::recipe::LoadedRecipe;

/// The plan for `loaded` beside what runs; refused for other models' productions in the
/// way, the plan once the idle ones among them are evicted (`then_plan`).
pub(super) async fn planned(
    ctx: &SwitchContext<'_>,
    loaded: &LoadedRecipe,
    opts: &StartOptions<'_>,
    confirm: &dyn Fn(&str) -> bool,
    progress: &dyn crate::progress::Progress,
) -> Result<Plan> {
    match Plan::new(ctx.shared, loaded, opts).await {
        Err(e @ Error::DoesNotFit { .. }) => {
            then_plan(ctx, loaded, opts, e, confirm, progress).await
        }
        other => other,
    }
}

/// The plan for `loaded` once the idle models `refused` names are evicted; `refused`
/// itself when none is in the way, the eviction is not confirmed, or one would not go.
async fn then_plan(
    ctx: &SwitchContext<'_>,
    loaded: &LoadedRecipe,
    opts: &StartOptions<'_>,
    refused: Error,
    confirm: &dyn Fn(&str) -> bool,
    progress: &dyn crate::progress::Progress,
) -> Result<Plan> {
    let start = super::plan_start(ctx.shared, loaded, opts).await?;
    let in_the_way = crate::models::in_the_way(ctx.shared, loaded, &start.memory);
    if in_the_way.is_empty() {
        return Err(refused);
    }
    let names: Vec<&str> = in_the_way.iter().map(|(_, r)| r.as_str()).collect();
    let question = format!(
        "evict {} (idle, another model's production) to make room for {}?",
        names.join(", "),
        loaded.recipe.name
    );
    if !confirm(&question) {
        return Err(refused);
    }
    let recipes: Vec<String> = names.iter().map(|r| r.to_string()).collect();
    let done = ctx.door.evict(recipes, &loaded.recipe.name).await?;
    for r in &done.evicted {
        progress.step(&format!(
            "{r} evicted to make room (its next request starts it)"
        ));
    }
    if !done.kept.is_empty() {
        for (r, why) in &done.kept {
            progress.step(&format!("{r} kept: {why}"));
        }
        return Err(refused);
    }
    Plan::new(ctx.shared, loaded, opts).await
}
