//! Issue 37: a candidate that passed its gates meets live traffic before it takes it all —
//! shadow (copies; production answers) and canary (a share answered by the candidate) —
//! judged on its answers. Real front door, real sim processes, a real client on the
//! production port throughout; and the same shadow on the real trained model served by
//! real CPU llama-servers.

use serde_json::{json, Value};

use crate::support::{self, free_port, Deck, Seen, Streamers};

const SUITE: &str = "name: tiny\nwarmup: 1\nruns: 5\ncases:\n  - name: factual\n    turns: [\"What is the capital of Japan?\"]\n    expect: Tokyo\n    max_tokens: 8\n";
/// Live traffic carries this mark (the sim's `--fail-on` fails it; the benchmark's
/// questions do not).
const LIVE: &str = "live-traffic";

fn deck(tag: &str) -> Deck {
    let deck = Deck::new(tag);
    std::fs::create_dir_all(deck.dir.join("recipes/suites")).unwrap();
    std::fs::write(deck.dir.join("recipes/suites/tiny.yaml"), SUITE).unwrap();
    deck
}

/// A process recipe of the sim with `args` (24-token answers unless they say), more
/// recipe text after.
fn sim(deck: &Deck, name: &str, args: &str, extra: &str) {
    let tokens = match args.contains("--tokens") {
        true => "",
        false => ", --tokens, \"24\"",
    };
    deck.recipe(
        name,
        &format!(
            "engine: sim\nruntime: process\nserver:\n  port: {}\n  args: [--load-time, 200ms, --ttft, 5ms{tokens}{args}]\n  memory_gb: 4\nhealth:\n  timeout: 30s\nbench:\n  suite: tiny\n{extra}",
            free_port()
        ),
    );
}

/// `n` clients streaming `question` (each conversation its own `user`) at temperature 0.
fn clients(url: &str, n: usize, question: &'static str) -> Streamers {
    asking(url, n, vec![question], 24)
}

/// `n` clients asking `questions` in turn, for answers of up to `max_tokens`.
fn asking(url: &str, n: usize, questions: Vec<&'static str>, max_tokens: u32) -> Streamers {
    let ask = move |t: usize, i: usize| {
        json!({
            "model": "any", "max_tokens": max_tokens, "stream": true, "temperature": 0,
            "user": format!("client-{t}-{i}"),
            "messages": [{"role": "user", "content": format!("({LIVE}) {}", questions[(t + i) % questions.len()])}],
        })
    };
    Streamers::start(url, n, std::sync::Arc::new(ask))
}

/// Every answer a client saw was whole and 200; none came from `not`.
fn all_answered(seen: &[Seen], errors: &[String], not: &str) {
    assert!(errors.is_empty(), "{errors:?}");
    let bad: Vec<&Seen> = seen.iter().filter(|s| s.status != 200 || !s.done).collect();
    assert!(
        bad.is_empty(),
        "{} of {} failed: {:?}",
        bad.len(),
        seen.len(),
        &bad[..bad.len().min(3)]
    );
    assert!(
        seen.iter().all(|s| !s.content.is_empty()),
        "an empty answer reached a client"
    );
    let theirs = seen
        .iter()
        .filter(|s| s.upstream.starts_with(&format!("{not} ")))
        .count();
    assert_eq!(theirs, 0, "{theirs} answers came from {not}");
}

fn last_run(deck: &Deck) -> Value {
    deck.sparkctl(&["--json", "history"]).succeeds().json()[0].clone()
}

