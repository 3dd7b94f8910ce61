//! How exactly the benchmark's streaming client measures: against the simulated engine
//! with a known TTFT and token interval, the error of measured TTFT and inter-token latency
//! at 1 and 64 concurrent streams, and the highest token rate measured without skew.
//!
//! `cargo bench --bench client_accuracy`. The sim paces tokens against absolute deadlines
//! from the moment it has read the request; the client times from just before it sends. So
//! the TTFT error below is end to end (loopback, HTTP parsing, scheduling on 2 cores).

#[path = "../tests/support/mod.rs"]
mod support;

use serde_json::json;
use sparkctl::bench::client::{stream, Sample};
use support::Sim;

fn p(values: &mut [f64], q: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    values[(((q / 100.0) * values.len() as f64).ceil() as usize).clamp(1, values.len()) - 1]
}

async fn requests(url: &str, concurrency: usize, rounds: usize, tokens: usize) -> Vec<Sample> {
    let client = sparkctl::bench::http_client().unwrap();
    let body = json!({
        "model": "sim-model",
        "messages": [{"role": "user", "content": "Tell me about the history of the bicycle."}],
        "max_tokens": tokens,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    let mut out = Vec::new();
    for _ in 0..rounds {
        let batch = (0..concurrency).map(|_| stream(&client, url, &body));
        out.extend(futures_util::future::join_all(batch).await);
    }
    assert!(
        out.iter().all(|s| s.ok),
        "{:?}",
        out.iter().find(|s| !s.ok).and_then(|s| s.error.clone())
    );
    out
}

/// TTFT error against the sim's schedule: its first token is due `ttft_ms` after it had
/// read the request (logged as `arrived_unix_us`), so request-side queueing at 64 streams
/// is not counted as client error. ITL error against the injected interval.
fn errors(samples: &[Sample], sim: &Sim, ttft_ms: f64, itl_ms: f64) -> (Vec<f64>, Vec<f64>) {
    let log = sim.log.lock().unwrap().clone();
    let arrived = |id: &str| -> f64 {
        let line = log
            .iter()
            .find(|l| l.contains(&format!("id={id} ")))
            .unwrap_or_else(|| panic!("{id} not in the sim's log"));
        line.split("arrived_unix_us=")
            .nth(1)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let ttft = samples
        .iter()
        .map(|s| {
            let seen = s.sent_unix_us as f64 + s.ttft_ms.unwrap() * 1e3;
            let due = arrived(s.id.as_deref().unwrap()) + ttft_ms * 1e3;
            (seen - due).abs() / 1e3
        })
        .collect();
    let itl = samples
        .iter()
        .flat_map(|s| s.itl_ms.iter().map(|i| (i - itl_ms).abs()))
        .collect();
    (ttft, itl)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (ttft, rate, tokens) = (50.0, 50.0, 20);
    let sim = Sim::start(&[
        "--ttft",
        "50ms",
        "--token-rate",
        "50",
        "--tokens",
        "20",
        "--load-time",
        "0s",
    ]);
    sim.wait_ready(std::time::Duration::from_secs(10));
    println!("client accuracy vs the simulated engine (TTFT {ttft} ms, {rate} tok/s = {} ms apart, {tokens} tokens)", 1000.0 / rate);
    for (streams, rounds) in [(1, 40), (64, 3)] {
        let samples = rt.block_on(requests(&sim.url, streams, rounds, tokens));
        let (mut t, mut i) = errors(&samples, &sim, ttft, 1000.0 / rate);
        println!(
            "  {streams:>2} stream(s), {:>3} requests: TTFT |error| p50 {:.3} ms, p99 {:.3} ms; ITL |error| p50 {:.3} ms, p99 {:.3} ms",
            samples.len(),
            p(&mut t, 50.0),
            p(&mut t, 99.0),
            p(&mut i, 50.0),
            p(&mut i, 99.0)
        );
    }
    drop(sim);
    // Faster and faster servers: the highest rate whose decode speed is measured within 2%.
    let mut best = 0.0;
    for rate in [100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0] {
        let sim = Sim::start(&[
            "--ttft",
            "5ms",
            "--token-rate",
            &rate.to_string(),
            "--tokens",
            "200",
            "--load-time",
            "0s",
        ]);
        sim.wait_ready(std::time::Duration::from_secs(10));
        let samples = rt.block_on(requests(&sim.url, 1, 10, 200));
        let mut tps: Vec<f64> = samples.iter().filter_map(|s| s.decode_tps).collect();
        let measured = p(&mut tps, 50.0);
        let skew = (measured - rate).abs() / rate * 100.0;
        println!("  {rate:>6} tok/s injected: measured p50 {measured:.1} tok/s ({skew:.2}% off)");
        if skew <= 2.0 {
            best = rate;
        }
    }
    println!("highest token rate measured within 2%: {best} tok/s");
}
