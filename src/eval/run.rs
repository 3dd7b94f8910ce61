//! Asking a server an evaluation set's items: one non-streamed chat request per item, at
//! temperature 0 with the set's bounded answer length, one after another (batching can
//! change what an engine computes), each answer checked as it comes.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::check::Answer;
use super::set::{EvalSet, Item};
use super::{ItemResult, Report};

/// How long one item may take: a bounded answer on a CPU server takes seconds.
const ITEM_TIMEOUT: Duration = Duration::from_secs(120);

/// The request body for one item.
pub(crate) fn request(model: &str, set: &EvalSet, item: &Item) -> Value {
    let mut messages = Vec::new();
    if let Some(system) = set.system_of(item) {
        messages.push(json!({"role": "system", "content": system}));
    }
    messages.push(json!({"role": "user", "content": item.prompt}));
    let mut body = json!({
        "model": model,
        "messages": messages,
        "temperature": 0,
        "max_tokens": item.max_tokens.unwrap_or(set.max_tokens),
        "stream": false,
        // A reasoning model would spend the bounded answer thinking out loud.
        "chat_template_kwargs": {"enable_thinking": false},
    });
    let tools: Vec<Value> = set
        .offered(item)
        .filter_map(|t| set.tools.get(t).cloned())
        .collect();
    if !tools.is_empty() {
        body["tools"] = Value::Array(tools);
    }
    body
}

/// What the server answered: its content and its first tool call.
fn answer_of(body: &Value) -> Result<Answer, String> {
    let message = body
        .pointer("/choices/0/message")
        .ok_or_else(|| format!("no choices[0].message in {}", short(&body.to_string())))?;
    let tool_call = message.pointer("/tool_calls/0/function").map(|f| {
        let args = match &f["arguments"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        (f["name"].as_str().unwrap_or_default().to_string(), args)
    });
    Ok(Answer {
        content: message["content"].as_str().unwrap_or_default().to_string(),
        tool_call,
    })
}

fn short(text: &str) -> String {
    match text.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_string(),
    }
}

/// Asks one item; the answer or why there is none (a transport failure, an error status).
async fn ask(client: &reqwest::Client, url: &str, body: &Value) -> Result<Answer, String> {
    let resp = client
        .post(format!("{url}/v1/chat/completions"))
        .timeout(ITEM_TIMEOUT)
        .json(body)
        .send()
        .await
        .map_err(|e| format!("request failed: {}", crate::error::chain(&e)))?;
    let status = resp.status();
    let text = resp
        .text()
        .await
        .map_err(|e| format!("reading the answer: {}", crate::error::chain(&e)))?;
    if !status.is_success() {
        return Err(format!("HTTP {status}: {}", short(text.trim())));
    }
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| format!("the answer is not JSON ({e}): {}", short(&text)))?;
    answer_of(&value)
}

/// Every item of `sets` against the server at `url` serving `model`; `progress(done,
/// total, key)` after each.
pub(crate) async fn evaluate(
    client: &reqwest::Client,
    url: &str,
    model: &str,
    sets: &[EvalSet],
    mut progress: impl FnMut(usize, usize, &str),
) -> Report {
    let began = Instant::now();
    let total: usize = sets.iter().map(|s| s.items.len()).sum();
    let mut items = Vec::with_capacity(total);
    for set in sets {
        for (index, item) in set.items.iter().enumerate() {
            let key = set.key(index);
            let asked = Instant::now();
            let answered = ask(client, url, &request(model, set, item)).await;
            let ms = asked.elapsed().as_secs_f64() * 1e3;
            let mut r = ItemResult {
                key: key.clone(),
                set: set.name.clone(),
                index,
                prompt: short(&item.prompt),
                ms,
                ..Default::default()
            };
            match answered {
                Ok(a) => {
                    r.why = item.check.wrong(&a);
                    r.right = r.why.is_none();
                    r.answer = short(&match &a.tool_call {
                        Some((name, args)) => format!("{name}({args})"),
                        None => a.content.clone(),
                    });
                }
                Err(e) => r.failed = Some(e),
            }
            items.push(r);
            progress(items.len(), total, &key);
        }
    }
    Report::of(
        url.to_string(),
        model.to_string(),
        items,
        began.elapsed().as_secs_f64(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_deterministic_bounded_and_offer_the_sets_tools() {
        let sets = super::super::set::built_in();
        let tools = sets.iter().find(|s| s.name == "tool-calls").unwrap();
        let body = request("m", tools, &tools.items[0]);
        assert_eq!(body["temperature"], 0);
        assert_eq!(body["stream"], false);
        assert_eq!(body["max_tokens"], 96);
        assert_eq!(body["tools"].as_array().unwrap().len(), 5);
        assert_eq!(body["messages"].as_array().unwrap().len(), 1);
        let arith = sets.iter().find(|s| s.name == "arithmetic").unwrap();
        let body = request("m", arith, &arith.items[0]);
        assert_eq!(body["messages"][0]["role"], "system");
        assert!(body.get("tools").is_none());
        let a = answer_of(
            &json!({"choices": [{"message": {"content": null, "tool_calls": [
            {"function": {"name": "set_timer", "arguments": {"minutes": 10}}}]}}]}),
        )
        .unwrap();
        assert_eq!(
            a.tool_call,
            Some(("set_timer".into(), "{\"minutes\":10}".into()))
        );
    }
}
