//! The built-in benchmark: streamed requests only, TTFT to the first content token,
//! reasoning timed apart, tokens from `usage`, warm-ups excluded, n ≥ 5, percentiles,
//! quality and speed gates, and a JSON result with every sample and its context.

pub mod client;
pub mod gates;
pub mod report;
pub mod sse;
pub mod suite;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::error::{Error, Result};
use client::Sample;
use report::{BenchResult, CaseSummary, Concurrency, Target};
use suite::Suite;

/// How a benchmark runs.
pub struct Options {
    pub warmup: Option<usize>,
    pub runs: Option<usize>,
    /// Extra concurrency levels (1 is always the measured baseline).
    pub concurrency: Vec<usize>,
    pub gates: BTreeMap<String, String>,
}

pub fn http_client() -> Result<reqwest::Client> {
    reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(600))
        .build()
        .map_err(|e| Error::Failed(format!("HTTP client: {e}")))
}

/// The model id and server version the server reports; an error when it does not answer.
pub async fn probe_server(client: &reqwest::Client, url: &str) -> Result<(String, Option<String>)> {
    let models = client
        .get(format!("{url}/v1/models"))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .map_err(|e| {
            Error::Failed(format!(
                "the server at {url} does not answer ({e}); start it first (`sparkctl start NAME`)"
            ))
        })?;
    if !models.status().is_success() {
        return Err(Error::Failed(format!(
            "the server at {url} answers GET /v1/models with {}; is it still loading?",
            models.status()
        )));
    }
    let body: Value = models.json().await.unwrap_or(Value::Null);
    let model = body
        .pointer("/data/0/id")
        .and_then(Value::as_str)
        .unwrap_or("default")
        .to_string();
    let mut version = None;
    for path in ["/version", "/props"] {
        if let Ok(r) = client
            .get(format!("{url}{path}"))
            .timeout(Duration::from_secs(5))
            .send()
            .await
        {
            if r.status().is_success() {
                let v: Value = r.json().await.unwrap_or(Value::Null);
                version = v["version"]
                    .as_str()
                    .or(v["build_info"].as_str())
                    .map(str::to_string);
                if version.is_some() {
                    break;
                }
            }
        }
    }
    Ok((model, version))
}

fn case_summary(case: &suite::Case, samples: &[Sample]) -> CaseSummary {
    let mine: Vec<&Sample> = samples.iter().filter(|s| s.case == case.name).collect();
    let measured: Vec<&&Sample> = mine.iter().filter(|s| !s.warmup).collect();
    let ok: Vec<&&&Sample> = measured.iter().filter(|s| s.ok).collect();
    let pick = |f: &dyn Fn(&Sample) -> Option<f64>| -> Vec<f64> {
        ok.iter().filter_map(|s| f(s)).collect()
    };
    let turns = case.turns.len();
    let per_turn = (1..=turns)
        .filter_map(|t| {
            report::stats(
                &ok.iter()
                    .filter(|s| s.turn == t)
                    .filter_map(|s| s.ttft_ms)
                    .collect::<Vec<_>>(),
            )
            .map(|s| s.p50)
        })
        .collect();
    let mut checks: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for s in &ok {
        for (check, passed) in gates::checks(s, case) {
            let e = checks.entry(check.to_string()).or_default();
            e.0 += usize::from(passed);
            e.1 += 1;
        }
    }
    CaseSummary {
        case: case.name.clone(),
        samples: measured.len(),
        failed: measured.len() - ok.len(),
        ttft_ms: report::stats(&pick(&|s| s.ttft_ms)),
        ttft_p50_per_turn_ms: per_turn,
        ttfr_ms: report::stats(&pick(&|s| s.ttfr_ms)),
        decode_tps: report::stats(&pick(&|s| s.decode_tps)),
        itl_ms: report::stats(
            &ok.iter()
                .flat_map(|s| s.itl_ms.iter().copied())
                .collect::<Vec<_>>(),
        ),
        e2e_ms: report::stats(&pick(&|s| Some(s.e2e_ms))),
        cold_start_ttft_ms: mine
            .iter()
            .find(|s| s.warmup && s.turn == 1)
            .and_then(|s| s.ttft_ms),
        checks: checks
            .into_iter()
            .map(|(k, (pass, n))| (k, 100.0 * pass as f64 / n.max(1) as f64))
            .collect(),
    }
}

