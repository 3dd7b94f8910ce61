//! The reverse proxy on the production port. Request bodies are read whole (bounded by
//! `body`) so a request that no upstream took can be sent again; response bodies pass
//! through frame by frame as they arrive, never buffered, and are watched on the way for
//! live metrics. A request is sent again only when it never left: the upstream refused
//! the connection; once sent, a failure is the client's answer (502), never a replay.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

use super::accept::{self, Conns, Limits};
use super::body::{Budget, Refused};
use super::chunk::{Chunk, ChunkChoice};
use super::lanes::{Lanes, Pick};
use super::live::Live;
use super::metrics::{Event, Metrics};
use super::quality::{Answer, Asked, Delta, Verdict};
use super::route::{Lease, Refusal, Upstream};

pub(crate) type ProxyBody = BoxBody<Bytes, hyper::Error>;

/// Headers that belong to one connection, not to the request (RFC 9110 §7.6.1).
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
];

pub(crate) struct Proxy {
    /// Every model's lane: where a request goes; the live page's production and state dir.
    lanes: Arc<Lanes>,
    pub(crate) metrics: Arc<Metrics>,
    /// Judges the answers on their way.
    pub(crate) live: Arc<Live>,
    /// Keeps production's requests for a replay, when asked.
    pub(crate) capture: Arc<super::capture::Capture>,
    /// A new connection per request: a kept-alive one the upstream closed meanwhile
    /// (llama-server does) would leave it unknown whether the request was taken, and a
    /// request is never sent twice. A connect costs microseconds; an answer, seconds.
    client: Client<HttpConnector, Full<Bytes>>,
    /// How long a request may wait for an upstream.
    pub(crate) hold: Duration,
    /// `Authorization: Bearer KEY` required when set; never logged.
    api_key: Option<String>,
    /// The watch hears of an upstream that did not answer.
    unreachable: mpsc::UnboundedSender<Upstream>,
    /// Memory for request bodies.
    bodies: Budget,
}

impl Proxy {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        lanes: Arc<Lanes>,
        metrics: Arc<Metrics>,
        live: Arc<Live>,
        capture: Arc<super::capture::Capture>,
        hold: Duration,
        api_key: Option<String>,
        unreachable: mpsc::UnboundedSender<Upstream>,
    ) -> Proxy {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_secs(5)));
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(0)
            .build(connector);
        Proxy {
            lanes,
            metrics,
            live,
            capture,
            client,
            hold,
            api_key,
            unreachable,
            bodies: Budget::default(),
        }
    }
}

/// Serves the production port until `stop` turns true.
pub(crate) async fn serve(
    listener: TcpListener,
    proxy: Arc<Proxy>,
    limits: Limits,
    conns: Conns,
    stop: watch::Receiver<bool>,
) {
    accept::serve(
        listener,
        "the production port",
        limits,
        conns,
        stop,
        move |req| {
            let proxy = proxy.clone();
            async move { handle(&proxy, req).await }
        },
    )
    .await
}

fn text(status: StatusCode, body: String) -> Response<ProxyBody> {
    let mut r = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed(),
    );
    *r.status_mut() = status;
    r
}

fn error(status: StatusCode, message: &str) -> Response<ProxyBody> {
    let body = serde_json::json!({"error": {
        "message": message, "type": "sparkctl_frontdoor", "code": status.as_u16()
    }});
    json(status, &body)
}

