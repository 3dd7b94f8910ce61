//! `sparkctl bench` against the simulated engine (known TTFT, token rate, reasoning,
//! leaks, markdown, tool-call styles) and against scripted broken servers on loopback.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;

use serde_json::{json, Value};

use crate::support::{self, measured, Deck, Ran, Sim};

/// A small suite: one factual case, one tool case, a 3-turn case; 1 warm-up, 5 runs.
fn quick_suite(deck: &Deck) -> PathBuf {
    let path = deck.dir.join("quick.yaml");
    std::fs::write(
        &path,
        r#"name: quick
warmup: 1
runs: 5
system: Answer briefly.
tools:
  web_search:
    type: function
    function: {name: web_search, description: Search the web, parameters: {type: object, properties: {query: {type: string}}, required: [query]}}
cases:
  - name: factual
    turns: ["What is the capital of Japan?"]
    expect: Tokyo
  - name: tool
    turns: ["Do a web search for the news."]
    tools: [web_search]
    expect_tool: web_search
  - name: chat
    turns: ["Hi", "How are you?", "What is the capital of Japan?"]
"#,
    )
    .unwrap();
    path
}

/// Runs `bench URL` with the quick suite and extra args, insisting on exit `code`; returns
/// the run and its result JSON (null where none was written).
fn bench(deck: &Deck, url: &str, extra: &[&str], code: i32) -> (Ran, Value) {
    let (ran, result) = bench_run(deck, url, extra);
    (ran.exits(code), result)
}

/// `bench`, whatever it exits with.
fn bench_run(deck: &Deck, url: &str, extra: &[&str]) -> (Ran, Value) {
    let suite = quick_suite(deck);
    let out_file = deck.dir.join(format!(
        "result-{}.json",
        extra
            .join("_")
            .replace(['/', ' ', '=', '\'', '%', '<', '>'], "")
    ));
    let mut args = vec![
        "bench",
        url,
        "--suite",
        suite.to_str().unwrap(),
        "--out",
        out_file.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let ran = deck.sparkctl(&args);
    let result = std::fs::read(&out_file)
        .map(|b| serde_json::from_slice(&b).unwrap())
        .unwrap_or(Value::Null);
    (ran, result)
}

/// Timings injected into the sim against what the bench measured, within a band: `check`
/// runs the bench on a fresh sim and says which figure left its band. A loaded CI machine
/// (three test binaries beside a real vLLM on two cores) can stall the client or the sim
/// past a band for a whole run; a wrong formula leaves it on every run. So the band must
/// hold on one of three runs, and every miss is shown if none does.
fn within_bands_on_one_of_three(mut check: impl FnMut() -> Result<(), String>) {
    let mut misses = Vec::new();
    for _ in 0..3 {
        match check() {
            Ok(()) => return,
            Err(miss) => misses.push(miss),
        }
    }
    panic!("outside the band on three runs: {misses:#?}");
}

/// `Err` naming the figure when `v` is outside `band`.
fn band(what: &str, v: f64, band: std::ops::Range<f64>) -> Result<(), String> {
    match band.contains(&v) {
        true => Ok(()),
        false => Err(format!("{what} {v:.2} outside {band:?}")),
    }
}

fn case<'a>(r: &'a Value, name: &str) -> &'a Value {
    r["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["case"] == name)
        .unwrap()
}

