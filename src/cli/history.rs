//! `sparkctl history [show RUN]`: rendering over `history` and the job records.

use clap::{Args, Subcommand};

use super::{in_context, with_recipes, Globals, Output};
use crate::context::Context;
use crate::error::Result;

/// `sparkctl history`'s subcommand: none lists the runs.
#[derive(Debug, Args)]
pub(crate) struct HistoryArgs {
    #[command(subcommand)]
    show: Option<HistoryCommand>,
    /// Only the runs of this model's recipes, when several models are served (its served
    /// name, or the recipe serving the unnamed one).
    #[arg(long, value_name = "MODEL")]
    model: Option<String>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum HistoryCommand {
    Show {
        run: String,
    },
    /// What each start took, step by step (the last 20 per recipe), and their p50.
    Starts {
        /// Only this recipe's.
        recipe: Option<String>,
    },
}

impl HistoryArgs {
    pub(super) fn exec(self, g: &Globals, out: &Output) -> Result<()> {
        let run = match self.show {
            Some(HistoryCommand::Starts { recipe }) => {
                return in_context(g, async |ctx| starts(ctx, recipe.as_deref(), out));
            }
            Some(HistoryCommand::Show { run }) => Some(run),
            None => None,
        };
        match self.model {
            Some(model) => with_recipes(g, out, async |ctx, recipes| {
                let file = crate::models::book(&ctx.state, recipes);
                let model = crate::models::known(&file, recipes, &model)?;
                let of_model = |recipe: &str| {
                    recipes
                        .get(recipe)
                        .is_ok_and(|l| crate::models::of(&l.recipe) == model)
                };
                history(ctx, run.as_deref(), &of_model, out)
            }),
            None => in_context(g, async |ctx| history(ctx, run.as_deref(), &|_| true, out)),
        }
    }
}

/// The runs (`shown`: of the recipes it says), or the run `run`.
fn history(
    ctx: &Context,
    run: Option<&str>,
    shown: &dyn Fn(&str) -> bool,
    out: &Output,
) -> Result<()> {
    if let Some(run) = run {
        // A job run's id names its record in jobs/ (the lineage `history` points at).
        let job = ctx.state.job_record_file(run)?;
        if job.is_file() {
            let record: crate::job::JobRecord = crate::state::read_json(&job)?;
            out.print_json(&record);
            return Ok(());
        }
        let record = crate::history::run_record(&ctx.state, run)?;
        out.print_json(&record);
        return Ok(());
    }
    let (mut runs, damaged) = crate::history::history(&ctx.state)?;
    runs.retain(|r| shown(&r.recipe));
    let none = || format!("no runs yet (state dir {})", ctx.state.root().display());
    if out.list_said_all(&runs, &damaged, none) {
        return Ok(());
    }
    let mut t = out.table();
    t.set_header(vec![
        "RUN",
        "COMMAND",
        "RECIPE",
        "OUTCOME",
        "DIGEST",
        "TTFT p50",
        "DECODE p50",
        "SERVING AFTER",
    ]);
    for r in &runs {
        t.add_row(vec![
            r.run_id.clone(),
            r.command.to_string(),
            r.recipe.clone(),
            r.outcome.to_string(),
            r.image_digest
                .as_deref()
                .map(|d| crate::units::short_id(d).to_string())
                .unwrap_or_else(|| "-".into()),
            r.ttft_p50_ms.map_or("-".into(), |v| format!("{v:.1}")),
            r.decode_tps_p50.map_or("-".into(), |v| format!("{v:.1}")),
            r.serving.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    out.print_table(&t);
    for r in runs.iter().filter(|r| r.produced_by.is_some()) {
        if let Some(l) = &r.produced_by {
            out.say(format_args!("{}: {}'s model {l}", r.run_id, r.recipe));
        }
    }
    // How each rollout went: the traffic both ways, the decision and why.
    for r in runs.iter() {
        let Some(ro) = &r.rollout else { continue };
        let j = &ro.judgement;
        out.say(format_args!(
            "{} {}: {} {} after {} compared ({} to the candidate, {} dropped, {} retried on \
             production): {}",
            r.run_id,
            r.recipe,
            ro.spec.mode.as_str(),
            j.decision.as_str(),
            j.compared,
            ro.tally.to_candidate,
            ro.tally.dropped,
            ro.tally.retried,
            j.reason
        ));
    }
    // What made the watch bring production back, with what it answered.
    for r in runs.iter().filter(|r| !r.evidence.is_empty()) {
        out.say(format_args!(
            "{} {} {}: {}",
            r.run_id,
            r.command,
            r.recipe,
            r.error.as_deref().unwrap_or("-")
        ));
        for e in &r.evidence {
            out.say(format_args!("  evidence: {e}"));
        }
    }
    Ok(())
}

/// `history starts [RECIPE]`: each kept start's steps, oldest first, and each recipe's p50.
fn starts(ctx: &Context, recipe: Option<&str>, out: &Output) -> Result<()> {
    let mut all = crate::starts::all(&ctx.state);
    all.retain(|name, _| recipe.is_none_or(|r| r == name));
    if out.json {
        out.print_json(&all);
        return Ok(());
    }
    if all.is_empty() {
        out.say("no starts measured yet");
        return Ok(());
    }
    let mut t = out.table();
    let mut header = vec!["RECIPE", "AT", "DEPLOYMENT"];
    header.extend(
        crate::runtime::ready::Phases::default()
            .steps()
            .map(|(name, _)| name),
    );
    t.set_header(header);
    for (name, kept) in &all {
        for s in kept {
            let mut row = vec![
                name.clone(),
                s.at.clone(),
                crate::units::short_id(&s.deployment).to_string(),
            ];
            row.extend(s.phases.steps().map(|(_, ms)| format!("{:.2} s", ms / 1e3)));
            t.add_row(row);
        }
    }
    out.print_table(&t);
    for (name, kept) in &all {
        if let Some(s) = crate::starts::summary(kept) {
            out.say(format_args!(
                "{name}: p50 {:.2} s of {} starts",
                s.p50_s, s.of
            ));
        }
    }
    Ok(())
}
