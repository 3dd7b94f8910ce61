//! `sparkctl bisect` against a real local registry (Debian's `docker-registry`): eight
//! digests of the simulated engine's image pushed under one tag, pinned one after another
//! as a nightly cron would, the fifth onward with a TTFT regression set by the image's
//! ENV. Production (a host process behind the front door) answers a client streaming to the
//! production port all along.

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::registry::{push, Registry};
use crate::support::{self, docker, free_port, text, Deck, Traffic};

const SUITE: &str = "name: tiny\nwarmup: 1\nruns: 5\ncases:\n  - name: factual\n    turns: [\"What is the capital of Japan?\"]\n    expect: Tokyo\n    max_tokens: 8\n";

/// The registry, the deck and the eight digests (oldest first).
struct Nightlies {
    deck: Deck,
    _registry: Registry,
    repo: String,
    digests: Vec<String>,
}

impl Nightlies {
    /// `env(i)`: the extra ENV lines of build `i` (1-based).
    async fn build(tag: &str, env: impl Fn(usize) -> String) -> Nightlies {
        let docker = docker().await;
        let (registry, deck, repo) = support::registry::with_deck(tag, SUITE);
        deck.recipe(
            "prod",
            &format!(
                "engine: sim\nruntime: process\nserver:\n  port: {}\n  args: [--load-time, 100ms, --ttft, 20ms, --token-rate, \"400\", --tokens, \"4\"]\n  memory_gb: 7\n",
                free_port()
            ),
        );
        deck.recipe(
            "nightly",
            &format!(
                "engine: sim\nruntime: docker\nimage: {repo}:nightly\nserver:\n  port: {}\n  args: [--load-time, 0s, --token-rate, \"400\", --tokens, \"8\"]\n  memory_gb: 12\nhealth:\n  timeout: 30s\nbench:\n  suite: tiny\n",
                free_port()
            ),
        );
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        // Its own sim image: the shared test tag may hold another checkout's binary, whose
        // sim may not know the jitter this test sets.
        let base = format!("sparkctl-sim-{tag}:{}", std::process::id());
        support::build_sim_image(&docker, &base).await;
        let mut digests = Vec::new();
        for i in 1..=8 {
            let local = format!("sparkctl-bisect-{tag}-{i}:{}", std::process::id());
            let dockerfile = format!(
                "FROM {base}\nLABEL org.opencontainers.image.version=nightly-{i} test.run={stamp}\nENV VLLM_VERSION=0.11.{i}\n{}",
                env(i)
            );
            support::build_image(
                &docker,
                &local,
                &[("Dockerfile", dockerfile.as_bytes(), 0o644)],
            )
            .await;
            digests.push(push(&docker, &local, &repo, "nightly").await);
            // The nightly cron: what the tag points to today, pinned.
            deck.ok(&["images", "pin", "nightly"]);
            // Nothing of it stays here: the bisect pulls what it needs back by digest.
            let id = docker.inspect_image(&local).await.unwrap().id.unwrap();
            let opts = bollard::query_parameters::RemoveImageOptionsBuilder::new()
                .force(true)
                .build();
            docker.remove_image(&id, Some(opts), None).await.unwrap();
        }
        let opts = bollard::query_parameters::RemoveImageOptionsBuilder::new()
            .force(true)
            .build();
        let _ = docker.remove_image(&base, Some(opts), None).await;
        Nightlies {
            deck,
            _registry: registry,
            repo,
            digests,
        }
    }

    fn short(&self, i: usize) -> String {
        self.digests[i - 1][7..19].to_string()
    }

    async fn here(&self, i: usize) -> bool {
        let r = format!("{}@{}", self.repo, self.digests[i - 1]);
        docker().await.inspect_image(&r).await.is_ok()
    }

    /// The bisect's record (`STATE/bisect/ID.json`), newest.
    fn record(&self) -> Value {
        let dir = self.deck.dir.join("state/bisect");
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        files.sort();
        serde_json::from_slice(&std::fs::read(files.last().unwrap()).unwrap()).unwrap()
    }

