//! The simulator's HTTP side: /health, /v1/models, /version and /v1/chat/completions
//! (streaming and not), on hyper directly so each token is written the moment it is due.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::Incoming;
use hyper::header::CONTENT_TYPE;
use hyper::service::service_fn;
use hyper::{Method, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::time::{sleep_until, Instant};

use super::agents::Api;
use super::cache::PrefixCache;
use super::metrics::Metrics;
use super::script::{break_answer, plan, Broken, Plan, Request};
use super::stream::{error_body, produce, whole_response, Frame, Meta, Wire};
use super::{LoadFault, Mimic, SimConfig};
use crate::error::{Error, Result};
use crate::stdio;

type Body = BoxBody<Bytes, Infallible>;

struct State {
    cfg: SimConfig,
    started: Instant,
    requests: AtomicU64,
    /// Streams being paced now (see `wait_until`).
    pacing: Arc<AtomicU64>,
    /// `--slots`: one permit per request served at once.
    slots: Option<Arc<tokio::sync::Semaphore>>,
    cache: PrefixCache,
    metrics: Arc<Metrics>,
    /// vLLM's sleep mode: it holds `--hold-memory` while awake.
    sleep: super::sleep::Sleep,
    /// `VLLM_SERVER_DEV_MODE=1`: the development routes (sleep among them) are open.
    dev_mode: bool,
    /// False until every Ray node joined (`--ray-address`); true without Ray.
    ray_ready: Arc<std::sync::atomic::AtomicBool>,
    /// `--reset-once-on`: its one reset made.
    reset_made: std::sync::atomic::AtomicBool,
}

/// A request's hold on a slot and its share of the KV cache, given back however the
/// request ends (finished, or the client left mid-stream).
struct Slot {
    _permit: Option<tokio::sync::OwnedSemaphorePermit>,
    metrics: Arc<Metrics>,
    kv_tokens: u64,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.metrics.running.fetch_sub(1, Ordering::Relaxed);
        self.metrics
            .kv_tokens
            .fetch_sub(self.kv_tokens, Ordering::Relaxed);
        self.metrics.successes.fetch_add(1, Ordering::Relaxed);
    }
}

/// Waits for a slot (the queue), then looks the prompt up in the prefix cache. Returns the
/// slot, when generation starts, and the cached prompt tokens.
async fn admit(state: &State, request: &Request, plan: &Plan) -> (Slot, Instant, usize) {
    let m = &state.metrics;
    let permit = match &state.slots {
        Some(sem) => {
            m.waiting.fetch_add(1, Ordering::Relaxed);
            let p = sem.clone().acquire_owned().await.ok();
            m.waiting.fetch_sub(1, Ordering::Relaxed);
            p
        }
        None => None,
    };
    let start = Instant::now();
    let tokens = request.token_ids();
    let cached = if state.cfg.prefix_cache && !request.no_cache {
        m.prefix_queries
            .fetch_add(tokens.len() as u64, Ordering::Relaxed);
        let hit = state.cache.lookup_and_insert(&tokens);
        m.prefix_hits.fetch_add(hit as u64, Ordering::Relaxed);
        hit
    } else {
        0
    };
    m.prompt_tokens
        .fetch_add(tokens.len() as u64, Ordering::Relaxed);
    let kv_tokens = (tokens.len() + plan.pieces.len()) as u64;
    m.running.fetch_add(1, Ordering::Relaxed);
    m.kv_tokens.fetch_add(kv_tokens, Ordering::Relaxed);
    let slot = Slot {
        _permit: permit,
        metrics: state.metrics.clone(),
        kv_tokens,
    };
    (slot, start, cached)
}

impl State {
    fn ready(&self) -> bool {
        !self.cfg.never_ready
            && self.cfg.load_fault.is_none()
            && self.ray_ready.load(Ordering::SeqCst)
            && self.started.elapsed() >= self.cfg.load_time
    }
}

fn unix_us() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros())
}

/// `handed id=… unix_us=FIRST+GAP+GAP…` (µs), for accuracy measurements.
fn log_handed(id: &str, handed: &[u128]) {
    let Some(first) = handed.first() else { return };
    let gaps: Vec<String> = handed
        .windows(2)
        .map(|w| (w[1] - w[0]).to_string())
        .collect();
    stdio::out(format_args!(
        "handed id={id} unix_us={first}+{}",
        gaps.join("+")
    ));
}

