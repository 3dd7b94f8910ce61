//! `doctor`: the machine and what is in use by default; named recipes deeply. It fails only
//! on what blocks something in use or named.

use crate::support::{self, free_port, repo, Deck, Ran};

fn process_sim(port: u16) -> String {
    format!(
        "engine: sim\nruntime: process\nserver:\n  port: {port}\n  args: [--load-time, 0s]\n  memory_gb: 7\nhealth:\n  timeout: 20s\n"
    )
}

/// A process recipe whose binary is not there.
fn missing_binary(port: u16) -> String {
    process_sim(port).replace(
        "runtime: process\n",
        "runtime: process\nbinary: /nonexistent/llama-server\n",
    )
}

/// `sparkctl ARGS` on the recipes and lock a clone ships, with a state dir of its own (no
/// production, nothing running).
fn in_a_clone(deck: &Deck, args: &[&str]) -> Ran {
    Ran::of(
        support::sparkctl()
            .arg("--recipes")
            .arg(repo().join("recipes"))
            .env("SPARKCTL_STATE_DIR", deck.dir.join("state"))
            .env("SPARKCTL_MEMORY_GB", "128")
            .env("SPARKCTL_PRODUCTION_PORT", deck.door_port.to_string())
            .args(args),
    )
}

#[test]
fn a_fresh_clone_passes_doctor_and_the_two_node_recipe_asked_for_names_its_node_problems() {
    let deck = Deck::new("doctor-clone");
    let ran = in_a_clone(&deck, &["doctor"])
        .succeeds()
        .says("not checked");
    assert!(!ran.stdout().contains("FAIL"), "{}", ran.stdout());
    assert!(
        ran.stdout().contains("nvfp4-27b-tp2"),
        "listed as not checked: {}",
        ran.stdout()
    );
    assert!(!ran.stdout().contains("node spark-b"), "{}", ran.stdout());

    let ran = in_a_clone(&deck, &["doctor", "nvfp4-27b-tp2"]).exits(1);
    let out = ran.stdout();
    assert!(
        out.contains("FAIL  node spark-b engine"),
        "the second Spark's engine is not there: {out}"
    );
    assert!(
        out.lines()
            .any(|l| l.trim_start().starts_with("FAIL") && l.contains("node spark-a interface")),
        "{out}"
    );
    assert!(!out.contains("not checked"), "{out}");
    assert!(ran.stderr().contains("check(s) failed"), "{}", ran.stderr());
}

#[test]
fn what_runs_and_its_fallback_are_checked_and_the_rest_is_not() {
    let deck = Deck::new("doctor-in-use");
    let port = free_port();
    deck.recipe("prod", &format!("{}fallback: spare\n", process_sim(port)));
    deck.recipe("spare", &missing_binary(free_port()));
    deck.recipe("unused", &missing_binary(free_port()));

    // Nothing in use: the broken binaries block nothing.
    deck.sparkctl(&["doctor"])
        .succeeds()
        .says("prod, spare, unused (not in use)");

    deck.ok(&["start", "prod"]);
    let ran = deck.sparkctl(&["doctor"]).exits(1);
    let out = ran.stdout();
    assert!(out.contains("prod in use"), "{out}");
    assert!(out.contains("running"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.trim_start().starts_with("ok") && l.contains("prod port")),
        "its own deployment holds its port: {out}"
    );
    assert!(out.contains("the fallback of prod"), "{out}");
    assert!(
        out.lines().any(|l| l.trim_start().starts_with("FAIL")
            && l.contains("spare binary")
            && l.contains("/nonexistent/llama-server")),
        "the fallback could not start: {out}"
    );
    assert!(
        out.contains("unused (not in use)") && !out.contains("unused binary"),
        "{out}"
    );

    // Named, the unused one is checked and fails on its own.
    deck.sparkctl(&["doctor", "unused"])
        .exits(1)
        .says("unused binary");
    deck.sparkctl(&["doctor", "unusd"]).exits(2).warns("unused");
    deck.ok(&["down", "prod"]);
}
