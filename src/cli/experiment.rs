//! `sparkctl try NAME --vary KEY=V1|V2 …`: flags and rendering over `experiment`.

use std::io::Write as _;

use super::{with_recipes, Globals, Output};
use crate::context::Context;
use crate::error::{Error, Result, TryProblem};
use crate::experiment::{self, compare, Trial};
use crate::recipe::RecipeSet;

/// `sparkctl try`'s flags.
#[derive(Debug, clap::Args)]
pub(crate) struct TryArgs {
    /// The recipe whose variants run (variant 0: as it is).
    #[arg(required_unless_present = "resume")]
    name: Option<String>,
    /// A change every variant but the base gets: image=TAG, server.args+=--flag [value],
    /// server.args-=--flag, server.args=--flag=value, server.env.NAME=V, model.path=P,
    /// server.memory_gb=N.
    #[arg(long, value_name = "KEY=VALUE")]
    with: Vec<String>,
    /// One axis of variants: KEY=V1|V2|… (the keys of --with; `~` leaves it unchanged,
    /// `\|` is a bar in a value). Several --vary make every combination.
    #[arg(long, value_name = "KEY=V1|V2")]
    vary: Vec<String>,
    /// Vary a field of every suite request: FIELD=V1|V2 (a dotted path, e.g.
    /// chat_template_kwargs.enable_thinking=true|false; values read as JSON where they can).
    #[arg(long, value_name = "FIELD=V1|V2")]
    request: Vec<String>,
    #[command(flatten)]
    measure: super::bench::Measure,
    /// At most this many variants beside the base.
    #[arg(long, default_value_t = 16, value_name = "N")]
    max: usize,
    /// A variant that does not fit beside production: hold production's requests at the
    /// front door and stop it while that variant runs (it serves again after).
    #[arg(long)]
    allow_swap: bool,
    /// Show every variant (its name, what differs, its full command); start nothing.
    #[arg(long)]
    dry_run: bool,
    /// Go on with a try that was interrupted: its variants not measured yet.
    #[arg(long, value_name = "ID", conflicts_with_all = ["with", "vary", "request", "dry_run"])]
    resume: Option<String>,
    /// Write the chosen variant as recipe NAME (recipes/NAME.yaml, on a free port of its
    /// own): `up NAME` then promotes it the usual way.
    #[arg(long, value_name = "NAME")]
    save: Option<String>,
    /// The variant --save writes [default: the best decode p50 among those that passed
    /// every gate].
    #[arg(long, value_name = "N", requires = "save")]
    pick: Option<usize>,
}

impl TryArgs {
    pub(super) fn exec(self, g: &Globals, out: &Output) -> Result<()> {
        with_recipes(g, out, async |ctx, recipes| {
            run(ctx, recipes, self, out).await
        })
    }
}

async fn run(ctx: &Context, recipes: &RecipeSet, args: TryArgs, out: &Output) -> Result<()> {
    let flow = crate::deploy::switch::SwitchContext::open(ctx, recipes, &[], true, false).await?;
    let opts = experiment::Options {
        with: args.with,
        vary: args.vary,
        request: args.request,
        repeat: args.measure.repeat.unwrap_or(2).max(1),
        max: args.max,
        allow_swap: args.allow_swap,
        suite: args.measure.suite,
        runs: args.measure.runs,
        warmup: args.measure.warmup,
        progress: out,
    };
    let trial = match (&args.resume, &args.name) {
        (Some(id), _) => Trial::load(&ctx.state, id)?,
        (None, Some(name)) => experiment::plan(&flow, name, &opts).await?,
        (None, None) => unreachable!("clap requires NAME or --resume"),
    };
    if args.dry_run {
        match out.json {
            true => out.print_json(&trial),
            false => print_plan(&trial, out),
        }
        return Ok(());
    }
    let trial = experiment::run(&flow, trial, &opts).await?;
    let saved = match &args.save {
        Some(name) => Some(save(&trial, recipes, name, args.pick)?),
        None => None,
    };
    if out.json {
        out.print_json(&serde_json::json!({
            "try": &trial,
            "kept": trial.path(&ctx.state)?,
            "report": trial.path(&ctx.state)?.with_extension("html"),
            "picked": compare::pick(&trial),
            "saved": saved,
        }));
        return Ok(());
    }
    print_result(&trial, out);
    let kept = trial.path(&ctx.state)?;
    out.say(format_args!(
        "kept in {}; its report: {}",
        kept.display(),
        kept.with_extension("html").display()
    ));
    if let Some(path) = saved {
        out.say(format_args!(
            "saved as {} — `sparkctl up {}` promotes it the usual way",
            path.display(),
            args.save.unwrap_or_default()
        ));
    }
    Ok(())
}

