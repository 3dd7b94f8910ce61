//! The server's side of a run: its Prometheus `/metrics` (vLLM, SGLang, llama-server with
//! `--metrics`), read before, during and after, each engine's names mapped onto one set;
//! and the host's memory from `/proc/meminfo` (on a Spark, CPU and GPU share it).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Engine metric names → the figure they report. Several label sets of one name add up.
const NAMES: &[(&str, Figure)] = &[
    ("vllm:num_requests_running", Figure::Running),
    ("llamacpp:requests_processing", Figure::Running),
    ("sglang:num_running_reqs", Figure::Running),
    ("vllm:num_requests_waiting", Figure::Waiting),
    ("llamacpp:requests_deferred", Figure::Waiting),
    ("sglang:num_queue_reqs", Figure::Waiting),
    ("vllm:kv_cache_usage_perc", Figure::KvUsage),
    ("vllm:gpu_cache_usage_perc", Figure::KvUsage),
    ("llamacpp:kv_cache_usage_ratio", Figure::KvUsage),
    ("sglang:token_usage", Figure::KvUsage),
    ("vllm:prefix_cache_hits_total", Figure::PrefixHits),
    ("vllm:prefix_cache_queries_total", Figure::PrefixQueries),
    ("vllm:generation_tokens_total", Figure::GenerationTokens),
    ("llamacpp:tokens_predicted_total", Figure::GenerationTokens),
    ("sglang:generation_tokens_total", Figure::GenerationTokens),
    ("vllm:prompt_tokens_total", Figure::PromptTokens),
    ("llamacpp:prompt_tokens_total", Figure::PromptTokens),
    ("sglang:prompt_tokens_total", Figure::PromptTokens),
    // The server's own time to first token, as a histogram: its sum and count.
    (
        "vllm:time_to_first_token_seconds_sum",
        Figure::TtftSecondsSum,
    ),
    (
        "sglang:time_to_first_token_seconds_sum",
        Figure::TtftSecondsSum,
    ),
    ("vllm:time_to_first_token_seconds_count", Figure::TtftCount),
    (
        "sglang:time_to_first_token_seconds_count",
        Figure::TtftCount,
    ),
];

/// What the server reports, whatever the engine calls it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Figure {
    Running,
    Waiting,
    /// KV-cache use, 0..1.
    KvUsage,
    PrefixHits,
    PrefixQueries,
    GenerationTokens,
    PromptTokens,
    /// Seconds from arrival to first token, summed over requests (vLLM, SGLang).
    TtftSecondsSum,
    /// Requests in that sum.
    TtftCount,
}

/// One scrape: when (ms from the run's start) and what.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Snapshot {
    at_ms: f64,
    figures: BTreeMap<Figure, f64>,
    /// The host's MemAvailable then, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mem_available: Option<u64>,
}

/// The known figures of an exposition text.
pub(crate) fn parse(text: &str) -> BTreeMap<Figure, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((name_labels, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let name = name_labels.split('{').next().unwrap_or("").trim();
        let Some((_, fig)) = NAMES.iter().find(|(n, _)| *n == name) else {
            continue;
        };
        if let Ok(v) = value.trim().parse::<f64>() {
            *out.entry(*fig).or_insert(0.0) += v;
        }
    }
    out
}

/// Scrapes `url` once; why not, when it cannot (no endpoint, not Prometheus text, none of
/// the names an engine uses).
pub(crate) async fn scrape(
    client: &reqwest::Client,
    url: &str,
) -> Result<BTreeMap<Figure, f64>, String> {
    let r = client
        .get(url)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .map_err(|e| format!("GET {url}: {}", crate::error::chain(&e)))?;
    if !r.status().is_success() {
        return Err(format!(
            "GET {url} answered {} (llama-server serves it with --metrics; vLLM and SGLang \
             with --enable-metrics)",
            r.status()
        ));
    }
    let text = r.text().await.map_err(|e| format!("GET {url}: {e}"))?;
    let figures = parse(&text);
    if figures.is_empty() {
        return Err(format!(
            "{url} has none of the metrics vLLM, SGLang or llama-server export"
        ));
    }
    Ok(figures)
}

