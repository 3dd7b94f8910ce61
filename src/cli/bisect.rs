//! `sparkctl bisect NAME --good REF --bad REF`: flags and rendering over `bisect`.

use super::{with_recipes, Globals, Output};
use crate::bisect::{self, Bisect, Criterion, Report, Role, Verdict};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::recipe::RecipeSet;
use crate::units::short_digest;

/// Runs of the suite per round when `--repeat` is not given: an interval needs two.
const ROUND_REPEAT: usize = 3;

/// `sparkctl bisect`'s flags.
#[derive(Debug, clap::Args)]
pub(crate) struct BisectArgs {
    /// The recipe whose image regressed.
    name: String,
    /// A digest that was good: a digest (a unique prefix will do), a run id, or a date
    /// (what this machine had by then).
    #[arg(long, value_name = "REF", required_unless_present = "resume")]
    good: Option<String>,
    /// A later digest that is bad (same forms as --good).
    #[arg(long, value_name = "REF", required_unless_present = "resume")]
    bad: Option<String>,
    /// Judge each digest on this metric's p50, nearer the good end's or the bad end's
    /// (ttft_p50, ttfo_p50, tpot_p50, itl_p50, e2el_p50, decode_tps_p50) [default: the
    /// metric that differs most between the ends, beyond the noise].
    #[arg(long, value_name = "METRIC", conflicts_with = "gate")]
    metric: Option<String>,
    /// Judge each digest on a gate: pass is good, fail is bad ('decode_tps_p50=>= 30').
    #[arg(long, value_name = "NAME=RULE")]
    gate: Option<String>,
    #[command(flatten)]
    measure: super::bench::Measure,
    /// Rounds a digest gets before it is left inconclusive (the bisect stops there, and
    /// --resume measures it again).
    #[arg(long, default_value_t = 4, value_name = "N")]
    rounds: usize,
    /// When a step needs production's memory, hold production's requests at the front door
    /// and stop it while the step runs (it serves again between steps).
    #[arg(long)]
    allow_swap: bool,
    /// Walk the builds of a process recipe's binary instead of image digests: every
    /// executable with the binary's file name in DIR or a directory right below it, known by
    /// its sha256, oldest first by modification time (REFs may name a build by its path).
    #[arg(long, value_name = "DIR", conflicts_with = "resume")]
    builds: Option<std::path::PathBuf>,
    /// Go on with this recipe's unfinished bisect from its recorded measurements.
    #[arg(long, conflicts_with_all = ["good", "bad", "fresh", "metric", "gate"])]
    resume: bool,
    /// Abandon this recipe's unfinished bisect and start over.
    #[arg(long)]
    fresh: bool,
    /// Show the digests in the range and how many steps it takes; start nothing.
    #[arg(long)]
    dry_run: bool,
}

impl BisectArgs {
    pub(super) fn exec(self, g: &Globals, out: &Output) -> Result<()> {
        with_recipes(g, out, async |ctx, recipes| {
            run(ctx, recipes, self, out).await
        })
    }
}

async fn run(ctx: &Context, recipes: &RecipeSet, args: BisectArgs, out: &Output) -> Result<()> {
    let criterion = match (&args.metric, &args.gate) {
        (Some(m), _) => Criterion::Metric(bisect::parse_metric(m).map_err(Error::Usage)?),
        (_, Some(g)) => Criterion::check_gate(g).map_err(Error::Usage)?,
        _ => Criterion::Differs,
    };
    // Only asked of a running front door, never started: production is whatever serves.
    let flow = crate::deploy::switch::SwitchContext::open(ctx, recipes, &[], true, false).await?;
    let confirm = |question: &str| out.confirm(question);
    let opts = bisect::Options {
        good: args.good,
        bad: args.bad,
        criterion,
        suite: args.measure.suite,
        runs: args.measure.runs,
        warmup: args.measure.warmup,
        repeat: args.measure.repeat.unwrap_or(ROUND_REPEAT),
        rounds: args.rounds,
        allow_swap: args.allow_swap,
        builds: args.builds,
        resume: args.resume,
        fresh: args.fresh,
        dry_run: args.dry_run,
        confirm: &confirm,
        progress: out,
    };
    let report = bisect::bisect(&flow, &args.name, &opts).await?;
    if out.json {
        out.print_json(&Found {
            bisect: report.bisect(),
            diff: report
                .diff()
                .as_ref()
                .map(|d| d.as_ref().map_err(String::as_str)),
        });
    } else if args.dry_run {
        print_plan(report.bisect(), out);
    } else {
        print_answer(&report, out);
    }
    Ok(())
}

fn print_plan(b: &Bisect, out: &Output) {
    let n = b.digests().len();
    out.say(format_args!(
        "bisect {}: {n} digests of {} from {} (good) to {} (bad), {}",
        b.recipe(),
        b.reference(),
        short_digest(b.good_end()),
        short_digest(b.bad_end()),
        order_words(b)
    ));
    let mut t = out.table();
    t.set_header(vec!["#", "DIGEST", "CREATED", "FIRST SEEN"]);
    for (i, c) in b.digests().iter().enumerate() {
        t.add_row(vec![
            (i + 1).to_string(),
            short_digest(c.digest()),
            created(c.created()),
            c.first_seen().to_string(),
        ]);
    }
    out.print_table(&t);
    out.say(format_args!(
        "judged on {}; both ends measured first, then at most {} step(s); each measurement: \
         up to {} round(s) of {} run(s) of the suite {}\nnothing was started (--dry-run)",
        b.criterion().describe(b.chosen()),
        bisect::steps_for(n.saturating_sub(2)),
        b.plan().rounds(),
        b.plan().repeat(),
        b.plan().suite()
    ));
}

