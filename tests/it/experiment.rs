//! Issue 48, `sparkctl try`: variants of a real CPU `llama-server` recipe (threads × a flag)
//! run one at a time beside production while a client uses the production port; variant 0
//! measured beside a plain `bench` of the base; the winner saved and promoted by `up`; a
//! variant that fails to start is a row; refusals start nothing; a try that needs
//! production's memory swaps it out and back (`--allow-swap`, requests held); Ctrl-C stops
//! the variant running and `--resume` measures the rest.

use std::time::Duration;

use serde_json::Value;

use crate::support::{self, free_port, Deck, Ran, Traffic};

const SUITE: &str = "name: tiny\nwarmup: 1\nruns: 5\ncases:\n  - name: hello\n    turns: [\"Say hello.\"]\n    max_tokens: 16\n";

/// The module's tests one at a time: each measures speed, which the other would skew.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Three items, short answers: each variant's answers paired with variant 0's.
const EVAL: &str = "name: sums\nmax_tokens: 8\nitems:\n  - prompt: 2+3?\n    check: {number: 5}\n  - prompt: 4+4?\n    check: {number: 8}\n  - prompt: 10-3?\n    check: {number: 7}\n";

fn deck(tag: &str) -> Deck {
    let (binary, model) = support::llama_server_and_model();
    let deck = Deck::new(tag);
    std::fs::create_dir_all(deck.dir.join("recipes/suites")).unwrap();
    std::fs::write(deck.dir.join("recipes/suites/tiny.yaml"), SUITE).unwrap();
    std::fs::create_dir_all(deck.dir.join("recipes/evals")).unwrap();
    std::fs::write(deck.dir.join("recipes/evals/sums.yaml"), EVAL).unwrap();
    deck.recipe(
        "chat",
        &format!(
            "engine: llama-server\nruntime: process\nbinary: {}\nmodel:\n  path: {}\nserver:\n  port: {}\n  args: [-t, \"1\", -c, \"512\", -np, \"1\"]\n  memory_gb: 1\nhealth:\n  timeout: 2m\nbench:\n  suite: tiny\n  eval: [sums]\n  gates:\n    non_empty: \"== 100%\"\n",
            binary.display(),
            model.display(),
            free_port()
        ),
    );
    deck
}

/// What the front door routes production to.
fn serving(deck: &Deck) -> Value {
    let v: Value = serde_json::from_str(&deck.ok(&["--json", "frontdoor", "status"])).unwrap();
    v["upstream"]["deployment"].clone()
}

/// Recipes with a running deployment whose name marks a try's variant.
fn variants_running(deck: &Deck) -> Vec<String> {
    let v: Value = serde_json::from_str(&deck.ok(&["--json", "status"])).unwrap();
    let text = v.to_string();
    (0..8)
        .map(|i| format!("chat.try{i}"))
        .filter(|n| {
            text.contains(&format!("\"{n}\""))
                && deck.status_of(n).is_some_and(|s| s["state"] == "running")
        })
        .collect()
}

fn interval(r: &Value, metric: &str) -> (f64, f64) {
    let i = &r["confidence"][metric];
    (i["low"].as_f64().unwrap(), i["high"].as_f64().unwrap())
}