#[test]
fn metrics_follow_the_injected_timings_and_cold_starts_are_kept_apart() {
    let deck = Deck::new("bench-metrics");
    let mut last = None;
    within_bands_on_one_of_three(|| {
        let sim = Sim::start(&["--ttft", "60ms", "--token-rate", "100", "--tokens", "12"]);
        let (ran, r) = bench(&deck, &sim.url, &[], 0);
        let factual = case(&r, "factual");
        let ttft = factual["ttft_ms"]["p50"].as_f64().unwrap();
        let decode = factual["decode_tps"]["p50"].as_f64().unwrap();
        let itl = factual["itl_ms"]["p50"].as_f64().unwrap();
        let bands = band("TTFT p50 (ms) for a 60 ms TTFT", ttft, 60.0..70.0)
            .and(band("decode (tok/s) for 100 tok/s", decode, 90.0..110.0))
            .and(band("ITL p50 (ms) for 10 ms", itl, 9.0..11.5));
        last = Some((ran, r));
        bands
    });
    let (ran, r) = last.unwrap();
    assert_eq!(r["verdict"], "pass");
    assert_eq!(r["warmup"], 1);
    assert_eq!(r["runs"], 5);
    // 1 warm-up + 5 runs of 1 + 1 + 3 turns.
    assert_eq!(r["samples"].as_array().unwrap().len(), 6 * 5);
    assert_eq!(measured(&r).len(), 5 * 5);
    let factual = case(&r, "factual");
    assert!(factual["cold_start_ttft_ms"].as_f64().is_some());
    assert_eq!(factual["samples"], 5, "warm-ups are not in the statistics");
    assert_eq!(
        case(&r, "chat")["ttft_p50_per_turn_ms"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    for key in ["p50", "p90", "p99", "min", "max"] {
        assert!(factual["e2e_ms"][key].as_f64().is_some(), "{key}");
    }
    // Tokens come from usage, not an estimate; the context says what ran.
    assert_eq!(r["usage_estimated"], false);
    let s = measured(&r)[0];
    assert!(s["completion_tokens"].as_u64().unwrap() > 0);
    assert!(s["prompt_tokens"].as_u64().is_some());
    assert_eq!(r["target"]["model"], "sim-model");
    assert!(r["target"]["server_version"]
        .as_str()
        .unwrap()
        .contains("sparkctl-sim"));
    assert!(r["sparkctl_version"].is_string() && r["host"].is_string() && r["time"].is_string());
    ran.says("TTFT p50");
    assert_eq!(r["quality"]["expected_answer"], 100.0);
    assert_eq!(r["quality"]["tool_calls"], 100.0);
}

#[test]
fn reasoning_before_content_is_timed_apart_ttft_then_ttfo() {
    let deck = Deck::new("bench-reasoning");
    let mut last = None;
    within_bands_on_one_of_three(|| {
        let sim = Sim::start(&[
            "--ttft",
            "40ms",
            "--token-rate",
            "100",
            "--tokens",
            "8",
            "--reasoning-tokens",
            "10",
            "--reasoning-as",
            "field",
        ]);
        let (ran, r) = bench(&deck, &sim.url, &["--gate", "thinking_leak=== 0%"], 0);
        let factual = case(&r, "factual");
        let ttfr = factual["ttfr_ms"]["p50"].as_f64().unwrap();
        let ttft = factual["ttft_ms"]["p50"].as_f64().unwrap();
        let ttfo = factual["ttfo_ms"]["p50"].as_f64().unwrap();
        // TTFT is the first token of any kind (vLLM's and AIPerf's): a definition, so
        // exact on every run.
        assert_eq!(ttft, ttfr);
        // TTFO, the first output, comes after ten reasoning tokens at 10 ms each, which the
        // sim sends on a schedule from the request: never before 40 + 100 ms, however late
        // the first reasoning token (a stall delays it, and the rest catch up). Counting
        // reasoning as output would give TTFO = TTFR.
        assert!(
            ttfo > ttfr && ttfo >= 135.0,
            "TTFO {ttfo} must not count reasoning (reasoning at {ttfr})"
        );
        // The band tells the first reasoning token from the first output (140 ms and more),
        // with room for a loaded machine's lag (51-56 ms seen on three runs beside a build).
        let bands = band(
            "first reasoning token (ms) for a 40 ms TTFT",
            ttfr,
            40.0..80.0,
        );
        last = Some((ran, r));
        bands
    });
    let (ran, r) = last.unwrap();
    ran.says("TTFO p50");
    assert_eq!(r["quality"]["thinking_leak"], 0.0);
    let s = measured(&r)[0];
    assert_eq!(s["reasoning_deltas"], 10);
    assert!(s["reasoning"].as_str().unwrap().len() > 10);
}

#[test]
fn a_thinking_leak_markdown_and_a_tool_call_left_in_content_fail_their_gates() {
    let deck = Deck::new("bench-gates");
    let gates = [
        "--gate",
        "thinking_leak=== 0%",
        "--gate",
        "no_markdown=>= 80%",
        "--gate",
        "tool_calls=>= 60%",
    ];
    let leaky = Sim::start(&[
        "--ttft",
        "10ms",
        "--token-rate",
        "500",
        "--reasoning-tokens",
        "5",
        "--reasoning-as",
        "leak",
        "--markdown",
        "--tool-calls",
        "content",
    ]);
    let (ran, r) = bench(&deck, &leaky.url, &gates, 1);
    assert_eq!(r["verdict"], "fail");
    assert_eq!(r["quality"]["thinking_leak"], 100.0);
    // Every text answer is markdown; only the tool case's answers (a tool call) are not.
    assert_eq!(case(&r, "factual")["checks"]["no_markdown"], 0.0);
    assert!(r["quality"]["no_markdown"].as_f64().unwrap() < 80.0);
    assert_eq!(
        r["quality"]["tool_calls"], 0.0,
        "the seeds' qwen3_coder case: <tool_call> in content"
    );
    let verdicts: Vec<(&str, &str)> = r["gates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["gate"].as_str().unwrap(), g["outcome"].as_str().unwrap()))
        .collect();
    assert_eq!(
        verdicts,
        [
            ("no_markdown", "fail"),
            ("thinking_leak", "fail"),
            ("tool_calls", "fail")
        ]
    );
    ran.says("FAIL").says("verdict: fail");

    // The same gates pass on a well-behaved server.
    let good = Sim::start(&[
        "--ttft",
        "10ms",
        "--token-rate",
        "500",
        "--reasoning-tokens",
        "5",
    ]);
    let (_, r) = bench(&deck, &good.url, &gates, 0);
    assert!(
        r["gates"]
            .as_array()
            .unwrap()
            .iter()
            .all(|g| g["outcome"] == "pass"),
        "{}",
        r["gates"]
    );
}

#[test]
fn speed_gates_and_gates_relative_to_production() {
    let deck = Deck::new("bench-speed");
    let base_file = deck.dir.join("production.json");
    let mut last = None;
    within_bands_on_one_of_three(|| {
        let production = Sim::start(&["--ttft", "20ms", "--token-rate", "200", "--tokens", "16"]);
        let (ran, base) = bench_run(
            &deck,
            &production.url,
            &[
                "--gate",
                "ttft_p50_ms=<= 100",
                "--gate",
                "decode_tps_p50=>= 150",
            ],
        );
        if ran.code() != Some(0) {
            return Err(format!(
                "production (200 tok/s) missed >= 150 tok/s: {}",
                ran.shown()
            ));
        }
        std::fs::write(&base_file, serde_json::to_vec(&base).unwrap()).unwrap();

        // A candidate that decodes at half the speed: absolute gates can pass while the
        // relative one catches it.
        let slow = Sim::start(&["--ttft", "20ms", "--token-rate", "100", "--tokens", "16"]);
        let (ran, r) = bench(
            &deck,
            &slow.url,
            &[
                "--baseline",
                base_file.to_str().unwrap(),
                "--gate",
                "decode_tps_p50=>= 50",
                "--gate",
                "vs_production_decode=>= -10%",
                "--gate",
                "ttft_p50_ms=<= 10",
            ],
            1,
        );
        let gate = |name: &str| {
            r["gates"]
                .as_array()
                .unwrap()
                .iter()
                .find(|g| g["gate"] == name)
                .unwrap()
                .clone()
        };
        assert_eq!(gate("decode_tps_p50")["outcome"], "pass");
        assert_eq!(
            gate("ttft_p50_ms")["outcome"],
            "fail",
            "20 ms TTFT is over 10"
        );
        let rel = gate("vs_production_decode");
        assert_eq!(rel["outcome"], "fail");
        let change = rel["value"].as_f64().unwrap();
        let bands = band(
            "half the speed (%) against production",
            change,
            -55.0..-45.0,
        );
        last = Some((ran, production, slow));
        bands
    });
    let (ran, production, slow) = last.unwrap();
    // The side-by-side table names both.
    ran.says(&format!("DECODE {}", production.url));

    // Alone, without a production result, the relative gate is left out and said so,
    // neither failed nor passed.
    let (ran, r) = bench(
        &deck,
        &slow.url,
        &["--gate", "vs_production_decode=>= -10%"],
        0,
    );
    assert_eq!(r["gates"], json!([]));
    assert_eq!(r["verdict"], "pass");
    ran.says("not judged without --baseline: vs_production_decode");

    // compare + chart
    let cand_file = deck.dir.join("candidate.json");
    std::fs::write(&cand_file, serde_json::to_vec(&r).unwrap()).unwrap();
    let svg = deck.dir.join("chart.svg");
    let out = deck.ok(&[
        "bench",
        "compare",
        base_file.to_str().unwrap(),
        cand_file.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert!(out.contains("factual") && out.contains("turn 3"), "{out}");
    let chart = std::fs::read_to_string(&svg).unwrap();
    assert!(
        chart.starts_with("<svg") && chart.contains("TTFT p50 (ms)") && chart.contains("chat t2"),
        "{chart}"
    );
}

#[test]
fn a_server_without_usage_gets_a_labelled_estimate() {
    let deck = Deck::new("bench-nousage");
    within_bands_on_one_of_three(|| {
        let sim = Sim::start(&[
            "--ttft",
            "10ms",
            "--token-rate",
            "200",
            "--tokens",
            "10",
            "--no-usage",
        ]);
        let (ran, r) = bench(&deck, &sim.url, &[], 0);
        assert_eq!(r["usage_estimated"], true);
        ran.says("ESTIMATED");
        let decode = case(&r, "factual")["decode_tps"]["p50"].as_f64().unwrap();
        band(
            "estimated decode (tok/s) for 200 tok/s",
            decode,
            150.0..250.0,
        )
    });
}

/// What a scripted server does with one request.
enum Reply {
    /// Writes this raw HTTP response and closes the connection.
    Close(String),
    /// Writes it and keeps the connection for the next request.
    KeepOpen(String),
    /// Closes the connection without a byte.
    Hangup,
}

/// A loopback server that runs `script(request line, nth request on this connection)`;
/// GETs of /v1/models are answered for it.
fn scripted_server(script: impl Fn(&str, usize) -> Reply + Send + Sync + 'static) -> String {
    let script = std::sync::Arc::new(script);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let script = script.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                for nth in 1.. {
                    let mut request = String::new();
                    let mut length = 0;
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap_or(0);
                        }
                        if request.is_empty() {
                            request = line.clone();
                        }
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let mut body = vec![0u8; length];
                    let _ = reader.read_exact(&mut body);
                    let reply = scripted_get(&request).unwrap_or_else(|| script(&request, nth));
                    match reply {
                        Reply::Close(r) => {
                            let _ = conn.write_all(r.as_bytes());
                            return;
                        }
                        Reply::KeepOpen(r) => {
                            let _ = conn.write_all(r.as_bytes());
                        }
                        Reply::Hangup => return,
                    }
                }
            });
        }
    });
    url
}

