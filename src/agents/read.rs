//! The coding agents' APIs read like chat: Anthropic Messages (`/v1/messages`: Claude
//! Code) and OpenAI Responses (`/v1/responses`: Codex), streamed (their typed events) and
//! whole, turned into what the live judge reads of a chat answer — text, reasoning, tool
//! calls, how it ended, and the token counts. Their finish reasons map onto chat's:
//! `max_tokens` / `max_output_tokens` to `length`, `tool_use` to `tool_calls`, else `stop`.
//! The benchmark reads the same events as the chat chunks they amount to (`as_chat_chunk`).

use serde_json::{json, Value};

use super::Api;

/// What one event (or a whole answer) carried.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Read {
    pub(crate) content: Option<String>,
    /// Reasoning text (a token, not output).
    pub(crate) reasoning: Option<String>,
    /// A tool call's part came (its start, or its arguments).
    pub(crate) tool_call: bool,
    /// Which tool call of the answer (its block or output index).
    pub(crate) tool_index: u64,
    pub(crate) tool_name: Option<String>,
    pub(crate) tool_args: Option<String>,
    pub(crate) finish: Option<&'static str>,
    pub(crate) prompt: Option<u64>,
    /// The output tokens the server counted so far (its running or final count).
    pub(crate) out: Option<u64>,
    /// An error event, with its text.
    pub(crate) error: Option<String>,
    /// The stream's last event (chat's `[DONE]`).
    pub(crate) done: bool,
}

impl Read {
    /// It carried a token (text, reasoning or a tool call's part).
    pub(crate) fn bears_token(&self) -> bool {
        self.content.is_some() || self.reasoning.is_some() || self.tool_call
    }

    /// The chat chunk this event amounts to: its delta (text, reasoning, a tool call's
    /// part), its finish reason and its token counts, in chat's names.
    pub(crate) fn as_chat_chunk(&self) -> Value {
        let mut delta = json!({});
        if let Some(c) = &self.content {
            delta["content"] = json!(c);
        }
        if let Some(r) = &self.reasoning {
            delta["reasoning_content"] = json!(r);
        }
        if self.tool_call {
            let mut function = json!({});
            if let Some(n) = &self.tool_name {
                function["name"] = json!(n);
            }
            function["arguments"] = json!(self.tool_args.as_deref().unwrap_or_default());
            delta["tool_calls"] = json!([{"index": self.tool_index, "function": function}]);
        }
        let mut chunk = json!({"choices": [{"index": 0, "delta": delta,
            "finish_reason": self.finish}]});
        if self.prompt.is_some() || self.out.is_some() {
            let mut usage = json!({});
            if let Some(p) = self.prompt {
                usage["prompt_tokens"] = json!(p);
            }
            if let Some(o) = self.out {
                usage["completion_tokens"] = json!(o);
            }
            chunk["usage"] = usage;
        }
        chunk
    }
}

fn count(v: &Value, key: &str) -> Option<u64> {
    v.get(key).and_then(Value::as_u64)
}

fn text(v: &Value) -> Option<String> {
    v.as_str().map(str::to_string)
}

/// One event's `data` of `api`'s stream.
pub(crate) fn event(api: Api, data: &str) -> Read {
    let Ok(v) = serde_json::from_str::<Value>(data) else {
        return Read::default();
    };
    let kind = v["type"].as_str().unwrap_or_default();
    let mut r = Read::default();
    match (api, kind) {
        (_, "error") | (Api::Responses, "response.failed") => {
            r.error = Some(data.chars().take(1024).collect());
            r.done = true;
        }
        (Api::Messages, "message_start") => {
            r.prompt = count(&v["message"]["usage"], "input_tokens");
        }
        (Api::Messages, "content_block_start") => {
            let block = &v["content_block"];
            if block["type"] == "tool_use" {
                r.tool_call = true;
                r.tool_name = text(&block["name"]);
            }
            r.tool_index = v["index"].as_u64().unwrap_or(0);
        }
        (Api::Messages, "content_block_delta") => {
            r.tool_index = v["index"].as_u64().unwrap_or(0);
            let delta = &v["delta"];
            match delta["type"].as_str() {
                Some("text_delta") => r.content = text(&delta["text"]),
                Some("thinking_delta") => r.reasoning = text(&delta["thinking"]),
                Some("input_json_delta") => {
                    r.tool_call = true;
                    r.tool_args = text(&delta["partial_json"]);
                }
                _ => {}
            }
        }
        (Api::Messages, "message_delta") => {
            r.finish = v["delta"]["stop_reason"].as_str().map(messages_finish);
            r.out = count(&v["usage"], "output_tokens");
        }
        (Api::Messages, "message_stop") => r.done = true,
        (Api::Responses, "response.output_text.delta") => r.content = text(&v["delta"]),
        (
            Api::Responses,
            "response.reasoning_text.delta" | "response.reasoning_summary_text.delta",
        ) => r.reasoning = text(&v["delta"]),
        (Api::Responses, "response.output_item.added") => {
            let item = &v["item"];
            if item["type"] == "function_call" {
                r.tool_call = true;
                r.tool_name = text(&item["name"]);
                r.tool_index = v["output_index"].as_u64().unwrap_or(0);
            }
        }
        (Api::Responses, "response.function_call_arguments.delta") => {
            r.tool_call = true;
            r.tool_args = text(&v["delta"]);
            r.tool_index = v["output_index"].as_u64().unwrap_or(0);
        }
        (Api::Responses, "response.completed" | "response.incomplete") => {
            let resp = &v["response"];
            r.finish = Some(responses_finish(resp));
            r.prompt = count(&resp["usage"], "input_tokens");
            r.out = count(&resp["usage"], "output_tokens");
            r.done = true;
        }
        _ => {}
    }
    r
}

