//! The APIs a client may speak: OpenAI chat completions, Anthropic Messages (Claude Code)
//! and OpenAI Responses (Codex). The front door reads every answer in its API's shape
//! (`read`: the live checks, shadow and canary) and writes error events in it; the
//! benchmark asks in it (`request`) and reads its stream the same way. A leaf of its own,
//! so the door and the benchmark share one reading.

mod read;
mod request;

use hyper::StatusCode;
use serde::{Deserialize, Serialize};

pub(crate) use read::{event, whole, Read};
pub(crate) use request::from_chat;

/// Which API a request speaks, by its path: the shape of its request, its answer and its
/// error event.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Api {
    #[default]
    Chat,
    Messages,
    Responses,
}

impl Api {
    pub(crate) fn of(path: &str) -> Api {
        match path {
            p if p.ends_with("/messages") => Api::Messages,
            p if p.ends_with("/responses") => Api::Responses,
            _ => Api::Chat,
        }
    }

    /// Where a request of this API goes.
    pub(crate) fn path(self) -> &'static str {
        match self {
            Api::Chat => "/v1/chat/completions",
            Api::Messages => "/v1/messages",
            Api::Responses => "/v1/responses",
        }
    }

    pub(crate) fn error_event(self, status: StatusCode, message: &str) -> String {
        let (event, data) = match self {
            Api::Chat => (
                None,
                serde_json::json!({"error": {"message": message, "type": "sparkctl_frontdoor",
                    "code": status.as_u16()}}),
            ),
            Api::Messages => (
                Some("error"),
                serde_json::json!({"type": "error", "error": {"type": "api_error",
                    "message": message}}),
            ),
            Api::Responses => (
                Some("error"),
                serde_json::json!({"type": "error", "code": status.as_u16().to_string(),
                    "message": message, "param": null}),
            ),
        };
        match event {
            Some(e) => format!("event: {e}\ndata: {data}\n\n"),
            None => format!("data: {data}\n\n"),
        }
    }
}
