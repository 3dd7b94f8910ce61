//! `--json` errors carry a stable `kind` beside the message and the exit code: scripts branch
//! on the kind, people read the message. Each failure is met as a user meets it, through the
//! real binary, on real recipes, ports, locks and sockets; nothing here starts a server.

use serde_json::Value;

use crate::support::{self, free_port, Deck, Ran};

fn process_recipe(port: u16, memory_gb: u32) -> String {
    format!("engine: sim\nruntime: process\nserver:\n  port: {port}\n  memory_gb: {memory_gb}\n")
}

/// Runs `--json ARGS`, insists on `kind` and `exit`, and that the document's exit code and
/// message agree with the process's; returns the message.
#[track_caller]
fn fails_as(ran: Ran, kind: &str, exit: i32) -> String {
    let ran = ran.exits(exit);
    let doc: Value = ran.json();
    assert_eq!(doc["kind"], kind, "{doc:#}");
    assert_eq!(doc["exit_code"], exit, "{doc:#}");
    doc["error"].as_str().expect("a message").to_string()
}

fn json<'a>(args: &[&'a str]) -> Vec<&'a str> {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    all
}

#[test]
fn bad_input_kinds_exit_2() {
    let deck = Deck::new("kinds-input");
    deck.recipe("p", &process_recipe(free_port(), 1));
    let said = fails_as(
        deck.sparkctl(&json(&["start", "pp", "--dry-run"])),
        "unknown_recipe",
        2,
    );
    assert!(said.contains("did you mean `p`?"), "{said}");
    // Outside a checkout, with no config dir: nowhere holds recipes.
    let home = deck.dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let said = fails_as(
        Ran::of(
            support::sparkctl()
                .current_dir(&home)
                .env("HOME", &home)
                .env_remove("XDG_CONFIG_HOME")
                .env("SPARKCTL_STATE_DIR", deck.state())
                .args(json(&["start", "p"])),
        ),
        "unknown_recipe",
        2,
    );
    assert!(said.contains("there is no recipes directory"), "{said}");
    fails_as(deck.sparkctl(&json(&["down", "pp"])), "unknown_recipe", 2);
    let said = fails_as(deck.sparkctl(&json(&["bench", "p"])), "not_running", 2);
    assert!(said.contains("`sparkctl start p` first"), "{said}");
    fails_as(deck.sparkctl(&json(&["logs", "p"])), "not_running", 2);
    let bad = support::repo().join("tests/bad-recipes/unknown-key.yaml");
    let ran = deck.sparkctl(&json(&["recipes", "validate", bad.to_str().unwrap()]));
    assert_eq!(ran.json()["diagnostics"][0]["location"]["line"], 8);
    fails_as(ran, "invalid", 2);
    let url = format!("http://127.0.0.1:{}", free_port());
    fails_as(
        deck.sparkctl(&json(&["bench", &url, "--repeat", "0"])),
        "usage",
        2,
    );
}

#[test]
fn operation_kinds_exit_1() {
    let deck = Deck::new("kinds-ops");
    // A port this test holds.
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = holder.local_addr().unwrap().port();
    deck.recipe("held", &process_recipe(port, 1));
    let said = fails_as(deck.sparkctl(&json(&["start", "held"])), "port_taken", 1);
    assert!(
        said.contains(&format!("port {port} is taken by pid")),
        "{said}"
    );
    drop(holder);

    deck.recipe("big", &process_recipe(free_port(), 100));
    let said = fails_as(
        Ran::of(
            deck.cmd(&json(&["start", "big", "--dry-run"]))
                .env("SPARKCTL_MEMORY_GB", "16")
                .env("SPARKCTL_MEMORY_RESERVE_GB", "0"),
        ),
        "does_not_fit",
        1,
    );
    assert!(
        said.contains("big does not fit in memory even alone"),
        "{said}"
    );

    deck.recipe(
        "boxed",
        &format!(
            "engine: sim\nruntime: docker\nimage: sparkctl-sim:never-built\nserver:\n  port: {}\n",
            free_port()
        ),
    );
    let said = fails_as(
        Ran::of(
            deck.cmd(&json(&["start", "boxed", "--allow-unpinned"]))
                .env("DOCKER_HOST", "unix:///nonexistent/docker.sock"),
        ),
        "engine_unreachable",
        1,
    );
    assert!(said.contains("cannot reach the Docker Engine"), "{said}");
}

