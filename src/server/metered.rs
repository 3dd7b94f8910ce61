//! The upstream's answer on its way out to the client: counted in flight (its lease) until
//! done, metered (its first token, the gaps between tokens), read and judged (`reading`),
//! and its verdict sent to production's live window and to a rollout's side.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::Response;

use super::live::Live;
use super::metrics::Metrics;
use super::quality::{Answer, Asked, Verdict};
use super::reading::Reading;
use super::rollout::{CanaryStream, PairSlot, Rollout};
use super::route::{Lease, Upstream};

pub(crate) type ProxyBody = http_body_util::combinators::BoxBody<Bytes, hyper::Error>;

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

pub(super) fn copy_headers(from: &HeaderMap, to: &mut HeaderMap, drop_auth: bool) {
    for (name, value) in from {
        let n = name.as_str();
        // CORS is the door's (`origin`), in either direction.
        let dropped = HOP_BY_HOP.contains(&n) || super::origin::is_cors(name);
        let auth = name == hyper::header::AUTHORIZATION || n == super::key::X_API_KEY;
        if dropped || (drop_auth && auth) {
            continue;
        }
        to.append(name.clone(), value.clone());
    }
}

/// Where an answer's verdict goes beside production's live window: a rollout's side.
pub(super) enum Side {
    None,
    /// Production's answer during a canary (its side of the comparison).
    Production(Arc<Rollout>),
    /// Production's answer to a shadowed request: one half of its pair.
    Pair(Arc<PairSlot>),
    /// The candidate's answer to a canary request (counted until it is done).
    Candidate(CanaryStream),
}

/// A request's answer, to be judged: when it arrived, what it asked, where the verdict goes.
pub(super) struct Judging {
    pub(super) arrived: Instant,
    pub(super) asked: Option<Asked>,
    pub(super) side: Side,
    /// Its key's hold (shared with the request until its answer's end).
    pub(super) permit: Option<super::quota::Permit>,
    /// Whose API the request speaks, so its tokens are counted even when not judged.
    pub(super) api: crate::agents::Api,
}

impl Judging {
    /// The verdict (None: not judged) to production's live window and the rollout's side.
    pub(super) fn record(self, live: &Live, upstream: &Upstream, v: Option<Verdict>) {
        match (&self.side, &v) {
            (Side::Candidate(r), Some(v)) => r.answered(true, v),
            (Side::Production(r), Some(v)) => r.answered(false, v),
            (Side::Pair(pair), _) => pair.production(v.clone()),
            _ => {}
        }
        if let (false, Some(v)) = (matches!(self.side, Side::Candidate(_)), v) {
            live.record(upstream, v);
        }
    }
}

/// The upstream's body on its way out: counted in flight (the lease) until done, and read
/// for the first token and the gaps between tokens, and judged.
pub(super) struct Metered {
    pub(super) inner: Incoming,
    pub(super) metrics: Arc<Metrics>,
    pub(super) live: Arc<Live>,
    pub(super) recipe: String,
    pub(super) arrived: Instant,
    pub(super) reading: Option<Reading>,
    pub(super) last_token: Option<Instant>,
    /// Where its verdict goes, when it is judged.
    pub(super) judging: Option<Judging>,
    /// A canary's candidate answering: its bytes to clients are counted.
    pub(super) canary: Option<Arc<Rollout>>,
    pub(super) upstream: Upstream,
    pub(super) lease: Option<Lease>,
    /// Its turn at the server among the keys (`fair`), until its last byte.
    pub(super) turn: Option<super::fair::Turn>,
    /// Its key's hold, told the answer's tokens at its end.
    pub(super) permit: Option<super::quota::Permit>,
}

impl Metered {
    fn observe(&mut self, data: &Bytes) {
        let Some(reading) = self.reading.as_mut() else {
            return;
        };
        let now = Instant::now();
        for tokens in reading.feed(data, now) {
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

impl Drop for Metered {
    fn drop(&mut self) {
        self.metrics.finished(&self.recipe);
        if let (Some(p), Some(r)) = (&self.permit, &self.reading) {
            p.tokens(r.tokens());
        }
        let verdict = self.reading.take().and_then(|r| r.verdict(self.arrived));
        if let Some(j) = self.judging.take() {
            j.record(&self.live, &self.upstream, verdict);
        }
        drop(self.lease.take());
        drop(self.turn.take());
        drop(self.permit.take());
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
                    if let Some(r) = &this.canary {
                        r.delivered(data.len());
                    }
                }
                if this.last_token == tokens_seen {
                    this.metrics.active(&this.recipe);
                }
                if this.inner.is_end_stream() {
                    if let Some(r) = this.reading.as_mut() {
                        r.ended();
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                this.metrics.error(&this.recipe, "stream");
                if let Some(p) = &this.permit {
                    p.broke();
                }
                if let Some(r) = this.reading.as_mut() {
                    r.broke(format!("the stream broke: {e}"));
                }
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(None) => {
                if let Some(r) = this.reading.as_mut() {
                    r.ended();
                }
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

/// The upstream's answer to a client: metered, judged where it is asked, counted to its key.
pub(super) fn respond(
    (metrics, live): (&Arc<Metrics>, &Arc<Live>),
    resp: Response<Incoming>,
    upstream: Upstream,
    (lease, turn): (Option<Lease>, Option<super::fair::Turn>),
    judging: Judging,
) -> Response<ProxyBody> {
    let recipe = upstream.recipe.clone();
    // Which instance answered: a client (and a test) can tell a switch happened.
    let answered_by = format!("{} {}", upstream.recipe, upstream.deployment);
    metrics.status(&recipe, resp.status().as_u16());
    let (permit, api) = (judging.permit.clone(), judging.api);
    if let Some(p) = &permit {
        p.answered(resp.status().as_u16());
    }
    let (parts, body) = resp.into_parts();
    metrics.started(&recipe);
    let arrived = judging.arrived;
    let (answer, judging) = match judging.asked {
        Some(_) if parts.status.is_server_error() => {
            let why = format!("answered {}", parts.status);
            judging.record(live, &upstream, Some(Verdict::failed(arrived, why)));
            (None, None)
        }
        Some(a) if parts.status.is_success() => {
            let answer = Answer::new(a, arrived);
            let answer = match judging.side {
                Side::Pair(_) => answer.keeping_text(),
                _ => answer,
            };
            (Some(answer), Some(judging))
        }
        _ => (None, None),
    };
    let canary = match judging.as_ref().map(|j| &j.side) {
        Some(Side::Candidate(stream)) => Some(stream.rollout()),
        _ => None,
    };
    let metered = Metered {
        inner: body,
        metrics: metrics.clone(),
        live: live.clone(),
        recipe,
        arrived,
        reading: Some(Reading::new(&parts.headers, answer, permit.is_some(), api)),
        last_token: None,
        judging,
        canary,
        upstream,
        lease,
        turn,
        permit,
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
