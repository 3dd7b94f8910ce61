//! What a newcomer meets first, outside the checkout: no `./recipes`, no config dir yet.

mod support;

use std::time::Duration;

use support::{sparkctl, Ran, Sim};

/// `sparkctl ARGS` run from an empty directory with an empty home: nothing to find.
fn elsewhere(home: &std::path::Path, args: &[&str]) -> Ran {
    Ran::of(
        sparkctl()
            .current_dir(home)
            .env("HOME", home)
            .env_remove("XDG_CONFIG_HOME")
            .env("XDG_STATE_HOME", home.join("state"))
            .args(args),
    )
}

fn empty_home(tag: &str) -> std::path::PathBuf {
    let home = std::env::temp_dir().join(format!("sparkctl-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(&home).unwrap();
    home
}

#[test]
fn bench_of_a_url_with_a_shipped_suite_works_outside_the_checkout() {
    let home = empty_home("first-bench");
    let sim = Sim::start(&["--ttft", "5ms", "--token-rate", "2000"]);
    sim.wait_ready(Duration::from_secs(10));
    let out = home.join("quick.json");
    elsewhere(
        &home,
        &[
            "bench",
            &sim.url,
            "--suite",
            "quick",
            "--out",
            out.to_str().unwrap(),
        ],
    )
    .succeeds()
    .never_says("cannot read the recipes directory");
    let result: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(result["suite"], "quick", "{result}");

    elsewhere(&home, &["bench", &sim.url, "--suite", "nope"])
        .exits(2)
        .warns("built in: voice-assistant, quick, cache");
}

#[test]
fn a_recipe_asked_for_where_there_are_none_says_where_sparkctl_looked() {
    let home = empty_home("first-up");
    elsewhere(&home, &["up", "qat-v2b", "--dry-run"])
        .exits(2)
        .warns("there is no recipes directory here (./recipes)")
        .warns(".config/sparkctl/recipes")
        .warns("--recipes DIR");
    // Reading commands work with none.
    elsewhere(&home, &["recipes", "list"]).succeeds();
    elsewhere(&home, &["status"]).succeeds();
}
