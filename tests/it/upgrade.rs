//! `sparkctl upgrade` against a real local registry (Debian's `docker-registry`) and the
//! simulated engine's image: each "night" a new image is pushed under the same tag, and
//! the upgrade follows it — a good night promoted (the pin moved, the old digest kept), a
//! night whose model gets 20 points fewer answers right rejected by the evaluation gate
//! (the pin stays), an unchanged tag that runs nothing, and bad input refused.

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::registry::{push, Registry};
use crate::support::{self, docker, free_port, Deck};

const SUITE: &str = "name: tiny\nwarmup: 1\nruns: 5\ncases:\n  - name: factual\n    turns: [\"What is the capital of Japan?\"]\n    expect: Tokyo\n    max_tokens: 8\n";

/// The registry, a deck with production (a sim host process, `prod`) and the recipe that
/// follows the tag (`nightly`), and the nights pushed so far.
pub(crate) struct Nights {
    pub(crate) deck: Deck,
    _registry: Registry,
    pub(crate) repo: String,
    base: String,
    tag: String,
    digests: Vec<String>,
    /// The nightly recipe's port.
    port: u16,
}

impl Nights {
    pub(crate) async fn new(tag: &str) -> Nights {
        let docker = docker().await;
        let (registry, deck, repo) = support::registry::with_deck(tag, SUITE);
        deck.recipe(
            "prod",
            &format!(
                "engine: sim\nruntime: process\nserver:\n  port: {}\n  args: [--ttft, 2ms, --token-rate, \"2000\"]\n  memory_gb: 1\n",
                free_port()
            ),
        );
        let port = free_port();
        // Its own sim image: the shared test tag may hold another checkout's binary.
        let base = format!("sparkctl-sim-{tag}:{}", std::process::id());
        support::build_sim_image(&docker, &base).await;
        let n = Nights {
            deck,
            _registry: registry,
            repo,
            base,
            tag: tag.to_string(),
            digests: Vec::new(),
            port,
        };
        n.recipe("");
        n.deck
            .sparkctl(&["up", "prod", "--yes"])
            .promoted("prod", n.deck.door_port);
        n
    }

    /// The recipe that follows the tag, with `more` (a `notify:` section) after it.
    pub(crate) fn recipe(&self, more: &str) {
        self.deck.recipe(
            "nightly",
            &format!(
                "engine: sim\nruntime: docker\nimage: {}:nightly\nserver:\n  port: {}\n  args: [--ttft, 2ms, --token-rate, \"2000\"]\n  memory_gb: 1\nhealth:\n  timeout: 30s\nbench:\n  suite: tiny\n  eval: [arithmetic, facts]\n  gates:\n    eval_accuracy: \">= production - 3\"\n{more}",
                self.repo, self.port
            ),
        );
    }

    /// Tonight's image (`env`: its extra ENV lines) pushed under the tag; its digest.
    pub(crate) async fn push(&mut self, env: &str) -> String {
        let docker = docker().await;
        let night = self.digests.len() + 1;
        let local = format!(
            "sparkctl-upgrade-{}-{night}:{}",
            self.tag,
            std::process::id()
        );
        // Built afresh each run (the stamp): a cached build would keep an earlier run's
        // build date, and the history orders digests by it.
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dockerfile = format!(
            "FROM {}\nLABEL org.opencontainers.image.version=nightly-{night} test.run={stamp}\n{env}",
            self.base
        );
        support::build_image(
            &docker,
            &local,
            &[("Dockerfile", dockerfile.as_bytes(), 0o644)],
        )
        .await;
        let digest = push(&docker, &local, &self.repo, "nightly").await;
        // Nothing of it stays here under its build name: the upgrade pulls by digest.
        let opts = bollard::query_parameters::RemoveImageOptionsBuilder::new().build();
        let _ = docker.remove_image(&local, Some(opts), None).await;
        self.digests.push(digest.clone());
        digest
    }

    pub(crate) fn pinned(&self) -> Value {
        let lock = std::fs::read_to_string(self.deck.dir.join("images.lock")).unwrap_or_default();
        let v: serde_yaml_ng::Value = serde_yaml_ng::from_str(&lock).unwrap_or_default();
        serde_json::to_value(&v["images"]["nightly"]).unwrap()
    }

    pub(crate) fn history(&self) -> Vec<Value> {
        self.deck
            .sparkctl(&["--json", "history"])
            .succeeds()
            .json()
            .as_array()
            .unwrap()
            .clone()
    }

