//! Fair turns between models that do not fit together. Evicting only idle models starves
//! a model whose neighbour's clients keep that neighbour busy (seen: 596 answers against 24
//! in 40 s); evicting whatever is idle for a moment thrashes (a start per request). So,
//! while another model waits, the model serving keeps its turn for max(4 × its last
//! measured start, 10 s), at most 120 s, and then yields: its requests in flight finish, its
//! next ones wait in its own queue, and the model that has waited longest starts. A model
//! idle for more than a moment (`GAP`) gives way at once, as an idle model always did.

use std::time::{Duration, Instant};

use crate::frontdoor::status::TurnStatus;

/// Idle this long, a model's clients are taken to be done with it for now: it may be
/// evicted at once. Shorter, it is between two requests of a client that asks one after
/// another (on loopback or a LAN, milliseconds). Each eviction of a model just used waits
/// this long, so it is short.
pub(crate) const GAP: Duration = Duration::from_millis(250);
/// The shortest and longest turn, and how many of its starts a turn is worth.
const MIN_TURN: Duration = Duration::from_secs(10);
const MAX_TURN: Duration = Duration::from_secs(120);
const STARTS_PER_TURN: u32 = 4;

/// One model's turn as it stands.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Turn {
    /// When its server began to serve (None: it does not serve).
    pub(in crate::server) serving_since: Option<Instant>,
    /// Since when requests wait for its server (None: none waits).
    pub(in crate::server) waiting_since: Option<Instant>,
    /// How long its last start on demand took, from starting the server to ready.
    pub(in crate::server) last_start: Option<Duration>,
}

impl Turn {
    /// As `frontdoor status` shows it.
    pub(crate) fn status(&self) -> TurnStatus {
        TurnStatus {
            length_s: self.length().as_secs_f64(),
            last_start_s: self.last_start.map(|d| d.as_secs_f64()),
            waiting_s: self.waiting_since.map(|t| t.elapsed().as_secs_f64()),
        }
    }

    /// How long it keeps serving while another model waits.
    pub(crate) fn length(&self) -> Duration {
        let starts = self.last_start.unwrap_or_default() * STARTS_PER_TURN;
        starts.clamp(MIN_TURN, MAX_TURN)
    }

    /// When its turn ends for a model that waits since `waiting`: a turn counts from when
    /// it began serving or from when the other began to wait, whichever is later.
    pub(crate) fn ends(&self, waiting: Instant) -> Option<Instant> {
        let began = self.serving_since?.max(waiting);
        Some(began + self.length())
    }
}

/// Whether a serving model may go for one waiting since `waiting`, at `now`: `Yields` at
/// once (idle past `GAP`, or its turn is over; `busy` when requests are in flight or due),
/// or `Keeps` it until a moment when to look again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Way {
    Yields { busy: bool },
    Keeps { until: Instant },
}

/// `turn` of a model idle for `idle` (None: a request is in flight or waits), asked to
/// make way for one waiting since `waiting`. `moved_on`: everyone who used it within `GAP`
/// now waits for the other model, so nobody is between two requests here: idle is idle.
pub(crate) fn way(
    turn: &Turn,
    idle: Option<Duration>,
    moved_on: bool,
    waiting: Instant,
    now: Instant,
) -> Way {
    if idle.is_some_and(|i| i >= GAP || moved_on) {
        return Way::Yields { busy: false };
    }
    let gap_ends = idle.map(|i| now + (GAP - i));
    match turn.ends(waiting) {
        Some(end) if now >= end => Way::Yields {
            busy: idle.is_none(),
        },
        Some(end) => Way::Keeps {
            until: gap_ends.map_or(end, |g| g.min(end)),
        },
        // Not serving: nothing to yield (another start's business).
        None => Way::Keeps {
            until: gap_ends.unwrap_or(now + MIN_TURN),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_model_keeps_its_turn_then_yields_and_an_idle_one_yields_at_once() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let serving = Turn {
            serving_since: Some(t0),
            waiting_since: None,
            last_start: Some(s(5)),
        };
        // 4 × 5 s.
        assert_eq!(serving.length(), s(20));
        // Unmeasured or quick: 10 s; slow: at most 120 s.
        assert_eq!(Turn::default().length(), s(10));
        let slow = Turn {
            last_start: Some(s(300)),
            ..serving
        };
        assert_eq!(slow.length(), s(120));
        // Another waits from t0 + 30 s: the turn runs from then.
        let waiting = t0 + s(30);
        assert_eq!(
            way(&serving, None, false, waiting, t0 + s(40)),
            Way::Keeps { until: t0 + s(50) }
        );
        assert_eq!(
            way(&serving, None, false, waiting, t0 + s(50)),
            Way::Yields { busy: true }
        );
        // Between two requests within its turn: kept, looked at again when the gap ends.
        let between = Some(Duration::from_millis(200));
        assert_eq!(
            way(&serving, between, false, waiting, t0 + s(40)),
            Way::Keeps {
                until: t0 + s(40) + Duration::from_millis(50)
            }
        );
        // Within the gap, but its one client now waits for the other model: at once.
        assert_eq!(
            way(&serving, between, true, waiting, t0 + s(40)),
            Way::Yields { busy: false }
        );
        // Busy stays busy whoever waits.
        assert_eq!(
            way(&serving, None, true, waiting, t0 + s(40)),
            Way::Keeps { until: t0 + s(50) }
        );
        // Idle past the gap: at once.
        assert_eq!(
            way(&serving, Some(s(2)), false, waiting, t0 + s(31)),
            Way::Yields { busy: false }
        );
    }
}
