//! `sparkctl eval NAME|URL`: rendering over `eval`.

use std::path::PathBuf;

use super::{with_recipes, Globals, Output};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::eval::gate::{judge, Outcome};
use crate::eval::{Evaluation, Report};
use crate::recipe::RecipeSet;

/// `sparkctl eval`'s arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct EvalArgs {
    /// Recipe name (its running deployment) or base URL (http://127.0.0.1:8003).
    target: String,
    /// An evaluation set: built in (arithmetic, json-shape, tool-calls, instructions), a
    /// name in recipes/evals/, or a .yaml file; repeat for more [default: the recipe's
    /// bench.eval, else every built-in set].
    #[arg(long = "set", value_name = "SET")]
    sets: Vec<String>,
    /// Ask another server the same items (production, say) and pair the answers.
    #[arg(long, value_name = "NAME|URL")]
    against: Option<String>,
    /// Judge the eval_accuracy gate: `>= 60%`, or with --against `>= production - 3`
    /// (points, with the paired test); exit 1 unless it passes.
    #[arg(long, value_name = "RULE")]
    gate: Option<String>,
    /// Where to write the JSON result (every item, both servers' answers).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

impl EvalArgs {
    pub(super) fn exec(self, g: &Globals, out: &Output) -> Result<()> {
        with_recipes(g, out, async |ctx, recipes| {
            run(ctx, recipes, self, out).await
        })
    }
}

/// A URL as given, else the recipe's running deployment.
async fn url_of(ctx: &Context, target: &str) -> Result<String> {
    if target.starts_with("http://") || target.starts_with("https://") {
        return Ok(target.trim_end_matches('/').to_string());
    }
    ctx.runtimes.url_of(target).await
}

async fn run(ctx: &Context, recipes: &RecipeSet, args: EvalArgs, out: &Output) -> Result<()> {
    let rule = match &args.gate {
        Some(r) => Some(
            crate::bench::gates::GateRule::new("eval_accuracy", r)
                .map_err(|e| crate::bench::gates::bad_gate_flag(&e))?
                .rule,
        ),
        None => None,
    };
    if rule.is_some_and(|r| r.of_production) && args.against.is_none() {
        return Err(Error::BadFlag(crate::error::FlagProblem::GateNeedsAgainst));
    }
    let names = match (&args.sets, recipes.get(&args.target)) {
        (given, _) if !given.is_empty() => given.clone(),
        (_, Ok(l)) if l.recipe.bench.as_ref().is_some_and(|b| !b.eval.is_empty()) => l
            .recipe
            .bench
            .as_ref()
            .map(|b| b.eval.clone())
            .unwrap_or_default(),
        _ => crate::eval::built_in_names()
            .iter()
            .map(|s| s.to_string())
            .collect(),
    };
    let sets = crate::eval::load_all(&names, &crate::eval::dir_of(&recipes.dir))?;
    let url = url_of(ctx, &args.target).await?;
    let against = match &args.against {
        Some(a) => Some(url_of(ctx, a).await?),
        None => None,
    };
    let bar = out.bar("{bar:30} {pos}/{len} items · {msg}");
    let e = crate::eval::compare(&url, against.as_deref(), &sets, |done, total, key| {
        bar.at(done as u64, total as u64);
        bar.message(key);
    })
    .await;
    bar.finish();
    let e = e?;
    let judged = rule.map(|r| judge(Some(&e), r.of_production, &|v| r.holds(v)));
    if let Some(path) = &args.out {
        crate::state::write_json(path, &e)?;
    }
    if out.json {
        out.print_json(&Evaluated {
            evaluation: &e,
            gate: judged.as_ref().map(|j| GateJudged {
                rule: args.gate.as_deref(),
                value: j.value(),
                outcome: outcome_word(j.outcome()),
                detail: j.detail(),
            }),
        });
    } else {
        render(out, &e);
    }
    match judged {
        None => Ok(()),
        Some(j) => {
            if !out.json {
                out.say(format_args!(
                    "eval_accuracy {}: {} ({})",
                    args.gate.as_deref().unwrap_or_default(),
                    outcome_word(j.outcome()),
                    j.detail()
                ));
            }
            match j.outcome() {
                Outcome::Pass => Ok(()),
                o => Err(Error::Reported(crate::error::Summary::EvalGate {
                    gate: args.gate.clone().unwrap_or_default(),
                    word: outcome_word(o),
                })),
            }
        }
    }
}

fn outcome_word(o: Outcome) -> &'static str {
    match o {
        Outcome::Pass => "pass",
        Outcome::Fail => "fail",
        Outcome::Inconclusive => "inconclusive",
    }
}

fn render(out: &Output, e: &Evaluation) {
    let side = |name: &str, r: &Report| {
        out.titled(
            "eval",
            format_args!(
                "{name} {} ({}): {}/{} right ({:.1}%) in {:.1} s, {:.0} items per minute",
                r.url(),
                r.model(),
                r.right(),
                r.total(),
                r.accuracy_pct(),
                r.seconds(),
                r.items_per_minute()
            ),
        );
        let mut t = out.table();
        t.set_header(vec![
            "SET",
            "ITEMS",
            "RIGHT",
            "ACCURACY",
            "ITEMS/MIN",
            "NOT ANSWERED",
        ]);
        for s in r.sets() {
            t.add_row(vec![
                s.set().to_string(),
                s.items().to_string(),
                s.right().to_string(),
                format!("{:.1}%", s.accuracy_pct()),
                format!("{:.0}", s.items_per_minute()),
                s.failed().to_string(),
            ]);
        }
        out.print_table(&t);
    };
    side("candidate", e.candidate());
    for i in e.candidate().missed().take(20) {
        out.say(format_args!(
            "  missed {}: {}",
            i.key(),
            i.failed().or(i.why()).unwrap_or("-")
        ));
    }
    if let Some(p) = e.production() {
        side("against", p);
    }
    if let Some(p) = e.paired() {
        out.say(format_args!("paired: {}", p.describe()));
        for k in p.lost().iter().take(20) {
            out.say(format_args!("  lost {k}"));
        }
    }
}

/// `eval --json`: the evaluation and, with `--gate`, how it was judged.
#[derive(serde::Serialize)]
struct Evaluated<'a> {
    evaluation: &'a Evaluation,
    gate: Option<GateJudged<'a>>,
}

#[derive(serde::Serialize)]
struct GateJudged<'a> {
    rule: Option<&'a str>,
    value: Option<f64>,
    outcome: &'static str,
    detail: &'a str,
}
