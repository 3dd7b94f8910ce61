//! Pinning against a real registry: Debian's `docker-registry` on 127.0.0.1, images built
//! here and pushed through the Engine API, a "nightly" tag that moves under the pin.

use sparkctl::testkit::Lock;

use crate::support::registry::{push, Registry};
use crate::support::{self, docker, free_port, sim_image, Deck};

/// A "nightly": the sim image with its own version label and env, so its own digest.
async fn build_nightly(docker: &bollard::Docker, tag: &str, version: &str, vllm: &str) {
    let dockerfile = format!(
        "FROM {}
LABEL org.opencontainers.image.version={version}
ENV VLLM_VERSION={vllm}
",
        sim_image()
    );
    support::build_image(docker, tag, &[("Dockerfile", dockerfile.as_bytes(), 0o644)]).await;
}

fn recipe(deck: &Deck, name: &str, image: &str) {
    deck.recipe(
        name,
        &format!(
            r#"engine: sim
runtime: docker
image: {image}
server:
  port: {}
  args: [--load-time, 0s]
health:
  timeout: 20s
"#,
            free_port()
        ),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_nightly_is_caught_the_pin_keeps_running_and_repinning_moves_it() {
    let docker = docker().await;
    let registry = Registry::start("drift");
    let deck = Deck::new("images-drift");
    let repo = format!("{}/spark/sim", registry.addr);
    let reference = format!("{repo}:nightly");
    recipe(&deck, "nightly", &reference);
    let lock_path = deck.dir.join("images.lock");

    // Copies of the shared sim image, so pushing never gives it a registry digest.
    let local1 = format!("sparkctl-nightly-1:{}", std::process::id());
    build_nightly(&docker, &local1, "nightly-1", "0.11.1").await;
    let d1 = push(&docker, &local1, &repo, "nightly").await;
    let out = deck.ok(&["images", "pin", "nightly"]);
    assert!(
        out.contains(&format!("nightly: (none) -> sha256:{}", &d1[7..19])),
        "{out}"
    );
    let lock = Lock::load(&lock_path).unwrap();
    let pin = &lock.images["nightly"];
    assert_eq!(pin.digest, d1);
    assert_eq!(pin.reference, reference);
    assert!(pin.platform.as_deref().unwrap().starts_with("linux/"));
    assert!(pin.image_id.is_some() && pin.created.is_some());

    let audit = deck
        .sparkctl(&["--json", "images", "audit"])
        .succeeds()
        .json();
    assert_eq!(audit["ok"], true, "{audit}");
    assert_eq!(audit["rows"][0]["registry"], d1.as_str());

    // The nightly moves under the same tag.
    let local2 = format!("sparkctl-nightly-2:{}", std::process::id());
    build_nightly(&docker, &local2, "nightly-2", "0.11.2").await;
    let d2 = push(&docker, &local2, &repo, "nightly").await;
    assert_ne!(d1, d2);
    // Drift fails the audit.
    let audit = deck
        .sparkctl(&["--json", "images", "audit"])
        .exits(1)
        .json();
    let row = &audit["rows"][0];
    assert_eq!(row["pinned"], d1.as_str());
    assert_eq!(row["registry"], d2.as_str());
    assert!(
        support::strings(&row["findings"]).contains(&"drift"),
        "{row}"
    );
    assert!(
        support::strings(&row["findings"]).contains(&"local-differs"),
        "{row}"
    );
    assert!(
        row["pinned_created"].is_string() && row["registry_created"].is_string(),
        "{row}"
    );
    deck.sparkctl(&["images", "audit"]).exits(1).says(&format!(
        "drift: {reference} now points to sha256:{}",
        &d2[7..19]
    ));

    // start still runs the pinned digest, not the moved tag.
    deck.ok(&["start", "nightly"]);
    let status = deck.status_of("nightly").unwrap();
    let image_a = docker.inspect_image(&local1).await.unwrap().id.unwrap();
    assert_eq!(status["artifact"], image_a.as_str());
    let container = docker
        .inspect_container(status["id"].as_str().unwrap(), None)
        .await
        .unwrap();
    assert_eq!(container.image.as_deref(), Some(image_a.as_str()));
    assert_eq!(
        container.config.unwrap().labels.unwrap()["io.sparkctl.image"],
        reference
    );
    deck.ok(&["down", "nightly"]);

    // Re-pinning moves the pin and keeps the old digest in the history.
    let out = deck.ok(&["images", "pin", "nightly"]);
    assert!(
        out.contains(&format!("sha256:{} -> sha256:{}", &d1[7..19], &d2[7..19])),
        "{out}"
    );
    let lock = Lock::load(&lock_path).unwrap();
    assert_eq!(lock.images["nightly"].digest, d2);
    assert_eq!(lock.images["nightly"].history[0].digest, d1);
    let diff = deck.ok(&["images", "diff", "nightly"]);
    assert!(
        diff.contains("label org.opencontainers.image.version") && diff.contains("nightly-2"),
        "{diff}"
    );
    assert!(diff.contains("env VLLM_VERSION"), "{diff}");

    // Pull by digest brings back an image that is gone from this machine.
    let opts = bollard::query_parameters::RemoveImageOptionsBuilder::new()
        .force(true)
        .build();
    docker
        .remove_image(&local2, Some(opts.clone()), None)
        .await
        .unwrap();
    docker
        .remove_image(&format!("{repo}@{d2}"), Some(opts), None)
        .await
        .ok();
    let audit = deck.sparkctl(&["--json", "images", "audit"]).json();
    assert_eq!(audit["rows"][0]["present"], false, "{audit}");
    deck.ok(&["images", "pull", "nightly"]);
    assert!(docker.inspect_image(&format!("{repo}@{d2}")).await.is_ok());

    // Registry down: a clear error, and the lock is not touched.
    let before = std::fs::read(&lock_path).unwrap();
    drop(registry);
    deck.sparkctl(&["images", "pin", "nightly"])
        .exits(1)
        .warns("cannot reach its registry");
    assert_eq!(std::fs::read(&lock_path).unwrap(), before);
    // What this machine pulled can still be pinned offline.
    let out = deck.ok(&["images", "pin", "nightly", "--offline"]);
    assert!(out.contains("unchanged"), "{out}");
    let opts = bollard::query_parameters::RemoveImageOptionsBuilder::new()
        .force(true)
        .build();
    for image in [local1, format!("{repo}@{d1}"), format!("{repo}@{d2}")] {
        let _ = docker.remove_image(&image, Some(opts.clone()), None).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_the_registry_lacks_is_not_pinned() {
    let _docker = docker().await;
    let registry = Registry::start("bad");
    let deck = Deck::new("images-no-tag");
    recipe(
        &deck,
        "ghost",
        &format!("{}/spark/none:nightly", registry.addr),
    );
    deck.sparkctl(&["images", "pin", "ghost"])
        .exits(1)
        .warns("the registry has no such tag");
    assert!(!deck.dir.join("images.lock").exists(), "nothing written");
}

/// An unpinned image is refused at start, with the fix.
#[test]
fn an_unpinned_image_is_refused_at_start_with_the_fix() {
    let deck = Deck::new("images-unpinned");
    recipe(&deck, "local", sim_image());
    deck.sparkctl(&["start", "local"])
        .exits(2)
        .warns("run `sparkctl images pin local`");
    assert!(deck.status_of("local").is_none(), "nothing was started");
}

/// A damaged lock names its line and is left as it is.
#[test]
fn a_damaged_lock_is_named_and_not_rewritten() {
    let deck = Deck::new("images-damaged");
    let lock_path = deck.dir.join("images.lock");
    recipe(&deck, "local", sim_image());
    let damaged = r#"images:
  local:
    reference: x
    digest: [
"#;
    std::fs::write(&lock_path, damaged).unwrap();
    deck.sparkctl(&["images", "pin", "local"])
        .exits(2)
        .warns(&format!("{}:", lock_path.display()))
        .warns("it was not rewritten");
    assert_eq!(std::fs::read_to_string(&lock_path).unwrap(), damaged);
}

/// A pin for a recipe that no longer exists is reported as stale.
#[test]
fn a_pin_for_a_recipe_that_no_longer_exists_is_stale() {
    let deck = Deck::new("images-stale");
    recipe(&deck, "local", sim_image());
    deck.ok(&["images", "pin", "local"]);
    recipe(&deck, "gone", sim_image());
    deck.ok(&["images", "pin", "gone"]);
    std::fs::remove_file(deck.dir.join("recipes/gone.yaml")).unwrap();
    let audit = deck
        .sparkctl(&["--json", "images", "audit"])
        .succeeds()
        .json();
    assert_eq!(audit["stale"], serde_json::json!(["gone"]), "{audit}");
    assert_eq!(audit["ok"], true, "{audit}");
    assert_eq!(audit["rows"][0]["recipe"], "local");
    assert_eq!(
        audit["rows"][0]["findings"],
        serde_json::json!([]),
        "a local build needs no registry"
    );
}
