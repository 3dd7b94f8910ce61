//! The simulator's Prometheus `/metrics`, as vLLM 0.32 writes them: its names
//! (`vllm:num_requests_running` and the rest), its labels (`engine="0"`, `model_name`), its
//! float values and its time-to-first-token histogram, so the benchmark's scraper reads
//! the sim as it reads a real vLLM (tests/it/vllm.rs scrapes both).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// vLLM's bucket bounds for `vllm:time_to_first_token_seconds`.
const TTFT_BUCKETS: [f64; 22] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];

/// Counters and gauges the simulator keeps while it serves.
#[derive(Default)]
pub(crate) struct Metrics {
    pub(crate) running: AtomicU64,
    pub(crate) waiting: AtomicU64,
    /// KV-cache tokens held by running requests (prompt + completion).
    pub(crate) kv_tokens: AtomicU64,
    pub(crate) prompt_tokens: AtomicU64,
    pub(crate) generation_tokens: AtomicU64,
    /// Prompt tokens looked up in the prefix cache, and those found there.
    pub(crate) prefix_queries: AtomicU64,
    pub(crate) prefix_hits: AtomicU64,
    pub(crate) successes: AtomicU64,
    /// Requests whose first token went out within each bound of `TTFT_BUCKETS` (not
    /// cumulative; summed when rendered), and all of them with their total in µs.
    ttft_buckets: [AtomicU64; TTFT_BUCKETS.len()],
    ttft_count: AtomicU64,
    ttft_sum_us: AtomicU64,
}

impl Metrics {
    /// One request's time to its first token.
    pub(crate) fn observe_ttft(&self, ttft: Duration) {
        let secs = ttft.as_secs_f64();
        if let Some(i) = TTFT_BUCKETS.iter().position(|b| secs <= *b) {
            self.ttft_buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.ttft_count.fetch_add(1, Ordering::Relaxed);
        self.ttft_sum_us
            .fetch_add(ttft.as_micros() as u64, Ordering::Relaxed);
    }

    /// The exposition text; `kv_capacity` is the KV-cache size in tokens.
    pub(crate) fn render(&self, model: &str, kv_capacity: u64) -> String {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64;
        let usage = get(&self.kv_tokens) / kv_capacity.max(1) as f64;
        let rows: [(&str, &str, &str, f64); 8] = [
            (
                "num_requests_running",
                "gauge",
                "Number of requests in model execution batches.",
                get(&self.running),
            ),
            (
                "num_requests_waiting",
                "gauge",
                "Number of requests waiting to be processed.",
                get(&self.waiting),
            ),
            (
                "kv_cache_usage_perc",
                "gauge",
                "KV-cache usage. 1 means 100 percent usage.",
                usage,
            ),
            (
                "prompt_tokens_total",
                "counter",
                "Number of prefill tokens processed.",
                get(&self.prompt_tokens),
            ),
            (
                "generation_tokens_total",
                "counter",
                "Number of generation tokens processed.",
                get(&self.generation_tokens),
            ),
            (
                "prefix_cache_queries_total",
                "counter",
                "Prefix cache queries, in terms of number of queried tokens.",
                get(&self.prefix_queries),
            ),
            (
                "prefix_cache_hits_total",
                "counter",
                "Prefix cache hits, in terms of number of cached tokens.",
                get(&self.prefix_hits),
            ),
            (
                "request_success_total",
                "counter",
                "Count of successfully processed requests.",
                get(&self.successes),
            ),
        ];
        let labels = format!("engine=\"0\",model_name=\"{model}\"");
        let mut out = String::new();
        for (name, kind, help, value) in rows {
            out.push_str(&format!(
                "# HELP vllm:{name} {help}\n# TYPE vllm:{name} {kind}\nvllm:{name}{{{labels}}} {value:?}\n"
            ));
        }
        let name = "vllm:time_to_first_token_seconds";
        out.push_str(&format!(
            "# HELP {name} Histogram of time to first token in seconds.\n# TYPE {name} histogram\n"
        ));
        let mut below = 0.0;
        for (bound, n) in TTFT_BUCKETS.iter().zip(&self.ttft_buckets) {
            below += get(n);
            out.push_str(&format!(
                "{name}_bucket{{engine=\"0\",le=\"{bound:?}\",model_name=\"{model}\"}} {below:?}\n"
            ));
        }
        let count = get(&self.ttft_count);
        out.push_str(&format!(
            "{name}_bucket{{engine=\"0\",le=\"+Inf\",model_name=\"{model}\"}} {count:?}\n\
             {name}_count{{{labels}}} {count:?}\n{name}_sum{{{labels}}} {:?}\n",
            get(&self.ttft_sum_us) / 1e6
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_histogram_is_cumulative_and_its_sum_in_seconds() {
        let m = Metrics::default();
        m.observe_ttft(Duration::from_millis(3));
        m.observe_ttft(Duration::from_millis(90));
        m.observe_ttft(Duration::from_secs(3000));
        let text = m.render("tiny", 100);
        let line = |prefix: &str| {
            text.lines()
                .find(|l| l.starts_with(prefix))
                .unwrap_or_else(|| panic!("{prefix} in {text}"))
                .rsplit_once(' ')
                .unwrap()
                .1
                .to_string()
        };
        let bucket = "vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=";
        assert_eq!(line(&format!("{bucket}\"0.001\"")), "0.0");
        assert_eq!(line(&format!("{bucket}\"0.005\"")), "1.0");
        assert_eq!(line(&format!("{bucket}\"0.1\"")), "2.0");
        assert_eq!(line(&format!("{bucket}\"2560.0\"")), "2.0");
        assert_eq!(line(&format!("{bucket}\"+Inf\"")), "3.0");
        assert_eq!(line("vllm:time_to_first_token_seconds_count"), "3.0");
        assert_eq!(line("vllm:time_to_first_token_seconds_sum"), "3000.093");
        assert_eq!(
            line("vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"tiny\"}"),
            "0.0"
        );
    }

    /// The simulator's page as the hand-written encoder wrote it for `scripted`'s events.
    const RECORDED: &str = include_str!("../../tests/fixtures/metrics/sim.prom");

    /// Every series with a value of its own: gauges, counters, a KV-cache share, and time
    /// to first token in a bucket, on a bound, and beyond the last.
    fn scripted() -> String {
        let m = Metrics::default();
        for (a, v) in [
            (&m.running, 2),
            (&m.waiting, 1),
            (&m.kv_tokens, 300),
            (&m.prompt_tokens, 1234),
            (&m.generation_tokens, 567),
            (&m.prefix_queries, 1000),
            (&m.prefix_hits, 250),
            (&m.successes, 7),
        ] {
            a.store(v, Ordering::Relaxed);
        }
        for ms in [3, 90, 1_000, 1_500, 3_000_000] {
            m.observe_ttft(Duration::from_millis(ms));
        }
        m.render("tiny", 1200)
    }

    #[test]
    fn the_page_holds_what_the_recorded_scrape_held() {
        assert_eq!(scripted(), RECORDED);
    }
}
