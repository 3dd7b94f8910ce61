//! How exactly the benchmark's streaming client measures: against the simulated engine
//! with a known TTFT and token interval, the error of measured TTFT and inter-token latency
//! at 1 and 64 concurrent streams, and the highest token rate measured without skew.
//!
//! `cargo bench --bench client_accuracy`. The sim paces tokens against absolute deadlines
//! from the moment it has read the request, and logs when it handed each token to its HTTP
//! layer; the client times from just before it sends. Errors are printed against both: the
//! schedule (end to end: the sim's lateness, loopback, HTTP parsing, scheduling on 2 cores)
//! and the hand-over (the client's own measurement error).

#[path = "../tests/it/support/mod.rs"]
mod support;

use serde_json::json;
use sparkctl::testkit::{stream, Sample};
use support::Sim;

fn p(values: &mut [f64], q: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    values[(((q / 100.0) * values.len() as f64).ceil() as usize).clamp(1, values.len()) - 1]
}

async fn requests(url: &str, concurrency: usize, rounds: usize, tokens: usize) -> Vec<Sample> {
    let client = sparkctl::testkit::http_client().unwrap();
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

/// The sim's log line for request `id` that starts with `prefix`, and the value after `key=`.
fn logged<'a>(log: &'a [String], prefix: &str, id: &str, key: &str) -> Option<&'a str> {
    let line = log
        .iter()
        .find(|l| l.starts_with(prefix) && l.contains(&format!("id={id} ")))?;
    Some(
        line.split(&format!("{key}="))
            .nth(1)?
            .split(' ')
            .next()?
            .trim(),
    )
}

/// Errors of measured TTFT and ITL, in ms, against two references.
///
/// The schedule: the sim's first token is due `ttft_ms` after it read the request (logged as
/// `arrived_unix_us`, so request-side queueing at 64 streams is not counted), tokens
/// `itl_ms` apart. End to end: includes the sim's own lateness and the delivery.
///
/// The hand-over: when the sim gave each token to its HTTP layer (`handed`): what is left is
/// the loopback, the kernel and the client — the client's own measurement error.
struct Errors {
    ttft_vs_schedule: Vec<f64>,
    itl_vs_schedule: Vec<f64>,
    ttft_vs_handed: Vec<f64>,
    itl_vs_handed: Vec<f64>,
    /// Requests the sim logged no hand-over for (it logs it after the stream, and the
    /// line is lost when the connection goes first): out of the hand-over figures.
    no_handed: usize,
}

