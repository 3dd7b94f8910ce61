//! The reverse proxy on the production port. Request bodies are read whole (bounded by
//! `body`) so a request that no upstream took can be sent again; response bodies pass
//! through frame by frame as they arrive, never buffered, and are watched on the way for
//! live metrics. A request is sent again only when it never left: the upstream refused
//! the connection; once sent, a failure is the client's answer (502), never a replay.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

use super::accept::{self, Conns, Limits};
use super::answer::{body_refused, error, json, limited, no_upstream, text};
use super::body::Budget;
use super::key::Caller;
use super::lanes::{Lanes, Pick};
use super::live::Live;
use super::metered::{copy_headers, Judging, ProxyBody, Side};
use super::metrics::{Event, Metrics};
use super::origin;
use super::quality::Verdict;
use super::quota::Permit;
use super::rollout::Way;
use super::route::{Refusal, Upstream};
use crate::exposition::Format;

/// How long a shadow copy's answer may take: the longest a client waits for one.
const COPY_LIMIT: Duration = Duration::from_secs(600);

pub(crate) struct Proxy {
    /// Every model's lane: where a request goes; the live page's production and state dir.
    lanes: Arc<Lanes>,
    metrics: Arc<Metrics>,
    /// Judges the answers on their way.
    live: Arc<Live>,
    /// Keeps production's requests for a replay, when asked.
    capture: Arc<super::capture::Capture>,
    /// A new connection per request: a kept-alive one the upstream closed meanwhile
    /// (llama-server does) would leave it unknown whether the request was taken, and a
    /// request is never sent twice. A connect costs microseconds; an answer, seconds.
    client: Client<HttpConnector, Full<Bytes>>,
    /// How long a request may wait for an upstream.
    hold: Duration,
    /// Who a request is, by its key (`key::Access`); keys are never logged.
    access: super::key::Access,
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
        access: super::key::Access,
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
            access,
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

/// Each key's use, as its caller may see it: a client key its own alone.
const USAGE: &str = "/_sparkctl/usage";

/// `/metrics`: the traffic's figures, then the live quality's, as the scraper asks.
fn metrics_page(proxy: &Proxy, headers: &HeaderMap) -> Response<ProxyBody> {
    let routes: Vec<_> = proxy.lanes.all().iter().map(|d| d.table.route()).collect();
    let format = Format::asked(headers);
    let parts = (&proxy.live, &proxy.capture, &proxy.access.quota);
    let page = super::metrics::page(&proxy.metrics, routes, parts, format);
    let mut r = text(StatusCode::OK, page);
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static(format.content_type()),
    );
    r
}

async fn handle(proxy: &Arc<Proxy>, req: Request<Incoming>) -> Response<ProxyBody> {
    let config = &proxy.lanes.shared.config;
    // Not the door's: another host's name (a rebound page), a target that is no path.
    if let Some(why) = super::hosts::check(&req, &config.names) {
        return error(why.status(), &why.message());
    }
    let path = req.uri().path().to_string();
    let who = proxy.access.caller(req.headers());
    let authorized = who.admin();
    if path == USAGE {
        return match who {
            Caller::Nobody => error(StatusCode::UNAUTHORIZED, "usage needs a key"),
            _ => json(StatusCode::OK, &super::key::usage(&proxy.access, &who)),
        };
    }
    // The live page decides itself what it shows without the key (a shell that asks it).
    if super::page::owns(&path) {
        let lanes = &proxy.lanes;
        let shared = || {
            serde_json::json!({"models": lanes.statuses(),
                "usage": super::key::usage(&proxy.access, &who)})
        };
        let page = super::page::respond(&lanes.primary(), shared, &path, authorized).await;
        return page.map(|b| b.map_err(|never| match never {}).boxed());
    }
    // A probe, answered here from the lanes' state: it reads no body, needs no key, and
    // starts, wakes or counts as use of no model.
    if path == "/health" {
        return health(proxy, req.method());
    }
    // The engines' own control (sleep, weights, RPC) is the door's, never a client's.
    if let Some(route) = super::engine_routes::control(req.method(), &path) {
        return error(StatusCode::FORBIDDEN, &super::engine_routes::refusal(route));
    }
    let caller = origin::caller(req.headers(), &config.origins);
    if origin::preflight(req.method(), req.headers()) {
        let (status, headers) = origin::preflight_answer(&caller, req.headers());
        let mut r = text(status, String::new());
        r.headers_mut().extend(headers);
        return r;
    }
    if let origin::Caller::Foreign(from) = &caller {
        return error(
            StatusCode::FORBIDDEN,
            &format!(
                "a web page ({from}) may not call this front door; an origin of your own goes \
                 in SPARKCTL_FRONTDOOR_ORIGINS"
            ),
        );
    }
    if matches!(who, Caller::Nobody) {
        return error(
            StatusCode::UNAUTHORIZED,
            "this front door needs `Authorization: Bearer <key>`",
        );
    }
    let mut r = match path.as_str() {
        "/metrics" if !authorized => error(
            StatusCode::FORBIDDEN,
            "/metrics needs an admin key (`sparkctl keys add NAME --admin`)",
        ),
        "/metrics" => metrics_page(proxy, req.headers()),
        _ => proxied(proxy, req, &who).await,
    };
    origin::allow(&caller, r.headers_mut());
    r
}

