//! Issue 46, the page cache: two real `llama-server`s that fit one at a time, each serving
//! its own copy of the GGUF. A switch to a model reads its files in while the other is
//! evicted, so the start that follows finds them all cached (its time printed beside a
//! warm and a cold start's); the evicted
//! model's pages are dropped (this host has no GPU: its memory is the models' too), its
//! files only. `fincore` (util-linux) says what is cached; Python's `os.posix_fadvise`
//! empties a file's cache where a test needs it cold.

use serde_json::{json, Value};

use crate::models::answer;
use crate::support::{self, free_port, Deck, Ran};

/// Bytes of `path` in the page cache, as `fincore` counts them.
fn cached(path: &std::path::Path) -> u64 {
    let out = std::process::Command::new("fincore")
        .args(["--bytes", "--noheadings", "--output", "RES"])
        .arg(path)
        .output()
        .expect("fincore (util-linux) runs");
    support::text(&out.stdout).trim().parse().unwrap_or(0)
}

/// Empties `path`'s page cache (its clean pages), as another program would.
fn evict(path: &std::path::Path) {
    let script = "import os, sys\nfd = os.open(sys.argv[1], os.O_RDONLY)\nos.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)\n";
    let ok = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(path)
        .status()
        .unwrap()
        .success();
    assert!(
        ok && cached(path) < 1 << 20,
        "{} still cached",
        path.display()
    );
}

/// Reads `path` through, so its pages are cached.
fn warm(path: &std::path::Path) {
    std::fs::read(path).unwrap();
}

/// The latest kept start of `recipe`: its total, ms.
fn last_start_ms(deck: &Deck, recipe: &str) -> f64 {
    let kept: Value =
        serde_json::from_str(&deck.ok(&["--json", "history", "starts", recipe])).unwrap();
    let last = kept[recipe]
        .as_array()
        .and_then(|a| a.last())
        .cloned()
        .unwrap();
    support::phases_in_order(&last["phases"]) * 1e3
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
fn a_switch_reads_the_next_model_in_and_drops_the_last_one_s_pages_only() {
    let (binary, model) = support::llama_server_and_model();
    let deck = Deck::new("pagecache");
    let files: Vec<std::path::PathBuf> = ["a", "b", "other"]
        .iter()
        .map(|n| deck.dir.join(format!("{n}.gguf")))
        .collect();
    for f in &files {
        std::fs::copy(&model, f).unwrap();
        // Written back, so its pages are clean and may be dropped.
        std::fs::File::open(f).unwrap().sync_all().unwrap();
    }
    for (name, file) in [("a", &files[0]), ("b", &files[1])] {
        deck.recipe(
            name,
            &format!(
                "engine: llama-server\nruntime: process\nbinary: {}\nmodel:\n  path: {}\n  served_name: {name}\nserver:\n  port: {}\n  args: [-t, \"1\", -c, \"512\", -np, \"1\"]\n  memory_gb: 1\nhealth:\n  timeout: 2m\n",
                binary.display(),
                file.display(),
                free_port()
            ),
        );
    }
    let (a, b, other) = (&files[0], &files[1], &files[2]);
    // A start of b from a warm cache, and one from a cold one, by `start` (no switch).
    let mut warm_ms = Vec::new();
    let mut cold_ms = Vec::new();
    for _ in 0..3 {
        warm(b);
        deck.ok(&["start", "b"]);
        warm_ms.push(last_start_ms(&deck, "b"));
        deck.ok(&["down", "b"]);
        evict(b);
        deck.ok(&["start", "b"]);
        cold_ms.push(last_start_ms(&deck, "b"));
        deck.ok(&["down", "b"]);
    }
    // Both production of their model, in a pool that holds one: every switch evicts.
    deck.ok(&["rollback", "--to", "a"]);
    deck.ok(&["rollback", "--to", "b", "--add-model"]);
    deck.ok(&["frontdoor", "stop"]);
    deck.ok(&["down", "a"]);
    deck.ok(&["down", "b"]);
    Ran::of(
        deck.cmd(&["frontdoor", "start"])
            .env("SPARKCTL_MEMORY_GB", "1.5")
            .env("SPARKCTL_MEMORY_RESERVE_GB", "0"),
    )
    .succeeds();
    let ask = |model: &str| {
        let body = json!({"model": model, "max_tokens": 4,
            "messages": [{"role": "user", "content": "hi"}]});
        let got = answer(&deck.door_url(), body.to_string().into_bytes());
        assert_eq!(got.status, 200, "{model}: {:?}", got.body);
    };
    let mut read_in_ms = Vec::new();
    for _ in 0..3 {
        ask("a");
        warm(other);
        evict(b);
        ask("b");
        read_in_ms.push(last_start_ms(&deck, "b"));
        // b's files were read in before it started; a's pages went with it, other's stayed.
        assert!(cached(b) >= std::fs::metadata(b).unwrap().len() * 9 / 10);
        assert!(cached(a) < 1 << 20, "a's pages kept: {}", cached(a));
        assert!(
            cached(other) >= std::fs::metadata(other).unwrap().len() * 9 / 10,
            "another file's pages went too"
        );
    }
    let log = deck.ok(&["logs", "frontdoor"]);
    assert!(log.contains("model b: b read in ("), "{log}");
    let (warm_ms, cold_ms, read_in_ms) = (median(warm_ms), median(cold_ms), median(read_in_ms));
    println!(
        "b's start, median of 3: from a warm cache {warm_ms:.0} ms, cold {cold_ms:.0} ms, \
         read in while a was evicted {read_in_ms:.0} ms"
    );
    // What the read-in promises is checked above: every one of b's pages was in the cache
    // when b started. How much that is worth in time is a figure, printed, not a bound: on
    // a CI disk that the host itself caches, cold and warm differ by 60 ms out of 170, and
    // a bound between them failed on noise (160 against 119 warm, 176 cold).
    deck.ok(&["frontdoor", "stop"]);
    let _ = deck.run(&["down", "a"]);
    let _ = deck.run(&["down", "b"]);
}
