//! The coding agents' APIs (Anthropic Messages, OpenAI Responses) at the door: the sim
//! serves them as the real `llama-server` does (their events side by side), and the live
//! checks read them like chat — a production that answers empty on `/v1/messages` to a
//! client that uses only that API is seen and restarted by the floor gates; a client
//! that speaks only Messages is paired under shadow, captured and replayed, and a suite
//! asks in either API, all on the real trained model.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{self, free_port, Deck, Sim};

/// A streamed request to `url`'s `path`: the `type` of each event, repeats folded.
/// `body` posted to `url`'s `path`: the answer's text, once it is a 200.
fn post(url: &str, path: &str, body: Value) -> String {
    let url = format!("{url}{path}");
    support::block_on(async move {
        let r = reqwest::Client::new()
            .post(url)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        assert_eq!(status, 200, "{text}");
        text
    })
}

/// A streamed request: the `type` of each event, repeats folded.
fn event_types(url: &str, path: &str, body: Value) -> Vec<String> {
    let text = post(url, path, body);
    let mut types: Vec<String> = Vec::new();
    for line in text.lines() {
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        let v: Value = serde_json::from_str(data).unwrap_or_else(|e| panic!("{e}: {data}"));
        let t = v["type"].as_str().unwrap().to_string();
        if types.last() != Some(&t) {
            types.push(t);
        }
    }
    types
}

fn whole(url: &str, path: &str, body: Value) -> Value {
    let text = post(url, path, body);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
    k.retain(|k| !["completed_at", "created_at", "incomplete_details"].contains(&k.as_str()));
    k.sort();
    k
}