#[test]
fn variants_run_beside_production_and_the_winner_is_saved_and_promoted() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let deck = deck("try-llama");
    deck.ok(&["rollback", "--to", "chat"]);
    let production = serving(&deck);
    let client = Traffic::start(&deck.door_url(), Duration::from_millis(50));
    client.answers(3, Duration::from_secs(60));

    // Refusals: nothing starts.
    let err = deck
        .sparkctl(&["try", "chat", "--vary", "server.cpus=1|2"])
        .exits(2)
        .stderr();
    assert!(err.contains("unknown key `server.cpus`"), "{err}");
    let err = deck
        .sparkctl(&["try", "chat", "--vary", "server.args-=--mlock|~"])
        .exits(2)
        .stderr();
    assert!(
        err.contains("variant 1 (chat.try1") && err.contains("has no --mlock"),
        "{err}"
    );
    assert!(variants_running(&deck).is_empty());

    // A plain benchmark of the base before and after four variants beside it: threads × a
    // flag. Variant 0 is the base again: its interval overlaps the spread of the base's own
    // over the try (on a CI machine whose load rises while the try runs, the base's figure
    // moves as much as anything the try measures).
    let plain = |tag: &str| -> Value {
        let path = deck.dir.join(format!("plain-{tag}.json"));
        deck.ok(&[
            "bench",
            "chat",
            "--repeat",
            "2",
            "--out",
            path.to_str().unwrap(),
        ]);
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
    };
    let before = plain("before");
    let args = [
        "--json",
        "try",
        "chat",
        "--vary",
        "server.args=-t=1|-t=2",
        "--vary",
        "server.args+=--no-warmup|~",
        "--save",
        "chat-best",
    ];
    let out = deck.sparkctl(&args).succeeds().json();
    let trial = &out["try"];
    let variants = trial["variants"].as_array().unwrap();
    assert_eq!(variants.len(), 5, "{trial}");
    assert_eq!(variants[0]["label"], "base");
    assert!(
        variants[1]["command"].to_string().contains("--no-warmup"),
        "{trial}"
    );
    for v in variants {
        let m = &v["measured"];
        assert!(m["failed"].is_null(), "{v}");
        // Its evaluation answers, and past the base, paired with variant 0's item by item.
        assert!(m["eval_accuracy_pct"].is_number(), "{v}");
        if v["index"] != 0 {
            let paired = m["eval_vs_base"].as_str().unwrap_or_default();
            assert!(
                paired.contains("variant 0") && paired.contains("McNemar"),
                "{v}"
            );
            println!("evaluation: {paired}");
        }
        assert_eq!(m["verdict"], "pass", "{v}");
        assert!(m["start_s"].as_f64().unwrap() > 0.0, "{v}");
    }
    let after = plain("after");
    let v0 = &variants[0]["measured"];
    let v0_p50 = v0["decode_tps_p50"].as_f64().unwrap();
    let (bl, bh) = interval(&before, "decode");
    let (al, ah) = interval(&after, "decode");
    println!(
        "decode p50: the base by a plain bench {:.0} tok/s (95% {bl:.0}-{bh:.0}) before the try, \
         {:.0} (95% {al:.0}-{ah:.0}) after; variant 0 {v0_p50:.0} tok/s (95% {:.0}-{:.0}); \
         the variants {:?}",
        before["decode_tps_p50"].as_f64().unwrap(),
        after["decode_tps_p50"].as_f64().unwrap(),
        v0["decode_interval"][0].as_f64().unwrap_or(f64::NAN),
        v0["decode_interval"][1].as_f64().unwrap_or(f64::NAN),
        variants
            .iter()
            .map(|v| v["measured"]["decode_tps_p50"].as_f64().unwrap().round())
            .collect::<Vec<_>>()
    );
    // The report in a real browser: every variant's row and its lines in the charts, no
    // script error.
    let page = std::path::PathBuf::from(out["report"].as_str().unwrap());
    let shot = deck.dir.join("try-report.png");
    let (dom, log) = support::chromium_file(&page, &shot);
    assert!(dom.contains("data-rendered=\"ok:"), "{:.800}", dom);
    for v in variants {
        let i = v["index"].as_u64().unwrap();
        assert!(dom.contains(&format!("data-variant=\"{i}\"")), "row {i}");
        let name = v["name"].as_str().unwrap();
        assert!(
            dom.matches(name).count() >= 2,
            "{name}: its row and its plots"
        );
    }
    assert!(
        support::script_errors(&log).is_empty(),
        "{:?}",
        support::script_errors(&log)
    );
    if let Some(dir) = std::env::var_os("SPARKCTL_TEST_SCREENSHOTS") {
        std::fs::copy(&shot, std::path::Path::new(&dir).join("try-report.png")).unwrap();
    }
    // Within the spread as `try` itself calls it: the intervals overlap.
    let (vl, vh) = (
        v0["decode_interval"][0].as_f64().unwrap(),
        v0["decode_interval"][1].as_f64().unwrap(),
    );
    assert!(
        vl <= bh.max(ah) && bl.min(al) <= vh,
        "variant 0 at {vl:.0}-{vh:.0} tok/s, the base's own {bl:.0}-{bh:.0} before and {al:.0}-{ah:.0} after"
    );
    // Production untouched throughout; nothing of the try left running.
    assert_eq!(serving(&deck), production);
    assert!(variants_running(&deck).is_empty());
    let history = deck.ok(&["history"]);
    assert_eq!(history.matches(" try ").count(), 5, "{history}");

    // A variant that fails to start is a row with its fatal line; the try goes on.
    let out = deck
        .sparkctl(&[
            "--json",
            "try",
            "chat",
            "--with",
            "server.args+=--no-such-flag",
        ])
        .succeeds()
        .json();
    let failed = out["try"]["variants"][1]["measured"]["failed"]
        .as_str()
        .unwrap_or_default();
    assert!(failed.contains("no-such-flag"), "{out}");
    assert_eq!(out["try"]["variants"][0]["measured"]["verdict"], "pass");

    // The winner, saved, is promoted the usual way.
    let saved = out_path(&deck, "chat-best");
    let text = std::fs::read_to_string(&saved).unwrap();
    assert!(text.starts_with("# Variant "), "{text}");
    deck.sparkctl(&["up", "chat-best", "--yes"])
        .promoted("chat-best", deck.door_port);
    let report = client.stop();
    assert_eq!(report.failed(), 0, "{report:?}");
    assert_eq!(report.cut, 0, "{report:?}");
}

