//! Issue 44, what a stranger without the key and a web page the owner opens can make the
//! front door do: `/health` is the door's own answer (GET and HEAD only, no body read, no
//! model started, woken or counted as used, nothing of recipes or deployments); CORS is the
//! door's (the engines' `Access-Control-*` dropped, preflights answered here, a page of
//! another origin refused before any model is touched). A real door, real processes, real
//! HTTP; a real `llama-server` for CORS, as its own headers allow every origin.

use std::time::Duration;

use serde_json::Value;

use crate::models::{door, model_status, runs, sim, until};
use crate::support::{self, text, Deck, Ran};

/// `curl ARGS URL`: the status line and headers, then the body.
fn curl(url: &str, args: &[&str]) -> (u16, String) {
    let out = std::process::Command::new("curl")
        .args(["-s", "-i", "-m", "30"])
        .args(args)
        .arg(url)
        .output()
        .unwrap();
    let all = text(&out.stdout);
    let status = (all.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, all)
}

/// Each model's state and starts on demand, as `frontdoor status --json` says.
fn loads(deck: &Deck) -> Vec<(String, String, u64)> {
    let mut out: Vec<(String, String, u64)> = (door(deck)["models"].as_array().unwrap().iter())
        .map(|m| {
            (
                m["name"].as_str().unwrap_or("-").to_string(),
                m["state"].as_str().unwrap_or("-").to_string(),
                m["loads"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn a_keyless_health_probe_moves_no_model_and_learns_nothing_on_a_keyed_lan_door() {
    const KEY: &str = "door-key-Hq8Vn3Xc5Tb1";
    let lan = support::lan::Lan::new();
    let deck = crate::frontdoor_faults::deck("guard-health");
    sim(&deck, "chat-a", Some("chat"), "");
    sim(&deck, "coder-a", Some("coder"), "");
    let key_file = deck.dir.join("door.key");
    std::fs::write(&key_file, format!("{KEY}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let on_lan = |args: &[&str]| {
        let mut cmd = deck.cmd(args);
        cmd.env("SPARKCTL_FRONTDOOR_HOST", "0.0.0.0")
            .env("SPARKCTL_FRONTDOOR_API_KEY_FILE", &key_file);
        Ran::of(lan.inside(&mut cmd)).succeeds();
    };
    on_lan(&["rollback", "--to", "chat-a"]);
    on_lan(&["rollback", "--to", "coder-a", "--add-model"]);
    // A reboot as the door sees it: neither runs until a request names it.
    on_lan(&["frontdoor", "stop"]);
    for r in ["chat-a", "coder-a"] {
        deck.ok(&["down", r]);
    }
    on_lan(&["frontdoor", "start"]);
    let before = loads(&deck);
    assert!(
        before
            .iter()
            .all(|(_, state, n)| state == "unloaded" && *n == 0),
        "{before:?}"
    );
    let url = format!("{}/health", lan.url(deck.door_port));
    // Keyless, naming an unloaded model, a large body sent slowly: refused at once.
    let body = r#"{"model": "coder", "messages": [{"role": "user", "content": "hi"}]}"#;
    let began = std::time::Instant::now();
    let (status, answer) = curl(
        &url,
        &[
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "-d",
            body,
        ],
    );
    assert_eq!(status, 405, "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("allow: get, head"),
        "{answer}"
    );
    let (status, answer) = curl(
        &url,
        &[
            "-X",
            "POST",
            "-H",
            "Content-Length: 67108864",
            "--max-time",
            "3",
            "-d",
            "{",
        ],
    );
    assert_eq!(status, 405, "{answer}");
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "{:?}",
        began.elapsed()
    );
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(loads(&deck), before, "a keyless probe moved a model");
    assert!(!runs(&deck, "coder-a") && !runs(&deck, "chat-a"));
    // GET: up or not, and nothing else — no model list, no recipe, no deployment.
    let (status, answer) = curl(&url, &[]);
    assert_eq!(status, 200, "{answer}");
    for secret in ["chat", "coder", "x-sparkctl-upstream", "deployment"] {
        assert!(
            !answer.to_ascii_lowercase().contains(secret),
            "{secret}: {answer}"
        );
    }
    let (status, _) = curl(&url, &["-I"]);
    assert_eq!(status, 200);
    assert_eq!(loads(&deck), before);
}

#[test]
fn a_probe_is_no_use_of_a_model_so_its_ttl_still_unloads_it() {
    let deck = crate::frontdoor_faults::deck("guard-probe");
    sim(
        &deck,
        "chat-a",
        Some("chat"),
        "serve:\n  ttl: 2s\n  default: true\n",
    );
    sim(&deck, "coder-a", Some("coder"), "");
    deck.ok(&["rollback", "--to", "chat-a"]);
    deck.ok(&["rollback", "--to", "coder-a"]);
    // A load balancer probing the default model every 100 ms.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let probes = {
        let (url, stop) = (deck.door_url(), stop.clone());
        std::thread::spawn(move || {
            let mut codes = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                codes.push(support::http_status(&url, "/health").unwrap_or(0));
                std::thread::sleep(Duration::from_millis(100));
            }
            codes
        })
    };
    until(
        Duration::from_secs(15),
        "chat unloaded after its ttl",
        || model_status(&deck, "chat")["state"] == "unloaded",
    );
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let codes = probes.join().unwrap();
    // It may be started: the probe says so, without starting it.
    assert!(
        codes.len() >= 10 && codes.iter().all(|c| *c == 200),
        "{codes:?}"
    );
    assert!(!runs(&deck, "chat-a"), "the probes woke chat-a");
    assert_eq!(model_status(&deck, "chat")["loads"], 0);
}

/// A llama-server production with a ttl (so it starts on a request, not with the door),
/// the door allowing one origin of the owner's.
#[test]
fn a_page_of_another_origin_gets_no_cors_and_moves_no_model() {
    let (binary, model) = support::llama_server_and_model();
    let deck = Deck::new("guard-cors");
    deck.recipe(
        "tiny",
        &format!(
            "engine: llama-server\nruntime: process\nbinary: {}\nmodel:\n  path: {}\n  served_name: tiny\nserver:\n  port: {}\n  args: [-t, \"1\", -c, \"512\", -np, \"1\"]\n  memory_gb: 1\nhealth:\n  timeout: 2m\nserve:\n  ttl: 1h\n",
            binary.display(),
            model.display(),
            support::free_port()
        ),
    );
    let owner = "http://webui.lan:3000";
    let with_origins = |args: &[&str]| {
        Ran::of(deck.cmd(args).env("SPARKCTL_FRONTDOOR_ORIGINS", owner)).succeeds();
    };
    with_origins(&["rollback", "--to", "tiny"]);
    with_origins(&["frontdoor", "stop"]);
    deck.ok(&["down", "tiny"]);
    with_origins(&["frontdoor", "start"]);
    let before = loads(&deck);
    assert_eq!(before, [("tiny".into(), "unloaded".into(), 0)]);
    let url = format!("{}/v1/chat/completions", deck.door_url());
    let body =
        r#"{"model": "tiny", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}"#;
    let evil = "Origin: https://evil.example";
    // The browser's preflight, and the POST a page sends without one (no-cors).
    let (status, answer) = curl(
        &url,
        &[
            "-X",
            "OPTIONS",
            "-H",
            evil,
            "-H",
            "Access-Control-Request-Method: POST",
            "-H",
            "Access-Control-Request-Headers: content-type",
        ],
    );
    assert_eq!(status, 403, "{answer}");
    assert!(
        !answer
            .to_ascii_lowercase()
            .contains("access-control-allow-origin"),
        "{answer}"
    );
    for how in [
        vec!["-H", evil, "-H", "Content-Type: text/plain"],
        vec![
            "-H",
            "Sec-Fetch-Site: cross-site",
            "-H",
            "Content-Type: text/plain",
        ],
    ] {
        let mut args = vec!["-X", "POST", "-d", body];
        args.extend(how);
        let (status, answer) = curl(&url, &args);
        assert_eq!(status, 403, "{answer}");
        assert!(
            !answer
                .to_ascii_lowercase()
                .contains("access-control-allow-origin"),
            "{answer}"
        );
    }
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(loads(&deck), before, "a foreign page moved a model");
    // The owner's own origin: its preflight is answered by the door, its request served,
    // and the answer names that origin only (llama-server's own `*` is dropped).
    let mine = format!("Origin: {owner}");
    let (status, answer) = curl(
        &url,
        &[
            "-X",
            "OPTIONS",
            "-H",
            &mine,
            "-H",
            "Access-Control-Request-Method: POST",
        ],
    );
    assert_eq!(status, 204, "{answer}");
    assert!(
        answer.contains(&format!("access-control-allow-origin: {owner}")),
        "{answer}"
    );
    let (status, answer) = curl(
        &url,
        &[
            "-X",
            "POST",
            "-H",
            &mine,
            "-H",
            "Content-Type: application/json",
            "-d",
            body,
        ],
    );
    assert_eq!(status, 200, "{answer}");
    let lower = answer.to_ascii_lowercase();
    assert!(
        lower.contains(&format!("access-control-allow-origin: {owner}")),
        "{answer}"
    );
    assert!(
        !lower.contains("access-control-allow-origin: *"),
        "{answer}"
    );
    // A program (no Origin): served, and given no CORS header at all.
    let (status, answer) = curl(
        &url,
        &[
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "-d",
            body,
        ],
    );
    assert_eq!(status, 200, "{answer}");
    assert!(
        !answer.to_ascii_lowercase().contains("access-control-"),
        "{answer}"
    );
    let after: Value = model_status(&deck, "tiny");
    assert_eq!(after["loads"], 1, "{after}");
    deck.ok(&["down", "tiny", "--force"]);
}

/// Issue 46: an engine's control routes are the door's. A sim in vLLM's development mode
/// with sleep on (its `/sleep` would free its memory and pause it) behind the door: a
/// client's `/sleep`, `/wake_up`, `/collective_rpc` and `/is_sleeping` get 403 and reach
/// nothing (the engine, asked on its own port, still says it is awake); chat goes on.
#[test]
fn a_client_cannot_put_a_model_to_sleep_through_the_door() {
    let deck = crate::frontdoor_faults::deck("guard-sleep");
    let port = support::free_port();
    deck.recipe(
        "prod",
        &format!(
            "engine: sim\nruntime: process\nserver:\n  port: {port}\n  args: [--mimic, vllm, --load-time, 100ms, --enable-sleep-mode, --hold-memory, 64m]\n  env:\n    VLLM_SERVER_DEV_MODE: \"1\"\n  memory_gb: 1\nhealth:\n  timeout: 30s\nbench:\n  suite: tiny\n"
        ),
    );
    deck.ok(&["rollback", "--to", "prod"]);
    let door = deck.door_url();
    let engine = format!("http://127.0.0.1:{port}");
    for (method, path) in [
        ("POST", "/sleep?level=1"),
        ("POST", "/wake_up"),
        ("GET", "/is_sleeping"),
        ("POST", "/collective_rpc"),
    ] {
        let (status, answer) = curl(&format!("{door}{path}"), &["-X", method]);
        assert_eq!(status, 403, "{method} {path}: {answer}");
        assert!(answer.contains("front door's own"), "{answer}");
    }
    let (status, awake) = curl(&format!("{engine}/is_sleeping"), &[]);
    assert_eq!(status, 200);
    assert!(awake.contains("\"is_sleeping\":false"), "{awake}");
    // What the door refused, the engine itself would have done.
    let (_, slept) = curl(&format!("{engine}/sleep?level=1"), &["-X", "POST"]);
    assert!(slept.contains("\"status\":\"sleeping\""), "{slept}");
    let (_, woke) = curl(&format!("{engine}/wake_up"), &["-X", "POST"]);
    assert!(woke.contains("\"status\":\"awake\""), "{woke}");
    let body = r#"{"max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}"#;
    let (status, answer) = curl(
        &format!("{door}/v1/chat/completions"),
        &[
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "-d",
            body,
        ],
    );
    assert_eq!(status, 200, "{answer}");
}