/// Runs the simulator until SIGTERM or Ctrl-C.
pub(crate) async fn serve(cfg: SimConfig) -> Result<()> {
    if let Some(done) = super::ray::other_part(&cfg).await {
        return done;
    }
    super::out_of_memory_beside(&cfg).await;
    // vLLM opens its port only once the engine is up: connections are refused until then.
    let listener = match cfg.mimic {
        Mimic::Generic => Some(listen(&cfg).await?),
        Mimic::Vllm => None,
    };
    // Before the load clock starts, so ready_at_unix_us stays exact however long it takes.
    let held = match cfg.hold_memory {
        Some(size) => super::sleep::hold(size.0)?,
        None => Vec::new(),
    };
    let started = Instant::now();
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    // The instant /health turns 200, on the host's clock: benchmarks compare it with
    // the moment sparkctl reports the server ready.
    stdio::out(format_args!(
        "sparkctl-sim: loading model {} (load time {:?}, ready_at_unix_us={})",
        cfg.model_name,
        cfg.load_time,
        (started_unix + cfg.load_time).as_micros()
    ));
    let ray_ready = Arc::new(std::sync::atomic::AtomicBool::new(
        cfg.ray_address.is_none(),
    ));
    if let Some(addr) = &cfg.ray_address {
        stdio::out(format_args!(
            "sparkctl-sim: tensor parallel {} over {} across {} nodes (Ray at {addr})",
            cfg.tensor_parallel_size.unwrap_or(1),
            cfg.distributed_executor_backend.as_deref().unwrap_or("mp"),
            cfg.ray_nodes
        ));
        super::ray::drive(addr.clone(), cfg.ray_nodes, ray_ready.clone());
    }
    let (cfg_slots, cfg_dev) = (cfg.slots, cfg.dev_mode.as_deref() == Some("1"));
    let (cfg_sleep, cfg_wake) = (cfg.enable_sleep_mode, (cfg.wake_time, cfg.wake_fault));
    let state = Arc::new(State {
        ray_ready,
        cfg,
        started,
        requests: AtomicU64::new(0),
        pacing: Arc::new(AtomicU64::new(0)),
        slots: (cfg_slots > 0).then(|| Arc::new(tokio::sync::Semaphore::new(cfg_slots))),
        cache: PrefixCache::default(),
        metrics: Arc::new(Metrics::default()),
        sleep: super::sleep::Sleep::new(cfg_sleep, held, cfg_wake),
        dev_mode: cfg_dev,
        reset_made: std::sync::atomic::AtomicBool::new(false),
    });
    let (close_tx, close_rx) = tokio::sync::watch::channel(false);
    // `close_tx` lives as long as the server: a dropped sender would wake `changed()`.
    spawn_loader(&state, close_tx.clone());
    let listener = match listener {
        Some(l) => l,
        None => {
            if !state.cfg.never_ready && state.cfg.load_fault.is_none() {
                tokio::time::sleep_until(started + state.cfg.load_time).await;
            } else {
                // Never loads: the fault (or a stop) ends the process.
                std::future::pending::<()>().await;
            }
            listen(&state.cfg).await?
        }
    };
    accept_until_stopped(listener, state, close_rx).await?;
    stdio::out(format_args!("sparkctl-sim: shutting down"));
    Ok(())
}

async fn listen(cfg: &SimConfig) -> Result<TcpListener> {
    let listener = TcpListener::bind((cfg.host.as_str(), cfg.port))
        .await
        .map_err(|e| {
            Error::io(
                format!("sim: cannot listen on {}:{}", cfg.host, cfg.port),
                e,
            )
        })?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::io("sim: no local address", e))?;
    stdio::out(format_args!("sparkctl-sim: listening on http://{addr}"));
    Ok(listener)
}

