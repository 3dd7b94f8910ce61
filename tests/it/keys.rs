//! Keys per client at the front door (`sparkctl keys`): a loopback door with none is open;
//! once one exists every request but `/health` needs one (401); a key's scope decides the
//! models it reaches (403 naming them, `/v1/models` listing only them); the live page and
//! `/metrics` are an admin's; each limit answers 429 with `Retry-After`; a key added or
//! revoked under load counts within a second while the other clients see nothing; and what
//! each key used is what its clients counted, kept across a restart of the door.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::frontdoor_faults::deck;
use crate::models::sim;
use crate::support::{self, Deck, Traffic};

/// One request to the door: its status, `Retry-After`, and its body.
fn call(
    deck: &Deck,
    method: &str,
    path: &str,
    key: Option<&str>,
    body: Option<Value>,
) -> (u16, Option<u64>, Value) {
    let (url, method) = (format!("{}{path}", deck.door_url()), method.to_string());
    let key = key.map(str::to_string);
    support::block_on(async move {
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let mut r = client.request(method.parse().unwrap(), url);
        if let Some(k) = key {
            r = r.bearer_auth(k);
        }
        if let Some(b) = body {
            r = r.json(&b);
        }
        let r = r.send().await.unwrap();
        let status = r.status().as_u16();
        let after = (r.headers().get("retry-after")).and_then(|v| v.to_str().ok()?.parse().ok());
        let text = r.text().await.unwrap();
        (
            status,
            after,
            serde_json::from_str(&text).unwrap_or(json!(text)),
        )
    })
}

fn chat(model: &str) -> Value {
    json!({"model": model, "max_tokens": 4,
        "messages": [{"role": "user", "content": "What is the capital of Japan?"}]})
}

/// `keys add ARGS`: the secret it printed once.
fn add(deck: &Deck, args: &[&str]) -> String {
    let mut all = vec!["keys", "add"];
    all.extend_from_slice(args);
    let ran = deck.sparkctl(&all).succeeds();
    let secret = ran.stdout().trim().to_string();
    assert!(secret.starts_with("sk-spark-"), "{}", ran.shown());
    assert!(ran.stderr().contains("shown once"), "{}", ran.shown());
    secret
}

