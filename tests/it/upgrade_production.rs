//! What production does across `sparkctl upgrade`, against the real local registry and the
//! simulated engine's image (`upgrade::Nights`): a `rollback` after an upgrade serves the
//! night before again (its very digest, though images.lock pins the new night), and so do
//! the front door's restart of it and the way back after a rejected night; a kill between
//! the promotion and the pin's move is healed by the next command that looks; a client
//! streaming through a promoted night and a rejected one sees no request fail.

use std::time::{Duration, Instant};

use crate::support::{docker, Ran, Traffic};
use crate::upgrade::Nights;

/// `sparkctl ARGS` with no replaced production kept warm: a rollback must start the night
/// before, not switch to it.
fn cold(n: &Nights, args: &[&str]) -> Ran {
    Ran::of(n.deck.cmd(args).env("SPARKCTL_WARM_GRACE", "0s"))
}

/// The image id a container runs.
async fn image_of(container: &str) -> String {
    let c = docker().await.inspect_container(container, None).await;
    c.unwrap().image.unwrap_or_default()
}

/// The image id this machine holds for `repo@digest`.
async fn image_id(n: &Nights, digest: &str) -> String {
    let reference = format!("{}@{digest}", n.repo);
    let i = docker().await.inspect_image(&reference).await;
    i.unwrap().id.unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_after_an_upgrade_serves_the_night_before_and_its_restart_too() {
    let mut n = Nights::new("upgrade-back").await;
    let d1 = n.push("").await;
    cold(&n, &["upgrade", "nightly"]).succeeds();
    let d2 = n.push("ENV VLLM_VERSION=0.11.2\n").await;
    cold(&n, &["upgrade", "nightly"]).succeeds();
    let (night1, night2) = (image_id(&n, &d1).await, image_id(&n, &d2).await);
    assert_ne!(night1, night2);
    let (who, id) = n.production();
    assert_eq!(
        (who.as_str(), image_of(&id).await),
        ("nightly", night2.clone())
    );
    assert_eq!(n.pinned()["digest"], d2.as_str());
    let warm: Vec<_> = (n.deck.status().into_iter())
        .filter(|d| d["state"] == "running" && d["role"] != "production")
        .filter(|d| d["name"] == "nightly")
        .collect();
    assert!(warm.is_empty(), "night 1 is not warm: {warm:?}");

    // A client streams to the production port all through the rollback.
    let client = Traffic::start(&n.deck.door_url(), Duration::from_millis(20));
    client.answers(3, Duration::from_secs(60));
    let ran = cold(&n, &["rollback"]).succeeds();
    client.answers(3, Duration::from_secs(120));
    let report = client.stop();
    println!(
        "rollback after an upgrade: {} answered, {} failed, {} cut; longest wait {:.0} ms",
        report.ok,
        report.failed(),
        report.cut,
        report.latency_ms.iter().copied().fold(0.0, f64::max)
    );
    let (who, back) = n.production();
    assert_eq!(who, "nightly");
    assert_eq!(
        image_of(&back).await,
        night1,
        "night 1's digest serves again: {}",
        ran.shown()
    );
    assert_eq!((report.failed(), report.cut), (0, 0), "{report:?}");
    let last = report.upstreams.last().cloned().unwrap_or_default();
    assert!(last.contains(&back), "the port answered from {last}");
    assert!(
        ran.shown().contains(&format!(
            "nightly goes back to {}, the digest it served before; images.lock still pins {}",
            &d1[..19],
            &d2[..19]
        )),
        "{}",
        ran.shown()
    );
    assert_eq!(
        n.pinned()["digest"],
        d2.as_str(),
        "the pin stays where the upgrade moved it: {}",
        ran.shown()
    );

    // Production dies: the front door's watch brings back what served, night 1, not the pin.
    let killed = docker().await.kill_container(&back, None).await;
    killed.expect("production killed");
    let deadline = Instant::now() + Duration::from_secs(90);
    let again = loop {
        let serving = (n.deck.status().into_iter())
            .find(|d| d["role"] == "production" && d["state"] == "running")
            .and_then(|d| Some(d["id"].as_str()?.to_string()));
        if let Some(now) = serving.filter(|id| *id != back) {
            break now;
        }
        assert!(
            Instant::now() < deadline,
            "the watch did not bring production back"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(
        image_of(&again).await,
        night1,
        "the restart runs night 1 too"
    );

    // A night 3 the gates reject: the way back brings production back as it served.
    n.push("ENV SIM_EVAL_WRONG=20%\n").await;
    cold(&n, &["upgrade", "nightly"]).exits(1);
    let (who, after) = n.production();
    assert_eq!(who, "nightly");
    assert_eq!(image_of(&after).await, night1, "restored at night 1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_between_the_promotion_and_the_pin_move_is_healed_by_the_next_upgrade_or_status() {
    let mut n = Nights::new("upgrade-heal").await;
    let d1 = n.push("").await;
    n.deck.sparkctl(&["upgrade", "nightly"]).succeeds();
    let lock = n.deck.dir.join("images.lock");
    let before = std::fs::read(&lock).unwrap();
    let d2 = n.push("ENV VLLM_VERSION=0.11.2\n").await;
    n.deck.sparkctl(&["upgrade", "nightly"]).succeeds();
    let (_, serving) = n.production();
    // As a kill between the door's switch and the pin's move leaves it: production.json
    // names night 2's promotion, images.lock still pins night 1.
    std::fs::write(&lock, &before).unwrap();
    assert_eq!(n.pinned()["digest"], d1.as_str());

    let ran = n.deck.sparkctl(&["upgrade", "nightly"]).succeeds();
    let said = ran.shown();
    assert!(
        said.contains("images.lock: nightly is pinned to ")
            && said.contains(&d2[..19])
            && said.contains("upgrade nightly unchanged"),
        "{said}"
    );
    assert_eq!(n.pinned()["digest"], d2.as_str());
    assert_eq!(n.pinned()["history"][0]["digest"], d1.as_str());
    assert_eq!(n.production().1, serving, "nothing was deployed again");

    // Once more, healed by `status` this time; said once.
    std::fs::write(&lock, &before).unwrap();
    let said = n.deck.sparkctl(&["status"]).succeeds().shown();
    assert!(
        said.contains("images.lock: nightly is pinned to "),
        "{said}"
    );
    assert_eq!(n.pinned()["digest"], d2.as_str());
    let again = n.deck.sparkctl(&["status"]).succeeds().shown();
    assert!(!again.contains("images.lock: nightly"), "{again}");
}

/// A client that gives a request up after 30 s streams to the production port through a
/// night promoted (blue/green over `prod`) and a night rejected (its model gets a fifth of
/// the answers wrong; a swap of production's own instance, which is then brought back):
/// the run in which one request of 112 was seen to hang for 30 s, none failing here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_streams_through_a_promoted_night_and_a_rejected_one_and_none_fails() {
    let mut n = Nights::new("upgrade-stream").await;
    let every = Duration::from_millis(20);
    let client = Traffic::impatient(&n.deck.door_url(), every, Duration::from_secs(30));
    client.answers(3, Duration::from_secs(60));
    n.push("").await;
    n.deck.sparkctl(&["upgrade", "nightly"]).succeeds();
    n.push("ENV SIM_EVAL_WRONG=20%\n").await;
    n.deck.sparkctl(&["upgrade", "nightly"]).exits(1);
    client.answers(3, Duration::from_secs(120));
    let report = client.stop();
    let mut waits = report.latency_ms.clone();
    waits.sort_by(f64::total_cmp);
    println!(
        "two nights: {} answered, {} failed, {} cut; longest wait {:.0} ms (median {:.0} ms)",
        report.ok,
        report.failed(),
        report.cut,
        waits.last().copied().unwrap_or(0.0),
        waits.get(waits.len() / 2).copied().unwrap_or(0.0)
    );
    assert_eq!((report.failed(), report.cut), (0, 0), "{report:?}");
}
