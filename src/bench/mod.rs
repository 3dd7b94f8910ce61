//! The built-in benchmark: streamed requests only, no prompt ever repeated, TTFT and TTFO
//! apart, tokens from `usage`, per-token timing from per-chunk counts, warm-ups excluded,
//! n ≥ 5, percentiles, the server's own timings beside the client's, quality and speed
//! gates with three outcomes, and a JSON result with every sample and its context.

pub mod client;
pub mod gates;
pub mod quality;
mod reader;
pub mod report;
pub mod result;
pub mod sample;
pub mod server;
pub mod sse;
pub mod stats;
pub mod suite;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::error::{Error, Result};
use client::Clients;
use gates::Metric;
use quality::rates;
use result::{BenchResult, CaseSummary, Concurrency, Target};
use sample::Sample;
use suite::{ServerKind, Suite, Tag};

/// How a benchmark runs.
pub struct Options {
    pub warmup: Option<usize>,
    pub runs: Option<usize>,
    /// Extra concurrency levels (1 is always the measured baseline).
    pub concurrency: Vec<usize>,
    pub gates: BTreeMap<String, String>,
}

pub fn http_client() -> Result<Clients> {
    Clients::new().map_err(Error::Failed)
}

/// The kind of server a recipe's engine runs.
pub fn server_kind(engine: crate::engine::Engine) -> ServerKind {
    use crate::engine::Engine;
    match engine {
        Engine::LlamaServer => ServerKind::LlamaServer,
        Engine::Vllm => ServerKind::Vllm,
        Engine::Sglang => ServerKind::Sglang,
        Engine::Trtllm | Engine::Openai | Engine::Sim => ServerKind::Other,
    }
}

/// A fresh tag for this benchmark's prompts: a second benchmark against the same server
/// must not find the first one's prompts in its cache.
fn nonce() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(crate::units::unix_now().as_nanos());
    format!("{:08x}", h.finish() as u32)
}

/// Runs the suite against `target.url`; `progress(done, total, case)` after each request.
/// `production` is the baseline of the relative gates, or why there is none to trust.
pub async fn run(
    suite: &Suite,
    mut target: Target,
    opts: &Options,
    production: std::result::Result<&BenchResult, &str>,
    mut progress: impl FnMut(usize, usize, &str),
) -> Result<BenchResult> {
    let clients = http_client()?;
    let url = target.url.clone();
    let known = target.engine.map(server_kind);
    let info = server::probe(&clients.pooled, &url, known).await?;
    target.model = info.model.clone();
    target.server = info.kind;
    target.server_version = info.version.clone();
    let nonce = nonce();
    let warmup = opts.warmup.unwrap_or(suite.warmup);
    let runs = opts.runs.unwrap_or(suite.runs);
    let total: usize = suite
        .cases
        .iter()
        .map(|c| (warmup + runs) * c.turns.len())
        .sum();
    let mut samples = Vec::new();
    let mut problems = Vec::new();
    let mut done = 0;
    for case in &suite.cases {
        for run in 0..warmup + runs {
            let mut history: Vec<Value> = Vec::new();
            for (t, user) in case.turns.iter().enumerate() {
                history.push(json!({"role": "user", "content": user}));
                let tag = Tag {
                    nonce: &nonce,
                    run,
                    turn: t + 1,
                };
                let body = suite.request(&info.model, case, &history, tag, info.kind);
                let mut s = client::stream(&clients, &url, &body).await;
                s.case = case.name.clone();
                s.run = run;
                s.turn = t + 1;
                s.warmup = run < warmup;
                history.push(json!({"role": "assistant", "content": s.content}));
                done += 1;
                progress(done, total, &case.name);
                let failed = !s.ok;
                if let Some(e) = &s.error {
                    problems.push(format!("{} run {} turn {}: {e}", case.name, run + 1, t + 1));
                }
                samples.push(s);
                if failed {
                    break;
                }
            }
        }
    }
    // Single-stream decode above the bandwidth bound is not a measurement of decoding.
    if let Some(max) = target.roofline_tps() {
        for s in &mut samples {
            s.impossible = s.decode_tps.is_some_and(|d| d > max);
        }
    }
    let concurrency = run_concurrency(
        &clients,
        suite,
        &info,
        &url,
        &nonce,
        runs,
        &opts.concurrency,
        &mut problems,
    )
    .await;
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
            let mine = counted().filter(|s| s.case == c.name).map(|s| (s, c));
            result::summarize_case(c, &samples, rates(mine))
        })
        .collect();
    let quality = rates(counted().map(|s| (s, case_of(s))));
    let latency = latency(counted());
    let p50 = |m: Metric| latency.get(&m).map(|s| s.p50);
    let (ttft_p50_ms, ttfo_p50_ms, decode_tps_p50) =
        (p50(Metric::Ttft), p50(Metric::Ttfo), p50(Metric::Decode));
    let now = gates::Measures {
        rates: quality.clone(),
        stats: latency.clone(),
        ..Default::default()
    };
    let base = production.map(BenchResult::measures);
    let gate_results = gates::evaluate(&opts.gates, &now, base.as_ref().map_err(|e| *e));
    let (verdict, verdict_reason) = result::verdict(&samples, &gate_results);
    let roofline_share = target
        .roofline_tps()
        .zip(decode_tps_p50)
        .map(|(max, tps)| tps / max);
    let notes = result::notes(&cases, &samples, &target);
    Ok(BenchResult {
        sparkctl_version: env!("CARGO_PKG_VERSION").to_string(),
        host: crate::host::hostname(),
        time: crate::units::utc_stamp(crate::units::unix_now().as_secs()),
        target,
        suite: suite.name.clone(),
        warmup,
        runs,
        usage_estimated: samples.iter().any(|s| s.usage_estimated && s.ok),
        cases,
        concurrency,
        quality,
        ttft_p50_ms,
        ttfo_p50_ms,
        decode_tps_p50,
        latency,
        confidence: BTreeMap::new(),
        goodput: None,
        roofline_share,
        gates: gate_results,
        verdict,
        verdict_reason,
        problems,
        notes,
        samples,
    })
}