/// Runs the suite against `target.url`; `progress(done, total, case)` after each request.
pub async fn run(
    suite: &Suite,
    mut target: Target,
    opts: &Options,
    production: Option<&BenchResult>,
    mut progress: impl FnMut(usize, usize, &str),
) -> Result<BenchResult> {
    let client = http_client()?;
    let url = target.url.clone();
    let (model, version) = probe_server(&client, &url).await?;
    target.model = model.clone();
    target.server_version = version;
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
                let body = suite.request(&model, case, &history);
                let mut s = client::stream(&client, &url, &body).await;
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
    let concurrency = run_concurrency(
        &client,
        suite,
        &model,
        &url,
        runs,
        &opts.concurrency,
        &mut problems,
    )
    .await;
    let cases: Vec<CaseSummary> = suite
        .cases
        .iter()
        .map(|c| case_summary(c, &samples))
        .collect();
    let measured: Vec<&Sample> = samples.iter().filter(|s| !s.warmup && s.ok).collect();
    let mut quality: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for s in &measured {
        let case = suite
            .cases
            .iter()
            .find(|c| c.name == s.case)
            .expect("samples come from cases");
        for (check, passed) in gates::checks(s, case) {
            let e = quality.entry(check.to_string()).or_default();
            e.0 += usize::from(passed);
            e.1 += 1;
        }
    }
    let quality: BTreeMap<String, f64> = quality
        .into_iter()
        .map(|(k, (p, n))| (k, 100.0 * p as f64 / n.max(1) as f64))
        .collect();
    let ttft_p50_ms = report::stats(
        &measured
            .iter()
            .filter_map(|s| s.ttft_ms)
            .collect::<Vec<_>>(),
    )
    .map(|s| s.p50);
    let decode_tps_p50 = report::stats(
        &measured
            .iter()
            .filter_map(|s| s.decode_tps)
            .collect::<Vec<_>>(),
    )
    .map(|s| s.p50);
    let now = gates::Measures {
        rates: &quality,
        ttft_p50_ms,
        decode_tps_p50,
    };
    let base = production.map(|p| gates::Measures {
        rates: &p.quality,
        ttft_p50_ms: p.ttft_p50_ms,
        decode_tps_p50: p.decode_tps_p50,
    });
    let gate_results = gates::evaluate(&opts.gates, &now, base.as_ref());
    let failed_samples = samples.iter().filter(|s| !s.warmup && !s.ok).count();
    let verdict = if measured.is_empty() || failed_samples > 0 {
        "error"
    } else if gate_results.iter().any(|g| g.passed == Some(false)) {
        "fail"
    } else {
        "pass"
    };
    let roofline_share = match (target.weights_bytes, decode_tps_p50) {
        (Some(bytes), Some(tps)) if bytes > 0 => {
            Some(tps / (report::SPARK_BANDWIDTH_BYTES_PER_S / bytes as f64))
        }
        _ => None,
    };
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
        decode_tps_p50,
        roofline_share,
        gates: gate_results,
        verdict: verdict.to_string(),
        problems,
        samples,
    })
}

/// For each level, `runs` rounds of that many simultaneous single-turn requests.
async fn run_concurrency(
    client: &reqwest::Client,
    suite: &Suite,
    model: &str,
    url: &str,
    runs: usize,
    levels: &[usize],
    problems: &mut Vec<String>,
) -> Vec<Concurrency> {
    let single: Vec<&suite::Case> = suite.cases.iter().filter(|c| c.turns.len() == 1).collect();
    let mut out = Vec::new();
    for &streams in levels.iter().filter(|&&n| n > 1) {
        let (mut ttft, mut tokens, mut failed, mut wall) =
            (Vec::new(), 0u64, 0usize, Duration::ZERO);
        for round in 0..runs {
            let began = Instant::now();
            let futures = (0..streams).map(|i| {
                let case = single[(round * streams + i) % single.len()];
                let body = suite.request(
                    model,
                    case,
                    &[json!({"role": "user", "content": case.turns[0]})],
                );
                async move { client::stream(client, url, &body).await }
            });
            let results = futures_util::future::join_all(futures).await;
            wall += began.elapsed();
            for s in results {
                if let Some(e) = &s.error {
                    failed += 1;
                    problems.push(format!("concurrency {streams}: {e}"));
                }
                ttft.extend(s.ttft_ms);
                tokens += s
                    .completion_tokens
                    .unwrap_or((s.content_deltas + s.reasoning_deltas) as u64);
            }
        }
        out.push(Concurrency {
            streams,
            requests: streams * runs,
            failed,
            throughput_tps: tokens as f64 / wall.as_secs_f64().max(1e-9),
            ttft_ms: report::stats(&ttft),
        });
    }
    out
}
