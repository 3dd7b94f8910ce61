//! `sparkctl bench NAME|URL` and `bench compare A.json B.json`: rendering over `bench`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{with_recipes, Globals, Output};
use crate::bench as engine;
use crate::bench::gates::GateOutcome;
use crate::bench::report;
use crate::bench::result::{BenchResult, Verdict};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::recipe::RecipeSet;

/// What is measured and how often: the flags `bench` and `bisect` share.
#[derive(Debug, clap::Args)]
pub(crate) struct Measure {
    /// Suite: built-in voice-assistant, a name in recipes/suites/, a file, or `captured`
    /// (production's captured traffic) [default: the recipe's bench.suite].
    #[arg(long, value_name = "SUITE")]
    pub(in crate::cli) suite: Option<String>,
    /// Measured runs per case in each run of the suite (the suite says; at least 5).
    #[arg(long, value_name = "N")]
    pub(in crate::cli) runs: Option<usize>,
    /// Warm-up runs per case, reported apart as cold start (the suite says).
    #[arg(long, value_name = "N")]
    pub(in crate::cli) warmup: Option<usize>,
    /// Runs of the whole suite: each figure's p50 gets a CV and a 95% interval, and a gate
    /// whose interval holds its threshold is inconclusive [default: bench: the recipe's
    /// bench.load.repeat, else 1; bisect: 3 per round, at least 2; try: 2].
    #[arg(long, value_name = "N")]
    pub(in crate::cli) repeat: Option<usize>,
}

/// `sparkctl bench`'s arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct BenchArgs {
    /// Recipe name (its running deployment) or base URL (http://127.0.0.1:8003).
    target: Option<String>,
    #[command(subcommand)]
    compare: Option<BenchCommand>,
    #[command(flatten)]
    measure: Measure,
    /// Replay captured traffic instead of a suite: `captured` (what the front door
    /// captured, `frontdoor capture on`) or a capture file. Each request is sent once as it
    /// came, with the gaps it arrived with, or at --concurrency/--rate when given.
    #[arg(long, value_name = "FILE|captured", conflicts_with = "suite")]
    replay: Option<String>,
    /// Closed-loop load levels: this many simultaneous streams each (e.g. 4,16).
    #[arg(long, value_delimiter = ',', value_name = "N,N")]
    concurrency: Vec<usize>,
    /// An open-loop load level: requests per second, sent on schedule whatever the server does.
    #[arg(long, value_name = "REQ/S")]
    rate: Option<f64>,
    /// Arrivals of open-loop levels: poisson (seeded exponential gaps) or constant.
    #[arg(long, value_name = "KIND", value_parser = parse_arrival)]
    arrival: Option<engine::load::Arrival>,
    /// Seed of the Poisson arrivals (the same seed sends at the same times) [default: 1].
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// Requests per load level [default: 40].
    #[arg(long, value_name = "N")]
    requests: Option<usize>,
    /// Step the load until the server saturates, and name the knee: concurrency:1,2,4,8
    /// or rate:1,2,4,8.
    #[arg(long, value_name = "KIND:LEVELS", value_parser = parse_sweep)]
    sweep: Option<engine::load::Sweep>,
    /// Objectives a request must meet to count toward goodput: ttft=500ms,tpot=50ms
    /// (e2el too) [default: the recipe's bench.slo].
    #[arg(long, value_name = "KEY=DURATION,…", value_parser = parse_slo)]
    slo: Option<engine::slo::Slo>,
    /// Ask one question behind prior contexts of these many tokens, cold and warm (e.g. 0,4096,16384).
    #[arg(long, value_delimiter = ',', value_name = "TOKENS,…")]
    depth: Vec<usize>,
    /// A gate, as in recipes (`thinking_leak='== 0%'`); adds to or overrides the recipe's.
    #[arg(long = "gate", value_name = "NAME=RULE")]
    gates: Vec<String>,
    /// The production backend's result, for the vs_production_* gates.
    #[arg(long, value_name = "FILE")]
    baseline: Option<PathBuf>,
    /// Peak memory bandwidth of the device that serves, GB/s: the roofline's bound, over
    /// the recipe's, the host's and the GPU's (a URL on another machine has none without it).
    #[arg(long, value_name = "GB/S")]
    bandwidth_gbps: Option<f64>,
    /// Where to write the JSON result [default: STATE/bench/RUN-NAME.json]; the HTML
    /// report, per-request JSONL and CSV go beside it.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

