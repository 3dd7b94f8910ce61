//! Readiness and liveness as real engines behave, over real HTTP against real processes.
//!
//! What the simulated engine does not do (llama-server's 503 "Loading model" bodies, vLLM's
//! refused port while it loads, SGLang's /health_generate) and what is broken on purpose
//! (health 200 while generation hangs) is played by a scripted HTTP server written here. It
//! runs in this process for the library-level tests of `wait_ready` and `health_now`, and
//! as the supervised server of `sparkctl start`: the recipe's `binary` is this very test
//! executable, which runs the ignored `scripted_engine` entry with the script named after
//! `--` (sparkctl's own `--host`/`--port` flags follow it there, as libtest filters).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sparkctl::testkit::ready::{self, Fault, GenerationCheck, Health, Liveness};
use sparkctl::testkit::{Deployment, Engine, Event, RunState, Runtime, Started};

use crate::support::{free_port, Deck};

// ---------------------------------------------------------------------------------------
// The scripted server
// ---------------------------------------------------------------------------------------

/// What the scripted server plays.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Script {
    /// llama-server: /health (and the API) answer 503 with its JSON error body
    /// `{"error":{"code":503,"message":"Loading model",…}}` until `loaded_after`, then 200.
    LlamaServer { loaded_after: Duration },
    /// SGLang with SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0: /health and
    /// /health_generate are 503 while starting; then /health is a plain 200 whatever
    /// generation does, and /health_generate runs a generation (hangs when wedged).
    Sglang { loaded_after: Duration },
    /// Health 200 and /v1/models fine; POST /v1/chat/completions never answers.
    WedgedCompletion,
    /// Health 200; the completion sends its status line and headers, then never its body.
    WedgedBody,
    /// Health 200; the first `n` completions answer 500 with an OpenAI error body.
    FailingCompletions(u32),
    /// Accepts connections and never answers anything.
    Silent,
}

impl Script {
    /// Scripts by the name a recipe gives after `--`, with how long to wait before
    /// binding the port (refusing connections meanwhile, as vLLM does while it loads).
    fn named(name: &str) -> Option<(Script, Duration)> {
        Some(match name {
            "llama-loading-1s" => (
                Script::LlamaServer {
                    loaded_after: Duration::from_secs(1),
                },
                Duration::ZERO,
            ),
            "llama-loading-forever" => (
                Script::LlamaServer {
                    loaded_after: Duration::MAX,
                },
                Duration::ZERO,
            ),
            "refuse-1s" => (
                Script::LlamaServer {
                    loaded_after: Duration::ZERO,
                },
                Duration::from_secs(1),
            ),
            "sglang-loading-1s" => (
                Script::Sglang {
                    loaded_after: Duration::from_secs(1),
                },
                Duration::ZERO,
            ),
            _ => return None,
        })
    }
}

/// What the server shares between its connections.
struct Shared {
    script: Script,
    began: Instant,
    /// Set by `POST /test/wedge`: from then on generation hangs (health stays as it was).
    wedged: AtomicBool,
    chats: AtomicU32,
    /// "METHOD PATH -> what", one per request, in arrival order.
    log: Mutex<Vec<String>>,
}

enum Reply {
    Json(u16, Value),
    /// Status only, empty body (SGLang's health endpoints).
    Empty(u16),
    /// Never answer; keep the connection until the client leaves.
    Hang,
    /// Status line and headers announcing a body, then nothing.
    HeadThenHang(u16),
}

