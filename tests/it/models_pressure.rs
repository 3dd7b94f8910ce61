//! Issue 44, several models under pressure: a start on demand that fails is answered at
//! once with its reason and backed off; two models that do not fit together take fair
//! turns; a rollout of one model leaves the others free to start, evict and restart; a
//! SIGKILLed `up --shadow` leaves no candidate running. Real front door, real sim processes,
//! real clients.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::models::{answer, chat, door_log, model_status, runs, sim, until};
use crate::support::{self, Deck, Ran};

/// `sparkctl ARGS` in a pool of `gb`, no reserve, nothing kept warm.
fn in_pool(deck: &Deck, gb: &str, args: &[&str]) -> Ran {
    Ran::of(
        deck.cmd(args)
            .env("SPARKCTL_MEMORY_GB", gb)
            .env("SPARKCTL_MEMORY_RESERVE_GB", "0")
            .env("SPARKCTL_WARM_GRACE", "0s"),
    )
}

/// The recipes made production one by one (each another model), then a reboot as the
/// front door sees it in a pool of `gb`: none runs until a request names it.
pub(crate) fn rebooted(deck: &Deck, gb: &str, recipes: &[&str]) {
    for (i, r) in recipes.iter().enumerate() {
        let mut args = vec!["rollback", "--to", r];
        if i > 0 {
            args.push("--add-model");
        }
        deck.ok(&args);
    }
    deck.ok(&["frontdoor", "stop"]);
    for r in recipes {
        deck.ok(&["down", r]);
    }
    in_pool(deck, gb, &["frontdoor", "start"]).succeeds();
}

pub(crate) fn replace_in(deck: &Deck, recipe: &str, from: &str, to: &str) {
    let path = deck.dir.join(format!("recipes/{recipe}.yaml"));
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(from), "{text}");
    std::fs::write(&path, text.replace(from, to)).unwrap();
}

#[test]
fn a_start_on_demand_that_fails_is_answered_at_once_with_why_and_backed_off() {
    let deck = crate::frontdoor_faults::deck("pressure-fail");
    sim(&deck, "chat-a", Some("chat"), "");
    sim(&deck, "coder-a", Some("coder"), "");
    rebooted(&deck, "16", &["chat-a", "coder-a"]);
    // coder's recipe now dies as it loads, as an engine with the wrong kernels does.
    replace_in(
        &deck,
        "coder-a",
        "--load-time, 300ms",
        "--load-time, 300ms, --load-fault, crash",
    );
    let began = Instant::now();
    let a = answer(&deck.door_url(), chat(Some("coder")));
    let first = began.elapsed();
    assert_eq!(a.status, 503, "{}", a.body);
    let message = a.body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("did not start"), "{message}");
    assert!(
        message.contains("no kernel image is available"),
        "{message}"
    );
    // Its start attempt (a 300 ms load, then the crash read) and a second, not the hold.
    assert!(first < Duration::from_secs(15), "answered after {first:?}");
    // During the back-off: at once, the same reason, when to come back.
    let began = Instant::now();
    let url = format!("{}/v1/chat/completions", deck.door_url());
    let again = support::block_on(async move {
        reqwest::Client::new()
            .post(url)
            .header("content-type", "application/json")
            .body(chat(Some("coder")))
            .send()
            .await
            .unwrap()
    });
    assert!(
        began.elapsed() < Duration::from_secs(1),
        "{:?}",
        began.elapsed()
    );
    assert_eq!(again.status(), 503);
    let retry: u64 = again.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=5).contains(&retry), "retry-after {retry}");
    let coder = model_status(&deck, "coder");
    assert_eq!(coder["state"], "failed", "{coder}");
    assert_eq!(coder["start_failed"]["attempts"], 1, "{coder}");
    let shown = deck.ok(&["frontdoor", "status"]);
    assert!(shown.contains("start failed (1 in a row"), "{shown}");
    // The other model serves throughout.
    assert_eq!(answer(&deck.door_url(), chat(Some("chat"))).status, 200);
    // The recipe fixed: tried again at once, not after the back-off.
    replace_in(&deck, "coder-a", ", --load-fault, crash", "");
    until(Duration::from_secs(10), "the failure forgotten", || {
        model_status(&deck, "coder")["start_failed"].is_null()
    });
    let a = answer(&deck.door_url(), chat(Some("coder")));
    assert_eq!(a.status, 200, "{} {}", a.body, door_log(&deck));
}

