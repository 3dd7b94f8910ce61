//! Issue 46, sleep instead of stop: two simulated vLLMs (`--mimic vllm`, sleep mode, a
//! 2 s load, 300 MB held) that fit one at a time, `serve.sleep: auto`. A model evicted for
//! the other is put to sleep (its memory freed, its process kept), and its next request
//! wakes it — the wake's wait beside the cold start's, from the door's own count
//! (`x-sparkctl-queued-ms`). A wake that fails falls back to a stop and a start. An `up`
//! that swaps puts production to sleep the same way, and a failed candidate's way back
//! wakes it. Real front door, real sim processes.

use std::time::Duration;

use serde_json::{json, Value};

use crate::models::{answer, door_log, model_status, runs};
use crate::support::{free_port, Deck, Ran};

fn sleepy(deck: &Deck, name: &str, model: &str, fault: &str) {
    let dir = deck.dir.join(format!("models/{model}"));
    std::fs::create_dir_all(&dir).unwrap();
    deck.recipe(
        name,
        &format!(
            "engine: sim\nruntime: process\nmodel:\n  path: {}\n  served_name: {model}\nserver:\n  port: {}\n  args: [--mimic, vllm, --load-time, 2s, --ttft, 10ms, --tokens, \"4\", --hold-memory, 300m, --wake-time, 100ms{fault}]\n  memory_gb: 0.35\nhealth:\n  timeout: 30s\nserve:\n  sleep: auto\n",
            dir.display(),
            free_port()
        ),
    );
}

/// Both made production (a pool that holds both), then a door in a pool of 0.6 GB: one
/// at a time, neither running.
fn one_at_a_time(deck: &Deck) {
    deck.ok(&["rollback", "--to", "a-1"]);
    deck.ok(&["rollback", "--to", "b-1", "--add-model"]);
    deck.ok(&["frontdoor", "stop"]);
    deck.ok(&["down", "a-1"]);
    deck.ok(&["down", "b-1"]);
    Ran::of(
        deck.cmd(&["frontdoor", "start"])
            .env("SPARKCTL_MEMORY_GB", "0.6")
            .env("SPARKCTL_MEMORY_RESERVE_GB", "0")
            .env("SPARKCTL_WARM_GRACE", "0s"),
    )
    .succeeds();
}

/// One request for `model`: what it waited for its server, ms.
fn waited_ms(deck: &Deck, model: &str) -> u64 {
    let body = json!({"model": model, "max_tokens": 4,
        "messages": [{"role": "user", "content": "What is the capital of Japan?"}]});
    let a = answer(&deck.door_url(), body.to_string().into_bytes());
    assert_eq!(a.status, 200, "{model}: {} {}", a.body, door_log(deck));
    let text = a.body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(
        !text.contains('\u{fffd}'),
        "{model} answered garbage: {text}"
    );
    a.queued_ms.unwrap_or(0)
}