fn errors(samples: &[Sample], sim: &Sim, ttft_ms: f64, itl_ms: f64) -> Errors {
    // The sim's stdout is read by a thread of its own: on a busy machine its last lines
    // may land a moment after the last answer.
    let complete = |log: &[String]| {
        samples.iter().all(|s| {
            let id = format!("id={} ", s.id.as_deref().unwrap_or("?"));
            ["POST", "handed"]
                .iter()
                .all(|p| log.iter().any(|l| l.starts_with(p) && l.contains(&id)))
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !complete(&sim.log.lock().unwrap()) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let log = sim.log.lock().unwrap().clone();
    let mut e = Errors {
        ttft_vs_schedule: Vec::new(),
        itl_vs_schedule: Vec::new(),
        ttft_vs_handed: Vec::new(),
        itl_vs_handed: Vec::new(),
        no_handed: 0,
    };
    for s in samples {
        let id = s.id.as_deref().unwrap();
        let seen = s.sent_unix_us as f64 + s.ttft_ms.unwrap() * 1e3;
        let arrived: f64 = logged(&log, "POST", id, "arrived_unix_us")
            .unwrap_or_else(|| panic!("{id} not in the sim's log"))
            .parse()
            .unwrap();
        e.ttft_vs_schedule
            .push((seen - arrived - ttft_ms * 1e3).abs() / 1e3);
        e.itl_vs_schedule
            .extend(s.itl_ms.iter().map(|i| (i - itl_ms).abs()));
        let Some(handed) = logged(&log, "handed", id, "unix_us") else {
            e.no_handed += 1;
            continue;
        };
        let handed: Vec<f64> = handed.split('+').map(|v| v.parse().unwrap()).collect();
        e.ttft_vs_handed.push((seen - handed[0]).abs() / 1e3);
        e.itl_vs_handed.extend(
            s.itl_ms
                .iter()
                .zip(&handed[1..])
                .map(|(i, gap)| (i - gap / 1e3).abs()),
        );
    }
    e
}

/// TTFT − the injected TTFT, in ms, over a closed loop of `streams` streams (three
/// requests each) through a fresh client: the first wave's connections opened before the
/// clock (`open_first`, what `bench` does) or inside it (what it did before, and what
/// AIPerf and guidellm do). All requests, and the first wave alone.
async fn first_wave(
    url: &str,
    streams: usize,
    open_first: bool,
    ttft_ms: f64,
) -> (Vec<f64>, Vec<f64>) {
    use sparkctl::testkit::load::{self, Level, Profile};
    let clients = sparkctl::testkit::http_client().unwrap();
    let body = json!({
        "model": "sim-model",
        "messages": [{"role": "user", "content": "Tell me about the history of the bicycle."}],
        "max_tokens": 20,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    let level = Level {
        clients: &clients,
        url,
        metrics_url: None,
        slo: None,
        open_first,
    };
    let run = load::run(
        &level,
        Profile::Concurrency { streams },
        vec![body; streams * 3],
    )
    .await;
    assert_eq!(run.failed, 0, "{:?}", run.records.iter().find(|r| !r.ok));
    // Closed loop: the first `streams` records by send time are the first wave.
    let mut by_send: Vec<_> = run.records.iter().collect();
    by_send.sort_by(|a, b| a.scheduled_ms.total_cmp(&b.scheduled_ms));
    let err = |r: &&load::Record| r.ttft_ms.unwrap() - ttft_ms;
    (
        by_send.iter().map(err).collect(),
        by_send.iter().take(streams).map(err).collect(),
    )
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
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
        let mut e = errors(&samples, &sim, ttft, 1000.0 / rate);
        let line = |what: &str, t: &mut Vec<f64>, i: &mut Vec<f64>| {
            println!(
                "  {streams:>2} stream(s), {:>3} requests, vs {what}: TTFT |error| p50 {:.3} ms, p99 {:.3} ms; ITL |error| p50 {:.3} ms, p99 {:.3} ms",
                samples.len(),
                p(t, 50.0),
                p(t, 99.0),
                p(i, 50.0),
                p(i, 99.0)
            )
        };
        line(
            "the schedule",
            &mut e.ttft_vs_schedule,
            &mut e.itl_vs_schedule,
        );
        line("the hand-over", &mut e.ttft_vs_handed, &mut e.itl_vs_handed);
        if e.no_handed > 0 {
            println!(
                "  ({} of {} requests without the sim's hand-over line: left out of that line)",
                e.no_handed,
                samples.len()
            );
        }
    }
    // A load level's first wave, side by side in the same run: connections opened inside
    // the clock (before) and before it (after, what `bench` does).
    println!("a closed-loop load level's TTFT error (measured − the injected {ttft} ms), 3 requests per stream:");
    for streams in [64, 128] {
        for (what, open_first) in [
            ("connections opened inside the clock", false),
            ("connections opened before the clock", true),
        ] {
            let (mut all, mut first) = rt.block_on(first_wave(&sim.url, streams, open_first, ttft));
            println!(
                "  {streams:>3} streams, {what}: TTFT error p50 {:+.1} ms, p99 {:+.1} ms (first wave alone: p99 {:+.1} ms)",
                p(&mut all, 50.0),
                p(&mut all, 99.0),
                p(&mut first, 99.0)
            );
        }
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
