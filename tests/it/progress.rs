//! A streamed request waiting for its model's start gets the door's SSE comment lines
//! (`: starting chat, 1 s`) until the server answers, then the server's stream; a start
//! that fails ends that stream with an error event, not a cut; a whole answer is the
//! server's own.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::models::{answer, chat, sim};
use crate::models_pressure::{rebooted, replace_in};
use crate::support;

/// A streamed request for `model`: its status, each piece as it came (with when), whole.
fn stream(url: &str, model: &str) -> (u16, Vec<(Duration, String)>) {
    let url = format!("{url}/v1/chat/completions");
    let body = json!({"model": model, "max_tokens": 4, "stream": true,
        "messages": [{"role": "user", "content": "What is the capital of Japan?"}]});
    support::block_on(async move {
        let began = Instant::now();
        let mut r = reqwest::Client::new()
            .post(url)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let mut pieces = Vec::new();
        while let Ok(Some(chunk)) = r.chunk().await {
            pieces.push((
                began.elapsed(),
                String::from_utf8_lossy(&chunk).into_owned(),
            ));
        }
        (status, pieces)
    })
}

#[test]
fn a_stream_waiting_for_a_start_hears_progress_and_a_failed_start_ends_it_with_an_error() {
    let deck = crate::frontdoor_faults::deck("progress");
    sim(&deck, "chat-a", Some("chat"), "");
    sim(&deck, "coder-a", Some("coder"), "");
    rebooted(&deck, "16", &["chat-a", "coder-a"]);
    // chat takes 5 s to load; coder dies as it loads, 2 s in (after the door's stream began).
    replace_in(&deck, "chat-a", "--load-time, 300ms", "--load-time, 5s");
    replace_in(
        &deck,
        "coder-a",
        "--load-time, 300ms",
        "--load-time, 2s, --load-fault, crash",
    );
    let (status, pieces) = stream(&deck.door_url(), "chat");
    assert_eq!(status, 200);
    let text: String = pieces.iter().map(|(_, p)| p.as_str()).collect();
    let first_data = text.find("data: ").expect("the server's stream");
    let progress: Vec<&str> = text[..first_data]
        .lines()
        .filter(|l| l.starts_with(": starting chat, "))
        .collect();
    assert!(progress.len() >= 2, "{text}");
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    // The lines came while it waited, not all at the end.
    let first_line = pieces
        .iter()
        .find(|(_, p)| p.contains(": starting"))
        .unwrap()
        .0;
    let first_token = pieces.iter().find(|(_, p)| p.contains("data: ")).unwrap().0;
    assert!(
        first_token - first_line >= Duration::from_secs(2),
        "{first_line:?} then {first_token:?}"
    );

    // A whole answer while the model is up is the server's own.
    let a = answer(&deck.door_url(), chat(Some("chat")));
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(a.by.starts_with("chat-a "), "{}", a.by);

    // A start that fails: the stream ends with an error event in chat's shape.
    let (status, pieces) = stream(&deck.door_url(), "coder");
    let text: String = pieces.iter().map(|(_, p)| p.as_str()).collect();
    assert_eq!(status, 200, "{text}");
    let event = (text.lines())
        .find_map(|l| l.strip_prefix("data: "))
        .expect("an error event");
    let v: serde_json::Value = serde_json::from_str(event).unwrap();
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("did not start"), "{text}");
    assert!(!text.contains("[DONE]"), "{text}");
}
