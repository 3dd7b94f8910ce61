//! Issue 27: production's traffic captured by the real front door (behind an API key) and
//! replayed against the real sim by `bench --replay captured` and by `up` with `captured`
//! as its suite; the capture is opt-in, bounded, private, and nothing secret reaches disk.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::{self, free_port, Deck, Ran};

const KEY: &str = "door-key-Zq7xV93nLk";
const SECRETS: &[&str] = &[
    KEY,
    "sk-live-4f9a8b7c6d5e4f3a2b1c",
    "tok-SECRET-8812",
    "alice@example.com",
    "hf_abcdefghijklmnopqrstu",
];

fn sim(deck: &Deck, name: &str, extra: &str) {
    deck.recipe(
        name,
        &format!(
            "engine: sim\nruntime: process\nserver:\n  port: {}\n  args: [--load-time, 200ms, --ttft, 2ms, --token-rate, \"2000\", --tokens, \"8\"]\n  memory_gb: 7\nhealth:\n  timeout: 30s\n{extra}",
            free_port()
        ),
    );
}

fn with_key(deck: &Deck, args: &[&str]) -> Ran {
    Ran::of(deck.cmd(args).env("SPARKCTL_FRONTDOOR_API_KEY", KEY))
}

/// Sends one chat request to the production port; its status.
fn ask(url: &str, key: &str, body: Value) -> u16 {
    let (url, key) = (url.to_string(), key.to_string());
    support::block_on(async move {
        let r = reqwest::Client::new()
            .post(format!("{url}/v1/chat/completions"))
            .bearer_auth(key)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let _ = r.text().await;
        status
    })
}

fn capture_dir(deck: &Deck) -> PathBuf {
    deck.dir.join("state/frontdoor/capture")
}

fn captured_lines(deck: &Deck) -> Vec<Value> {
    ["requests.1.jsonl", "requests.jsonl"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(capture_dir(deck).join(f)).ok())
        .flat_map(|t| {
            t.lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect::<Vec<_>>()
        })
        .collect()
}

fn wait_captured(deck: &Deck, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while captured_lines(deck).len() < n {
        assert!(
            Instant::now() < deadline,
            "{} captured of {n}",
            captured_lines(deck).len()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every file under `dir`, with its bytes.
fn all_files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(all_files(&p));
        } else if let Ok(bytes) = std::fs::read(&p) {
            out.push((p, bytes));
        }
    }
    out
}

fn prompt(i: usize) -> String {
    match i {
        2 => {
            "Question 2: my token is hf_abcdefghijklmnopqrstu, what is the capital of Japan?".into()
        }
        i => format!("Question {i}: what is the capital of Japan?"),
    }
}