    /// Who the front door routes production to: (recipe, deployment id).
    pub(crate) fn production(&self) -> (String, String) {
        let d = self
            .deck
            .status()
            .into_iter()
            .find(|d| d["role"] == "production")
            .expect("a production");
        (
            d["name"].as_str().unwrap().to_string(),
            d["id"].as_str().unwrap().to_string(),
        )
    }
}

/// The digests go again, whatever happened (force: containers may still name them).
impl Drop for Nights {
    fn drop(&mut self) {
        let mut refs: Vec<String> = self
            .digests
            .iter()
            .map(|d| format!("{}@{d}", self.repo))
            .collect();
        refs.push(self.base.clone());
        support::registry::remove_images(refs);
    }
}

/// A webhook receiver on a free loopback port: every request's head and body, kept; it
/// answers as `Reply` says.
struct Hook {
    url: String,
    got: Arc<Mutex<Vec<(String, String)>>>,
}

/// How a `Hook` answers.
#[derive(Clone)]
enum Reply {
    Ok,
    /// Holds the connection and never answers.
    Silent,
    /// 302 to this URL.
    Redirect(String),
}

impl Hook {
    fn start(reply: Reply) -> Hook {
        let listener = std::net::TcpListener::bind(("127.0.0.1", free_port())).unwrap();
        let url = format!("http://{}/hooks/spark", listener.local_addr().unwrap());
        let got = Arc::new(Mutex::new(Vec::new()));
        let sink = got.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let (sink, reply) = (sink.clone(), reply.clone());
                std::thread::spawn(move || Hook::serve(conn, &sink, reply));
            }
        });
        Hook { url, got }
    }

    fn serve(mut conn: std::net::TcpStream, sink: &Mutex<Vec<(String, String)>>, reply: Reply) {
        use std::io::{Read, Write};
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let (head, body) = loop {
            let Ok(n) = conn.read(&mut chunk) else { return };
            if n == 0 {
                return;
            }
            buf.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&buf).to_string();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let len: usize = head
                    .lines()
                    .find_map(|l| {
                        l.to_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse().unwrap_or(0))
                    })
                    .unwrap_or(0);
                if body.len() >= len {
                    break (head.to_string(), body.to_string());
                }
            }
        };
        sink.lock().unwrap().push((head, body));
        let status = match reply {
            Reply::Silent => return std::thread::sleep(Duration::from_secs(60)),
            Reply::Ok => "200 OK".to_string(),
            Reply::Redirect(to) => format!("302 Found\r\nlocation: {to}"),
        };
        let _ = conn.write_all(
            format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                .as_bytes(),
        );
    }

    fn received(&self) -> Vec<(String, Value)> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .map(|(h, b)| (h.clone(), serde_json::from_str(b).unwrap_or(Value::Null)))
            .collect()
    }
}

