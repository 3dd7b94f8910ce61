//! The control socket's protocol, typed on both sides: each request a command may make of
//! the front door (`Request`: its route, its body) and what comes back, or why it was
//! refused (`Refusal`: an error kind, as `--json` names kinds, and its message). Every
//! request and answer carries the protocol's version in `x-sparkctl-control`: the front
//! door outlives a binary upgrade, and a command that meets an older door than itself says
//! to restart it rather than misread it.

use hyper::{Method, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::capture::CaptureConfig;
use crate::error::ErrorKind;
use crate::host::ProcessId;
use crate::production::Production;
use crate::rollout::Asking;

/// This sparkctl's control protocol.
pub(crate) const VERSION: u32 = 3;
/// The header every request and answer carries it in.
pub(crate) const VERSION_HEADER: &str = "x-sparkctl-control";

/// What a command asks of the front door, about one model's production (`?model=NAME`).
#[derive(Debug, Clone)]
pub(crate) enum Request {
    /// `GET /state`: a `DoorStatus`.
    State,
    /// `POST /hold`: new requests wait until the next switch; a `Held` once those in
    /// flight finished (or the drain passed).
    Hold(Hold),
    /// `POST /switch`: a `SwitchReport`.
    Switch(Switch),
    /// `POST /update`: production.json rewritten, the route unchanged; `Updated`.
    Update(Production),
    /// `GET /rollout`: the rollout running, if any (`Option<RolloutStatus>`).
    Rollout,
    /// `POST /rollout`: its `RolloutStatus`.
    StartRollout(Asking),
    /// `DELETE /rollout`: its last `Option<RolloutStatus>`.
    EndRollout,
    /// `GET /capture`: a `CaptureStatus`.
    Capture,
    /// `POST /capture`: the new config written, then in force; a `CaptureStatus`.
    SetCapture(CaptureConfig),
    /// `POST /evict`: the models whose production is one of these recipes stopped, as a
    /// start on demand evicts them, when they are idle; an `Evicted`.
    Evict(Evict),
}

/// `POST /evict`'s body.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Evict {
    /// The production recipes to evict.
    pub(crate) recipes: Vec<String>,
    /// The recipe they make room for (said in the door's log).
    pub(crate) for_recipe: String,
}

/// `POST /evict`'s answer: what was evicted, and what was kept with why.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Evicted {
    pub(crate) evicted: Vec<String>,
    pub(crate) kept: Vec<(String, String)>,
}

/// `POST /hold`'s body.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Hold {
    /// How long the requests in flight may take to finish.
    pub(crate) drain_ms: u64,
    /// The command holding: while it lives, the watch leaves production to it.
    #[serde(default)]
    pub(crate) owner: Option<ProcessId>,
}

/// `POST /switch`'s body.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Switch {
    pub(crate) production: Production,
    pub(crate) drain_ms: u64,
}

/// `POST /hold`'s answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Held {
    pub(crate) holding: bool,
    pub(crate) left_in_flight: usize,
}

/// `POST /update`'s answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Updated {
    pub(crate) updated: bool,
}

/// Why the door did not do what it was asked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Refusal {
    pub(in crate::frontdoor) kind: ErrorKind,
    pub(in crate::frontdoor) message: String,
}

/// An answer that is a refusal: `{"error": {"kind": …, "message": …}}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Refused {
    pub(crate) error: Refusal,
}

impl Refusal {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Refusal {
        Refusal {
            kind,
            message: message.into(),
        }
    }

    /// A request this protocol cannot read: bad input, nothing done.
    fn unreadable(what: &str, e: impl std::fmt::Display) -> Refusal {
        Refusal::new(ErrorKind::Usage, format!("{what}: {e}"))
    }

