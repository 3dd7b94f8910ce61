//! `sparkctl bench NAME|URL` and `bench compare A.json B.json`: rendering over `bench`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::deploy::Context;
use super::Output;
use crate::bench::gates::GateOutcome;
use crate::bench::report;
use crate::bench::result::{BenchResult, Verdict};
use crate::bench::{self as engine, suite::Suite};
use crate::error::{Error, Result};
use crate::recipe::RecipeSet;

pub struct Args {
    pub target: String,
    pub suite: Option<String>,
    pub runs: Option<usize>,
    pub warmup: Option<usize>,
    pub concurrency: Vec<usize>,
    pub gates: Vec<String>,
    pub baseline: Option<PathBuf>,
    pub out: Option<PathBuf>,
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

pub async fn run(ctx: &Context, recipes: &RecipeSet, args: Args, out: &Output) -> Result<()> {
    let (target, mut gates, suite_name) =
        crate::deploy::bench_target(&ctx.runtimes, recipes, &args.target).await?;
    for g in &args.gates {
        let (name, rule) = g.split_once('=').ok_or_else(|| {
            Error::Usage(format!(
                "--gate {g}: write NAME=RULE, e.g. thinking_leak='== 0%'"
            ))
        })?;
        if let Err(e) = name.parse::<crate::bench::gates::Gate>() {
            return Err(Error::Usage(format!("--gate {name}: {e}")));
        }
        if let Err(e) = rule.parse::<crate::bench::gates::Rule>() {
            return Err(Error::Usage(format!("--gate {name}: {e}")));
        }
        gates.insert(name.to_string(), rule.to_string());
    }
    let suite = Suite::load(
        args.suite.as_deref().unwrap_or(&suite_name),
        &recipes.dir.join("suites"),
    )?;
    let baseline = args.baseline.as_deref().map(read_result).transpose()?;
    // Alone, without a baseline, the relative gates have nothing to compare with: they
    // are left out (and said so) rather than left undecided.
    let skipped: Vec<String> = if baseline.is_none() {
        let relative: Vec<String> = gates
            .keys()
            .filter(|g| crate::bench::gates::is_relative(g))
            .cloned()
            .collect();
        gates.retain(|g, _| !crate::bench::gates::is_relative(g));
        relative
    } else {
        Vec::new()
    };
    let opts = engine::Options {
        warmup: args.warmup,
        runs: args.runs,
        concurrency: args.concurrency,
        gates,
    };
    let name = target.recipe.clone().unwrap_or_else(|| "url".into());
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} requests · {msg}")
            .expect("static template"),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    let result = engine::run(
        &suite,
        target,
        &opts,
        baseline.as_ref().ok_or("no --baseline given"),
        |done, total, case| {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
            bar.set_message(case.to_string());
        },
    )
    .await;
    bar.finish_and_clear();
    let result = result?;
    let path = match args.out {
        Some(p) => p,
        None => ctx.state.bench_result_file(&name)?,
    };
    crate::state::write_json(&path, &result)?;
    if out.json {
        out.print_json(&result);
    } else {
        render(out, &result, baseline.as_ref());
        if !skipped.is_empty() {
            println!(
                "not judged without --baseline: {} (give production's result to compare)",
                skipped.join(", ")
            );
        }
        println!("result: {}", path.display());
    }
    match result.verdict {
        Verdict::Pass => Ok(()),
        Verdict::Fail => Err(Error::Reported(format!(
            "{name}: {} (result kept in {})",
            result.verdict_reason,
            path.display()
        ))),
        Verdict::Inconclusive => Err(Error::Reported(format!(
            "{name}: inconclusive: {} (result kept in {})",
            result.verdict_reason,
            path.display()
        ))),
        Verdict::Error => Err(Error::Reported(format!(
            "{name}: {}: {} (partial samples kept in {})",
            result.verdict_reason,
            result.problems.first().cloned().unwrap_or_default(),
            path.display()
        ))),
    }
}

fn render(out: &Output, r: &BenchResult, baseline: Option<&BenchResult>) {
    let t = &r.target;
    println!(
        "{} {} ({}) · suite {} · {} warm-up + {} measured runs per case",
        out.bold("bench"),
        t.recipe.clone().unwrap_or_else(|| t.url.clone()),
        t.model,
        r.suite,
        r.warmup,
        r.runs
    );
    if let Some(v) = &t.server_version {
        println!("server {v}");
    }
    let mut table = out.table();
    report::case_table(r, &mut table);
    out.print_table(&table);
    let mut table = out.table();
    report::evidence_table(r, &mut table);
    out.print_table(&table);
    println!(
        "TTFT p50 {} ms · TTFO p50 {} ms · decode p50 {} tok/s{}{}",
        r.ttft_p50_ms.map_or("-".into(), |v| format!("{v:.1}")),
        r.ttfo_p50_ms.map_or("-".into(), |v| format!("{v:.1}")),
        r.decode_tps_p50.map_or("-".into(), |v| format!("{v:.1}")),
        r.roofline_share.map_or(String::new(), |s| format!(
            " ({:.0}% of the 273 GB/s bound)",
            s * 100.0
        )),
        if r.usage_estimated {
            " · token counts ESTIMATED (the server sent no usage)"
        } else {
            ""
        }
    );
    for c in &r.concurrency {
        println!(
            "concurrency {}: {:.1} tok/s total, TTFT p50 {} ms, {} of {} failed",
            c.streams,
            c.throughput_tps,
            c.ttft_ms
                .as_ref()
                .map_or("-".into(), |s| format!("{:.1}", s.p50)),
            c.failed,
            c.requests
        );
    }
    if let Some(b) = baseline {
        let mut table = out.table();
        report::compare_table(b, r, &mut table);
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
                },
            ]);
        }
        out.print_table(&table);
    }
    for n in &r.notes {
        println!("note: {n}");
    }
    for p in r.problems.iter().take(5) {
        println!("problem: {p}");
    }
    println!("verdict: {} ({})", r.verdict, r.verdict_reason);
}

pub fn compare(a: &Path, b: &Path, svg: Option<&Path>, out: &Output) -> Result<()> {
    let (ra, rb) = (read_result(a)?, read_result(b)?);
    if out.json {
        let side = |r: &BenchResult| {
            r.cases
                .iter()
                .map(|c| {
                    (
                        c.case.clone(),
                        (
                            c.ttft_ms.as_ref().map(|s| s.p50),
                            c.decode_tps.as_ref().map(|s| s.p50),
                        ),
                    )
                })
                .collect::<BTreeMap<_, _>>()
        };
        out.print_json(&serde_json::json!({"a": side(&ra), "b": side(&rb)}));
    } else {
        let mut table = out.table();
        report::compare_table(&ra, &rb, &mut table);
        out.print_table(&table);
    }
    if let Some(path) = svg {
        crate::state::write_atomic(path, report::chart_svg(&[&ra, &rb]).as_bytes())?;
        if !out.json {
            println!("chart: {}", path.display());
        }
    }
    Ok(())
}
