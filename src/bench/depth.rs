//! Context depth: one question asked behind prior contexts of several sizes, each cold
//! (nothing the server may reuse) and warm (the context already in its prefix cache), with
//! the cached tokens the server reported per request as the proof of which was measured.
//! The seeds' multi-turn growth (TTFT 300 → 1600 ms on llama-server), as a curve.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::client::{self, Clients};
use super::stats::{stats, Stats};
use super::suite::{CacheMode, Case, ServerKind, Suite, Tag};

/// One request at a depth.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct DepthRecord {
    pub(in crate::bench) ok: bool,
    /// The request primed the cache (warm only) and is not in the statistics.
    pub(in crate::bench) priming: bool,
    pub(in crate::bench) ttft_ms: Option<f64>,
    pub(in crate::bench) decode_tps: Option<f64>,
    pub(in crate::bench) prompt_tokens: Option<u64>,
    pub(in crate::bench) cached_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bench) error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bench) failure: Option<client::Failure>,
}

/// One depth, cold or warm.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct DepthPoint {
    /// Prior context asked for, in tokens (4 characters each; the server's count is
    /// `prompt_tokens`).
    pub(in crate::bench) depth: usize,
    pub(in crate::bench) cache: CacheMode,
    pub(in crate::bench) ttft_ms: Option<Stats>,
    pub(in crate::bench) decode_tps: Option<Stats>,
    pub(in crate::bench) prompt_tokens: Option<Stats>,
    pub(in crate::bench) cached_tokens: Option<Stats>,
    /// What the server's cache reports say was measured.
    pub(in crate::bench) verdict: String,
    pub(in crate::bench) records: Vec<DepthRecord>,
}

/// Where and what to ask.
pub(crate) struct Setup<'a> {
    pub(in crate::bench) clients: &'a Clients,
    pub(in crate::bench) url: &'a str,
    pub(in crate::bench) suite: &'a Suite,
    pub(in crate::bench) model: &'a str,
    pub(in crate::bench) kind: ServerKind,
    pub(in crate::bench) nonce: &'a str,
    /// Measured requests per depth and cache mode.
    pub(in crate::bench) runs: usize,
}

fn body(s: &Setup, case: &Case, run: usize) -> Value {
    let history = [serde_json::json!({"role": "user", "content": case.turns[0]})];
    let tag = Tag {
        nonce: s.nonce,
        run: 3_000_000 + run,
        turn: 1,
    };
    s.suite.request(s.model, case, &history, tag, s.kind)
}

fn record(sample: &client::Sample, priming: bool) -> DepthRecord {
    DepthRecord {
        ok: sample.ok,
        priming,
        ttft_ms: sample.ttft_ms,
        decode_tps: sample.decode_tps,
        prompt_tokens: sample.prompt_tokens,
        cached_tokens: sample.cached_tokens,
        error: sample.error.clone(),
        failure: sample.failure,
    }
}

/// Whether the cached-token reports agree with the mode asked for; failed requests first.
fn verdict(cache: CacheMode, depth: usize, records: &[DepthRecord]) -> String {
    let failed: Vec<&DepthRecord> = records.iter().filter(|r| !r.ok).collect();
    let records: Vec<&DepthRecord> = records.iter().filter(|r| r.ok && !r.priming).collect();
    if let Some(first) = failed.first() {
        return format!(
            "FAILED: {} of {} requests failed ({})",
            failed.len(),
            failed.len() + records.len(),
            first.error.as_deref().unwrap_or("no error text")
        );
    }
    let cached: Vec<u64> = records.iter().filter_map(|r| r.cached_tokens).collect();
    if cached.is_empty() {
        return "the server reported no cached tokens: cold or warm cannot be told apart".into();
    }
    let (min, max) = (
        cached.iter().min().copied().unwrap_or(0),
        cached.iter().max().copied().unwrap_or(0),
    );
    match cache {
        CacheMode::Cold if max == 0 => "cold: 0 cached tokens in every request".into(),
        CacheMode::Cold => format!("NOT cold: up to {max} cached tokens"),
        // A warm context is cached when at least most of it was reused.
        CacheMode::WarmPrefix if depth == 0 || min > 0 => {
            format!("warm: {min}-{max} cached tokens per request")
        }
        CacheMode::WarmPrefix => format!("NOT warm: some requests had 0 cached tokens (max {max})"),
    }
}

/// Every depth, cold then warm; `case` is the question asked (its first turn).
pub(crate) async fn run(s: &Setup<'_>, case: &Case, depths: &[usize]) -> Vec<DepthPoint> {
    let mut out = Vec::new();
    let mut n = 0;
    for &depth in depths {
        for cache in [CacheMode::Cold, CacheMode::WarmPrefix] {
            let mut c = case.clone();
            c.system_tokens = (depth > 0).then_some(depth);
            c.cache = cache;
            let priming = usize::from(cache == CacheMode::WarmPrefix);
            let mut records = Vec::new();
            for i in 0..priming + s.runs {
                n += 1;
                let sample = client::stream(s.clients, s.url, &body(s, &c, n)).await;
                records.push(record(&sample, i < priming));
            }
            let measured: Vec<&DepthRecord> =
                records.iter().filter(|r| r.ok && !r.priming).collect();
            let pick = |f: &dyn Fn(&DepthRecord) -> Option<f64>| {
                stats(&measured.iter().filter_map(|r| f(r)).collect::<Vec<_>>())
            };
            out.push(DepthPoint {
                depth,
                cache,
                ttft_ms: pick(&|r| r.ttft_ms),
                decode_tps: pick(&|r| r.decode_tps),
                prompt_tokens: pick(&|r| r.prompt_tokens.map(|v| v as f64)),
                cached_tokens: pick(&|r| r.cached_tokens.map(|v| v as f64)),
                verdict: verdict(cache, depth, &records),
                records,
            });
        }
    }
    out
}

impl DepthPoint {
    /// The requests that failed, priming ones included: a context the server refuses
    /// fails every request behind it.
    pub(crate) fn failed(&self) -> impl Iterator<Item = &DepthRecord> {
        self.records.iter().filter(|r| !r.ok)
    }

    /// `depth 320 (cold)`, as problems and reasons name it.
    pub(crate) fn label(&self) -> String {
        let cache = match self.cache {
            CacheMode::Cold => "cold",
            CacheMode::WarmPrefix => "warm",
        };
        format!("depth {} ({cache})", self.depth)
    }
}