/// The answers every scripted server gives to GETs.
fn scripted_get(request: &str) -> Option<Reply> {
    if request.starts_with("GET /v1/models") {
        Some(Reply::Close("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n{\"data\":[{\"id\":\"scripted\"}]}".to_string()))
    } else if request.starts_with("GET") {
        Some(Reply::Close(
            "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_string(),
        ))
    } else {
        None
    }
}

/// A loopback server answering /v1/models and then `response` (raw HTTP) to every POST.
fn scripted(response: &'static str) -> String {
    scripted_server(move |_, _| Reply::Close(response.to_string()))
}

fn assert_failed_with(deck: &Deck, url: &str, needle: &str) {
    let (ran, r) = bench(deck, url, &[], 1);
    assert_eq!(r["verdict"], "error", "{}", ran.shown());
    let problems = r["problems"].to_string();
    assert!(problems.contains(needle), "`{needle}` not in {problems}");
    ran.warns("the server failed");
    // Partial samples are kept, each with its reason.
    assert!(measured(&r)
        .iter()
        .any(|s| s["error"].as_str().is_some_and(|e| e.contains(needle))));
}

#[test]
fn broken_servers_fail_the_run_with_a_reason_and_keep_partial_samples() {
    let deck = Deck::new("bench-broken");
    let h = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
    let role = "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n";
    let token = "data: {\"choices\":[{\"delta\":{\"content\":\"Tokyo \"}}]}\n\n";
    assert_failed_with(&deck, &scripted("HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n{\"error\":\"boom\"}"), "HTTP 500");
    assert_failed_with(&deck, &scripted("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n{\"choices\":[]}"), "not an event stream");
    assert_failed_with(
        &deck,
        &scripted(Box::leak(
            format!("{h}{role}{token}data: {{broken\n\n").into_boxed_str(),
        )),
        "invalid JSON in the stream",
    );
    assert_failed_with(
        &deck,
        &scripted(Box::leak(format!("{h}{role}{token}").into_boxed_str())),
        "without [DONE] (truncated)",
    );
    assert_failed_with(
        &deck,
        &scripted(Box::leak(
            format!("{h}{role}{token}data: {{\"choi").into_boxed_str(),
        )),
        "in the middle of an event",
    );
    // The simulated engine's own faults: 5xx on every request, an error event mid-stream.
    let failing = Sim::start(&["--ttft", "5ms", "--fail-every", "1"]);
    assert_failed_with(&deck, &failing.url, "HTTP 500");
    let erroring = Sim::start(&["--ttft", "5ms", "--token-rate", "500", "--error-after", "2"]);
    assert_failed_with(&deck, &erroring.url, "error event");
}

