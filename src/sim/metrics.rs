//! The simulator's Prometheus `/metrics`, as vLLM 0.32 names them: its names
//! (`vllm:num_requests_running` and the rest), its labels (`engine="0"`, `model_name`), its
//! float values and its time-to-first-token histogram with vLLM's bounds, so the
//! benchmark's scraper reads the sim as it reads a real vLLM (tests/it/vllm.rs scrapes
//! both). Written by `crate::exposition`'s encoder, which writes a whole-number bound as
//! Go's clients do (`le="1"`, Python's `le="1.0"`: the same number) and the bucket counts
//! as integers.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::exposition::{self, Exposed, Format, Kind, Page};

/// vLLM's bucket bounds for `vllm:time_to_first_token_seconds`.
const TTFT_BUCKETS: [f64; 22] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];

/// Counters and gauges the simulator keeps while it serves.
#[derive(Default)]
pub(crate) struct Metrics {
    pub(in crate::sim) running: AtomicU64,
    pub(in crate::sim) waiting: AtomicU64,
    /// KV-cache tokens held by running requests (prompt + completion).
    pub(in crate::sim) kv_tokens: AtomicU64,
    pub(in crate::sim) prompt_tokens: AtomicU64,
    pub(in crate::sim) generation_tokens: AtomicU64,
    /// Prompt tokens looked up in the prefix cache, and those found there.
    pub(in crate::sim) prefix_queries: AtomicU64,
    pub(in crate::sim) prefix_hits: AtomicU64,
    pub(in crate::sim) successes: AtomicU64,
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

    /// The page in `format`, for `model`; `kv_capacity` is the KV-cache size in tokens.
    pub(crate) fn render(
        self: &Arc<Self>,
        model: &str,
        kv_capacity: u64,
        format: Format,
    ) -> String {
        let page = Scraped {
            metrics: self.clone(),
            model: model.to_string(),
            kv_capacity,
        };
        exposition::encode(format, vec![Box::new(page)])
    }
}

/// What one scrape reads: the counters, and what they are about.
struct Scraped {
    metrics: Arc<Metrics>,
    model: String,
    kv_capacity: u64,
}

impl Exposed for Scraped {
    fn expose(&self, page: &mut Page<'_>) -> fmt::Result {
        let m = &self.metrics;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64;
        let usage = get(&m.kv_tokens) / self.kv_capacity.max(1) as f64;
        let rows: [(&str, Kind, &str, f64); 8] = [
            (
                "num_requests_running",
                Kind::Gauge,
                "Number of requests in model execution batches.",
                get(&m.running),
            ),
            (
                "num_requests_waiting",
                Kind::Gauge,
                "Number of requests waiting to be processed.",
                get(&m.waiting),
            ),
            (
                "kv_cache_usage_perc",
                Kind::Gauge,
                "KV-cache usage. 1 means 100 percent usage.",
                usage,
            ),
            (
                "prompt_tokens",
                Kind::Counter,
                "Number of prefill tokens processed.",
                get(&m.prompt_tokens),
            ),
            (
                "generation_tokens",
                Kind::Counter,
                "Number of generation tokens processed.",
                get(&m.generation_tokens),
            ),
            (
                "prefix_cache_queries",
                Kind::Counter,
                "Prefix cache queries, in terms of number of queried tokens.",
                get(&m.prefix_queries),
            ),
            (
                "prefix_cache_hits",
                Kind::Counter,
                "Prefix cache hits, in terms of number of cached tokens.",
                get(&m.prefix_hits),
            ),
            (
                "request_success",
                Kind::Counter,
                "Count of successfully processed requests.",
                get(&m.successes),
            ),
        ];
        // vLLM's values are Python floats: counters and gauges alike are written as f64.
        let labels = [("engine", "0"), ("model_name", self.model.as_str())];
        for (name, kind, help, value) in rows {
            let name = format!("vllm:{name}");
            let mut f = page.family(&name, help, kind)?;
            match kind {
                Kind::Counter => f.counter(&labels, value)?,
                _ => f.gauge(&labels, value)?,
            }
        }
        let mut f = page.family(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            Kind::Histogram,
        )?;
        let buckets = TTFT_BUCKETS
            .iter()
            .zip(&m.ttft_buckets)
            .map(|(bound, n)| (*bound, n.load(Ordering::Relaxed)));
        let count = m.ttft_count.load(Ordering::Relaxed);
        f.histogram(&labels, buckets, count, get(&m.ttft_sum_us) / 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exposition::Scrape;

    #[test]
    fn the_histogram_is_cumulative_and_its_sum_in_seconds() {
        let m = Metrics::default();
        m.observe_ttft(Duration::from_millis(3));
        m.observe_ttft(Duration::from_millis(90));
        m.observe_ttft(Duration::from_secs(3000));
        let text = Arc::new(m).render("tiny", 100, Format::Text);
        let scrape = Scrape::parse(&text);
        let line = |name: &str, le: Option<&str>| {
            let mut labels = vec![("engine", "0"), ("model_name", "tiny")];
            labels.extend(le.map(|b| ("le", b)));
            scrape
                .get(name, &labels)
                .unwrap_or_else(|| panic!("{name} {le:?} in {text}"))
        };
        let bucket = "vllm:time_to_first_token_seconds_bucket";
        assert_eq!(line(bucket, Some("0.001")), 0.0);
        assert_eq!(line(bucket, Some("0.005")), 1.0);
        assert_eq!(line(bucket, Some("0.1")), 2.0);
        assert_eq!(line(bucket, Some("2560.0")), 2.0);
        assert_eq!(line(bucket, Some("+Inf")), 3.0);
        assert_eq!(line("vllm:time_to_first_token_seconds_count", None), 3.0);
        assert_eq!(line("vllm:time_to_first_token_seconds_sum", None), 3000.093);
        assert_eq!(line("vllm:kv_cache_usage_perc", None), 0.0);
    }

    /// The simulator's page as the hand-written encoder wrote it for `scripted`'s events.
    const RECORDED: &str = include_str!("../../tests/fixtures/metrics/sim.prom");

    /// Every series with a value of its own: gauges, counters, a KV-cache share, and time
    /// to first token in a bucket, on a bound, and beyond the last.
    fn scripted(format: Format) -> String {
        let m = Arc::new(Metrics::default());
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
        m.render("tiny", 1200, format)
    }

    /// The same HELP and TYPE lines, samples and values as before the encoder changed,
    /// and outside the histogram the very text; in it, a whole-number bound is written
    /// `le="1"` (was `le="1.0"`), a count `3` (was `3.0`), `le` last among the labels.
    #[test]
    fn the_page_holds_what_the_recorded_scrape_held() {
        let page = scripted(Format::Text);
        assert_eq!(Scrape::parse(&page), Scrape::parse(RECORDED), "{page}");
        let outside = |p: &str| {
            p.lines()
                .filter(|l| !l.starts_with("vllm:time_to_first_token_seconds_"))
                .map(String::from)
                .collect::<Vec<_>>()
        };
        assert_eq!(outside(&page), outside(RECORDED));
        assert!(page.contains("_bucket{engine=\"0\",model_name=\"tiny\",le=\"1\"} 3\n"));
        // OpenMetrics when asked: the same samples, then its end.
        let open = scripted(Format::OpenMetrics);
        assert!(open.ends_with("\n# EOF\n"), "{open}");
        assert!(
            open.contains("# TYPE vllm:prompt_tokens counter\n"),
            "{open}"
        );
        let (open, recorded) = (Scrape::parse(&open), Scrape::parse(RECORDED));
        assert_eq!(open.samples, recorded.samples);
    }
}