#[test]
fn a_held_state_lock_is_lock_held() {
    let deck = Deck::new("kinds-lock");
    deck.recipe("p", &process_recipe(free_port(), 1));
    // Another writer: util-linux's flock holds STATE/lock.
    let _other = support::LockHolder::take(&deck.state());
    let said = fails_as(deck.sparkctl(&json(&["up", "p"])), "lock_held", 1);
    assert!(
        said.contains("another sparkctl is changing state"),
        "{said}"
    );
}

/// A process sim with `args`, benchmarked with the quick suite under `gates`.
fn candidate(args: &str, gates: &str) -> String {
    format!(
        "engine: sim\nruntime: process\nserver:\n  port: {}\n  args: [--ttft, 1ms, --token-rate, \
         \"2000\", {args}]\n  memory_gb: 1\nhealth:\n  timeout: 20s\nbench:\n  suite: quick\n  \
         gates:\n{gates}",
        free_port()
    )
}

#[test]
fn a_candidate_that_fails_its_gates_is_rejected_by_gates_and_one_undecided_is_inconclusive() {
    let deck = Deck::new("kinds-up");
    deck.recipe(
        "leaky",
        &candidate(
            "--reasoning-tokens, \"4\", --reasoning-as, leak",
            "    thinking_leak: \"== 0%\"\n",
        ),
    );
    let said = fails_as(
        deck.sparkctl(&json(&["up", "leaky", "--yes"])),
        "rejected_by_gates",
        1,
    );
    assert!(
        said.contains("up leaky rejected: leaky did not pass: thinking_leak"),
        "{said}"
    );
    // A goodput gate with no load run under an SLO has no evidence.
    deck.recipe(
        "unsure",
        &candidate("--tokens, \"8\"", "    goodput_rps: \">= 1\"\n"),
    );
    let said = fails_as(
        deck.sparkctl(&json(&["up", "unsure", "--yes"])),
        "inconclusive",
        1,
    );
    assert!(said.contains("not promoted and not rejected"), "{said}");
}

/// One fact, one kind, whichever command meets it: an image this machine lacks, an engine
/// that does not answer, a server that does not answer, a front door that does not.
#[test]
fn the_same_fact_has_the_same_kind_in_every_command() {
    let deck = Deck::new("kinds-same");
    deck.recipe(
        "boxed",
        &format!(
            "engine: sim\nruntime: docker\nimage: sparkctl-sim:never-built\nserver:\n  port: {}\n",
            free_port()
        ),
    );
    for args in [
        &["start", "boxed", "--allow-unpinned"][..],
        &["images", "pin", "boxed", "--offline"],
    ] {
        let said = fails_as(deck.sparkctl(&json(args)), "image_missing", 1);
        assert!(
            said.starts_with("image sparkctl-sim:never-built")
                && said.contains("is not on this machine"),
            "{args:?}: {said}"
        );
    }

    let no_engine = |args: &[&str]| {
        Ran::of(
            deck.cmd(&json(args))
                .env("DOCKER_HOST", "unix:///nonexistent/docker.sock"),
        )
    };
    for args in [
        &["start", "boxed", "--allow-unpinned"][..],
        &["images", "audit"],
        &["import", "--container", "sparkctl-no-such-container"],
    ] {
        let said = fails_as(no_engine(args), "engine_unreachable", 1);
        assert!(
            said.contains("cannot reach the Docker Engine"),
            "{args:?}: {said}"
        );
    }

    // Nothing serves there: the same as a recipe that is not running.
    let url = format!("http://127.0.0.1:{}", free_port());
    for args in [&["bench", url.as_str()][..], &["eval", url.as_str()]] {
        let said = fails_as(deck.sparkctl(&json(args)), "not_running", 2);
        assert!(said.contains("does not answer"), "{args:?}: {said}");
    }

    let said = fails_as(
        deck.sparkctl(&json(&["frontdoor", "status"])),
        "frontdoor_unreachable",
        1,
    );
    assert!(said.contains("`sparkctl frontdoor start`"), "{said}");
}
