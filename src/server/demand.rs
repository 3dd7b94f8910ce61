//! One model's server on demand: whether it is loaded, starting, or unloaded (never started
//! since the front door started, unloaded after its `ttl`, or evicted for room), and the
//! wake-up a request that finds it unloaded gives its watch, which starts it
//! (`deploy::watch`'s demand). Requests wait in the model's own bounded queue meanwhile; the
//! other models keep serving.

use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) use crate::frontdoor::status::{Load, Unloaded};

pub(crate) use super::lane::StartFailed;
use super::lane::{Cell, Eviction};
use crate::production::Upstream;
use crate::recipe::serve::Serve;

/// One lane's server on demand, a view of its state (`lane::Cell`).
pub(crate) struct Demand {
    cell: Arc<Cell>,
}

/// After the first failed start on demand; doubled with each one after, up to `BACK_OFF_MAX`.
const BACK_OFF: Duration = Duration::from_secs(5);
const BACK_OFF_MAX: Duration = Duration::from_secs(300);

impl Demand {
    pub(crate) fn of(cell: Arc<Cell>) -> Demand {
        Demand { cell }
    }

    /// Wakes the watch: a request found the model unloaded.
    pub(crate) fn wake(&self) -> &tokio::sync::Notify {
        &self.cell.wake
    }

    /// Asks the watch to evict this model's server for `for_recipe` (a command's `up
    /// --yes`), and waits for its answer, at most `within`.
    pub(crate) async fn evict_for(&self, for_recipe: &str, within: Duration) -> Result<(), String> {
        let mut ticks = self.cell.ticks();
        self.cell
            .change(|s| s.eviction = Eviction::Asked(for_recipe.to_string()));
        self.cell.wake.notify_one();
        let answered = tokio::time::timeout(within, async {
            loop {
                ticks.borrow_and_update();
                let done = {
                    let mut s = self.cell.lock();
                    match std::mem::take(&mut s.eviction) {
                        Eviction::Done(r) => Some(r),
                        other => {
                            s.eviction = other;
                            None
                        }
                    }
                };
                if let Some(r) = done {
                    return r;
                }
                if ticks.changed().await.is_err() {
                    return Err("the front door is stopping".to_string());
                }
            }
        });
        match answered.await {
            Ok(r) => r,
            Err(_) => {
                self.cell.lock().eviction = Eviction::None;
                Err(format!(
                    "its watch did not answer within {} s",
                    within.as_secs()
                ))
            }
        }
    }

    /// The eviction a command asked for, taken by the watch to carry out.
    pub(crate) fn eviction_asked(&self) -> Option<String> {
        let mut s = self.cell.lock();
        match &s.eviction {
            Eviction::Asked(r) => {
                let r = r.clone();
                s.eviction = Eviction::None;
                Some(r)
            }
            _ => None,
        }
    }

    /// The watch's answer to the eviction a command asked for.
    pub(crate) fn eviction_done(&self, r: Result<(), String>) {
        self.cell.change(|s| s.eviction = Eviction::Done(r));
    }

    /// Its server asleep (`serve.sleep: auto`), and the level it was put to sleep at.
    pub(crate) fn asleep(&self) -> Option<(Upstream, u8)> {
        self.cell.lock().asleep.clone()
    }

    pub(crate) fn set_asleep(&self, asleep: Option<(Upstream, u8)>) {
        self.cell.change(|s| s.asleep = asleep);
    }

    pub(crate) fn load(&self) -> Load {
        self.cell.lock().load
    }

    /// Where its server is now. A server that comes to serve begins a turn.
    pub(crate) fn set(&self, load: Load) {
        self.cell.lock().set_load(load);
    }

    pub(crate) fn unloaded(&self) -> bool {
        matches!(self.load(), Load::Unloaded(_))
    }

    pub(crate) fn settings(&self) -> Serve {
        self.cell.lock().settings.clone()
    }

    pub(crate) fn set_settings(&self, settings: Serve) {
        self.cell.lock().settings = settings;
    }

    /// Started on demand, after `took`: it serves, and no failure is told any more.
    pub(crate) fn loaded(&self, took: Duration) {
        self.cell.change(|s| {
            s.set_load(Load::Loaded);
            s.loads += 1;
            s.failure = None;
            s.refusing = false;
            s.last_start = Some(took);
        });
    }

    /// A start on demand failed: unloaded as before, tried again only after a back-off
    /// that doubles with each failure in a row; its waiting requests, and those that come
    /// during the back-off, are refused with it at once.
    pub(crate) fn failed(
        &self,
        was: Unloaded,
        e: &crate::error::Error,
        recipe_hash: &str,
    ) -> Arc<StartFailed> {
        self.cell.change(|s| {
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
            s.refusing = true;
            f
        })
    }

    /// The last failed start, while its back-off lasts or until the next start.
    pub(crate) fn failure(&self) -> Option<Arc<StartFailed>> {
        self.cell.lock().failure.clone()
    }

    /// A failed start's back-off is running: no start is tried, requests are answered.
    pub(crate) fn backing_off(&self) -> bool {
        self.failure().is_some_and(|f| !f.retry_in().is_zero())
    }

    /// The recipe changed since its start failed: tried again at once.
    pub(crate) fn forget_failure(&self) {
        self.cell.change(|s| {
            s.failure = None;
            s.refusing = false;
        });
    }

    /// Whether a start may be tried now (no back-off runs).
    pub(crate) fn may_try(&self) -> bool {
        !self.backing_off()
    }

    pub(crate) fn loads(&self) -> u64 {
        self.cell.lock().loads
    }

    /// Its watch looks for room again at `at` (None: at its usual pace).
    pub(crate) fn look_again_at(&self, at: Option<Instant>) {
        self.cell.lock().look_again = at;
    }

    /// How long its watch may wait before it looks for room again.
    pub(crate) fn pause(&self, usual: Duration) -> Duration {
        let at = self.cell.lock().look_again;
        at.map_or(usual, |t| {
            // A moment past the turn's end: the turn is over when it is looked at.
            (t.saturating_duration_since(Instant::now()) + Duration::from_millis(5)).min(usual)
        })
    }

    /// Its turn as it stands: when it began serving, since when requests wait for it, and
    /// how long its last start took.
    pub(crate) fn turn(&self) -> super::turns::Turn {
        let s = self.cell.lock();
        super::turns::Turn {
            serving_since: s.serving_since.filter(|_| s.load == Load::Loaded),
            waiting_since: s.waiting_since.filter(|_| s.load != Load::Loaded),
            last_start: s.last_start,
        }
    }
}
