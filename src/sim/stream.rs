//! One answer on the wire: OpenAI chat-completion chunks written each at its due time
//! (role first, then tokens, finish, usage, `[DONE]`), or the whole answer at once.

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::script::{Piece, Plan};

/// An OpenAI-style error body.
pub(super) fn error_body(message: &str, kind: &str, code: u16) -> Value {
    json!({"error": {"message": message, "type": kind, "code": code}})
}

/// Spinning for the last stretch costs a core while it lasts: only this many streams do.
const SPIN_STREAMS: u64 = 4;
const SPIN_FOR: std::time::Duration = std::time::Duration::from_micros(200);

/// Sleeps until `due`. A thread's sleep ends 0.1-0.2 ms late in a VM (measured here with no
/// timer slack), which a benchmark client's accuracy test would count as its own error; so
/// with few streams the last 0.2 ms are spun instead.
fn wait_until(due: std::time::Instant, pacing: &AtomicU64) {
    let now = std::time::Instant::now();
    if due <= now {
        return;
    }
    let spin = pacing.load(Ordering::Relaxed) <= SPIN_STREAMS;
    let sleep = if spin {
        (due - now).saturating_sub(SPIN_FOR)
    } else {
        due - now
    };
    if !sleep.is_zero() {
        std::thread::sleep(sleep);
    }
    while spin && std::time::Instant::now() < due {
        std::hint::spin_loop();
    }
}

/// Writes one streamed answer, each token at its due time; returns when done or the client left.
pub(super) fn produce(
    tx: &mpsc::Sender<Bytes>,
    meta: &Meta,
    plan: &Plan,
    dues: &[std::time::Instant],
    usage: bool,
    (stall_after, error_after): (Option<usize>, Option<usize>),
    pacing: &AtomicU64,
) {
    // Sleeps end up to 50 µs late by default (the thread's timer slack): none on this thread.
    // SAFETY: prctl(PR_SET_TIMERSLACK) takes plain integers and changes only this thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
    let send = |v: Value| {
        tx.blocking_send(Bytes::from(format!("data: {v}\n\n")))
            .is_ok()
    };
    // Real servers send the role first, before any token: a client that takes this
    // chunk as the first token measures nothing (the seeds' curl mistake, in streaming form).
    if !send(meta.chunk(json!({"role": "assistant", "content": ""}), None)) {
        return;
    }
    for (i, piece) in plan.pieces.iter().enumerate() {
        if stall_after == Some(i) {
            while !tx.is_closed() {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            return;
        }
        if error_after == Some(i) {
            send(error_body(
                "simulated error mid-stream",
                "server_error",
                500,
            ));
            return;
        }
        // Ready before it is due: only the write is left for the due instant.
        let chunk = Bytes::from(format!("data: {}\n\n", meta.chunk(delta(piece), None)));
        wait_until(dues[i], pacing);
        if tx.blocking_send(chunk).is_err() {
            return;
        }
    }
    send(meta.chunk(json!({}), Some(plan.finish_reason)));
    if usage {
        let mut last = meta.chunk(json!({}), None);
        last["choices"] = json!([]);
        last["usage"] = usage_of(plan);
        send(last);
    }
    let _ = tx.blocking_send(Bytes::from_static(b"data: [DONE]\n\n"));
}

/// What every chunk of one answer repeats.
pub(super) struct Meta {
    pub id: String,
    pub created: u64,
    pub model: String,
}

impl Meta {
    fn chunk(&self, delta: Value, finish: Option<&str>) -> Value {
        json!({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
        })
    }
}

fn delta(piece: &Piece) -> Value {
    match piece {
        Piece::Reasoning(s) => json!({"reasoning_content": s}),
        Piece::Content(s) => json!({"content": s}),
        Piece::ToolStart { id, name } => json!({"tool_calls": [{
            "index": 0, "id": id, "type": "function", "function": {"name": name, "arguments": ""}
        }]}),
        Piece::ToolArgs(s) => json!({"tool_calls": [{"index": 0, "function": {"arguments": s}}]}),
    }
}

fn usage_of(plan: &Plan) -> Value {
    let completion = plan.pieces.len();
    json!({
        "prompt_tokens": plan.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": plan.prompt_tokens + completion,
        "prompt_tokens_details": {"cached_tokens": plan.cached_tokens}
    })
}

/// A non-streamed answer: the pieces joined into one message.
pub(super) fn whole_response(meta: &Meta, plan: &Plan, usage: bool) -> Value {
    let mut content = String::new();
    let mut reasoning = String::new();
    let mut tool: Option<(String, String, String)> = None;
    for piece in &plan.pieces {
        match piece {
            Piece::Content(s) => content.push_str(s),
            Piece::Reasoning(s) => reasoning.push_str(s),
            Piece::ToolStart { id, name } => tool = Some((id.clone(), name.clone(), String::new())),
            Piece::ToolArgs(s) => {
                if let Some(t) = tool.as_mut() {
                    t.2.push_str(s);
                }
            }
        }
    }
    let mut message = json!({"role": "assistant", "content": content});
    if !reasoning.is_empty() {
        message["reasoning_content"] = json!(reasoning);
    }
    if let Some((id, name, args)) = tool {
        message["content"] = Value::Null;
        message["tool_calls"] =
            json!([{"id": id, "type": "function", "function": {"name": name, "arguments": args}}]);
    }
    let mut body = json!({
        "id": meta.id, "object": "chat.completion", "created": meta.created, "model": meta.model,
        "choices": [{"index": 0, "message": message, "finish_reason": plan.finish_reason}]
    });
    if usage {
        body["usage"] = usage_of(plan);
    }
    body
}
