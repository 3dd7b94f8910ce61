//! Fair turns (issue 44): two clients, each always asking its own model, one request after
//! another, behind one front door — in a pool that holds one model at a time, beside the
//! same clients in a pool that holds both (the reference, measured in the same run).
//!
//! `cargo bench --bench turns` (TURNS_SIM_SECS, default 60; TURNS_LLAMA_SECS, default 60, 0
//! to skip; the llama-server scenario needs SPARKCTL_TEST_LLAMA_SERVER and
//! SPARKCTL_TEST_GGUF, as `.ci/test` exports them). Printed per pool: each client's answers
//! and share, failed requests, starts on demand per answered request (the door's counter),
//! and what requests waited for their model's server (`x-sparkctl-queued-ms`) at p50, p99
//! and max, beside the turn the door gave (`frontdoor status`) and one measured start.

#[path = "../tests/it/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{free_port, Deck};

/// In a pool of `gb`: both recipes made production (two models), then a reboot as the door
/// sees it — neither runs until a request names it.
fn two_models(deck: &Deck, gb: &str) {
    deck.ok(&["rollback", "--to", "a"]);
    deck.ok(&["rollback", "--to", "b", "--add-model"]);
    deck.ok(&["frontdoor", "stop"]);
    for r in ["a", "b"] {
        deck.ok(&["down", r]);
    }
    support::Ran::of(
        deck.cmd(&["frontdoor", "start"])
            .env("SPARKCTL_MEMORY_GB", gb)
            .env("SPARKCTL_MEMORY_RESERVE_GB", "0")
            .env("SPARKCTL_WARM_GRACE", "0s"),
    )
    .succeeds();
}

struct Client {
    ok: usize,
    failed: usize,
    waits_ms: Vec<f64>,
}

/// One client asking `model` one request after another for `run`.
fn client(url: String, model: &'static str, tokens: u32, run: Duration) -> Client {
    support::block_on(async move {
        let http = reqwest::Client::new();
        let body = json!({
            "model": model, "max_tokens": tokens,
            "messages": [{"role": "user", "content": "What is the capital of Japan?"}],
        });
        let began = Instant::now();
        let mut c = Client {
            ok: 0,
            failed: 0,
            waits_ms: Vec::new(),
        };
        while began.elapsed() < run {
            let sent = http
                .post(format!("{url}/v1/chat/completions"))
                .json(&body)
                .send()
                .await;
            let Ok(r) = sent else {
                c.failed += 1;
                continue;
            };
            let wait = (r.headers().get("x-sparkctl-queued-ms"))
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .unwrap_or(0.0);
            match r.status().is_success() && r.bytes().await.is_ok() {
                true => c.ok += 1,
                false => c.failed += 1,
            }
            c.waits_ms.push(wait);
        }
        c
    })
}

