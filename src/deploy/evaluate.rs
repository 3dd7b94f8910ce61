//! `up`'s evaluation of production: when the recipe's `eval_accuracy` gate compares with
//! production, production is asked the same evaluation items while it still serves (before
//! anything is stopped for a swap), so that both sides answer the very same items on the
//! same day. The sets load here, at the plan: a malformed one fails before anything changes.

use super::switch::SwitchContext;
use crate::error::Result;
use crate::production::Production;
use crate::progress::Progress;
use crate::recipe::LoadedRecipe;

/// The recipe's evaluation sets (None: it names none), loaded before anything else: a
/// malformed set fails the run, a dry run too, before anything changes.
pub(crate) fn sets(
    ctx: &SwitchContext<'_>,
    loaded: &LoadedRecipe,
) -> Result<Option<crate::eval::Plan>> {
    super::eval_plan(loaded, &ctx.recipes.dir)
}

/// Production's answers to those sets, asked now; None when no gate compares with them or
/// production does not serve (its last result's answers are used then, if it has any).
pub(crate) async fn production_answers(
    ctx: &SwitchContext<'_>,
    loaded: &LoadedRecipe,
    sets: Option<&crate::eval::Plan>,
    production: &Production,
    progress: &dyn Progress,
) -> Result<Option<crate::eval::Report>> {
    use crate::bench::gates::{Gate, GateRule};
    let compares = loaded
        .recipe
        .bench
        .iter()
        .flat_map(|b| &b.gates)
        .any(|(name, rule)| {
            GateRule::new(name, rule)
                .is_ok_and(|g| g.gate == Gate::EvalAccuracy && g.rule.of_production)
        });
    let (Some(plan), true, Some(up)) = (sets, compares, production.serving()) else {
        return Ok(None);
    };
    if !crate::frontdoor::alive(ctx.rt(), up).await {
        return Ok(None);
    }
    let items: usize = plan.sets.iter().map(|s| s.items.len()).sum();
    progress.step(&format!(
        "asking production {} the evaluation sets first ({items} items)",
        up.recipe
    ));
    let client = crate::eval::client()?;
    let model = crate::eval::model_at(&client, &up.url).await?;
    Ok(Some(
        crate::eval::evaluate(&client, &up.url, &model, &plan.sets, |_, _, _| {}).await,
    ))
}
