//! The steps of one start as a wait sees them, for `starts` (what each start took).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Health;

/// When each step of a start was first seen, from the start asked (the launch included):
/// the process or container running, its port taking connections, its HTTP answering
/// (a loading 503 counts), its health saying the model is loaded, its first token. Steps
/// in order; one the server passes faster than a probe sees (vLLM opens its port only once
/// loaded) takes the time of the next.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Phases {
    pub launched_ms: f64,
    pub port_open_ms: f64,
    pub http_ms: f64,
    pub loaded_ms: f64,
    pub first_token_ms: f64,
}

impl Phases {
    /// The whole start, asked to first token.
    pub fn total_ms(&self) -> f64 {
        self.first_token_ms
    }

    /// The steps, named, in order.
    pub fn steps(&self) -> [(&'static str, f64); 5] {
        [
            ("process", self.launched_ms),
            ("port open", self.port_open_ms),
            ("HTTP", self.http_ms),
            ("model loaded", self.loaded_ms),
            ("first token", self.first_token_ms),
        ]
    }

    /// The same start with `launch` (the process or container start) before what the wait
    /// saw.
    pub(crate) fn after_launch(self, launch: Duration) -> Phases {
        let l = launch.as_secs_f64() * 1e3;
        Phases {
            launched_ms: l,
            port_open_ms: l + self.port_open_ms,
            http_ms: l + self.http_ms,
            loaded_ms: l + self.loaded_ms,
            first_token_ms: l + self.first_token_ms,
        }
    }
}

impl std::fmt::Display for Phases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let steps: Vec<String> = (self.steps().iter())
            .map(|(name, ms)| format!("{name} {:.2} s", ms / 1e3))
            .collect();
        f.write_str(&steps.join(" · "))
    }
}

/// What a wait has seen so far, from its start.
#[derive(Default)]
pub(super) struct Seen {
    port_open: Option<Duration>,
    http: Option<Duration>,
    loaded: Option<Duration>,
}

impl Seen {
    pub(super) fn saw(&mut self, h: &Health, at: Duration) {
        let (port, http, loaded) = match h {
            Health::Waiting | Health::Refused => (false, false, false),
            Health::Silent { .. } => (true, false, false),
            Health::Loading { .. } => (true, true, false),
            Health::GenerationPending { .. }
            | Health::GenerationFailing { .. }
            | Health::GenerationSilent { .. }
            | Health::Ready
            | Health::Asleep => (true, true, true),
        };
        for (now, first) in [
            (port, &mut self.port_open),
            (http, &mut self.http),
            (loaded, &mut self.loaded),
        ] {
            if now && first.is_none() {
                *first = Some(at);
            }
        }
    }

    /// The steps once the first token came at `at`: a step not seen took no longer than
    /// the next one seen.
    pub(super) fn phases(&self, at: Duration) -> Phases {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let loaded = self.loaded.unwrap_or(at);
        let http = self.http.unwrap_or(loaded);
        let port = self.port_open.unwrap_or(http);
        Phases {
            launched_ms: 0.0,
            port_open_ms: ms(port),
            http_ms: ms(http),
            loaded_ms: ms(loaded),
            first_token_ms: ms(at),
        }
    }
}