#[test]
fn the_sim_speaks_the_agents_apis_as_llama_server_does() {
    let (binary, model) = support::llama_server_and_model();
    let port = free_port();
    let mut real = Command::new(&binary)
        .args([
            "-m",
            model.to_str().unwrap(),
            "--port",
            &port.to_string(),
            "-t",
            "1",
            "-c",
            "512",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let real_url = format!("http://127.0.0.1:{port}");
    let began = std::time::Instant::now();
    while support::http_status(&real_url, "/health") != Some(200) {
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "llama-server did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let sim = Sim::start(&["--tokens", "4", "--token-rate", "1000"]);
    let messages = json!({"model": "m", "max_tokens": 4, "stream": true,
        "messages": [{"role": "user", "content": "What is 2+3?"}]});
    let responses = json!({"model": "m", "max_output_tokens": 4, "stream": true,
        "input": "What is 2+3?"});
    for (path, body) in [("/v1/messages", &messages), ("/v1/responses", &responses)] {
        let theirs = event_types(&real_url, path, body.clone());
        let ours = event_types(&sim.url, path, body.clone());
        assert_eq!(
            ours, theirs,
            "{path}: the sim's events beside llama-server's"
        );
        let mut whole_body = body.clone();
        whole_body["stream"] = json!(false);
        let (theirs, ours) = (
            whole(&real_url, path, whole_body.clone()),
            whole(&sim.url, path, whole_body),
        );
        let mut their_keys = keys(&theirs);
        their_keys.retain(|k| k != "completed_at");
        assert_eq!(keys(&ours), their_keys, "{path}: {ours} beside {theirs}");
        let (a, b) = (&ours["usage"], &theirs["usage"]);
        for key in ["input_tokens", "output_tokens"] {
            assert!(a[key].is_u64() && b[key].is_u64(), "{path}: {a} {b}");
        }
    }
    real.kill().unwrap();
    real.wait().unwrap();
}

#[test]
fn an_empty_production_on_messages_is_seen_and_restarted_by_the_floor_gates() {
    let deck = Deck::new("agents-empty");
    let quick = "--load-time, 200ms, --ttft, 2ms, --token-rate, \"2000\", --tokens, \"16\"";
    // Its benchmark (chat) and readiness see answers; then every answer is empty.
    deck.recipe(
        "prod",
        &format!(
            "engine: sim\nruntime: process\nserver:\n  port: {}\n  args: [{quick}, --empty-after, \"14\"]\n  memory_gb: 7\nhealth:\n  timeout: 30s\n",
            free_port()
        ),
    );
    deck.ok(&["rollback", "--to", "prod"]);
    let seen = restarted_for_empty_answers(&deck, Duration::from_secs(120), Api::Messages);
    // The client saw answers with no text at all (not errors: those are not counted).
    let empty = |(status, text): &(u16, String)| {
        *status == 200 && !text.contains("text_delta") && !text.contains("\"text\":\"T")
    };
    assert!(seen.iter().any(empty), "{seen:?}");
}

/// The agents' API a client speaks.
#[derive(Clone, Copy)]
enum Api {
    Messages,
    Responses,
}

impl Api {
    fn path(self) -> &'static str {
        match self {
            Api::Messages => "/v1/messages",
            Api::Responses => "/v1/responses",
        }
    }

    /// A question in this API, streamed or whole.
    fn ask(self, stream: bool) -> Value {
        let q = "What is the capital of Japan?";
        match self {
            Api::Messages => json!({"model": "any", "max_tokens": 16, "stream": stream,
                "messages": [{"role": "user", "content": q}]}),
            Api::Responses => {
                json!({"model": "any", "max_output_tokens": 16, "stream": stream, "input": q})
            }
        }
    }
}

/// A client of `api` alone (streamed and whole in turn) at `deck`'s door until the floor
/// gates restart production for empty answers (within `within`): what it saw.
fn restarted_for_empty_answers(deck: &Deck, within: Duration, api: Api) -> Vec<(u16, String)> {
    let url = deck.door_url();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    let client = std::thread::spawn(move || {
        support::block_on(async move {
            let http = reqwest::Client::builder().no_proxy().build().unwrap();
            let mut seen = Vec::new();
            let mut stream = false;
            while !flag.load(std::sync::atomic::Ordering::SeqCst) {
                stream = !stream;
                let sent = http
                    .post(format!("{url}{}", api.path()))
                    .json(&api.ask(stream))
                    .send()
                    .await;
                if let Ok(r) = sent {
                    let status = r.status().as_u16();
                    seen.push((status, r.text().await.unwrap_or_default()));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            seen
        })
    });
    let began = std::time::Instant::now();
    let restart = loop {
        let v: Value = serde_json::from_str(&deck.ok(&["--json", "history"])).unwrap();
        let found = (v.as_array().unwrap().iter()).find(|r| r["command"] == "restart");
        if let Some(r) = found {
            break r.clone();
        }
        assert!(began.elapsed() < within, "no restart: {v}");
        std::thread::sleep(Duration::from_millis(500));
    };
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let seen = client.join().unwrap();
    let why = restart["error"].as_str().unwrap();
    assert!(
        why.contains("prod answers badly") && why.contains("non_empty"),
        "{why}"
    );
    seen
}

/// A real `llama-server` that answers empty, behind the door as production, seen by a
/// client of `api` alone and restarted by the floor gates: what that client saw.
fn real_empty_production(tag: &str, api: Api) -> Vec<String> {
    let (binary, model) = support::llama_server_and_model();
    let deck = Deck::new(tag);
    // A grammar that admits only the empty string: every answer ends at once, empty, while
    // /health stays green — a server configured wrong, as a real one can be.
    deck.recipe(
        "prod",
        &format!(
            "engine: llama-server\nruntime: process\nbinary: {}\nmodel:\n  path: {}\nserver:\n  port: {}\n  args: [-t, \"1\", -c, \"512\", --grammar, \"root ::= \\\"\\\"\"]\n  memory_gb: 1\nhealth:\n  timeout: 2m\n",
            binary.display(),
            model.display(),
            free_port()
        ),
    );
    // Made production without a benchmark, as `rollback --to` does.
    deck.ok(&["rollback", "--to", "prod"]);
    let seen = restarted_for_empty_answers(&deck, Duration::from_secs(180), api);
    let _ = deck.run(&["down", "prod"]);
    seen.into_iter().map(|(_, t)| t).collect()
}

#[test]
fn a_real_llama_server_answering_empty_on_messages_is_restarted_by_the_floor_gates() {
    let texts = real_empty_production("agents-empty-llama", Api::Messages);
    // The client saw the server's own empty answers: no text at all.
    assert!(
        texts.iter().any(|t| t.contains("\"content\":[]")),
        "{texts:?}"
    );
    assert!(texts.iter().all(|t| !t.contains("text_delta")), "{texts:?}");
}

#[test]
fn a_real_llama_server_answering_empty_on_responses_is_restarted_by_the_floor_gates() {
    let texts = real_empty_production("agents-empty-responses", Api::Responses);
    // The server's own answers: completed, with no output text.
    assert!(
        texts.iter().any(|t| t.contains("\"status\":\"completed\"")),
        "{texts:?}"
    );
    assert!(
        texts.iter().all(|t| !t.contains("output_text.delta")),
        "{texts:?}"
    );
}

/// SmolLM2 on the CPU llama-server, greedy by default (`--temp 0`: a request that names no
/// temperature gets the same answer every time), benchmarked by the `agents` suite.
fn smollm(deck: &Deck, name: &str, (server, model): (&Path, &Path), extra: &str) {
    deck.recipe(
        name,
        &format!(
            "engine: llama-server\nruntime: process\nbinary: {}\nmodel:\n  path: {}\n  served_name: smollm\nserver:\n  port: {}\n  args: [--jinja, -t, \"1\", -c, \"2048\", -np, \"1\", --temp, \"0\"]\n  memory_gb: 1\nhealth:\n  timeout: 2m\nbench:\n  suite: agents\n  gates:\n    non_empty: \"== 100%\"\n    expected_answer: \"== 100%\"\n{extra}",
            server.display(),
            model.display(),
            free_port()
        ),
    );
}

/// A suite asked in the agents' APIs only: Claude Code's and Codex's.
const AGENTS_SUITE: &str = "name: agents\nwarmup: 1\nruns: 5\ncases:\n  - name: in-messages\n    api: messages\n    turns: [\"What is the capital of France? Answer in one sentence.\"]\n    max_tokens: 16\n    expect: Paris\n  - name: in-responses\n    api: responses\n    turns: [\"What is 2+3? Answer with the number.\"]\n    max_tokens: 8\n    expect: \"5\"\n";

const FACTS: [&str; 2] = [
    "What is the capital of France? Answer in one sentence.",
    "What is the capital of Japan? Answer in one sentence.",
];

/// A client that speaks only Anthropic Messages, streamed, until `stop`: each answer's
/// text, and whether its stream ended with `message_stop`.
fn messages_client(
    url: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<Vec<(String, bool)>> {
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut i = 0;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let body = json!({"model": "smollm", "max_tokens": 24, "stream": true,
                "temperature": 0, "messages": [{"role": "user", "content": FACTS[i % 2]}]});
            let text = post(&url, "/v1/messages", body);
            let mut said = String::new();
            for line in text.lines() {
                let Some(data) = line.strip_prefix("data: ") else {
                    continue;
                };
                let v: Value = serde_json::from_str(data).unwrap();
                said.push_str(v["delta"]["text"].as_str().unwrap_or_default());
            }
            seen.push((said, text.contains("\"message_stop\"")));
            i += 1;
        }
        seen
    })
}

#[test]
fn a_messages_client_is_shadowed_captured_and_replayed_on_the_real_model() {
    let (server, model) = crate::eval::llama_server_and_smollm();
    let bin = (server.as_path(), model.as_path());
    let deck = Deck::new("agents-shadow");
    std::fs::create_dir_all(deck.dir.join("recipes/suites")).unwrap();
    std::fs::write(deck.dir.join("recipes/suites/agents.yaml"), AGENTS_SUITE).unwrap();
    smollm(&deck, "good", bin, "");
    smollm(
        &deck,
        "again",
        bin,
        "rollout:\n  mode: shadow\n  ttft_tolerance: 1000%\n  itl_tolerance: 300%\n",
    );
    // The suite asks in Messages and in Responses; its expected answers gate the promotion,
    // so the benchmark read both APIs' streams to their text.
    deck.sparkctl(&["up", "good", "--yes"])
        .promoted("good", deck.door_port);
    let record: Value = serde_json::from_str(&deck.ok(&["--json", "history"])).unwrap();
    let bench: Value =
        serde_json::from_slice(&std::fs::read(record[0]["bench"].as_str().unwrap()).unwrap())
            .unwrap();
    for s in support::measured(&bench) {
        assert_eq!(s["ok"], true, "{s}");
        // Counted by the server (its last event's usage), not estimated from chunks.
        assert_eq!(s["usage_estimated"], false, "{s}");
        assert!(s["completion_tokens"].as_u64().unwrap() > 0, "{s}");
    }
    deck.ok(&["frontdoor", "capture", "on"]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let client = messages_client(deck.door_url(), stop.clone());
    // Paired under shadow: the candidate's answers to the Messages client, beside
    // production's, and promoted as the same serving.
    deck.sparkctl(&["up", "again", "--shadow", "12", "--yes"])
        .succeeds();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let seen = client.join().unwrap();
    let run: Value = serde_json::from_str(&deck.ok(&["--json", "history"])).unwrap();
    let run = &run[0];
    let j = &run["rollout"]["judgement"];
    println!(
        "Messages client under shadow: {} after {} pairs compared ({} copies to the candidate): {}",
        j["decision"], j["compared"], run["rollout"]["tally"]["to_candidate"], j["reason"]
    );
    assert_eq!(run["outcome"], "promoted", "{run}");
    assert!(j["compared"].as_u64().unwrap() >= 3, "{j}");
    assert!(seen.iter().all(|(_, done)| *done), "{seen:?}");
    assert!(seen.iter().any(|(t, _)| t.contains("Paris")), "{seen:?}");
    deck.ok(&["frontdoor", "capture", "off"]);

    // Captured as Messages requests, and replayed through the same API (at the door: a
    // replay has no expected answers for the recipe's gate to read).
    let out = deck.dir.join("replay.json");
    deck.ok(&[
        "bench",
        &deck.door_url(),
        "--replay",
        "captured",
        "--out",
        out.to_str().unwrap(),
    ]);
    let r: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let prompts = support::strings(&r["replay"]["prompts"]);
    assert!(
        prompts.len() >= seen.len(),
        "{prompts:?} for {}",
        seen.len()
    );
    assert!(prompts.iter().all(|p| FACTS.contains(p)), "{prompts:?}");
    let samples = support::measured(&r);
    assert!(samples.iter().all(|s| s["ok"] == true), "{samples:?}");
    let paris = samples
        .iter()
        .filter(|s| s["content"].as_str().unwrap_or_default().contains("Paris"))
        .count();
    assert!(paris >= 1, "{samples:?}");
    let _ = deck.run(&["down", "again"]);
}