#[derive(Debug, clap::Subcommand)]
pub(crate) enum BenchCommand {
    /// Compare benchmark results side by side (the first is the reference).
    Compare {
        #[arg(required = true, num_args = 2.., value_name = "RESULT.json")]
        results: Vec<PathBuf>,
        /// Also draw TTFT per case and turn and decode speed as SVG.
        #[arg(long, value_name = "FILE")]
        svg: Option<PathBuf>,
        /// Also write one HTML report of all of them side by side.
        #[arg(long, value_name = "FILE")]
        html: Option<PathBuf>,
    },
}

fn parse_arrival(s: &str) -> std::result::Result<engine::load::Arrival, String> {
    s.parse()
}

fn parse_sweep(s: &str) -> std::result::Result<engine::load::Sweep, String> {
    s.parse()
}

fn parse_slo(s: &str) -> std::result::Result<engine::slo::Slo, String> {
    s.parse()
}

fn read_result(path: &Path) -> Result<BenchResult> {
    let text =
        std::fs::read(path).map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
    serde_json::from_slice(&text).map_err(|e| {
        Error::Usage(format!(
            "{} is not a sparkctl bench result ({e})",
            path.display()
        ))
    })
}

impl BenchArgs {
    pub(super) fn exec(self, g: &Globals, out: &Output) -> Result<()> {
        match self.compare {
            Some(BenchCommand::Compare {
                ref results,
                ref svg,
                ref html,
            }) => compare(results, svg.as_deref(), html.as_deref(), out),
            None => with_recipes(g, out, async |ctx, recipes| {
                run(ctx, recipes, self, out).await
            }),
        }
    }

    /// The flags over the recipe's bench section, as given.
    fn overrides(&self) -> engine::Overrides {
        engine::Overrides {
            suite: self.measure.suite.clone(),
            replay: self.replay.clone(),
            options: engine::Options {
                warmup: self.measure.warmup,
                runs: self.measure.runs,
                repeat: self.measure.repeat,
                concurrency: self.concurrency.clone(),
                rate: self.rate,
                arrival: self.arrival,
                seed: self.seed,
                requests: self.requests,
                sweep: self.sweep.clone(),
                slo: self.slo,
                depths: self.depth.clone(),
                gates: Default::default(),
                eval: None,
            },
            gates: self.gates.clone(),
            bandwidth_gbps: self.bandwidth_gbps,
        }
    }
}

async fn run(ctx: &Context, recipes: &RecipeSet, args: BenchArgs, out: &Output) -> Result<()> {
    let target = args.target.as_deref().ok_or_else(|| {
        Error::Usage("name a running recipe or a URL: `sparkctl bench NAME|URL`".into())
    })?;
    let mut plan = crate::deploy::bench_plan(ctx, recipes, target, args.overrides()).await?;
    let baseline = match args.baseline.as_deref() {
        Some(path) => engine::Baseline::Measured(read_result(path)?),
        None => engine::Baseline::missing("no --baseline given"),
    };
    let skipped = plan.leave_out_relative_gates(&baseline);
    let name = plan.target.recipe.clone().unwrap_or_else(|| "url".into());
    let bar = out.bar("{bar:30} {pos}/{len} requests · {msg}");
    let result = plan
        .run(&baseline, |done, total, case| {
            bar.at(done as u64, total as u64);
            bar.message(case);
        })
        .await;
    bar.finish();
    let result = result?;
    let path = match args.out {
        Some(p) => p,
        None => ctx.state.bench_result_file(&name)?,
    };
    let html = engine::export::write_all(&path, &result)?;
    if out.json {
        out.print_json(&result);
    } else {
        render(out, &result, baseline.measured());
        if !skipped.is_empty() {
            out.say(format_args!(
                "not judged without --baseline: {} (give production's result to compare)",
                skipped.join(", ")
            ));
        }
        out.say(format_args!("result: {}", path.display()));
        out.say(format_args!(
            "report: {} (per-request rows: .jsonl, .csv beside it)",
            html.display()
        ));
    }
    verdict_exit(&name, &result, &path)
}

