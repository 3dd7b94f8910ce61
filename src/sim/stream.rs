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
pub(super) fn wait_until(due: std::time::Instant, pacing: &AtomicU64) {
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

/// One frame of a stream, and the tokens it carries (for the metrics and the timing log).
pub(super) type Frame = (Bytes, usize);

/// Writes one streamed answer, each token at its due time; returns when done or the client left.
pub(super) fn produce(
    tx: &mpsc::Sender<Frame>,
    meta: &Meta,
    plan: &Plan,
    dues: &[std::time::Instant],
    (stall_after, error_after): (Option<usize>, Option<usize>),
    pacing: &AtomicU64,
) {
    // Sleeps end up to 50 µs late by default (the thread's timer slack): none on this thread.
    // SAFETY: prctl(PR_SET_TIMERSLACK) takes plain integers and changes only this thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
    let frame = |v: &Value, tokens: usize| (Bytes::from(format!("data: {v}\n\n")), tokens);
    let send = |v: Value| tx.blocking_send(frame(&v, 0)).is_ok();
    let mut count = Count::default();
    // Real servers send the role first, before any token: a client that takes this
    // chunk as the first token measures nothing (the seeds' curl mistake, in streaming form).
    let role = meta.chunk(json!({"role": "assistant", "content": ""}), None);
    if !send(meta.with_usage(role, plan, &count)) {
        return;
    }
    // vLLM puts `length` on the last token's chunk; `stop` gets a chunk of its own.
    let merged_finish = (meta.wire.vllm && plan.finish_reason == "length")
        .then(|| plan.pieces.iter().rposition(|p| *p != Piece::Silent))
        .flatten();
    let mut carried = 0;
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
        count.add(piece);
        carried += 1;
        let Some(delta) = delta(piece, meta.wire.vllm) else {
            // Nothing to send; the last one (end of sequence) still takes its time.
            if i + 1 == plan.pieces.len() {
                wait_until(dues[i], pacing);
            }
            continue;
        };
        let finish = (merged_finish == Some(i)).then_some(plan.finish_reason);
        // Ready before it is due: only the write is left for the due instant.
        let chunk = frame(
            &meta.with_usage(meta.chunk(delta, finish), plan, &count),
            carried,
        );
        wait_until(dues[i], pacing);
        if tx.blocking_send(chunk).is_err() {
            return;
        }
        carried = 0;
    }
    if merged_finish.is_none() {
        let mut last = meta.chunk(json!({}), Some(plan.finish_reason));
        if meta.wire.vllm {
            last["choices"][0]["stop_reason"] = Value::Null;
        }
        // The end-of-sequence token, when silent, is in this chunk's count.
        if tx
            .blocking_send(frame(&meta.with_usage(last, plan, &count), carried))
            .is_err()
        {
            return;
        }
    }
    if meta.wire.usage {
        let mut last = meta.chunk(json!({}), None);
        last["choices"] = json!([]);
        last["usage"] = meta.usage(plan, &count);
        send(last);
    }
    let _ = tx.blocking_send((Bytes::from_static(b"data: [DONE]\n\n"), 0));
}

/// Tokens generated so far in a stream, reasoning among them.
#[derive(Default)]
struct Count {
    tokens: usize,
    reasoning: usize,
}

impl Count {
    fn add(&mut self, piece: &Piece) {
        self.tokens += 1;
        self.reasoning += usize::from(matches!(piece, Piece::Reasoning(_)));
    }

    fn of(plan: &Plan) -> Count {
        let mut c = Count::default();
        plan.pieces.iter().for_each(|p| c.add(p));
        c
    }
}

/// How the answer goes on the wire.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Wire {
    /// vLLM 0.32's field names, chunks and usage (`--mimic vllm`).
    pub(in crate::sim) vllm: bool,
    /// A usage block at the end (asked with `stream_options.include_usage`, not refused by
    /// `--no-usage`).
    pub(in crate::sim) usage: bool,
    /// Usage in every chunk (vLLM's `continuous_usage_stats`, asked and honoured).
    pub(in crate::sim) continuous: bool,
}

/// What every chunk of one answer repeats.
pub(super) struct Meta {
    pub(in crate::sim) id: String,
    pub(in crate::sim) created: u64,
    pub(in crate::sim) model: String,
    pub(in crate::sim) wire: Wire,
}

impl Meta {
    fn chunk(&self, delta: Value, finish: Option<&str>) -> Value {
        json!({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
        })
    }

    fn with_usage(&self, mut chunk: Value, plan: &Plan, count: &Count) -> Value {
        if self.wire.continuous {
            chunk["usage"] = self.usage(plan, count);
        }
        chunk
    }

    /// The usage block: vLLM's reports reasoning tokens and (without
    /// `--enable-prompt-tokens-details`) no cached tokens; the generic one the cached tokens.
    fn usage(&self, plan: &Plan, count: &Count) -> Value {
        let total = plan.prompt_tokens + count.tokens;
        if self.wire.vllm {
            json!({
                "prompt_tokens": plan.prompt_tokens, "total_tokens": total,
                "completion_tokens": count.tokens,
                "completion_tokens_details": {"reasoning_tokens": count.reasoning}
            })
        } else {
            json!({
                "prompt_tokens": plan.prompt_tokens,
                "completion_tokens": count.tokens,
                "total_tokens": total,
                "prompt_tokens_details": {"cached_tokens": plan.cached_tokens}
            })
        }
    }
}

fn delta(piece: &Piece, vllm: bool) -> Option<Value> {
    let reasoning_key = if vllm {
        "reasoning"
    } else {
        "reasoning_content"
    };
    Some(match piece {
        Piece::Reasoning(s) => json!({ reasoning_key: s }),
        Piece::Content(s) => json!({"content": s}),
        Piece::ToolStart { id, name } => json!({"tool_calls": [{
            "index": 0, "id": id, "type": "function", "function": {"name": name, "arguments": ""}
        }]}),
        Piece::ToolArgs(s) => json!({"tool_calls": [{"index": 0, "function": {"arguments": s}}]}),
        Piece::Silent => return None,
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
            Piece::Silent => {}
        }
    }
    let mut message = json!({"role": "assistant", "content": content});
    if !reasoning.is_empty() {
        let key = if meta.wire.vllm {
            "reasoning"
        } else {
            "reasoning_content"
        };
        message[key] = json!(reasoning);
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
        body["usage"] = meta.usage(plan, &Count::of(plan));
    }
    body
}
