//! One benchmark's result from what its phases measured: per-case summaries, latency
//! statistics and confidence intervals, the gates' outcomes, the verdict (a server that
//! failed under load failed), the roofline and every caveat.

use std::collections::BTreeMap;

use super::gates::{self, Metric};
use super::load::{LoadRun, SweepResult};
use super::quality::rates;
use super::result::{self, BenchResult, CaseSummary, Target};
use super::sample::Sample;
use super::suite::Suite;
use super::{depth, roofline, scrape, stats, Options};

/// What the phases beyond the suite measured.
pub(super) struct Phases {
    pub load: Vec<LoadRun>,
    pub sweep: Option<SweepResult>,
    pub depth: Vec<depth::DepthPoint>,
    pub server_side: scrape::ServerSide,
    pub repeat: usize,
}

/// Each metric over `samples` (per-token ones over the streams that describe decoding).
fn latency<'a>(
    samples: impl Iterator<Item = &'a Sample> + Clone,
) -> BTreeMap<Metric, stats::Stats> {
    let pick = |f: fn(&Sample) -> Vec<f64>, decoding: bool| {
        let v: Vec<f64> = samples
            .clone()
            .filter(|s| !decoding || result::per_token_valid(s))
            .flat_map(f)
            .collect();
        stats::stats(&v)
    };
    [
        (
            Metric::Ttft,
            pick(|s| s.ttft_ms.into_iter().collect(), false),
        ),
        (
            Metric::Ttfo,
            pick(|s| s.ttfo_ms.into_iter().collect(), false),
        ),
        (Metric::E2el, pick(|s| vec![s.e2e_ms], false)),
        (
            Metric::Tpot,
            pick(|s| s.tpot_ms.into_iter().collect(), true),
        ),
        (Metric::Itl, pick(|s| s.itl_ms.clone(), true)),
        (
            Metric::Decode,
            pick(|s| s.decode_tps.into_iter().collect(), true),
        ),
    ]
    .into_iter()
    .filter_map(|(m, s)| Some((m, s?)))
    .collect()
}

/// Each metric's p50 per repeated run, as an interval.
fn confidence(samples: &[Sample], repeat: usize) -> BTreeMap<Metric, stats::Interval> {
    if repeat < 2 {
        return BTreeMap::new();
    }
    let per_run: Vec<BTreeMap<Metric, stats::Stats>> = (0..repeat)
        .map(|r| {
            latency(
                samples
                    .iter()
                    .filter(move |s| s.repeat == r && !s.warmup && s.ok),
            )
        })
        .collect();
    Metric::ALL
        .into_iter()
        .filter_map(|m| {
            let p50s: Vec<f64> = per_run
                .iter()
                .filter_map(|l| l.get(&m).map(|s| s.p50))
                .collect();
            Some((m, stats::interval(&p50s)?))
        })
        .collect()
}

/// The best goodput over every load level and sweep level.
fn best_goodput(load: &[LoadRun], sweep: Option<&SweepResult>) -> Option<gates::GoodputFigure> {
    load.iter()
        .chain(sweep.into_iter().flat_map(|s| s.levels.iter()))
        .filter_map(|r| {
            Some(gates::GoodputFigure {
                rps: r.goodput_rps?,
                pct: r.goodput_pct?,
            })
        })
        .max_by(|a, b| a.rps.total_cmp(&b.rps))
}

fn problems_of(samples: &[Sample], load: &[LoadRun], sweep: Option<&SweepResult>) -> Vec<String> {
    let mut out: Vec<String> = samples
        .iter()
        .filter_map(|s| {
            Some(format!(
                "{} run {} turn {}: {}",
                s.case,
                s.run + 1,
                s.turn,
                s.error.as_ref()?
            ))
        })
        .collect();
    for r in load
        .iter()
        .chain(sweep.into_iter().flat_map(|s| s.levels.iter()))
    {
        out.extend(
            r.records
                .iter()
                .filter_map(|x| Some(format!("{}: {}", r.profile, x.error.as_ref()?))),
        );
    }
    out
}

/// A server that failed requests under load failed, whatever the single streams showed.
fn under_load(
    (verdict, reason): (result::Verdict, String),
    ph: &Phases,
) -> (result::Verdict, String) {
    let levels: Vec<&LoadRun> = ph
        .load
        .iter()
        .chain(ph.sweep.iter().flat_map(|s| s.levels.iter()))
        .collect();
    let failed: usize = levels.iter().map(|l| l.server_failures()).sum();
    if failed == 0 || verdict == result::Verdict::Error {
        return (verdict, reason);
    }
    let total: usize = levels.iter().map(|l| l.requests).sum();
    let first = levels
        .iter()
        .find(|l| l.server_failures() > 0)
        .map_or(String::new(), |l| format!(", first at {}", l.profile));
    (
        result::Verdict::Error,
        format!("the server failed {failed} of {total} load requests{first}"),
    )
}

