//! The coding agents' APIs, served as the real servers serve them: Anthropic Messages
//! (`/v1/messages`) and OpenAI Responses (`/v1/responses`). A request is read as the chat
//! request it amounts to (its messages, its token bound), answered by the same plan, and
//! written in its API's shape: typed SSE events (`event:` and `data:` lines), or one JSON
//! object. llama.cpp's server and vLLM 0.32 write these shapes (`tests/it/sim_engine.rs`
//! holds the sim's beside the real `llama-server`'s).

use bytes::Bytes;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::script::{Piece, Plan};
use super::stream::{Frame, Meta};

/// Which API a request speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Api {
    Messages,
    Responses,
}

/// A content value (a string, or a list of text blocks) as one string.
fn flat(content: &Value) -> Value {
    match content {
        Value::Array(blocks) => Value::String(
            (blocks.iter())
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join(""),
        ),
        other => other.clone(),
    }
}

/// The chat request `body` amounts to.
pub(super) fn to_chat(api: Api, body: &Value) -> Value {
    let mut messages = Vec::new();
    let system = match api {
        Api::Messages => &body["system"],
        Api::Responses => &body["instructions"],
    };
    if !system.is_null() {
        messages.push(json!({"role": "system", "content": flat(system)}));
    }
    let turns = match api {
        Api::Messages => body["messages"].clone(),
        Api::Responses => match &body["input"] {
            Value::String(s) => json!([{"role": "user", "content": s}]),
            other => other.clone(),
        },
    };
    for m in turns.as_array().into_iter().flatten() {
        messages.push(
            json!({"role": m["role"].as_str().unwrap_or("user"), "content": flat(&m["content"])}),
        );
    }
    let bound = match api {
        Api::Messages => &body["max_tokens"],
        Api::Responses => &body["max_output_tokens"],
    };
    let mut chat = json!({"model": body["model"], "messages": messages, "stream": body["stream"]});
    for (from, to) in [("temperature", "temperature"), ("tools", "tools")] {
        if !body[from].is_null() {
            chat[to] = body[from].clone();
        }
    }
    if !bound.is_null() {
        chat["max_tokens"] = bound.clone();
    }
    chat
}

fn text_of(plan: &Plan) -> (String, String, bool) {
    let (mut content, mut reasoning, mut tool) = (String::new(), String::new(), false);
    for p in &plan.pieces {
        match p {
            Piece::Content(s) => content.push_str(s),
            Piece::Reasoning(s) => reasoning.push_str(s),
            Piece::ToolStart { .. } | Piece::ToolArgs(_) => tool = true,
            Piece::Silent => {}
        }
    }
    (content, reasoning, tool)
}

fn stop_reason(plan: &Plan, tool: bool) -> &'static str {
    match (plan.finish_reason, tool) {
        ("length", _) => "max_tokens",
        (_, true) => "tool_use",
        _ => "end_turn",
    }
}

fn response(meta: &Meta, plan: &Plan, output: Vec<Value>) -> Value {
    let cut = plan.finish_reason == "length";
    let out = plan.pieces.len();
    json!({
        "id": format!("resp_{}", meta.id), "object": "response", "created_at": meta.created,
        "model": meta.model, "status": if cut { "incomplete" } else { "completed" },
        "incomplete_details": if cut { json!({"reason": "max_output_tokens"}) } else { Value::Null },
        "output": output,
        "usage": {"input_tokens": plan.prompt_tokens, "output_tokens": out,
            "total_tokens": plan.prompt_tokens + out},
    })
}

fn message_item(meta: &Meta, content: &str) -> Value {
    json!({"type": "message", "id": format!("msg_{}", meta.id), "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": content, "annotations": []}]})
}

/// A whole answer in `api`'s shape.
pub(super) fn whole(api: Api, meta: &Meta, plan: &Plan) -> Value {
    let (content, reasoning, tool) = text_of(plan);
    match api {
        Api::Messages => {
            let mut blocks = Vec::new();
            if !reasoning.is_empty() {
                blocks.push(json!({"type": "thinking", "thinking": reasoning, "signature": ""}));
            }
            blocks.push(json!({"type": "text", "text": content}));
            if tool {
                blocks.push(
                    json!({"type": "tool_use", "id": "toolu_sim", "name": "tool", "input": {}}),
                );
            }
            json!({
                "id": format!("msg_{}", meta.id), "type": "message", "role": "assistant",
                "model": meta.model, "content": blocks,
                "stop_reason": stop_reason(plan, tool), "stop_sequence": null,
                "usage": {"input_tokens": plan.prompt_tokens, "output_tokens": plan.pieces.len()},
            })
        }
        Api::Responses => response(meta, plan, vec![message_item(meta, &content)]),
    }
}

