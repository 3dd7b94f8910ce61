//! Issue 17's faults, each against the real binary with real files, processes and the
//! Docker Engine: a broken unrelated file does not block the emergency exit, secrets stay
//! out of every log level, out-of-range and hostile input is refused without a panic,
//! a closed pipe ends a command quietly, damaged state is reported beside the rest, and
//! old containers are pruned but never production's.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{docker, free_port, http_status, sim_image, Deck, Ran};

fn process_sim(port: u16) -> String {
    format!(
        r#"engine: sim
runtime: process
server:
  port: {port}
  args: [--load-time, 100ms]
  memory_gb: 4
health:
  timeout: 20s
"#
    )
}

/// `qat-v2b.yaml` as the issue found it: broken YAML in a recipe nobody asked for.
const BROKEN: &str = r#"engine: vllm
image: vllm/vllm-openai:cu130-nightly
server:
  port: 8000
  args: [--a, --b
"#;

#[test]
fn a_broken_unrelated_recipe_or_lock_does_not_block_rollback_down_or_status() {
    let deck = Deck::new("rel-broken");
    let prod_port = free_port();
    deck.recipe("demo-production", &process_sim(free_port()));
    deck.recipe("qat-v2b", BROKEN);
    // A damaged lock: the process recipe needs no image, so no pin either.
    std::fs::write(deck.dir.join("images.lock"), "images:\n  qat-v2b: [\n").unwrap();
    // Production on a port of its own here.
    let on_prod_port = |args: &[&str]| {
        Ran::of(
            deck.cmd(args)
                .env("SPARKCTL_PRODUCTION_PORT", prod_port.to_string()),
        )
    };
    let stderr = on_prod_port(&["rollback", "--to", "demo-production"])
        .succeeds()
        .stderr();
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
    let status = on_prod_port(&["--json", "status"]).succeeds().json();
    assert!(
        status
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["name"] == "demo-production" && d["production"] == true),
        "{status:?}"
    );
    // A command that needs the broken recipe still fails on it, with exit 2 and its line.
    deck.sparkctl(&["recipes", "show", "qat-v2b"])
        .exits(2)
        .warns("qat-v2b.yaml:7:1:");
    // Validate still reads every file.
    deck.sparkctl(&["recipes", "validate"])
        .exits(2)
        .warns("qat-v2b.yaml:7:1:");
    // `recipes list` shows the rest.
    let list = deck.ok(&["recipes", "list"]);
    assert!(
        list.contains("demo-production") && !list.contains("qat-v2b"),
        "{list}"
    );
    // It serves production behind the front door: stopping it takes --force, and then the
    // production port says so at once (503) instead of holding requests for nothing.
    on_prod_port(&["down", "demo-production"])
        .exits(2)
        .warns("--force");
    on_prod_port(&["down", "--force", "demo-production"]).succeeds();
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
        let ran = deck.sparkctl(args).warns("huge.yaml:9:3: health.timeout: ");
        assert!(!ran.stderr().contains("panicked"), "{}", ran.shown());
        assert_ne!(ran.code(), Some(101), "{}", ran.shown());
    }
    deck.sparkctl(&["recipes", "show", "huge"]).exits(2);
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
        // The fastest of three runs: a parse that blows up is slow every time, a loaded
        // machine's pause is not.
        let took = (0..3)
            .map(|_| {
                let began = Instant::now();
                deck.sparkctl(&["recipes", "validate", file.to_str().unwrap()])
                    .exits(2)
                    .warns("nesting deeper than 64 levels");
                began.elapsed()
            })
            .min()
            .unwrap();
        assert!(
            took < Duration::from_secs(1),
            "{name} took {took:?} at best"
        );
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

/// Runs `args` with stdout a pipe whose reading end is closed before sparkctl starts, so
/// its first write gets EPIPE. (Closing it after the spawn raced: a loaded CI machine let a
/// short `recipes validate` write into the open pipe first and exit 0.)
fn with_closed_stdout(deck: &Deck, args: &[&str]) -> Ran {
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut ends = [0; 2];
    // SAFETY: pipe2 fills `ends` with two new descriptors, each owned below exactly once.
    assert_eq!(
        unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) },
        0
    );
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
    drop(read);
    Ran::of(deck.cmd(args).stdout(std::process::Stdio::from(write)))
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
        with_closed_stdout(&deck, args)
            .exits(141)
            .never_says("panicked")
            .never_says("Broken pipe");
    }
}

#[test]
fn down_of_an_unknown_name_is_a_usage_error_with_the_nearest_name() {
    let deck = Deck::new("rel-down");
    deck.recipe("demo-production", &process_sim(free_port()));
    deck.sparkctl(&["down", "demo-prodution"])
        .exits(2)
        .warns("did you mean `demo-production`?");
}

/// A known recipe that is not running: nothing to stop, exit 0.
#[test]
fn down_of_a_recipe_that_is_not_running_stops_nothing() {
    let deck = Deck::new("rel-down-idle");
    deck.recipe("demo-production", &process_sim(free_port()));
    deck.sparkctl(&["down", "demo-production"])
        .succeeds()
        .says("demo-production is not running");
}

#[test]
fn status_reports_a_damaged_production_file_and_still_shows_the_rest() {
    let deck = Deck::new("rel-prodjson");
    let port = free_port();
    deck.recipe("fine", &process_sim(port));
    deck.ok(&["start", "fine"]);
    std::fs::write(deck.dir.join("state/production.json"), "{\"current\": ").unwrap();
    deck.sparkctl(&["status"])
        .succeeds()
        .warns("production.json is damaged")
        .warns("move it aside")
        .says("fine");
    assert_eq!(
        std::fs::read_to_string(deck.dir.join("state/production.json")).unwrap(),
        "{\"current\": ",
        "left as it was"
    );
}

fn docker_crash(port: u16) -> String {
    format!(
        r#"engine: sim
runtime: docker
image: {}
server:
  port: {port}
  args: [--load-time, 200ms, --load-fault, crash]
  memory_gb: 4
health:
  timeout: 20s
"#,
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
        Ran::of(
            deck.cmd(&["start", name, "--allow-unpinned"])
                .env("SPARKCTL_KEEP_EXITED", "2"),
        )
        .exits(1);
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
    deck.sparkctl(&["prune", "--keep", "0", "--yes"]).exits(1);
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
            r#"engine: sim
runtime: docker
image: {}
server:
  port: {port}
  args: [--load-time, 100ms]
  env_from_host: [HF_TOKEN]
  memory_gb: 4
health:
  timeout: 20s
"#,
            sim_image()
        ),
    );
    Ran::of(
        deck.cmd(&["-vv", "start", "secretive", "--allow-unpinned"])
            .env("HF_TOKEN", "secret123")
            .env_remove("SPARKCTL_LOG"),
    )
    .succeeds()
    // -vv logs at debug.
    .warns("DEBUG")
    .never_says("secret123");
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
            Ran::of(
                deck.cmd(args)
                    .env("SPARKCTL_LOG", log)
                    .env("HF_TOKEN", "secret123"),
            )
            .never_says("secret123");
        }
    }
    Ran::of(
        deck.cmd(&["start", "secretive", "--dry-run", "--allow-unpinned"])
            .env("SPARKCTL_LOG", "trace")
            .env("HF_TOKEN", "secret123"),
    )
    .never_says("secret123");
}