/// Serves each connection on its own task until SIGTERM or Ctrl-C; the close-port fault
/// stops accepting but keeps the process alive.
async fn accept_until_stopped(
    listener: TcpListener,
    state: Arc<State>,
    close_rx: tokio::sync::watch::Receiver<bool>,
) -> Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| Error::io("sim: cannot watch SIGTERM", e))?;
    let mut closing = close_rx.clone();
    let mut listener = Some(listener);
    loop {
        let accept = async {
            match &listener {
                Some(l) => l.accept().await,
                None => std::future::pending().await,
            }
        };
        let (stream, _) = tokio::select! {
            accepted = accept => match accepted {
                Ok(conn) => conn,
                Err(e) => { stdio::out(format_args!("sparkctl-sim: accept failed: {e}")); continue; }
            },
            _ = closing.changed(), if listener.is_some() => {
                // The close-port fault: alive, but nothing answers on the port any more.
                listener = None;
                stdio::out(format_args!("sparkctl-sim: closed its port"));
                continue;
            }
            _ = term.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
        };
        // Tokens are tiny writes spaced apart: Nagle would hold them back and skew timings.
        let _ = stream.set_nodelay(true);
        let state = state.clone();
        let mut closed = close_rx.clone();
        tokio::spawn(async move {
            // Closed with its request unread in it, the connection is reset by the kernel.
            if reset_unread(&stream, &state).await {
                return stdio::out(format_args!("sparkctl-sim: reset a connection, unread"));
            }
            let service = service_fn(move |req| handle(req, state.clone()));
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = conn => {}
                _ = closed.wait_for(|c| *c) => {}
            }
        });
    }
    Ok(())
}

/// `--reset-once-on TEXT`: whether this connection is the one to reset, by its request's
/// head as it has arrived (looked at, not read).
async fn reset_unread(stream: &tokio::net::TcpStream, state: &State) -> bool {
    use std::sync::atomic::Ordering::SeqCst;
    let text = state.cfg.reset_once_on.as_deref().unwrap_or_default();
    let mut buf = vec![0u8; 8192];
    for _ in 0..50 {
        if text.is_empty() || state.reset_made.load(SeqCst) {
            return false;
        }
        let n = stream.peek(&mut buf).await.unwrap_or(0);
        if n == buf.len() || buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
            let hit = buf[..n].windows(text.len()).any(|w| w == text.as_bytes());
            return hit && !state.reset_made.swap(true, SeqCst);
        }
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    false
}

fn spawn_loader(state: &Arc<State>, close: tokio::sync::watch::Sender<bool>) {
    let cfg = &state.cfg;
    if let Some(fault) = cfg.load_fault {
        let (line, at) = (cfg.fatal_line.clone(), cfg.load_time / 2);
        tokio::spawn(async move {
            tokio::time::sleep(at).await;
            match fault {
                LoadFault::Crash => {
                    stdio::err(format_args!("{line}"));
                    std::process::exit(1);
                }
                // SIGKILL cannot be caught: the process ends as an OOM-killed one does.
                // As a container's pid 1 the kernel ignores it, so end as such a container
                // does: status 137 (128 + SIGKILL).
                LoadFault::Killed => unsafe {
                    if libc::getpid() == 1 {
                        std::process::exit(137);
                    }
                    libc::kill(libc::getpid(), libc::SIGKILL);
                },
                LoadFault::FatalHang => stdio::err(format_args!("{line}")),
                LoadFault::ClosePort => {
                    let _ = close.send(true);
                }
            }
        });
    } else if !cfg.never_ready {
        let at = cfg.load_time;
        tokio::spawn(async move {
            tokio::time::sleep(at).await;
            stdio::out(format_args!("sparkctl-sim: Application startup complete."));
        });
    }
}

fn json_response(status: StatusCode, body: Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.to_string())).boxed())
        .expect("static response parts are valid")
}

