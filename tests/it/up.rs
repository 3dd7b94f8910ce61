//! `up`, `rollback`, `history` end to end: a process-runtime production stand-in on the
//! production port, candidates in FROM-scratch containers on the real engine, the real
//! benchmark and gates. Every scenario ends by asking the production port what serves.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{free_port, http_status, sim_image, Deck, Ran, Running};

/// A deck with a quick suite and a production stand-in `prod` (process, on its own port
/// behind the front door) serving production, where candidates are brought up.
struct Flow {
    deck: Deck,
}

const SUITE: &str = r#"name: tiny
warmup: 1
runs: 5
cases:
  - name: factual
    turns: ["What is the capital of Japan?"]
    expect: Tokyo
    max_tokens: 16
  - name: chat
    turns: ["Hi", "What is the capital of Japan?"]
    max_tokens: 16
"#;

/// A candidate's sim args: as good as production, and faster.
const GOOD: &str = r#"--load-time, 300ms, --ttft, 10ms, --token-rate, "400", --tokens, "8""#;

impl Flow {
    /// The deck, with `prod` put in production as a user does (`rollback --to prod`).
    fn new(tag: &str) -> Flow {
        let deck = Deck::new(tag);
        std::fs::create_dir_all(deck.dir.join("recipes/suites")).unwrap();
        std::fs::write(deck.dir.join("recipes/suites/tiny.yaml"), SUITE).unwrap();
        deck.recipe(
            "prod",
            &format!(
                r#"engine: sim
runtime: process
server:
  port: {}
  args: [--load-time, 200ms, --ttft, 30ms, --token-rate, "200", --tokens, "8"]
  memory_gb: 7
bench:
  suite: tiny
  gates:
    thinking_leak: "== 0%"
"#,
                free_port()
            ),
        );
        let f = Flow { deck };
        f.deck
            .sparkctl(&["rollback", "--to", "prod"])
            .succeeds()
            .says("rolled back");
        assert_eq!(f.serving().as_deref(), Some("prod"));
        assert_eq!(f.production()["current"]["recipe"], "prod");
        f
    }

    /// A container candidate with these sim args, gated on no leaked thinking, plain text
    /// and decode no slower than production's.
    fn candidate(&self, name: &str, args: &str) {
        self.candidate_with(name, "", args);
    }

    /// The same, with more recipe text (a model, patches) after the image.
    fn candidate_with(&self, name: &str, extra: &str, args: &str) {
        self.deck.recipe(
            name,
            &format!(
                r#"engine: sim
runtime: docker
image: {image}
{extra}server:
  port: {port}
  args: [{args}]
  memory_gb: 12
health:
  timeout: 20s
bench:
  suite: tiny
  gates:
    thinking_leak: "== 0%"
    no_markdown: ">= 80%"
    vs_production_decode: ">= -10%"
"#,
                image = sim_image(),
                port = free_port()
            ),
        );
        self.deck.sparkctl(&["images", "pin", name]).succeeds();
    }

    /// A candidate whose model dir needs the VL wrap before it serves (`up` patches it).
    fn patched_candidate(&self, name: &str) {
        let model = self.deck.dir.join("model");
        std::fs::create_dir_all(&model).unwrap();
        std::fs::write(
            model.join("config.json"),
            concat!(
                r#"{"architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text"}"#,
                "\n"
            ),
        )
        .unwrap();
        let extra = format!(
            r#"model:
  path: {}
  patches:
    - wrap-vl-config: {{}}
"#,
            model.display()
        );
        self.candidate_with(name, &extra, GOOD);
    }

    /// `sparkctl ARGS` on a host of 15 GB: room for the 12 GB candidate or the 7 GB
    /// production, not both.
    fn in_15_gb(&self, args: &[&str]) -> Ran {
        Ran::of(
            self.deck
                .cmd(args)
                .env("SPARKCTL_MEMORY_GB", "15")
                .env("SPARKCTL_MEMORY_RESERVE_GB", "0"),
        )
    }

    /// Which recipe serves on the production port, asked of the port itself and of status.
    fn serving(&self) -> Option<String> {
        assert_eq!(
            http_status(&self.deck.door_url(), "/v1/models"),
            Some(200),
            "the production port answers"
        );
        self.deck
            .status()
            .iter()
            .find(|d| d["state"] == "running" && d["role"] == "production")
            .map(|d| d["name"].as_str().unwrap().to_string())
    }

    fn production(&self) -> Value {
        let path = self.deck.dir.join("state/production.json");
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    }