    fn measured(&self) -> usize {
        let dir = self.deck.dir.join("state/bisect");
        let any = std::fs::read_dir(&dir).is_ok_and(|mut d| {
            d.any(|e| e.is_ok_and(|e| e.path().extension().is_some_and(|x| x == "json")))
        });
        if !any {
            return 0;
        }
        self.record()["measurements"].as_object().map_or(0, |m| {
            m.values().filter(|x| x["judgement"].is_object()).count()
        })
    }

    fn serving(&self) -> Option<String> {
        self.deck
            .status()
            .into_iter()
            .find(|d| d["state"] == "running" && d["role"] == "production")
            .map(|d| d["name"].as_str().unwrap().to_string())
    }

    fn running(&self, name: &str) -> bool {
        self.deck
            .status()
            .iter()
            .any(|d| d["name"] == name && d["state"] == "running")
    }
}

/// Whatever happened, the digests go again (force: step containers may still name them).
impl Drop for Nightlies {
    fn drop(&mut self) {
        let refs: Vec<String> = self
            .digests
            .iter()
            .map(|d| format!("{}@{d}", self.repo))
            .collect();
        support::registry::remove_images(refs);
    }
}

fn ttft(i: usize) -> String {
    format!("ENV SIM_TTFT={}\n", if i >= 5 { "400ms" } else { "50ms" })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bisect_names_the_fifth_of_eight_digests_while_production_serves() {
    let n = Nightlies::build("bisect-main", ttft).await;
    let deck = &n.deck;

    // The history: eight pinned digests, oldest build first, none on this machine.
    let h = deck
        .sparkctl(&["--json", "images", "history", "nightly"])
        .succeeds()
        .json();
    let entries = h["history"]["entries"].as_array().unwrap();
    let digests: Vec<&str> = entries
        .iter()
        .map(|e| e["digest"].as_str().unwrap())
        .collect();
    assert_eq!(
        digests,
        n.digests.iter().map(String::as_str).collect::<Vec<_>>()
    );
    assert_eq!(h["history"]["order"], "created");
    assert!(entries.iter().all(|e| e["present"] == false));
    // An older digest comes back by digest; one the registry does not hold is said plainly.
    for i in [2, 3] {
        deck.sparkctl(&["images", "pull", &format!("nightly@{}", n.short(i))])
            .succeeds()
            .says("pulled");
        assert!(n.here(i).await);
    }
    let gone = format!("nightly@sha256:{}", "0".repeat(64));
    deck.sparkctl(&["images", "pull", &gone])
        .exits(1)
        .warns("the registry no longer holds this digest");

    // The plan, and ends that cannot be bisected, before anything starts.
    let plan = deck
        .sparkctl(&[
            "bisect",
            "nightly",
            "--good",
            &n.short(1),
            "--bad",
            &n.short(8),
            "--dry-run",
        ])
        .succeeds()
        .says("8 digests")
        .says("at most 3 step(s)")
        .says("nothing was started");
    println!("{}", plan.stdout());
    deck.sparkctl(&[
        "bisect",
        "nightly",
        "--good",
        &n.short(8),
        "--bad",
        &n.short(1),
    ])
    .exits(2)
    .warns("newer than");
    deck.sparkctl(&[
        "bisect",
        "nightly",
        "--good",
        "2020-01-01",
        "--bad",
        &n.short(8),
    ])
    .exits(2)
    .warns("no digest from before then");
    assert!(!deck.dir.join("state/bisect").exists() || n.measured() == 0);

    deck.sparkctl(&["rollback", "--to", "prod"]).succeeds();
    let traffic = Traffic::start(&deck.door_url(), Duration::from_millis(20));
    let began = Instant::now();
    let ran = deck
        .sparkctl(&[
            "bisect",
            "nightly",
            "--good",
            &n.short(1),
            "--bad",
            "2099-01-01",
            "--metric",
            "ttft_p50",
            "--repeat",
            "2",
        ])
        .succeeds();
    let took = began.elapsed();
    let report = traffic.stop();
    println!("{}\n{}", ran.stdout(), ran.stderr());
    let out = ran.stdout();
    assert!(
        out.contains(&format!("first bad: {}@{}", n.repo, n.digests[4])),
        "{out}"
    );
    assert!(
        out.contains(&format!("last good: {}@{}", n.repo, n.digests[3])),
        "{out}"
    );
    // What changed between the pair: the regression's ENV, the label, the build time.
    assert!(
        out.contains("env SIM_TTFT") && out.contains("400ms"),
        "{out}"
    );
    assert!(
        out.contains("label org.opencontainers.image.version"),
        "{out}"
    );
    let b = n.record();
    assert_eq!(b["status"], "done");
    let steps: Vec<&Value> = b["measurements"]
        .as_object()
        .unwrap()
        .values()
        .filter(|m| m["role"] == "step")
        .collect();
    assert!(steps.len() <= 4, "{} steps: {b}", steps.len());
    assert_eq!(steps.len(), 3, "8 digests: 3 steps after the ends");
    // Production answered throughout, and only production did.
    assert_eq!(report.failed(), 0, "{report:?}");
    assert_eq!(report.cut, 0, "{report:?}");
    assert!(report.ok > 20, "{report:?}");
    assert!(
        report.upstreams.iter().all(|u| u.starts_with("prod ")),
        "{report:?}"
    );
    assert_eq!(n.serving().as_deref(), Some("prod"));
    assert!(!n.running("nightly-bisect"), "every candidate stopped");
    println!(
        "bisect: {} measurements in {:.1} s; client: {} ok, p99 {:.1} ms",
        b["measurements"].as_object().unwrap().len(),
        took.as_secs_f64(),
        report.ok,
        support::percentile(&mut report.latency_ms.clone(), 99.0)
    );

    // Each measurement is a run record.
    let runs = deck.sparkctl(&["--json", "history"]).succeeds().json();
    let bisects: Vec<&Value> = runs
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["command"] == "bisect")
        .collect();
    assert_eq!(bisects.len(), 5, "{runs}");
    let outcomes: Vec<&str> = bisects
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(
        outcomes.iter().filter(|o| **o == "good").count(),
        2,
        "{outcomes:?}"
    );
    assert_eq!(
        outcomes.iter().filter(|o| **o == "bad").count(),
        3,
        "{outcomes:?}"
    );
    deck.sparkctl(&["history"]).succeeds().says("bisect");

    // A gate judges too: pass is good, fail is bad (the digests between 4 and 6: just 5).
    let gated = deck
        .sparkctl(&[
            "bisect",
            "nightly",
            "--good",
            &n.short(4),
            "--bad",
            &n.short(6),
            "--gate",
            "ttft_p50_ms=<= 200",
            "--repeat",
            "2",
        ])
        .succeeds()
        .says(&format!("first bad: {}@{}", n.repo, n.digests[4]))
        .says("GATE VALUE");
    println!("{}", gated.stdout());

    // Retention: newest 3 (6, 7, 8; 8 pinned), the pair the bisect found (4, 5) kept for
    // good, 3 kept by hand. 1's step container went at a later start (the newest 5 exited
    // stay), so 1 and 2 go.
    deck.sparkctl(&["images", "keep", &format!("nightly@{}", n.short(3))])
        .succeeds()
        .says("kept for good");
    let history = deck.sparkctl(&["images", "history", "nightly"]).succeeds();
    println!("{}", history.stdout());
    let dry = deck.sparkctl(&["--json", "prune"]).succeeds().json();
    let going: Vec<&str> = dry["images"]["remove"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["digest"].as_str().unwrap())
        .collect();
    assert_eq!(
        going,
        [n.digests[0].as_str(), n.digests[1].as_str()],
        "{dry}"
    );
    let pruned = deck
        .sparkctl(&["prune", "--keep", "0", "--yes"])
        .succeeds()
        .says("image removed");
    println!("{}", pruned.stdout());
    for (i, stays) in [
        (1, false),
        (2, false),
        (3, true),
        (4, true),
        (5, true),
        (6, true),
        (8, true),
    ] {
        assert_eq!(n.here(i).await, stays, "digest {i}");
    }
    deck.sparkctl(&["images", "history", "nightly"])
        .succeeds()
        .says("kept: bisect")
        .says("newest");
    deck.sparkctl(&["images", "diff", "nightly", &n.short(4), &n.short(5)])
        .succeeds()
        .says("env SIM_TTFT")
        .says("nightly-5")
        .says("created");
}