/// Two clients, each asking its own model one request after another, in a pool that holds
/// one model: each gets its turns — neither starves, and the door does not start a model
/// per request.
#[test]
fn two_models_that_do_not_fit_together_take_fair_turns() {
    let deck = crate::frontdoor_faults::deck("pressure-turns");
    sim(&deck, "a-1", Some("a"), "");
    sim(&deck, "b-1", Some("b"), "");
    for r in ["a-1", "b-1"] {
        replace_in(&deck, r, "--load-time, 300ms", "--load-time, 1s");
    }
    rebooted(&deck, "3", &["a-1", "b-1"]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let client = |model: &'static str| {
        let (url, stop) = (deck.door_url(), stop.clone());
        std::thread::spawn(move || {
            let (mut ok, mut failed, mut waits) = (0u32, Vec::new(), Vec::new());
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let a = answer(&url, chat(Some(model)));
                match a.status {
                    200 => ok += 1,
                    s => failed.push(format!("{s}: {}", a.body)),
                }
                waits.push(a.queued_ms.unwrap_or(0));
            }
            (ok, failed, waits)
        })
    };
    let (a, b) = (client("a"), client("b"));
    std::thread::sleep(Duration::from_secs(45));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let ((a_ok, a_failed, _), (b_ok, b_failed, _)) = (a.join().unwrap(), b.join().unwrap());
    let loads = ["a", "b"].map(|m| model_status(&deck, m)["loads"].as_u64().unwrap_or(0));
    let starts: u64 = loads.iter().sum();
    let total = f64::from(a_ok + b_ok);
    println!("a {a_ok} answered, b {b_ok}; {starts} starts ({loads:?})");
    assert!(
        a_failed.is_empty() && b_failed.is_empty(),
        "{a_failed:?} {b_failed:?}"
    );
    // The turns alternate: each model started as often as the other, give or take the turn
    // the window ends in. What each answers in its turns is the clients' and the CPU's: on
    // two cores shared with two other test units the same turns gave 23% and 29% (alone,
    // 50%), so the share asked here is only that neither starves (it was 4%); the shares a
    // quiet machine gives are the turns benchmark's (docs/GUIDE.md).
    assert!(
        loads[0].abs_diff(loads[1]) <= 1,
        "{loads:?}: {}",
        door_log(&deck)
    );
    assert!(
        f64::from(a_ok.min(b_ok)) >= 0.2 * total,
        "a {a_ok}, b {b_ok}: {}",
        door_log(&deck)
    );
    assert!(
        starts as f64 <= 0.25 * total,
        "{starts} starts for {total} answers"
    );
    assert!(starts >= 3, "they took turns: {starts} starts");
    let turn = &model_status(&deck, "a")["turn"];
    assert!(turn["length_s"].as_f64().unwrap() >= 10.0, "{turn}");
    assert!(turn["last_start_s"].as_f64().unwrap() >= 1.0, "{turn}");
}

/// A canary of one model lends the state lock for its window: another model still starts
/// on demand, evicting an idle third, while the canary runs.
#[test]
fn a_rollout_of_one_model_leaves_the_others_free_to_start_and_evict() {
    let deck = crate::frontdoor_faults::deck("pressure-rollout");
    sim(&deck, "chat-a", Some("chat"), "serve:\n  default: true\n");
    sim(&deck, "chat-b", Some("chat"), "serve:\n  default: true\n");
    sim(&deck, "chat-c", Some("chat"), "");
    sim(&deck, "coder-a", Some("coder"), "");
    sim(&deck, "tools-a", Some("tools"), "serve:\n  ttl: 1s\n");
    let pool = |args: &[&str]| {
        let mut cmd = deck.cmd(args);
        cmd.env("SPARKCTL_MEMORY_GB", "7")
            .env("SPARKCTL_MEMORY_RESERVE_GB", "0")
            .env("SPARKCTL_WARM_GRACE", "0s")
            .env("SPARKCTL_FRONTDOOR_HOLD", "20s");
        cmd
    };
    for args in [
        &["rollback", "--to", "chat-a"][..],
        &["rollback", "--to", "coder-a", "--add-model"],
        &["rollback", "--to", "tools-a"],
    ] {
        Ran::of(&mut pool(args)).succeeds();
    }
    until(
        Duration::from_secs(20),
        "tools unloaded after its ttl",
        || !runs(&deck, "tools-a"),
    );
    let canary = Ran::spawn(&mut pool(&[
        "up", "chat-b", "--yes", "--canary", "50%", "--window", "10m",
    ]));
    until(Duration::from_secs(60), "the canary running", || {
        !crate::models::door(&deck)["rollout"].is_null()
    });
    assert!(runs(&deck, "chat-a") && runs(&deck, "chat-b") && runs(&deck, "coder-a"));
    // tools needs room: coder (idle) is evicted, under the canary's window.
    let began = Instant::now();
    let a = answer(&deck.door_url(), chat(Some("tools")));
    assert_eq!(a.status, 200, "{} {}", a.body, door_log(&deck));
    assert!(
        began.elapsed() < Duration::from_secs(15),
        "{:?}",
        began.elapsed()
    );
    assert!(!runs(&deck, "coder-a"), "{}", door_log(&deck));
    // The canary's own model is its: another `up` of it is refused, saying why.
    let refused = Ran::of(&mut pool(&["up", "chat-c", "--yes"]));
    refused
        .exits(1)
        .warns("is meeting model chat's traffic in a canary");
    canary.interrupt();
    canary.wait();
    assert!(!runs(&deck, "chat-b"));
    assert!(runs(&deck, "chat-a"));
}