    /// `history --json`: the runs, newest first.
    fn history(&self) -> Value {
        self.deck.sparkctl(&["--json", "history"]).succeeds().json()
    }

    /// `up NAME --yes` started in the background, returned once its candidate is loading.
    fn up_under_way(&self, name: &str) -> Running {
        let first = Ran::spawn(&mut self.deck.cmd(&["up", name, "--yes"]));
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self
            .deck
            .status()
            .iter()
            .any(|d| d["name"] == name && d["state"] == "running")
        {
            assert!(Instant::now() < deadline, "the candidate never started");
            std::thread::sleep(Duration::from_millis(50));
        }
        first
    }
}

/// The names of a run record's phases, in order.
fn phases(run: &Value) -> Vec<&str> {
    run["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect()
}

#[test]
fn a_dry_run_of_up_changes_nothing() {
    let f = Flow::new("up-dry");
    f.candidate("cand", GOOD);
    f.deck
        .sparkctl(&["up", "cand", "--dry-run"])
        .succeeds()
        .says("nothing was changed");
    assert_eq!(f.serving().as_deref(), Some("prod"));
    assert_eq!(f.production()["current"]["recipe"], "prod");
    assert!(f.deck.status_of("cand").is_none(), "cand was not started");
}

#[test]
fn with_no_promote_a_passing_candidate_stays_on_its_port_beside_production() {
    let f = Flow::new("up-nopromote");
    f.candidate("cand", GOOD);
    f.deck
        .sparkctl(&["up", "cand", "--no-promote"])
        .succeeds()
        .says("cand passed its gates; not promoted");
    assert_eq!(f.serving().as_deref(), Some("prod"));
    assert_eq!(f.production()["current"]["recipe"], "prod");
    let cand = f.deck.status_of("cand").expect("cand in status");
    assert_eq!(cand["state"], "running", "{cand}");
    // The instance that passed is not benchmarked again under the same name.
    f.deck
        .sparkctl(&["up", "cand", "--yes"])
        .exits(1)
        .warns("cand is already running");
    assert_eq!(f.serving().as_deref(), Some("prod"));
    let history = f.history();
    // The refused attempt is a run too: a plan failure is recorded.
    assert_eq!(history[0]["outcome"], "failed");
    assert_eq!(history[1]["outcome"], "passed");
}

#[test]
fn up_patches_the_model_first_and_records_the_model_as_it_ran() {
    let f = Flow::new("up-patch");
    f.patched_candidate("cand");
    f.deck
        .sparkctl(&["up", "cand", "--yes"])
        .promoted("cand", f.deck.door_port);
    let run = &f.history()[0];
    assert_eq!(
        phases(run),
        [
            "plan",
            "patch",
            "start",
            "measure-production",
            "bench",
            "judge",
            "switch"
        ]
    );
    assert_eq!(run["patched"], serde_json::json!(["config.json"]));
    assert!(
        run["patch_diff"]
            .as_str()
            .unwrap()
            .contains(r#"+  "model_type": "qwen3_5""#),
        "{run}"
    );
    assert!(run["model_fingerprint"]
        .as_str()
        .unwrap()
        .starts_with("sha256:"));
    // The fingerprint recorded is the model as it ran: after the patch, as the server's.
    let cand = f.deck.status_of("cand").expect("cand in status");
    assert_eq!(run["model_fingerprint"], cand["model_fingerprint"]);
    // It planned on the model before its patch, and records the one after.
    assert_ne!(
        run["model_fingerprint"], run["plan"]["model_fingerprint"],
        "the plan saw the model before its patch"
    );
    let bench: Value =
        serde_json::from_slice(&std::fs::read(run["bench"].as_str().unwrap()).unwrap()).unwrap();
    assert_eq!(
        bench["target"]["model_fingerprint"],
        cand["model_fingerprint"]
    );
}

#[test]
fn a_good_candidate_is_promoted_and_rollback_brings_production_back() {
    let f = Flow::new("up-good");
    f.candidate("cand", GOOD);
    f.deck
        .sparkctl(&["up", "cand", "--yes"])
        .promoted("cand", f.deck.door_port);
    assert_eq!(f.serving().as_deref(), Some("cand"));
    let prod = f.production();
    assert_eq!(prod["current"]["recipe"], "cand");
    assert_eq!(prod["previous"][0]["recipe"], "prod");

    let last = &f.history()[0];
    assert_eq!(last["outcome"], "promoted");
    assert!(last["image_digest"]
        .as_str()
        .unwrap()
        .starts_with("sha256:"));
    assert!(last["bench"].as_str().is_some() && last["logs"].as_str().is_some());
    assert_eq!(
        phases(last),
        [
            "plan",
            "start",
            "measure-production",
            "bench",
            "judge",
            "switch"
        ]
    );
    let shown = f
        .deck
        .sparkctl(&["history", "show", last["run_id"].as_str().unwrap()])
        .succeeds()
        .stdout();
    assert!(shown.contains(r#""outcome": "promoted""#), "{shown}");

    f.deck
        .sparkctl(&["rollback"])
        .succeeds()
        .says("rolled back");
    assert_eq!(f.serving().as_deref(), Some("prod"));
}

#[test]
fn production_is_measured_once_by_the_first_run_that_needs_it() {
    let f = Flow::new("up-measure");
    f.candidate("cand", GOOD);
    f.deck.sparkctl(&["up", "cand", "--no-promote"]).succeeds();
    f.deck.sparkctl(&["down", "cand"]).succeeds();
    f.deck
        .sparkctl(&["up", "cand", "--yes"])
        .promoted("cand", f.deck.door_port);
    let history = f.history();
    assert_eq!(
        phases(&history[0]),
        ["plan", "start", "bench", "judge", "switch"]
    );
    assert_eq!(history[1]["outcome"], "passed");
    assert!(
        phases(&history[1]).contains(&"measure-production"),
        "{}",
        history[1]
    );
    assert!(
        f.production()["previous"][0]["bench"].as_str().is_some(),
        "production was measured"
    );
}

#[test]
fn a_candidate_leaking_its_thinking_is_rejected_and_production_keeps_serving() {
    let f = Flow::new("up-leak");
    f.candidate(
        "leaky",
        r#"--load-time, 300ms, --ttft, 10ms, --token-rate, "400", --reasoning-tokens, "4", --reasoning-as, leak"#,
    );
    f.deck
        .sparkctl(&["up", "leaky", "--yes"])
        .exits(1)
        .warns("leaky did not pass: thinking_leak == 0% (measured 100.0)")
        .warns(&format!("serving on port {}: prod (", f.deck.door_port));
    assert_eq!(f.serving().as_deref(), Some("prod"));
    assert_eq!(f.production()["current"]["recipe"], "prod");
    let history = f.history();
    assert_eq!(history[0]["outcome"], "rejected");
    assert_eq!(history[0]["recipe"], "leaky");
}

#[test]
fn a_candidate_slower_than_production_is_rejected_by_the_relative_gate() {
    let f = Flow::new("up-slow");
    // Half production's decode speed.
    f.candidate(
        "slow",
        r#"--load-time, 300ms, --ttft, 10ms, --token-rate, "100", --tokens, "8""#,
    );
    f.deck
        .sparkctl(&["up", "slow", "--yes"])
        .exits(1)
        .warns("vs_production_decode >= -10%");
    assert_eq!(f.serving().as_deref(), Some("prod"));
    let history = f.history();
    assert_eq!(history[0]["outcome"], "rejected");
    assert_eq!(history[0]["recipe"], "slow");
}

#[test]
fn a_crashing_candidate_that_needed_production_s_memory_is_rolled_back() {
    let f = Flow::new("up-crash");
    f.candidate("crashy", "--load-time, 1s, --load-fault, crash");
    // 7 GB production + 12 GB candidate do not fit in 15: production must stop first.
    f.in_15_gb(&["up", "crashy", "--yes"])
        .exits(1)
        .warns("stopping prod to make room")
        .warns("exited with code 1")
        .warns("prod serves production again");
    assert_eq!(f.serving().as_deref(), Some("prod"));
}

#[test]
fn without_yes_up_never_stops_production_to_make_room() {
    let f = Flow::new("up-confirm");
    f.candidate("cand", GOOD);
    // No --yes, and no terminal to ask on.
    f.in_15_gb(&["up", "cand"])
        .exits(1)
        .warns("cand needs production prod stopped first; confirm, or pass --yes");
    assert_eq!(f.serving().as_deref(), Some("prod"));
    assert!(f.deck.status_of("cand").is_none(), "cand was not started");
}

#[test]
fn a_second_up_is_told_who_is_changing_state() {
    let f = Flow::new("up-lock");
    f.candidate("slowload", "--load-time, 5s");
    let first = f.up_under_way("slowload");
    f.deck
        .sparkctl(&["up", "slowload", "--yes"])
        .exits(1)
        .warns("another sparkctl is changing state")
        .warns(&format!(
            "pid {} running `sparkctl up slowload`",
            first.pid()
        ));
    first.interrupt();
    first.wait().exits(130);
}

#[test]
fn ctrl_c_during_up_stops_the_candidate_and_leaves_production_serving() {
    let f = Flow::new("up-ctrl-c");
    f.candidate("slowload", "--load-time, 5s");
    let first = f.up_under_way("slowload");
    first.interrupt();
    first.wait().exits(130).warns("interrupted");
    assert_eq!(f.serving().as_deref(), Some("prod"));
    assert_eq!(f.production()["current"]["recipe"], "prod");
    let cand = f.deck.status_of("slowload").unwrap();
    assert_eq!(cand["state"], "exited", "the candidate was stopped");
    // The lock is free again.
    f.deck.sparkctl(&["rollback", "--to", "prod"]).succeeds();
}

#[test]
fn a_rollback_that_needs_production_s_memory_swaps_back() {
    let f = Flow::new("up-swap-back");
    f.candidate("cand", GOOD);
    // Production's baseline first, measured while both fit.
    f.deck.sparkctl(&["up", "cand", "--no-promote"]).succeeds();
    f.deck.sparkctl(&["down", "cand"]).succeeds();
    // 7 GB production + 12 GB candidate do not fit in 15: `up` swaps.
    f.in_15_gb(&["up", "cand", "--yes"])
        .succeeds()
        .warns("must stop first (swap");
    assert_eq!(f.serving().as_deref(), Some("cand"));
    // Back the same way: the candidate stops (held), prod starts and serves.
    f.in_15_gb(&["rollback"])
        .succeeds()
        .warns("stopping cand to make room")
        .says("rolled back")
        .never_says("does not fit");
    assert_eq!(f.serving().as_deref(), Some("prod"));
    let history = f.history();
    assert_eq!(history[0]["command"], "rollback");
    assert_eq!(history[0]["outcome"], "rolled-back");
    let cand = f.deck.status_of("cand").expect("cand in status");
    assert_eq!(cand["state"], "exited", "{cand}");
    assert_eq!(f.production()["current"]["recipe"], "prod");
}

/// The first `up` while nothing serves: a relative gate has no production to compare with,
/// so it does not apply (said, and recorded), and the other gates decide — a pass promotes,
/// a failure rejects; neither ends inconclusive asking for another `up` that cannot help.
#[test]
fn with_no_production_relative_gates_do_not_apply_and_the_others_decide() {
    let deck = Deck::new("up-first");
    std::fs::create_dir_all(deck.dir.join("recipes/suites")).unwrap();
    std::fs::write(deck.dir.join("recipes/suites/tiny.yaml"), SUITE).unwrap();
    let recipe = |args: &str| {
        format!(
            "engine: sim\nruntime: process\nserver:\n  port: {}\n  args: [--load-time, 200ms, --ttft, 10ms, --token-rate, \"400\", --tokens, \"8\"{args}]\n  memory_gb: 7\nbench:\n  suite: tiny\n  gates:\n    thinking_leak: \"== 0%\"\n    vs_production_decode: \">= -10%\"\n",
            free_port()
        )
    };
    deck.recipe(
        "leaky",
        &recipe(", --reasoning-tokens, \"4\", --reasoning-as, leak"),
    );
    deck.recipe("first", &recipe(""));
    let said = "vs_production_decode: not applied, no production to compare with";
    deck.sparkctl(&["up", "leaky", "--yes"])
        .exits(1)
        .warns(said)
        .warns("leaky did not pass: thinking_leak == 0% (measured 100.0)");
    deck.sparkctl(&["up", "first", "--yes"])
        .promoted("first", deck.door_port)
        .warns(said);
    let history = deck.sparkctl(&["--json", "history"]).succeeds().json();
    let gate = |run: &Value, name: &str| {
        run["gates"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["gate"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no gate {name} in {run}"))
    };
    let (first, leaky) = (&history[0], &history[1]);
    assert_eq!(
        (first["outcome"].as_str(), leaky["outcome"].as_str()),
        (Some("promoted"), Some("rejected"))
    );
    for run in [first, leaky] {
        let rel = gate(run, "vs_production_decode");
        assert_eq!(rel["outcome"], "not-applied", "{rel}");
        assert_eq!(rel["detail"], "not applied, no production to compare with");
    }
    assert_eq!(gate(first, "thinking_leak")["outcome"], "pass");
}
