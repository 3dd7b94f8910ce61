//! The door's switch between two models against `llama-server`'s own (issue 46): the same
//! two GGUFs behind sparkctl's front door in a pool that holds one, and under
//! `llama-server`'s router mode (`--models-dir`, `--models-max 1`), the reference measured
//! in the same run with the same clients.
//!
//! `cargo bench --bench switch` (SWITCH_SECS, default 60 per phase; needs
//! SPARKCTL_TEST_LLAMA_SERVER and SPARKCTL_TEST_GGUF, as `.ci/test` exports them). Two
//! phases on each side: one client alternating a, b, a, … (every request a switch: its
//! request time is what one switch costs), then `CLIENTS` clients alternating. Printed per
//! side: answered, failed, request time p50/p99.

#[path = "../tests/it/support/mod.rs"]
mod support;

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use support::{free_port, Deck};

const CLIENTS: usize = 4;
const TOKENS: u32 = 16;
/// The server's own settings, the same on both sides: one thread, 4 slots.
const ARGS: [&str; 6] = ["-t", "1", "-c", "2048", "-np", "4"];

/// One streamed request's time to its end, when it ended with `[DONE]`.
async fn ask(client: &reqwest::Client, url: &str, model: &str) -> Option<f64> {
    let body = json!({
        "model": model, "stream": true, "max_tokens": TOKENS,
        "messages": [{"role": "user", "content": "What is the capital of Japan?"}],
    });
    let began = Instant::now();
    let r = (client.post(format!("{url}/v1/chat/completions")))
        .json(&body)
        .send()
        .await
        .ok()?;
    let ok = r.status().is_success();
    let text = r.text().await.ok()?;
    (ok && text.contains("[DONE]")).then(|| began.elapsed().as_secs_f64() * 1e3)
}

struct Phase {
    times_ms: Vec<f64>,
    failed: usize,
    took: Duration,
}

/// `clients` clients, each alternating a and b (half of them starting on b), for `run`.
fn phase(url: &str, clients: usize, run: Duration) -> Phase {
    let results = Arc::new(Mutex::new((Vec::new(), 0usize)));
    let began = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|i| {
            let (url, results) = (url.to_string(), results.clone());
            std::thread::spawn(move || {
                support::block_on(async move {
                    let client = reqwest::Client::new();
                    let mut model = if i % 2 == 0 { "a" } else { "b" };
                    while began.elapsed() < run {
                        let answered = ask(&client, &url, model).await;
                        let mut r = results.lock().unwrap();
                        match answered {
                            Some(ms) => r.0.push(ms),
                            None => r.1 += 1,
                        }
                        model = if model == "a" { "b" } else { "a" };
                    }
                })
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let (mut times_ms, failed) = std::mem::take(&mut *results.lock().unwrap());
    times_ms.sort_by(f64::total_cmp);
    Phase {
        times_ms,
        failed,
        took: began.elapsed(),
    }
}

fn line(side: &str, p: &Phase) -> String {
    format!(
        "  {side:<34} {:>5} answered ({:.1}/s), {} failed, request time p50 {:.0} ms  p99 {:.0} ms",
        p.times_ms.len(),
        p.times_ms.len() as f64 / p.took.as_secs_f64(),
        p.failed,
        support::nearest_rank(&p.times_ms, 50.0),
        support::nearest_rank(&p.times_ms, 99.0),
    )
}

/// `llama-server --models-dir` serving both GGUFs, at most one loaded.
struct Router(Child, String);

impl Router {
    fn start(deck: &Deck, binary: &std::path::Path, model: &std::path::Path) -> Router {
        let dir = deck.dir.join("router-models");
        std::fs::create_dir_all(&dir).unwrap();
        for name in ["a", "b"] {
            std::os::unix::fs::symlink(model, dir.join(format!("{name}.gguf"))).unwrap();
        }
        let port = free_port();
        let log = std::fs::File::create(deck.dir.join("router.log")).unwrap();
        let child = Command::new(binary)
            .args(["--models-dir", dir.to_str().unwrap(), "--models-max", "1"])
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(ARGS)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        while support::http_status(&url, "/v1/models") != Some(200) {
            assert!(Instant::now() < deadline, "the router did not come up");
            std::thread::sleep(Duration::from_millis(50));
        }
        Router(child, url)
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The door: both recipes production of their model, a pool that holds one, nothing
/// running until a request names it.
fn door(deck: &Deck, binary: &std::path::Path, model: &std::path::Path) -> String {
    let args: Vec<String> = ARGS.iter().map(|a| format!("\"{a}\"")).collect();
    for name in ["a", "b"] {
        deck.recipe(
            name,
            &format!(
                "engine: llama-server\nruntime: process\nbinary: {}\nmodel:\n  path: {}\n  served_name: {name}\nserver:\n  port: {}\n  args: [{}]\n  memory_gb: 1\nhealth:\n  timeout: 2m\n",
                binary.display(),
                model.display(),
                free_port(),
                args.join(", ")
            ),
        );
    }
    deck.ok(&["rollback", "--to", "a"]);
    deck.ok(&["rollback", "--to", "b", "--add-model"]);
    deck.ok(&["frontdoor", "stop"]);
    for r in ["a", "b"] {
        deck.ok(&["down", r]);
    }
    support::Ran::of(
        deck.cmd(&["frontdoor", "start"])
            .env("SPARKCTL_MEMORY_GB", "1.5")
            .env("SPARKCTL_MEMORY_RESERVE_GB", "0")
            .env("SPARKCTL_WARM_GRACE", "0s"),
    )
    .succeeds();
    deck.door_url()
}

fn main() {
    let run = Duration::from_secs(support::secs("SWITCH_SECS", 60));
    let (binary, model) = support::llama_server_and_model();
    let deck = Deck::new("bench-switch");
    let router = Router::start(&deck, &binary, &model);
    let door = door(&deck, &binary, &model);
    println!(
        "two llama-servers (CPU, random GGUF, {TOKENS} tokens, {}) that fit one at a time, {} s a phase",
        ARGS.join(" "),
        run.as_secs()
    );
    for clients in [1, CLIENTS] {
        println!("{clients} client(s), each alternating a/b:");
        let d = phase(&door, clients, run);
        println!("{}", line("sparkctl front door", &d));
        let r = phase(&router.1, clients, run);
        println!("{}", line("llama-server router (reference)", &r));
        println!(
            "  door/router answered {:.2}x; request time p50 {:+.0} ms",
            d.times_ms.len() as f64 / r.times_ms.len().max(1) as f64,
            support::nearest_rank(&d.times_ms, 50.0) - support::nearest_rank(&r.times_ms, 50.0)
        );
    }
    let metrics = deck.metrics();
    let loads: f64 = (metrics.lines())
        .filter(|l| l.starts_with("sparkctl_frontdoor_model_loads_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    println!("door: {loads:.0} starts on demand in all");
    deck.ok(&["frontdoor", "stop"]);
    for r in ["a", "b"] {
        let _ = deck.run(&["down", r]);
    }
}
