//! What the front door costs a request: the benchmark client against the simulated engine
//! directly and through a real front door routing to it (`sparkctl rollback --to sim`
//! in a sandbox), interleaved, at 1 and 64 concurrent streams.
//!
//! `cargo bench --bench frontdoor_overhead`. The sim logs when it handed each token to its
//! HTTP layer; the time from there to the client's arrival is measured each way, so the
//! difference is the front door's share per token, independent of the sim's own pacing.

#[path = "../tests/it/support/mod.rs"]
mod support;

use serde_json::{json, Value};
use sparkctl::testkit::{stream, Clients, Sample};
use support::Deck;

fn p(values: &mut [f64], q: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    values[(((q / 100.0) * values.len() as f64).ceil() as usize).clamp(1, values.len()) - 1]
}

/// Each sample's token arrivals minus the sim's hand-overs, ms: first token, then every one.
fn delivery(samples: &[Sample], log: &[String]) -> (Vec<f64>, Vec<f64>) {
    let (mut first, mut all) = (Vec::new(), Vec::new());
    for s in samples {
        let id = s.id.as_deref().unwrap();
        let line = log
            .iter()
            .find(|l| l.starts_with("handed") && l.contains(&format!("id={id} ")))
            .unwrap_or_else(|| panic!("{id} not in the sim's log"));
        let mut t = 0.0;
        let handed: Vec<f64> = line
            .split("unix_us=")
            .nth(1)
            .unwrap()
            .split('+')
            .map(|v| {
                t += v.trim().parse::<f64>().unwrap();
                t
            })
            .collect();
        let sent = s.sent_unix_us as f64;
        for (i, at) in s.chunk_at_ms.iter().enumerate() {
            let d = (sent + at * 1e3 - handed[i]) / 1e3;
            if i == 0 {
                first.push(d);
            }
            all.push(d);
        }
    }
    (first, all)
}

async fn requests(clients: &Clients, url: &str, streams: usize) -> Vec<Sample> {
    let body = json!({
        "model": "sim-model", "max_tokens": 32, "stream": true,
        "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "Tell me about the history of the bicycle."}],
    });
    let batch = (0..streams).map(|_| stream(clients, url, &body));
    futures_util::future::join_all(batch).await
}

fn main() {
    let deck = Deck::new("bench-frontdoor");
    let sim_port = support::free_port();
    deck.recipe(
        "sim",
        &format!("engine: sim\nruntime: process\nserver:\n  port: {sim_port}\n  args: [--load-time, 0s, --ttft, 20ms, --token-rate, \"50\", --tokens, \"32\"]\n  memory_gb: 1\n"),
    );
    deck.ok(&["rollback", "--to", "sim"]);
    let direct = format!("http://127.0.0.1:{sim_port}");
    let door = deck.door_url();
    let log_path = std::fs::read_dir(deck.dir.join("state/logs/sim"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    // As sparkctl runs it: one thread.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let clients = Clients::new().unwrap();
    println!("front door overhead (sim: TTFT 20 ms, 50 tok/s, 32 tokens; direct and through the front door, interleaved)");
    for (streams, rounds) in [(1usize, 40usize), (64, 6)] {
        let (mut d, mut f) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            d.extend(rt.block_on(requests(&clients, &direct, streams)));
            f.extend(rt.block_on(requests(&clients, &door, streams)));
        }
        let failed = f.iter().filter(|s| !s.ok).count() + d.iter().filter(|s| !s.ok).count();
        std::thread::sleep(std::time::Duration::from_millis(300));
        let log: Vec<String> = std::fs::read_to_string(&log_path)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
        let (mut df, mut da) = delivery(&d, &log);
        let (mut ff, mut fa) = delivery(&f, &log);
        let mut dt: Vec<f64> = d.iter().filter_map(|s| s.ttft_ms).collect();
        let mut ft: Vec<f64> = f.iter().filter_map(|s| s.ttft_ms).collect();
        println!(
            "  {streams:>2} stream(s), {} requests each way, {failed} failed: TTFT p50 direct {:.3} ms, through the door {:.3} ms ({:+.3} ms)",
            d.len(),
            p(&mut dt, 50.0),
            p(&mut ft, 50.0),
            p(&mut ft, 50.0) - p(&mut dt, 50.0)
        );
        println!(
            "      first token, hand-over to client p50: direct {:.3} ms, door {:.3} ms ({:+.3} ms); every token p50: direct {:.3} ms, door {:.3} ms ({:+.3} ms per token), p99 {:.3} vs {:.3} ms",
            p(&mut df, 50.0),
            p(&mut ff, 50.0),
            p(&mut ff, 50.0) - p(&mut df, 50.0),
            p(&mut da, 50.0),
            p(&mut fa, 50.0),
            p(&mut fa, 50.0) - p(&mut da, 50.0),
            p(&mut da, 99.0),
            p(&mut fa, 99.0)
        );
    }
    let metrics: Value = Value::String(
        support::text(
            &std::process::Command::new("curl")
                .args(["-s", &format!("{door}/metrics")])
                .output()
                .unwrap()
                .stdout,
        )
        .lines()
        .filter(|l| {
            l.starts_with("sparkctl_frontdoor_requests_total")
                || l.starts_with("sparkctl_frontdoor_errors_total")
        })
        .collect::<Vec<_>>()
        .join("; "),
    );
    println!(
        "  the front door's own count: {}",
        metrics.as_str().unwrap()
    );
}