/// The suite's caveats, the roofline's, and the phases' (metrics missing, failed load requests).
fn notes(
    cases: &[CaseSummary],
    samples: &[Sample],
    target: &Target,
    roofline: Option<&roofline::Roofline>,
    ph: &Phases,
) -> Vec<String> {
    let mut notes = result::notes(cases, samples, target);
    notes.extend(roofline.and_then(|r| r.note()));
    if let Some(why) = &ph.server_side.unavailable {
        notes.push(format!("no server-side metrics in this result: {why}"));
    }
    let levels = ph
        .load
        .iter()
        .chain(ph.sweep.iter().flat_map(|s| s.levels.iter()));
    let failed: usize = levels.map(|l| l.failed).sum();
    if failed > 0 {
        notes.push(format!(
            "{failed} load requests failed (see problems): the load figures count completed ones only"
        ));
    }
    notes
}

/// % of the measured requests the server failed (transport faults are not its doing).
fn errors_pct(samples: &[Sample]) -> Option<f64> {
    let measured: Vec<&Sample> = samples.iter().filter(|s| !s.warmup).collect();
    let failed = measured
        .iter()
        .filter(|s| s.failure.is_some_and(super::sample::Failure::blames_server))
        .count();
    (!measured.is_empty()).then(|| 100.0 * failed as f64 / measured.len() as f64)
}

pub(super) fn assemble(
    suite: &Suite,
    target: Target,
    opts: &Options,
    production: std::result::Result<&BenchResult, &str>,
    samples: Vec<Sample>,
    ph: Phases,
    (warmup, runs): (usize, usize),
) -> BenchResult {
    let case_of = |s: &Sample| {
        suite
            .cases
            .iter()
            .find(|c| c.name == s.case)
            .expect("samples come from cases")
    };
    let counted = || samples.iter().filter(|s| !s.warmup && s.ok);
    let cases: Vec<CaseSummary> = suite
        .cases
        .iter()
        .map(|c| {
            result::summarize_case(
                c,
                &samples,
                rates(counted().filter(|s| s.case == c.name).map(|s| (s, c))),
            )
        })
        .collect();
    let now = gates::Measures {
        rates: rates(counted().map(|s| (s, case_of(s)))),
        stats: latency(counted()),
        confidence: confidence(&samples, ph.repeat),
        goodput: best_goodput(&ph.load, ph.sweep.as_ref()),
        errors_pct: errors_pct(&samples),
    };
    let p50 = |m: Metric| now.stats.get(&m).map(|s| s.p50);
    let base = production.map(BenchResult::measures);
    let gate_results = gates::evaluate(&opts.gates, &now, base.as_ref().map_err(|e| *e));
    let (verdict, verdict_reason) = under_load(result::verdict(&samples, &gate_results), &ph);
    let roofline = roofline::Roofline::of(&target, &samples, &ph.depth);
    let mut notes = notes(&cases, &samples, &target, roofline.as_ref(), &ph);
    if !opts.depths.is_empty() && ph.depth.is_empty() {
        notes.push(
            "no depth sweep: the suite has no single-turn case to ask behind a context".into(),
        );
    }
    BenchResult {
        sparkctl_version: env!("CARGO_PKG_VERSION").to_string(),
        host: crate::host::hostname(),
        time: crate::units::utc_stamp(crate::units::unix_now().as_secs()),
        target,
        suite: suite.name.clone(),
        warmup,
        runs,
        repeat: ph.repeat,
        usage_estimated: samples.iter().any(|s| s.usage_estimated && s.ok),
        cases,
        quality: now.rates,
        ttft_p50_ms: p50(Metric::Ttft),
        ttfo_p50_ms: p50(Metric::Ttfo),
        decode_tps_p50: p50(Metric::Decode),
        roofline_share: roofline.as_ref().and_then(|r| r.share),
        roofline,
        latency: now.stats,
        confidence: now.confidence,
        goodput: now.goodput,
        slo: opts.slo,
        problems: problems_of(&samples, &ph.load, ph.sweep.as_ref()),
        load: ph.load,
        sweep: ph.sweep,
        depth: ph.depth,
        server_side: Some(ph.server_side),
        gates: gate_results,
        verdict,
        verdict_reason,
        notes,
        samples,
    }
}