/// Every `every` until `stop` turns true: the server's metrics (when `url` is given) and
/// the host's available memory; the snapshots, timed from `epoch`.
pub(crate) async fn watch(
    client: reqwest::Client,
    url: Option<String>,
    every: Duration,
    epoch: Instant,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Vec<Snapshot> {
    let mut out = Vec::new();
    loop {
        let figures = match &url {
            Some(u) => scrape(&client, u).await.unwrap_or_default(),
            None => BTreeMap::new(),
        };
        out.push(Snapshot {
            at_ms: epoch.elapsed().as_secs_f64() * 1e3,
            figures,
            mem_available: meminfo().map(|m| m.1),
        });
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.wait_for(|s| *s) => break,
        }
    }
    out
}

/// What the server reported while one load level ran.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct During {
    /// Scrapes that returned the server's metrics.
    scrapes: usize,
    /// The least memory the host had available while the level ran, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bench) host_available_min: Option<u64>,
    pub(in crate::bench) waiting_mean: Option<f64>,
    pub(in crate::bench) waiting_max: Option<f64>,
    running_max: Option<f64>,
    kv_usage_max: Option<f64>,
    /// Counters' growth between the first and the last scrape.
    generation_tokens: Option<f64>,
    prefix_hit_pct: Option<f64>,
}

pub(crate) fn during(snaps: &[Snapshot]) -> During {
    let series = |f: Figure| -> Vec<f64> {
        snaps
            .iter()
            .filter_map(|s| s.figures.get(&f).copied())
            .collect()
    };
    let max = |f: Figure| series(f).into_iter().reduce(f64::max);
    let growth = |f: Figure| {
        let v = series(f);
        Some(v.last()? - v.first()?)
    };
    let waiting = series(Figure::Waiting);
    During {
        scrapes: snaps.iter().filter(|s| !s.figures.is_empty()).count(),
        host_available_min: snaps.iter().filter_map(|s| s.mem_available).min(),
        waiting_mean: (!waiting.is_empty())
            .then(|| waiting.iter().sum::<f64>() / waiting.len() as f64),
        waiting_max: max(Figure::Waiting),
        running_max: max(Figure::Running),
        kv_usage_max: max(Figure::KvUsage),
        generation_tokens: growth(Figure::GenerationTokens),
        prefix_hit_pct: growth(Figure::PrefixHits)
            .zip(growth(Figure::PrefixQueries))
            .filter(|(_, q)| *q > 0.0)
            .map(|(h, q)| h / q * 100.0),
    }
}

/// The server's metrics endpoint over the whole benchmark: before, after, or why none.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct ServerSide {
    pub(in crate::bench) url: String,
    /// Why the server's metrics are missing from this result, when they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bench) unavailable: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bench) before: Option<BTreeMap<Figure, f64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bench) after: Option<BTreeMap<Figure, f64>>,
    /// The server's own mean time to first token over the benchmark (its histogram's sum
    /// and count, after less before), beside the client's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bench) ttft_mean_ms: Option<f64>,
    /// The host's memory before, after, and the least available seen between.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bench) host_memory: Option<HostMemory>,
}

impl ServerSide {
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    pub(crate) fn unavailable(&self) -> Option<&str> {
        self.unavailable.as_deref()
    }

    pub(crate) fn ttft_mean_ms(&self) -> Option<f64> {
        self.ttft_mean_ms
    }

    pub(crate) fn host_memory(&self) -> Option<HostMemory> {
        self.host_memory
    }
}

