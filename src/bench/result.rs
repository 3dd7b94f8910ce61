//! What a benchmark leaves: every raw sample with its context, per-case statistics, the
//! caveats that say how far each figure can be trusted, gate outcomes, and one verdict.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::gates::{GateOutcome, GateResult, GoodputFigure, Measures, Metric};
use super::sample::{ChunkTokens, Failure, Sample, TokenSource};
use super::stats::Interval;
use super::suite::CacheMode;

pub(crate) use super::target::Target;

/// A prompt of which at most this many tokens were evaluated was a near-full cache hit:
/// the request's own new text was cached too (servers re-evaluate the last token or so to
/// get logits), so its TTFT measured the cache. A warm prefix leaves the new user turn,
/// and more, to evaluate.
pub(crate) const NEAR_FULL_UNCACHED: u64 = 4;

pub(crate) use super::stats::{median, stats, Stats};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct CaseSummary {
    pub(in crate::bench) case: String,
    #[serde(default)]
    pub(in crate::bench) cache: CacheMode,
    pub(in crate::bench) samples: usize,
    pub(in crate::bench) failed: usize,
    /// Measured requests sent a second time after a transport error before any byte.
    #[serde(default)]
    pub(in crate::bench) retried: usize,
    /// TTFT (first token of any kind).
    pub(in crate::bench) ttft_ms: Option<Stats>,
    /// TTFO (first output: content or tool call).
    #[serde(default)]
    pub(in crate::bench) ttfo_ms: Option<Stats>,
    /// TTFT p50 per turn (multi-turn growth).
    pub(in crate::bench) ttft_p50_per_turn_ms: Vec<f64>,
    ttfr_ms: Option<Stats>,
    #[serde(default)]
    pub(in crate::bench) tpot_ms: Option<Stats>,
    pub(in crate::bench) decode_tps: Option<Stats>,
    pub(in crate::bench) itl_ms: Option<Stats>,
    pub(in crate::bench) e2e_ms: Option<Stats>,
    pub(in crate::bench) cold_start_ttft_ms: Option<f64>,
    #[serde(default)]
    pub(in crate::bench) prompt_tokens: Option<Stats>,
    /// Prompt tokens the server reported as served from its cache.
    #[serde(default)]
    pub(in crate::bench) cached_tokens: Option<Stats>,
    /// Measured TTFTs whose prompt was a near-full cache hit.
    #[serde(default)]
    near_full_cache_hits: usize,
    /// Mean tokens per token-bearing chunk.
    #[serde(default)]
    pub(in crate::bench) tokens_per_chunk: Option<f64>,
    /// Streams the server delivered in bursts (no per-token figures from them).
    #[serde(default)]
    pub(in crate::bench) bursts: usize,
    /// Samples whose decode speed the memory bandwidth cannot deliver (excluded).
    #[serde(default)]
    impossible: usize,
    /// The server's own decode speed (llama-server `timings.predicted_per_second`).
    #[serde(default)]
    pub(in crate::bench) server_decode_tps: Option<Stats>,
    /// Median of (client − server) / server decode speed, %.
    #[serde(default)]
    pub(in crate::bench) decode_vs_server_pct: Option<f64>,
    /// Median of client TTFT − the server's prompt time (llama-server `prompt_ms`): what
    /// the client saw beyond the server's own prompt processing.
    #[serde(default)]
    pub(in crate::bench) ttft_minus_server_prompt_ms: Option<f64>,
    /// Check → % of this case's answers (leak rate for thinking_leak, pass rate otherwise).
    pub(in crate::bench) checks: BTreeMap<String, f64>,
}

impl CaseSummary {
    pub(crate) fn case(&self) -> &str {
        &self.case
    }

    pub(crate) fn ttft_ms(&self) -> Option<&Stats> {
        self.ttft_ms.as_ref()
    }

    pub(crate) fn decode_tps(&self) -> Option<&Stats> {
        self.decode_tps.as_ref()
    }
}