#[test]
fn a_running_recipe_is_benchmarked_with_its_context_gates_and_roofline() {
    // 300 tok/s from 500 MiB of weights: under the 546 tok/s the bandwidth allows.
    let deck = Deck::new("bench-recipe");
    let port = support::free_port();
    let model = deck.dir.join("model");
    std::fs::create_dir_all(&model).unwrap();
    std::fs::write(model.join("weights.gguf"), b"fixture").unwrap();
    deck.recipe(
        "local",
        &format!(
            r#"engine: sim
runtime: process
model:
  path: {}
  weights: 500m
server:
  port: {port}
  args: [--load-time, 0s, --ttft, 10ms, --token-rate, "300", --markdown]
bench:
  gates:
    no_markdown: ">= 80%"
    decode_tps_p50: ">= 100"
"#,
            model.display()
        ),
    );
    deck.ok(&["start", "local"]);
    let suite = quick_suite(&deck);
    let out_file = deck.dir.join("local.json");
    // On a Spark (its nvidia-smi's recorded answer): the bound is the GB10's 273 GB/s.
    // The recipe's markdown gate fails.
    let ran = Ran::of(&mut deck.on_gpu(
        "gb10",
        &[
            "bench",
            "local",
            "--suite",
            suite.to_str().unwrap(),
            "--out",
            out_file.to_str().unwrap(),
        ],
    ))
    .exits(1);
    let r: Value = serde_json::from_slice(&std::fs::read(&out_file).unwrap()).unwrap();
    let status = deck.status_of("local").unwrap();
    assert_eq!(r["target"]["recipe"], "local");
    assert_eq!(r["target"]["recipe_hash"], status["recipe_hash"]);
    assert_eq!(
        r["target"]["model_fingerprint"],
        status["model_fingerprint"]
    );
    assert_eq!(r["target"]["weights_bytes"], 500u64 * 1024 * 1024);
    assert_eq!(r["target"]["engine"], "sim");
    let gates: Vec<&str> = r["gates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["gate"].as_str().unwrap())
        .collect();
    assert_eq!(gates, ["decode_tps_p50", "no_markdown"]);
    // The bound for 500 MiB of weights at 273 GB/s is about 521 tok/s; 300 is 58% of it.
    let share = r["roofline_share"].as_f64().unwrap();
    let expected = r["decode_tps_p50"].as_f64().unwrap() * 500.0 * 1024.0 * 1024.0 / 273e9;
    assert!(
        (share - expected).abs() < 1e-9 && share > 0.5 && share < 0.65,
        "{share}"
    );
    ran.says("that 273 GB/s allows: NVIDIA GB10, unified memory)");
    assert_eq!(r["target"]["bandwidth"]["source"], "device");
    assert_eq!(r["roofline"]["bandwidth_gb_per_s"], 273.0);
    deck.ok(&["down", "local"]);
}

#[test]
fn a_decode_speed_the_memory_bandwidth_cannot_deliver_is_not_reported() {
    // 53 GB of weights allow about 5 tok/s on a Spark; a server that streams 300 tok/s
    // is not decoding that model one token at a time, whatever it says (and stays above
    // the bound even on a CPU so loaded that the stream slows many times over).
    let deck = Deck::new("bench-roofline");
    let port = support::free_port();
    let model = deck.dir.join("model");
    std::fs::create_dir_all(&model).unwrap();
    std::fs::write(model.join("weights.gguf"), b"fixture").unwrap();
    deck.recipe(
        "fast",
        &format!(
            r#"engine: sim
runtime: process
model:
  path: {}
  weights: 53000m
server:
  port: {port}
  args: [--load-time, 0s, --ttft, 10ms, --token-rate, "300"]
bench:
  bandwidth_gbps: 273
  gates:
    decode_tps_p50: ">= 25"
"#,
            model.display()
        ),
    );
    deck.ok(&["start", "fast"]);
    let suite = quick_suite(&deck);
    let out_file = deck.dir.join("fast.json");
    let ran = deck
        .sparkctl(&[
            "bench",
            "fast",
            "--suite",
            suite.to_str().unwrap(),
            "--out",
            out_file.to_str().unwrap(),
        ])
        .exits(1)
        .says("impossible");
    let r: Value = serde_json::from_slice(&std::fs::read(&out_file).unwrap()).unwrap();
    assert_eq!(r["decode_tps_p50"], Value::Null, "{}", ran.shown());
    assert_eq!(r["roofline_share"], Value::Null);
    // Every stream with a decode figure is impossible; one that arrived in a burst (a loaded
    // CPU) has no figure and is set aside as a burst instead.
    let timed: Vec<&Value> = measured(&r)
        .into_iter()
        .filter(|s| s["burst"] != true)
        .collect();
    assert!(!timed.is_empty(), "{}", ran.shown());
    assert!(
        timed.iter().all(|s| s["impossible"] == true),
        "{}",
        ran.shown()
    );
    assert_eq!(case(&r, "factual")["decode_tps"], Value::Null);
    assert_eq!(r["gates"][0]["outcome"], "inconclusive");
    assert_eq!(r["verdict"], "inconclusive");
    // The bound is the recipe's, and the cause is only what the evidence allows: the sim
    // sends no timings, so a buffered stream and a wrong size cannot be told apart.
    let notes = r["notes"].to_string();
    assert!(
        notes.contains("273 GB/s (bench.bandwidth_gbps of recipe fast)"),
        "{notes}"
    );
    assert!(notes.contains("sends no timings to tell"), "{notes}");
    deck.ok(&["down", "fast"]);
}

#[test]
fn a_server_that_is_down_is_a_clear_error() {
    let deck = Deck::new("bench-down");
    let port = support::free_port();
    // not_running (exit 2): a server at a URL that does not answer, as the guide's kinds say.
    let (ran, _) = bench(&deck, &format!("http://127.0.0.1:{port}"), &[], 2);
    ran.warns(&format!(
        "the server at http://127.0.0.1:{port} does not answer"
    ));
}

#[test]
fn a_bad_suite_is_named_by_file_line_and_column() {
    let deck = Deck::new("bench-bad-suite");
    let bad = deck.dir.join("bad.yaml");
    std::fs::write(
        &bad,
        r#"name: bad
cases:
  - name: x
    turns: [hi]
    expext: y
"#,
    )
    .unwrap();
    deck.sparkctl(&[
        "bench",
        "http://127.0.0.1:1",
        "--suite",
        bad.to_str().unwrap(),
    ])
    .exits(2)
    .warns("bad.yaml:5:5");
}

/// A recipe that is not running is named, with the fix.
#[test]
fn benching_a_recipe_that_is_not_running_says_to_start_it() {
    let deck = Deck::new("bench-idle");
    deck.recipe(
        "idle",
        r#"engine: sim
runtime: process
server:
  port: 1
"#,
    );
    deck.sparkctl(&["bench", "idle"])
        .exits(2)
        .warns("idle is not running; `sparkctl start idle` first");
}

/// A whole streamed answer of `tokens` content chunks with usage, as one raw HTTP response
/// with a length (so the connection can be kept alive after it).
fn sse_answer(tokens: usize) -> String {
    let mut body = String::new();
    for _ in 0..tokens {
        body.push_str("data: {\"id\":\"s1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Tokyo \"},\"finish_reason\":null}]}\n\n");
    }
    body.push_str("data: {\"id\":\"s1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n");
    body.push_str(&format!("data: {{\"id\":\"s1\",\"choices\":[],\"usage\":{{\"prompt_tokens\":12,\"completion_tokens\":{tokens}}}}}\n\ndata: [DONE]\n\n"));
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: keep-alive\r\nkeep-alive: timeout=5, max=100\r\n\r\n{body}",
        body.len()
    )
}

