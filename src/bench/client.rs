//! One streamed chat request, timed: first token, first output, every chunk's arrival and
//! how many tokens it carried, usage, the server's own timings, tool calls, and what went
//! wrong if anything — with the failure's kind, because a connection the network dropped
//! says nothing about the server while a broken stream does.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::Value;

/// The front door's typed chunk reading is tested against this generic one.
#[cfg(test)]
pub(crate) use super::reader::bears_token;
use super::reader::Reader;
pub(crate) use super::sample::*;
use super::sse;
use crate::agents::Api;

/// The benchmark's HTTP clients: `pooled` keeps connections alive as real clients do;
/// `fresh` keeps none, so a retry is certain to open a new connection.
#[derive(Clone)]
pub struct Clients {
    pub(in crate::bench) pooled: reqwest::Client,
    fresh: reqwest::Client,
}

impl Clients {
    pub(crate) fn pooled(&self) -> &reqwest::Client {
        &self.pooled
    }

    pub fn new() -> Result<Clients, String> {
        let build = |pool: bool| {
            let b = reqwest::Client::builder()
                .no_proxy()
                .tcp_nodelay(true)
                .connect_timeout(Duration::from_secs(5))
                .timeout(Duration::from_secs(600));
            let b = if pool { b } else { b.pool_max_idle_per_host(0) };
            b.build().map_err(|e| format!("HTTP client: {e}"))
        };
        Ok(Clients {
            pooled: build(true)?,
            fresh: build(false)?,
        })
    }
}

/// Opens `n` connections to the server at `url` and leaves them idle in the pool, so that
/// `n` requests sent at once next find them open: a load level's first wave then measures
/// the server, not `n` simultaneous TCP handshakes and their accept queue (which AIPerf and
/// guidellm time into their first wave). Every request holds its connection until all have
/// one (their bodies are read only then), so none is reused before `n` exist. Returns how
/// many the server answered.
pub(crate) async fn open_connections(clients: &Clients, url: &str, n: usize) -> usize {
    let endpoint = format!("{url}/v1/models");
    let sent = futures_util::future::join_all((0..n).map(|_| {
        clients
            .pooled
            .get(&endpoint)
            .timeout(Duration::from_secs(10))
            .send()
    }))
    .await;
    let bodies = sent
        .into_iter()
        .filter_map(Result::ok)
        .map(|r| async move { r.bytes().await.is_ok() });
    futures_util::future::join_all(bodies)
        .await
        .into_iter()
        .filter(|ok| *ok)
        .count()
}