/// `up --shadow` SIGKILLed in its window: the door ends the rollout and stops the candidate
/// (its memory counted in every plan otherwise); production serves on.
#[test]
fn a_killed_rollout_leaves_no_candidate_running() {
    let deck = crate::frontdoor_faults::deck("pressure-orphan");
    sim(&deck, "chat-a", Some("chat"), "");
    sim(&deck, "chat-b", Some("chat"), "");
    deck.ok(&["rollback", "--to", "chat-a"]);
    let shadow = Ran::spawn(&mut deck.cmd(&["up", "chat-b", "--yes", "--shadow", "10m"]));
    until(Duration::from_secs(60), "the shadow running", || {
        !crate::models::door(&deck)["rollout"].is_null()
    });
    assert!(runs(&deck, "chat-b"));
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &shadow.pid().to_string()])
        .status();
    until(Duration::from_secs(20), "the candidate stopped", || {
        !runs(&deck, "chat-b")
    });
    let d: Value = crate::models::door(&deck);
    assert!(d["rollout"].is_null(), "{d}");
    let a = answer(&deck.door_url(), chat(Some("chat")));
    assert_eq!(a.status, 200);
    assert!(a.by.starts_with("chat-a "), "{}", a.by);
}

/// Issue 46, memory learned: two models declared at a guess (0.1 GB) that hold 0.4 GB each,
/// in a pool of 0.7 GB. Declared, they fit together, so the second start evicts nothing —
/// and each start's measured figure is kept; the next start of one counts what it held and
/// evicts the other first.
#[test]
fn what_a_model_held_at_its_last_start_is_what_the_next_plan_counts() {
    let deck = crate::frontdoor_faults::deck("pressure-learned");
    sim(&deck, "a-1", Some("a"), "");
    sim(&deck, "b-1", Some("b"), "serve:\n  ttl: 2s\n");
    for r in ["a-1", "b-1"] {
        replace_in(
            &deck,
            r,
            "--load-time, 300ms",
            "--load-time, 300ms, --hold-memory, 400m",
        );
        replace_in(&deck, r, "memory_gb: 2", "memory_gb: 0.1");
    }
    rebooted(&deck, "0.7", &["a-1", "b-1"]);
    // Made production in a pool that holds both: what that taught is forgotten, so the
    // next starts know only the guess.
    for r in ["a-1", "b-1"] {
        deck.ok(&["memory", "forget", r]);
    }
    for m in ["a", "b"] {
        let a = answer(&deck.door_url(), chat(Some(m)));
        assert_eq!(a.status, 200, "{m}: {} {}", a.body, door_log(&deck));
    }
    assert!(
        runs(&deck, "a-1") && runs(&deck, "b-1"),
        "declared, both fit"
    );
    let learned: Value = serde_json::from_str(&deck.ok(&["--json", "memory"])).unwrap();
    for r in ["a-1", "b-1"] {
        let gb = learned[r][0]["gb"].as_f64().unwrap_or(0.0);
        assert!((0.38..1.0).contains(&gb), "{r} held {gb} GB: {learned}");
    }
    until(Duration::from_secs(20), "b unloaded after its ttl", || {
        !runs(&deck, "b-1")
    });
    // b's next start counts the 0.4 GB it held: a (idle) makes room first.
    let a = answer(&deck.door_url(), chat(Some("b")));
    assert_eq!(a.status, 200, "{} {}", a.body, door_log(&deck));
    assert!(runs(&deck, "b-1"));
    assert!(
        !runs(&deck, "a-1"),
        "a was not evicted: {}",
        door_log(&deck)
    );
    deck.sparkctl(&["up", "a-1", "--dry-run", "--yes"])
        .succeeds()
        .warns("held at an earlier start");
    // Forgotten, the declaration counts again.
    let out = deck.ok(&["memory", "forget", "a-1"]);
    assert!(out.contains("a-1: 1 learned figures forgotten"), "{out}");
}