/// Each metric over `samples` (per-token ones over the streams that describe decoding).
fn latency<'a>(
    samples: impl Iterator<Item = &'a Sample> + Clone,
) -> BTreeMap<Metric, result::Stats> {
    let pick = |f: fn(&Sample) -> Vec<f64>, decoding: bool| {
        let v: Vec<f64> = samples
            .clone()
            .filter(|s| !decoding || result::per_token_valid(s))
            .flat_map(f)
            .collect();
        result::stats(&v)
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

/// For each level, `runs` rounds of that many simultaneous single-turn requests.
#[allow(clippy::too_many_arguments)]
async fn run_concurrency(
    clients: &Clients,
    suite: &Suite,
    info: &server::ServerInfo,
    url: &str,
    nonce: &str,
    runs: usize,
    levels: &[usize],
    problems: &mut Vec<String>,
) -> Vec<Concurrency> {
    let single: Vec<&suite::Case> = suite.cases.iter().filter(|c| c.turns.len() == 1).collect();
    let mut out = Vec::new();
    for &streams in levels.iter().filter(|&&n| n > 1) {
        let (mut ttft, mut tokens, mut failed, mut retried, mut wall) =
            (Vec::new(), 0.0, 0usize, 0usize, Duration::ZERO);
        for round in 0..runs {
            let began = Instant::now();
            let futures = (0..streams).map(|i| {
                let case = single[(round * streams + i) % single.len()];
                // Run numbers past the sequential part's keep every prompt unique.
                let tag = Tag {
                    nonce,
                    run: 1_000_000 * streams + round * streams + i,
                    turn: 1,
                };
                let history = [json!({"role": "user", "content": case.turns[0]})];
                let body = suite.request(&info.model, case, &history, tag, info.kind);
                async move { client::stream(clients, url, &body).await }
            });
            let results = futures_util::future::join_all(futures).await;
            wall += began.elapsed();
            for s in results {
                retried += usize::from(s.retried_after.is_some());
                if let Some(e) = &s.error {
                    failed += 1;
                    problems.push(format!("concurrency {streams}: {e}"));
                }
                ttft.extend(s.ttft_ms);
                tokens += s
                    .completion_tokens
                    .map_or(s.chunk_token_counts.iter().sum(), |n| n as f64);
            }
        }
        out.push(Concurrency {
            streams,
            requests: streams * runs,
            failed,
            retried,
            throughput_tps: tokens / wall.as_secs_f64().max(1e-9),
            ttft_ms: result::stats(&ttft),
        });
    }
    out
}