async fn handle(
    req: hyper::Request<Incoming>,
    state: Arc<State>,
) -> Result<Response<Body>, Infallible> {
    let ready = state.ready();
    let cfg = &state.cfg;
    let response = match (req.method(), req.uri().path()) {
        // vLLM's /health is a 200 with no body.
        (&Method::GET, "/health") if ready && cfg.mimic == Mimic::Vllm => Response::builder()
            .status(StatusCode::OK)
            .body(Full::new(Bytes::new()).boxed())
            .expect("static response parts are valid"),
        (&Method::GET, "/health") if ready => {
            json_response(StatusCode::OK, json!({"status": "ok"}))
        }
        (&Method::GET, "/health") => json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"status": "loading"}),
        ),
        (&Method::GET, "/metrics") => {
            let capacity = (cfg.slots.max(1) * cfg.ctx_size) as u64;
            let format = crate::exposition::Format::asked(req.headers());
            let page = state.metrics.render(&cfg.model_name, capacity, format);
            Response::builder()
                .status(StatusCode::OK)
                .header(CONTENT_TYPE, format.content_type())
                .body(Full::new(Bytes::from(page)).boxed())
                .expect("static response parts are valid")
        }
        (&Method::GET, "/version") => json_response(
            StatusCode::OK,
            json!({"version": format!("sparkctl-sim {}", env!("CARGO_PKG_VERSION"))}),
        ),
        (_, "/v1/models" | "/v1/chat/completions" | "/v1/messages" | "/v1/responses") if !ready => {
            json_response(
                StatusCode::SERVICE_UNAVAILABLE,
                error_body("model is loading", "unavailable", 503),
            )
        }
        (&Method::GET, "/v1/models") => {
            stdio::out(format_args!("GET /v1/models 200"));
            json_response(
                StatusCode::OK,
                json!({"object": "list", "data": [{"id": cfg.model_name, "object": "model", "owned_by": match cfg.mimic {
                    Mimic::Vllm => "vllm",
                    Mimic::Generic => "sparkctl-sim",
                }}]}),
            )
        }
        (&Method::POST, "/v1/chat/completions") => chat(req, &state, None).await,
        (&Method::POST, "/v1/messages") => chat(req, &state, Some(Api::Messages)).await,
        (&Method::POST, "/v1/responses") => chat(req, &state, Some(Api::Responses)).await,
        (_, "/sleep" | "/wake_up" | "/is_sleeping" | "/collective_rpc") if state.dev_mode => {
            dev(req, &state).await
        }
        _ => json_response(
            StatusCode::NOT_FOUND,
            error_body("no such route", "not_found", 404),
        ),
    };
    Ok(response)
}

/// vLLM's development routes for its sleep mode (`sleep.rs`).
async fn dev(req: hyper::Request<Incoming>, state: &Arc<State>) -> Response<Body> {
    let (method, path) = (req.method().clone(), req.uri().path().to_string());
    let query = req.uri().query().map(String::from);
    let bytes = req.into_body().collect().await.map(|b| b.to_bytes());
    let body: Value = (bytes.ok())
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    let (code, answer) = state
        .sleep
        .answer(&method, &path, query.as_deref(), &body)
        .await;
    stdio::out(format_args!("{method} {path} {code}"));
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_response(status, answer)
}

/// A chat completion, or (`api`) an agent API's request answered in its own shape.
async fn chat(
    req: hyper::Request<Incoming>,
    state: &Arc<State>,
    api: Option<Api>,
) -> Response<Body> {
    let cfg = &state.cfg;
    let n = state.requests.fetch_add(1, Ordering::Relaxed) + 1;
    let (request, arrived, arrived_unix_us) = match read_request(req, api).await {
        Ok(r) => r,
        Err(msg) => {
            return json_response(
                StatusCode::BAD_REQUEST,
                error_body(&msg, "invalid_request_error", 400),
            )
        }
    };
    let marked = cfg.fail_on.as_deref().is_some_and(|t| {
        (request.messages.iter()).any(|m| m["content"].as_str().is_some_and(|c| c.contains(t)))
    });
    if marked || (cfg.fail_every > 0 && n % cfg.fail_every == 0) {
        stdio::out(format_args!(
            "POST /v1/chat/completions 500 (simulated failure, request {n})"
        ));
        return json_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            error_body("simulated internal error", "server_error", 500),
        );
    }
    let after = |k: Option<u64>| k.is_some_and(|k| n > k);
    let mut plan = match after(cfg.tool_text_after) {
        true => plan(
            &SimConfig {
                tool_calls: super::ToolCallsAs::Content,
                ..cfg.clone()
            },
            &request,
        ),
        false => plan(cfg, &request),
    };
    // Taken while asleep, it waits for the wake (scheduling paused), as vLLM's does; woken
    // from level 2 without its weights reloaded, it answers garbage, as vLLM's would.
    state.sleep.resumed().await;
    if after(cfg.garbage_after) || state.sleep.weights_lost() {
        break_answer(&mut plan, Broken::Garbage);
    } else if after(cfg.loop_after) {
        break_answer(&mut plan, Broken::Loop);
    } else if after(cfg.empty_after) {
        break_answer(&mut plan, Broken::Empty);
    }
    let (slot, start, cached) = admit(state, &request, &plan).await;
    plan.cached_tokens = cached;
    stdio::out(format_args!(
        "POST /v1/chat/completions 200 stream={} tokens={} id=chatcmpl-sim-{n} arrived_unix_us={arrived_unix_us} queued_us={} cached={cached}",
        request.stream,
        plan.pieces.len(),
        (start - arrived).as_micros()
    ));
    // Generation starts once a slot is free; the uncached part of the prompt is evaluated first.
    let first = start + cfg.ttft_for(n) + cfg.prefill(plan.prompt_tokens - cached);
    let due = |i: usize| first + cfg.itl().mul_f64(i as f64);
    let vllm = cfg.mimic == Mimic::Vllm;
    let meta = Meta {
        id: format!("chatcmpl-sim-{n}"),
        created: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        model: cfg.model_name.clone(),
        wire: Wire {
            vllm,
            usage: request.include_usage && !cfg.no_usage,
            // Only vLLM honours it.
            continuous: vllm && request.continuous_usage && !cfg.no_usage,
        },
    };
    if !request.stream {
        if !plan.pieces.is_empty() {
            state.metrics.observe_ttft(first - arrived);
            sleep_until(due(plan.pieces.len() - 1)).await;
        }
        state
            .metrics
            .generation_tokens
            .fetch_add(plan.pieces.len() as u64, Ordering::Relaxed);
        drop(slot);
        let whole = match api {
            None => whole_response(&meta, &plan, !cfg.no_usage),
            Some(api) => super::agents::whole(api, &meta, &plan),
        };
        return json_response(StatusCode::OK, whole);
    }

    let dues: Vec<std::time::Instant> = (0..plan.pieces.len()).map(|i| due(i).into_std()).collect();
    streamed(state, (meta, plan, api), slot, dues, arrived)
}