fn loading_body() -> Value {
    json!({"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}})
}

fn models() -> Value {
    json!({"object": "list", "data": [{"id": "scripted-model", "object": "model"}]})
}

fn chat_answer() -> Value {
    json!({
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "model": "scripted-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "OK"}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
    })
}

impl Shared {
    fn reply(&self, method: &str, path: &str) -> Reply {
        let wedged = self.wedged.load(Ordering::SeqCst);
        if (method, path) == ("POST", "/test/wedge") {
            self.wedged.store(true, Ordering::SeqCst);
            return Reply::Empty(200);
        }
        let chat = || {
            if wedged {
                Reply::Hang
            } else {
                Reply::Json(200, chat_answer())
            }
        };
        let since = self.began.elapsed();
        match self.script {
            Script::LlamaServer { loaded_after } => {
                let loaded = since >= loaded_after;
                match (method, path) {
                    (_, "/health" | "/v1/models" | "/v1/chat/completions") if !loaded => {
                        Reply::Json(503, loading_body())
                    }
                    ("GET", "/health") => Reply::Json(200, json!({"status": "ok"})),
                    ("GET", "/v1/models") => Reply::Json(200, models()),
                    ("POST", "/v1/chat/completions") => chat(),
                    _ => Reply::Json(404, json!({"error": {"message": "File Not Found"}})),
                }
            }
            Script::Sglang { loaded_after } => {
                let loaded = since >= loaded_after;
                match (method, path) {
                    (_, "/health" | "/health_generate") if !loaded => Reply::Empty(503),
                    ("GET", "/health") => Reply::Empty(200),
                    ("GET", "/health_generate") if wedged => Reply::Hang,
                    ("GET", "/health_generate") => Reply::Empty(200),
                    ("GET", "/v1/models") => Reply::Json(200, models()),
                    ("POST", "/v1/chat/completions") => chat(),
                    _ => Reply::Json(404, json!({"detail": "Not Found"})),
                }
            }
            Script::WedgedCompletion | Script::WedgedBody | Script::FailingCompletions(_) => {
                match (method, path) {
                    ("GET", "/health") => Reply::Json(200, json!({"status": "ok"})),
                    ("GET", "/v1/models") => Reply::Json(200, models()),
                    ("POST", "/v1/chat/completions") => match self.script {
                        Script::WedgedCompletion => Reply::Hang,
                        Script::WedgedBody => Reply::HeadThenHang(200),
                        Script::FailingCompletions(n)
                            if self.chats.fetch_add(1, Ordering::SeqCst) < n =>
                        {
                            Reply::Json(
                                500,
                                json!({"error": {"message": "KV cache not initialised", "type": "server_error", "code": 500}}),
                            )
                        }
                        _ => chat(),
                    },
                    _ => Reply::Json(404, json!({"error": {"message": "not found"}})),
                }
            }
            Script::Silent => Reply::Hang,
        }
    }

    fn record(&self, line: String) {
        // Printed too: as a supervised server, this is its log.
        println!("{line}");
        self.log.lock().unwrap().push(line);
    }
}

/// Reads one request (head and Content-Length body); returns method and path.
fn read_request(conn: &mut TcpStream) -> Option<(String, String)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = conn.read(&mut chunk).ok().filter(|&n| n > 0)?;
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = conn.read(&mut chunk).ok().filter(|&n| n > 0)?;
        buf.extend_from_slice(&chunk[..n]);
    }
    let mut first = head.lines().next()?.split_whitespace();
    Some((first.next()?.to_string(), first.next()?.to_string()))
}

/// Holds a connection open without answering until the client goes away.
fn hang(conn: &mut TcpStream) {
    let _ = conn.set_read_timeout(Some(Duration::from_millis(100)));
    let mut sink = [0u8; 1024];
    loop {
        match conn.read(&mut sink) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return,
        }
    }
}

fn handle(mut conn: TcpStream, shared: &Shared) {
    let Some((method, path)) = read_request(&mut conn) else {
        return;
    };
    let reply = shared.reply(&method, &path);
    let status_line = |code: u16| {
        let reason = match code {
            200 => "OK",
            404 => "Not Found",
            500 => "Internal Server Error",
            503 => "Service Unavailable",
            _ => "Status",
        };
        format!("HTTP/1.1 {code} {reason}\r\n")
    };
    match reply {
        Reply::Json(code, body) => {
            shared.record(format!("{method} {path} -> {code}"));
            let body = body.to_string();
            let _ = write!(
                conn,
                "{}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                status_line(code),
                body.len()
            );
        }
        Reply::Empty(code) => {
            shared.record(format!("{method} {path} -> {code}"));
            let _ = write!(
                conn,
                "{}Content-Length: 0\r\nConnection: close\r\n\r\n",
                status_line(code)
            );
        }
        Reply::Hang => {
            shared.record(format!("{method} {path} -> hangs"));
            hang(&mut conn);
        }
        Reply::HeadThenHang(code) => {
            shared.record(format!("{method} {path} -> {code}, body hangs"));
            let _ = write!(
                conn,
                "{}Content-Type: application/json\r\nContent-Length: 1000\r\nConnection: close\r\n\r\n",
                status_line(code)
            );
            let _ = conn.flush();
            hang(&mut conn);
        }
    }
}