fn json(status: StatusCode, body: &serde_json::Value) -> Response<ProxyBody> {
    let mut r = text(status, body.to_string());
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// `/metrics`: the traffic's figures, then the live quality's.
fn metrics_page(proxy: &Proxy) -> Response<ProxyBody> {
    let routes: Vec<_> = proxy.lanes.all().iter().map(|d| d.table.route()).collect();
    let mut page = proxy.metrics.render(&routes);
    proxy.live.render(&mut page);
    proxy.capture.render(&mut page);
    let mut r = text(StatusCode::OK, page);
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    r
}

/// Compares in time independent of where the first difference is.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// Whether the request carries the door's API key (always, when it has none).
fn authorized(proxy: &Proxy, headers: &HeaderMap) -> bool {
    proxy.api_key.as_ref().is_none_or(|key| {
        let given = headers
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or_default();
        same_secret(given.as_bytes(), key.as_bytes())
    })
}

async fn handle(proxy: &Proxy, req: Request<Incoming>) -> Response<ProxyBody> {
    let arrived = Instant::now();
    // Not the door's: another host's name (a rebound page), a target that is no path.
    if let Some(why) = super::hosts::check(&req, &proxy.lanes.shared.config.names) {
        return error(why.status(), &why.message());
    }
    let path = req.uri().path().to_string();
    let authorized = authorized(proxy, req.headers());
    // The live page decides itself what it shows without the key (a shell that asks it).
    if super::page::owns(&path) {
        let lanes = &proxy.lanes;
        let models = || serde_json::to_value(lanes.statuses()).unwrap_or_default();
        let page = super::page::respond(&lanes.primary(), models, &path, authorized).await;
        return page.map(|b| b.map_err(|never| match never {}).boxed());
    }
    if path != "/health" && !authorized {
        return error(
            StatusCode::UNAUTHORIZED,
            "this front door needs `Authorization: Bearer <key>`",
        );
    }
    if path == "/metrics" {
        return metrics_page(proxy);
    }
    let (parts, body) = req.into_parts();
    let body = match proxy.bodies.read(&parts.headers, body).await {
        Ok(b) => b,
        Err(why) => return body_refused(why),
    };
    let door = match proxy
        .lanes
        .pick(&parts.method, parts.uri.path(), &body.bytes)
    {
        Pick::Lane(door) => door,
        Pick::Answer(status, v) => return json(status, &v),
    };
    // Its model's server unloaded: its watch starts it while the request waits.
    door.demand.wanted();
    let queued = Instant::now();
    let asked = proxy
        .live
        .asked(&parts.method, parts.uri.path(), &body.bytes);
    proxy.capture.offer(&parts.method, parts.uri.path(), &body);
    // The upstream's own /metrics stays reachable under /upstream/metrics.
    let forward_path = match parts.uri.path_and_query().map(|p| p.as_str()) {
        Some(p) if p.starts_with("/upstream/metrics") => &p["/upstream".len()..],
        Some(p) => p,
        None => "/",
    }
    .to_string();
    let mut avoid: Option<String> = None;
    let mut held = false;
    loop {
        let left = proxy.hold.saturating_sub(arrived.elapsed());
        let lease = match door.table.lease(left, avoid.as_deref()).await {
            Ok(l) => l,
            Err(why) => {
                proxy.metrics.event(Event::Rejected);
                return no_upstream(why);
            }
        };
        // Its wait so far: for its model's server, a switch, a start on demand.
        let waited = queued.elapsed();
        if !held && arrived.elapsed() > Duration::from_millis(5) {
            held = true;
            proxy.metrics.event(Event::Held);
        }
        match forward(proxy, &lease.upstream, &parts, &forward_path, &body.bytes).await {
            Ok(resp) => {
                drop(body);
                let model = match door.model.as_str() {
                    crate::models::UNNAMED => lease.upstream.recipe.clone(),
                    m => m.to_string(),
                };
                proxy.metrics.waited(&model, waited.as_secs_f64());
                let mut r = respond(proxy, resp, lease, (arrived, asked));
                // What it waited for its model's server, for a client to tell.
                r.headers_mut().insert(
                    HeaderName::from_static("x-sparkctl-queued-ms"),
                    HeaderValue::from(waited.as_millis() as u64),
                );
                return r;
            }
            Err(e) if never_taken(&e) => {
                // It never left, or the upstream dropped it unread: the upstream is down.
                // The request waits for the next one (a restart, a fallback), within its
                // hold.
                tracing::warn!("{} did not answer: {e}", lease.upstream.url);
                proxy.metrics.error(&lease.upstream.recipe, "connect");
                let _ = proxy.unreachable.send(lease.upstream.clone());
                avoid = Some(lease.upstream.deployment.clone());
            }
            Err(e) => {
                // Sent, and no answer came: the upstream may have taken it, so it is not
                // sent again; the client decides.
                proxy.metrics.error(&lease.upstream.recipe, "sent");
                if asked.is_some() {
                    let why = format!("no answer after the request was sent: {e}");
                    proxy
                        .live
                        .record(&lease.upstream, Verdict::failed(arrived, why));
                }
                // Likely dying: the next requests wait for the watch's look.
                door.table.suspect(&lease.upstream);
                let _ = proxy.unreachable.send(lease.upstream.clone());
                return error(
                    StatusCode::BAD_GATEWAY,
                    &format!(
                        "{} took the request and failed before answering ({}); it was not sent again",
                        lease.upstream.recipe,
                        crate::error::chain(&e)
                    ),
                );
            }
        }
    }
}

/// No upstream for a request: 503, to be tried again.
fn no_upstream(why: Refusal) -> Response<ProxyBody> {
    let reason = match why {
        Refusal::QueueFull => {
            "too many requests are waiting for a backend (production is being switched or restarted)"
        }
        Refusal::TimedOut => {
            "no backend could serve within the front door's hold time (production is being switched or restarted)"
        }
        Refusal::Offline => {
            "there is no production behind this front door (`sparkctl rollback --to NAME` or `sparkctl up NAME` sets one)"
        }
    };
    let mut r = error(StatusCode::SERVICE_UNAVAILABLE, reason);
    r.headers_mut()
        .insert(hyper::header::RETRY_AFTER, HeaderValue::from_static("5"));
    r
}

/// A body that was not read whole: why, as an HTTP status.
fn body_refused(why: Refused) -> Response<ProxyBody> {
    let status = match why {
        Refused::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        Refused::TimedOut => StatusCode::REQUEST_TIMEOUT,
        Refused::NoRoom => StatusCode::SERVICE_UNAVAILABLE,
        Refused::Broken(_) => StatusCode::BAD_REQUEST,
    };
    let mut r = error(status, &why.message());
    if why == Refused::NoRoom {
        r.headers_mut()
            .insert(hyper::header::RETRY_AFTER, HeaderValue::from_static("5"));
    }
    r
}

/// Whether a failed forward certainly left the request untaken: the connection was
/// refused, or reset by the upstream's side (a socket closed with the request unread in it
/// resets: docker-proxy in front of a container that died does so). A clean close after
/// the request was written may follow its processing.
fn never_taken(e: &hyper_util::client::legacy::Error) -> bool {
    if e.is_connect() {
        return true;
    }
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionRefused
                    | std::io::ErrorKind::BrokenPipe
            );
        }
        cause = c.source();
    }
    false
}