fn scenario(label: &str, deck: &Deck, run: Duration, tokens: u32) {
    let url = deck.door_url();
    let (a, b) = (url.clone(), url);
    let ta = std::thread::spawn(move || client(a, "a", tokens, run));
    let tb = std::thread::spawn(move || client(b, "b", tokens, run));
    let (a, b) = (ta.join().unwrap(), tb.join().unwrap());
    let status: Value = serde_json::from_str(&deck.ok(&["--json", "frontdoor", "status"])).unwrap();
    let models = status["models"].as_array().cloned().unwrap_or_default();
    let starts: u64 = models.iter().filter_map(|m| m["loads"].as_u64()).sum();
    // A request waits at most one turn of the other model and one start of its own.
    let bound_s = (models.iter())
        .map(|m| {
            let t = &m["turn"];
            t["length_s"].as_f64().unwrap_or(0.0) + t["last_start_s"].as_f64().unwrap_or(0.0)
        })
        .fold(0.0, f64::max);
    let turn = (models.iter())
        .map(|m| {
            let t = &m["turn"];
            format!(
                "{} turn {:.0} s (last start {})",
                m["name"].as_str().unwrap_or("-"),
                t["length_s"].as_f64().unwrap_or(0.0),
                t["last_start_s"]
                    .as_f64()
                    .map_or("-".into(), |s| format!("{s:.2} s"))
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    let answered = (a.ok + b.ok).max(1) as f64;
    let mut waits: Vec<f64> = a.waits_ms.iter().chain(&b.waits_ms).copied().collect();
    waits.sort_by(f64::total_cmp);
    println!(
        "{label}: {:.0} s: a {} ({:.0}%), b {} ({:.0}%), {} failed; {starts} starts, {:.3} per answer",
        run.as_secs_f64(),
        a.ok,
        100.0 * a.ok as f64 / answered,
        b.ok,
        100.0 * b.ok as f64 / answered,
        a.failed + b.failed,
        starts as f64 / answered,
    );
    let waited: Vec<f64> = waits.iter().copied().filter(|w| *w > 0.0).collect();
    println!(
        "  wait for the model's server p50 {:.0} ms  p99 {:.0} ms  max {:.0} ms ({} requests waited, p50 {:.0} ms); one turn + one start {:.0} ms; {turn}",
        support::nearest_rank(&waits, 50.0),
        support::nearest_rank(&waits, 99.0),
        waits.last().copied().unwrap_or(0.0),
        waited.len(),
        support::nearest_rank(&waited, 50.0),
        bound_s * 1e3,
    );
}

fn sim_recipe(deck: &Deck, name: &str) {
    let dir = deck.dir.join(format!("models/{name}"));
    std::fs::create_dir_all(&dir).unwrap();
    deck.recipe(
        name,
        &format!(
            "engine: sim\nruntime: process\nmodel:\n  path: {}\n  served_name: {name}\nserver:\n  port: {}\n  args: [--load-time, 2s, --ttft, 20ms, --token-rate, \"200\", --tokens, \"8\"]\n  memory_gb: 2\nhealth:\n  timeout: 30s\n",
            dir.display(),
            free_port()
        ),
    );
}

fn llama_recipe(deck: &Deck, name: &str) {
    let (binary, model) = support::llama_server_and_model();
    deck.recipe(
        name,
        &format!(
            "engine: llama-server\nruntime: process\nbinary: {}\nmodel:\n  path: {}\n  served_name: {name}\nserver:\n  port: {}\n  args: [-t, \"1\", -c, \"1024\", -np, \"1\"]\n  memory_gb: 1\nhealth:\n  timeout: 2m\n",
            binary.display(),
            model.display(),
            free_port()
        ),
    );
}

/// The same two clients in a pool that holds one model (`one_gb`) and in one that holds
/// both (`both_gb`, the reference).
fn pair(
    label: &str,
    recipe: fn(&Deck, &str),
    (one_gb, both_gb): (&str, &str),
    run: Duration,
    tokens: u32,
) {
    for (pool, gb) in [("holds one", one_gb), ("holds both (reference)", both_gb)] {
        let deck = Deck::new("bench-turns");
        recipe(&deck, "a");
        recipe(&deck, "b");
        two_models(&deck, gb);
        scenario(&format!("{label}, a pool that {pool}"), &deck, run, tokens);
        deck.ok(&["frontdoor", "stop"]);
        for r in ["a", "b"] {
            let _ = deck.run(&["down", r]);
        }
    }
}

fn main() {
    let sim_secs = support::secs("TURNS_SIM_SECS", 60);
    if sim_secs > 0 {
        let run = Duration::from_secs(sim_secs);
        pair("sim (load 2 s, 8 tokens)", sim_recipe, ("3", "5"), run, 8);
    }
    let llama_secs = support::secs("TURNS_LLAMA_SECS", 60);
    if llama_secs > 0 {
        let run = Duration::from_secs(llama_secs);
        pair(
            "llama-server (CPU, random GGUF, 8 tokens)",
            llama_recipe,
            ("1.5", "3"),
            run,
            8,
        );
    }
}