/// The request's body, parsed, and when it was all in (monotonic and wall clock, µs); or
/// why it is a bad request.
async fn read_request(
    req: hyper::Request<Incoming>,
    api: Option<Api>,
) -> std::result::Result<(Request, Instant, u128), String> {
    let body = req
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    // Like a real engine, generation (and so the TTFT clock) starts once the body is in.
    let arrived = Instant::now();
    // The same instant on the wall clock: benchmarks line the schedule up with the client's.
    let arrived_unix_us = unix_us();
    let mut value =
        serde_json::from_slice::<Value>(&body).map_err(|e| format!("body is not JSON: {e}"))?;
    if let Some(api) = api {
        value = super::agents::to_chat(api, &value);
    }
    Ok((Request::from_json(&value)?, arrived, arrived_unix_us))
}

/// A streamed answer: `produce` writes each chunk at its due instant; the response body
/// hands them on and counts the tokens as they go.
fn streamed(
    state: &State,
    (meta, plan, api): (Meta, Plan, Option<Api>),
    slot: Slot,
    dues: Vec<std::time::Instant>,
    arrived: Instant,
) -> Response<Body> {
    let (tx, rx) = mpsc::channel::<Frame>(64);
    let faults = (state.cfg.stall_after, state.cfg.error_after);
    // Paced on its own thread: tokio's timer wheel ticks in whole milliseconds, a thread
    // sleep lands within tens of microseconds, and token timing is what this exists for.
    let (id, tokens) = (meta.id.clone(), plan.pieces.len());
    let pacing = state.pacing.clone();
    let metrics = state.metrics.clone();
    tokio::task::spawn_blocking(move || {
        pacing.fetch_add(1, Ordering::Relaxed);
        match api {
            None => produce(&tx, &meta, &plan, &dues, faults, &pacing),
            Some(api) => super::agents::produce(api, &tx, &meta, &plan, &dues, &pacing),
        }
        pacing.fetch_sub(1, Ordering::Relaxed);
        drop(slot);
    });
    // When each token went to the HTTP layer, logged once the stream ends: a client's
    // timing error can then be told apart from the sim's own lateness against its schedule.
    let handed = Vec::with_capacity(tokens);
    let stream = futures_util::stream::unfold((rx, handed), move |(mut rx, mut handed)| {
        let id = id.clone();
        let metrics = metrics.clone();
        async move {
            let Some((b, carried)) = rx.recv().await else {
                log_handed(&id, &handed);
                return None;
            };
            if carried > 0 {
                if handed.is_empty() {
                    metrics.observe_ttft(arrived.elapsed());
                }
                handed.push(unix_us());
                metrics
                    .generation_tokens
                    .fetch_add(carried as u64, Ordering::Relaxed);
            }
            Some((
                Ok::<_, Infallible>(hyper::body::Frame::data(b)),
                (rx, handed),
            ))
        }
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(CONTENT_TYPE, "text/event-stream")
        .header("cache-control", "no-cache")
        .body(BodyExt::boxed(StreamBody::new(stream)))
        .expect("static response parts are valid")
}
