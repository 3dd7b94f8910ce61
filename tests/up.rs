//! `up`, `rollback`, `history` end to end: a process-runtime production stand-in on the
//! production port, candidates in FROM-scratch containers on the real engine, the real
//! benchmark and gates. Every scenario ends by asking the production port what serves.

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::{free_port, http_status, sim_image, text, Deck, Ran};

/// A deck with a quick suite, a production stand-in `prod` (process, on its own port behind
/// the front door) and candidates.
struct Flow {
    deck: Deck,
}

const SUITE: &str = "name: tiny\nwarmup: 1\nruns: 5\ncases:\n  - name: factual\n    turns: [\"What is the capital of Japan?\"]\n    expect: Tokyo\n    max_tokens: 16\n  - name: chat\n    turns: [\"Hi\", \"What is the capital of Japan?\"]\n    max_tokens: 16\n";

impl Flow {
    fn new(tag: &str) -> Flow {
        let deck = Deck::new(tag);
        std::fs::create_dir_all(deck.dir.join("recipes/suites")).unwrap();
        std::fs::write(deck.dir.join("recipes/suites/tiny.yaml"), SUITE).unwrap();
        let prod_port = free_port();
        deck.recipe(
            "prod",
            &format!(
                "engine: sim\nruntime: process\nserver:\n  port: {prod_port}\n  args: [--load-time, 200ms, --ttft, 30ms, --token-rate, \"200\", --tokens, \"8\"]\n  memory_gb: 7\nbench:\n  suite: tiny\n  gates:\n    thinking_leak: \"== 0%\"\n"
            ),
        );
        Flow { deck }
    }

    /// A container candidate with these sim args and gates.
    fn candidate(&self, name: &str, args: &str, gates: &str) {
        self.candidate_with(name, "", args, gates);
    }

    /// The same, with more recipe text (a model, patches) after the image.
    fn candidate_with(&self, name: &str, extra: &str, args: &str, gates: &str) {
        self.deck.recipe(
            name,
            &format!(
                "engine: sim\nruntime: docker\nimage: {}\n{extra}server:\n  port: {}\n  args: [{args}]\n  memory_gb: 12\nhealth:\n  timeout: 20s\nbench:\n  suite: tiny\n  gates:\n{gates}",
                sim_image(),
                free_port()
            ),
        );
        self.deck.ok(&["images", "pin", name]);
    }

    fn run(&self, args: &[&str]) -> std::process::Output {
        self.deck.cmd(args).output().unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        self.deck.sparkctl(args).succeeds().stdout()
    }

    /// Which recipe serves on the production port, asked of the port itself and of status.
    fn serving(&self) -> Option<String> {
        assert_eq!(
            http_status(&self.deck.door_url(), "/health"),
            Some(200),
            "the production port answers"
        );
        let out = self.run(&["--json", "status"]);
        let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
        rows.as_array()
            .unwrap()
            .iter()
            .find(|d| d["state"] == "running" && d["role"] == "production")
            .map(|d| d["name"].as_str().unwrap().to_string())
    }

    fn production(&self) -> Value {
        let path = self.deck.dir.join("state/production.json");
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    }
}

const GOOD: &str = "--load-time, 300ms, --ttft, 10ms, --token-rate, \"400\", --tokens, \"8\"";
const GATES: &str = "    thinking_leak: \"== 0%\"\n    no_markdown: \">= 80%\"\n    vs_production_decode: \">= -10%\"\n";