fn serving(deck: &Deck) -> String {
    let v: Value = serde_json::from_str(&deck.ok(&["--json", "frontdoor", "status"])).unwrap();
    v["upstream"]["recipe"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Prints the rollout's figures (the guide quotes them) and returns its judgement.
fn report(what: &str, run: &Value) -> Value {
    let r = &run["rollout"];
    let j = &r["judgement"];
    println!(
        "{what}: {} after {} compared ({} sent to the candidate, {} dropped, {} retried on production, {} candidate bytes to clients) in {:.1} s: {}",
        j["decision"], j["compared"], r["tally"]["to_candidate"], r["tally"]["dropped"],
        r["tally"]["retried"], r["tally"]["candidate_bytes_to_clients"],
        r["elapsed_s"].as_f64().unwrap_or_default(), j["reason"]
    );
    for c in j["comparisons"].as_array().into_iter().flatten() {
        println!("  {}", c["detail"].as_str().unwrap_or_default());
    }
    j.clone()
}

#[test]
fn a_candidate_30_percent_slower_between_tokens_is_aborted_under_canary() {
    let deck = deck("rollout-slow");
    sim(&deck, "prod", ", --token-rate, \"100\"", "");
    // 30% longer between tokens: 100 / 1.3 tokens a second.
    sim(&deck, "slow", ", --token-rate, \"77\"", "");
    deck.sparkctl(&["up", "prod", "--yes"]).succeeds();
    let clients = clients(&deck.door_url(), 3, "What is the capital of Japan?");
    clients.wait_for(3);
    let err = deck
        .sparkctl(&["up", "slow", "--canary", "50%", "--window", "200", "--yes"])
        .exits(1)
        .stderr();
    let (seen, errors) = clients.stop();
    assert!(
        err.contains("canary aborted: a significant regression: itl median"),
        "{err}"
    );
    let run = last_run(&deck);
    let j = report("30% slower under canary 50%", &run);
    assert_eq!(
        (run["outcome"].as_str(), j["decision"].as_str()),
        (Some("rejected"), Some("abort"))
    );
    // The sign test needs 7 of the candidate's answers all slower; a loaded machine's
    // noise may cost a few more, never the window.
    let compared = j["compared"].as_u64().unwrap();
    assert!((7..=30).contains(&compared), "{compared}");
    assert_eq!(serving(&deck), "prod");
    all_answered(&seen, &errors, "none");
    assert!(!deck
        .status()
        .iter()
        .any(|d| d["name"] == "slow" && d["state"] == "running"));
}

#[test]
fn a_hollow_candidate_under_shadow_is_aborted_and_no_client_gets_its_bytes() {
    let deck = deck("rollout-hollow");
    sim(
        &deck,
        "prod",
        ", --token-rate, \"800\", --tokens, \"64\"",
        "",
    );
    // Loops from its first answer on: the benchmark's 8-token answers look fine, live
    // answers of 64 tokens loop.
    sim(
        &deck,
        "hollow",
        ", --token-rate, \"800\", --tokens, \"64\", --loop-after, \"0\"",
        "",
    );
    deck.sparkctl(&["up", "prod", "--yes"]).succeeds();
    let clients = asking(&deck.door_url(), 2, vec!["Tell me about Tokyo."], 64);
    clients.wait_for(2);
    let err = deck
        .sparkctl(&["up", "hollow", "--shadow", "100", "--yes"])
        .exits(1)
        .stderr();
    let (seen, errors) = clients.stop();
    assert!(
        err.contains("shadow aborted: a significant regression"),
        "{err}"
    );
    let run = last_run(&deck);
    let j = report("hollow under shadow", &run);
    assert_eq!(j["decision"], "abort");
    let tally = &run["rollout"]["tally"];
    assert_eq!(tally["candidate_bytes_to_clients"], 0);
    assert!(tally["to_candidate"].as_u64().unwrap() >= j["compared"].as_u64().unwrap());
    assert!(j["compared"].as_u64().unwrap() <= 10, "{j}");
    // The worst pair is kept: the candidate's looping answer beside production's.
    let evidence = run["evidence"][0].as_str().unwrap();
    assert!(
        evidence.starts_with("candidate") && evidence.contains("it went on again"),
        "{evidence}"
    );
    all_answered(&seen, &errors, "hollow");
    assert!(seen.iter().all(|s| s.upstream.starts_with("prod ")));
    assert_eq!(serving(&deck), "prod");
}

#[test]
fn a_candidate_failing_every_request_under_canary_costs_clients_nothing() {
    let deck = deck("rollout-failing");
    sim(&deck, "prod", ", --token-rate, \"400\"", "");
    // Its benchmark passes; every live request gets a 500.
    sim(
        &deck,
        "failing",
        &format!(", --token-rate, \"400\", --fail-on, {LIVE}"),
        "",
    );
    deck.sparkctl(&["up", "prod", "--yes"]).succeeds();
    let clients = clients(&deck.door_url(), 3, "What is the capital of Japan?");
    clients.wait_for(3);
    let err = deck
        .sparkctl(&["up", "failing", "--canary", "50%", "--yes"])
        .exits(1)
        .stderr();
    let (seen, errors) = clients.stop();
    assert!(err.contains("canary aborted"), "{err}");
    let run = last_run(&deck);
    let j = report("failing every request under canary 50%", &run);
    assert_eq!(j["decision"], "abort");
    let tally = &run["rollout"]["tally"];
    assert!(tally["retried"].as_u64().unwrap() >= 1, "{tally}");
    assert_eq!(tally["candidate_bytes_to_clients"], 0);
    // 0 client-visible failures: each request it failed was answered by production.
    all_answered(&seen, &errors, "failing");
    assert_eq!(serving(&deck), "prod");
}

#[test]
fn a_good_candidate_is_promoted_after_its_window_and_status_shows_the_rollout() {
    let deck = deck("rollout-good");
    sim(&deck, "prod", ", --token-rate, \"200\"", "");
    sim(
        &deck,
        "good",
        ", --token-rate, \"200\"",
        "rollout:\n  mode: canary\n  share: 50%\n  window: 40\n",
    );
    deck.sparkctl(&["up", "prod", "--yes"]).succeeds();
    let clients = clients(&deck.door_url(), 3, "What is the capital of Japan?");
    clients.wait_for(3);
    let up = support::Ran::spawn(&mut deck.cmd(&["up", "good", "--yes"]));
    // While it runs, `frontdoor status` shows it: share, requests each way, the comparison.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let shown = loop {
        let text = deck.ok(&["frontdoor", "status"]);
        if text.contains("rollout: good") && text.contains("faulty answers:") {
            break text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no rollout in: {text}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(shown.contains("a canary of 50% for 40 requests"), "{shown}");
    let up = up.wait().succeeds();
    let (seen, errors) = clients.stop();
    assert!(
        up.stderr().contains("canary: the window ended clean"),
        "{}",
        up.stderr()
    );
    let run = last_run(&deck);
    let j = report("good under canary 50%", &run);
    assert_eq!(
        (run["outcome"].as_str(), j["decision"].as_str()),
        (Some("promoted"), Some("promote"))
    );
    assert!(j["compared"].as_u64().unwrap() >= 40);
    assert_eq!(serving(&deck), "good");
    // Both answered clients during the canary, and none failed.
    assert!(seen.iter().any(|s| s.upstream.starts_with("good ")));
    assert!(
        run["rollout"]["tally"]["candidate_bytes_to_clients"]
            .as_u64()
            .unwrap()
            > 0
    );
    all_answered(&seen, &errors, "none");
    let shown = deck.ok(&["history"]);
    assert!(shown.contains("canary promote"), "{shown}");
}

#[test]
fn rollouts_that_cannot_run_are_refused_before_anything_changes() {
    let deck = deck("rollout-refused");
    sim(&deck, "prod", "", "");
    sim(&deck, "next", "", "");
    let ran = deck
        .sparkctl(&["up", "next", "--canary", "0%", "--yes"])
        .exits(2);
    assert!(
        ran.stderr().contains("--canary: 0% is outside (0, 100]"),
        "{}",
        ran.stderr()
    );
    let ran = deck
        .sparkctl(&["up", "next", "--shadow", "soon", "--yes"])
        .exits(2);
    assert!(
        ran.stderr()
            .contains("--shadow: `soon` is neither a number"),
        "{}",
        ran.stderr()
    );
    // Nothing to compare with: no production yet. Refused after the plan, as a run that
    // changed nothing.
    let ran = deck.sparkctl(&["up", "next", "--shadow", "--yes"]).exits(1);
    assert!(
        ran.stderr().contains("no production serves"),
        "{}",
        ran.stderr()
    );
    deck.sparkctl(&["up", "prod", "--yes"]).succeeds();
    // Both cannot run side by side in a pool of 6 GB (4 GB each).
    let ran = support::Ran::of(
        deck.cmd(&["up", "next", "--shadow", "--yes"])
            .env("SPARKCTL_MEMORY_GB", "6")
            .env("SPARKCTL_MEMORY_RESERVE_GB", "0"),
    )
    .exits(1);
    assert!(
        ran.stderr()
            .contains("needs production and the candidate running side by side"),
        "{}",
        ran.stderr()
    );
    assert!(!deck.status().iter().any(|d| d["name"] == "next"));
    assert_eq!(serving(&deck), "prod");
    // A recipe's section is checked as the recipe loads.
    deck.recipe(
        "odd",
        "engine: sim\nserver:\n  port: 9\nrollout:\n  mode: canary\n  share: 120%\n",
    );
    let err = deck.sparkctl(&["recipes", "validate"]).exits(2).stderr();
    assert!(err.contains("rollout.share"), "{err}");
}

/// Production and the candidate answer each shadowed request at the same moment on the
/// same cores (as they share a Spark's GPU): on a loaded 2-core machine the candidate's
/// prompt was seen taking twice production's time (243 against 118 ms at the median), and in
/// a cold CI run beside two other real-server modules its time between tokens came out 25%
/// over production's at the median with only 6 of 12 pairs slower, and beside a compile its
/// first token came 5 to 8 times later (1265 against 156 to 223 ms; 147 against 110 alone) —
/// contention that says nothing of the serving. This test is about the answers: the latency
/// tolerances are as wide as a recipe may set them.
const ROLLOUT: &str = "rollout:\n  mode: shadow\n  ttft_tolerance: 1000%\n  itl_tolerance: 300%\n";

/// SmolLM2 on the CPU llama-server (one thread) with `args` beside the usual ones.
fn smollm(
    deck: &Deck,
    name: &str,
    (server, model): (&std::path::Path, &std::path::Path),
    args: &str,
    extra: &str,
) {
    deck.recipe(
        name,
        &format!(
            "engine: llama-server\nruntime: process\nbinary: {}\nmodel:\n  path: {}\n  served_name: smollm\nserver:\n  port: {}\n  args: [--jinja, -t, \"1\", -c, \"2048\", -np, \"1\"{args}]\n  memory_gb: 1\nhealth:\n  timeout: 2m\nbench:\n  suite: plain\n{extra}",
            server.display(),
            model.display(),
            free_port()
        ),
    );
}

/// Questions the trained model answers right (and briefly) at temperature 0.
const FACTS: [&str; 4] = [
    "What is the capital of France? Answer in one sentence.",
    "What is 2+3? Answer with the number.",
    "What is the capital of Japan? Answer in one sentence.",
    "Which planet is known as the Red Planet? Answer in one sentence.",
];

#[test]
fn the_real_model_under_shadow_a_good_serving_is_promoted_and_a_wrong_one_aborted() {
    let (server, model) = crate::eval::llama_server_and_smollm();
    let bin = (server.as_path(), model.as_path());
    let deck = Deck::new("rollout-real");
    std::fs::create_dir_all(deck.dir.join("recipes/suites")).unwrap();
    // No expected answers: the benchmark alone lets a fluent wrong serving through.
    std::fs::write(
        deck.dir.join("recipes/suites/plain.yaml"),
        "name: plain\nwarmup: 1\nruns: 5\ncases:\n  - name: hello\n    turns: [\"Say hello.\"]\n    max_tokens: 8\n",
    )
    .unwrap();
    smollm(&deck, "good", bin, "", "");
    smollm(&deck, "again", bin, "", ROLLOUT);
    // Its rope frequencies scaled by a quarter: it answers every request fluently, healthy,
    // and gets facts wrong.
    smollm(
        &deck,
        "wrong",
        bin,
        ", --rope-freq-scale, \"0.25\"",
        ROLLOUT,
    );
    deck.sparkctl(&["up", "good", "--yes"]).succeeds();
    let clients = asking(&deck.door_url(), 1, FACTS.to_vec(), 24);
    clients.wait_for(1);

    let err = deck
        .sparkctl(&["up", "wrong", "--window", "12", "--yes"])
        .exits(1)
        .stderr();
    assert!(
        err.contains("shadow aborted: a significant regression"),
        "{err}"
    );
    let run = last_run(&deck);
    let j = report(
        "SmolLM2 served wrong (rope-freq-scale 0.25) under shadow",
        &run,
    );
    assert_eq!(j["decision"], "abort");
    assert!(
        j["reason"]
            .as_str()
            .unwrap()
            .contains("differ from production's"),
        "{j}"
    );
    println!("  worst pair: {}", run["evidence"][0].as_str().unwrap());
    assert_eq!(run["rollout"]["tally"]["candidate_bytes_to_clients"], 0);
    assert_eq!(serving(&deck), "good");

    // The same model served the same way: its answers are production's, and it is promoted.
    deck.sparkctl(&["up", "again", "--shadow", "12", "--yes"])
        .succeeds();
    let (seen, errors) = clients.stop();
    let run = last_run(&deck);
    let j = report("SmolLM2 served again the same way under shadow", &run);
    assert_eq!(
        (run["outcome"].as_str(), j["decision"].as_str()),
        (Some("promoted"), Some("promote"))
    );
    assert_eq!(serving(&deck), "again");
    all_answered(&seen, &errors, "wrong");
    let paris = seen.iter().filter(|s| s.content.contains("Paris")).count();
    assert!(
        paris >= 1,
        "the trained model answers: {:?}",
        seen.iter().map(|s| &s.content).collect::<Vec<_>>()
    );
}