fn out_path(deck: &Deck, name: &str) -> std::path::PathBuf {
    deck.dir.join(format!("recipes/{name}.yaml"))
}

#[test]
fn a_try_that_needs_production_s_memory_swaps_it_and_a_ctrl_c_is_resumed() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let deck = deck("try-swap");
    deck.ok(&["rollback", "--to", "chat"]);
    let client = Traffic::start(&deck.door_url(), Duration::from_millis(50));
    client.answers(3, Duration::from_secs(60));
    // A pool that holds one server: the variant does not fit beside production.
    let pool = |args: &[&str]| {
        let mut c = deck.cmd(args);
        c.env("SPARKCTL_MEMORY_GB", "1.5")
            .env("SPARKCTL_MEMORY_RESERVE_GB", "0");
        c
    };
    let err = Ran::of(&mut pool(&["try", "chat", "--with", "server.args=-t=2"]))
        .exits(2)
        .stderr();
    assert!(
        err.contains("does not fit beside production chat") && err.contains("--allow-swap"),
        "{err}"
    );
    assert!(variants_running(&deck).is_empty());
    let ran = Ran::of(&mut pool(&[
        "--json",
        "try",
        "chat",
        "--with",
        "server.args=-t=2",
        "--allow-swap",
    ]))
    .succeeds();
    let out = ran.json();
    for v in out["try"]["variants"].as_array().unwrap() {
        assert_eq!(v["swaps"], true, "{v}");
        assert_eq!(v["measured"]["verdict"], "pass", "{v}");
    }
    assert!(deck
        .status_of("chat")
        .is_some_and(|s| s["state"] == "running"));
    let report = client.stop();
    assert_eq!(report.failed(), 0, "held, then served: {report:?}");
    let longest = report.latency_ms.iter().copied().fold(0.0, f64::max);
    println!("a client through two swapped variants: {} answered, 0 failed, longest wait {longest:.0} ms", report.ok);

    // Ctrl-C while variant 1 runs: it is stopped, the try kept; --resume measures it.
    let mut child = deck
        .cmd(&["try", "chat", "--vary", "server.args=-t=1|-t=2"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let tries = deck.dir.join("state/tries");
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let kept = loop {
        assert!(
            std::time::Instant::now() < deadline,
            "variant 0 never measured"
        );
        let found = std::fs::read_dir(&tries).ok().and_then(|d| {
            // The try's own file: not a write in progress (a dot file beside it).
            let kept = |p: &std::path::PathBuf| {
                let name = p.file_name().and_then(|n| n.to_str()).unwrap_or(".");
                !name.starts_with('.') && name.ends_with(".json")
            };
            d.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(kept)
                .find(|p| {
                    std::fs::read_to_string(p).is_ok_and(|t| {
                        let v: Value = serde_json::from_str(&t).unwrap_or_default();
                        !v["variants"][0]["measured"].is_null()
                            && v["variants"][1]["measured"].is_null()
                    })
                })
        });
        if let Some(p) = found {
            break p;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    std::thread::sleep(Duration::from_millis(300));
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert!(!status.success());
    assert!(variants_running(&deck).is_empty(), "a variant left running");
    let id = kept.file_stem().unwrap().to_str().unwrap().to_string();
    let out = deck
        .sparkctl(&["--json", "try", "--resume", &id])
        .succeeds()
        .json();
    let variants = out["try"]["variants"].as_array().unwrap();
    assert!(
        variants.iter().all(|v| v["measured"]["verdict"] == "pass"),
        "{out}"
    );
}