fn verdict_exit(name: &str, result: &BenchResult, path: &Path) -> Result<()> {
    match result.verdict {
        Verdict::Pass => Ok(()),
        Verdict::Fail => Err(Error::Reported(crate::error::Summary::BenchFailed {
            name: name.to_string(),
            reason: result.verdict_reason.clone(),
            path: path.to_path_buf(),
        })),
        Verdict::Inconclusive => Err(Error::Reported(crate::error::Summary::BenchInconclusive {
            name: name.to_string(),
            reason: result.verdict_reason.clone(),
            path: path.to_path_buf(),
        })),
        Verdict::Error => {
            // The reason may already quote the first failure; say it once.
            let first = result.problems.first().map_or("", String::as_str);
            let said = first.split_once(": ").map_or(first, |(_, m)| m);
            let head: String = said.chars().take(60).collect();
            let more = (!result.verdict_reason.contains(&head)).then(|| first.to_string());
            Err(Error::Reported(crate::error::Summary::BenchError {
                name: name.to_string(),
                reason: result.verdict_reason.clone(),
                first: more,
                path: path.to_path_buf(),
            }))
        }
    }
}

fn render(out: &Output, r: &BenchResult, baseline: Option<&BenchResult>) {
    let t = &r.target;
    out.titled(
        "bench",
        format_args!(
            "{} ({}) · suite {} · {} warm-up + {} measured runs per case",
            t.recipe.clone().unwrap_or_else(|| t.url.clone()),
            t.model,
            r.suite,
            r.warmup,
            r.runs
        ),
    );
    if let Some(v) = &t.server_version {
        out.say(format_args!("server {v}"));
    }
    let mut table = out.table();
    report::case_table(r, &mut table);
    out.print_table(&table);
    let mut table = out.table();
    report::evidence_table(r, &mut table);
    out.print_table(&table);
    out.say(format_args!(
        "TTFT p50 {} ms · TTFO p50 {} ms · decode p50 {} tok/s{}{}",
        r.ttft_p50_ms.map_or("-".into(), |v| format!("{v:.1}")),
        r.ttfo_p50_ms.map_or("-".into(), |v| format!("{v:.1}")),
        r.decode_tps_p50.map_or("-".into(), |v| format!("{v:.1}")),
        match (&r.roofline, r.roofline_share) {
            (Some(roof), Some(s)) => format!(
                " ({:.0}% of the {:.0} tok/s that {} GB/s allows: {})",
                s * 100.0,
                roof.bound_tps(),
                crate::bench::bound::fmt_gbps(roof.bandwidth_gb_per_s()),
                roof.bandwidth_from()
            ),
            _ => String::new(),
        },
        if r.usage_estimated {
            " · token counts ESTIMATED (the server sent no usage)"
        } else {
            ""
        }
    ));
    render_phases(out, r);
    if let Some(b) = baseline {
        let mut table = out.table();
        report::compare_table(&[b, r], &mut table);
        out.print_table(&table);
    }
    if !r.gates.is_empty() {
        let mut table = out.table();
        table.set_header(vec!["GATE", "RULE", "VALUE", "VERDICT"]);
        for g in &r.gates {
            table.add_row(vec![
                g.gate.clone(),
                g.rule.clone(),
                g.value.map_or("-".into(), |v| format!("{v:.1}")),
                match g.outcome {
                    GateOutcome::Pass => "pass".into(),
                    GateOutcome::Fail => "FAIL".into(),
                    GateOutcome::Inconclusive => format!("inconclusive: {}", g.detail),
                    GateOutcome::NotApplied => g.detail.clone(),
                },
            ]);
        }
        out.print_table(&table);
    }
    for n in &r.notes {
        out.say(format_args!("note: {n}"));
    }
    for p in r.problems.iter().take(5) {
        out.say(format_args!("problem: {p}"));
    }
    out.say(format_args!(
        "verdict: {} ({})",
        r.verdict, r.verdict_reason
    ));
}

