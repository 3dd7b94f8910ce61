//! One benchmark's result from what its phases measured: per-case summaries, latency
//! statistics and confidence intervals, the gates' outcomes, the verdict (a server that
//! failed under load failed), the roofline and every caveat.

use std::collections::BTreeMap;

use super::baseline::Baseline;
use super::gates::{self, Metric};
use super::load::LoadRun;
use super::quality::rates;
use super::result::{self, BenchResult, CaseSummary, Target, Verdict};
use super::sample::{Failure, Sample};
use super::suite::Suite;
use super::sweep::SweepResult;
use super::{depth, roofline, scrape, stats, Options};

/// What the phases beyond the suite measured.
#[derive(Default)]
pub(super) struct Phases {
    pub(in crate::bench) load: Vec<LoadRun>,
    pub(in crate::bench) sweep: Option<SweepResult>,
    pub(in crate::bench) depth: Vec<depth::DepthPoint>,
    pub(in crate::bench) server_side: scrape::ServerSide,
    pub(in crate::bench) repeat: usize,
    /// The evaluation sets' answers, when the run asked them.
    pub(in crate::bench) eval: Option<crate::eval::Evaluation>,
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

fn problems_of(samples: &[Sample], ph: &Phases) -> Vec<String> {
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
    for r in levels(ph) {
        out.extend(
            r.records
                .iter()
                .filter_map(|x| Some(format!("{}: {}", r.profile, x.error.as_ref()?))),
        );
    }
    for p in &ph.depth {
        out.extend(
            p.failed()
                .filter_map(|x| Some(format!("{}: {}", p.label(), x.error.as_ref()?))),
        );
    }
    out
}

/// Every load level: the fixed ones, then the sweep's.
fn levels(ph: &Phases) -> impl Iterator<Item = &LoadRun> {
    ph.load
        .iter()
        .chain(ph.sweep.iter().flat_map(|s| s.levels.iter()))
}

/// Failed requests of one phase: how many, how many the server is to blame for, of how
/// many, and the first failure's place and message.
#[derive(Default)]
struct Failed {
    total: usize,
    failed: usize,
    blamed: usize,
    first: Option<(String, String)>,
}

impl Failed {
    fn add(&mut self, label: String, total: usize, failed: &[(bool, Option<&String>)]) {
        self.total += total;
        self.failed += failed.len();
        self.blamed += failed.iter().filter(|(blames, _)| *blames).count();
        if self.first.is_none() {
            if let Some((_, e)) = failed.iter().find(|(blames, _)| *blames).or(failed.first()) {
                let said: String =
                    e.map_or("no error text".into(), |e| e.chars().take(300).collect());
                self.first = Some((label, said));
            }
        }
    }