/// A token the webhook carries, from the environment: never printed, never recorded.
const TOKEN: &str = "tok-9f8e7d6c5b4a";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn good_nights_are_promoted_and_an_unchanged_tag_runs_nothing() {
    let mut n = Nights::new("upgrade-good").await;
    let hook = Hook::start(Reply::Ok);
    let told = n.deck.dir.join("told.json");
    n.recipe(&format!(
        "notify:\n  webhook: \"{}?key=${{SPARKCTL_HOOK_TOKEN}}\"\n  headers:\n    Authorization: \"Bearer ${{SPARKCTL_HOOK_TOKEN}}\"\n  command: [tee, {}]\n",
        hook.url,
        told.display()
    ));
    let d1 = n.push("").await;
    let mut cmd = n.deck.cmd(&["--json", "upgrade", "nightly"]);
    let ran = support::Ran::of(cmd.env("SPARKCTL_HOOK_TOKEN", TOKEN)).succeeds();
    assert!(!ran.shown().contains(TOKEN), "the token is never printed");
    let r = ran.json();
    assert_eq!(
        (r["outcome"].as_str(), r["new"].as_str()),
        (Some("promoted"), Some(d1.as_str())),
        "{r}"
    );
    assert!(r["old"].is_null());
    assert_eq!(n.pinned()["digest"], d1.as_str());
    assert_eq!(n.production().0, "nightly");
    // The owner is told: the webhook (the token in its header and URL, from the
    // environment) and the command (the same document on its stdin).
    let got = hook.received();
    assert_eq!(got.len(), 1, "{got:?}");
    let (head, doc) = &got[0];
    assert!(
        head.starts_with(&format!("POST /hooks/spark?key={TOKEN} "))
            && head.contains(&format!("authorization: Bearer {TOKEN}")),
        "{head}"
    );
    assert_eq!(
        (doc["outcome"].as_str(), doc["recipe"].as_str()),
        (Some("promoted"), Some("nightly"))
    );
    assert_eq!(doc["digest"]["new"], d1.as_str());
    assert!(doc["digest"]["old"].is_null());
    assert_eq!(doc["run_id"], r["run_id"]);
    let g = &doc["gates"][0];
    assert_eq!(
        (
            g["gate"].as_str(),
            g["outcome"].as_str(),
            g["value"].as_f64()
        ),
        (Some("eval_accuracy"), Some("pass"), Some(0.0)),
        "{g}"
    );
    assert_eq!(
        doc["evaluation"]["candidate"]["accuracy_pct"], 100.0,
        "{doc}"
    );
    assert_eq!(doc["evaluation"]["production"]["items"], 50, "{doc}");
    let file: Value = serde_json::from_slice(&std::fs::read(&told).unwrap()).unwrap();
    assert_eq!(file["run_id"], doc["run_id"]);
    let record = n.history()[0].to_string();
    assert!(
        record.contains("\"notified\"") && !record.contains(TOKEN),
        "{record}"
    );
    assert!(
        record.contains("${SPARKCTL_HOOK_TOKEN}: sent (HTTP 200 OK)"),
        "{record}"
    );

    // Nothing new tonight: nothing runs, and it is said and recorded.
    let before = n.production();
    let runs = n.history().len();
    n.deck
        .sparkctl(&["upgrade", "nightly"])
        .succeeds()
        .says("upgrade nightly unchanged: ")
        .says("as pinned: nothing to do");
    assert_eq!(
        hook.received().len(),
        1,
        "`unchanged` is not told by default"
    );
    assert_eq!(n.production(), before, "the same instance serves");
    let h = n.history();
    assert_eq!(h.len(), runs + 1);
    assert_eq!(
        (h[0]["command"].as_str(), h[0]["outcome"].as_str()),
        (Some("upgrade"), Some("unchanged"))
    );
    assert!(
        h[0]["phases"].as_array().unwrap().is_empty(),
        "nothing ran: {}",
        h[0]
    );

    // The next good night: production's own recipe is replaced by the new digest.
    let d2 = n.push("ENV VLLM_VERSION=0.11.2\n").await;
    let dry = n
        .deck
        .sparkctl(&["upgrade", "nightly", "--dry-run"])
        .succeeds();
    assert!(
        dry.stdout().contains("would pull and keep it"),
        "{}",
        dry.shown()
    );
    assert_eq!(
        n.pinned()["digest"],
        d1.as_str(),
        "a dry run changes nothing"
    );
    let r = n
        .deck
        .sparkctl(&["--json", "upgrade", "nightly"])
        .succeeds()
        .json();
    assert_eq!(
        (r["outcome"].as_str(), r["old"].as_str(), r["new"].as_str()),
        (Some("promoted"), Some(d1.as_str()), Some(d2.as_str())),
        "{r}"
    );
    let pin = n.pinned();
    assert_eq!(pin["digest"], d2.as_str());
    assert_eq!(
        pin["history"][0]["digest"],
        d1.as_str(),
        "the old digest stays in the lock"
    );
    let (who, id) = n.production();
    assert_eq!(who, "nightly");
    assert_ne!(id, before.1, "the new instance serves");
    let run = &n.history()[0];
    assert_eq!(run["command"], "upgrade");
    assert_eq!(run["upgrade"]["pinned"], true);
    assert_eq!(run["gates"][0]["outcome"], "pass", "{}", run["gates"]);
    // The old digest stays here: it served production, as the image history says, and
    // prune keeps it even with no newest digests kept.
    let mut cmd = n.deck.cmd(&["--json", "images", "history", "nightly"]);
    let h = support::Ran::of(cmd.env("SPARKCTL_KEEP_IMAGES", "0"))
        .succeeds()
        .json();
    let old = h["history"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["digest"] == d1.as_str())
        .expect("the old digest in the history")
        .clone();
    assert_eq!(old["present"], true, "{old}");
    let why = h["retained"][d1.as_str()].to_string();
    assert!(why.contains("served-production"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_night_that_gets_20_points_fewer_right_is_rejected_and_the_pin_stays() {
    let mut n = Nights::new("upgrade-bad").await;
    // The owner's webhook never answers: the outcome stands, the failure is said and kept.
    let hook = Hook::start(Reply::Silent);
    n.recipe(&format!(
        "notify:\n  webhook: {}\n  on: [rejected]\n  timeout: 2s\n",
        hook.url
    ));
    let d1 = n.push("").await;
    n.deck.sparkctl(&["upgrade", "nightly"]).succeeds();
    assert_eq!(n.pinned()["digest"], d1.as_str());
    let before = n.production();
    let d2 = n.push("ENV SIM_EVAL_WRONG=20%\n").await;
    let ran = n.deck.sparkctl(&["upgrade", "nightly"]).exits(1);
    let out = ran.shown();
    assert!(
        out.contains("upgrade nightly rejected: ")
            && out.contains("eval_accuracy >= production - 3 (measured -20.0)")
            && out.contains("it got wrong 10 item(s) production got right: "),
        "{out}"
    );
    assert_eq!(n.pinned()["digest"], d1.as_str(), "the pin stays");
    assert_eq!(
        n.production().0,
        "nightly",
        "production serves again: {before:?}"
    );
    let run = &n.history()[0];
    assert_eq!(
        (run["command"].as_str(), run["outcome"].as_str()),
        (Some("upgrade"), Some("rejected"))
    );
    assert_eq!(run["upgrade"]["new"], d2.as_str());
    assert_eq!(run["upgrade"]["pinned"], false);
    let lost = run["eval"]["lost"].as_array().unwrap();
    assert_eq!(lost.len(), 10, "{}", run["eval"]);
    for k in lost {
        assert!(out.contains(k.as_str().unwrap()), "{k} named");
    }
    let said = format!("webhook {}: NOT sent: no answer within 2s", hook.url);
    assert!(out.contains(&format!("notify: {said}")), "{out}");
    assert_eq!(run["upgrade"]["notified"][0], said.as_str());
    let got = hook.received();
    assert_eq!(got.len(), 1, "only `rejected` is told");
    assert_eq!(got[0].1["outcome"], "rejected");
    assert_eq!(got[0].1["evaluation"]["lost"].as_array().unwrap().len(), 10);
}

fn short(d: &str) -> &str {
    &d[..19]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nights_skipped_then_a_bad_one_and_the_bisect_names_the_first_bad_digest() {
    let mut n = Nights::new("upgrade-skip").await;
    let hook = Hook::start(Reply::Ok);
    n.recipe(&format!("notify:\n  webhook: {}\n", hook.url));
    let d1 = n.push("").await;
    n.deck.sparkctl(&["upgrade", "nightly"]).succeeds();
    // Night 2 (good): fetched and kept, not deployed.
    let d2 = n.push("ENV VLLM_VERSION=0.11.2\n").await;
    n.deck
        .sparkctl(&["upgrade", "nightly", "--fetch-only"])
        .succeeds()
        .says("upgrade nightly skipped: --fetch-only");
    // Night 3 (the model gets worse): another command holds the state dir; the upgrade
    // waits its while, then fetches, keeps and skips.
    let d3 = n.push("ENV SIM_EVAL_WRONG=20%\n").await;
    let holder = support::LockHolder::take(&n.deck.state());
    n.deck
        .sparkctl(&["upgrade", "nightly", "--wait", "2s"])
        .succeeds()
        .warns("waiting (up to 2s): another sparkctl is changing state")
        .says("upgrade nightly skipped: another sparkctl is changing state");
    drop(holder);
    // Night 4 (worse still): fetched only.
    let d4 = n
        .push("ENV SIM_EVAL_WRONG=20%\nENV VLLM_VERSION=0.11.4\n")
        .await;
    n.deck
        .sparkctl(&["upgrade", "nightly", "--fetch-only"])
        .succeeds();
    let h = n.history();
    assert!(
        h[..3]
            .iter()
            .all(|r| r["outcome"] == "skipped" && r["upgrade"]["skipped"].is_string()),
        "{h:?}"
    );
    // Night 5: rejected, and the bisect over what lies between names night 3.
    let d5 = n
        .push("ENV SIM_EVAL_WRONG=20%\nENV VLLM_VERSION=0.11.5\n")
        .await;
    let began = Instant::now();
    let ran = n.deck.sparkctl(&["upgrade", "nightly"]).exits(1);
    let out = ran.shown();
    println!(
        "{out}\n(the upgrade and its bisect: {:.1} s)",
        began.elapsed().as_secs_f64()
    );
    assert!(
        out.contains("3 digest(s) were fetched and kept since the last good")
            && out.contains(&format!("first bad digest: {}", short(&d3))),
        "{out}"
    );
    assert_eq!(n.pinned()["digest"], d1.as_str(), "the pin stays");
    // Its measurements are runs of their own (command `bisect`), after the upgrade's.
    let h = n.history();
    let run = h.iter().find(|r| r["command"] == "upgrade").unwrap();
    assert_eq!(run["outcome"], "rejected");
    assert!(h.iter().take_while(|r| r["command"] == "bisect").count() >= 3);
    let b = &run["upgrade"]["bisect"];
    assert_eq!(b["first_bad"], d3.as_str(), "{b}");
    assert_eq!(b["last_good"], d2.as_str(), "{b}");
    // The owner is told which digest was the first bad one.
    let got = hook.received();
    let told = &got.last().unwrap().1;
    assert_eq!(
        (told["outcome"].as_str(), told["first_bad"].as_str()),
        (Some("rejected"), Some(d3.as_str())),
        "{told}"
    );
    assert_eq!(
        got.iter()
            .filter(|(_, d)| d["outcome"] == "skipped")
            .count(),
        3,
        "each skipped night is told"
    );
    assert!(
        b["judged_on"]
            .as_str()
            .unwrap()
            .starts_with("gate eval_accuracy=>= 97.0%"),
        "{b}"
    );
    // The pair stays kept for good; the upgrade's own keeps are released.
    let h = n
        .deck
        .sparkctl(&["--json", "images", "history", "nightly"])
        .succeeds()
        .json();
    let kept = |d: &str| {
        h["history"]["entries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["digest"] == d)
            .map(|e| e["kept"].as_str().unwrap_or("").to_string())
            .unwrap()
    };
    assert!(kept(&d2).ends_with("last good"), "{}", kept(&d2));
    assert!(kept(&d3).ends_with("first bad"), "{}", kept(&d3));
    assert_eq!((kept(&d4), kept(&d5)), (String::new(), String::new()));
}

/// A webhook that answers with a redirect: the answer is said, and the URL's token and the
/// headers go nowhere the recipe does not name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_s_redirect_is_not_followed() {
    let mut n = Nights::new("upgrade-redirect").await;
    let elsewhere = Hook::start(Reply::Ok);
    let hook = Hook::start(Reply::Redirect(elsewhere.url.clone()));
    n.recipe(&format!(
        "notify:\n  webhook: \"{}?key=${{SPARKCTL_HOOK_TOKEN}}\"\n  headers:\n    Authorization: \"Bearer ${{SPARKCTL_HOOK_TOKEN}}\"\n",
        hook.url
    ));
    n.push("").await;
    let mut cmd = n.deck.cmd(&["upgrade", "nightly", "--fetch-only"]);
    let ran = support::Ran::of(cmd.env("SPARKCTL_HOOK_TOKEN", TOKEN)).succeeds();
    let out = ran.shown();
    assert!(!out.contains(TOKEN), "{out}");
    assert!(
        out.contains(&format!(
            "webhook {}?key=${{SPARKCTL_HOOK_TOKEN}}: NOT sent: it answered HTTP 302 Found",
            hook.url
        )),
        "{out}"
    );
    assert_eq!(hook.received().len(), 1, "the webhook was asked once");
    assert!(
        elsewhere.received().is_empty(),
        "the redirect was followed: {:?}",
        elsewhere.received()
    );
}

#[test]
fn a_recipe_with_no_tag_to_follow_is_refused_naming_its_file_and_key() {
    let deck = Deck::new("upgrade-notag");
    deck.recipe(
        "hand-built",
        &format!(
            "engine: sim\nruntime: process\nserver:\n  port: {}\n",
            free_port()
        ),
    );
    let err = deck.sparkctl(&["upgrade", "hand-built"]).exits(2).stderr();
    assert!(
        err.contains(
            "hand-built.yaml:3:1: runtime: hand-built runs a host process, which has no tag to follow"
        ),
        "{err}"
    );
    deck.recipe(
        "pinned",
        &format!(
            "engine: sim\nruntime: docker\nimage: 127.0.0.1:5000/spark/sim@sha256:{}\nserver:\n  port: {}\n",
            "a".repeat(64),
            free_port()
        ),
    );
    let err = deck.sparkctl(&["upgrade", "pinned"]).exits(2).stderr();
    assert!(
        err.contains("pinned.yaml:4:1: image: `127.0.0.1:5000/spark/sim@sha256:")
            && err.contains("image: ")
            && err.contains("names a digest, not a tag"),
        "{err}"
    );
    assert!(
        !deck.dir.join("state/runs").exists()
            || std::fs::read_dir(deck.dir.join("state/runs"))
                .unwrap()
                .next()
                .is_none(),
        "nothing recorded for bad input"
    );
}

#[test]
fn the_schedule_is_a_systemd_user_timer_that_systemd_analyze_accepts() {
    let deck = Deck::new("upgrade-schedule");
    deck.recipe(
        "nightly",
        &format!(
            "engine: sim\nruntime: docker\nimage: 127.0.0.1:5000/spark/sim:nightly\nserver:\n  port: {}\n",
            free_port()
        ),
    );
    let config = deck.dir.join("config");
    let run = |args: &[&str]| {
        let mut cmd = deck.cmd(args);
        support::Ran::of(cmd.env("XDG_CONFIG_HOME", &config))
    };
    run(&["upgrade", "nightly", "--schedule", "03:30"])
        .succeeds()
        .says("upgrade nightly scheduled (OnCalendar=*-*-* 03:30:00)")
        .says("systemd: ");
    let dir = config.join("systemd/user");
    let (service, timer) = (
        dir.join("sparkctl-upgrade-nightly.service"),
        dir.join("sparkctl-upgrade-nightly.timer"),
    );
    let unit = std::fs::read_to_string(&service).unwrap();
    let exec = unit.lines().find(|l| l.starts_with("ExecStart=")).unwrap();
    let state = deck.state();
    assert_eq!(
        exec,
        format!(
            "ExecStart={} --state-dir {} --recipes {} --lock {} upgrade nightly",
            env!("CARGO_BIN_EXE_sparkctl"),
            state.display(),
            deck.dir.join("recipes").display(),
            deck.dir.join("images.lock").display()
        ),
        "this binary's argv, absolute paths, no shell"
    );
    assert!(
        unit.contains("Type=oneshot\nKillMode=process\n")
            && unit.contains(&format!(
                "Environment=SPARKCTL_PRODUCTION_PORT={}",
                deck.door_port
            )),
        "{unit}"
    );
    let t = std::fs::read_to_string(&timer).unwrap();
    assert!(
        t.contains(
            "OnCalendar=*-*-* 03:30:00\nPersistent=true\nUnit=sparkctl-upgrade-nightly.service"
        ),
        "{t}"
    );
    // systemd's own reading of both units.
    let verify = |paths: &[&std::path::Path]| {
        Command::new("systemd-analyze")
            .arg("verify")
            .args(paths)
            .output()
            .expect("systemd-analyze runs (Debian package `systemd`)")
    };
    let v = verify(&[&service, &timer]);
    assert!(
        v.status.success() && v.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&v.stderr)
    );
    // The check can fail: a calendar systemd cannot read is refused.
    let broken = deck.dir.join("sparkctl-upgrade-broken.timer");
    std::fs::write(&broken, t.replace("03:30:00", "25:99:00")).unwrap();
    assert!(!verify(&[&service, &broken]).status.success());
    // Daily, and bad times refused before anything is written.
    run(&["upgrade", "nightly", "--schedule", "daily"]).succeeds();
    assert!(std::fs::read_to_string(&timer)
        .unwrap()
        .contains("OnCalendar=daily\n"));
    run(&["upgrade", "nightly", "--schedule", "25:00"]).exits(2);
    // Taken away, and said when there is nothing to take.
    run(&["upgrade", "nightly", "--unschedule"])
        .succeeds()
        .says("upgrade nightly unscheduled");
    assert!(!service.exists() && !timer.exists());
    run(&["upgrade", "nightly", "--unschedule"])
        .succeeds()
        .says("no schedule of upgrade nightly is installed");
    // A recipe with no tag to follow gets no timer.
    deck.recipe(
        "hand-built",
        &format!(
            "engine: sim\nruntime: process\nserver:\n  port: {}\n",
            free_port()
        ),
    );
    run(&["upgrade", "hand-built", "--schedule", "daily"]).exits(2);
    assert!(!dir.join("sparkctl-upgrade-hand-built.timer").exists());
}
