//! A chat request asked again in an agent's API: the same conversation, bound, sampling
//! and tools in Anthropic Messages' or OpenAI Responses' fields, so a suite case runs
//! unchanged through the API its clients use (`api: messages | responses`).

use serde_json::{json, Map, Value};

use super::Api;

/// Fields both agents' APIs take as chat names them.
const SAMPLING: &[&str] = &["temperature", "top_p", "chat_template_kwargs", "stream"];

/// `chat` (a chat completions body) as a request of `api`; chat's own fields for the
/// engine's per-chunk counts (`stream_options`, `timings_per_token`) are left out, as the
/// agents' APIs have none.
pub(crate) fn from_chat(api: Api, chat: &Value) -> Value {
    if api == Api::Chat {
        return chat.clone();
    }
    let mut system: Vec<&str> = Vec::new();
    let mut turns = Vec::new();
    for m in chat["messages"].as_array().into_iter().flatten() {
        match m["role"].as_str() {
            Some("system") => system.extend(m["content"].as_str()),
            role => turns.push(json!({"role": role.unwrap_or("user"), "content": m["content"]})),
        }
    }
    let mut out = Map::new();
    out.insert("model".into(), chat["model"].clone());
    let bound = chat["max_completion_tokens"]
        .as_u64()
        .or(chat["max_tokens"].as_u64());
    let (system_key, turns_key, bound_key) = match api {
        Api::Messages => ("system", "messages", "max_tokens"),
        _ => ("instructions", "input", "max_output_tokens"),
    };
    if !system.is_empty() {
        out.insert(system_key.into(), json!(system.join("\n\n")));
    }
    out.insert(turns_key.into(), Value::Array(turns));
    // Anthropic's Messages requires a bound; 256 is the suites' default.
    out.insert(bound_key.into(), json!(bound.unwrap_or(256)));
    for key in SAMPLING {
        if let Some(v) = chat.get(*key).filter(|v| !v.is_null()) {
            out.insert((*key).into(), v.clone());
        }
    }
    let tools: Vec<Value> = (chat["tools"].as_array().into_iter().flatten())
        .map(|t| tool(api, &t["function"]))
        .collect();
    if !tools.is_empty() {
        out.insert("tools".into(), Value::Array(tools));
    }
    Value::Object(out)
}

/// A chat tool's `function` as `api` declares a tool.
fn tool(api: Api, f: &Value) -> Value {
    let parameters = match &f["parameters"] {
        Value::Null => json!({"type": "object", "properties": {}}),
        p => p.clone(),
    };
    match api {
        Api::Messages => json!({"name": f["name"], "description": f["description"],
            "input_schema": parameters}),
        _ => json!({"type": "function", "name": f["name"], "description": f["description"],
            "parameters": parameters}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chat_request_asked_in_each_agents_api() {
        let chat = json!({
            "model": "m", "max_tokens": 32, "stream": true,
            "stream_options": {"include_usage": true}, "timings_per_token": true,
            "chat_template_kwargs": {"enable_thinking": false},
            "messages": [{"role": "system", "content": "Be brief."},
                         {"role": "user", "content": "2+3?"},
                         {"role": "assistant", "content": "5"},
                         {"role": "user", "content": "and 4+4?"}],
            "tools": [{"type": "function", "function": {"name": "add",
                "description": "adds", "parameters": {"type": "object"}}}],
        });
        let m = from_chat(Api::Messages, &chat);
        assert_eq!(m["system"], "Be brief.");
        assert_eq!(m["max_tokens"], 32);
        assert_eq!(m["messages"].as_array().unwrap().len(), 3);
        assert_eq!(
            m["messages"][1],
            json!({"role": "assistant", "content": "5"})
        );
        assert_eq!(m["tools"][0]["input_schema"], json!({"type": "object"}));
        assert_eq!(m["chat_template_kwargs"]["enable_thinking"], false);
        assert!(m.get("stream_options").is_none() && m.get("timings_per_token").is_none());
        let r = from_chat(Api::Responses, &chat);
        assert_eq!(r["instructions"], "Be brief.");
        assert_eq!(r["max_output_tokens"], 32);
        assert_eq!(r["input"][2]["content"], "and 4+4?");
        assert_eq!(r["tools"][0]["name"], "add");
        assert_eq!(r["tools"][0]["type"], "function");
        assert_eq!(from_chat(Api::Chat, &chat), chat);
    }
}