/// What a benchmark concludes. `Inconclusive` never promotes and never blames the
/// candidate: the evidence cannot decide (client or network faults, a gate without data).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Verdict {
    Pass,
    /// A gate failed.
    Fail,
    #[default]
    Inconclusive,
    /// The server failed requests (HTTP errors, broken streams, timeouts) or gave none.
    Error,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::Inconclusive => "inconclusive",
            Verdict::Error => "error",
        })
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct BenchResult {
    pub(in crate::bench) sparkctl_version: String,
    pub(in crate::bench) host: String,
    pub(in crate::bench) time: String,
    pub(crate) target: Target,
    pub(crate) suite: String,
    pub(crate) warmup: usize,
    pub(crate) runs: usize,
    /// Runs of the whole suite (confidence intervals need two or more).
    #[serde(default = "one")]
    pub(in crate::bench) repeat: usize,
    pub(crate) cases: Vec<CaseSummary>,
    /// Fixed load levels (closed-loop concurrency, open-loop rate).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) load: Vec<super::load::LoadRun>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) sweep: Option<super::sweep::SweepResult>,
    /// The same question behind prior contexts of several depths, cold and warm.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) depth: Vec<super::depth::DepthPoint>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) slo: Option<super::slo::Slo>,
    /// The server's metrics and the host's memory around the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) server_side: Option<super::scrape::ServerSide>,
    /// Check → % over all measured answers it applies to.
    pub(in crate::bench) quality: BTreeMap<String, f64>,
    pub(crate) ttft_p50_ms: Option<f64>,
    #[serde(default)]
    pub(crate) ttfo_p50_ms: Option<f64>,
    pub(crate) decode_tps_p50: Option<f64>,
    /// Every metric over the measured requests of the suite (per-token ones over decoding
    /// streams only), for the percentile gates.
    #[serde(default)]
    pub(in crate::bench) latency: BTreeMap<Metric, Stats>,
    /// Each metric's per-run p50 over `--repeat` runs: mean, CV and 95% interval.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) confidence: BTreeMap<Metric, Interval>,
    /// The best goodput of the load levels, against the SLO.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) goodput: Option<GoodputFigure>,
    /// Decode p50 as a share of the memory-bandwidth bound, where the model size is known
    /// and the figure is possible.
    pub(crate) roofline_share: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) roofline: Option<super::roofline::Roofline>,
    pub(crate) usage_estimated: bool,
    pub(crate) gates: Vec<GateResult>,
    pub(crate) verdict: Verdict,
    /// Why the verdict is what it is, in one line.
    #[serde(default)]
    pub(crate) verdict_reason: String,
    /// Failed requests, one line each.
    pub(crate) problems: Vec<String>,
    /// How far the figures can be trusted: cache hits, estimates, bursts, retries.
    #[serde(default)]
    pub(crate) notes: Vec<String>,
    /// A replay of captured traffic: its source, pace and prompts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bench) replay: Option<super::replay::Replay>,
    /// The evaluation sets' answers, item by item (and production's, when compared).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) eval: Option<crate::eval::Evaluation>,
    pub(in crate::bench) samples: Vec<Sample>,
}

impl BenchResult {
    /// What the gates judge, from this result.
    pub(crate) fn measures(&self) -> Measures {
        let mut stats = self.latency.clone();
        // Results written before per-metric statistics kept only the p50s.
        let only_p50 = |v: f64| Stats {
            n: 1,
            p50: v,
            p90: v,
            p99: v,
            min: v,
            max: v,
        };
        if stats.is_empty() {
            for (m, v) in [
                (Metric::Ttft, self.ttft_p50_ms),
                (Metric::Decode, self.decode_tps_p50),
            ] {
                if let Some(v) = v {
                    stats.insert(m, only_p50(v));
                }
            }
        }
        Measures {
            rates: self.quality.clone(),
            stats,
            confidence: self.confidence.clone(),
            goodput: self.goodput,
            errors_pct: None,
            eval: self.eval.clone(),
        }
    }

    /// Why this result cannot serve as the baseline of relative gates, if it cannot: a
    /// baseline must be a complete measurement, not a run that broke half-way.
    pub(crate) fn unusable_as_baseline(&self) -> Option<String> {
        let failed = self.samples.iter().filter(|s| !s.warmup && !s.ok).count();
        if failed > 0 {
            Some(format!(
                "its run had {failed} failed requests (verdict {})",
                self.verdict
            ))
        } else if self.decode_tps_p50.is_none() || self.ttft_p50_ms.is_none() {
            Some("it measured no TTFT or decode speed".into())
        } else {
            None
        }
    }
}

fn one() -> usize {
    1
}

/// Samples that count: measured (not warm-up) and complete.
fn measured<'a>(samples: &'a [Sample], case: &str) -> Vec<&'a Sample> {
    samples
        .iter()
        .filter(|s| s.case == case && !s.warmup && s.ok)
        .collect()
}

/// Whether a sample's per-token figures (decode, TPOT, ITL) describe decoding.
pub(crate) fn per_token_valid(s: &Sample) -> bool {
    !s.burst && !s.impossible
}

fn near_full_hit(s: &Sample) -> bool {
    match (s.cached_tokens, s.prompt_tokens) {
        (Some(c), Some(p)) if c > 0 => p.saturating_sub(c) <= NEAR_FULL_UNCACHED,
        _ => false,
    }
}

/// TTFT p50 of each turn (multi-turn growth).
fn per_turn(ok: &[&Sample], turns: usize) -> Vec<f64> {
    (1..=turns)
        .filter_map(|t| {
            median(
                &ok.iter()
                    .filter(|s| s.turn == t)
                    .filter_map(|s| s.ttft_ms)
                    .collect::<Vec<_>>(),
            )
        })
        .collect()
}

