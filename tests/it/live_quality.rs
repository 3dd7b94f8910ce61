//! Issue 27: production judged on what it answers, through the real front door, real sim
//! processes and real HTTP — a production that starts answering garbage while `/health`
//! stays green is caught on live traffic and failed over with no client failing; a
//! candidate that leaves tool calls in its content is caught by golden prompts after
//! `bench` let it through.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::{self, free_port, http_status, Deck, Sim};

fn process(deck: &Deck, name: &str, args: &str, extra: &str) {
    deck.recipe(
        name,
        &format!(
            "engine: sim\nruntime: process\nserver:\n  port: {}\n  args: [{args}]\n  memory_gb: 7\nhealth:\n  timeout: 30s\n{extra}",
            free_port()
        ),
    );
}

fn history(deck: &Deck) -> Vec<Value> {
    let v: Value = serde_json::from_str(&deck.ok(&["--json", "history"])).unwrap();
    v.as_array().unwrap().clone()
}

fn door(deck: &Deck) -> Value {
    serde_json::from_str(&deck.ok(&["--json", "frontdoor", "status"])).unwrap()
}

/// Waits for a run record of `command`; returns it.
fn wait_record(deck: &Deck, command: &str, within: Duration) -> Value {
    let deadline = Instant::now() + within;
    loop {
        if let Some(r) = history(deck).into_iter().find(|r| r["command"] == command) {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "no `{command}` record within {within:?}: {:?}",
            history(deck)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn long_question() -> Value {
    json!({
        "model": "any", "max_tokens": 48, "stream": true,
        "messages": [{"role": "user", "content": "What is the capital of Japan?"}],
    })
}

#[test]
fn a_garbling_production_keeps_health_green_and_one_token_answers_right() {
    let sim = Sim::start(&[
        "--garbage-after",
        "2",
        "--tokens",
        "40",
        "--ttft",
        "1ms",
        "--token-rate",
        "5000",
    ]);
    sim.wait_ready(Duration::from_secs(10));
    let ask = |max_tokens: u32| {
        let url = sim.url.clone();
        support::block_on(async move {
            let body = json!({"model": "m", "max_tokens": max_tokens, "stream": true,
                "messages": [{"role": "user", "content": "What is the capital of Japan?"}]});
            let (status, events) = support::stream_chat(&reqwest::Client::new(), &url, &body).await;
            let text: String = events
                .iter()
                .filter_map(|e| e.json())
                .filter_map(|v| support::content_of(&v).map(str::to_string))
                .collect();
            (status, text)
        })
    };
    for _ in 0..2 {
        let (status, text) = ask(48);
        assert_eq!(status, 200);
        assert!(!text.contains('\u{fffd}'), "{text:?}");
    }
    let (status, text) = ask(48);
    assert_eq!(status, 200);
    assert!(
        text.starts_with("Tokyo is") && text.contains('\u{fffd}'),
        "{text:?}"
    );
    assert_eq!(http_status(&sim.url, "/health"), Some(200));
    let (status, text) = ask(1);
    assert_eq!((status, text.as_str()), (200, "Tokyo"));
}

#[test]
fn a_production_that_starts_answering_garbage_is_failed_over_and_no_client_fails() {
    let deck = Deck::new("live-garbage");
    let quick = "--load-time, 200ms, --ttft, 2ms, --token-rate, \"2000\", --tokens, \"40\"";
    process(&deck, "safe", quick, "");
    process(
        &deck,
        "prod",
        &format!("{quick}, --garbage-after, \"12\""),
        "fallback: safe\nlive:\n  gates:\n    no_loop: \">= 90%\"\n    non_empty: \">= 90%\"\n  window: 10\n  min_answers: 5\n  sustain: 2s\n",
    );
    deck.ok(&["rollback", "--to", "prod"]);
    let prod_id = door(&deck)["upstream"]["deployment"]
        .as_str()
        .unwrap()
        .to_string();
    let body = long_question();
    let client = support::Streamers::start(&deck.door_url(), 1, Arc::new(move |_, _| body.clone()));
    let failover = wait_record(&deck, "failover", Duration::from_secs(90));
    std::thread::sleep(Duration::from_millis(500));
    let (seen, errors) = client.stop();

    // No client request failed: every answer complete, through the restart and the failover.
    assert!(errors.is_empty(), "{errors:?}");
    assert!(
        seen.iter().all(|s| s.status == 200 && s.done),
        "{:?}",
        seen.iter().find(|s| s.status != 200 || !s.done)
    );
    // Garbage was served, and caught: within a bound of the first garbled answer, another
    // instance answered.
    let first_bad = seen
        .iter()
        .position(|s| s.content.contains('\u{fffd}'))
        .expect("garbage was served");
    let bad = &seen[first_bad];
    let replaced = seen[first_bad..]
        .iter()
        .find(|s| s.upstream != bad.upstream)
        .expect("another instance answered after the garbage");
    let detected = replaced.at - bad.at;
    assert!(
        detected < Duration::from_secs(20),
        "detected after {detected:?}"
    );
    assert!(
        seen.last().unwrap().upstream.starts_with("safe "),
        "{:?}",
        seen.last()
    );
    assert!(!seen.last().unwrap().content.contains('\u{fffd}'));

    // A restart first, then (it garbled again) the fallback: both with their evidence.
    let restart = wait_record(&deck, "restart", Duration::from_secs(1));
    assert_eq!(restart["recipe"], "prod");
    assert_eq!(restart["outcome"], "recovered", "{restart}");
    assert_eq!(failover["recipe"], "safe");
    assert_eq!(failover["outcome"], "recovered", "{failover}");
    for r in [&restart, &failover] {
        let why = r["error"].as_str().unwrap();
        assert!(
            why.contains("prod answers badly") && why.contains("no_loop"),
            "{why}"
        );
        let evidence = support::strings(&r["evidence"]).join("\n");
        assert!(
            evidence.contains("no_loop (garbled text") && evidence.contains("Tokyo is"),
            "{evidence}"
        );
        assert!(
            evidence.contains("\\u{1}") && !evidence.contains('\u{1}'),
            "escaped: {evidence}"
        );
        assert_eq!(r["gates"][0]["gate"], "no_loop");
        assert_eq!(r["gates"][0]["outcome"], "fail");
    }
    // The first instance and the restarted one are both stopped; the fallback serves.
    assert_eq!(door(&deck)["upstream"]["recipe"], "safe");
    assert_ne!(door(&deck)["upstream"]["deployment"], prod_id);
    let prod_state = deck.status_of("prod").unwrap();
    assert_ne!(prod_state["state"], "running", "{prod_state}");
    // What the user reads: history with the evidence, escaped; the metrics per check.
    let shown = deck.ok(&["history"]);
    assert!(shown.contains("evidence: no_loop (garbled text"), "{shown}");
    assert!(
        !shown.contains('\u{1}'),
        "a control character reached the terminal"
    );
    let metrics = deck.metrics();
    let faults = metrics
        .lines()
        .find(|l| {
            l.starts_with(
                "sparkctl_frontdoor_answer_faults_total{upstream=\"prod\",check=\"no_loop\"}",
            )
        })
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(
        faults.rsplit(' ').next().unwrap().parse::<u64>().unwrap() >= 5,
        "{faults}"
    );
    assert!(
        metrics.contains("sparkctl_frontdoor_answers_total{upstream=\"safe\"}"),
        "{metrics}"
    );
    let status = deck.ok(&["status"]);
    assert!(status.contains("live quality of safe"), "{status}");
}

#[test]
fn a_candidate_that_leaves_tool_calls_in_its_content_is_caught_by_golden_prompts() {
    let deck = Deck::new("live-golden");
    std::fs::create_dir_all(deck.dir.join("recipes/suites")).unwrap();
    std::fs::write(
        deck.dir.join("recipes/suites/tiny.yaml"),
        "name: tiny\nwarmup: 1\nruns: 5\ncases:\n  - name: factual\n    turns: [\"What is the capital of Japan?\"]\n    expect: Tokyo\n    max_tokens: 16\n",
    )
    .unwrap();
    let quick = "--load-time, 200ms, --ttft, 2ms, --token-rate, \"2000\", --tokens, \"12\"";
    process(&deck, "safe", quick, "");
    // Its benchmark has no tool case: `up` promotes it. Its golden prompts do.
    process(
        &deck,
        "cand",
        &format!("{quick}, --tool-calls, content"),
        "bench:\n  suite: tiny\n  gates:\n    expected_answer: \">= 80%\"\nfallback: safe\nlive:\n  golden:\n    every: 1s\n    suite: voice-assistant\n    cases: [factual, tool_web_search]\n    failures: 2\n",
    );
    deck.ok(&["rollback", "--to", "safe"]);
    deck.sparkctl(&["up", "cand", "--yes"])
        .promoted("cand", deck.door_port);
    // A client offering tools gets the call as text: the live check counts it too.
    for _ in 0..3 {
        let url = deck.door_url();
        support::block_on(async move {
            let body = json!({"model": "m", "max_tokens": 64, "stream": true,
                "tools": [{"type": "function", "function": {"name": "web_search", "parameters": {"type": "object"}}}],
                "messages": [{"role": "user", "content": "Do a web search for the news."}]});
            support::stream_chat(&reqwest::Client::new(), &url, &body).await
        });
    }
    let faults = "sparkctl_frontdoor_answer_faults_total{upstream=\"cand\",check=\"tool_calls\"} 3";
    let deadline = Instant::now() + Duration::from_secs(5);
    while !deck.metrics().contains(faults) {
        assert!(Instant::now() < deadline, "{}", deck.metrics());
        std::thread::sleep(Duration::from_millis(100));
    }
    let failover = wait_record(&deck, "failover", Duration::from_secs(90));
    assert_eq!(failover["recipe"], "safe");
    let restart = wait_record(&deck, "restart", Duration::from_secs(1));
    for r in [&restart, &failover] {
        let why = r["error"].as_str().unwrap();
        assert!(
            why.contains("golden prompts failed 2 rounds in a row"),
            "{why}"
        );
        let evidence = support::strings(&r["evidence"]).join("\n");
        assert!(
            evidence.contains("golden tool_web_search failed tool_calls: \"<tool_call>\\n{")
                && evidence.contains("(no tool_calls)"),
            "{evidence}"
        );
        // The factual case answered right: only the tool case is blamed.
        assert!(!evidence.contains("golden factual"), "{evidence}");
    }
    assert_eq!(door(&deck)["upstream"]["recipe"], "safe");
    let metrics = deck.metrics();
    assert!(
        metrics
            .contains("sparkctl_frontdoor_golden_rounds_total{upstream=\"cand\",outcome=\"fail\"}"),
        "{metrics}"
    );
}

/// Issue 37: a production that answers empty to clients that do not stream (the OpenAI
/// SDKs' default), with no `live` section in its recipe, is caught by the floor of live
/// gates on the whole answers and restarted.
#[test]
fn empty_whole_answers_are_caught_without_a_live_section() {
    let deck = Deck::new("live-empty-whole");
    let quick = "--load-time, 200ms, --ttft, 2ms, --token-rate, \"2000\", --tokens, \"16\"";
    // Its benchmark and readiness see answers; then every answer is empty.
    process(
        &deck,
        "prod",
        &format!("{quick}, --empty-after, \"14\""),
        "",
    );
    deck.ok(&["rollback", "--to", "prod"]);
    let body = json!({
        "model": "any", "max_tokens": 16,
        "messages": [{"role": "user", "content": "What is the capital of Japan?"}],
    });
    let url = deck.door_url();
    let stop = Arc::new(AtomicBool::new(false));
    let (flag, empties) = (stop.clone(), Arc::new(Mutex::new(0usize)));
    let seen_empty = empties.clone();
    let client = std::thread::spawn(move || {
        support::block_on(async move {
            let client = reqwest::Client::builder().no_proxy().build().unwrap();
            while !flag.load(Ordering::SeqCst) {
                if let Ok(r) = client
                    .post(format!("{url}/v1/chat/completions"))
                    .json(&body)
                    .send()
                    .await
                {
                    let v: Value = r.json().await.unwrap_or_default();
                    if v["choices"][0]["message"]["content"] == "" {
                        *seen_empty.lock().unwrap() += 1;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    });
    let restart = wait_record(&deck, "restart", Duration::from_secs(120));
    stop.store(true, Ordering::SeqCst);
    client.join().unwrap();
    assert!(
        *empties.lock().unwrap() > 0,
        "the client saw no empty answer"
    );
    let why = restart["error"].as_str().unwrap();
    assert!(
        why.contains("prod answers badly") && why.contains("non_empty"),
        "{why}"
    );
    assert_eq!(restart["outcome"], "recovered", "{restart}");
}