/// Issue 46, evict by cost: three idle models that start in 0.3, 2 and 3 s, the quickest
/// the most recently used; a fourth's start needs one of them gone. Least recently used
/// alone would take the 2 s one; the door takes the one cheapest to bring back.
#[test]
fn the_idle_model_cheapest_to_bring_back_is_evicted() {
    let deck = crate::frontdoor_faults::deck("pressure-cost");
    for (r, m, load) in [
        ("x-1", "x", "300ms"),
        ("y-1", "y", "2s"),
        ("z-1", "z", "3s"),
        ("w-1", "w", "300ms"),
    ] {
        sim(&deck, r, Some(m), "");
        replace_in(
            &deck,
            r,
            "--load-time, 300ms",
            &format!("--load-time, {load}"),
        );
    }
    // 2 GB each in 6.5: three at a time.
    rebooted(&deck, "6.5", &["x-1", "y-1", "z-1", "w-1"]);
    for m in ["y", "z", "x"] {
        let a = answer(&deck.door_url(), chat(Some(m)));
        assert_eq!(a.status, 200, "{m}: {}", a.body);
    }
    std::thread::sleep(Duration::from_secs(1));
    let a = answer(&deck.door_url(), chat(Some("w")));
    assert_eq!(a.status, 200, "{} {}", a.body, door_log(&deck));
    let log = door_log(&deck);
    assert!(!runs(&deck, "x-1"), "x (0.3 s to start) still runs: {log}");
    assert!(runs(&deck, "y-1") && runs(&deck, "z-1"), "{log}");
    assert!(log.contains("cheapest to bring back first"), "{log}");
}

/// Issue 46, out of memory is a fact: b is declared small and fits by the plan, but its GPU
/// memory is a's (the sim's `--oom-beside`): its start dies of CUDA's out-of-memory. The
/// door makes room (a is idle) and tries once more at once: b's client gets its answer.
#[test]
fn a_start_that_runs_out_of_memory_makes_room_and_is_tried_once_more() {
    let deck = crate::frontdoor_faults::deck("pressure-oom");
    sim(&deck, "a-1", Some("a"), "");
    sim(&deck, "b-1", Some("b"), "");
    let a_port = std::fs::read_to_string(deck.dir.join("recipes/a-1.yaml"))
        .unwrap()
        .lines()
        .find_map(|l| l.trim().strip_prefix("port: ").map(String::from))
        .unwrap();
    rebooted(&deck, "16", &["a-1", "b-1"]);
    replace_in(
        &deck,
        "b-1",
        "--load-time, 300ms",
        &format!("--load-time, 300ms, --oom-beside, \"http://127.0.0.1:{a_port}\""),
    );
    let a = answer(&deck.door_url(), chat(Some("a")));
    assert_eq!(a.status, 200, "{}", a.body);
    std::thread::sleep(Duration::from_secs(1));
    let b = answer(&deck.door_url(), chat(Some("b")));
    let log = door_log(&deck);
    assert_eq!(b.status, 200, "{} {log}", b.body);
    assert!(log.contains("ran out of memory as it started"), "{log}");
    assert!(!runs(&deck, "a-1") && runs(&deck, "b-1"), "{log}");
    assert_eq!(model_status(&deck, "b")["loads"], 1);
}

/// Issue 46: `up` of a model that does not fit beside another model's idle production. It
/// was refused even with `--yes` ("does not fit beside other models' production"), though
/// a start on demand would have evicted that model. Without `--yes` it still is, nothing
/// stopped; with `--yes` the door evicts the idle model as a start on demand does, the new
/// one is promoted, and the evicted one's next request starts it again.
#[test]
fn up_yes_evicts_another_model_s_idle_production_for_room() {
    let deck = crate::frontdoor_faults::deck("pressure-up-evicts");
    sim(&deck, "chat-1", Some("chat"), "");
    sim(&deck, "coder-1", Some("coder"), "");
    sim(&deck, "coder-2", Some("coder"), "");
    rebooted(&deck, "3", &["chat-1", "coder-1"]);
    // chat serves, idle; coder is not loaded.
    let a = answer(&deck.door_url(), chat(Some("chat")));
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(runs(&deck, "chat-1"));
    in_pool(&deck, "3", &["up", "coder-2", "--add-model"])
        .exits(1)
        .warns("beside other models' production chat-1 (model chat)");
    assert!(runs(&deck, "chat-1"), "a refusal stopped chat-1");
    in_pool(&deck, "3", &["up", "coder-2", "--add-model", "--yes"])
        .succeeds()
        .warns("chat-1 evicted to make room");
    assert!(!runs(&deck, "chat-1"), "chat-1 still runs");
    assert_eq!(model_status(&deck, "chat")["state"], "evicted");
    let log = door_log(&deck);
    assert!(
        log.contains("evicted for coder-2, as `up --yes` asked"),
        "{log}"
    );
    let c = answer(&deck.door_url(), chat(Some("coder")));
    assert_eq!(c.status, 200, "{}", c.body);
    assert!(c.by.starts_with("coder-2 "), "{}", c.by);
    // chat's next request starts it again (evicting coder, idle now).
    let a = answer(&deck.door_url(), chat(Some("chat")));
    assert_eq!(a.status, 200, "{} {}", a.body, door_log(&deck));
}