/// Asks until `want` is answered (the door reads the keys file again within a second).
fn answered_within(deck: &Deck, key: Option<&str>, model: &str, want: u16) -> Duration {
    let began = Instant::now();
    loop {
        let (status, _, _) = call(deck, "POST", "/v1/chat/completions", key, Some(chat(model)));
        if status == want {
            return began.elapsed();
        }
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "still {status}, not {want}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn listed(deck: &Deck, key: &str) -> Vec<String> {
    let (status, _, v) = call(deck, "GET", "/v1/models", Some(key), None);
    assert_eq!(status, 200, "{v}");
    let mut ids: Vec<String> = (v["data"].as_array().unwrap().iter())
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids
}

#[test]
fn keys_decide_who_reaches_which_model_and_changes_count_within_a_second_under_load() {
    let deck = deck("keys-scope");
    sim(&deck, "chat-a", Some("chat"), "");
    sim(&deck, "coder-a", Some("coder"), "");
    deck.ok(&["rollback", "--to", "chat-a"]);
    deck.ok(&["rollback", "--to", "coder-a", "--add-model"]);
    // No key anywhere: the loopback door is open, as it always was.
    let (status, _, v) = call(
        &deck,
        "POST",
        "/v1/chat/completions",
        None,
        Some(chat("chat")),
    );
    assert_eq!(status, 200, "{v}");

    let admin = add(&deck, &["family", "--admin"]);
    let kid = add(&deck, &["kid", "--models", "chat"]);
    // The keys file holds hashes, readable by its owner alone, and no secret.
    let file = deck.state().join("keys.json");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(!text.contains(&admin[9..]) && !text.contains(&kid[9..]));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let list = deck.ok(&["keys", "list"]);
    assert!(list.contains("kid") && list.contains("chat") && !list.contains(&kid[9..]));

    // 401 without a key (or with a wrong one); /health needs none.
    answered_within(&deck, None, "chat", 401);
    let (status, _, _) = call(
        &deck,
        "POST",
        "/v1/chat/completions",
        Some("sk-spark-0"),
        Some(chat("chat")),
    );
    assert_eq!(status, 401);
    assert_eq!(call(&deck, "GET", "/health", None, None).0, 200);

    // The kid's key: its model only, in /v1/models too; 403 names what it may ask for.
    let (status, _, v) = call(
        &deck,
        "POST",
        "/v1/chat/completions",
        Some(&kid),
        Some(chat("chat")),
    );
    assert_eq!(status, 200, "{v}");
    let (status, _, v) = call(
        &deck,
        "POST",
        "/v1/chat/completions",
        Some(&kid),
        Some(chat("coder")),
    );
    assert_eq!(status, 403, "{v}");
    assert_eq!(v["error"]["code"], "model_not_allowed", "{v}");
    assert_eq!(v["error"]["models"], json!(["chat"]), "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("`coder`"),
        "{v}"
    );
    assert_eq!(listed(&deck, &kid), ["chat"]);
    // Anthropic's clients send theirs as `x-api-key`: the same key, the same scope.
    let url = format!("{}/v1/messages", deck.door_url());
    let k = kid.clone();
    let by_header = support::block_on(async move {
        let messages = json!({"model": "chat", "max_tokens": 4,
            "messages": [{"role": "user", "content": "What is the capital of Japan?"}]});
        let r = reqwest::Client::new()
            .post(url)
            .header("x-api-key", k)
            .json(&messages);
        r.send().await.unwrap().status().as_u16()
    });
    assert_eq!(by_header, 200);
    assert_eq!(listed(&deck, &admin), ["chat", "coder"]);
    // The live page's data and /metrics are an admin's.
    for path in ["/metrics", "/_sparkctl/data"] {
        let (status, _, v) = call(&deck, "GET", path, Some(&kid), None);
        assert!(status == 401 || status == 403, "{path}: {status} {v}");
        assert_eq!(
            call(&deck, "GET", path, Some(&admin), None).0,
            200,
            "{path}"
        );
    }

    // Under load from the admin's client: a key added opens within a second, a key revoked
    // closes within a second, and the admin's client sees not one failure.
    let steady = Traffic::with_key(&deck.door_url(), Duration::from_millis(20), "chat", &admin);
    steady.answers(5, Duration::from_secs(30));
    let guest = add(&deck, &["guest", "--models", "coder"]);
    let opened = answered_within(&deck, Some(&guest), "coder", 200);
    deck.ok(&["keys", "revoke", "kid"]);
    let closed = answered_within(&deck, Some(&kid), "chat", 401);
    steady.answers(5, Duration::from_secs(30));
    let report = steady.stop();
    assert_eq!(report.failed() + report.cut, 0, "{report:?}");
    assert!(opened < Duration::from_secs(1), "opened after {opened:?}");
    assert!(closed < Duration::from_secs(1), "closed after {closed:?}");
    // The live page shows each key's use: the admin's client's answers among it.
    let (_, _, page) = call(&deck, "GET", "/_sparkctl/data", Some(&admin), None);
    let family = page["usage"]["family"]["requests"].as_u64().unwrap_or(0);
    assert!(
        family >= report.ok as u64,
        "{} < {}",
        page["usage"],
        report.ok
    );

    // A rotation with an overlap: both secrets open meanwhile; without one, the old closes.
    let rotated = deck.ok(&["keys", "rotate", "guest", "--overlap", "1h"]);
    let rotated = rotated.trim();
    answered_within(&deck, Some(rotated), "coder", 200);
    answered_within(&deck, Some(&guest), "coder", 200);
    let again = deck.ok(&["keys", "rotate", "guest"]);
    answered_within(&deck, Some(&guest), "coder", 401);
    answered_within(&deck, Some(rotated), "coder", 401);
    answered_within(&deck, Some(again.trim()), "coder", 200);

    // Bad input changes nothing.
    let before = std::fs::read(&file).unwrap();
    let err = deck.sparkctl(&["keys", "add", "family"]).exits(2).stderr();
    assert!(err.contains("family"), "{err}");
    let err = deck
        .sparkctl(&["keys", "revoke", "nobody"])
        .exits(2)
        .stderr();
    assert!(err.contains("nobody") && err.contains("family"), "{err}");
    let err = deck.sparkctl(&["keys", "add", "a b"]).exits(2).stderr();
    assert!(err.contains("a b"), "{err}");
    assert_eq!(std::fs::read(&file).unwrap(), before);
}

#[test]
fn each_limit_answers_429_and_use_per_key_is_what_the_clients_counted() {
    let deck = deck("keys-limits");
    // Slow enough that a streamed answer is still open while a second request comes.
    let dir = deck.dir.join("models/chat");
    std::fs::create_dir_all(&dir).unwrap();
    deck.recipe(
        "chat-a",
        &format!(
            "engine: sim\nruntime: process\nmodel:\n  path: {}\n  served_name: chat\nserver:\n  port: {}\n  args: [--load-time, 300ms, --ttft, 20ms, --token-rate, \"20\", --tokens, \"100\"]\n  memory_gb: 2\nhealth:\n  timeout: 30s\nbench:\n  suite: tiny\n",
            dir.display(),
            support::free_port()
        ),
    );
    deck.ok(&["rollback", "--to", "chat-a"]);
    let rpm = add(&deck, &["rpm", "--rpm", "3"]);
    let once = add(&deck, &["once", "--concurrency", "1"]);
    let daily = add(&deck, &["daily", "--tokens-per-day", "30"]);
    let post = |key: &str| {
        call(
            &deck,
            "POST",
            "/v1/chat/completions",
            Some(key),
            Some(chat("chat")),
        )
    };

    // Requests in a minute: the fourth is refused, with when to come back (within the minute).
    let mut counted = (0u64, 0u64);
    for _ in 0..3 {
        let (status, _, v) = post(&rpm);
        assert_eq!(status, 200, "{v}");
        counted.0 += v["usage"]["prompt_tokens"].as_u64().unwrap();
        counted.1 += v["usage"]["completion_tokens"].as_u64().unwrap();
    }
    let (status, after, v) = post(&rpm);
    assert_eq!(status, 429, "{v}");
    assert_eq!(v["error"]["code"], "rate_limit_exceeded", "{v}");
    assert!(after.is_some_and(|a| (1..=60).contains(&a)), "{after:?}");

    // At once: a second request while a long stream is open is refused; after it, served.
    let url = deck.door_url();
    let (key, long) = (
        once.clone(),
        json!({"model": "chat", "max_tokens": 400, "stream": true,
        "messages": [{"role": "user", "content": "Tell me a long story."}]}),
    );
    let (began_tx, began_rx) = std::sync::mpsc::channel();
    let streaming = std::thread::spawn(move || {
        support::block_on(async move {
            let r = reqwest::Client::new()
                .post(format!("{url}/v1/chat/completions"))
                .bearer_auth(key)
                .json(&long)
                .send()
                .await
                .unwrap();
            began_tx.send(r.status().as_u16()).unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        })
    });
    // Its answer has begun (the door holds its permit until the stream's last byte).
    assert_eq!(began_rx.recv().unwrap(), 200);
    let (_, after, v) = post(&once);
    let refused = (after, v);
    assert_eq!(
        refused.1["error"]["code"], "concurrency_limit_exceeded",
        "{:?}",
        refused.1
    );
    assert_eq!(refused.0, Some(1));
    let (status, text) = streaming.join().unwrap();
    assert!(
        status == 200 && text.contains("[DONE]"),
        "{status} {text:.200}"
    );
    assert_eq!(post(&once).0, 200);

    // Tokens in a UTC day: served until its use reaches the bound, then refused till midnight.
    let mut served = 0;
    let (status, after, v) = loop {
        let (status, after, v) = post(&daily);
        if status != 200 {
            break (status, after, v);
        }
        served += 1;
        assert!(served < 30, "never refused");
    };
    assert_eq!(status, 429, "{v}");
    assert_eq!(v["error"]["code"], "token_limit_exceeded", "{v}");
    assert!(
        after.is_some_and(|a| (1..=86_400).contains(&a)),
        "{after:?}"
    );

    // What the rpm key used is what its client counted, in `usage`, /metrics and the
    // key's own view; another key's use is not in it.
    // An agent's streamed /v1/responses answer is counted from its own events.
    let agent = add(&deck, &["agent"]);
    let asked = json!({"model": "chat", "max_output_tokens": 4, "stream": true,
        "input": "What is the capital of Japan?"});
    // A key added is known within a second.
    let began = Instant::now();
    loop {
        let (status, _, v) = call(
            &deck,
            "POST",
            "/v1/responses",
            Some(&agent),
            Some(asked.clone()),
        );
        if status == 200 {
            break;
        }
        assert!(
            status == 401 && began.elapsed() < Duration::from_secs(2),
            "{status} {v}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // The door writes what was used within a second.
    let began = Instant::now();
    let used = loop {
        let used: Value = serde_json::from_str(&deck.ok(&["--json", "usage"])).unwrap();
        let done = used["once"]["requests"] == 2 && used["daily"]["limited"] == 1;
        if done && used["agent"]["requests"] == 1 {
            break used;
        }
        assert!(began.elapsed() < Duration::from_secs(5), "{used}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let mine = &used["rpm"];
    assert_eq!(mine["requests"], 3, "{used}");
    assert_eq!(mine["limited"], 1, "{used}");
    assert_eq!(mine["errors"], 0, "{used}");
    assert_eq!(
        (mine["tokens_in"].as_u64(), mine["tokens_out"].as_u64()),
        (Some(counted.0), Some(counted.1)),
        "{used}"
    );
    assert_eq!(used["daily"]["limited"], 1, "{used}");
    let a = &used["agent"];
    assert_eq!(a["tokens_out"], 4, "{used}");
    assert!(a["tokens_in"].as_u64().unwrap() > 0, "{used}");
    assert_eq!(a["tokens_out_counted"], 0, "the server's own count: {used}");
    assert!(
        used["daily"]["tokens_in"].as_u64().unwrap()
            + used["daily"]["tokens_out"].as_u64().unwrap()
            >= 30,
        "{used}"
    );
    assert_eq!(
        used["once"]["limited"].as_u64().map(|n| n >= 1),
        Some(true),
        "{used}"
    );
    let (status, _, own) = call(&deck, "GET", "/_sparkctl/usage", Some(&rpm), None);
    assert_eq!(status, 200, "{own}");
    assert_eq!(
        own.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["rpm"],
        "{own}"
    );
    let shown = deck.ok(&["usage", "--key", "once"]);
    assert!(shown.contains("counted from streams"), "{shown}");
    let metrics = call(&deck, "GET", "/metrics", None, None);
    assert_eq!(metrics.0, 401, "keys exist: /metrics needs an admin's");

    // A restart of the door keeps the use, and with it the daily bound.
    deck.ok(&["frontdoor", "restart"]);
    let after_restart: Value = serde_json::from_str(&deck.ok(&["--json", "usage"])).unwrap();
    assert_eq!(after_restart["rpm"], used["rpm"]);
    answered_within(&deck, Some(&daily), "chat", 429);
}

#[test]
fn aliases_and_presets_reach_their_model_rewritten_and_a_scope_holds_through_them() {
    let deck = deck("keys-names");
    sim(
        &deck,
        "chat-a",
        Some("chat"),
        "serve:\n  aliases: [assistant]\n  presets:\n    chat-short:\n      max_tokens: 2\n      chat_template_kwargs: {enable_thinking: false}\n",
    );
    sim(
        &deck,
        "coder-a",
        Some("coder"),
        "serve:\n  aliases: [code]\n",
    );
    deck.ok(&["rollback", "--to", "chat-a"]);
    deck.ok(&["rollback", "--to", "coder-a", "--add-model"]);
    let kid = add(&deck, &["kid", "--models", "chat"]);
    let admin = add(&deck, &["me", "--admin"]);
    let post =
        |key: &str, body: Value| call(&deck, "POST", "/v1/chat/completions", Some(key), Some(body));
    // The preset's max_tokens reaches the server over the client's: 2 tokens, not 8.
    let mut asked = chat("chat-short");
    asked["max_tokens"] = json!(8);
    let (status, _, v) = post(&kid, asked);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 2, "{v}");
    assert_eq!(v["model"], "chat", "the server was sent its own name: {v}");
    let mut asked = chat("assistant");
    asked["max_tokens"] = json!(8);
    let (status, _, v) = post(&kid, asked);
    assert_eq!(
        (status, &v["usage"]["completion_tokens"]),
        (200, &json!(8)),
        "{v}"
    );
    // A scope holds on the model a name stands for.
    let (status, _, v) = post(&kid, chat("code"));
    assert_eq!(status, 403, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("`coder`"),
        "{v}"
    );
    // Both listed, each saying what it stands for; the kid's listing holds chat's alone.
    let (_, _, all) = call(&deck, "GET", "/v1/models", Some(&admin), None);
    let ids = |v: &Value| {
        let mut ids: Vec<String> = (v["data"].as_array().unwrap().iter())
            .map(|m| m["id"].as_str().unwrap().to_string())
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(
        ids(&all),
        ["assistant", "chat", "chat-short", "code", "coder"],
        "{all}"
    );
    let preset = (all["data"].as_array().unwrap().iter())
        .find(|m| m["id"] == "chat-short")
        .unwrap();
    assert_eq!(
        preset["sparkctl"]["preset_of"]["sets"]["max_tokens"], 2,
        "{all}"
    );
    assert_eq!(listed(&deck, &kid), ["assistant", "chat", "chat-short"]);

    // A name given twice, or a preset that sets `model`, is refused with nothing started.
    sim(
        &deck,
        "bad",
        Some("other"),
        "serve:\n  aliases: [other]\n  presets:\n    p:\n      model: x\n",
    );
    let err = deck
        .sparkctl(&["recipes", "validate", "bad"])
        .exits(2)
        .stderr();
    assert!(
        err.contains("serve.aliases") && err.contains("serve.presets"),
        "{err}"
    );
    let err = deck.sparkctl(&["up", "bad", "--yes"]).exits(2).stderr();
    assert!(err.contains("serve.aliases"), "{err}");
    assert!(deck.status_of("bad").is_none());
    // Another model's recipe claiming chat's alias is refused where it would be production.
    sim(
        &deck,
        "dup",
        Some("dup"),
        "serve:\n  aliases: [assistant]\n",
    );
    let err = (deck
        .sparkctl(&["rollback", "--to", "dup", "--add-model"])
        .exits(2))
    .stderr();
    assert!(
        err.contains("both answer to `assistant`") && err.contains("dup.yaml"),
        "{err}"
    );
    assert!(deck.status_of("dup").is_none());
}