/// Writes one streamed answer in `api`'s events, each token at its due time.
pub(super) fn produce(
    api: Api,
    tx: &mpsc::Sender<Frame>,
    meta: &Meta,
    plan: &Plan,
    dues: &[std::time::Instant],
    pacing: &std::sync::atomic::AtomicU64,
) {
    let frame = |v: &Value, tokens: usize| {
        let kind = v["type"].as_str().unwrap_or("message");
        (Bytes::from(format!("event: {kind}\ndata: {v}\n\n")), tokens)
    };
    let send = |v: Value, tokens: usize| tx.blocking_send(frame(&v, tokens)).is_ok();
    let first = match api {
        Api::Messages => json!({"type": "message_start", "message": {
            "id": format!("msg_{}", meta.id), "type": "message", "role": "assistant",
            "model": meta.model, "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": plan.prompt_tokens, "output_tokens": 0}}}),
        Api::Responses => json!({"type": "response.created", "response": {
            "id": format!("resp_{}", meta.id), "object": "response", "status": "in_progress",
            "model": meta.model, "output": []}}),
    };
    if !send(first, 0) {
        return;
    }
    let item = format!("msg_{}", meta.id);
    let opening = match api {
        Api::Messages => vec![json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}})],
        Api::Responses => vec![
            json!({"type": "response.in_progress", "response": {
                "id": format!("resp_{}", meta.id), "object": "response", "status": "in_progress"}}),
            json!({"type": "response.output_item.added", "item": {"content": [], "id": item,
                "role": "assistant", "status": "in_progress", "type": "message"}}),
            json!({"type": "response.content_part.added", "item_id": item,
                "part": {"type": "output_text", "text": ""}}),
        ],
    };
    for e in opening {
        if !send(e, 0) {
            return;
        }
    }
    for (i, piece) in plan.pieces.iter().enumerate() {
        let event = match (api, piece) {
            (Api::Messages, Piece::Content(s)) => json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": s}}),
            (Api::Messages, Piece::Reasoning(s)) => json!({"type": "content_block_delta",
                "index": 0, "delta": {"type": "thinking_delta", "thinking": s}}),
            (Api::Messages, Piece::ToolArgs(s)) => json!({"type": "content_block_delta",
                "index": 0, "delta": {"type": "input_json_delta", "partial_json": s}}),
            (Api::Responses, Piece::Content(s)) => json!({"type": "response.output_text.delta",
                "item_id": format!("msg_{}", meta.id), "output_index": 0, "content_index": 0,
                "delta": s}),
            (Api::Responses, Piece::Reasoning(s)) => json!({"type":
                "response.reasoning_text.delta", "output_index": 0, "delta": s}),
            (Api::Responses, Piece::ToolArgs(s)) => json!({"type":
                "response.function_call_arguments.delta", "output_index": 0, "delta": s}),
            _ => {
                if i + 1 == plan.pieces.len() {
                    super::stream::wait_until(dues[i], pacing);
                }
                continue;
            }
        };
        super::stream::wait_until(dues[i], pacing);
        if !send(event, 1) {
            return;
        }
    }
    let (content, _, tool) = text_of(plan);
    let last = match api {
        Api::Messages => {
            if !send(json!({"type": "content_block_stop", "index": 0}), 0) {
                return;
            }
            let delta = json!({"type": "message_delta",
                "delta": {"stop_reason": stop_reason(plan, tool), "stop_sequence": null},
                "usage": {"output_tokens": plan.pieces.len()}});
            if !send(delta, 0) {
                return;
            }
            json!({"type": "message_stop"})
        }
        Api::Responses => {
            let message = message_item(meta, &content);
            let part = &message["content"][0];
            let closing = [
                json!({"type": "response.output_text.done", "item_id": item, "text": content}),
                json!({"type": "response.content_part.done", "item_id": item, "part": part}),
                json!({"type": "response.output_item.done", "item": message}),
            ];
            for e in closing {
                if !send(e, 0) {
                    return;
                }
            }
            let done = response(meta, plan, vec![message_item(meta, &content)]);
            let kind = match plan.finish_reason {
                "length" => "response.incomplete",
                _ => "response.completed",
            };
            json!({"type": kind, "response": done})
        }
    };
    send(last, 0);
}
