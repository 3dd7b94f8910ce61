//! A streamed request waiting for its model's server to be started or woken for it: after
//! `AFTER` with no answer, the door answers 200 with an event stream of its
//! own and sends SSE comment lines (`: starting chat, 12 s`) every `EVERY` until the server
//! answers, then passes the server's stream on. A client with a read timeout stays; one
//! whose server then fails gets an error event in its API's shape, not a cut. Whole
//! answers, and streams answered within `AFTER`, are the server's own, unchanged.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame};
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::metered::ProxyBody;
use crate::agents::Api;

/// How long a streamed request waits before the door begins its own stream.
const AFTER: Duration = Duration::from_secs(1);
/// How often a comment line goes out while it waits.
const EVERY: Duration = Duration::from_secs(2);

/// Whether `body` asks for a stream (`"stream": true`), read alone from it.
pub(crate) fn streamed(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Asks {
        #[serde(default)]
        stream: serde_json::Value,
    }
    (serde_json::from_slice::<Asks>(body)).is_ok_and(|a| a.stream == serde_json::Value::Bool(true))
}

/// Aborts the work when the request is gone before it ends.
struct Work(JoinHandle<Response<ProxyBody>>);

impl Drop for Work {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The answer to a streamed request whose `work` (waiting for `model`'s server, then
/// forwarding) runs on its own task: the server's own when it comes within `AFTER`, else
/// the door's stream of comment lines and then the server's.
pub(crate) async fn answer(
    model: String,
    api: Api,
    work: JoinHandle<Response<ProxyBody>>,
) -> Response<ProxyBody> {
    let began = Instant::now();
    let mut work = Work(work);
    if let Ok(done) = tokio::time::timeout(AFTER, &mut work.0).await {
        return done.unwrap_or_else(|e| lost(api, &e));
    }
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now(), EVERY);
        let resp = loop {
            tokio::select! {
                done = &mut work.0 => break done.unwrap_or_else(|e| lost(api, &e)),
                _ = tick.tick() => {
                    let line = format!(": starting {model}, {} s\n\n", began.elapsed().as_secs());
                    if tx.send(Ok(Frame::data(Bytes::from(line)))).await.is_err() {
                        return;
                    }
                }
            }
        };
        let status = resp.status();
        let mut body = resp.into_body();
        if !status.is_success() {
            let text = match body.collect().await {
                Ok(b) => String::from_utf8_lossy(&b.to_bytes()).into_owned(),
                Err(e) => e.to_string(),
            };
            let message = serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
                .unwrap_or(text);
            let event = api.error_event(status, &message);
            let _ = tx.send(Ok(Frame::data(Bytes::from(event)))).await;
            return;
        }
        // A client that leaves while the server is between frames ends it here too: its
        // lease, turn and permit go with the body.
        loop {
            let frame = tokio::select! {
                f = body.frame() => f,
                _ = tx.closed() => return,
            };
            let Some(frame) = frame else { return };
            if tx.send(frame).await.is_err() {
                return;
            }
        }
    });
    let mut r = Response::new(Channel(rx).boxed());
    *r.status_mut() = StatusCode::OK;
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// The work's task ended without an answer (a panic): a 502 in the API's shape.
fn lost(api: Api, e: &tokio::task::JoinError) -> Response<ProxyBody> {
    let event = api.error_event(
        StatusCode::BAD_GATEWAY,
        &format!("the front door lost the request: {e}"),
    );
    let mut r = Response::new(
        http_body_util::Full::new(Bytes::from(event))
            .map_err(|never| match never {})
            .boxed(),
    );
    *r.status_mut() = StatusCode::BAD_GATEWAY;
    r
}

/// A body fed from a channel.
struct Channel(mpsc::Receiver<Result<Frame<Bytes>, hyper::Error>>);

impl Body for Channel {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        self.0.poll_recv(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_is_asked_by_its_flag_alone_and_errors_take_the_apis_shape() {
        assert!(streamed(br#"{"model":"m","stream":true}"#));
        assert!(!streamed(br#"{"model":"m","stream":"yes"}"#));
        assert!(!streamed(b"not json"));
        assert_eq!(Api::of("/v1/messages"), Api::Messages);
        let e = Api::Messages.error_event(StatusCode::SERVICE_UNAVAILABLE, "no");
        assert!(e.starts_with("event: error\ndata: {"), "{e}");
        let e = Api::Chat.error_event(StatusCode::SERVICE_UNAVAILABLE, "no");
        assert!(e.starts_with("data: {\"error\""), "{e}");
    }
}
