//! Evaluation sets (`sparkctl eval`, `bench.eval`, the `eval_accuracy` gate): the built-in
//! sets against the simulated engine, which knows their answers (all right, or a scripted
//! share wrong, always the same items); a malformed set refused with its file, item and key;
//! and the sets on a real trained model, SmolLM2-135M-Instruct served by the CPU
//! llama-server: its score per set, items per minute, and a broken serving of the same model
//! (a rope override: it still talks) that the paired gate rejects against the good one.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{self, free_port, Deck, Sim};

/// The built-in sets and their sizes.
const SETS: [(&str, usize); 5] = [
    ("arithmetic", 25),
    ("json-shape", 20),
    ("tool-calls", 20),
    ("instructions", 24),
    ("facts", 25),
];

fn set_scores(report: &Value) -> Vec<(String, u64, u64)> {
    report["sets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["set"].as_str().unwrap().to_string(),
                s["right"].as_u64().unwrap(),
                s["items"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// The keys of the items a report got wrong.
fn wrong_keys(report: &Value) -> Vec<&str> {
    report["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["right"] == false)
        .map(|i| i["key"].as_str().unwrap())
        .collect()
}

#[test]
fn the_simulated_engine_answers_every_item_and_a_scripted_share_wrong() {
    let deck = Deck::new("eval-sim");
    // The figures on the sim's defaults; the comparisons on quick ones.
    let good = Sim::start(&[]);
    let quick = ["--ttft", "2ms", "--token-rate", "2000"];
    let bad = Sim::start(&[&quick[..], &["--eval-wrong", "20%"]].concat());
    let fine = Sim::start(&quick);
    for s in [&good, &bad, &fine] {
        s.wait_ready(Duration::from_secs(10));
    }

    // Every built-in item, right, through the real HTTP path and the real checks.
    let began = Instant::now();
    let ran = deck.sparkctl(&["--json", "eval", &good.url]).succeeds();
    let wall = began.elapsed();
    let v = ran.json();
    let e = &v["evaluation"]["candidate"];
    let expected: Vec<(String, u64, u64)> = SETS
        .iter()
        .map(|(s, n)| (s.to_string(), *n as u64, *n as u64))
        .collect();
    assert_eq!(set_scores(e), expected);
    println!(
        "sim (defaults: TTFT 50 ms, 50 tok/s): {} items in {:.1} s, {:.0} items per minute (wall {:.1} s)",
        e["total"],
        e["seconds"].as_f64().unwrap(),
        e["items_per_minute"].as_f64().unwrap(),
        wall.as_secs_f64()
    );
    for s in e["sets"].as_array().unwrap() {
        println!(
            "  {}: {:.0} items per minute",
            s["set"].as_str().unwrap(),
            s["items_per_minute"].as_f64().unwrap()
        );
    }

    // The scripted bad night: a fifth of each set wrong, said item by item, and the
    // paired gate against the good one fails.
    let ran = deck
        .sparkctl(&[
            "--json",
            "eval",
            &bad.url,
            "--against",
            &fine.url,
            "--gate",
            ">= production - 3",
        ])
        .exits(1);
    let v = ran.json();
    let c = &v["evaluation"]["candidate"];
    let wrong: Vec<(String, u64, u64)> = SETS
        .iter()
        .map(|(s, n)| {
            let k = (*n as f64 * 0.2).round() as u64;
            (s.to_string(), *n as u64 - k, *n as u64)
        })
        .collect();
    assert_eq!(set_scores(c), wrong);
    let paired = &v["evaluation"]["paired"];
    let lost = paired["lost"].as_array().unwrap();
    assert_eq!(
        lost.len() as u64,
        wrong.iter().map(|w| w.2 - w.1).sum::<u64>()
    );
    assert!(paired["gained"].as_array().unwrap().is_empty());
    let missed = wrong_keys(c);
    assert_eq!(
        missed,
        lost.iter().map(|k| k.as_str().unwrap()).collect::<Vec<_>>()
    );
    assert_eq!(v["gate"]["outcome"], "fail", "{}", v["gate"]);
    assert!(paired["p_worse"].as_f64().unwrap() < 0.001);
    // The same items every time: a second run misses exactly these.
    let again = deck
        .sparkctl(&["--json", "eval", &bad.url])
        .succeeds()
        .json();
    assert_eq!(wrong_keys(&again["evaluation"]["candidate"]), missed);
    // The people's form names the items it missed.
    deck.sparkctl(&["eval", &bad.url, "--set", "facts"])
        .succeeds()
        .says("missed facts#")
        .says("20/25 right (80.0%)");
    // The good one against itself passes the gate.
    deck.sparkctl(&[
        "eval",
        &fine.url,
        "--set",
        "arithmetic",
        "--against",
        &fine.url,
        "--gate",
        ">= production - 3",
    ])
    .succeeds()
    .says("eval_accuracy >= production - 3: pass");
}

#[test]
fn a_malformed_evaluation_item_is_refused_with_its_file_item_and_key() {
    let deck = Deck::new("eval-bad");
    let sim = Sim::start(&[]);
    sim.wait_ready(Duration::from_secs(10));
    let evals = deck.dir.join("recipes/evals");
    std::fs::create_dir_all(&evals).unwrap();
    let refused = |set: &str| {
        std::fs::write(evals.join("mine.yaml"), set).unwrap();
        deck.sparkctl(&["eval", &sim.url, "--set", "mine"])
            .exits(2)
            .stderr()
    };
    let err = refused("name: mine\nitems:\n  - prompt: What is 2 and 3?\n    check: {number: 5}\n  - prompt: Name a colour.\n    check: {colour: blue}\n");
    assert!(
        err.contains("mine.yaml:6:") && err.contains("items[1].check") && err.contains("colour"),
        "{err}"
    );
    // What serde cannot see is named the same way: the item, its key, its line.
    let err = refused("name: mine\nmax_tokens: 16\nitems:\n  - prompt: What is 2 and 3?\n    check: {number: 5}\n  - prompt: Set a timer.\n    check: {tool_call: {name: set_timer, arguments: {minutes: 1}}}\n");
    assert!(
        err.contains("mine.yaml:7:5:")
            && err.contains("items[1].check: the item expects a call of `set_timer`"),
        "{err}"
    );
    // A recipe that asks for it: `recipes validate` names the set's file and item; a set
    // that does not exist, and a gate with no set to judge, are named at the recipe's key.
    let port = free_port();
    deck.recipe(
        "cand",
        &format!("engine: sim\nserver:\n  port: {port}\nbench:\n  eval: [mine]\n  gates:\n    eval_accuracy: \">= production - 3\"\n"),
    );
    let err = deck.sparkctl(&["recipes", "validate"]).exits(2).stderr();
    assert!(err.contains("mine.yaml:7:5:"), "{err}");
    deck.recipe(
        "cand",
        &format!("engine: sim\nserver:\n  port: {port}\nbench:\n  eval: [arithmetic, nosuch]\n"),
    );
    let err = deck.sparkctl(&["recipes", "validate"]).exits(2).stderr();
    assert!(
        err.contains("cand.yaml:6:") && err.contains("bench.eval[1]: no evaluation set `nosuch`"),
        "{err}"
    );
    deck.recipe(
        "cand",
        &format!("engine: sim\nserver:\n  port: {port}\nbench:\n  gates:\n    eval_accuracy: \">= 80%\"\n    ttft_p50_ms: \">= production - 3\"\n"),
    );
    let err = deck.sparkctl(&["recipes", "validate"]).exits(2).stderr();
    assert!(
        err.contains("bench.gates.eval_accuracy: eval_accuracy judges the evaluation sets")
            && err.contains("bench.gates.ttft_p50_ms: `>= production - 3`: only eval_accuracy"),
        "{err}"
    );
}

/// The CPU llama-server and SmolLM2-135M-Instruct that `.ci/test` caches.
pub(crate) fn llama_server_and_smollm() -> (PathBuf, PathBuf) {
    let (server, _) = support::llama_server_and_model();
    let model = std::env::var_os("SPARKCTL_TEST_SMOLLM")
        .map(PathBuf::from)
        .expect("SPARKCTL_TEST_SMOLLM is not set: run the suite with `bash .ci/test`, which downloads SmolLM2-135M-Instruct");
    assert!(model.is_file(), "{} does not exist", model.display());
    (server, model)
}

/// A recipe serving SmolLM2 on the CPU llama-server with `args` beside the usual ones;
/// with `gate`, the evaluation gate against production.
fn smollm_recipe(deck: &Deck, name: &str, (server, model): (&Path, &Path), args: &str, gate: bool) {
    let gate = if gate {
        "  eval: [facts]\n  gates:\n    eval_accuracy: \">= production - 3\"\n"
    } else {
        ""
    };
    deck.recipe(
        name,
        &format!(
            "engine: llama-server\nruntime: process\nbinary: {}\nmodel:\n  path: {}\n  served_name: smollm\nserver:\n  port: {}\n  args: [--jinja, -t, \"1\", -c, \"2048\", -np, \"1\"{args}]\n  memory_gb: 1\nhealth:\n  timeout: 2m\nbench:\n  suite: tiny\n{gate}",
            server.display(),
            model.display(),
            free_port()
        ),
    );
}

#[test]
fn the_sets_on_a_real_model_and_a_broken_serving_of_it_that_the_gate_rejects() {
    let (server, model) = llama_server_and_smollm();
    let deck = Deck::new("eval-real");
    std::fs::create_dir_all(deck.dir.join("recipes/suites")).unwrap();
    std::fs::write(deck.dir.join("recipes/suites/tiny.yaml"), TINY_SUITE).unwrap();
    let bin = (server.as_path(), model.as_path());
    // Production first, without the gate: a gate against production needs one.
    smollm_recipe(&deck, "good", bin, "", false);
    // The same model served with its rope frequencies scaled by a quarter: it still
    // answers every request fluently, and gets facts wrong.
    smollm_recipe(&deck, "broken", bin, ", --rope-freq-scale, \"0.25\"", true);
    deck.sparkctl(&["up", "good", "--yes"]).succeeds();

    // Every set on the real model: the figures docs/GUIDE.md gives.
    let v = deck
        .sparkctl(&[
            "--json",
            "eval",
            "good",
            "--set",
            "arithmetic",
            "--set",
            "json-shape",
            "--set",
            "tool-calls",
            "--set",
            "instructions",
            "--set",
            "facts",
        ])
        .succeeds()
        .json();
    let e = &v["evaluation"]["candidate"];
    println!(
        "SmolLM2-135M-Instruct Q4_1, CPU llama-server (-t 1): {}/{} right ({:.1}%) in {:.1} s, {:.0} items per minute",
        e["right"],
        e["total"],
        e["accuracy_pct"].as_f64().unwrap(),
        e["seconds"].as_f64().unwrap(),
        e["items_per_minute"].as_f64().unwrap()
    );
    for s in e["sets"].as_array().unwrap() {
        println!(
            "  {:<13} {:>2}/{:<2} ({:5.1}%) {:4.0} items per minute",
            s["set"].as_str().unwrap(),
            s["right"],
            s["items"],
            s["accuracy_pct"].as_f64().unwrap(),
            s["items_per_minute"].as_f64().unwrap()
        );
    }
    let facts = &e["sets"].as_array().unwrap()[4];
    assert_eq!(facts["set"], "facts");
    // A trained model gets facts right (a random one would not), and none is unanswered.
    assert!(facts["right"].as_u64().unwrap() >= 10, "{facts}");
    assert!(e["sets"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["failed"] == 0));

    // `up broken`: production (good) is asked the facts, then the broken serving; the
    // paired gate rejects it, and good keeps serving.
    let err = deck.sparkctl(&["up", "broken", "--yes"]).exits(1).stderr();
    assert!(
        err.contains("broken did not pass: eval_accuracy >= production - 3")
            && err.contains("item(s) production got right: facts#"),
        "{err}"
    );
    let run = &deck.sparkctl(&["--json", "history"]).succeeds().json()[0];
    let g = &run["gates"][0];
    println!(
        "broken serving (--rope-freq-scale 0.25) against the good one: {}",
        g["detail"]
    );
    assert_eq!(
        (g["gate"].as_str(), g["outcome"].as_str()),
        (Some("eval_accuracy"), Some("fail")),
        "{g}"
    );
    assert!(
        run["eval"]["lost"].as_array().unwrap().len() >= 5,
        "{}",
        run["eval"]
    );
    let bench: Value =
        serde_json::from_slice(&std::fs::read(run["bench"].as_str().unwrap()).unwrap()).unwrap();
    assert!(bench["eval"]["candidate"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .all(|i| i["failed"].is_null() && !i["answer"].as_str().unwrap().is_empty()));
    assert_eq!(deck.status_of("good").unwrap()["role"], "production");
}

/// A suite of one short question: `up`'s benchmark, kept small beside the evaluation.
const TINY_SUITE: &str = "name: tiny\nwarmup: 1\nruns: 5\ncases:\n  - name: factual\n    turns: [\"What is the capital of Japan?\"]\n    expect: Tokyo\n    max_tokens: 8\n";

/// A sim recipe (a host process) on its own port, with `args` after the quick timings.
fn sim_recipe(deck: &Deck, name: &str, args: &str, bench: &str) {
    deck.recipe(
        name,
        &format!(
            "engine: sim\nruntime: process\nserver:\n  port: {}\n  args: [--ttft, 2ms, --token-rate, \"2000\"{args}]\n  memory_gb: 1\nbench:\n  suite: tiny\n{bench}",
            free_port()
        ),
    );
}

#[test]
fn up_rejects_a_candidate_the_evaluation_gate_fails_and_its_report_shows_each_item() {
    let deck = Deck::new("eval-up");
    std::fs::create_dir_all(deck.dir.join("recipes/suites")).unwrap();
    std::fs::write(deck.dir.join("recipes/suites/tiny.yaml"), TINY_SUITE).unwrap();
    let gate = "  eval: [arithmetic, facts]\n  gates:\n    eval_accuracy: \">= production - 3\"\n";
    sim_recipe(&deck, "prod", "", "");
    sim_recipe(&deck, "worse", ", --eval-wrong, 20%", gate);
    sim_recipe(&deck, "same", "", gate);
    deck.sparkctl(&["up", "prod", "--yes"])
        .promoted("prod", deck.door_port);

    // Production (no sets of its own) is asked the candidate's sets before it starts; the
    // candidate misses a fifth of them: 10 of 50, each named.
    let ran = deck
        .sparkctl(&["up", "worse", "--yes"])
        .exits(1)
        .warns("asking production prod the evaluation sets first (50 items)");
    let err = ran.stderr();
    assert!(
        err.contains("worse did not pass: eval_accuracy >= production - 3 (measured -20.0)")
            && err.contains("it got wrong 10 item(s) production got right: "),
        "{err}"
    );
    let history = deck.sparkctl(&["--json", "history"]).succeeds().json();
    let run = &history[0];
    assert_eq!(
        (run["recipe"].as_str(), run["outcome"].as_str()),
        (Some("worse"), Some("rejected"))
    );
    let lost: Vec<&str> = run["eval"]["lost"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    assert_eq!(lost.len(), 10);
    assert!(lost.iter().all(|k| err.contains(k)), "{err}");
    let items = run["eval"]["items"].as_array().unwrap();
    assert_eq!(items.len(), 50);
    assert!(items.iter().all(|i| i["production"] == true));
    assert_eq!(items.iter().filter(|i| i["candidate"] == false).count(), 10);
    let gate = &run["gates"][0];
    assert_eq!(
        (gate["gate"].as_str(), gate["outcome"].as_str()),
        (Some("eval_accuracy"), Some("fail"))
    );
    assert_eq!(
        deck.status_of("prod").unwrap()["role"],
        "production",
        "production keeps serving"
    );

    // The report shows item by item what each got right, in a real browser.
    let report = PathBuf::from(run["report"].as_str().unwrap());
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(
        html.contains("<h2>Evaluation: worse</h2>"),
        "no evaluation section"
    );
    assert_eq!(html.matches("<tr data-key=").count(), 50);
    let dom = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--dump-dom",
        ])
        .arg(format!("file://{}", report.display()))
        .output()
        .expect("chromium runs (Debian package `chromium`)");
    let dom = String::from_utf8_lossy(&dom.stdout);
    for k in &lost {
        let row = dom
            .split(&format!("<tr data-key=\"{k}\">"))
            .nth(1)
            .and_then(|r| r.split("</tr>").next())
            .unwrap_or_else(|| panic!("no row for {k} in the rendered page"));
        assert!(
            row.contains("data-right=\"0\"") && row.contains("data-right=\"1\""),
            "{k}: {row}"
        );
    }

    // A candidate that answers as production does passes the gate and is promoted; its
    // record pairs every item.
    deck.sparkctl(&["up", "same", "--yes"])
        .promoted("same", deck.door_port);
    let run = &deck.sparkctl(&["--json", "history"]).succeeds().json()[0];
    assert_eq!(run["gates"][0]["outcome"], "pass");
    assert!(run["eval"]["lost"].is_null(), "{}", run["eval"]);
}