#[test]
fn captured_traffic_is_replayed_with_its_own_prompts_and_nothing_secret_is_written() {
    let deck = Deck::new("capture-replay");
    sim(&deck, "prod", "");
    sim(
        &deck,
        "cand",
        "bench:\n  suite: captured\n  gates:\n    non_empty: \"== 100%\"\n",
    );
    // Opt-in, before the front door runs: it applies once it starts.
    with_key(&deck, &["frontdoor", "capture", "on", "--max-size", "256k"])
        .succeeds()
        .says("applies when it starts");
    with_key(&deck, &["rollback", "--to", "prod"]).succeeds();
    let url = deck.door_url();
    // A wrong key is refused, and what was refused is not captured.
    assert_eq!(
        ask(
            &url,
            "wrong",
            json!({"messages": [{"role": "user", "content": "refused"}]})
        ),
        401
    );
    let sent = Instant::now();
    for i in 0..6 {
        let body = json!({
            "model": "any", "max_tokens": 8, "stream": i % 2 == 0,
            "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": prompt(i)}],
            "metadata": {"api_key": SECRETS[1], "session": {"token": SECRETS[2]}},
            "user": SECRETS[3],
        });
        assert_eq!(ask(&url, KEY, body), 200);
        std::thread::sleep(Duration::from_millis(300));
    }
    let spent = sent.elapsed();
    wait_captured(&deck, 6);
    // Off: nothing more is kept.
    with_key(&deck, &["frontdoor", "capture", "off"])
        .succeeds()
        .says("capture off");
    assert_eq!(
        ask(
            &url,
            KEY,
            json!({"messages": [{"role": "user", "content": "not kept"}]})
        ),
        200
    );
    std::thread::sleep(Duration::from_millis(300));
    let lines = captured_lines(&deck);
    assert_eq!(lines.len(), 6, "{lines:?}");
    // Private: the directory 700, the file 600.
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&capture_dir(&deck)), 0o700);
    assert_eq!(mode(&capture_dir(&deck).join("requests.jsonl")), 0o600);
    assert!(lines
        .iter()
        .all(|l| l["body"].get("metadata").is_none() && l["body"].get("user").is_none()));

    // The replay sends exactly the captured prompts, with the gaps they came with.
    let out = deck.dir.join("replay.json");
    deck.ok(&[
        "bench",
        "prod",
        "--replay",
        "captured",
        "--out",
        out.to_str().unwrap(),
    ]);
    let r: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let expected: Vec<String> = (0..6)
        .map(|i| prompt(i).replace(SECRETS[4], "<redacted>"))
        .collect();
    assert_eq!(r["suite"], "captured");
    assert_eq!(r["replay"]["pace"], "as captured");
    assert_eq!(support::strings(&r["replay"]["prompts"]), expected);
    let samples = support::measured(&r);
    assert_eq!(samples.len(), 6);
    assert!(samples.iter().all(|s| s["ok"] == true), "{samples:?}");
    let sends: Vec<u64> = samples
        .iter()
        .map(|s| s["sent_unix_us"].as_u64().unwrap())
        .collect();
    let span = Duration::from_micros(sends[5] - sends[0]);
    assert!(
        span >= Duration::from_millis(1400) && span <= spent + Duration::from_secs(1),
        "sent over {span:?}"
    );
    // Paced by the level instead: back to back on two streams.
    deck.ok(&[
        "bench",
        "prod",
        "--replay",
        "captured",
        "--concurrency",
        "2",
        "--out",
        out.to_str().unwrap(),
    ]);
    let r: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(r["replay"]["pace"], "concurrency 2");
    assert_eq!(support::strings(&r["replay"]["prompts"]), expected);
    // `up` takes it as its suite.
    deck.sparkctl(&["up", "cand", "--yes"])
        .promoted("cand", deck.door_port);
    let record: Value = serde_json::from_str(&deck.ok(&["--json", "history"])).unwrap();
    let bench = record[0]["bench"].as_str().unwrap();
    let r: Value = serde_json::from_slice(&std::fs::read(bench).unwrap()).unwrap();
    assert_eq!(support::strings(&r["replay"]["prompts"]), expected);

    // Nothing secret anywhere the front door, the benchmarks or the records wrote.
    for (path, bytes) in all_files(&deck.dir.join("state")).iter().chain(
        all_files(&deck.dir)
            .iter()
            .filter(|(p, _)| p.extension().is_some_and(|e| e == "json")),
    ) {
        let text = String::from_utf8_lossy(bytes);
        for secret in SECRETS {
            assert!(
                !text.contains(secret),
                "{secret} written in {}",
                path.display()
            );
        }
    }
}

