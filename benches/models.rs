//! Two models behind one front door in a pool that holds one at a time: every switch from
//! one model to the other is an eviction and a start on demand.
//!
//! `cargo bench --bench models` (MODELS_SIM_SECS, default 300; MODELS_LLAMA_SECS, default
//! 120, 0 to skip; the llama-server scenario needs SPARKCTL_TEST_LLAMA_SERVER and
//! SPARKCTL_TEST_GGUF, as `.ci/test` exports them). 8 streaming clients, each asking model
//! a, then b, then a, ... for the whole run. Printed: requests answered and failed, the
//! swaps (starts on demand, evictions), what requests waited for their model's server
//! (`x-sparkctl-queued-ms`, the front door's own count) at p50/p99/max — beside one cold
//! start of a model through the door with nothing to evict, measured in the same run.

#[path = "../tests/it/support/mod.rs"]
mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use support::{free_port, Deck};

const CLIENTS: usize = 8;

/// `sparkctl ARGS` in a pool of `gb`, no reserve, nothing kept warm.
fn in_pool(deck: &Deck, gb: &str, args: &[&str]) {
    support::Ran::of(
        deck.cmd(args)
            .env("SPARKCTL_MEMORY_GB", gb)
            .env("SPARKCTL_MEMORY_RESERVE_GB", "0")
            .env("SPARKCTL_WARM_GRACE", "0s"),
    )
    .succeeds();
}

/// Both models made production in a pool that holds both, then a reboot as the front door
/// sees it in one that holds one: neither runs until a request names it.
fn two_models_one_pool(deck: &Deck, one_gb: &str) {
    for r in ["a", "b"] {
        deck.ok(&["rollback", "--to", r]);
    }
    deck.ok(&["frontdoor", "stop"]);
    for r in ["a", "b"] {
        deck.ok(&["down", r]);
    }
    in_pool(deck, one_gb, &["frontdoor", "start"]);
}

struct Outcome {
    model: &'static str,
    ok: bool,
    queued_ms: f64,
}

/// One streamed request: whether it ended with `[DONE]`, and what it waited for its model.
async fn ask(client: &reqwest::Client, url: &str, model: &'static str, tokens: u32) -> Outcome {
    let body = json!({
        "model": model, "stream": true, "max_tokens": tokens,
        "messages": [{"role": "user", "content": "What is the capital of Japan?"}],
    });
    let sent = client
        .post(format!("{url}/v1/chat/completions"))
        .json(&body)
        .send()
        .await;
    let Ok(r) = sent else {
        return Outcome {
            model,
            ok: false,
            queued_ms: 0.0,
        };
    };
    let queued_ms = (r.headers().get("x-sparkctl-queued-ms"))
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(0.0);
    let status = r.status();
    let text = r.text().await.unwrap_or_default();
    Outcome {
        model,
        ok: status.is_success() && text.contains("[DONE]"),
        queued_ms,
    }
}

/// The door's counter `name{model=...}` summed over models, or over the lines holding `with`.
fn counter(metrics: &str, name: &str, with: &str) -> f64 {
    (metrics.lines())
        .filter(|l| l.starts_with(name) && l.contains(with))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// One cold start through the door (nothing to evict), then `CLIENTS` clients alternating
/// models for `run`.
fn scenario(label: &str, deck: &Deck, run: Duration, tokens: u32) {
    let url = deck.door_url();
    let cold = support::block_on({
        let url = url.clone();
        async move { ask(&reqwest::Client::new(), &url, "a", tokens).await }
    });
    assert!(cold.ok, "{label}: the first request failed");
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    let began = Instant::now();
    let threads: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let (url, outcomes) = (url.clone(), outcomes.clone());
            std::thread::spawn(move || {
                support::block_on(async move {
                    let client = reqwest::Client::new();
                    let mut model = if i % 2 == 0 { "a" } else { "b" };
                    while began.elapsed() < run {
                        let o = ask(&client, &url, model, tokens).await;
                        outcomes.lock().unwrap().push(o);
                        model = if model == "a" { "b" } else { "a" };
                    }
                })
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let took = began.elapsed();
    let metrics = deck.metrics();
    let outcomes = outcomes.lock().unwrap();
    let failed = outcomes.iter().filter(|o| !o.ok).count();
    let mut waits: Vec<f64> = outcomes.iter().map(|o| o.queued_ms).collect();
    waits.sort_by(f64::total_cmp);
    let starts = counter(&metrics, "sparkctl_frontdoor_model_loads_total", "");
    let evictions = counter(
        &metrics,
        "sparkctl_frontdoor_model_unloads_total",
        "why=\"evicted\"",
    );
    let per = |m: &str| outcomes.iter().filter(|o| o.model == m).count();
    println!(
        "{label}: {} clients alternating a/b for {:.0} s: {} requests (a {}, b {}), {failed} failed",
        CLIENTS,
        took.as_secs_f64(),
        outcomes.len(),
        per("a"),
        per("b"),
    );
    println!(
        "  swaps: {starts:.0} starts on demand, {evictions:.0} evictions ({:.1} requests per start)",
        outcomes.len() as f64 / starts.max(1.0)
    );
    println!(
        "  queue wait p50 {:.0} ms  p99 {:.0} ms  max {:.0} ms   | one cold start through the door (reference): {:.0} ms",
        support::nearest_rank(&waits, 50.0),
        support::nearest_rank(&waits, 99.0),
        waits[waits.len() - 1],
        cold.queued_ms
    );
}

fn sim_recipe(deck: &Deck, name: &str) {
    let dir = deck.dir.join(format!("models/{name}"));
    std::fs::create_dir_all(&dir).unwrap();
    deck.recipe(
        name,
        &format!(
            "engine: sim\nruntime: process\nmodel:\n  path: {}\n  served_name: {name}\nserver:\n  port: {}\n  args: [--load-time, 2s, --ttft, 30ms, --token-rate, \"100\", --tokens, \"32\", --slots, \"8\"]\n  memory_gb: 2\nhealth:\n  timeout: 30s\n",
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
            "engine: llama-server\nruntime: process\nbinary: {}\nmodel:\n  path: {}\n  served_name: {name}\nserver:\n  port: {}\n  args: [-t, \"1\", -c, \"2048\", -np, \"4\"]\n  memory_gb: 1\nhealth:\n  timeout: 2m\n",
            binary.display(),
            model.display(),
            free_port()
        ),
    );
}

fn main() {
    let sim_secs = support::secs("MODELS_SIM_SECS", 300);
    if sim_secs > 0 {
        let deck = Deck::new("bench-models-sim");
        sim_recipe(&deck, "a");
        sim_recipe(&deck, "b");
        // 2 GB each in 3 GB: one at a time.
        two_models_one_pool(&deck, "3");
        scenario(
            "sim (load 2 s, 32 tokens at 100/s)",
            &deck,
            Duration::from_secs(sim_secs),
            32,
        );
        deck.ok(&["frontdoor", "stop"]);
    }
    let llama_secs = support::secs("MODELS_LLAMA_SECS", 120);
    if llama_secs > 0 {
        let deck = Deck::new("bench-models-llama");
        llama_recipe(&deck, "a");
        llama_recipe(&deck, "b");
        two_models_one_pool(&deck, "1.5");
        scenario(
            "llama-server (CPU, random GGUF, 16 tokens)",
            &deck,
            Duration::from_secs(llama_secs),
            16,
        );
        deck.ok(&["frontdoor", "stop"]);
    }
}
