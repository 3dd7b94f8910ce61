//! What the front door says about itself (`GET /state` on its control socket): where each
//! model's requests go, whether its server is loaded, its turn and its last failed start,
//! production's live quality, a rollout's progress. The door's process fills these in; the
//! commands read them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::bench::gates::GateResult;
use crate::production::{Production, Upstream};

/// What the front door says about itself (`GET /state`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct DoorStatus {
    pub(crate) pid: u32,
    pub(crate) host: String,
    pub(crate) port: u16,
    /// Where new requests go; None while holding or without production.
    pub(crate) upstream: Option<Upstream>,
    /// Requests wait for production to come back (a swap, a restart); otherwise, without an
    /// upstream, there is no production and requests get 503 at once.
    #[serde(default)]
    pub(crate) holding: bool,
    /// Requests waiting for a backend.
    pub(crate) waiting: usize,
    /// In flight per deployment.
    pub(crate) in_flight: std::collections::BTreeMap<String, usize>,
    pub(crate) production: Production,
    /// State files the front door could not write for want of space, kept in memory until
    /// there is room.
    #[serde(default)]
    pub(crate) pending_writes: usize,
    /// Production's live quality, as last judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) live: Option<LiveStatus>,
    /// Every model behind the front door, each with its own production (`crate::models`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) models: Vec<ModelStatus>,
    /// A candidate meeting production's traffic, while one does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) rollout: Option<crate::rollout::RolloutStatus>,
}

/// What a switch did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SwitchReport {
    /// The upstream new requests went to before.
    pub(crate) replaced: Option<Upstream>,
    /// Its requests still in flight when the drain gave up (0: all finished).
    pub(crate) left_in_flight: usize,
    /// The model the lane serves after the switch (another when the switch renamed it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) model: Option<String>,
}

/// One model as the front door serves it (`GET /state`'s `models`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ModelStatus {
    /// `""`: the unnamed model.
    pub(crate) model: String,
    /// What clients send for it (None: it has no production).
    pub(crate) name: Option<String>,
    pub(crate) upstream: Option<Upstream>,
    pub(crate) holding: bool,
    pub(crate) waiting: usize,
    /// Whether its server is loaded, starting on demand, or unloaded.
    pub(crate) load: Load,
    /// What a user is told of it (`status`, the page, `GET /v1/models`).
    #[serde(default)]
    pub(crate) state: ModelState,
    /// Starts on demand since the front door started.
    pub(crate) loads: u64,
    /// Requests being answered.
    pub(crate) in_flight: usize,
    /// Seconds since its last request began or ended; None while one is in flight.
    pub(crate) idle_s: Option<f64>,
    /// What its requests waited for its server, so far.
    pub(crate) waits: Option<Waits>,
    /// Requests without `model` go to it.
    pub(crate) default: bool,
    pub(crate) production: Production,
    /// Its last start on demand failed: why, and when the next may be tried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) start_failed: Option<StartFailed>,
    /// Its turn while another model waits for room (`turns`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) turn: Option<TurnStatus>,
}

/// One model as a user is told of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum ModelState {
    /// Its server answers its requests.
    Serving,
    /// Started on demand for the requests that wait.
    Starting,
    /// Not running, with requests waiting for its start (room is being made, or a start
    /// failed a moment ago and is tried again).
    Queued,
    /// Not running: not started since the front door started, or idle past its `ttl`.
    Unloaded,
    /// Not running: stopped to make room for another model.
    Evicted,
    /// Put to sleep (evicted, or past its `ttl`, with `serve.sleep: auto`): its server runs
    /// holding little, and its next request wakes it.
    Asleep,
    /// Its requests are held while production changes (a swap, a restart).
    Holding,
    /// Not running: its last start failed, and its requests are answered 503 with why
    /// until the back-off ends.
    Failed,
    /// No production: its requests get 503.
    #[default]
    Offline,
}

impl ModelState {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ModelState::Serving => "serving",
            ModelState::Starting => "starting",
            ModelState::Queued => "queued",
            ModelState::Unloaded => "unloaded",
            ModelState::Evicted => "evicted",
            ModelState::Asleep => "asleep",
            ModelState::Holding => "holding",
            ModelState::Failed => "failed",
            ModelState::Offline => "offline",
        }
    }
}

/// Why a model's server is not running while it has a production.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Unloaded {
    /// Not started since the front door started (no `preload`).
    Boot,
    /// Idle past its `ttl`.
    Ttl,
    /// Stopped to make room for another model.
    Evicted,
}

/// Where a model's server is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Load {
    /// Running (or being brought back by the watch after it died: that is the watch's).
    Loaded,
    /// Being started for the requests that wait.
    Starting,
    Unloaded(Unloaded),
}

/// A start on demand that failed, as `status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StartFailed {
    /// Why, as the start said it (the engine's fatal line among it).
    pub(crate) reason: String,
    /// The error's kind, as `--json` names it.
    pub(crate) kind: crate::error::ErrorKind,
    /// Failed starts in a row.
    pub(crate) attempts: u32,
    /// Seconds until the next start may be tried.
    #[serde(default)]
    pub(crate) retry_in_s: f64,
}

/// A model's turn as `frontdoor status` shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct TurnStatus {
    /// How long it keeps serving while another model waits: max(4 × its last start, 10 s),
    /// at most 120 s.
    pub(crate) length_s: f64,
    /// Its last start on demand, from starting the server to ready (None: none measured).
    pub(crate) last_start_s: Option<f64>,
    /// Seconds its requests have waited for its server (None: none waits).
    pub(crate) waiting_s: Option<f64>,
}

/// The last golden round, as `status` shows it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct GoldenLast {
    pub(crate) at: String,
    pub(crate) cases: usize,
    pub(crate) failed: Vec<String>,
}

/// What `status` shows of production's live quality.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct LiveStatus {
    pub(crate) recipe: String,
    pub(crate) deployment: String,
    /// Answers in the window now.
    pub(crate) answers: usize,
    /// Check → % of the window's answers (leaking, for thinking_leak; passing otherwise).
    pub(crate) rates: BTreeMap<String, f64>,
    pub(crate) gates: Vec<GateResult>,
    /// How long a gate has been failing, s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) failing_for_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) golden: Option<GoldenLast>,
}

/// What one model's requests waited for its server.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Waits {
    pub(crate) requests: u64,
    pub(crate) mean_ms: f64,
    pub(crate) max_ms: f64,
}