    /// The HTTP status a refusal of this kind is answered with: one mapping for every route.
    pub(crate) fn status(&self) -> StatusCode {
        match self.kind {
            ErrorKind::Usage | ErrorKind::Invalid | ErrorKind::UnknownRecipe => {
                StatusCode::BAD_REQUEST
            }
            ErrorKind::NotRunning => StatusCode::NOT_FOUND,
            ErrorKind::LockHeld | ErrorKind::AlreadyRunning => StatusCode::CONFLICT,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl From<&crate::error::Error> for Refusal {
    fn from(e: &crate::error::Error) -> Refusal {
        Refusal::new(e.kind(), e.to_string())
    }
}

fn body<T: for<'de> Deserialize<'de>>(route: &str, bytes: &[u8]) -> Result<T, Refusal> {
    serde_json::from_slice(bytes).map_err(|e| Refusal::unreadable(route, e))
}

impl Request {
    /// Its method and path.
    pub(crate) fn route(&self) -> (Method, &'static str) {
        match self {
            Request::State => (Method::GET, "/state"),
            Request::Hold(_) => (Method::POST, "/hold"),
            Request::Switch(_) => (Method::POST, "/switch"),
            Request::Update(_) => (Method::POST, "/update"),
            Request::Rollout => (Method::GET, "/rollout"),
            Request::StartRollout(_) => (Method::POST, "/rollout"),
            Request::EndRollout => (Method::DELETE, "/rollout"),
            Request::Capture => (Method::GET, "/capture"),
            Request::SetCapture(_) => (Method::POST, "/capture"),
            Request::Evict(_) => (Method::POST, "/evict"),
        }
    }

    /// Its body, when it has one.
    pub(crate) fn body(&self) -> Option<Value> {
        let v = match self {
            Request::Hold(h) => serde_json::to_value(h),
            Request::Switch(s) => serde_json::to_value(s),
            Request::Update(p) => serde_json::to_value(p),
            Request::StartRollout(a) => serde_json::to_value(a),
            Request::SetCapture(c) => serde_json::to_value(c),
            Request::Evict(e) => serde_json::to_value(e),
            Request::State | Request::Rollout | Request::EndRollout | Request::Capture => {
                return None
            }
        };
        Some(v.expect("control requests serialize"))
    }

    /// The request a socket read, or why it is none: an unknown route, a body that does
    /// not parse (naming the field serde found wrong or missing).
    pub(crate) fn parse(method: &Method, path: &str, bytes: &[u8]) -> Result<Request, Refusal> {
        Ok(match (method.as_str(), path) {
            ("GET", "/state") => Request::State,
            ("POST", "/hold") => Request::Hold(body("/hold", bytes)?),
            ("POST", "/switch") => Request::Switch(body("/switch", bytes)?),
            ("POST", "/update") => Request::Update(body("/update", bytes)?),
            ("GET", "/rollout") => Request::Rollout,
            ("POST", "/rollout") => Request::StartRollout(body("/rollout", bytes)?),
            ("DELETE", "/rollout") => Request::EndRollout,
            ("GET", "/capture") => Request::Capture,
            ("POST", "/capture") => Request::SetCapture(body("/capture", bytes)?),
            ("POST", "/evict") => Request::Evict(body("/evict", bytes)?),
            _ => {
                return Err(Refusal::new(
                    ErrorKind::Usage,
                    format!("no control route {method} {path}"),
                ))
            }
        })
    }

    /// Whether it changes which production is the default (the lanes read their recipes
    /// again after it).
    pub(crate) fn switches(&self) -> bool {
        matches!(self, Request::Switch(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_request_reads_back_as_itself_and_a_bad_one_names_its_field() {
        let hold = Request::Hold(Hold {
            drain_ms: 1500,
            owner: None,
        });
        for r in [hold, Request::State, Request::EndRollout] {
            let (method, path) = r.route();
            let bytes = r.body().map(|b| b.to_string()).unwrap_or_default();
            let back = Request::parse(&method, path, bytes.as_bytes()).unwrap();
            assert_eq!(back.route(), r.route());
            assert_eq!(back.body(), r.body());
        }
        // A missing `drain_ms` is no longer 0: the field is named.
        let e = Request::parse(&Method::POST, "/hold", br#"{"owner": null}"#).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Usage);
        assert!(e.message.contains("drain_ms"), "{}", e.message);
        let e =
            Request::parse(&Method::POST, "/hold", br#"{"drain_ms": 1, "drian": 2}"#).unwrap_err();
        assert!(e.message.contains("drian"), "{}", e.message);
        let e = Request::parse(&Method::PUT, "/state", b"").unwrap_err();
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
    }
}