fn copy_headers(from: &HeaderMap, to: &mut HeaderMap, drop_auth: bool) {
    for (name, value) in from {
        let n = name.as_str();
        if HOP_BY_HOP.contains(&n) || (drop_auth && name == hyper::header::AUTHORIZATION) {
            continue;
        }
        to.append(name.clone(), value.clone());
    }
}

async fn forward(
    proxy: &Proxy,
    upstream: &Upstream,
    parts: &hyper::http::request::Parts,
    path: &str,
    body: &Bytes,
) -> Result<Response<Incoming>, hyper_util::client::legacy::Error> {
    let mut req = Request::builder()
        .method(parts.method.clone())
        .uri(format!("{}{path}", upstream.url))
        .body(Full::new(body.clone()))
        .expect("method and URI come from a valid request");
    copy_headers(&parts.headers, req.headers_mut(), proxy.api_key.is_some());
    proxy.client.request(req).await
}

fn respond(
    proxy: &Proxy,
    resp: Response<Incoming>,
    lease: Lease,
    (arrived, asked): (Instant, Option<Asked>),
) -> Response<ProxyBody> {
    let recipe = lease.upstream.recipe.clone();
    // Which instance answered: a client (and a test) can tell a switch happened.
    let answered_by = format!("{} {}", lease.upstream.recipe, lease.upstream.deployment);
    proxy.metrics.status(&recipe, resp.status().as_u16());
    let (parts, body) = resp.into_parts();
    let sse = parts
        .headers
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    proxy.metrics.started(&recipe);
    let judged = match asked {
        Some(_) if parts.status.is_server_error() => {
            let why = format!("answered {}", parts.status);
            proxy
                .live
                .record(&lease.upstream, Verdict::failed(arrived, why));
            None
        }
        Some(a) if sse && parts.status.is_success() => Some(Judged {
            answer: Answer::new(a, arrived),
            live: proxy.live.clone(),
            ended: false,
            failed: None,
        }),
        _ => None,
    };
    let metered = Metered {
        inner: body,
        metrics: proxy.metrics.clone(),
        recipe,
        arrived,
        sse: sse.then(crate::bench::sse::Parser::default),
        last_token: None,
        running: 0,
        judged,
        lease,
    };
    let mut out = Response::new(metered.boxed());
    *out.status_mut() = parts.status;
    copy_headers(&parts.headers, out.headers_mut(), false);
    if let Ok(v) = HeaderValue::from_str(&answered_by) {
        out.headers_mut()
            .insert(HeaderName::from_static("x-sparkctl-upstream"), v);
    }
    out
}