/// A scripted server on `127.0.0.1:port`, bound after `bind_after` (connections are
/// refused until then). Its loading clock starts at `start`.
struct Scripted {
    port: u16,
    shared: Arc<Shared>,
}

impl Scripted {
    fn start(script: Script, port: u16, bind_after: Duration) -> Scripted {
        let shared = Arc::new(Shared {
            script,
            began: Instant::now(),
            wedged: AtomicBool::new(false),
            chats: AtomicU32::new(0),
            log: Mutex::new(Vec::new()),
        });
        let serving = shared.clone();
        let (bound_tx, bound_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || serve(port, bind_after, serving, bound_tx));
        if bind_after.is_zero() {
            bound_rx.recv().expect("the scripted server binds");
        }
        Scripted { port, shared }
    }

    fn log(&self) -> Vec<String> {
        self.shared.log.lock().unwrap().clone()
    }

    fn wedge(&self) {
        self.shared.wedged.store(true, Ordering::SeqCst);
    }
}

fn serve(port: u16, bind_after: Duration, shared: Arc<Shared>, bound: std::sync::mpsc::Sender<()>) {
    std::thread::sleep(bind_after);
    let listener = TcpListener::bind(("127.0.0.1", port)).expect("the scripted server's port");
    let _ = bound.send(());
    for conn in listener.incoming().flatten() {
        let shared = shared.clone();
        std::thread::spawn(move || handle(conn, &shared));
    }
}

/// The scripted server as a supervised process: a recipe runs this executable with
/// `readiness::scripted_engine --exact --ignored --nocapture -- SCRIPT`, and sparkctl appends the
/// engine's flags (`--host`, `--port`, `-m`/`--model-path`), which libtest takes as more
/// filters. Run any other way (no script after `--`), it returns at once.
#[test]
#[ignore = "not a test: the server this file's recipes run (`binary:` is this executable)"]
fn scripted_engine() {
    let args: Vec<String> = std::env::args().collect();
    let Some(name) = args
        .iter()
        .position(|a| a == "--")
        .and_then(|i| args.get(i + 1))
    else {
        return;
    };
    let (script, bind_after) =
        Script::named(name).unwrap_or_else(|| panic!("no script named {name}"));
    let port: u16 = args
        .windows(2)
        .find(|w| w[0] == "--port")
        .map(|w| w[1].parse().expect("--port takes a number"))
        .expect("sparkctl passes --port");
    println!("scripted engine: {name} on 127.0.0.1:{port}");
    let _server = Scripted::start(script, port, bind_after);
    loop {
        std::thread::park();
    }
}

// ---------------------------------------------------------------------------------------
// wait_ready and health_now against the scripted server, by URL
// ---------------------------------------------------------------------------------------

/// A `Started` for a server already listening (or about to) on `port`; the sender keeps
/// its event stream open, as a live server's is.
fn started(
    engine: Engine,
    port: u16,
    health_path: &str,
    completion_timeout: Duration,
) -> (Started, tokio::sync::mpsc::Sender<Event>) {
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let deployment = Deployment {
        name: "scripted".into(),
        runtime: Runtime::Process,
        engine,
        id: "0".into(),
        run_id: "test".into(),
        recipe_hash: "sha256:test".into(),
        model_fingerprint: None,
        artifact: "scripted".into(),
        image_ref: None,
        host: "127.0.0.1".into(),
        port,
        health_path: health_path.into(),
        memory_gb: None,
        started_at: 0,
        state: RunState::Running,
        log_file: None,
    };
    (
        Started {
            deployment,
            events: rx,
            completion_timeout,
        },
        tx,
    )
}

/// Runs `wait_ready`, returning its outcome, every distinct state it showed, and how long
/// it took.
async fn wait(
    started: &mut Started,
    timeout: Duration,
) -> (Result<ready::Ready, Fault>, Vec<Health>, Duration) {
    let mut seen: Vec<Health> = Vec::new();
    let began = Instant::now();
    let engine = started.deployment.engine;
    let outcome = ready::wait_ready(started, engine, timeout, |w| {
        if seen.last() != Some(w.health) {
            seen.push(w.health.clone());
        }
    })
    .await;
    (outcome, seen, began.elapsed())
}

