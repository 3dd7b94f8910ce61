//! The simulator's Prometheus `/metrics`, under vLLM's names (`vllm:num_requests_running`
//! and the rest), so the benchmark's scraper reads the sim as it reads a real engine.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters and gauges the simulator keeps while it serves.
#[derive(Default)]
pub struct Metrics {
    pub running: AtomicU64,
    pub waiting: AtomicU64,
    /// KV-cache tokens held by running requests (prompt + completion).
    pub kv_tokens: AtomicU64,
    pub prompt_tokens: AtomicU64,
    pub generation_tokens: AtomicU64,
    /// Prompt tokens looked up in the prefix cache, and those found there.
    pub prefix_queries: AtomicU64,
    pub prefix_hits: AtomicU64,
    pub successes: AtomicU64,
}

impl Metrics {
    /// The exposition text; `kv_capacity` is the KV-cache size in tokens.
    pub fn render(&self, model: &str, kv_capacity: u64) -> String {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let usage = get(&self.kv_tokens) as f64 / kv_capacity.max(1) as f64;
        let rows: [(&str, &str, &str, String); 8] = [
            (
                "num_requests_running",
                "gauge",
                "Requests on a slot.",
                get(&self.running).to_string(),
            ),
            (
                "num_requests_waiting",
                "gauge",
                "Requests queued for a slot.",
                get(&self.waiting).to_string(),
            ),
            (
                "kv_cache_usage_perc",
                "gauge",
                "KV-cache usage; 1 means 100 percent.",
                format!("{usage:.6}"),
            ),
            (
                "prompt_tokens_total",
                "counter",
                "Prompt tokens processed.",
                get(&self.prompt_tokens).to_string(),
            ),
            (
                "generation_tokens_total",
                "counter",
                "Generation tokens processed.",
                get(&self.generation_tokens).to_string(),
            ),
            (
                "prefix_cache_queries_total",
                "counter",
                "Prompt tokens looked up in the prefix cache.",
                get(&self.prefix_queries).to_string(),
            ),
            (
                "prefix_cache_hits_total",
                "counter",
                "Prompt tokens found in the prefix cache.",
                get(&self.prefix_hits).to_string(),
            ),
            (
                "request_success_total",
                "counter",
                "Requests finished.",
                get(&self.successes).to_string(),
            ),
        ];
        let mut out = String::new();
        for (name, kind, help, value) in rows {
            out.push_str(&format!(
                "# HELP vllm:{name} {help}\n# TYPE vllm:{name} {kind}\nvllm:{name}{{model_name=\"{model}\"}} {value}\n"
            ));
        }
        out
    }
}
