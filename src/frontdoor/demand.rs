//! One model's server on demand: whether it is loaded, starting, or unloaded (never started
//! since the front door started, unloaded after its `ttl`, or evicted for room), and the
//! wake-up a request that finds it unloaded gives its watch, which starts it
//! (`deploy::watch`'s demand). Requests wait in the model's own bounded queue meanwhile; the
//! other models keep serving.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::recipe::serve::Serve;

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

pub(crate) struct Demand {
    load: Mutex<Load>,
    /// A request found the model unloaded: its watch starts it now rather than at its next
    /// look.
    pub(crate) wake: tokio::sync::Notify,
    /// Its production recipe's `serve` section, as last read.
    settings: Mutex<Serve>,
    /// Starts on demand since the front door started.
    loads: AtomicU64,
    /// A start on demand that failed: the next is not tried before this.
    retry_at: Mutex<Option<Instant>>,
}

/// Between two failed starts on demand.
const RETRY: Duration = Duration::from_secs(5);

impl Demand {
    pub(crate) fn new(load: Load) -> Demand {
        Demand {
            load: Mutex::new(load),
            wake: tokio::sync::Notify::new(),
            settings: Mutex::new(Serve::default()),
            loads: AtomicU64::new(0),
            retry_at: Mutex::new(None),
        }
    }

    pub(crate) fn load(&self) -> Load {
        *self.load.lock().expect("load")
    }

    pub(crate) fn set(&self, load: Load) {
        *self.load.lock().expect("load") = load;
    }

    /// Whether a request must wait for a start on demand (and has woken the watch for it).
    pub(crate) fn wanted(&self) -> bool {
        let waits = matches!(self.load(), Load::Unloaded(_) | Load::Starting);
        if waits {
            self.wake.notify_one();
        }
        waits
    }

    pub(crate) fn unloaded(&self) -> bool {
        matches!(self.load(), Load::Unloaded(_))
    }

    pub(crate) fn settings(&self) -> Serve {
        self.settings.lock().expect("settings").clone()
    }

    pub(crate) fn set_settings(&self, s: Serve) {
        *self.settings.lock().expect("settings") = s;
    }

    /// Started on demand.
    pub(crate) fn loaded(&self) {
        self.set(Load::Loaded);
        self.loads.fetch_add(1, Ordering::SeqCst);
        *self.retry_at.lock().expect("retry") = None;
    }

    /// A start on demand failed: unloaded as before, tried again after a pause.
    pub(crate) fn failed(&self, was: Unloaded) {
        self.set(Load::Unloaded(was));
        *self.retry_at.lock().expect("retry") = Some(Instant::now() + RETRY);
    }

    /// Whether a start may be tried now (none failed just before).
    pub(crate) fn may_try(&self) -> bool {
        self.retry_at
            .lock()
            .expect("retry")
            .is_none_or(|t| Instant::now() >= t)
    }

    pub(crate) fn loads(&self) -> u64 {
        self.loads.load(Ordering::SeqCst)
    }
}
