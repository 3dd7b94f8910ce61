//! Several models behind one front door: each request goes to the production of the model
//! its body names; `up` of one model leaves the others' traffic untouched; `rollback
//! --model`, `status`, `history --model` per model; `GET /v1/models` and an OpenAI-style
//! 404 that list them; a restart of the front door keeps every model's route; and the bad
//! inputs (two productions answering to one name, two defaults, a body naming no model)
//! refused with nothing changed.

use std::time::Duration;

use serde_json::{json, Value};

use crate::frontdoor_faults::deck;
use crate::support::{self, free_port, Deck, Traffic};

const SIM: &str = "--load-time, 300ms, --ttft, 20ms, --token-rate, \"200\", --tokens, \"8\"";
const EVERY: Duration = Duration::from_millis(20);

/// `args` refused (exit 2) saying each of `says`, with production.json as it was and
/// `name` never started.
fn refused(deck: &Deck, args: &[&str], says: &[&str], name: &str) {
    let file = deck.dir.join("state/production.json");
    let before = std::fs::read(&file).unwrap();
    let err = deck.sparkctl(args).exits(2).stderr();
    for s in says {
        assert!(err.contains(s), "{s}: {err}");
    }
    assert_eq!(std::fs::read(&file).unwrap(), before, "{err}");
    assert!(deck.status_of(name).is_none(), "{name} was started");
}

/// A process sim recipe `name` serving model `served` (None: no served name), with `extra`
/// keys at the end.
pub(crate) fn sim(deck: &Deck, name: &str, served: Option<&str>, extra: &str) {
    let model = match served {
        Some(s) => {
            let dir = deck.dir.join(format!("models/{s}"));
            std::fs::create_dir_all(&dir).unwrap();
            format!("model:\n  path: {}\n  served_name: {s}\n", dir.display())
        }
        None => String::new(),
    };
    deck.recipe(
        name,
        &format!(
            "engine: sim\nruntime: process\n{model}server:\n  port: {}\n  args: [{SIM}]\n  memory_gb: 2\nhealth:\n  timeout: 30s\nbench:\n  suite: tiny\n{extra}",
            free_port()
        ),
    );
}

/// What the front door answered to one non-streamed request.
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) body: Value,
    /// The instance that answered (`x-sparkctl-upstream`: recipe and deployment).
    pub(crate) by: String,
    /// What it waited for its model's server (`x-sparkctl-queued-ms`).
    pub(crate) queued_ms: Option<u64>,
}

