//! Fair queues by key (issue 47): two keys on one model whose server answers one request
//! at a time (sim `--slots 1`; llama-server `-np 1`), the flooding key offering 8× the quiet
//! key's rate, above the server's capacity. Measured in one run, on one door:
//! - the quiet key alone (its figure);
//! - the quiet key beside the flood, each with its own key (the door's turns by key);
//! - the same two clients sharing one key (one queue, first come first served: what the
//!   door did before keys, the reference).
//!
//! The quiet client asks one request every 4 service times (the service time measured
//! first, alone); the flood asks 8 for each of the quiet's, without waiting for answers.
//! Printed: each client's answers, the quiet one's request time p50, p99 and max, and the
//! ratio of its p99 to its p99 alone (goal: at most 2).
//!
//! `cargo bench --bench fair` (FAIR_SIM_SECS, default 20 per phase; FAIR_LLAMA_SECS,
//! default 20, 0 to skip; llama-server needs SPARKCTL_TEST_LLAMA_SERVER and
//! SPARKCTL_TEST_GGUF, as `.ci/test` exports them).

#[path = "../tests/it/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::{free_port, Deck};

/// One request of `key`; its time to a whole answer, or None when it failed.
async fn ask(http: &reqwest::Client, url: &str, key: &str) -> Option<f64> {
    let began = Instant::now();
    let body = json!({"model": "m", "max_tokens": 8,
        "messages": [{"role": "user", "content": "What is the capital of Japan?"}]});
    let r = (http.post(format!("{url}/v1/chat/completions")))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .ok()?;
    let ok = r.status().is_success() && r.bytes().await.is_ok();
    ok.then(|| began.elapsed().as_secs_f64() * 1e3)
}

struct Seen {
    quiet_ms: Vec<f64>,
    quiet_failed: usize,
    flood_ok: usize,
    flood_sent: usize,
}

/// The quiet client every `every` for `run`, and (`flood`: its key) the flood at 8× its rate.
fn phase(url: &str, quiet: &str, flood: Option<&str>, every: Duration, run: Duration) -> Seen {
    let (url, quiet, flood) = (
        url.to_string(),
        quiet.to_string(),
        flood.map(str::to_string),
    );
    support::block_on(async move {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()
            .unwrap();
        let flooding = flood.map(|key| {
            let (http, url) = (http.clone(), url.clone());
            tokio::spawn(async move {
                let mut sent = Vec::new();
                let mut tick = tokio::time::interval(every / 8);
                let began = Instant::now();
                while began.elapsed() < run {
                    tick.tick().await;
                    let (http, url, key) = (http.clone(), url.clone(), key.clone());
                    sent.push(tokio::spawn(async move { ask(&http, &url, &key).await }));
                }
                sent
            })
        });
        let mut seen = Seen {
            quiet_ms: Vec::new(),
            quiet_failed: 0,
            flood_ok: 0,
            flood_sent: 0,
        };
        let began = Instant::now();
        let mut tick = tokio::time::interval(every);
        while began.elapsed() < run {
            tick.tick().await;
            match ask(&http, &url, &quiet).await {
                Some(ms) => seen.quiet_ms.push(ms),
                None => seen.quiet_failed += 1,
            }
        }
        if let Some(f) = flooding {
            // What the flood left waiting is given up: the next phase starts clean.
            for t in f.await.unwrap() {
                seen.flood_sent += 1;
                if t.is_finished() && t.await.ok().flatten().is_some() {
                    seen.flood_ok += 1;
                }
            }
        }
        seen
    })
}