/// One case's statistics over its measured samples.
pub(crate) fn summarize_case(
    case: &super::suite::Case,
    samples: &[Sample],
    checks: BTreeMap<String, f64>,
) -> CaseSummary {
    let all: Vec<&Sample> = samples.iter().filter(|s| s.case == case.name).collect();
    let tried = all.iter().filter(|s| !s.warmup).count();
    let ok = measured(samples, &case.name);
    let pick = |f: &dyn Fn(&Sample) -> Option<f64>| -> Vec<f64> {
        ok.iter().filter_map(|s| f(s)).collect()
    };
    let decoding: Vec<&&Sample> = ok.iter().filter(|s| per_token_valid(s)).collect();
    let pick_decoding = |f: &dyn Fn(&Sample) -> Option<f64>| -> Vec<f64> {
        decoding.iter().filter_map(|s| f(s)).collect()
    };
    let per_turn = per_turn(&ok, case.turns.len());
    let (tokens, chunks) = ok.iter().fold((0.0, 0usize), |(t, c), s| {
        (
            t + s.chunk_token_counts.iter().sum::<f64>(),
            c + s.chunk_at_ms.len(),
        )
    });
    let server = |s: &Sample| s.server_timings.clone().unwrap_or_default();
    CaseSummary {
        case: case.name.clone(),
        cache: case.cache,
        samples: tried,
        failed: tried - ok.len(),
        retried: all
            .iter()
            .filter(|s| !s.warmup && s.retried_after.is_some())
            .count(),
        ttft_ms: stats(&pick(&|s| s.ttft_ms)),
        ttfo_ms: stats(&pick(&|s| s.ttfo_ms)),
        ttft_p50_per_turn_ms: per_turn,
        ttfr_ms: stats(&pick(&|s| s.ttfr_ms)),
        tpot_ms: stats(&pick_decoding(&|s| s.tpot_ms)),
        decode_tps: stats(&pick_decoding(&|s| s.decode_tps)),
        itl_ms: stats(
            &decoding
                .iter()
                .flat_map(|s| s.itl_ms.iter().copied())
                .collect::<Vec<_>>(),
        ),
        e2e_ms: stats(&pick(&|s| Some(s.e2e_ms))),
        cold_start_ttft_ms: all
            .iter()
            .find(|s| s.warmup && s.turn == 1)
            .and_then(|s| s.ttft_ms),
        prompt_tokens: stats(&pick(&|s| s.prompt_tokens.map(|n| n as f64))),
        cached_tokens: stats(&pick(&|s| s.cached_tokens.map(|n| n as f64))),
        near_full_cache_hits: ok.iter().filter(|s| near_full_hit(s)).count(),
        tokens_per_chunk: (chunks > 0).then(|| tokens / chunks as f64),
        bursts: ok.iter().filter(|s| s.burst).count(),
        impossible: ok.iter().filter(|s| s.impossible).count(),
        server_decode_tps: stats(&pick(&|s| server(s).predicted_per_second)),
        decode_vs_server_pct: median(&pick_decoding(&|s| {
            let srv = server(s).predicted_per_second.filter(|v| *v > 0.0)?;
            Some((s.decode_tps? - srv) / srv * 100.0)
        })),
        ttft_minus_server_prompt_ms: median(&pick(&|s| Some(s.ttft_ms? - server(s).prompt_ms?))),
        checks,
    }
}

/// The caveats a reader needs before trusting the figures.
pub(crate) fn notes(cases: &[CaseSummary], samples: &[Sample], target: &Target) -> Vec<String> {
    let mut notes = Vec::new();
    for c in cases {
        case_notes(c, target, &mut notes);
    }
    sample_notes(samples, &mut notes);
    notes
}

/// One case's caveats: cache hits where none were meant, bursts, impossible speeds.
fn case_notes(c: &CaseSummary, target: &Target, notes: &mut Vec<String>) {
    let n = c.samples - c.failed;
    let max_cached = c.cached_tokens.as_ref().map_or(0.0, |s| s.max);
    if c.cache == CacheMode::Cold && max_cached > 0.0 {
        notes.push(format!(
            "{}: declared cold, yet the server reported up to {max_cached:.0} cached prompt \
                 tokens: its TTFT is not a cold one",
            c.case
        ));
    } else if c.near_full_cache_hits > 0 {
        notes.push(format!(
            "{}: {} of {n} measured TTFTs came from a near-full prompt-cache hit (at most \
                 {NEAR_FULL_UNCACHED} prompt tokens evaluated): they measure the cache",
            c.case, c.near_full_cache_hits,
        ));
    }
    if c.bursts > 0 {
        notes.push(format!(
            "{}: {} of {n} streams arrived in bursts (90% of the tokens within a few ms: the \
                 server buffered them); no decode speed, TPOT or ITL is reported from those",
            c.case, c.bursts
        ));
    }
    if c.impossible > 0 {
        notes.push(format!(
            "{}: {} samples measured a decode speed above what {} allows at their context (at \
                 most {:.0} tok/s with none, for {} bytes of weights read per token): \
                 impossible, so excluded (see the roofline's note for what the evidence says)",
            c.case,
            c.impossible,
            target
                .bandwidth
                .as_ref()
                .map_or("the memory bandwidth".into(), |b| b.to_string()),
            super::roofline::tps_at(target, 0.0).unwrap_or(0.0),
            target
                .active_weights_bytes
                .or(target.weights_bytes)
                .unwrap_or(0)
        ));
    }
}