/// `body` posted to the front door at `url`, the whole answer read.
pub(crate) fn answer(url: &str, body: Vec<u8>) -> Answer {
    let url = url.to_string();
    support::block_on(async move {
        let r = reqwest::Client::new()
            .post(format!("{url}/v1/chat/completions"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let header =
            |name: &str| (r.headers().get(name)).and_then(|v| Some(v.to_str().ok()?.to_string()));
        let by = header("x-sparkctl-upstream").unwrap_or_default();
        let queued_ms = header("x-sparkctl-queued-ms").and_then(|v| v.parse().ok());
        let status = r.status().as_u16();
        let body = r.json::<Value>().await.unwrap_or(Value::Null);
        Answer {
            status,
            body,
            by,
            queued_ms,
        }
    })
}

/// One request to the front door with `body`: its status, its answer, and the instance
/// that answered.
pub(crate) fn ask(deck: &Deck, body: &[u8]) -> (u16, Value, String) {
    let a = answer(&deck.door_url(), body.to_vec());
    (a.status, a.body, a.by)
}

pub(crate) fn chat(model: Option<&str>) -> Vec<u8> {
    let mut body = json!({
        "max_tokens": 1,
        "messages": [{"role": "user", "content": "What is the capital of Japan?"}],
    });
    if let Some(m) = model {
        body["model"] = json!(m);
    }
    body.to_string().into_bytes()
}

/// The front door's status, every model in it.
pub(crate) fn door(deck: &Deck) -> Value {
    serde_json::from_str(&deck.ok(&["--json", "frontdoor", "status"])).unwrap()
}

/// The instance each model's production runs on, by the name clients send.
fn routes(deck: &Deck) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = door(deck)["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap_or("-").to_string(),
                m["upstream"]["deployment"]
                    .as_str()
                    .unwrap_or("-")
                    .to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

pub(crate) fn listed(deck: &Deck) -> Vec<String> {
    let url = deck.door_url();
    let v: Value = support::block_on(async move {
        reqwest::get(format!("{url}/v1/models"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    });
    let mut ids: Vec<String> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids
}

#[test]
fn each_request_goes_to_its_models_production_and_up_of_one_leaves_the_other_untouched() {
    let deck = deck("models-route");
    sim(&deck, "chat-a", Some("chat"), "");
    sim(&deck, "coder-a", Some("coder"), "");
    sim(&deck, "coder-b", Some("coder"), "");
    deck.ok(&["rollback", "--to", "chat-a"]);
    // One model: every request goes to it, whatever it names (as a front door always did).
    let (status, _, by) = ask(&deck, &chat(Some("whatever")));
    assert_eq!(status, 200);
    assert!(by.starts_with("chat-a "), "{by}");
    // A second model is asked for: without `--add-model` (or a `serve` section) coder-a
    // would take chat's place.
    deck.ok(&["rollback", "--to", "coder-a", "--add-model"]);
    assert_eq!(listed(&deck), ["chat", "coder"]);
    let (status, _, by) = ask(&deck, &chat(Some("chat")));
    assert_eq!((status, by.split(' ').next()), (200, Some("chat-a")));
    let (status, _, by) = ask(&deck, &chat(Some("coder")));
    assert_eq!((status, by.split(' ').next()), (200, Some("coder-a")));

    // An unknown model: OpenAI's 404, listing the models.
    let (status, v, _) = ask(&deck, &chat(Some("gpt-4")));
    assert_eq!(status, 404, "{v}");
    assert_eq!(v["error"]["code"], "model_not_found", "{v}");
    assert_eq!(v["error"]["models"], json!(["chat", "coder"]), "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("`gpt-4`") && message.contains("chat, coder"),
        "{message}"
    );
    // No model and no default, or a body that is not JSON: which model is unknown.
    let (status, v, _) = ask(&deck, &chat(None));
    assert_eq!(
        (status, &v["error"]["code"]),
        (400, &json!("model_required")),
        "{v}"
    );
    let (status, v, _) = ask(&deck, b"model=chat");
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not a JSON object"),
        "{v}"
    );

    // `up` of coder's other recipe: chat's clients see nothing of it.
    let before = routes(&deck);
    let chat_client = Traffic::asking_for(&deck.door_url(), EVERY, "chat");
    chat_client.answers(5, Duration::from_secs(30));
    deck.sparkctl(&["up", "coder-b", "--yes"])
        .promoted("coder-b", deck.door_port);
    chat_client.answers(5, Duration::from_secs(30));
    let report = chat_client.stop();
    assert_eq!(report.failed() + report.cut, 0, "{report:?}");
    assert!(
        report.upstreams.iter().all(|u| u.starts_with("chat-a ")),
        "{:?}",
        report.upstreams
    );
    let after = routes(&deck);
    assert_eq!(after[0], before[0], "chat's route changed");
    assert_ne!(after[1], before[1], "coder's route did not change");
    // No added wait either: the front door held none of chat's requests, not even 10 ms.
    let fast = series(
        &deck,
        "sparkctl_frontdoor_queue_wait_seconds_bucket{model=\"chat\",le=\"0.01\"}",
    );
    let all = series(
        &deck,
        "sparkctl_frontdoor_queue_wait_seconds_count{model=\"chat\"}",
    );
    assert!(all >= 10.0 && fast == all, "{fast} of {all} chat requests");
    let (_, _, by) = ask(&deck, &chat(Some("coder")));
    assert!(by.starts_with("coder-b "), "{by}");

    // Per model: status, history, rollback.
    let rows = deck.status();
    let role = |name: &str| {
        let row = rows.iter().find(|r| r["name"] == name).unwrap();
        (row["role"].clone(), row["model"].clone())
    };
    assert_eq!(role("chat-a"), (json!("production"), json!("chat")));
    assert_eq!(role("coder-b"), (json!("production"), json!("coder")));
    assert_eq!(role("coder-a"), (json!("warm"), json!("coder")));
    let shown = deck.ok(&["status"]);
    assert!(shown.contains("model chat → chat-a"), "{shown}");
    let runs: Value =
        serde_json::from_str(&deck.ok(&["--json", "history", "--model", "coder"])).unwrap();
    let recipes: Vec<&str> = runs
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["recipe"].as_str().unwrap())
        .collect();
    assert_eq!(recipes, ["coder-b", "coder-a"], "{runs}");
    let err = deck.sparkctl(&["rollback"]).exits(2).stderr();
    assert!(
        err.contains("several models are served here (chat, coder)"),
        "{err}"
    );
    deck.ok(&["rollback", "--model", "coder"]);
    assert_eq!(routes(&deck), before);

    // A restart of the front door, or a stop and start, keeps every model's route.
    deck.ok(&["frontdoor", "restart"]);
    assert_eq!(routes(&deck), before);
    deck.ok(&["frontdoor", "stop"]);
    deck.ok(&["frontdoor", "start"]);
    assert_eq!(routes(&deck), before);
    let (_, _, by) = ask(&deck, &chat(Some("coder")));
    assert!(by.starts_with("coder-a "), "{by}");
    let (_, _, by) = ask(&deck, &chat(Some("chat")));
    assert!(by.starts_with("chat-a "), "{by}");
}

#[test]
fn a_default_model_takes_requests_without_one() {
    let deck = deck("models-default");
    sim(&deck, "chat-a", Some("chat"), "serve:\n  default: true\n");
    sim(&deck, "coder-a", Some("coder"), "");
    sim(&deck, "coder-d", Some("coder"), "serve:\n  default: true\n");
    deck.ok(&["rollback", "--to", "chat-a"]);
    deck.ok(&["rollback", "--to", "coder-a"]);
    let (status, _, by) = ask(&deck, &chat(None));
    assert_eq!(status, 200);
    assert!(by.starts_with("chat-a "), "{by}");
    let shown = deck.ok(&["status"]);
    assert!(shown.contains("model chat (default) → chat-a"), "{shown}");
    // Two defaults: refused before anything starts.
    refused(
        &deck,
        &["rollback", "--to", "coder-d"],
        &[
            "both say serve.default: true",
            "coder-d.yaml",
            "chat-a.yaml",
        ],
        "coder-d",
    );
}

#[test]
fn two_productions_answering_to_one_name_are_refused_with_nothing_changed() {
    let deck = deck("models-clash");
    // The unnamed model's production answers to its recipe's name, `chat`...
    sim(&deck, "chat", None, "");
    sim(&deck, "other", Some("chat"), "");
    sim(&deck, "coder-a", Some("coder"), "");
    deck.ok(&["rollback", "--to", "chat"]);
    // ... so a model named `chat` beside it could not be told apart.
    let clash = [
        "both answer to `chat` (a served name, an alias or a preset) as production",
        "chat.yaml",
        "other.yaml",
    ];
    refused(
        &deck,
        &["up", "other", "--yes", "--add-model"],
        &clash,
        "other",
    );

    // A production whose recipe now names another model: refused until it is fixed.
    deck.ok(&["rollback", "--to", "coder-a", "--add-model"]);
    let path = deck.dir.join("recipes/coder-a.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replace("served_name: coder", "served_name: coder2"),
    )
    .unwrap();
    let stale = [
        "coder-a",
        "is production of model `coder`",
        "now names `coder2`",
    ];
    refused(&deck, &["up", "other", "--yes"], &stale, "other");
    // Its requests still go where they went.
    let (status, _, by) = ask(&deck, &chat(Some("coder")));
    assert_eq!(status, 200);
    assert!(by.starts_with("coder-a "), "{by}");
}

/// The front door's `/metrics`, one series' value (`name{labels}`), 0 when absent.
pub(crate) fn series(deck: &Deck, line: &str) -> f64 {
    deck.metrics()
        .lines()
        .find_map(|l| l.strip_prefix(line)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The model `name` as `frontdoor status` says (`models[]`).
pub(crate) fn model_status(deck: &Deck, name: &str) -> Value {
    door(deck)["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .cloned()
        .unwrap_or(Value::Null)
}

/// Whether `recipe`'s deployment runs, as `status` says.
pub(crate) fn runs(deck: &Deck, recipe: &str) -> bool {
    deck.status_of(recipe)
        .is_some_and(|d| d["state"] == "running")
}

/// Waits up to `within` for `what` to hold.
pub(crate) fn until(within: Duration, what: &str, f: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + within;
    while !f() {
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// One request's wait for its model's server, as the front door says it.
pub(crate) fn queued_ms(deck: &Deck, model: &str) -> u64 {
    let a = answer(&deck.door_url(), chat(Some(model)));
    assert_eq!(a.status, 200, "{}", a.body);
    a.queued_ms.unwrap()
}

#[test]
fn an_idle_model_is_unloaded_after_its_ttl_and_the_next_request_starts_it_while_others_serve() {
    let deck = deck("models-ttl");
    sim(&deck, "chat-a", Some("chat"), "serve:\n  ttl: 2s\n");
    sim(&deck, "coder-a", Some("coder"), "");
    deck.ok(&["rollback", "--to", "chat-a"]);
    deck.ok(&["rollback", "--to", "coder-a"]);
    let first = deck.status_of("chat-a").unwrap()["id"].clone();
    assert!(queued_ms(&deck, "chat") < 100);
    // Idle past its ttl: its server stops, its production stays.
    until(Duration::from_secs(30), "chat-a unloaded", || {
        !runs(&deck, "chat-a")
    });
    let chat = model_status(&deck, "chat");
    assert_eq!(chat["load"], json!({"unloaded": "ttl"}), "{chat}");
    assert_eq!(listed(&deck), ["chat", "coder"]);
    let listing: Value = support::block_on({
        let url = deck.door_url();
        async move {
            reqwest::get(format!("{url}/v1/models"))
                .await
                .unwrap()
                .json()
                .await
                .unwrap()
        }
    });
    assert_eq!(
        listing["data"][0]["sparkctl"]["state"], "unloaded",
        "{listing}"
    );
    assert!(runs(&deck, "coder-a"));

    // The next request for it starts it and waits; coder's clients see nothing of it.
    let coder = Traffic::asking_for(&deck.door_url(), EVERY, "coder");
    coder.answers(5, Duration::from_secs(30));
    let waited = queued_ms(&deck, "chat");
    coder.answers(5, Duration::from_secs(30));
    let report = coder.stop();
    assert_eq!(report.failed() + report.cut, 0, "{report:?}");
    // The sim loads in 300 ms: the start is what it waited for.
    assert!(waited >= 250, "waited {waited} ms");
    assert!(runs(&deck, "chat-a"));
    assert_ne!(deck.status_of("chat-a").unwrap()["id"], first);
    assert_eq!(model_status(&deck, "chat")["load"], "loaded");
    assert_eq!(
        series(
            &deck,
            "sparkctl_frontdoor_model_loads_total{model=\"chat\"}"
        ),
        1.0
    );
    let unloads = "sparkctl_frontdoor_model_unloads_total{model=\"chat\",why=\"ttl\"}";
    assert!(series(&deck, unloads) >= 1.0);
    // Every coder request waited under 10 ms; the chat request that started it, longer.
    let coder_fast = series(
        &deck,
        "sparkctl_frontdoor_queue_wait_seconds_bucket{model=\"coder\",le=\"0.01\"}",
    );
    let coder_all = series(
        &deck,
        "sparkctl_frontdoor_queue_wait_seconds_count{model=\"coder\"}",
    );
    assert!(
        coder_all >= 10.0 && coder_fast == coder_all,
        "{coder_fast} of {coder_all}"
    );
    let chat_slow = series(
        &deck,
        "sparkctl_frontdoor_queue_wait_seconds_bucket{model=\"chat\",le=\"0.1\"}",
    );
    let chat_all = series(
        &deck,
        "sparkctl_frontdoor_queue_wait_seconds_count{model=\"chat\"}",
    );
    assert_eq!(
        chat_all - chat_slow,
        1.0,
        "one chat request waited for the start"
    );
    // The live page's data says what chat's clients waited.
    let data: Value = support::block_on({
        let url = deck.door_url();
        async move {
            let r = reqwest::get(format!("{url}/_sparkctl/data")).await.unwrap();
            r.json().await.unwrap()
        }
    });
    let chat = data["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "chat")
        .unwrap();
    assert_eq!(
        (chat["loads"].as_u64(), chat["load"].as_str()),
        (Some(1), Some("loaded"))
    );
    assert!(chat["waits"]["max_ms"].as_f64().unwrap() >= 250.0, "{chat}");
    assert_eq!(chat["waits"]["requests"], 2, "{chat}");
}

#[test]
fn a_preloaded_model_starts_with_the_front_door_and_another_when_a_request_names_it() {
    let deck = deck("models-preload");
    sim(&deck, "chat-a", Some("chat"), "serve:\n  preload: true\n");
    sim(&deck, "coder-a", Some("coder"), "");
    deck.ok(&["rollback", "--to", "chat-a"]);
    deck.ok(&["rollback", "--to", "coder-a"]);
    // A reboot, as the front door sees it: it starts with neither server running.
    deck.ok(&["frontdoor", "stop"]);
    deck.ok(&["down", "chat-a"]);
    deck.ok(&["down", "coder-a"]);
    deck.ok(&["frontdoor", "start"]);
    until(Duration::from_secs(30), "chat-a preloaded", || {
        runs(&deck, "chat-a")
    });
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        !runs(&deck, "coder-a"),
        "coder-a started with nobody asking"
    );
    assert_eq!(
        model_status(&deck, "coder")["load"],
        json!({"unloaded": "boot"})
    );
    assert!(queued_ms(&deck, "coder") >= 250);
    assert!(runs(&deck, "coder-a"));
    // Both routes kept through it all.
    assert_eq!(listed(&deck), ["chat", "coder"]);
}

/// `sparkctl ARGS` in a pool of 5 GB, no reserve: two of the 2 GB sims fit, three do not.
pub(crate) fn in_five_gb(deck: &Deck, args: &[&str]) -> String {
    let ran = support::Ran::of(
        deck.cmd(args)
            .env("SPARKCTL_MEMORY_GB", "5")
            .env("SPARKCTL_MEMORY_RESERVE_GB", "0")
            .env("SPARKCTL_WARM_GRACE", "0s"),
    );
    ran.succeeds().stdout()
}

/// A request for `model` asking `tokens` tokens, from another thread: its status and what
/// it waited for its model's server.
pub(crate) fn ask_later(
    deck: &Deck,
    model: &str,
    tokens: u32,
) -> std::thread::JoinHandle<(u16, u64)> {
    let url = deck.door_url();
    let body = json!({
        "model": model, "max_tokens": tokens,
        "messages": [{"role": "user", "content": "Tell me a long story."}],
    })
    .to_string()
    .into_bytes();
    std::thread::spawn(move || {
        let a = answer(&url, body);
        (a.status, a.queued_ms.unwrap_or(0))
    })
}

/// Three models in a pool that holds two: the one marked `keep` stays whatever its age; the
/// least recently used idle one is evicted for a start; one with a request in flight is
/// not — the start waits for its answer, which is never cut.
#[test]
fn a_start_that_does_not_fit_evicts_the_idle_model_not_the_kept_or_the_busy_one() {
    let deck = deck("models-evict");
    sim(
        &deck,
        "chat-a",
        Some("chat"),
        "serve:\n  keep: true\n  preload: true\n",
    );
    sim(&deck, "coder-a", Some("coder"), "");
    // tools answers slowly: 100 tokens at 25/s, 4 s in flight.
    sim(&deck, "tools-a", Some("tools"), "");
    let path = deck.dir.join("recipes/tools-a.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let slow = "--token-rate, \"25\", --tokens, \"100\"";
    std::fs::write(
        &path,
        text.replace("--token-rate, \"200\", --tokens, \"8\"", slow),
    )
    .unwrap();
    for r in ["chat-a", "coder-a", "tools-a"] {
        deck.ok(&["rollback", "--to", r]);
    }
    // A reboot as the front door sees it, in the small pool: chat preloads, the others wait
    // for a request.
    deck.ok(&["frontdoor", "stop"]);
    for r in ["chat-a", "coder-a", "tools-a"] {
        deck.ok(&["down", r]);
    }
    in_five_gb(&deck, &["frontdoor", "start"]);
    until(Duration::from_secs(30), "chat-a preloaded", || {
        runs(&deck, "chat-a")
    });
    // coder fits beside chat; then chat is the least recently used, but kept: tools'
    // start evicts coder.
    assert!(queued_ms(&deck, "coder") >= 250);
    std::thread::sleep(Duration::from_millis(500));
    let (status, waited) = ask_later(&deck, "tools", 1).join().unwrap();
    assert_eq!(status, 200, "{}", door_log(&deck));
    assert!(waited >= 250, "tools waited {waited} ms");
    assert!(runs(&deck, "chat-a") && runs(&deck, "tools-a"));
    assert!(!runs(&deck, "coder-a"), "coder-a still runs");
    assert_eq!(
        model_status(&deck, "coder")["load"],
        json!({"unloaded": "evicted"})
    );
    let evicted = "sparkctl_frontdoor_model_unloads_total{model=\"coder\",why=\"evicted\"}";
    assert_eq!(series(&deck, evicted), 1.0);

    // tools busy with a 4 s answer: coder's request waits for it, then tools is evicted.
    let long = ask_later(&deck, "tools", 100);
    until(Duration::from_secs(10), "tools' answer in flight", || {
        model_status(&deck, "tools")["in_flight"] == 1
    });
    let began = std::time::Instant::now();
    let coder = ask_later(&deck, "coder", 1);
    std::thread::sleep(Duration::from_secs(1));
    assert!(runs(&deck, "tools-a") && !runs(&deck, "coder-a"));
    assert_eq!(model_status(&deck, "coder")["waiting"], 1);
    let (status, _) = long.join().unwrap();
    assert_eq!(status, 200, "tools' answer: {}", door_log(&deck));
    let tools_done = began.elapsed();
    let (status, waited) = coder.join().unwrap();
    assert_eq!(status, 200, "coder's request: {}", door_log(&deck));
    assert!(
        Duration::from_millis(waited) >= tools_done.saturating_sub(Duration::from_millis(500)),
        "coder waited {waited} ms, tools answered after {tools_done:?}"
    );
    assert!(runs(&deck, "chat-a") && runs(&deck, "coder-a"));
    assert!(!runs(&deck, "tools-a"), "tools-a still runs");
    let shown = deck.ok(&["status"]);
    assert!(
        shown.contains("tools") && shown.contains("evicted"),
        "{shown}"
    );
}

/// What the front doors of this deck logged.
pub(crate) fn door_log(deck: &Deck) -> String {
    let mut logs: Vec<_> = std::fs::read_dir(deck.dir.join("state/logs/frontdoor"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    logs.sort();
    (logs.iter())
        .map(|p| std::fs::read_to_string(p).unwrap_or_default())
        .collect()
}

/// `POST path` with no body: its status and body.
pub(crate) fn post_status(url: &str, path: &str) -> (u16, String) {
    let out = std::process::Command::new("curl")
        .args(["-s", "-m", "30", "-X", "POST", "-w", "\n%{http_code}"])
        .arg(format!("{url}{path}"))
        .output()
        .unwrap();
    let text = support::text(&out.stdout);
    let (body, code) = text.rsplit_once('\n').unwrap_or_default();
    (code.parse().unwrap_or(0), body.to_string())
}