fn messages_finish(reason: &str) -> &'static str {
    match reason {
        "max_tokens" => "length",
        "tool_use" => "tool_calls",
        _ => "stop",
    }
}

fn responses_finish(resp: &Value) -> &'static str {
    let cut = resp["status"] == "incomplete"
        && resp["incomplete_details"]["reason"] == "max_output_tokens";
    match cut {
        true => "length",
        false => "stop",
    }
}

/// A whole answer of `api`, or why it is none.
pub(crate) fn whole(api: Api, body: &[u8]) -> Result<Read, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    if v.get("error").is_some_and(|e| !e.is_null()) {
        return Err(format!("an error answer: {}", v["error"]));
    }
    let mut r = Read::default();
    let mut content = String::new();
    match api {
        Api::Messages => {
            for block in v["content"].as_array().ok_or("no `content` list")? {
                match block["type"].as_str() {
                    Some("text") => content.push_str(block["text"].as_str().unwrap_or_default()),
                    Some("tool_use") => r.tool_call = true,
                    _ => {}
                }
            }
            r.finish = v["stop_reason"].as_str().map(messages_finish);
        }
        Api::Responses => {
            for item in v["output"].as_array().ok_or("no `output` list")? {
                match item["type"].as_str() {
                    Some("message") => {
                        for c in item["content"].as_array().into_iter().flatten() {
                            if c["type"] == "output_text" {
                                content.push_str(c["text"].as_str().unwrap_or_default());
                            }
                        }
                    }
                    Some("function_call") => r.tool_call = true,
                    _ => {}
                }
            }
            r.finish = Some(responses_finish(&v));
        }
        Api::Chat => return Err("a chat completion is read by `reading`".into()),
    }
    r.content = Some(content);
    r.prompt = count(&v["usage"], "input_tokens");
    r.out = count(&v["usage"], "output_tokens");
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_apis_events_read_as_chats() {
        let e = event(
            Api::Messages,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Pa"}}"#,
        );
        assert_eq!(e.content.as_deref(), Some("Pa"));
        let e = event(
            Api::Messages,
            r#"{"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":7}}"#,
        );
        assert_eq!((e.finish, e.out), (Some("length"), Some(7)));
        let e = event(
            Api::Responses,
            r#"{"type":"response.output_text.delta","delta":"ris"}"#,
        );
        assert_eq!(e.content.as_deref(), Some("ris"));
        let e = event(
            Api::Responses,
            r#"{"type":"response.completed","response":{"status":"completed","usage":{"input_tokens":9,"output_tokens":3}}}"#,
        );
        assert_eq!(
            (e.finish, e.prompt, e.out),
            (Some("stop"), Some(9), Some(3))
        );
        assert!(event(Api::Messages, r#"{"type":"error","error":{}}"#)
            .error
            .is_some());
        let w = whole(
            Api::Messages,
            br#"{"content":[{"type":"text","text":""}],"stop_reason":"end_turn","usage":{"input_tokens":5,"output_tokens":1}}"#,
        )
        .unwrap();
        assert_eq!((w.content.as_deref(), w.finish), (Some(""), Some("stop")));
        let w = whole(
            Api::Responses,
            br#"{"output":[{"type":"message","content":[{"type":"output_text","text":"Paris"}]}],"status":"completed"}"#,
        )
        .unwrap();
        assert_eq!(w.content.as_deref(), Some("Paris"));
    }

    #[test]
    fn a_tool_call_and_the_end_read_as_chat_chunks() {
        let start = event(
            Api::Messages,
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"t","name":"search_memory","input":{}}}"#,
        );
        let args = event(
            Api::Messages,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"q\":1}"}}"#,
        );
        let chunk = start.as_chat_chunk();
        let call = &chunk["choices"][0]["delta"]["tool_calls"][0];
        assert_eq!(
            (call["index"].as_u64(), call["function"]["name"].as_str()),
            (Some(1), Some("search_memory"))
        );
        assert_eq!(
            args.as_chat_chunk()["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"],
            "{\"q\":1}"
        );
        let added = event(
            Api::Responses,
            r#"{"type":"response.output_item.added","output_index":0,"item":{"type":"function_call","name":"web_search","arguments":""}}"#,
        );
        assert_eq!(added.tool_name.as_deref(), Some("web_search"));
        assert!(event(Api::Messages, r#"{"type":"message_stop"}"#).done);
        let end = event(
            Api::Responses,
            r#"{"type":"response.completed","response":{"status":"completed","usage":{"input_tokens":9,"output_tokens":3}}}"#,
        );
        assert!(end.done);
        let chunk = end.as_chat_chunk();
        assert_eq!(chunk["usage"]["completion_tokens"], 3);
        assert_eq!(chunk["choices"][0]["finish_reason"], "stop");
    }
}