/// `/health`: 200 while the model a request naming none goes to serves or may be started
/// (`Lanes::ready`), else 503; GET and HEAD only, and nothing of recipes or deployments.
fn health(proxy: &Proxy, method: &hyper::Method) -> Response<ProxyBody> {
    if method != hyper::Method::GET && method != hyper::Method::HEAD {
        let mut r = error(
            StatusCode::METHOD_NOT_ALLOWED,
            "/health is GET or HEAD; it reads no body",
        );
        r.headers_mut()
            .insert(hyper::header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    match proxy.lanes.ready() {
        true => json(StatusCode::OK, &serde_json::json!({"status": "ok"})),
        false => json(
            StatusCode::SERVICE_UNAVAILABLE,
            &serde_json::json!({"status": "unavailable"}),
        ),
    }
}

/// A request for a model's server, from its body on.
async fn proxied(
    proxy: &Arc<Proxy>,
    req: Request<Incoming>,
    caller: &Caller,
) -> Response<ProxyBody> {
    let arrived = Instant::now();
    let (parts, body) = req.into_parts();
    let client = parts.extensions.get::<super::accept::Client>().copied();
    let mut body = match proxy.bodies.read(&parts.headers, body).await {
        Ok(b) => b,
        Err(why) => return body_refused(why),
    };
    let (door, permit) = match admitted(proxy, &parts, &mut body.bytes, caller) {
        Ok(admitted) => admitted,
        Err(answered) => return *answered,
    };
    // Its model's server unloaded: its watch starts it while the request waits.
    door.want();
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
    let rollout = meet_rollout(
        proxy,
        &door,
        &parts,
        &forward_path,
        &body.bytes,
        (arrived, asked, permit.clone()),
    );
    let judging = match rollout.await {
        Ok(side) => Some(Judging {
            arrived,
            asked,
            side,
            permit: permit.clone(),
            api: crate::agents::Api::of(parts.uri.path()),
        }),
        Err(answered) => return answered,
    };
    let waiting = Waiting {
        parts,
        forward_path,
        body,
        judging,
        permit,
        client,
        bucket: caller.key().map_or(String::new(), |k| k.name.clone()),
        arrived,
        queued,
    };
    // A stream whose model's server is being started (or woken) for it: the door's progress
    // lines meanwhile. A hold for a switch or a restart keeps its 503 past the bound.
    let starting = door.demand.load() != super::demand::Load::Loaded;
    if starting && super::progress::streamed(&waiting.body.bytes) {
        let api = crate::agents::Api::of(waiting.parts.uri.path());
        let model = crate::models::answers_to(&door.model(), &door.production());
        let work = tokio::spawn(served(proxy.clone(), door, waiting));
        return super::progress::answer(model.unwrap_or_default(), api, work).await;
    }
    served(proxy.clone(), door, waiting).await
}

/// A request admitted and met by any rollout, to be sent to its model's server once there
/// is one.
struct Waiting {
    parts: hyper::http::request::Parts,
    forward_path: String,
    body: super::body::Read,
    judging: Option<Judging>,
    permit: Option<Permit>,
    client: Option<super::accept::Client>,
    /// Its key's name, for its turn at the server (`fair`); the keyless share "".
    bucket: String,
    arrived: Instant,
    queued: Instant,
}

/// Waits, within its hold, for `door`'s server and its turn there, and sends it.
async fn served(proxy: Arc<Proxy>, door: Arc<super::Door>, w: Waiting) -> Response<ProxyBody> {
    let Waiting {
        parts,
        forward_path,
        body,
        mut judging,
        permit,
        client,
        bucket,
        arrived,
        queued,
    } = w;
    let proxy = &proxy;
    // Its turn at the server among the keys, where the server's slots are known: taken
    // before a lease, so a request queued here is not one in flight that a drain waits for.
    let slots = door.demand.settings().slots;
    let queue = door.config.queue;
    let mut turn = match tokio::time::timeout(
        proxy.hold.saturating_sub(arrived.elapsed()),
        door.fair.enter(&bucket, slots, queue),
    )
    .await
    {
        Ok(Ok(turn)) => turn,
        Ok(Err(super::fair::Full)) => {
            proxy.metrics.event(Event::Rejected);
            return no_upstream(Refusal::QueueFull);
        }
        Err(_) => {
            proxy.metrics.event(Event::Rejected);
            return no_upstream(Refusal::TimedOut);
        }
    };
    let mut held = false;
    loop {
        let left = proxy.hold.saturating_sub(arrived.elapsed());
        let lease = match door.table.lease(left, None, client).await {
            Ok(l) => l,
            Err(why) => {
                proxy.metrics.event(Event::Rejected);
                return no_upstream(why);
            }
        };
        // Its wait so far: for its model's server, a switch, a start on demand, its turn.
        let waited = queued.elapsed();
        if let Some(p) = &permit {
            p.waited(waited);
        }
        if !held && arrived.elapsed() > Duration::from_millis(5) {
            held = true;
            proxy.metrics.event(Event::Held);
        }
        match forward(proxy, &lease.upstream, &parts, &forward_path, &body.bytes).await {
            Ok(resp) => {
                drop(body);
                let model = match door.model() {
                    m if m == crate::models::UNNAMED => lease.upstream.recipe.clone(),
                    m => m,
                };
                proxy.metrics.waited(&model, waited.as_secs_f64());
                let upstream = lease.upstream.clone();
                let judged = judging.take().expect("answered once");
                let mut r = super::metered::respond(
                    (&proxy.metrics, &proxy.live),
                    resp,
                    upstream,
                    (Some(lease), turn.take()),
                    judged,
                );
                // What it waited for its model's server, for a client to tell.
                r.headers_mut().insert(
                    HeaderName::from_static("x-sparkctl-queued-ms"),
                    HeaderValue::from(waited.as_millis() as u64),
                );
                return r;
            }
            Err(e) if never_taken(&e) => {
                // It never left, or the upstream dropped it unread: the upstream may be
                // down, or refused this one connection and serves on. The request waits,
                // within its hold, for the watch's look: a restart or a fallback serves
                // it, or this very upstream once it answers the look (it never took the
                // request, so it is sent again; waiting for another upstream held it for
                // one that never came).
                tracing::warn!("{} did not answer: {e}", lease.upstream.url);
                proxy.metrics.error(&lease.upstream.recipe, "connect");
                door.table.suspect(&lease.upstream);
                let _ = proxy.unreachable.send(lease.upstream.clone());
            }
            Err(e) => {
                let judged = judging.take();
                return lost_after_sending(proxy, &door, &lease.upstream, judged, &e);
            }
        }
    }
}

/// A request's lane, and its key's hold.
type Admitted = (Arc<super::Door>, Option<Permit>);

/// The lane a request goes to, once its key may ask for that model (403) and is within its
/// limits (429); the door's own answer where the body names no lane. A body that names an
/// alias or a preset is rewritten for the model's server.
fn admitted(
    proxy: &Proxy,
    parts: &hyper::http::request::Parts,
    body: &mut Bytes,
    caller: &Caller,
) -> Result<Admitted, Box<Response<ProxyBody>>> {
    let door = match proxy.lanes.pick(&parts.method, parts.uri.path(), body) {
        Pick::Lane(door) => door,
        Pick::Renamed(door, named) => {
            if let Some(rewritten) = super::names::rewrite(body, &named) {
                *body = rewritten;
            }
            door
        }
        Pick::Answer(status, v) => {
            return Err(Box::new(json(status, &super::key::scoped(v, caller))))
        }
    };
    let model = crate::models::answers_to(&door.model(), &door.production()).unwrap_or_default();
    if !caller.reaches(&model) {
        let why = super::key::out_of_scope(&model, caller);
        return Err(Box::new(json(StatusCode::FORBIDDEN, &why)));
    }
    match proxy.access.admit(caller) {
        Ok(permit) => Ok((door, permit)),
        Err((key, l)) => Err(Box::new(limited(&key, &l))),
    }
}

/// Sent, and no answer came: the upstream may have taken it, so it is not sent again; the
/// client decides.
fn lost_after_sending(
    proxy: &Proxy,
    door: &super::Door,
    upstream: &Upstream,
    judging: Option<Judging>,
    e: &hyper_util::client::legacy::Error,
) -> Response<ProxyBody> {
    proxy.metrics.error(&upstream.recipe, "sent");
    if let Some(j) = judging.filter(|j| j.asked.is_some()) {
        let why = format!("no answer after the request was sent: {e}");
        let arrived = j.arrived;
        j.record(&proxy.live, upstream, Some(Verdict::failed(arrived, why)));
    }
    // Likely dying: the next requests wait for the watch's look.
    door.table.suspect(upstream);
    let _ = proxy.unreachable.send(upstream.clone());
    error(
        StatusCode::BAD_GATEWAY,
        &format!(
            "{} took the request and failed before answering ({}); it was not sent again",
            upstream.recipe,
            crate::error::chain(e)
        ),
    )
}

/// How the request meets the model's rollout, if one runs: a shadow's copy sent, or a
/// canary's answer from the candidate (Err: the client's answer); else where production's
/// verdict goes beside its live window.
async fn meet_rollout(
    proxy: &Proxy,
    door: &super::Door,
    parts: &hyper::http::request::Parts,
    forward_path: &str,
    body: &Bytes,
    (arrived, asked, permit): (Instant, Option<super::quality::Asked>, Option<Permit>),
) -> Result<Side, Response<ProxyBody>> {
    let Some(rollout) = door.rollout.get() else {
        return Ok(Side::None);
    };
    match rollout.way(&parts.headers, body, asked) {
        Way::Production(r) => Ok(Side::Production(r)),
        Way::Shadow(pair) => {
            let copy = request(proxy, pair.candidate(), parts, forward_path, body);
            let asked = asked.expect("only a judged request is shadowed");
            pair.clone()
                .send(proxy.client.clone(), copy, asked, COPY_LIMIT);
            Ok(Side::Pair(pair))
        }
        Way::Canary(r) => {
            let stream = r.stream();
            // A candidate that takes the request and hangs falls back like one that refused.
            let tried = forward(proxy, &r.candidate, parts, forward_path, body);
            match tokio::time::timeout(proxy.hold, tried).await {
                Ok(Ok(resp)) if resp.status().is_success() => {
                    let judged = Judging {
                        arrived,
                        asked,
                        side: Side::Candidate(stream),
                        permit,
                        api: crate::agents::Api::of(parts.uri.path()),
                    };
                    return Err(super::metered::respond(
                        (&proxy.metrics, &proxy.live),
                        resp,
                        r.candidate.clone(),
                        (None, None),
                        judged,
                    ));
                }
                // Nothing reached the client: production answers it.
                Ok(Ok(resp)) if resp.status().is_client_error() => r.passed_on(),
                Ok(Ok(resp)) => r.retried(format!("answered {}", resp.status())),
                Ok(Err(e)) => r.retried(crate::error::chain(&e)),
                Err(_) => r.retried(format!("no answer within {} s", proxy.hold.as_secs())),
            }
            Ok(Side::Production(r))
        }
    }
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

/// The client's request, for `upstream`.
fn request(
    proxy: &Proxy,
    upstream: &Upstream,
    parts: &hyper::http::request::Parts,
    path: &str,
    body: &Bytes,
) -> Request<Full<Bytes>> {
    let mut req = Request::builder()
        .method(parts.method.clone())
        .uri(format!("{}{path}", upstream.url))
        .body(Full::new(body.clone()))
        .expect("method and URI come from a valid request");
    copy_headers(&parts.headers, req.headers_mut(), proxy.access.keyed());
    // The body's own length: an alias's or a preset's rewrite changed it.
    req.headers_mut()
        .insert(hyper::header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    req
}

async fn forward(
    proxy: &Proxy,
    upstream: &Upstream,
    parts: &hyper::http::request::Parts,
    path: &str,
    body: &Bytes,
) -> Result<Response<Incoming>, hyper_util::client::legacy::Error> {
    let req = request(proxy, upstream, parts, path, body);
    proxy.client.request(req).await
}