fn rss_kb(deck: &Deck, recipe: &str) -> u64 {
    let pid = deck.status_of(recipe).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    (status.lines())
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn an_evicted_model_sleeps_and_its_next_request_takes_its_wake_not_a_start() {
    let deck = crate::frontdoor_faults::deck("sleep-wake");
    sleepy(&deck, "a-1", "a", "");
    sleepy(&deck, "b-1", "b", "");
    one_at_a_time(&deck);
    let cold_a = waited_ms(&deck, "a");
    let cold_b = waited_ms(&deck, "b");
    // a went to sleep for b: its process kept, its memory freed.
    assert!(runs(&deck, "a-1") && runs(&deck, "b-1"));
    assert_eq!(model_status(&deck, "a")["state"], "asleep");
    assert!(
        rss_kb(&deck, "a-1") < 150_000,
        "a asleep holds {} kB",
        rss_kb(&deck, "a-1")
    );
    let log = door_log(&deck);
    assert!(log.contains("model a: a-1 put to sleep"), "{log}");
    // Back and forth: each request wakes its model and puts the other to sleep.
    let mut wakes = Vec::new();
    for model in ["a", "b", "a", "b"] {
        wakes.push(waited_ms(&deck, model));
    }
    let log = door_log(&deck);
    assert_eq!(log.matches("woke in").count(), 4, "{log}");
    println!(
        "cold starts through the door: a {cold_a} ms, b {cold_b} ms; wakes (the other put to \
         sleep first): {wakes:?} ms"
    );
    for w in &wakes {
        assert!(
            *w * 2 < cold_a.min(cold_b),
            "a wake of {w} ms against starts of {cold_a}/{cold_b} ms\n{log}"
        );
    }
    // What a client cannot do, the door did: its sleep routes stay the door's.
    let (status, _) = crate::models::post_status(&deck.door_url(), "/sleep?level=1");
    assert_eq!(status, 403);
}

#[test]
fn a_wake_that_fails_falls_back_to_a_stop_and_a_start() {
    let deck = crate::frontdoor_faults::deck("sleep-fallback");
    sleepy(&deck, "a-1", "a", ", --wake-fault, fail");
    sleepy(&deck, "b-1", "b", "");
    one_at_a_time(&deck);
    waited_ms(&deck, "a");
    waited_ms(&deck, "b");
    assert_eq!(model_status(&deck, "a")["state"], "asleep");
    let first = deck.status_of("a-1").unwrap()["id"].clone();
    let waited = waited_ms(&deck, "a");
    let log = door_log(&deck);
    assert!(log.contains("model a: a-1 did not wake ("), "{log}");
    assert!(log.contains("stopped, started again"), "{log}");
    // A new server, started cold.
    assert_ne!(deck.status_of("a-1").unwrap()["id"], first);
    assert!(waited >= 1500, "{waited} ms: not a cold start?");
    std::thread::sleep(Duration::from_millis(100));
}

/// The way back of a failed `up` that swapped, with production `prod` (`serve.sleep` as
/// `sleep`) and a candidate that dies halfway through its load, in a pool of 0.6 GB that holds
/// one: what `up` said, and what a client on the production port saw throughout.
fn failed_swap(deck: &Deck, prod: &str) -> (String, crate::support::TrafficReport) {
    deck.ok(&["rollback", "--to", prod]);
    let client = crate::support::Traffic::start(&deck.door_url(), Duration::from_millis(50));
    client.answers(3, Duration::from_secs(30));
    let ran = Ran::of(
        deck.cmd(&["up", "bad", "--yes"])
            .env("SPARKCTL_MEMORY_GB", "0.6")
            .env("SPARKCTL_MEMORY_RESERVE_GB", "0"),
    )
    .exits(1);
    client.answers(3, Duration::from_secs(30));
    (ran.shown(), client.stop())
}

#[test]
fn a_failed_swap_wakes_a_sleeping_production_instead_of_starting_it() {
    let deck = crate::frontdoor_faults::deck("sleep-swap");
    sleepy(&deck, "prod", "m", "");
    sleepy(&deck, "cold", "m", "");
    let file = deck.dir.join("recipes/cold.yaml");
    let off = std::fs::read_to_string(&file)
        .unwrap()
        .replace("sleep: auto", "sleep: off");
    std::fs::write(&file, off).unwrap();
    sleepy(&deck, "shaky", "m", ", --wake-fault, fail");
    sleepy(&deck, "bad", "m", ", --load-fault, crash");

    // Asleep to make room, then woken: the same process serves again.
    let (said, report) = failed_swap(&deck, "prod");
    assert_eq!(report.failed(), 0, "{said}\n{report:?}");
    assert!(said.contains("prod asleep (level "), "{said}");
    let woke: f64 = said
        .split("prod woken in ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no wake in: {said}"));
    let pid = |name: &str| deck.status_of(name).unwrap()["id"].clone();
    let prod_pid = pid("prod");
    assert!(runs(&deck, "prod") && !runs(&deck, "bad"));
    let longest_asleep = report.latency_ms.iter().copied().fold(0.0, f64::max);

    // The same swap with `serve.sleep: off`: stopped, and started again on the way back.
    let (said, report) = failed_swap(&deck, "cold");
    assert_eq!(report.failed(), 0, "{said}\n{report:?}");
    assert!(said.contains("stopping cold to make room"), "{said}");
    assert!(said.contains("restoring production cold"), "{said}");
    let kept: Value =
        serde_json::from_str(&deck.ok(&["--json", "history", "starts", "cold"])).unwrap();
    let started_s = crate::support::phases_in_order(
        &kept["cold"].as_array().unwrap().last().unwrap()["phases"],
    );
    let longest_cold = report.latency_ms.iter().copied().fold(0.0, f64::max);
    println!(
        "a failed swap's way back: production woken in {woke:.2} s (serve.sleep: auto) against \
         started again in {started_s:.2} s (serve.sleep: off); the client's longest wait \
         {longest_asleep:.0} ms against {longest_cold:.0} ms"
    );
    assert!(woke * 2.0 < started_s, "{woke} s against {started_s} s");
    assert_eq!(pid("prod"), prod_pid, "prod was started again, not woken");

    // A wake that fails: stopped and started again, production served throughout.
    let (said, report) = failed_swap(&deck, "shaky");
    assert_eq!(report.failed(), 0, "{said}\n{report:?}");
    assert!(said.contains("waking shaky failed"), "{said}");
    assert!(said.contains("restoring production shaky"), "{said}");
    assert!(runs(&deck, "shaky"));
}
