//! Evaluation sets (`sparkctl eval`, `bench.eval`, the `eval_accuracy` gate): the built-in
//! sets against the simulated engine, which knows their answers (all right, or a scripted
//! share wrong, always the same items); a malformed set refused with its file, item and key;
//! and the sets on a real trained model, SmolLM2-135M-Instruct served by the CPU
//! llama-server: its score per set, items per minute, and a broken serving of the same model
//! (a rope override: it still talks) that the paired gate rejects against the good one.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{free_port, http_status, Deck, Sim};

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
    let missed: Vec<&str> = c["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["right"] == false)
        .map(|i| i["key"].as_str().unwrap())
        .collect();
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
    let again: Vec<&str> = again["evaluation"]["candidate"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["right"] == false)
        .map(|i| i["key"].as_str().unwrap())
        .collect();
    assert_eq!(again, missed);
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
    std::fs::write(
        evals.join("mine.yaml"),
        "name: mine\nitems:\n  - prompt: What is 2 and 3?\n    check: {number: 5}\n  - prompt: Name a colour.\n    check: {colour: blue}\n",
    )
    .unwrap();
    let err = deck
        .sparkctl(&["eval", &sim.url, "--set", "mine"])
        .exits(2)
        .stderr();
    assert!(
        err.contains("mine.yaml:6:") && err.contains("items[1].check") && err.contains("colour"),
        "{err}"
    );
    // What serde cannot see is named the same way: the item, its key, its line.
    std::fs::write(
        evals.join("mine.yaml"),
        "name: mine\nmax_tokens: 16\nitems:\n  - prompt: What is 2 and 3?\n    check: {number: 5}\n  - prompt: Set a timer.\n    check: {tool_call: {name: set_timer, arguments: {minutes: 1}}}\n",
    )
    .unwrap();
    let err = deck
        .sparkctl(&["eval", &sim.url, "--set", "mine"])
        .exits(2)
        .stderr();
    assert!(
        err.contains("mine.yaml:6:")
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
    assert!(err.contains("mine.yaml:6:"), "{err}");
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

/// A llama-server process serving `model` on a free port, killed on drop.
struct Llama {
    child: Child,
    url: String,
}

impl Llama {
    fn start(binary: &Path, model: &Path, extra: &[&str]) -> Llama {
        let port = free_port();
        let child = Command::new(binary)
            .args([
                "-m",
                &model.display().to_string(),
                "-t",
                "1",
                "-np",
                "1",
                "--host",
                "127.0.0.1",
            ])
            .args(["--port", &port.to_string()])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("llama-server starts");
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(120);
        while http_status(&url, "/health") != Some(200) {
            assert!(Instant::now() < deadline, "llama-server on {url} not ready");
            std::thread::sleep(Duration::from_millis(100));
        }
        Llama { child, url }
    }
}

impl Drop for Llama {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The CPU llama-server and SmolLM2-135M-Instruct that `.ci/test` caches.
pub fn llama_server_and_smollm() -> (PathBuf, PathBuf) {
    let (server, _) = support::llama_server_and_model();
    let model = std::env::var_os("SPARKCTL_TEST_SMOLLM")
        .map(PathBuf::from)
        .expect("SPARKCTL_TEST_SMOLLM is not set: run the suite with `bash .ci/test`, which downloads SmolLM2-135M-Instruct");
    assert!(model.is_file(), "{} does not exist", model.display());
    (server, model)
}

#[test]
fn the_sets_on_a_real_model_and_a_broken_serving_of_it_that_the_gate_rejects() {
    let (server, model) = llama_server_and_smollm();
    let deck = Deck::new("eval-real");
    let good = Llama::start(&server, &model, &["--jinja"]);
    // Every set on the real model: the figures docs/GUIDE.md gives.
    let v = deck
        .sparkctl(&["--json", "eval", &good.url])
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

    // The same model served with its rope frequencies scaled by a quarter: it still
    // answers every request fluently, and gets facts wrong.
    let broken = Llama::start(&server, &model, &["--jinja", "--rope-freq-scale", "0.25"]);
    let v = deck
        .sparkctl(&[
            "--json",
            "eval",
            &broken.url,
            "--set",
            "facts",
            "--against",
            &good.url,
            "--gate",
            ">= production - 3",
        ])
        .exits(1)
        .json();
    let p = &v["evaluation"]["paired"];
    println!(
        "broken serving (--rope-freq-scale 0.25) against the good one on facts: {}",
        v["gate"]["detail"]
    );
    assert_eq!(v["gate"]["outcome"], "fail", "{}", v["gate"]);
    assert!(p["lost"].as_array().unwrap().len() >= 5, "{p}");
    assert!(v["evaluation"]["candidate"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .all(|i| i["failed"].is_null() && !i["answer"].as_str().unwrap().is_empty()));
}