#[test]
fn the_capture_stays_within_its_bound_as_it_rotates() {
    let deck = Deck::new("capture-bound");
    sim(&deck, "prod", "");
    deck.ok(&["rollback", "--to", "prod"]);
    deck.sparkctl(&["frontdoor", "capture", "on", "--max-size", "64k"])
        .succeeds()
        .says("capture on · at most 64k");
    let filler = "lorem ipsum ".repeat(100);
    for i in 0..120 {
        let body = json!({"max_tokens": 1, "messages": [{"role": "user", "content": format!("{i} {filler}")}]});
        assert_eq!(ask(&deck.door_url(), "", body), 200);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let written = || {
        let status: Value =
            serde_json::from_str(&deck.ok(&["--json", "frontdoor", "capture", "status"])).unwrap();
        status["written"].as_u64().unwrap()
    };
    while written() < 120 {
        assert!(Instant::now() < deadline, "written {}", written());
        std::thread::sleep(Duration::from_millis(100));
    }
    let sizes: Vec<u64> = ["requests.1.jsonl", "requests.jsonl"]
        .iter()
        .map(|f| std::fs::metadata(capture_dir(&deck).join(f)).unwrap().len())
        .collect();
    assert!(sizes.iter().sum::<u64>() <= 64 << 10, "{sizes:?}");
    // The newest are kept: the last request is there, the first is gone.
    let lines = captured_lines(&deck);
    let first_prompt = |l: &Value| {
        l["body"]["messages"][0]["content"]
            .as_str()
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .to_string()
    };
    assert_eq!(first_prompt(lines.last().unwrap()), "119");
    assert!(lines.iter().all(|l| first_prompt(l) != "0"));
    let metrics = deck.metrics();
    assert!(
        metrics.contains("sparkctl_frontdoor_captured_total 120"),
        "{metrics}"
    );
}

/// Issue 39 (4): bodies waiting to be captured count in the front door's memory budget for
/// request bodies (256 MiB), and their queue is bounded in bytes: a writer that cannot keep
/// up (here one that cannot write at all: the capture file is a FIFO nobody reads) costs
/// dropped captures, never the door's memory.
#[test]
fn large_bodies_captured_faster_than_written_stay_within_the_body_budget() {
    const BUDGET: u64 = 256 << 20;
    let deck = Deck::new("capture-memory");
    deck.sparkctl(&["frontdoor", "capture", "on", "--max-size", "1g"])
        .succeeds();
    std::fs::create_dir_all(capture_dir(&deck)).unwrap();
    let fifo = std::ffi::CString::new(
        capture_dir(&deck)
            .join("requests.jsonl")
            .display()
            .to_string(),
    )
    .unwrap();
    // SAFETY: mkfifo on a path this test owns.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    deck.ok(&["frontdoor", "start"]);
    let status: Value = serde_json::from_str(&deck.ok(&["--json", "frontdoor", "status"])).unwrap();
    let server = status["pid"].as_i64().unwrap();
    let (_, before) = support::memory_of(server);
    let url = deck.door_url();
    // 24 chat requests of 20 MiB, one after the other (480 MiB in all); no production, so
    // each is answered 503 at once, after its body was read and offered to the capture.
    let statuses = support::block_on(async move {
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let body = bytes::Bytes::from(
            json!({
                "model": "any", "max_tokens": 1,
                "messages": [{"role": "user", "content": "a".repeat(20 << 20)}],
            })
            .to_string(),
        );
        let mut statuses = Vec::new();
        for _ in 0..24 {
            let r = client
                .post(format!("{url}/v1/chat/completions"))
                .header("content-type", "application/json")
                .body(body.clone())
                .send()
                .await;
            statuses.push(r.map(|r| r.status().as_u16()).unwrap_or(0));
        }
        statuses
    });
    assert!(statuses.iter().all(|s| *s == 503), "{statuses:?}");
    let (peak, now) = support::memory_of(server);
    println!(
        "front door server: {} MiB resident before, {} MiB after, peak {} MiB (budget {} MiB)",
        before >> 20,
        now >> 20,
        peak >> 20,
        BUDGET >> 20
    );
    assert!(
        peak.saturating_sub(before) < BUDGET,
        "peak {} MiB over {} MiB before",
        peak >> 20,
        before >> 20
    );
    assert!(now.saturating_sub(before) < BUDGET);
    let status: Value =
        serde_json::from_str(&deck.ok(&["--json", "frontdoor", "capture", "status"])).unwrap();
    assert!(status["dropped"].as_u64().unwrap() >= 16, "{status}");
}
