//! Which API a request speaks, by its path: OpenAI chat completions, Anthropic Messages
//! (Claude Code), OpenAI Responses (Codex). Its answer is read (`agents`, `reading`) and an
//! error event written (`progress`) in that API's shape.

use hyper::StatusCode;

/// Which API a request speaks, by its path: the shape of its answer and of an error event.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
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