fn render_phases(out: &Output, r: &BenchResult) {
    let levels: Vec<&engine::load::LoadRun> = r
        .load
        .iter()
        .chain(r.sweep.iter().flat_map(|s| s.levels().iter()))
        .collect();
    if !levels.is_empty() {
        let mut table = out.table();
        report::load_table(&levels, &mut table);
        out.print_table(&table);
    }
    if let Some(s) = &r.sweep {
        out.say(format_args!("sweep: {}", s.outcome()));
    }
    if let Some(g) = &r.goodput {
        out.say(format_args!(
            "goodput: {:.2} req/s ({:.0}% of requests) met {}",
            g.rps(),
            g.pct(),
            r.slo.map(|s| s.to_string()).unwrap_or_default()
        ));
    }
    if !r.depth.is_empty() {
        let mut table = out.table();
        report::depth_table(r, &mut table);
        out.print_table(&table);
    }
    if let Some(s) = &r.server_side {
        match s.unavailable() {
            Some(why) => out.say(format_args!("server metrics: none ({why})")),
            None => out.say(format_args!(
                "server metrics: scraped from {} before, during and after",
                s.url()
            )),
        }
        if let Some(ms) = s.ttft_mean_ms() {
            out.say(format_args!(
                "server TTFT: mean {ms:.1} ms (the server's own histogram)"
            ));
        }
        if let Some(m) = s.host_memory() {
            out.say(m);
        }
    }
    for (m, i) in &r.confidence {
        out.say(format_args!(
            "{} p50 over {} runs: mean {:.2}, CV {:.1}%, 95% interval {:.2} to {:.2}",
            m.name(),
            i.n,
            i.mean,
            i.cv * 100.0,
            i.low,
            i.high
        ));
    }
}

pub(crate) fn compare(
    paths: &[PathBuf],
    svg: Option<&Path>,
    html: Option<&Path>,
    out: &Output,
) -> Result<()> {
    let results: Vec<BenchResult> = paths
        .iter()
        .map(|p| read_result(p))
        .collect::<Result<_>>()?;
    let refs: Vec<&BenchResult> = results.iter().collect();
    if out.json {
        let side = |r: &BenchResult| {
            r.cases
                .iter()
                .map(|c| {
                    (
                        c.case().to_string(),
                        (
                            c.ttft_ms().map(|s| s.p50()),
                            c.decode_tps().map(|s| s.p50()),
                        ),
                    )
                })
                .collect::<BTreeMap<_, _>>()
        };
        let all: Vec<_> = paths
            .iter()
            .zip(&results)
            .map(|(p, r)| Compared {
                result: p,
                cases: side(r),
                goodput: r.goodput.as_ref(),
            })
            .collect();
        out.print_json(&all);
    } else {
        let mut table = out.table();
        report::compare_table(&refs, &mut table);
        out.print_table(&table);
    }
    if let Some(path) = svg {
        crate::state::write_atomic(path, report::chart_svg(&refs).as_bytes())?;
        if !out.json {
            out.say(format_args!("chart: {}", path.display()));
        }
    }
    if let Some(path) = html {
        crate::state::write_atomic(path, engine::html::report(&refs).as_bytes())?;
        if !out.json {
            out.say(format_args!("report: {}", path.display()));
        }
    }
    Ok(())
}

/// One result of `bench compare --json`: each case's p50 TTFT (ms) and decode rate (tok/s).
#[derive(serde::Serialize)]
struct Compared<'a> {
    result: &'a Path,
    cases: BTreeMap<String, (Option<f64>, Option<f64>)>,
    goodput: Option<&'a crate::bench::gates::GoodputFigure>,
}