#[test]
fn a_good_candidate_is_promoted_and_rollback_brings_production_back() {
    let f = Flow::new("up-good");
    // Its model dir needs the VL wrap before it serves: `up` patches it first.
    let model = f.deck.dir.join("model");
    std::fs::create_dir_all(&model).unwrap();
    std::fs::write(
        model.join("config.json"),
        "{\"architectures\": [\"Qwen3_5ForCausalLM\"], \"model_type\": \"qwen3_5_text\"}\n",
    )
    .unwrap();
    f.candidate_with(
        "cand",
        &format!(
            "model:\n  path: {}\n  patches:\n    - wrap-vl-config: {{}}\n",
            model.display()
        ),
        GOOD,
        GATES,
    );
    let out = f.ok(&["rollback", "--to", "prod"]);
    assert!(out.contains("rolled back"), "{out}");
    assert_eq!(f.serving().as_deref(), Some("prod"));
    assert_eq!(f.production()["current"]["recipe"], "prod");

    let dry = f.ok(&["up", "cand", "--dry-run"]);
    assert!(dry.contains("nothing was changed"), "{dry}");
    assert_eq!(f.serving().as_deref(), Some("prod"));

    // --no-promote: gates pass, production keeps serving, the candidate stays on its port.
    let out = f.ok(&["up", "cand", "--no-promote"]);
    assert!(out.contains("cand passed its gates; not promoted"), "{out}");
    assert_eq!(f.serving().as_deref(), Some("prod"));
    assert_eq!(f.production()["current"]["recipe"], "prod");
    let out = f.run(&["up", "cand", "--yes"]);
    assert!(
        text(&out.stderr).contains("cand is already running"),
        "{}",
        text(&out.stderr)
    );
    f.ok(&["down", "cand"]);

    let out = f.ok(&["up", "cand", "--yes"]);
    assert!(out.contains("cand promoted"), "{out}");
    assert_eq!(f.serving().as_deref(), Some("cand"));
    let prod = f.production();
    assert_eq!(prod["current"]["recipe"], "cand");
    assert_eq!(prod["previous"][0]["recipe"], "prod");

    let history: Value = serde_json::from_slice(&f.run(&["--json", "history"]).stdout).unwrap();
    let last = &history[0];
    assert_eq!(last["outcome"], "promoted");
    assert!(last["image_digest"]
        .as_str()
        .unwrap()
        .starts_with("sha256:"));
    assert!(last["bench"].as_str().is_some() && last["logs"].as_str().is_some());
    let phases: Vec<&str> = last["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        phases,
        ["plan", "patch", "start", "bench", "judge", "switch"]
    );
    // Production was measured once, by the first run that needed its result.
    // history[1] is the refused attempt (already running): a plan failure is a run too.
    assert_eq!(history[1]["outcome"], "failed");
    let earlier: Vec<&str> = history[2]["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert!(earlier.contains(&"measure-production"), "{earlier:?}");
    assert_eq!(history[2]["outcome"], "passed");
    assert_eq!(history[2]["patched"], serde_json::json!(["config.json"]));
    assert!(history[2]["patch_diff"]
        .as_str()
        .unwrap()
        .contains("+  \"model_type\": \"qwen3_5\""));
    assert!(last["model_fingerprint"]
        .as_str()
        .unwrap()
        .starts_with("sha256:"));
    // The fingerprint recorded is the model as it ran: after the patch, as the server's.
    let cand = f.deck.status_of("cand").expect("cand in status");
    assert_eq!(last["model_fingerprint"], cand["model_fingerprint"]);
    // The run that patched planned on the model before its patch, and records the one after.
    assert_ne!(
        history[2]["model_fingerprint"], history[2]["plan"]["model_fingerprint"],
        "the plan saw the model before its patch"
    );
    assert_eq!(history[2]["model_fingerprint"], cand["model_fingerprint"]);
    let bench: Value =
        serde_json::from_slice(&std::fs::read(last["bench"].as_str().unwrap()).unwrap()).unwrap();
    assert_eq!(
        bench["target"]["model_fingerprint"],
        cand["model_fingerprint"]
    );
    assert!(
        f.production()["previous"][0]["bench"].as_str().is_some(),
        "production was measured"
    );
    let shown = f.ok(&["history", "show", last["run_id"].as_str().unwrap()]);
    assert!(shown.contains("\"outcome\": \"promoted\""), "{shown}");

    let out = f.ok(&["rollback"]);
    assert!(out.contains("rolled back"), "{out}");
    assert_eq!(f.serving().as_deref(), Some("prod"));
}

#[test]
fn a_leaking_or_slower_candidate_is_not_promoted_and_production_keeps_serving() {
    let f = Flow::new("up-reject");
    f.ok(&["rollback", "--to", "prod"]);

    f.candidate("leaky", "--load-time, 300ms, --ttft, 10ms, --token-rate, \"400\", --reasoning-tokens, \"4\", --reasoning-as, leak", GATES);
    f.deck
        .sparkctl(&["up", "leaky", "--yes"])
        .exits(1)
        .warns("leaky did not pass: thinking_leak == 0% (measured 100.0)")
        .warns("serving on port");
    assert_eq!(f.serving().as_deref(), Some("prod"));
    assert_eq!(f.production()["current"]["recipe"], "prod");

    // Half production's decode speed: the relative gate stops it.
    f.candidate(
        "slow",
        "--load-time, 300ms, --ttft, 10ms, --token-rate, \"100\", --tokens, \"8\"",
        GATES,
    );
    f.deck
        .sparkctl(&["up", "slow", "--yes"])
        .exits(1)
        .warns("vs_production_decode >= -10%");
    assert_eq!(f.serving().as_deref(), Some("prod"));
    let history: Value = serde_json::from_slice(&f.run(&["--json", "history"]).stdout).unwrap();
    assert_eq!(history[0]["outcome"], "rejected");
    assert_eq!(history[0]["recipe"], "slow");
}

#[test]
fn a_crashing_candidate_that_needed_production_s_memory_is_rolled_back() {
    let f = Flow::new("up-crash");
    f.ok(&["rollback", "--to", "prod"]);
    f.candidate("crashy", "--load-time, 1s, --load-fault, crash", GATES);
    // 7 GB production + 12 GB candidate do not fit in 15: production must stop first.
    let in_15_gb = |args: &[&str]| {
        Ran::of(
            f.deck
                .cmd(args)
                .env("SPARKCTL_MEMORY_GB", "15")
                .env("SPARKCTL_MEMORY_RESERVE_GB", "0"),
        )
    };
    in_15_gb(&["up", "crashy", "--yes"])
        .exits(1)
        .warns("stopping prod to make room")
        .warns("exited with code 1")
        .warns("prod serves production again");
    assert_eq!(f.serving().as_deref(), Some("prod"));
    // Without --yes (and no terminal) production is never stopped.
    in_15_gb(&["up", "crashy"]).warns("confirm, or pass --yes");
    assert_eq!(f.serving().as_deref(), Some("prod"));
}

#[test]
fn one_writer_at_a_time_and_ctrl_c_leaves_production_serving() {
    let f = Flow::new("up-lock");
    f.ok(&["rollback", "--to", "prod"]);
    f.candidate("slowload", "--load-time, 5s", GATES);
    let first = f
        .deck
        .cmd(&["up", "slowload", "--yes"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Once the candidate is loading (its container exists)...
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status: Value = serde_json::from_slice(&f.run(&["--json", "status"]).stdout).unwrap();
        let loading = status
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["name"] == "slowload" && d["state"] == "running");
        if loading {
            break;
        }
        assert!(Instant::now() < deadline, "the candidate never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    // While it waits for the candidate, a second `up` is told who holds the lock.
    let out = f.run(&["up", "slowload", "--yes"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("another sparkctl is changing state"), "{err}");
    assert!(
        err.contains(&format!(
            "pid {} running `sparkctl up slowload`",
            first.id()
        )),
        "{err}"
    );
    unsafe {
        libc::kill(first.id() as i32, libc::SIGINT);
    }
    let out = first.wait_with_output().unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("interrupted"), "{err}");
    assert_eq!(f.serving().as_deref(), Some("prod"));
    assert_eq!(f.production()["current"]["recipe"], "prod");
    let status: Value = serde_json::from_slice(&f.run(&["--json", "status"]).stdout).unwrap();
    let cand = status
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "slowload")
        .unwrap();
    assert_eq!(cand["state"], "exited", "the candidate was stopped");
    // The lock is free again.
    f.ok(&["rollback", "--to", "prod"]);
}
