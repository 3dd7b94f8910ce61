//! `up`'s rollout (`crate::rollout`): refused before anything changes when it cannot run,
//! then the candidate that passed its gates meets live traffic through the front door until
//! the analysis decides; the decision, its comparison and its evidence go into the record.

use super::switch::{self, Mode, Plan, SwitchContext};
use crate::error::{DoorProblem, Error, RecipeProblem, Result};
use crate::history::{Outcome, PhaseName, RunRecord};
use crate::production::Production;
use crate::progress::Progress;
use crate::recipe::rollout::Asked;
use crate::recipe::LoadedRecipe;
use crate::rollout::{Decision, Spec};
use crate::runtime::Deployment;

/// The rollout the flags and the recipe ask for, if any.
pub(super) fn spec(loaded: &LoadedRecipe, asked: &Asked) -> Result<Option<Spec>> {
    crate::recipe::rollout::spec(&loaded.recipe, asked).map_err(|b| {
        Error::BadFlag(crate::error::FlagProblem::Rollout {
            at: b.at,
            why: b.why,
        })
    })
}

/// The rollout asked, refused before anything changes when it cannot run: both servers
/// must run side by side, with a production to compare with.
pub(super) fn plan(
    name: &str,
    spec: Option<Spec>,
    plan: &Plan,
    (no_promote, production, serving): (bool, &Production, bool),
    progress: &dyn Progress,
) -> Result<Option<Spec>> {
    let Some(spec) = spec else {
        return Ok(None);
    };
    let mode = spec.mode.as_str();
    let cannot = |why: RecipeProblem| Error::RecipeCannot {
        recipe: name.to_string(),
        why,
    };
    if no_promote {
        return Err(Error::BadFlag(
            crate::error::FlagProblem::NoPromoteInRollout { mode },
        ));
    }
    let prod = production.current.as_ref().map(|e| e.recipe.as_str());
    match (prod, plan.mode, serving) {
        (None, ..) | (_, _, false) => Err(cannot(RecipeProblem::RolloutWithoutProduction { mode })),
        (Some(p), Mode::Swap, _) => Err(cannot(RecipeProblem::RolloutDoesNotFit {
            mode,
            production: p.to_string(),
            memory: plan.start.memory.describe(),
        })),
        (Some(_), Mode::BlueGreen, true) => {
            progress.step(&format!("rollout: {}", spec.describe()));
            Ok(Some(spec))
        }
    }
}

/// The candidate meets production's live traffic until the analysis decides: promoted
/// (the switch follows), or aborted or inconclusive (the way back stops it).
pub(super) async fn run(
    ctx: &SwitchContext<'_>,
    spec: &Spec,
    candidate: &Deployment,
    record: &mut RunRecord,
    progress: &dyn Progress,
) -> Result<()> {
    let name = record.recipe.clone();
    let asking = crate::rollout::Asking {
        spec: spec.clone(),
        candidate: switch::upstream_of(candidate),
        owner: crate::host::ProcessId::of(std::process::id()),
    };
    let mode = spec.mode.as_str();
    progress.step(&format!(
        "{mode}: {} meets production's live traffic ({})",
        name,
        spec.describe()
    ));
    let door = ctx.door.clone();
    let began = std::time::Instant::now();
    door.start_rollout(&asking).await?;
    let mut told = std::time::Instant::now();
    let last = loop {
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        let Some(now) = door.rollout().await? else {
            return Err(Error::DoorFailed(DoorProblem::RolloutEnded {
                mode,
                name: name.to_string(),
            }));
        };
        if now.judgement.decision != Decision::Going {
            break now;
        }
        if told.elapsed() >= std::time::Duration::from_secs(5) {
            told = std::time::Instant::now();
            progress.step(&format!(
                "{mode}: {} of {} requests to the candidate compared",
                now.judgement.compared, now.tally.to_candidate
            ));
        }
    };
    let _ = door.end_rollout().await;
    let j = &last.judgement;
    record.phases.push(crate::history::Phase {
        name: PhaseName::Rollout,
        ms: began.elapsed().as_secs_f64() * 1e3,
        ok: j.decision == Decision::Promote,
        detail: format!("{mode} {}: {}", j.decision.as_str(), j.reason),
    });
    for c in &j.comparisons {
        progress.step(&format!("{mode}: {}", c.detail));
    }
    if let Some(e) = &j.evidence {
        record.evidence.push(e.describe());
    }
    record.rollout = Some(last.clone());
    match j.decision {
        Decision::Promote | Decision::Going => {
            progress.step(&format!("{mode}: {}", j.reason));
            Ok(())
        }
        Decision::Abort => {
            record.outcome = Outcome::Rejected;
            let mut failed = vec![format!("{mode} aborted: {}", j.reason)];
            failed.extend(j.evidence.as_ref().map(|e| e.describe()));
            Err(Error::RejectedByGates { name, failed })
        }
        Decision::Inconclusive => {
            record.outcome = Outcome::Inconclusive;
            Err(Error::Inconclusive {
                name,
                what: if spec.mode == crate::rollout::Mode::Shadow {
                    "the shadow"
                } else {
                    "the canary"
                },
                reason: j.reason.clone(),
            })
        }
    }
}
