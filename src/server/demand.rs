//! One model's server on demand: whether it is loaded, starting, or unloaded (never started
//! since the front door started, unloaded after its `ttl`, or evicted for room), and the
//! wake-up a request that finds it unloaded gives its watch, which starts it
//! (`deploy::watch`'s demand). Requests wait in the model's own bounded queue meanwhile; the
//! other models keep serving.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub(crate) use crate::frontdoor::status::{Load, Unloaded};

use crate::recipe::serve::Serve;

pub(crate) struct Demand {
    /// Everything about it that changes, behind one lock.
    state: Mutex<State>,
    /// A request found the model unloaded: its watch starts it now rather than at its next
    /// look.
    pub(crate) wake: tokio::sync::Notify,
}

struct State {
    load: Load,
    /// Its production recipe's `serve` section, as last read.
    settings: Serve,
    /// Starts on demand since the front door started.
    loads: u64,
    /// The last start on demand failed: its reason, and when the next may be tried.
    failure: Option<Arc<StartFailed>>,
    /// How long its last start on demand took, from starting the server to ready.
    last_start: Option<Duration>,
    /// When its server last began to serve: its turn, while another model waits.
    serving_since: Option<Instant>,
    /// Since when requests wait for its server (None: none waits, or it serves).
    waiting_since: Option<Instant>,
    /// When its watch looks again for room: the moment another model's turn ends.
    look_again: Option<Instant>,
}

/// A start on demand that failed: what its waiting clients are told at once, until the
/// back-off ends.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StartFailed {
    /// Why, as the start said it (the engine's fatal line among it).
    pub(crate) reason: String,
    /// The error's kind, as `--json` names it.
    pub(crate) kind: crate::error::ErrorKind,
    /// Failed starts in a row.
    pub(crate) attempts: u32,
    /// The recipe's hash when it failed: a changed recipe is tried at once.
    pub(crate) recipe_hash: String,
    until: Instant,
}

impl StartFailed {
    /// How long until the next start may be tried.
    pub(crate) fn retry_in(&self) -> Duration {
        self.until.saturating_duration_since(Instant::now())
    }

    /// As `status` and the page show it, now.
    pub(crate) fn shown(&self) -> crate::frontdoor::status::StartFailed {
        crate::frontdoor::status::StartFailed {
            reason: self.reason.clone(),
            kind: self.kind,
            attempts: self.attempts,
            retry_in_s: self.retry_in().as_secs_f64(),
        }
    }
}

/// After the first failed start on demand; doubled with each one after, up to `BACK_OFF_MAX`.
const BACK_OFF: Duration = Duration::from_secs(5);
const BACK_OFF_MAX: Duration = Duration::from_secs(300);

impl Demand {
    pub(crate) fn new(load: Load) -> Demand {
        Demand {
            state: Mutex::new(State {
                load,
                settings: Serve::default(),
                loads: 0,
                failure: None,
                last_start: None,
                serving_since: (load == Load::Loaded).then(Instant::now),
                waiting_since: None,
                look_again: None,
            }),
            wake: tokio::sync::Notify::new(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("demand")
    }

    pub(crate) fn load(&self) -> Load {
        self.state().load
    }

    /// Where its server is now. A server that comes to serve begins a turn.
    pub(crate) fn set(&self, load: Load) {
        let mut s = self.state();
        if load == Load::Loaded && s.load != Load::Loaded {
            s.serving_since = Some(Instant::now());
            s.waiting_since = None;
            s.look_again = None;
        }
        s.load = load;
    }

    /// Whether a request must wait for a start on demand (and has woken the watch for it).
    /// `first`: no other request waits yet, so the wait begins now.
    pub(crate) fn wanted(&self, first: bool) -> bool {
        let mut s = self.state();
        let waits = matches!(s.load, Load::Unloaded(_) | Load::Starting);
        if waits && (first || s.waiting_since.is_none()) {
            s.waiting_since = Some(Instant::now());
        }
        drop(s);
        if waits {
            self.wake.notify_one();
        }
        waits
    }

    pub(crate) fn unloaded(&self) -> bool {
        matches!(self.load(), Load::Unloaded(_))
    }

    pub(crate) fn settings(&self) -> Serve {
        self.state().settings.clone()
    }

    pub(crate) fn set_settings(&self, settings: Serve) {
        self.state().settings = settings;
    }

    /// Started on demand, after `took`.
    pub(crate) fn loaded(&self, took: Duration) {
        self.set(Load::Loaded);
        let mut s = self.state();
        s.loads += 1;
        s.failure = None;
        s.last_start = Some(took);
    }

    /// A start on demand failed: unloaded as before, tried again only after a back-off
    /// that doubles with each failure in a row. What its clients are told meanwhile.
    pub(crate) fn failed(
        &self,
        was: Unloaded,
        e: &crate::error::Error,
        recipe_hash: &str,
    ) -> Arc<StartFailed> {
        let mut s = self.state();
        s.load = Load::Unloaded(was);
        let attempts = s.failure.as_ref().map_or(0, |f| f.attempts) + 1;
        let back_off = (BACK_OFF * 2u32.saturating_pow(attempts - 1)).min(BACK_OFF_MAX);
        let f = Arc::new(StartFailed {
            reason: e.to_string(),
            kind: e.kind(),
            attempts,
            recipe_hash: recipe_hash.to_string(),
            until: Instant::now() + back_off,
        });
        s.failure = Some(f.clone());
        f
    }

    /// The last failed start, while its back-off lasts or until the next start.
    pub(crate) fn failure(&self) -> Option<Arc<StartFailed>> {
        self.state().failure.clone()
    }

    /// A failed start's back-off is running: no start is tried, requests are answered.
    pub(crate) fn backing_off(&self) -> bool {
        self.failure().is_some_and(|f| !f.retry_in().is_zero())
    }

    /// The recipe changed since its start failed: tried again at once.
    pub(crate) fn forget_failure(&self) {
        self.state().failure = None;
    }

    /// Whether a start may be tried now (no back-off runs).
    pub(crate) fn may_try(&self) -> bool {
        !self.backing_off()
    }

    pub(crate) fn loads(&self) -> u64 {
        self.state().loads
    }

    /// Its watch looks for room again at `at` (None: at its usual pace).
    pub(crate) fn look_again_at(&self, at: Option<Instant>) {
        self.state().look_again = at;
    }

    /// How long its watch may wait before it looks for room again.
    pub(crate) fn pause(&self, usual: Duration) -> Duration {
        let at = self.state().look_again;
        at.map_or(usual, |t| {
            // A moment past the turn's end: the turn is over when it is looked at.
            (t.saturating_duration_since(Instant::now()) + Duration::from_millis(5)).min(usual)
        })
    }

    /// Its turn as it stands: when it began serving, since when requests wait for it, and
    /// how long its last start took.
    pub(crate) fn turn(&self) -> super::turns::Turn {
        let s = self.state();
        super::turns::Turn {
            serving_since: s.serving_since.filter(|_| s.load == Load::Loaded),
            waiting_since: s.waiting_since.filter(|_| s.load != Load::Loaded),
            last_start: s.last_start,
        }
    }
}