#[test]
fn a_server_that_drops_kept_alive_connections_costs_a_retry_not_a_failure() {
    // llama-server's way, made certain: it advertises keep-alive, and a second request on
    // the same connection dies before any response byte.
    let deck = Deck::new("bench-keepalive");
    let url = scripted_server(|_, nth| {
        if nth == 1 {
            Reply::KeepOpen(sse_answer(6))
        } else {
            Reply::Hangup
        }
    });
    let (ran, r) = bench(&deck, &url, &[], 0);
    assert_eq!(r["verdict"], "pass", "{}", ran.shown());
    let samples = r["samples"].as_array().unwrap();
    assert!(samples.iter().all(|s| s["ok"] == true), "{}", ran.shown());
    let retried = samples
        .iter()
        .filter(|s| s["retried_after"].is_string())
        .count();
    assert!(
        retried >= 10,
        "every second request is retried, got {retried}"
    );
    ran.says("sent again on a fresh connection");
}

#[test]
fn transport_failures_make_an_inconclusive_run_not_a_failed_server() {
    // Answers GETs, drops every chat request before a byte: nothing says the server is
    // wrong, so the benchmark cannot decide.
    let deck = Deck::new("bench-transport");
    let url = scripted_server(|_, _| Reply::Hangup);
    let (ran, r) = bench(&deck, &url, &["--gate", "no_markdown=>= 80%"], 1);
    assert_eq!(r["verdict"], "inconclusive", "{}", ran.shown());
    assert!(measured(&r)
        .iter()
        .all(|s| s["failure"] == "transport" && s["retried_after"].is_string()));
    ran.warns("never reached the server");
}

#[test]
fn a_buffered_stream_is_detected_and_not_reported_as_decode_speed() {
    // All 40 chunks in one write: the client sees them within microseconds.
    let deck = Deck::new("bench-burst");
    let url = scripted_server(|_, _| Reply::Close(sse_answer(40)));
    let (ran, r) = bench(&deck, &url, &[], 0);
    let factual = case(&r, "factual");
    assert_eq!(factual["bursts"], 5, "{}", ran.shown());
    assert_eq!(factual["decode_tps"], Value::Null);
    assert_eq!(factual["itl_ms"], Value::Null);
    assert_eq!(r["decode_tps_p50"], Value::Null);
    assert!(measured(&r).iter().all(|s| s["burst"] == true));
    ran.says("arrived in bursts");
}