/// Waits until `check` holds (or panics after `within`).
fn wait_for(within: Duration, what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + within;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_noisy_step_is_measured_again_and_an_interrupted_bisect_resumes() {
    // Digest 6 (the second step) is the noisy one: its TTFT jitters ±100%.
    let n = Nightlies::build("bisect-noise", |i| {
        let jitter = if i == 6 {
            "ENV SIM_TTFT_JITTER=1\n"
        } else {
            ""
        };
        format!("{}{jitter}", ttft(i))
    })
    .await;
    let deck = &n.deck;
    deck.sparkctl(&["rollback", "--to", "prod"]).succeeds();
    let traffic = Traffic::start(&deck.door_url(), Duration::from_millis(50));
    // 25 GB: production (7) and a candidate (12) do not fit beside each other.
    let small = |args: &[&str]| {
        let mut c = deck.cmd(args);
        c.env("SPARKCTL_MEMORY_GB", "25");
        c
    };
    let start = [
        "bisect",
        "nightly",
        "--good",
        &n.short(1),
        "--bad",
        &n.short(8),
        "--repeat",
        "2",
        "--rounds",
        "4",
    ];
    // A step that needs production's memory stops and asks; nothing was stopped.
    let ran = support::Ran::of(&mut small(&start)).exits(1);
    assert!(ran.stderr().contains("--allow-swap"), "{}", ran.stderr());
    assert_eq!(n.serving().as_deref(), Some("prod"));

    // Ctrl-C in the middle of a measurement: the candidate stops, production serves again.
    let resume = ["bisect", "nightly", "--resume", "--allow-swap"];
    let child = small(&resume)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(Duration::from_secs(120), "the candidate", || {
        n.running("nightly-bisect")
    });
    std::thread::sleep(Duration::from_millis(500));
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--resume"),
        "{}",
        text(&out.stderr)
    );
    assert!(!n.running("nightly-bisect"));
    assert_eq!(
        n.serving().as_deref(),
        Some("prod"),
        "{}\n{:?}",
        text(&out.stderr),
        n.deck.status()
    );
    assert_eq!(n.record()["status"], "interrupted");

    // Killed outright during a step (production held and stopped for it): the next
    // --resume stops the leftover, brings production back and goes on from the records.
    let mut child = small(&resume)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(Duration::from_secs(240), "three measurements", || {
        n.measured() >= 3
    });
    // Step 1's candidate stops, then step 2's starts: killed while that one runs.
    wait_for(Duration::from_secs(60), "step 1 to end", || {
        !n.running("nightly-bisect")
    });
    wait_for(Duration::from_secs(60), "step 2's candidate", || {
        n.running("nightly-bisect")
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let before = n.measured();
    let rounds_of = |record: &Value| -> Vec<(String, usize)> {
        record["measurements"]
            .as_object()
            .unwrap()
            .iter()
            .filter(|(_, m)| m["judgement"].is_object())
            .map(|(d, m)| (d.clone(), m["rounds"].as_array().map_or(0, Vec::len)))
            .collect()
    };
    let recorded = rounds_of(&n.record());
    let ran = support::Ran::of(&mut small(&resume)).succeeds();
    let err = ran.stderr();
    println!("{}\n{err}", ran.stdout());
    assert!(err.contains("left running by an earlier bisect"), "{err}");
    assert!(
        ran.stdout()
            .contains(&format!("first bad: {}@{}", n.repo, n.digests[4])),
        "{}",
        ran.stdout()
    );
    let b = n.record();
    // Judged on whatever differs most between the ends: the time to the first token, or
    // the whole answer's time that carries it (on a loaded CPU the two run close).
    assert!(
        ["ttft", "ttfo", "e2el"].contains(&b["chosen"].as_str().unwrap()),
        "{b}"
    );
    let noisy = &b["measurements"][&n.digests[5]];
    assert!(
        noisy["rounds"].as_array().unwrap().len() >= 2,
        "the noisy step was measured again: {noisy}"
    );
    assert_eq!(noisy["judgement"]["verdict"], "bad", "{noisy}");
    assert!(err.contains("inconclusive"), "{err}");
    // Nothing recorded before the kill was measured again (a step measured after it may
    // take a second round: the noisy one always, another on a loaded CPU).
    let after = rounds_of(&b);
    assert!(before >= 3 && recorded.len() == before, "{b}");
    for (digest, rounds) in &recorded {
        assert!(
            after.contains(&(digest.clone(), *rounds)),
            "{digest} was measured again after the resume: {b}"
        );
    }
    let report = traffic.stop();
    assert_eq!(report.failed(), 0, "held, never failed: {report:?}");
    assert_eq!(n.serving().as_deref(), Some("prod"));
    let runs = deck.sparkctl(&["--json", "history"]).succeeds().json();
    assert!(runs
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["command"] == "bisect" && r["outcome"] == "interrupted"));
}

#[test]
fn a_process_recipe_is_bisected_over_a_directory_of_builds() {
    let deck = Deck::new("bisect-builds");
    std::fs::create_dir_all(deck.dir.join("recipes/suites")).unwrap();
    std::fs::write(deck.dir.join("recipes/suites/tiny.yaml"), SUITE).unwrap();
    // Six "builds" of a server, oldest first: from the fourth on, slower to the first token.
    let builds = deck.dir.join("builds");
    let paths = support::sim_builds(&builds, 6, 4, ("50ms", "400ms"));
    let path = |i: usize| paths[i - 1].clone();
    deck.recipe(
        "bin",
        &format!(
            "engine: sim\nruntime: process\nbinary: {}\nserver:\n  port: {}\n  args: [--load-time, 0s, --token-rate, \"400\", --tokens, \"8\"]\n  memory_gb: 4\nbench:\n  suite: tiny\n",
            path(6).display(),
            free_port()
        ),
    );
    let (first, last) = (path(1), path(6));
    let ran = deck
        .sparkctl(&[
            "bisect",
            "bin",
            "--builds",
            builds.to_str().unwrap(),
            "--good",
            first.to_str().unwrap(),
            "--bad",
            last.to_str().unwrap(),
            "--metric",
            "ttft_p50",
            "--repeat",
            "2",
        ])
        .succeeds()
        .says(&format!("first bad: {}", path(4).display()))
        .says(&format!("last good: {}", path(3).display()));
    println!("{}\n{}", ran.stdout(), ran.stderr());
    let runs = deck.sparkctl(&["--json", "history"]).succeeds().json();
    let steps: Vec<&Value> = runs
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["command"] == "bisect")
        .collect();
    // The two ends and two steps; each names its build by sha256, none an image.
    assert_eq!(steps.len(), 4, "{runs}");
    assert!(steps.iter().all(|r| r["image"].is_null()
        && r["bisect"]["digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")));
    assert!(deck
        .status()
        .iter()
        .all(|d| d["name"] != "bin-bisect" || d["state"] != "running"));
}