    fn describe(&self, what: &str, count: usize) -> String {
        let (at, said) = self.first.clone().unwrap_or_default();
        format!(
            "{count} of {} {what} requests, first at {at}: {said}",
            self.total
        )
    }
}

/// The load levels' and the depth sweep's failures.
fn phase_failures(ph: &Phases) -> [(&'static str, Failed); 2] {
    let mut load = Failed::default();
    for l in levels(ph) {
        let failed: Vec<(bool, Option<&String>)> = l
            .records
            .iter()
            .filter(|r| !r.ok)
            .map(|r| {
                (
                    r.failure.is_some_and(Failure::blames_server),
                    r.error.as_ref(),
                )
            })
            .collect();
        load.add(l.profile.to_string(), l.requests, &failed);
    }
    let mut depth = Failed::default();
    for p in &ph.depth {
        let failed: Vec<(bool, Option<&String>)> = p
            .failed()
            .map(|r| {
                (
                    r.failure.is_some_and(Failure::blames_server),
                    r.error.as_ref(),
                )
            })
            .collect();
        depth.add(p.label(), p.records.len(), &failed);
    }
    [("load", load), ("depth", depth)]
}

/// Failures are never a pass: requests the server failed at any load level or depth make
/// the verdict an error, whatever the single streams showed; requests that got no answer
/// even on a fresh connection (the client's or the network's doing) make a pass
/// inconclusive. The reason names the first failure and what the server said.
fn under_load(
    (verdict, reason): (result::Verdict, String),
    ph: &Phases,
) -> (result::Verdict, String) {
    let phases = phase_failures(ph);
    let blamed: Vec<String> = phases
        .iter()
        .filter(|(_, f)| f.blamed > 0)
        .map(|(what, f)| f.describe(what, f.blamed))
        .collect();
    if verdict == result::Verdict::Error {
        return (verdict, reason);
    }
    if !blamed.is_empty() {
        return (
            result::Verdict::Error,
            format!("the server failed {}", blamed.join("; and ")),
        );
    }
    let unanswered: Vec<String> = phases
        .iter()
        .filter(|(_, f)| f.failed > 0)
        .map(|(what, f)| f.describe(what, f.failed))
        .collect();
    if unanswered.is_empty() || verdict != result::Verdict::Pass {
        return (verdict, reason);
    }
    (
        result::Verdict::Inconclusive,
        format!(
            "no answer, even on a fresh connection, to {} (the client's or the network's \
             fault, not the server's; not a pass either)",
            unanswered.join("; and ")
        ),
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
    if let (Some(why), Some(_)) = (&target.no_bandwidth, target.weights_bytes) {
        notes.push(format!("no roofline: {why}"));
    }
    if let Some(why) = &ph.server_side.unavailable {
        notes.push(format!("no server-side metrics in this result: {why}"));
    }
    let failed: usize = levels(ph).map(|l| l.failed).sum();
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
    production: &Baseline<BenchResult>,
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
        eval: ph.eval.clone(),
    };
    let p50 = |m: Metric| now.stats.get(&m).map(|s| s.p50);
    let base = production.map(BenchResult::measures);
    let gate_results = gates::evaluate(&opts.gates, &now, &base);
    let (verdict, verdict_reason) = under_load(result::verdict(&samples, &gate_results), &ph);
    let (verdict, verdict_reason) = unanswered(verdict, verdict_reason, ph.eval.as_ref());
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
        problems: problems_of(&samples, &ph)
            .into_iter()
            .chain(ph.eval.iter().flat_map(crate::eval::Evaluation::failures))
            .collect(),
        load: ph.load,
        sweep: ph.sweep,
        depth: ph.depth,
        server_side: Some(ph.server_side),
        gates: gate_results,
        verdict,
        verdict_reason,
        notes,
        replay: None,
        eval: ph.eval,
        samples,
    }
}

/// Evaluation items the server failed to answer are failed requests: the verdict is an
/// error, as for the suite's, whatever the gates said.
fn unanswered(
    verdict: Verdict,
    reason: String,
    eval: Option<&crate::eval::Evaluation>,
) -> (Verdict, String) {
    let failed = eval.map_or(0, |e| e.failures().len());
    match verdict {
        Verdict::Pass | Verdict::Fail if failed > 0 => (
            Verdict::Error,
            format!("the server failed {failed} evaluation request(s) (see problems)"),
        ),
        _ => (verdict, reason),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::depth::{DepthPoint, DepthRecord};
    use crate::bench::load::{LoadRun, Profile, Record};
    use crate::bench::result::Verdict;
    use crate::bench::suite::CacheMode;

    fn phases(load: Vec<LoadRun>, depth: Vec<DepthPoint>) -> Phases {
        Phases {
            load,
            sweep: None,
            depth,
            server_side: scrape::ServerSide::default(),
            repeat: 1,
            eval: None,
        }
    }

    fn failed(kind: Failure, error: &str) -> (Option<Failure>, Option<String>) {
        (Some(kind), Some(error.to_string()))
    }

    fn level(streams: usize, records: &[(Option<Failure>, Option<String>)]) -> LoadRun {
        let records: Vec<Record> = records
            .iter()
            .map(|(failure, error)| Record {
                ok: failure.is_none(),
                failure: *failure,
                error: error.clone(),
                ..Default::default()
            })
            .collect();
        LoadRun {
            profile: Profile::Concurrency { streams },
            requests: records.len(),
            completed: records.iter().filter(|r| r.ok).count(),
            failed: records.iter().filter(|r| !r.ok).count(),
            achieved_rps: None,
            duration_s: 1.0,
            request_rps: 1.0,
            output_tps: 1.0,
            ttft_ms: None,
            tpot_ms: None,
            itl_ms: None,
            e2el_ms: None,
            send_lag_ms: None,
            goodput_rps: None,
            goodput_pct: None,
            server: None,
            connections_opened: None,
            records,
        }
    }

    fn point(depth: usize, records: &[(Option<Failure>, Option<String>)]) -> DepthPoint {
        DepthPoint {
            depth,
            cache: CacheMode::Cold,
            ttft_ms: None,
            decode_tps: None,
            prompt_tokens: None,
            cached_tokens: None,
            verdict: String::new(),
            records: records
                .iter()
                .map(|(failure, error)| DepthRecord {
                    ok: failure.is_none(),
                    failure: *failure,
                    error: error.clone(),
                    ..Default::default()
                })
                .collect(),
        }
    }

    const PASS: (Verdict, &str) = (Verdict::Pass, "every gate passed");
    fn pass() -> (Verdict, String) {
        (PASS.0, PASS.1.to_string())
    }

    #[test]
    fn a_depth_the_server_refuses_is_an_error_with_its_words() {
        let too_long = "HTTP 400 Bad Request, an error: {\"error\":{\"code\":400,\"message\":\"request (1290 tokens) exceeds the available context size (1024 tokens)\"}}";
        let ph = phases(
            vec![level(4, &[(None, None), (None, None)])],
            vec![
                point(0, &[(None, None)]),
                point(
                    320,
                    &[
                        failed(Failure::Http, too_long),
                        failed(Failure::Http, too_long),
                    ],
                ),
            ],
        );
        let (verdict, reason) = under_load(pass(), &ph);
        assert_eq!(verdict, Verdict::Error);
        assert!(
            reason.starts_with(
                "the server failed 2 of 3 depth requests, first at depth 320 (cold): HTTP 400"
            ),
            "{reason}"
        );
        assert!(
            reason.contains("exceeds the available context size"),
            "{reason}"
        );
        let problems = problems_of(&[], &ph);
        assert_eq!(problems.len(), 2);
        assert!(
            problems[0].starts_with("depth 320 (cold): HTTP 400"),
            "{problems:?}"
        );
    }

    #[test]
    fn failed_load_requests_are_an_error_and_unanswered_ones_never_a_pass() {
        let ph = phases(
            vec![
                level(1, &[(None, None)]),
                level(16, &[(None, None), failed(Failure::Stream, "stream broke")]),
            ],
            vec![],
        );
        let (verdict, reason) = under_load(pass(), &ph);
        assert_eq!(verdict, Verdict::Error);
        assert_eq!(
            reason,
            "the server failed 1 of 3 load requests, first at concurrency 16: stream broke"
        );
        // A gate failure stays an error too when the server also failed.
        let (verdict, _) = under_load((Verdict::Fail, "gates failed".into()), &ph);
        assert_eq!(verdict, Verdict::Error);

        // No answer even on a fresh connection: the client's or the network's, so not the
        // server's error, and not a pass either.
        let refused = failed(Failure::Transport, "request failed: connection refused");
        let ph = phases(
            vec![level(4, &[(None, None), refused.clone()])],
            vec![point(0, &[refused])],
        );
        let (verdict, reason) = under_load(pass(), &ph);
        assert_eq!(verdict, Verdict::Inconclusive);
        assert!(
            reason.contains("1 of 2 load requests, first at concurrency 4"),
            "{reason}"
        );
        assert!(
            reason.contains("1 of 1 depth requests, first at depth 0 (cold)"),
            "{reason}"
        );
        assert!(reason.contains("not the server's"), "{reason}");
        // Nothing failed: the verdict stands.
        let ph = phases(
            vec![level(1, &[(None, None)])],
            vec![point(0, &[(None, None)])],
        );
        assert_eq!(under_load(pass(), &ph), pass());
    }
}