/// The samples' caveats: estimated token counts, spread chunk counts, retries.
fn sample_notes(samples: &[Sample], notes: &mut Vec<String>) {
    let ok: Vec<&Sample> = samples.iter().filter(|s| s.ok && !s.warmup).collect();
    let estimated: Vec<&&Sample> = ok
        .iter()
        .filter(|s| s.token_source == TokenSource::Chunks)
        .collect();
    if !estimated.is_empty() {
        // Two rough counts side by side: one token per chunk, and 4 characters per token.
        let gap = median(
            &estimated
                .iter()
                .filter(|s| !s.chunk_at_ms.is_empty())
                .map(|s| {
                    let chunks = s.chunk_at_ms.len() as f64;
                    let by_chars = ((s.content.len() + s.reasoning.len()) as f64 / 4.0).max(1.0);
                    (chunks - by_chars).abs() / by_chars * 100.0
                })
                .collect::<Vec<_>>(),
        );
        notes.push(format!(
            "{} of {} samples had no usage from the server: their token counts are ESTIMATED as \
             one per token-bearing chunk (likely error: that count and a 4-characters-per-token \
             count differ by {} median; chunks that carry several tokens make it an undercount)",
            estimated.len(),
            ok.len(),
            gap.map_or("-".into(), |g| format!("{g:.0}%"))
        ));
    } else if ok.iter().any(|s| s.chunk_tokens == ChunkTokens::Spread) {
        notes.push(
            "the server does not say how many tokens each chunk carried: per-token ITL spreads \
             each sample's tokens evenly over its chunks"
                .into(),
        );
    }
    let retried: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.retried_after.is_some())
        .collect();
    if let Some(first) = retried.first() {
        notes.push(format!(
            "{} requests were sent again on a fresh connection after a transport error before \
             any response byte (first: {}); timed from the second send",
            retried.len(),
            first.retried_after.clone().unwrap_or_default()
        ));
    }
}

/// The verdict, from failed samples and gate outcomes, and why.
pub(crate) fn verdict(samples: &[Sample], gates: &[GateResult]) -> (Verdict, String) {
    let failed: Vec<&Sample> = samples.iter().filter(|s| !s.warmup && !s.ok).collect();
    let blamed: Vec<&&Sample> = failed
        .iter()
        .filter(|s| s.failure.is_some_and(Failure::blames_server))
        .collect();
    let measured = samples.iter().filter(|s| !s.warmup && s.ok).count();
    let gate = |o: GateOutcome| -> Vec<&str> {
        gates
            .iter()
            .filter(|g| g.outcome == o)
            .map(|g| g.gate.as_str())
            .collect()
    };
    if !blamed.is_empty() {
        return (
            Verdict::Error,
            format!(
                "the server failed {} of {} measured requests",
                blamed.len(),
                measured + failed.len()
            ),
        );
    }
    if measured == 0 && failed.is_empty() {
        return (Verdict::Error, "no request was measured".into());
    }
    let failing = gate(GateOutcome::Fail);
    if !failing.is_empty() {
        return (
            Verdict::Fail,
            format!("gates failed: {}", failing.join(", ")),
        );
    }
    if !failed.is_empty() {
        return (
            Verdict::Inconclusive,
            format!(
                "{} of {} measured requests never reached the server, even on a fresh \
                 connection (transport errors: the client's or the network's, not a verdict \
                 on the server)",
                failed.len(),
                measured + failed.len()
            ),
        );
    }
    let undecided = gate(GateOutcome::Inconclusive);
    if !undecided.is_empty() {
        return (
            Verdict::Inconclusive,
            format!("no evidence for gates: {}", undecided.join(", ")),
        );
    }
    let not_applied = gate(GateOutcome::NotApplied);
    if !not_applied.is_empty() {
        return (
            Verdict::Pass,
            format!(
                "every gate that applies passed (not applied, no production to compare with: {})",
                not_applied.join(", ")
            ),
        );
    }
    (Verdict::Pass, "every gate passed".into())
}