/// Ready was not reported before the scripted server's 1 s (to load, or to bind) was up:
/// its clock started `lead` before the wait did.
fn not_before_the_server(lead: Duration, ready: &ready::Ready, took: Duration) {
    assert!(
        lead + ready.after >= Duration::from_secs(1),
        "ready after {:?} (lead {lead:?}, wait {took:?})",
        ready.after
    );
}

fn ok(outcome: Result<ready::Ready, Fault>) -> ready::Ready {
    outcome.unwrap_or_else(|f| panic!("not ready: {}", f.explain("scripted")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llama_server_loading_shows_its_own_message_then_turns_ready() {
    let server = Scripted::start(
        Script::LlamaServer {
            loaded_after: Duration::from_secs(1),
        },
        free_port(),
        Duration::ZERO,
    );
    let (mut s, _events) = started(
        Engine::LlamaServer,
        server.port,
        "/health",
        Duration::from_secs(5),
    );
    // The server's loading clock started before the wait did: the wait's own figure plus
    // that lead is at least the 1 s load, whatever a loaded machine made the lead.
    let lead = server.shared.began.elapsed();
    let (outcome, seen, took) = wait(&mut s, Duration::from_secs(20)).await;
    let ready = ok(outcome);
    eprintln!("loaded at 1.0 s, ready noticed after {:?}", ready.after);
    not_before_the_server(lead, &ready, took);
    assert_eq!(ready.model, "scripted-model");
    // The server's own words while it loads, not just the code.
    let loading = Health::Loading {
        code: 503,
        message: Some("Loading model".into()),
    };
    assert!(seen.contains(&loading), "{seen:?}");
    assert_eq!(loading.to_string(), "loading (health 503: Loading model)");
    // The completion went out only once health said 200, and it answered.
    let log = server.log();
    let chat = log
        .iter()
        .position(|l| l == "POST /v1/chat/completions -> 200")
        .unwrap_or_else(|| panic!("no completion: {log:?}"));
    assert!(
        log[..chat].contains(&"GET /health -> 200".to_string()),
        "{log:?}"
    );
    assert!(
        log[..chat].contains(&"GET /health -> 503".to_string()),
        "{log:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_still_loading_at_the_timeout_is_explained_with_the_servers_message() {
    let server = Scripted::start(
        Script::LlamaServer {
            loaded_after: Duration::MAX,
        },
        free_port(),
        Duration::ZERO,
    );
    let (mut s, _events) = started(
        Engine::LlamaServer,
        server.port,
        "/health",
        Duration::from_secs(5),
    );
    let (outcome, _, took) = wait(&mut s, Duration::from_secs(1)).await;
    let fault = outcome.expect_err("never loads");
    let why = fault.explain("llama");
    assert!(matches!(fault, Fault::Timeout { .. }), "{why}");
    assert!(
        why.contains("its health endpoint still answers 503 \"Loading model\""),
        "{why}"
    );
    assert!(why.contains("raise health.timeout"), "{why}");
    assert!(took < Duration::from_secs(3), "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_connections_before_the_first_answer_mean_still_starting() {
    // vLLM opens its port only once the engine is up: refused for 1 s (twice
    // CLOSED_AFTER), then it serves.
    let port = free_port();
    let server = Scripted::start(
        Script::LlamaServer {
            loaded_after: Duration::ZERO,
        },
        port,
        Duration::from_secs(1),
    );
    let (mut s, _events) = started(Engine::Vllm, port, "/health", Duration::from_secs(5));
    // As above: the bind's 1 s counts from before the wait.
    let lead = server.shared.began.elapsed();
    let (outcome, seen, took) = wait(&mut s, Duration::from_secs(20)).await;
    let ready = ok(outcome);
    not_before_the_server(lead, &ready, took);
    assert_eq!(seen.first(), Some(&Health::Refused), "{seen:?}");
    assert!(server
        .log()
        .contains(&"POST /v1/chat/completions -> 200".to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_ok_with_a_hanging_completion_is_wedged_within_the_completion_timeout() {
    for script in [Script::WedgedCompletion, Script::WedgedBody] {
        let server = Scripted::start(script, free_port(), Duration::ZERO);
        let within = Duration::from_secs(1);
        let (mut s, _events) = started(Engine::Vllm, server.port, "/health", within);
        // The overall timeout is far away: the completion's own limit must end this.
        let (outcome, seen, took) = wait(&mut s, Duration::from_secs(60)).await;
        eprintln!("{script:?}: wedged reported after {took:?}");
        let fault = outcome.expect_err("a wedged server is not ready");
        let why = fault.explain("wedge");
        assert!(
            matches!(fault, Fault::Wedged { within: w, .. } if w == within),
            "{script:?}: {why}"
        );
        assert!(
            why.contains("a one-token chat completion got no answer within 1s"),
            "{why}"
        );
        assert!(why.contains("generation is wedged"), "{why}");
        assert!(why.contains("raise health.completion_timeout"), "{why}");
        assert!(
            took >= within && took < Duration::from_secs(15),
            "{script:?}: {took:?}"
        );
        let pending = Health::GenerationPending {
            check: GenerationCheck::Completion,
            within,
        };
        assert!(seen.contains(&pending), "{seen:?}");
        assert_eq!(
            pending.to_string(),
            "health ok, waiting for a one-token completion (up to 1s)"
        );
        assert!(
            server
                .log()
                .iter()
                .any(|l| l.starts_with("POST /v1/chat/completions -> ")),
            "{:?}",
            server.log()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_that_answers_an_error_is_retried_not_called_wedged() {
    let server = Scripted::start(Script::FailingCompletions(2), free_port(), Duration::ZERO);
    let (mut s, _events) = started(Engine::Vllm, server.port, "/health", Duration::from_secs(1));
    let (outcome, seen, _) = wait(&mut s, Duration::from_secs(20)).await;
    ok(outcome);
    let failing = seen
        .iter()
        .find(|h| matches!(h, Health::GenerationFailing { .. }))
        .unwrap_or_else(|| panic!("{seen:?}"));
    assert_eq!(
        failing.to_string(),
        "health ok, completion failing: POST /v1/chat/completions answered 500 Internal \
         Server Error: KV cache not initialised"
    );
    let chats = server
        .log()
        .iter()
        .filter(|l| l.starts_with("POST /v1/chat/completions"))
        .count();
    assert_eq!(chats, 3, "{:?}", server.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_health_endpoint_that_never_answers_is_not_a_closed_port() {
    let server = Scripted::start(Script::Silent, free_port(), Duration::ZERO);
    let (mut s, _events) = started(
        Engine::Sglang,
        server.port,
        "/health",
        Duration::from_secs(1),
    );
    let timeout = ready::HEALTH_PROBE_TIMEOUT + Duration::from_millis(1500);
    let (outcome, seen, took) = wait(&mut s, timeout).await;
    let fault = outcome.expect_err("never answers");
    let why = fault.explain("silent");
    assert!(
        matches!(
            &fault,
            Fault::Timeout {
                health: Health::Silent { .. },
                ..
            }
        ),
        "{why}"
    );
    assert!(
        why.contains("accepts connections but its health endpoint gives no answer within 5s"),
        "{why}"
    );
    assert!(!seen.contains(&Health::Refused), "{seen:?}");
    assert!(took >= timeout, "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_readiness_uses_health_then_a_chat_completion_and_status_uses_health_generate() {
    let server = Scripted::start(
        Script::Sglang {
            loaded_after: Duration::from_secs(1),
        },
        free_port(),
        Duration::ZERO,
    );
    let (mut s, _events) = started(
        Engine::Sglang,
        server.port,
        "/health",
        Duration::from_secs(5),
    );
    let (outcome, seen, _) = wait(&mut s, Duration::from_secs(20)).await;
    ok(outcome);
    assert!(
        seen.contains(&Health::Loading {
            code: 503,
            message: None
        }),
        "{seen:?}"
    );
    let log = server.log();
    assert!(
        log.contains(&"POST /v1/chat/completions -> 200".to_string()),
        "{log:?}"
    );
    assert!(
        !log.iter().any(|l| l.contains("/health_generate")),
        "readiness does not use /health_generate: {log:?}"
    );

    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let sglang = s.deployment.clone();
    let mut vllm = s.deployment.clone();
    vllm.engine = Engine::Vllm;
    let chats = |log: &[String]| {
        log.iter()
            .filter(|l| l.starts_with("POST /v1/chat/completions"))
            .count()
    };
    let before = chats(&server.log());
    assert_eq!(
        ready::health_now(&client, &sglang).await,
        Liveness::Running(Health::Ready)
    );
    let log = server.log();
    assert_eq!(
        log.last().unwrap(),
        "GET /health_generate -> 200",
        "{log:?}"
    );
    assert_eq!(
        chats(&log),
        before,
        "status asked /health_generate, not a completion"
    );
    // Other engines: a one-token completion.
    assert_eq!(
        ready::health_now(&client, &vllm).await,
        Liveness::Running(Health::Ready)
    );
    assert_eq!(chats(&server.log()), before + 1);

    // Generation wedges; /health stays 200 (SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0).
    server.wedge();
    let within = ready::STATUS_GENERATION_TIMEOUT;
    for (d, check, text) in [
        (
            &sglang,
            GenerationCheck::Endpoint("/health_generate"),
            "health ok, /health_generate not answering within 3s (busy or wedged)",
        ),
        (
            &vllm,
            GenerationCheck::Completion,
            "health ok, completion not answering within 3s (busy or wedged)",
        ),
    ] {
        let began = Instant::now();
        let now = ready::health_now(&client, d).await;
        let took = began.elapsed();
        assert_eq!(
            now,
            Liveness::Running(Health::GenerationSilent { check, within })
        );
        assert_eq!(now.to_string(), text);
        assert!(
            took >= within && took < within + Duration::from_secs(2),
            "{took:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// End to end: `sparkctl start` and `status` supervising real processes
// ---------------------------------------------------------------------------------------

/// A process recipe whose server is this test executable playing `script`.
fn scripted_recipe(deck: &Deck, engine: &str, script: &str, port: u16, extra: &str) -> String {
    let model = deck.dir.join("model.gguf");
    std::fs::write(&model, b"GGUF scripted").unwrap();
    let exe = std::env::current_exe().unwrap();
    format!(
        "engine: {engine}\nruntime: process\nbinary: {}\nmodel:\n  path: {}\nserver:\n  port: {port}\n  \
         args: [readiness::scripted_engine, --exact, --ignored, --nocapture, \"--\", {script}]\n{extra}",
        exe.display(),
        model.display()
    )
}

fn failing(deck: &Deck, args: &[&str]) -> (String, Duration) {
    let began = Instant::now();
    let ran = deck.sparkctl(args);
    let took = began.elapsed();
    (ran.exits(1).stderr(), took)
}

#[test]
fn start_waits_through_llama_server_loading_and_a_refused_port() {
    let deck = Deck::new("ready-llama");
    deck.recipe(
        "loading",
        &scripted_recipe(&deck, "llama-server", "llama-loading-1s", free_port(), ""),
    );
    deck.recipe(
        "refusing",
        &scripted_recipe(&deck, "llama-server", "refuse-1s", free_port(), ""),
    );
    for name in ["loading", "refusing"] {
        let began = Instant::now();
        let out = deck.ok(&["start", name]);
        let took = began.elapsed();
        eprintln!("{name}: ready after {took:?}");
        assert!(out.contains(&format!("{name} is ready at")), "{out}");
        assert!(out.contains("model scripted-model"), "{out}");
        assert!(took >= Duration::from_secs(1), "{name}: {took:?}");
        assert_eq!(deck.status_of(name).unwrap()["health"], "ready");
    }
    let logs = deck.ok(&["logs", "loading"]);
    assert!(logs.contains("GET /health -> 503"), "{logs}");
    assert!(logs.contains("POST /v1/chat/completions -> 200"), "{logs}");
    for name in ["loading", "refusing"] {
        deck.ok(&["down", name]);
    }
}

#[test]
fn start_past_the_timeout_quotes_the_loading_message() {
    let deck = Deck::new("ready-slow");
    deck.recipe(
        "slow",
        &scripted_recipe(
            &deck,
            "llama-server",
            "llama-loading-forever",
            free_port(),
            "",
        ),
    );
    let (err, took) = failing(&deck, &["start", "slow", "--timeout", "2s"]);
    assert!(err.contains("slow was not ready within 2 s"), "{err}");
    assert!(
        err.contains("its health endpoint still answers 503 \"Loading model\""),
        "{err}"
    );
    assert!(took < Duration::from_secs(15), "{took:?}");
    assert_eq!(deck.status_of("slow").unwrap()["state"], "exited");
}

#[test]
fn start_fails_at_once_when_health_is_ok_but_generation_hangs() {
    // The real simulated engine: /health 200 at once, every token an hour away.
    let deck = Deck::new("ready-wedged");
    deck.recipe(
        "wedged",
        &format!(
            "engine: sim\nruntime: process\nserver:\n  port: {}\n  args: [--load-time, 0s, --ttft, 1h]\n\
             health:\n  timeout: 60s\n  completion_timeout: 1s\n",
            free_port()
        ),
    );
    let (err, took) = failing(&deck, &["start", "wedged"]);
    eprintln!("wedged: reported after {took:?} (completion timeout 1 s, health timeout 60 s)");
    assert!(err.contains("wedged is not ready"), "{err}");
    assert!(
        err.contains("a one-token chat completion got no answer within 1s: generation is wedged"),
        "{err}"
    );
    // Far below the 60 s health timeout, with room for a loaded machine.
    assert!(took < Duration::from_secs(20), "{took:?}");
    // It was alive and useless: stopped, logs kept; the completion did reach it.
    assert_eq!(deck.status_of("wedged").unwrap()["state"], "exited");
    let logs = deck.ok(&["logs", "wedged"]);
    assert!(
        logs.contains("POST /v1/chat/completions 200 stream=false"),
        "{logs}"
    );
}

#[test]
fn status_shows_health_ok_but_wedged_generation_as_not_ready() {
    let deck = Deck::new("ready-status");
    let (sport, lport, tport) = (free_port(), free_port(), free_port());
    deck.recipe(
        "sg",
        &scripted_recipe(&deck, "sglang", "sglang-loading-1s", sport, ""),
    );
    deck.recipe(
        "ll",
        &scripted_recipe(&deck, "llama-server", "llama-loading-1s", lport, ""),
    );
    deck.recipe(
        "ll2",
        &scripted_recipe(&deck, "llama-server", "llama-loading-1s", tport, ""),
    );
    for name in ["sg", "ll", "ll2"] {
        deck.ok(&["start", name]);
    }
    for name in ["sg", "ll", "ll2"] {
        assert_eq!(deck.status_of(name).unwrap()["health"], "ready");
    }
    for port in [sport, lport, tport] {
        let mut conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
        write!(
            conn,
            "POST /test/wedge HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
        )
        .unwrap();
        let mut answer = String::new();
        conn.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
    let began = Instant::now();
    let rows = deck.status();
    let took = began.elapsed();
    eprintln!("status of three wedged deployments took {took:?}");
    let health = |name: &str| {
        rows.iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {rows:?}"))["health"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        health("sg"),
        "health ok, /health_generate not answering within 3s (busy or wedged)"
    );
    for name in ["ll", "ll2"] {
        assert_eq!(
            health(name),
            "health ok, completion not answering within 3s (busy or wedged)"
        );
    }
    // All asked at once: one generation timeout (3 s), not one per deployment (9 s); three
    // of them leave a loaded machine's start-up and listing 4.5 s of room.
    assert!(took < Duration::from_millis(7500), "{took:?}");
    let logs = deck.ok(&["logs", "sg"]);
    assert!(logs.contains("GET /health_generate -> hangs"), "{logs}");
    for name in ["sg", "ll", "ll2"] {
        deck.ok(&["down", name]);
    }
}

#[test]
fn completion_timeout_must_be_shorter_than_the_health_timeout() {
    let deck = Deck::new("ready-validate");
    deck.recipe(
        "long",
        &format!(
            r#"engine: sim
runtime: process
server:
  port: {}
health:
  timeout: 30s
  completion_timeout: 45s
"#,
            free_port()
        ),
    );
    deck.sparkctl(&["recipes", "validate", "long"])
        .exits(2)
        .warns("health.completion_timeout: 45s is not shorter than health.timeout (30s)")
        // It names the line.
        .warns("long.yaml:8:");
    std::fs::remove_file(deck.dir.join("recipes/long.yaml")).unwrap();
    // The default: 20 s, or half a short health timeout.
    deck.recipe(
        "short",
        &format!(
            "engine: sim\nruntime: process\nserver:\n  port: {}\nhealth:\n  timeout: 10s\n",
            free_port()
        ),
    );
    let shown: Value =
        serde_json::from_str(&deck.ok(&["--json", "recipes", "show", "short"])).unwrap();
    assert_eq!(shown["recipe"]["health"]["completion_timeout"], "5s");
    assert_eq!(shown["launch"]["completion_timeout"], "5s");
}