/// The server's mean time to first token between two scrapes, ms; None when it reports
/// none or served no request between them.
pub(crate) fn ttft_mean_ms(
    before: &BTreeMap<Figure, f64>,
    after: &BTreeMap<Figure, f64>,
) -> Option<f64> {
    let grew = |f: Figure| Some(after.get(&f)? - before.get(&f).copied().unwrap_or(0.0));
    let (sum, count) = (grew(Figure::TtftSecondsSum)?, grew(Figure::TtftCount)?);
    (count > 0.0).then(|| sum / count * 1e3)
}

/// `/proc/meminfo`, in bytes.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub(crate) struct HostMemory {
    pub(in crate::bench) total: u64,
    pub(in crate::bench) available_before: u64,
    pub(in crate::bench) available_after: u64,
    /// The least seen while load levels ran (scraped every 200 ms with the metrics).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bench) available_min: Option<u64>,
}

impl std::fmt::Display for HostMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let gb = |b: u64| b as f64 / 1e9;
        write!(
            f,
            "host memory available {:.1} GB before, {} during load, {:.1} GB after, of {:.1} GB (/proc/meminfo)",
            gb(self.available_before),
            self.available_min
                .map_or("unwatched".into(), |m| format!("{:.1} GB at least", gb(m))),
            gb(self.available_after),
            gb(self.total)
        )
    }
}

/// (MemTotal, MemAvailable) in bytes, when /proc/meminfo can be read.
pub(crate) fn meminfo() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))?
            .split_whitespace()
            .nth(1)?
            .parse::<u64>()
            .ok()
            .map(|kb| kb * 1024)
    };
    Some((field("MemTotal:")?, field("MemAvailable:")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_engine_s_names_map_onto_one_set_and_label_sets_add_up() {
        let vllm = "# HELP vllm:num_requests_waiting x\nvllm:num_requests_waiting{model_name=\"a\"} 3\nvllm:num_requests_waiting{model_name=\"b\"} 2\nvllm:kv_cache_usage_perc{model_name=\"a\"} 0.25\nvllm:other 9\n";
        let f = parse(vllm);
        assert_eq!(f[&Figure::Waiting], 5.0);
        assert_eq!(f[&Figure::KvUsage], 0.25);
        assert_eq!(f.len(), 2);
        let llama = "llamacpp:requests_processing 1\nllamacpp:requests_deferred 4\nllamacpp:tokens_predicted_total 3469\n";
        let f = parse(llama);
        assert_eq!((f[&Figure::Running], f[&Figure::Waiting]), (1.0, 4.0));
        assert_eq!(f[&Figure::GenerationTokens], 3469.0);
        let (total, avail) = meminfo().unwrap();
        assert!(total > 0 && avail <= total);
    }

    /// vLLM 0.32's own lines (the suite's real vLLM): its histogram's sum and count give
    /// the server's mean TTFT between two scrapes; its buckets are not figures.
    #[test]
    fn the_server_ttft_is_its_histogram_growth() {
        let at = |sum: f64, count: f64| {
            parse(&format!(
                "vllm:time_to_first_token_seconds_bucket{{engine=\"0\",le=\"0.01\",model_name=\"tiny\"}} 5.0\n\
                 vllm:time_to_first_token_seconds_count{{engine=\"0\",model_name=\"tiny\"}} {count:?}\n\
                 vllm:time_to_first_token_seconds_sum{{engine=\"0\",model_name=\"tiny\"}} {sum:?}\n"
            ))
        };
        let (before, after) = (at(0.06933856010437012, 6.0), at(0.26933856010437012, 16.0));
        assert_eq!(before.len(), 2);
        let mean = ttft_mean_ms(&before, &after).unwrap();
        assert!((mean - 20.0).abs() < 1e-9, "{mean}");
        assert_eq!(ttft_mean_ms(&after, &after), None);
        assert_eq!(
            ttft_mean_ms(&BTreeMap::new(), &parse("vllm:num_requests_running 1\n")),
            None
        );
    }
}