fn order_words(b: &Bisect) -> &'static str {
    match b.order() {
        crate::images::history::Order::Created => "oldest build first",
        crate::images::history::Order::FirstSeen => "in the order this machine first saw them",
    }
}

fn created(c: Option<&str>) -> String {
    c.map_or("-".into(), |c| {
        c.chars().take(19).collect::<String>().replace('T', " ")
    })
}

fn print_answer(r: &Report, out: &Output) {
    let b = r.bisect();
    let answer = b.answer().expect("a finished bisect has its answer");
    out.say(format_args!(
        "\nbisect {} ({} digests, {}), judged on {}:",
        b.recipe(),
        b.digests().len(),
        order_words(b),
        b.criterion().describe(b.chosen())
    ));
    evidence(b, out);
    let when = |d: &str| {
        b.digests()
            .iter()
            .find(|c| c.digest() == d)
            .and_then(|c| c.created())
            .map_or(String::new(), |c| format!(" (built {})", created(Some(c))))
    };
    out.say(format_args!(
        "first bad: {}{}\nlast good: {}{}",
        b.label(r.history(), answer.first_bad()),
        when(answer.first_bad()),
        b.label(r.history(), answer.last_good()),
        when(answer.last_good())
    ));
    if !answer.unmeasured().is_empty() {
        let list: Vec<String> = answer
            .unmeasured()
            .iter()
            .map(|d| short_digest(d))
            .collect();
        out.say(format_args!(
            "between them, not measurable (the change may be in one of them): {}",
            list.join(", ")
        ));
    }
    let secs: Vec<f64> = b.measurements().values().map(|m| m.seconds()).collect();
    let total: f64 = secs.iter().sum();
    out.say(format_args!(
        "{} step(s) after the 2 ends; {} measurement(s) in {total:.0} s, {:.1} s each on average",
        b.steps(),
        secs.len(),
        total / secs.len().max(1) as f64
    ));
    match r.diff() {
        Some(Ok(d)) => {
            out.say(format_args!(
                "what changed ({} -> {}):",
                short_digest(answer.last_good()),
                short_digest(answer.first_bad())
            ));
            super::images::print_diff(d, out);
        }
        Some(Err(e)) => out.say(format_args!("what changed is not known: {e}")),
        None => {}
    }
    if b.builds().is_none() {
        out.say(format_args!(
            "both are kept for good (`sparkctl images history {}`); each measurement is a run \
             record (`sparkctl history`)",
            b.recipe()
        ));
    } else {
        out.say("each measurement is a run record (`sparkctl history`)");
    }
}

/// One row per digest in the range: measured ones with their figure and verdict.
fn evidence(b: &Bisect, out: &Output) {
    let figure = match b.metric() {
        Some(m) => format!("{} p50 (95% interval)", m.name().to_uppercase()),
        None => "GATE VALUE (95% interval)".into(),
    };
    let mut t = out.table();
    t.set_header(vec![
        "#", "DIGEST", "CREATED", "ROLE", "ROUNDS", &figure, "VERDICT", "TIME",
    ]);
    for (i, c) in b.digests().iter().enumerate() {
        let Some(m) = b.measurements().get(c.digest()) else {
            t.add_row(vec![
                (i + 1).to_string(),
                short_digest(c.digest()),
                created(c.created()),
                "-".into(),
                "-".into(),
                "-".into(),
                "not measured".into(),
                "-".into(),
            ]);
            continue;
        };
        let role = match m.role() {
            Role::GoodEnd => "good end".to_string(),
            Role::BadEnd => "bad end".to_string(),
            Role::Step => format!("step {}", m.step()),
        };
        let value = match (b.metric(), m.judgement()) {
            (Some(x), _) => m.pooled().get(&x).map_or("-".into(), |i| {
                format!("{:.1} [{:.1}, {:.1}] n={}", i.mean, i.low, i.high, i.n)
            }),
            (None, Some(j)) => match (j.value(), j.interval()) {
                (Some(v), Some((lo, hi))) => format!("{v:.1} [{lo:.1}, {hi:.1}]"),
                (Some(v), None) => format!("{v:.1}"),
                _ => "-".into(),
            },
            _ => "-".into(),
        };
        let verdict = match (m.skipped(), m.verdict()) {
            (Some(_), _) => "skipped",
            (_, Some(Verdict::Good)) => "good",
            (_, Some(Verdict::Bad)) => "bad",
            _ => "inconclusive",
        };
        t.add_row(vec![
            (i + 1).to_string(),
            short_digest(c.digest()),
            created(c.created()),
            role,
            m.rounds().len().to_string(),
            value,
            verdict.to_string(),
            format!("{:.1} s", m.seconds()),
        ]);
    }
    out.print_table(&t);
}

/// `bisect --json`: the bisect as recorded, and what changed at the first bad digest (or
/// why that is not known).
#[derive(serde::Serialize)]
struct Found<'a> {
    bisect: &'a Bisect,
    diff: Option<std::result::Result<&'a crate::images::ImageDiff, &'a str>>,
}
