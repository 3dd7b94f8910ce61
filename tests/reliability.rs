//! Issue 17's faults, each against the real binary with real files, processes and the
//! Docker Engine: a broken unrelated file does not block the emergency exit, secrets stay
//! out of every log level, out-of-range and hostile input is refused without a panic,
//! a closed pipe ends a command quietly, damaged state is reported beside the rest, and
//! old containers are pruned but never production's.

mod support;

use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{docker, free_port, http_status, sim_image, text, Deck};

fn process_sim(port: u16) -> String {
    format!(
        "engine: sim\nruntime: process\nserver:\n  port: {port}\n  args: [--load-time, 100ms]\n  memory_gb: 4\nhealth:\n  timeout: 20s\n"
    )
}

/// `qat-v2b.yaml` as the issue found it: broken YAML in a recipe nobody asked for.
const BROKEN: &str = "engine: vllm\nimage: vllm/vllm-openai:cu130-nightly\nserver:\n  port: 8000\n  args: [--a, --b\n";

#[test]
fn a_broken_unrelated_recipe_or_lock_does_not_block_rollback_down_or_status() {
    let deck = Deck::new("rel-broken");
    let prod_port = free_port();
    deck.recipe("demo-production", &process_sim(free_port()));
    deck.recipe("qat-v2b", BROKEN);
    // A damaged lock: the process recipe needs no image, so no pin either.
    std::fs::write(deck.dir.join("images.lock"), "images:\n  qat-v2b: [\n").unwrap();
    let rollback = deck
        .cmd(&["rollback", "--to", "demo-production"])
        .env("SPARKCTL_PRODUCTION_PORT", prod_port.to_string())
        .output()
        .unwrap();
    let stderr = text(&rollback.stderr);
    assert_eq!(rollback.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("warning: ")
            && stderr.contains("qat-v2b.yaml is skipped: ")
            && stderr.contains("qat-v2b.yaml:7:1:"),
        "the broken file is named, with its line: {stderr}"
    );
    // What serves on the production port afterwards: demo-production.
    assert_eq!(
        http_status(&format!("http://127.0.0.1:{prod_port}"), "/health"),
        Some(200)
    );
    let status = deck
        .cmd(&["--json", "status"])
        .env("SPARKCTL_PRODUCTION_PORT", prod_port.to_string())
        .output()
        .unwrap();
    let status: Vec<Value> = serde_json::from_slice(&status.stdout).unwrap();
    assert!(
        status
            .iter()
            .any(|d| d["name"] == "demo-production" && d["production"] == true),
        "{status:?}"
    );
    // A command that needs the broken recipe still fails on it, with exit 2 and its line.
    let out = deck.run(&["recipes", "show", "qat-v2b"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("qat-v2b.yaml:7:1:"),
        "{}",
        text(&out.stderr)
    );
    let out = deck.run(&["recipes", "validate"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "validate still reads every file"
    );
    // `recipes list` shows the rest.
    let list = deck.ok(&["recipes", "list"]);
    assert!(
        list.contains("demo-production") && !list.contains("qat-v2b"),
        "{list}"
    );
    // It serves production behind the front door: stopping it takes --force, and then the
    // production port says so at once (503) instead of holding requests for nothing.
    let down = deck
        .cmd(&["down", "demo-production"])
        .env("SPARKCTL_PRODUCTION_PORT", prod_port.to_string())
        .output()
        .unwrap();
    assert_eq!(down.status.code(), Some(2), "{}", text(&down.stderr));
    let down = deck
        .cmd(&["down", "--force", "demo-production"])
        .env("SPARKCTL_PRODUCTION_PORT", prod_port.to_string())
        .output()
        .unwrap();
    assert_eq!(down.status.code(), Some(0), "{}", text(&down.stderr));
    assert_eq!(
        http_status(&format!("http://127.0.0.1:{prod_port}"), "/health"),
        Some(503)
    );
    // The damaged lock was not rewritten.
    assert_eq!(
        std::fs::read_to_string(deck.dir.join("images.lock")).unwrap(),
        "images:\n  qat-v2b: [\n"
    );
}

#[test]
fn an_out_of_range_duration_in_one_recipe_panics_nothing() {
    let deck = Deck::new("rel-range");
    deck.recipe(
        "huge",
        &process_sim(free_port()).replace("20s", "18446744073709551616s"),
    );
    deck.recipe("fine", &process_sim(free_port()));
    for args in [
        &["recipes", "list"][..],
        &["doctor"],
        &["start", "fine", "--dry-run"],
        &["recipes", "show", "huge"],
    ] {
        let out = deck.run(args);
        let stderr = text(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_ne!(out.status.code(), Some(101), "{args:?}: {stderr}");
        assert!(
            stderr.contains("huge.yaml:9:3: health.timeout: "),
            "{args:?}: {stderr}"
        );
    }
    assert_eq!(
        deck.run(&["recipes", "show", "huge"]).status.code(),
        Some(2)
    );
}

#[test]
fn a_hundred_thousand_deep_nesting_is_refused_within_a_second() {
    let deck = Deck::new("rel-deep");
    for (name, body) in [
        ("flow", format!("server: {}", "[".repeat(100_000))),
        (
            "block",
            format!("server:\n  args:\n{}", "  - ".repeat(100_000)),
        ),
        ("maps", format!("server: {}", "{a: ".repeat(100_000))),
    ] {
        let file = deck.dir.join(format!("recipes/{name}.yaml"));
        std::fs::write(&file, format!("name: {name}\n{body}\n")).unwrap();
        let began = Instant::now();
        let out = deck.run(&["recipes", "validate", file.to_str().unwrap()]);
        let took = began.elapsed();
        assert_eq!(out.status.code(), Some(2), "{name}");
        assert!(
            text(&out.stderr).contains("nesting deeper than 64 levels"),
            "{}",
            text(&out.stderr)
        );
        assert!(took < Duration::from_secs(1), "{name} took {took:?}");
    }
}

#[test]
fn recipe_text_reaches_the_terminal_with_control_characters_escaped() {
    let deck = Deck::new("rel-escape");
    let body = process_sim(free_port());
    deck.recipe(
        "shady",
        &format!("description: \"ok\\e[2J\\e]0;pwned\\a \\u202e txt\"\n{body}"),
    );
    for args in [&["recipes", "list"][..], &["recipes", "show", "shady"]] {
        let out = deck.ok(args);
        assert!(
            !out.contains('\x1b') && !out.contains('\x07') && !out.contains('\u{202e}'),
            "{out:?}"
        );
    }
    assert!(deck
        .ok(&["recipes", "list"])
        .contains(r"ok\u{1b}[2J\u{1b}]0;pwned\u{7}"));
    // JSON keeps the value exactly (escaped by JSON itself).
    let v: Value = serde_json::from_str(&deck.ok(&["--json", "recipes", "list"])).unwrap();
    assert_eq!(
        v[0]["description"],
        "ok\x1b[2J\x1b]0;pwned\x07 \u{202e} txt"
    );
}

/// Spawns `args` with stdout a pipe whose reading end is closed at once: the first write
/// gets EPIPE.
fn with_closed_stdout(deck: &Deck, args: &[&str]) -> (Option<i32>, String) {
    let mut child = deck
        .cmd(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    (child.wait().unwrap().code(), stderr)
}

#[test]
fn a_closed_pipe_ends_every_read_command_quietly() {
    let deck = Deck::new("rel-pipe");
    deck.recipe("fine", &process_sim(free_port()));
    let result = deck.dir.join("r.json");
    std::fs::write(&result, "{}").unwrap();
    for args in [
        &["recipes", "list"][..],
        &["recipes", "show", "fine"],
        &["recipes", "schema"],
        &["recipes", "validate"],
        &["ps"],
        &["status"],
        &["history"],
        &["doctor"],
        &["images", "audit"],
        &["completions", "bash"],
        &["prune"],
    ] {
        let (code, stderr) = with_closed_stdout(&deck, args);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(!stderr.contains("Broken pipe"), "{args:?}: {stderr}");
        assert_eq!(code, Some(141), "{args:?}: {stderr}");
    }
}

#[test]
fn down_of_an_unknown_name_is_a_usage_error_with_the_nearest_name() {
    let deck = Deck::new("rel-down");
    deck.recipe("demo-production", &process_sim(free_port()));
    let out = deck.run(&["down", "demo-prodution"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("did you mean `demo-production`?"),
        "{stderr}"
    );
    // A known recipe that is not running: nothing to stop, exit 0.
    let out = deck.run(&["down", "demo-production"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("is not running"));
}

#[test]
fn status_reports_a_damaged_production_file_and_still_shows_the_rest() {
    let deck = Deck::new("rel-prodjson");
    let port = free_port();
    deck.recipe("fine", &process_sim(port));
    deck.ok(&["start", "fine"]);
    std::fs::write(deck.dir.join("state/production.json"), "{\"current\": ").unwrap();
    let out = deck.run(&["status"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("production.json is damaged") && stderr.contains("move it aside"),
        "{stderr}"
    );
    assert!(text(&out.stdout).contains("fine"), "{}", text(&out.stdout));
    assert_eq!(
        std::fs::read_to_string(deck.dir.join("state/production.json")).unwrap(),
        "{\"current\": ",
        "left as it was"
    );
}

fn docker_crash(port: u16) -> String {
    format!(
        "engine: sim\nruntime: docker\nimage: {}\nserver:\n  port: {port}\n  args: [--load-time, 200ms, --load-fault, crash]\n  memory_gb: 4\nhealth:\n  timeout: 20s\n",
        sim_image()
    )
}

async fn containers_of(state: &std::path::Path, recipe: &str) -> Vec<String> {
    let filters = std::collections::HashMap::from([(
        "label",
        vec![
            format!("io.sparkctl.state={}", state.display()),
            format!("io.sparkctl.recipe={recipe}"),
        ],
    )]);
    let opts = bollard::query_parameters::ListContainersOptionsBuilder::new()
        .all(true)
        .filters(&filters)
        .build();
    docker()
        .await
        .list_containers(Some(opts))
        .await
        .unwrap()
        .into_iter()
        .filter_map(|c| c.id)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_containers_are_trimmed_and_pruned_but_never_productions() {
    let deck = Deck::new("rel-prune");
    deck.recipe("crashy", &docker_crash(free_port()));
    deck.recipe("prod", &docker_crash(free_port()));
    for name in ["crashy", "crashy", "crashy", "crashy", "prod", "prod"] {
        let out = deck
            .cmd(&["start", name, "--allow-unpinned"])
            .env("SPARKCTL_KEEP_EXITED", "2")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    }
    let state = deck.state();
    // Each start left at most 2 older exited ones: 2 + the one it made.
    assert_eq!(containers_of(&state, "crashy").await.len(), 3);
    std::fs::write(
        state.join("production.json"),
        r#"{"current": {"recipe": "prod", "since": "2026-11-23T00:00:00Z"}, "previous": []}"#,
    )
    .unwrap();
    let listed = deck.ok(&["--json", "prune", "--keep", "1"]);
    let v: Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(v["dry_run"], true);
    assert_eq!(v["remove"].as_array().unwrap().len(), 2, "{v}");
    assert!(v["remove"]
        .as_array()
        .unwrap()
        .iter()
        .all(|o| o["recipe"] == "crashy"));
    assert_eq!(v["protected"], serde_json::json!(["prod"]));
    assert_eq!(
        containers_of(&state, "crashy").await.len(),
        3,
        "a listing removes nothing"
    );
    let removed = deck.ok(&["prune", "--keep", "1", "--yes"]);
    assert!(removed.contains("removed 2 old container(s)"), "{removed}");
    assert_eq!(containers_of(&state, "crashy").await.len(), 1);
    assert_eq!(
        containers_of(&state, "prod").await.len(),
        2,
        "production's are kept"
    );
    // A damaged production.json: what is protected is unknown, so nothing goes.
    std::fs::write(state.join("production.json"), "{").unwrap();
    let out = deck.run(&["prune", "--keep", "0", "--yes"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(containers_of(&state, "prod").await.len(), 2);
    assert_eq!(containers_of(&state, "crashy").await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_env_from_host_value_reaches_the_container_and_no_log_level() {
    let deck = Deck::new("rel-secret");
    let port = free_port();
    deck.recipe(
        "secretive",
        &format!(
            "engine: sim\nruntime: docker\nimage: {}\nserver:\n  port: {port}\n  args: [--load-time, 100ms]\n  env_from_host: [HF_TOKEN]\n  memory_gb: 4\nhealth:\n  timeout: 20s\n",
            sim_image()
        ),
    );
    let out = deck
        .cmd(&["-vv", "start", "secretive", "--allow-unpinned"])
        .env("HF_TOKEN", "secret123")
        .env_remove("SPARKCTL_LOG")
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("DEBUG"), "-vv logs at debug: {stderr}");
    assert!(
        !stderr.contains("secret123") && !text(&out.stdout).contains("secret123"),
        "{stderr}"
    );
    // It was passed all the same.
    let id = deck.status_of("secretive").unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let env = docker()
        .await
        .inspect_container(&id, None)
        .await
        .unwrap()
        .config
        .unwrap()
        .env
        .unwrap();
    assert!(env.contains(&"HF_TOKEN=secret123".to_string()), "{env:?}");
    for log in [
        "trace",
        "bollard=trace,hyper=trace,trace",
        "bollard::docker=trace",
    ] {
        for args in [
            &["status"][..],
            &["down", "secretive", "--dry-run"],
            &["logs", "secretive"],
        ] {
            let out = deck
                .cmd(args)
                .env("SPARKCTL_LOG", log)
                .env("HF_TOKEN", "secret123")
                .output()
                .unwrap();
            let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
            assert!(
                !all.contains("secret123"),
                "SPARKCTL_LOG={log} {args:?}: {all}"
            );
        }
    }
    let out = deck
        .cmd(&["start", "secretive", "--dry-run", "--allow-unpinned"])
        .env("SPARKCTL_LOG", "trace")
        .env("HF_TOKEN", "secret123")
        .output()
        .unwrap();
    assert!(!format!("{}{}", text(&out.stdout), text(&out.stderr)).contains("secret123"));
}