/// The event a complete stream of `api` ends with.
fn last_event(api: Api) -> &'static str {
    match api {
        Api::Chat => "[DONE]",
        Api::Messages => "message_stop",
        Api::Responses => "response.completed",
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Sends `body` (a streaming chat request) to `url` and measures the answer. Never fails:
/// problems become `failure` + `error` with whatever was measured before them.
pub async fn stream(clients: &Clients, url: &str, body: &Value) -> Sample {
    stream_in(clients, url, Api::Chat, body).await
}

/// `stream` of a request in `api`: sent to its path, its events read as the chat chunks
/// they amount to.
pub(crate) async fn stream_in(clients: &Clients, url: &str, api: Api, body: &Value) -> Sample {
    let mut s = Sample::default();
    let Some((resp, sent)) = send(clients, url, api, body, &mut s).await else {
        return s;
    };
    let Some(resp) = event_stream(resp, &mut s, sent).await else {
        return s;
    };
    read(resp, api, &mut s, sent).await;
    s
}

/// Sends the request; the response and when it was sent, or None with the sample failed.
async fn send(
    clients: &Clients,
    url: &str,
    api: Api,
    body: &Value,
    s: &mut Sample,
) -> Option<(reqwest::Response, Instant)> {
    let endpoint = format!("{url}{}", api.path());
    let mut sent = Instant::now();
    s.sent_unix_us = crate::units::unix_now().as_micros() as u64;
    let mut answer = clients.pooled.post(&endpoint).json(body).send().await;
    // Nothing came back, so the server has no answer to judge: servers close pooled
    // connections they advertised as kept alive (llama-server), and a request sent on one
    // as it closes dies unanswered. Once more, on a new connection, timed afresh.
    if let Err(e) = &answer {
        if !e.is_timeout() {
            s.retried_after = Some(crate::error::chain(e));
            sent = Instant::now();
            s.sent_unix_us = crate::units::unix_now().as_micros() as u64;
            answer = clients.fresh.post(&endpoint).json(body).send().await;
        }
    }
    match answer {
        Ok(r) => Some((r, sent)),
        Err(e) => {
            let kind = if e.is_timeout() {
                Failure::Timeout
            } else {
                Failure::Transport
            };
            s.fail(kind, format!("request failed: {}", crate::error::chain(&e)));
            s.e2e_ms = ms(sent.elapsed());
            None
        }
    }
}

/// The response when it is a successful event stream; else None with the sample failed.
async fn event_stream(
    resp: reqwest::Response,
    s: &mut Sample,
    sent: Instant,
) -> Option<reqwest::Response> {
    let status = resp.status();
    s.status = Some(status.as_u16());
    let is_sse = resp
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if status.is_success() && is_sse {
        return Some(resp);
    }
    let text = resp.text().await.unwrap_or_default();
    let what = if status.is_success() {
        "not an event stream"
    } else {
        "an error"
    };
    s.fail(
        Failure::Http,
        format!(
            "HTTP {status}, {what}: {}",
            text.chars().take(300).collect::<String>()
        ),
    );
    s.e2e_ms = ms(sent.elapsed());
    None
}

/// Reads the stream to its end (or its break), timing every event from `sent`.
async fn read(resp: reqwest::Response, api: Api, s: &mut Sample, sent: Instant) {
    let mut reader = Reader::default();
    let mut parser = sse::Parser::default();
    let mut bytes = resp.bytes_stream();
    'read: while let Some(chunk) = bytes.next().await {
        let at = sent.elapsed();
        let chunk = match chunk {
            Ok(c) => c,
            Err(e) => {
                let kind = if e.is_timeout() {
                    Failure::Timeout
                } else {
                    Failure::Stream
                };
                s.fail(kind, format!("stream broke: {}", crate::error::chain(&e)));
                break;
            }
        };
        for data in parser.feed(&chunk) {
            if api != Api::Chat {
                let r = crate::agents::event(api, &data);
                if let Some(err) = &r.error {
                    s.fail(Failure::Stream, format!("error event: {err}"));
                    break 'read;
                }
                reader.event(s, &r.as_chat_chunk(), ms(at));
                if r.done {
                    reader.done = true;
                    break 'read;
                }
                continue;
            }
            if data.trim() == "[DONE]" {
                reader.done = true;
                break 'read;
            }
            let v: Value = match serde_json::from_str(&data) {
                Ok(v) => v,
                Err(e) => {
                    s.fail(
                        Failure::Stream,
                        format!(
                            "invalid JSON in the stream ({e}): {}",
                            data.chars().take(120).collect::<String>()
                        ),
                    );
                    break 'read;
                }
            };
            if let Some(err) = v.get("error") {
                s.fail(Failure::Stream, format!("error event: {err}"));
                break 'read;
            }
            reader.event(s, &v, ms(at));
        }
    }
    s.e2e_ms = ms(sent.elapsed());
    if s.error.is_none() && !reader.done {
        s.fail(
            Failure::Stream,
            if parser.pending() {
                "the stream ended in the middle of an event (truncated)".into()
            } else {
                format!("the stream ended without {} (truncated)", last_event(api))
            },
        );
    }
    reader.finish(s);
    s.ok = s.error.is_none();
}