fn print_plan(trial: &Trial, out: &Output) {
    out.say(format_args!(
        "try {}: {} variants (variant 0 is the base), {} run(s) of the suite each",
        trial.recipe,
        trial.variants.len(),
        trial.repeat
    ));
    for v in &trial.variants {
        let swap = if v.swaps {
            " [stops production while it runs]"
        } else {
            ""
        };
        out.say(format_args!("  {} {}: {}{swap}", v.index, v.name, v.label));
        out.say(format_args!(
            "      {}",
            crate::recipe::resolve_shell_line(&v.command)
        ));
        for (k, val) in &v.request {
            out.say(format_args!("      every request: {k} = {val}"));
        }
    }
}

fn print_result(trial: &Trial, out: &Output) {
    let mut t = out.table();
    t.set_header(vec![
        "#",
        "VARIANT",
        "CHANGES",
        "TTFT p50",
        "DECODE p50",
        "VS BASE",
        "GATES",
        "EVAL",
        "START",
        "HELD",
    ]);
    for v in &trial.variants {
        let (decode, ttft) = compare::against_base(trial, v);
        let row = match &v.measured {
            Some(m) if m.failed.is_none() => vec![
                compare::ms(m.ttft_p50_ms),
                compare::tps(m.decode_tps_p50),
                format!("decode {decode}, TTFT {ttft}"),
                gates(m),
                m.eval_accuracy_pct
                    .map_or("–".into(), |a| format!("{a:.0}%")),
                m.start_s.map_or("–".into(), |s| format!("{s:.1} s")),
                m.held_gb.map_or("–".into(), |g| format!("{g:.2} GB")),
            ],
            Some(m) => {
                let why = m.failed.as_deref().unwrap_or_default();
                vec![format!(
                    "failed: {}",
                    why.lines().next().unwrap_or_default()
                )]
            }
            None => vec!["not measured".into()],
        };
        let mut cells = vec![v.index.to_string(), v.name.clone(), v.label.clone()];
        cells.extend(row);
        t.add_row(cells);
    }
    out.print_table(&t);
    for m in trial.variants.iter().filter_map(|v| v.measured.as_ref()) {
        if let Some(line) = &m.eval_vs_base {
            out.say(format_args!("evaluation: {line}"));
        }
    }
    match compare::pick(trial) {
        Some(i) => out.say(format_args!(
            "best decode p50 among the variants that passed every gate: variant {i} ({})",
            trial.variants[i].label
        )),
        None => out.say("no variant passed every gate"),
    }
}

fn gates(m: &experiment::Measured) -> String {
    let failed: Vec<&str> = (m.gates.iter())
        .filter(|g| g.outcome == crate::bench::gates::GateOutcome::Fail)
        .map(|g| g.gate.as_str())
        .collect();
    match (m.verdict, failed.is_empty()) {
        (_, false) => format!("FAIL: {}", failed.join(", ")),
        (Some(v), true) => v.to_string(),
        (None, true) => "–".into(),
    }
}

/// Writes the chosen variant (`pick`, else the default pick) as recipe `name`, on a free
/// port (each recipe serves on its own; the front door's is production's) and with the
/// base's fallback and rollout, a comment saying where it came from.
fn save(
    trial: &Trial,
    recipes: &RecipeSet,
    name: &str,
    pick: Option<usize>,
) -> Result<std::path::PathBuf> {
    let Some(i) = pick.or_else(|| compare::pick(trial)) else {
        return Err(Error::Try(TryProblem::NothingPassed));
    };
    let last = trial.variants.len() - 1;
    let v =
        (trial.variants.get(i)).ok_or(Error::Try(TryProblem::PickOutOfRange { pick: i, last }))?;
    if !v.passed() {
        let label = v.label.clone();
        return Err(Error::Try(TryProblem::PickFailed { pick: i, label }));
    }
    let path = recipes.dir.join(format!("{name}.yaml"));
    if path.exists() || recipes.knows(name) {
        return Err(Error::Try(TryProblem::SaveExists { path }));
    }
    let base = recipes.get(&trial.recipe)?;
    let mut recipe = v.recipe.clone();
    recipe.name = name.to_string();
    recipe.server.port = experiment::free_port(&recipe.server.host)?;
    recipe.fallback = base.recipe.fallback.clone();
    recipe.rollout = base.recipe.rollout.clone();
    let body = serde_yaml_ng::to_string(&recipe)
        .map_err(|e| Error::Try(TryProblem::Serialize(e.to_string())))?;
    let text = format!(
        "# Variant {i} of `sparkctl try {}` (try {}, {}): {}\n{body}",
        trial.recipe, trial.id, trial.started_at, v.label
    );
    crate::recipe::parse_recipe(&path, text.as_bytes())?;
    let tmp = path.with_extension("yaml.tmp");
    let mut f = std::fs::File::create(&tmp)
        .map_err(|e| Error::io(format!("cannot write {}", tmp.display()), e))?;
    f.write_all(text.as_bytes())
        .and_then(|_| f.sync_all())
        .map_err(|e| Error::io(format!("cannot write {}", tmp.display()), e))?;
    std::fs::rename(&tmp, &path)
        .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))?;
    Ok(path)
}
