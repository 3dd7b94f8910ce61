//! What a newcomer meets first, outside the checkout: no `./recipes`, no config dir yet.

use std::time::Duration;

use crate::support::{self, sparkctl, Ran, Sim};

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

/// `sparkctl ARGS` as an installed binary runs for a user: `cwd` is not the checkout, the
/// config dir is `HOME/.config/sparkctl`, and this deck's state dir and production port.
fn installed(deck: &support::Deck, home: &std::path::Path, args: &[&str]) -> Ran {
    let cwd = home.join("somewhere");
    std::fs::create_dir_all(&cwd).unwrap();
    Ran::of(
        sparkctl()
            .current_dir(&cwd)
            .env("HOME", home)
            .env_remove("XDG_CONFIG_HOME")
            .env("SPARKCTL_STATE_DIR", deck.dir.join("state"))
            .env("SPARKCTL_MEMORY_GB", "128")
            .env_remove("SPARKCTL_MEMORY_RESERVE_GB")
            .env_remove("SPARKCTL_LOCK")
            .env("SPARKCTL_PRODUCTION_PORT", deck.door_port.to_string())
            .args(args),
    )
}

/// Issue 28's first-run promise: after `sparkctl init`, from a directory that is not the
/// checkout, `recipes list`, `recipes validate` (patches/ found beside the config dir's
/// recipes), `bench URL --suite quick`, `images pin` (into the config dir's images.lock) and
/// `up` all work.
#[test]
fn after_init_sparkctl_works_from_any_directory() {
    let deck = support::Deck::new("first-init");
    let home = deck.dir.join("home");
    let config = home.join(".config/sparkctl");
    installed(&deck, &home, &["init"])
        .succeeds()
        .says("wrote ~/.config/sparkctl/recipes/qat-v2b.yaml")
        .says("wrote ~/.config/sparkctl/recipes/suites/quick.yaml")
        .says("wrote ~/.config/sparkctl/recipes/jobs/demo-quantize.yaml")
        .says("wrote ~/.config/sparkctl/patches/qwen3_5/preprocessor_config.json")
        .says("wrote ~/.config/sparkctl/images.lock");
    // A second init keeps what is there, the user's edits included.
    let mine = config.join("recipes/demo-production.yaml");
    let shipped = std::fs::read_to_string(&mine).unwrap();
    let port = support::free_port();
    // The user gives the demo production a port of its own (8013 may be taken here).
    std::fs::write(
        &mine,
        shipped.replace("port: 8013", &format!("port: {port}")),
    )
    .unwrap();
    installed(&deck, &home, &["init"])
        .succeeds()
        .says("0 written")
        .says("kept (yours differs from the shipped one) ~/.config/sparkctl/recipes/demo-production.yaml");

    let list = installed(&deck, &home, &["recipes", "list"]).succeeds();
    for name in ["qat-v2b", "llama-server", "demo-production", "sglang-9b"] {
        assert!(list.stdout().contains(name), "{}", list.stdout());
    }
    installed(&deck, &home, &["recipes", "validate"])
        .succeeds()
        .never_says("patches/qwen3_5/preprocessor_config.json does not exist");

    let sim = Sim::start(&["--ttft", "5ms", "--token-rate", "2000"]);
    sim.wait_ready(Duration::from_secs(10));
    installed(&deck, &home, &["bench", &sim.url, "--suite", "quick"]).succeeds();

    // The lock beside the config dir's recipes is the one pinned into.
    std::fs::write(
        config.join("recipes/mine.yaml"),
        format!(
            "name: mine\nengine: sim\nruntime: docker\nimage: {}\nserver:\n  port: {}\n",
            support::sim_image(),
            support::free_port()
        ),
    )
    .unwrap();
    installed(&deck, &home, &["images", "pin", "mine"]).succeeds();
    let lock = std::fs::read_to_string(config.join("images.lock")).unwrap();
    assert!(lock.contains("mine:") && lock.contains("sha256:"), "{lock}");

    installed(&deck, &home, &["up", "demo-production", "--yes"])
        .promoted("demo-production", deck.door_port);
    assert_eq!(
        support::http_status(&deck.door_url(), "/v1/models"),
        Some(200)
    );
    installed(&deck, &home, &["down", "demo-production", "--force"]).succeeds();
}