/// The upstream's body on its way out: counted in flight (the lease) until done, and read
/// for the first token and the gaps between tokens.
struct Metered {
    inner: Incoming,
    metrics: Arc<Metrics>,
    recipe: String,
    arrived: Instant,
    sse: Option<crate::bench::sse::Parser>,
    last_token: Option<Instant>,
    /// The running token count the stream reported last (llama-server timings, vLLM usage).
    running: u64,
    /// The answer judged as it passes, when it is one.
    judged: Option<Judged>,
    lease: Lease,
}

/// A streamed answer being judged, and how its stream ended.
struct Judged {
    answer: Answer,
    live: Arc<Live>,
    /// The stream reached its end.
    ended: bool,
    /// The server failed it (an error event, a broken stream).
    failed: Option<String>,
}

impl Metered {
    fn observe(&mut self, data: &Bytes) {
        let Some(parser) = self.sse.as_mut() else {
            return;
        };
        let now = Instant::now();
        for event in parser.feed(data) {
            let Ok(chunk) = serde_json::from_str::<Chunk>(&event) else {
                continue;
            };
            if let Some(j) = self.judged.as_mut().filter(|_| chunk.error.is_some()) {
                j.failed = Some(format!("an error event: {event}"));
            }
            let bears = chunk.choices.first().is_some_and(ChunkChoice::bears_token);
            let tokens = match bears {
                true => self.tokens_in(&chunk),
                false => 0,
            };
            if let (Some(j), Some(c)) = (self.judged.as_mut(), chunk.choices.first()) {
                let delta = Delta {
                    content: c.delta.content.as_deref(),
                    tool_call: c.delta.tool_calls.as_ref().is_some_and(|t| !t.is_empty()),
                    finish: c.finish_reason.as_deref(),
                    tokens: tokens as u64,
                };
                j.answer.delta(delta, now);
            }
            if !bears {
                continue;
            }
            match self.last_token {
                None => self
                    .metrics
                    .ttft(&self.recipe, (now - self.arrived).as_secs_f64()),
                Some(prev) => self
                    .metrics
                    .itl(&self.recipe, (now - prev).as_secs_f64(), tokens),
            }
            self.last_token = Some(now);
        }
    }
}

impl Metered {
    /// The tokens a token-bearing chunk carried: from the running count when the stream
    /// reports one, else one.
    fn tokens_in(&mut self, chunk: &Chunk) -> usize {
        let count = chunk
            .timings
            .as_ref()
            .and_then(|t| t.predicted_n)
            .or_else(|| chunk.usage.as_ref().and_then(|u| u.completion_tokens));
        match count {
            Some(n) => {
                let d = n.saturating_sub(self.running);
                self.running = n;
                d as usize
            }
            None => 1,
        }
    }
}

impl Drop for Metered {
    fn drop(&mut self) {
        self.metrics.finished(&self.recipe);
        // An answer whose client left before its end is not judged: not the server's doing.
        if let Some(j) = self.judged.take() {
            let verdict = match (j.failed, j.ended) {
                (Some(why), _) => Some(Verdict::failed(self.arrived, why)),
                (None, true) => Some(j.answer.end()),
                (None, false) => None,
            };
            if let Some(v) = verdict {
                j.live.record(&self.lease.upstream, v);
            }
        }
    }
}

impl Metered {
    fn ended(&mut self) {
        if let Some(j) = self.judged.as_mut() {
            j.ended = true;
        }
    }
}

impl Body for Metered {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                // A token's gap marks activity itself; other frames say so here.
                let tokens_seen = this.last_token;
                if let Some(data) = frame.data_ref() {
                    this.observe(data);
                }
                if this.last_token == tokens_seen {
                    this.metrics.active(&this.recipe);
                }
                if this.inner.is_end_stream() {
                    this.ended();
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                this.metrics.error(&this.recipe, "stream");
                if let Some(j) = this.judged.as_mut() {
                    j.failed = Some(format!("the stream broke: {e}"));
                }
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(None) => {
                this.ended();
                Poll::Ready(None)
            }
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
