//! One streamed chat request, timed: first content token, first reasoning token, every
//! token's arrival, usage, server timings, tool calls, and what went wrong if anything.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::sse;

/// Everything measured about one request. Times are ms from the request's send.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Sample {
    pub case: String,
    pub run: usize,
    /// 1-based turn of a multi-turn case.
    pub turn: usize,
    pub warmup: bool,
    pub ok: bool,
    /// The response's `id` (to find it in the server's log).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// When the request was sent, Unix µs: lines the sample up with server-side timestamps.
    pub sent_unix_us: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub status: Option<u16>,
    /// Time to the first content token (reasoning does not count).
    pub ttft_ms: Option<f64>,
    /// Time to the first reasoning token.
    pub ttfr_ms: Option<f64>,
    pub e2e_ms: f64,
    /// Gaps between consecutive tokens (content or reasoning), ms.
    pub itl_ms: Vec<f64>,
    pub content_deltas: usize,
    pub reasoning_deltas: usize,
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub reasoning_tokens: Option<u64>,
    pub cached_tokens: Option<u64>,
    /// Decode speed: completion tokens after the first, over the time they took.
    pub decode_tps: Option<f64>,
    /// True when no `usage` came and token counts are the number of deltas.
    pub usage_estimated: bool,
    /// llama-server's own `timings`, when sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_timings: Option<Value>,
    pub content: String,
    pub reasoning: String,
    pub tool_calls: Vec<ToolCall>,
    pub finish_reason: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ToolCall {
    pub name: String,
    pub arguments: String,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Sends `body` (a streaming chat request) to `url` and measures the answer. Never fails:
/// problems become `error` with whatever was measured before them.
pub async fn stream(client: &reqwest::Client, url: &str, body: &Value) -> Sample {
    let mut s = Sample::default();
    let sent = Instant::now();
    s.sent_unix_us = crate::units::unix_now().as_micros() as u64;
    let resp = match client
        .post(format!("{url}/v1/chat/completions"))
        .json(body)
        .send()
        .await
    {
        Ok(r) => r,
        Err(e) => {
            s.error = Some(format!("request failed: {e}"));
            s.e2e_ms = ms(sent.elapsed());
            return s;
        }
    };
    let status = resp.status();
    s.status = Some(status.as_u16());
    let is_sse = resp
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !status.is_success() || !is_sse {
        let text = resp.text().await.unwrap_or_default();
        let what = if status.is_success() {
            "not an event stream"
        } else {
            "an error"
        };
        s.error = Some(format!(
            "HTTP {status}, {what}: {}",
            text.chars().take(300).collect::<String>()
        ));
        s.e2e_ms = ms(sent.elapsed());
        return s;
    }

    let mut parser = sse::Parser::default();
    let mut bytes = resp.bytes_stream();
    let (mut first_token, mut last_token): (Option<Duration>, Option<Duration>) = (None, None);
    let mut done = false;
    let mut tools: Vec<ToolCall> = Vec::new();
    'read: while let Some(chunk) = bytes.next().await {
        let at = sent.elapsed();
        let chunk = match chunk {
            Ok(c) => c,
            Err(e) => {
                s.error = Some(format!("stream broke: {e}"));
                break;
            }
        };
        for data in parser.feed(&chunk) {
            if data.trim() == "[DONE]" {
                done = true;
                break 'read;
            }
            let v: Value = match serde_json::from_str(&data) {
                Ok(v) => v,
                Err(e) => {
                    s.error = Some(format!(
                        "invalid JSON in the stream ({e}): {}",
                        data.chars().take(120).collect::<String>()
                    ));
                    break 'read;
                }
            };
            if s.id.is_none() {
                s.id = v["id"].as_str().map(str::to_string);
            }
            if let Some(err) = v.get("error") {
                s.error = Some(format!("error event: {err}"));
                break 'read;
            }
            if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
                s.prompt_tokens = u["prompt_tokens"].as_u64();
                s.completion_tokens = u["completion_tokens"].as_u64();
                s.reasoning_tokens = u
                    .pointer("/completion_tokens_details/reasoning_tokens")
                    .and_then(Value::as_u64);
                s.cached_tokens = u
                    .pointer("/prompt_tokens_details/cached_tokens")
                    .and_then(Value::as_u64);
            }
            if let Some(t) = v.get("timings") {
                s.server_timings = Some(t.clone());
            }
            let Some(choice) = v.pointer("/choices/0") else {
                continue;
            };
            if let Some(reason) = choice["finish_reason"].as_str() {
                s.finish_reason = Some(reason.to_string());
            }
            let delta = &choice["delta"];
            let mut token = false;
            if let Some(r) = delta["reasoning_content"]
                .as_str()
                .or(delta["reasoning"].as_str())
                .filter(|r| !r.is_empty())
            {
                s.reasoning.push_str(r);
                s.reasoning_deltas += 1;
                s.ttfr_ms.get_or_insert(ms(at));
                token = true;
            }
            if let Some(c) = delta["content"].as_str().filter(|c| !c.is_empty()) {
                s.content.push_str(c);
                s.content_deltas += 1;
                s.ttft_ms.get_or_insert(ms(at));
                token = true;
            }
            for call in delta["tool_calls"].as_array().into_iter().flatten() {
                let index = call["index"].as_u64().unwrap_or(0) as usize;
                while tools.len() <= index {
                    tools.push(ToolCall::default());
                }
                if let Some(name) = call.pointer("/function/name").and_then(Value::as_str) {
                    tools[index].name.push_str(name);
                }
                if let Some(args) = call.pointer("/function/arguments").and_then(Value::as_str) {
                    tools[index].arguments.push_str(args);
                }
                // A tool call is the answer's first output, as content would be.
                s.ttft_ms.get_or_insert(ms(at));
                token = true;
            }
            if token {
                if let Some(prev) = last_token {
                    s.itl_ms.push(ms(at - prev));
                }
                first_token.get_or_insert(at);
                last_token = Some(at);
            }
        }
    }
    s.e2e_ms = ms(sent.elapsed());
    s.tool_calls = tools;
    if s.error.is_none() && !done {
        s.error = Some(if parser.pending() {
            "the stream ended in the middle of an event (truncated)".into()
        } else {
            "the stream ended without [DONE] (truncated)".into()
        });
    }
    let estimated_tokens = (s.content_deltas + s.reasoning_deltas) as u64;
    let tokens = match s.completion_tokens {
        Some(n) => n,
        None => {
            s.usage_estimated = true;
            estimated_tokens
        }
    };
    if let (Some(first), Some(last)) = (first_token, last_token) {
        if tokens > 1 && last > first {
            s.decode_tps = Some((tokens - 1) as f64 / (last - first).as_secs_f64());
        }
    }
    s.ok = s.error.is_none();
    s
}