fn print(label: &str, s: &mut Seen, alone_p99: Option<f64>) -> f64 {
    s.quiet_ms.sort_by(f64::total_cmp);
    let p99 = support::nearest_rank(&s.quiet_ms, 99.0);
    let ratio = alone_p99.map_or(String::new(), |a| format!("  p99 {:.2}x alone", p99 / a));
    let flood = match s.flood_sent {
        0 => String::new(),
        n => format!("; flood {} answered of {n} sent", s.flood_ok),
    };
    println!(
        "  {label}: quiet {} answered, {} failed, p50 {:.0} ms  p99 {:.0} ms  max {:.0} ms{ratio}{flood}",
        s.quiet_ms.len(),
        s.quiet_failed,
        support::nearest_rank(&s.quiet_ms, 50.0),
        p99,
        s.quiet_ms.last().copied().unwrap_or(0.0),
    );
    p99
}

fn scenario(label: &str, recipe: &str, run: Duration) {
    let deck = Deck::new("bench-fair");
    deck.recipe("m", recipe);
    deck.ok(&["rollback", "--to", "m"]);
    let key = |name: &str| {
        let out = deck.ok(&["keys", "add", name]);
        out.trim().to_string()
    };
    let (quiet, flood) = (key("quiet"), key("flood"));
    let url = deck.door_url();
    // The service time, alone, sets the rates: the quiet key asks every 4 of them.
    let (u, q) = (url.clone(), quiet.clone());
    let mut service: Vec<f64> = support::block_on(async move {
        let http = reqwest::Client::new();
        let mut times = Vec::new();
        for _ in 0..20 {
            times.extend(ask(&http, &u, &q).await);
        }
        times
    });
    service.sort_by(f64::total_cmp);
    let one = support::nearest_rank(&service, 50.0);
    let every = Duration::from_secs_f64(4.0 * one / 1e3);
    println!(
        "{label}: one request {one:.0} ms alone; quiet every {:.0} ms, flood every {:.0} ms (2x the server's capacity), {:.0} s per phase",
        every.as_secs_f64() * 1e3,
        every.as_secs_f64() * 1e3 / 8.0,
        run.as_secs_f64()
    );
    let alone = print(
        "quiet alone",
        &mut phase(&url, &quiet, None, every, run),
        None,
    );
    let mut fair = phase(&url, &quiet, Some(&flood), every, run);
    print(
        "beside the flood, own keys (turns by key)",
        &mut fair,
        Some(alone),
    );
    std::thread::sleep(Duration::from_secs(2));
    let mut shared = phase(&url, &flood, Some(&flood), every, run);
    print(
        "beside the flood, one shared key (one queue: reference)",
        &mut shared,
        Some(alone),
    );
    deck.ok(&["frontdoor", "stop"]);
    let _ = deck.run(&["down", "m"]);
}

fn main() {
    let sim_secs = support::secs("FAIR_SIM_SECS", 20);
    if sim_secs > 0 {
        let dir = std::env::temp_dir();
        let recipe = format!(
            "engine: sim\nruntime: process\nmodel:\n  path: {}\n  served_name: m\nserver:\n  port: {}\n  args: [--slots, \"1\", --load-time, 300ms, --ttft, 20ms, --token-rate, \"100\", --tokens, \"8\"]\n  memory_gb: 2\nhealth:\n  timeout: 30s\n",
            dir.display(),
            free_port()
        );
        scenario(
            "sim --slots 1 (8 tokens)",
            &recipe,
            Duration::from_secs(sim_secs),
        );
    }
    let llama_secs = support::secs("FAIR_LLAMA_SECS", 20);
    if llama_secs > 0 {
        let (binary, model) = support::llama_server_and_model();
        let recipe = format!(
            "engine: llama-server\nruntime: process\nbinary: {}\nmodel:\n  path: {}\n  served_name: m\nserver:\n  port: {}\n  args: [-t, \"1\", -c, \"1024\", -np, \"1\"]\n  memory_gb: 1\nhealth:\n  timeout: 2m\n",
            binary.display(),
            model.display(),
            free_port()
        );
        scenario(
            "llama-server -np 1 (CPU, random GGUF, 8 tokens)",
            &recipe,
            Duration::from_secs(llama_secs),
        );
    }
}
