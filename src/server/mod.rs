//! The front door's own process: everything `sparkctl frontdoor run` (the supervisor) and
//! `frontdoor serve` run — the proxy on the production port, one lane per model, the
//! control socket's server side, the watch over each model's production (its judge, golden
//! prompts, starts on demand, fair turns), the live page and `/metrics`. The commands know
//! the door only by its face, `crate::frontdoor`; nothing outside this folder but the CLI's
//! dispatch (and the testkit) imports it.
//!
//! Two processes: `frontdoor run` (the supervisor: binds the port once, restarts the server
//! if it dies, so connections wait in the kernel's backlog instead of being refused) and
//! `frontdoor serve` (the proxy, the control socket, the watch).

/// A line in the front door's log (its stdout).
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::stdio::out(format_args!($($arg)*))
    };
}
pub(crate) use say;

pub(crate) mod accept;
mod answer;
pub(crate) mod body;
pub(crate) mod capture;
pub(crate) mod chunk;
pub(crate) mod control;
pub(crate) mod demand;
mod engine_routes;
mod fair;
pub(crate) mod golden;
pub(crate) mod hosts;
pub(crate) mod judge;
mod key;
pub(crate) mod lane;
pub(crate) mod lanes;
pub(crate) mod live;
pub(crate) mod metered;
pub(crate) mod metrics;
pub(crate) mod models;
mod names;
pub(crate) mod origin;
pub(crate) mod page;
pub(crate) mod progress;
pub(crate) mod proxy;
pub(crate) mod quality;
pub(crate) mod quota;
pub(crate) mod reading;
pub(crate) mod rollout;
pub(crate) mod route;
pub(crate) mod serve;
pub(crate) mod supervisor;
pub(crate) mod turns;
pub(crate) mod watch;

use std::sync::Arc;
use std::time::Duration;

pub(crate) use lanes::{Lanes, Shared};

use crate::error::{Error, Result};
use crate::frontdoor::status::{DoorStatus, SwitchReport};
use crate::host::ProcessId;
use crate::production::Production;
use metrics::Event;
use route::{Route, Table};

/// One model's lane through the serve process: its table, its hold, its production (in the
/// book all models share), and what they share (`Shared`: settings, metrics, the page).
pub(crate) struct Door {
    shared: Arc<Shared>,
    /// Everything about the lane that changes, behind its one lock (`lane::Cell`): its
    /// model's name, route, counts, load, turn, failed start, holder and generation.
    cell: Arc<lane::Cell>,
    /// Its routing, a view of `cell`.
    table: Table,
    /// Whether its server is loaded, starting on demand, or unloaded: a view of `cell`.
    demand: demand::Demand,
    /// A candidate meeting this model's traffic (shadow, canary), while one does.
    rollout: Arc<rollout::Slot>,
    /// Turns at its server by key, where its slots are known.
    fair: Arc<fair::Fair>,
}

impl std::ops::Deref for Door {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.shared
    }
}

/// A recovery that a command's switch or hold overtook: production is the command's now.
#[derive(Debug)]
pub(crate) struct Superseded;

impl Door {
    /// The lane of `model`, routing to `route`, its server `load`ed or not.
    pub(crate) fn lane(shared: Arc<Shared>, model: &str, route: Route, load: demand::Load) -> Door {
        let cell = lane::Cell::new(model, route, load);
        Door {
            table: Table::of(cell.clone(), shared.config.queue),
            demand: demand::Demand::of(cell.clone()),
            cell,
            rollout: Arc::default(),
            fair: Arc::default(),
            shared,
        }
    }

    /// A request for this model: an unloaded server's watch is woken to start it, and once
    /// a failed start's back-off is over the request waits for the next attempt (during
    /// it, the request is refused at once with the failure). The wait for the model's
    /// server begins with the first request that waits.
    pub(crate) fn want(&self) {
        let wake = self.cell.change(|s| {
            if !matches!(s.load, demand::Load::Unloaded(_)) {
                return false;
            }
            if s.failure.as_ref().is_none_or(|f| f.retry_in().is_zero()) {
                s.refusing = false;
            }
            if s.waiting == 0 || s.waiting_since.is_none() {
                s.waiting_since = Some(std::time::Instant::now());
            }
            true
        });
        if wake {
            self.cell.wake.notify_one();
        }
    }

    /// Whether a command that asked for the hold in force still runs.
    pub(crate) fn held_by_a_command(&self) -> bool {
        let holder = self.cell.lock().held_by;
        holder.is_some_and(|p| p.alive())
    }

    /// The model this lane serves now.
    pub(crate) fn model(&self) -> String {
        self.cell.lock().model.clone()
    }

    pub(crate) fn production(&self) -> Production {
        self.book.lock().expect("book").lane(&self.model())
    }

    /// production.json with this model's production replaced by `new`.
    fn book_with(&self, new: Production) -> crate::production::Book {
        self.book
            .lock()
            .expect("book")
            .with_lane(&self.model(), new)
    }

    /// Makes `new` production: written first (a write that fails changes nothing), then new
    /// requests go to its upstream (or wait, if it has none), then the old upstream's
    /// requests finish, for up to `drain`. A `new` that names another model takes this
    /// lane under that name (one model served, replaced by another model's recipe) — unless
    /// another lane serves that model.
    pub(crate) async fn switch(&self, new: Production, drain: Duration) -> Result<SwitchReport> {
        let changing = self.changing.lock().await;
        let lane = self.model();
        let renamed = new.model.clone().filter(|m| *m != lane);
        let book = match &renamed {
            Some(to) => {
                let book = self.book.lock().expect("book").clone();
                if book.lane(to).current.is_some() {
                    return Err(Error::Model(crate::error::ModelProblem::Taken {
                        model: to.clone(),
                    }));
                }
                book.with_lane_as(&lane, to, new)
            }
            None => self.book_with(new),
        };
        crate::state::write_json_off_thread(self.state.production_file(), book.clone()).await?;
        if let Some(to) = &renamed {
            self.cell.lock().model = to.clone();
            if let Some(lanes) = self.lanes() {
                lanes.renamed(&lane, to);
            }
            say!("model {}: now served as {to}", crate::models::shown(&lane));
        }
        let old = self.route_to(book);
        drop(changing);
        let mut report = self.drain_after(old, drain).await;
        report.model = Some(self.model());
        Ok(report)
    }

    /// Switches and holds so far (see `recover_to`).
    pub(crate) fn generation(&self) -> u64 {
        self.cell.lock().generation
    }

    /// The watch's switch (a restart, a failover): `change` applied to production as it is
    /// now, unless a command switched or held since `generation` (then nothing changes).
    /// Production must serve again even on a full disk: production.json is then kept in
    /// memory until there is room.
    pub(crate) async fn recover_to(
        &self,
        generation: u64,
        change: impl FnOnce(&mut Production),
    ) -> std::result::Result<SwitchReport, Superseded> {
        let changing = self.changing.lock().await;
        if self.generation() != generation {
            return Err(Superseded);
        }
        let mut new = self.production();
        change(&mut new);
        let new = self.book_with(new);
        let deferred = self.deferred.clone();
        let (path, value) = (self.state.production_file(), new.clone());
        let written = tokio::task::spawn_blocking(move || deferred.write_json(&path, &value)).await;
        if let Ok(Err(e)) = written {
            tracing::warn!("production.json: {e}");
        }
        let old = self.route_to(new);
        drop(changing);
        Ok(self.drain_after(old, Duration::ZERO).await)
    }

    /// Routes to this model's production in `book` (production.json as just written);
    /// returns what was routed to before and where requests go now.
    fn route_to(&self, book: crate::production::Book) -> (Route, Route) {
        let route = match book.lane(&self.model()).serving() {
            Some(u) => Route::Serving(u.clone()),
            None => Route::Offline,
        };
        *self.book.lock().expect("book") = book;
        let old = self.cell.change(|s| {
            s.generation += 1;
            s.held_by = None;
            if matches!(route, Route::Serving(_)) {
                s.set_load(demand::Load::Loaded);
            }
            std::mem::replace(&mut s.route, route.clone())
        });
        if old != route {
            self.metrics.event(Event::Switch);
        }
        (old, route)
    }

    /// The old upstream's requests finish, for up to `drain`.
    async fn drain_after(&self, (old, route): (Route, Route), drain: Duration) -> SwitchReport {
        let replaced = match old {
            Route::Serving(u) | Route::Suspect(u) => Some(u),
            Route::Holding | Route::Offline => None,
        };
        let left_in_flight = match (&replaced, &route) {
            (Some(old), Route::Serving(new)) if old.deployment == new.deployment => 0,
            (Some(old), _) => self.table.drain(&old.deployment, drain).await,
            (None, _) => 0,
        };
        if left_in_flight > 0 {
            tracing::warn!(
                "switch: {left_in_flight} requests still in flight on the old upstream after the drain"
            );
        }
        SwitchReport {
            replaced,
            left_in_flight,
            model: None,
        }
    }

    /// Writes `new` without changing where requests go (a warm production stopped).
    pub(crate) async fn update(&self, new: Production) -> Result<()> {
        let _changing = self.changing.lock().await;
        let book = self.book_with(new);
        crate::state::write_json_off_thread(self.state.production_file(), book.clone()).await?;
        *self.book.lock().expect("book") = book;
        Ok(())
    }

    /// Starts `asking`'s rollout on this model's traffic, its candidate written into the
    /// book first (every memory plan then counts it as production).
    pub(crate) async fn start_rollout(
        &self,
        asking: crate::rollout::Asking,
    ) -> Result<crate::rollout::RolloutStatus> {
        let mut p = self.production();
        p.candidate = Some(crate::production::Candidate {
            upstream: asking.candidate.clone(),
            owner: asking.owner,
        });
        self.update(p).await?;
        Ok(self.rollout.start(asking))
    }

    /// Ends the rollout (`rollout::Slot::end`) and takes its candidate out of the book.
    pub(crate) async fn end_rollout(&self) -> Result<Option<crate::rollout::RolloutStatus>> {
        let ended = self.rollout.end(self.config.drain).await;
        self.forget_candidate().await?;
        Ok(ended)
    }

    /// The book names no candidate of this model's any more.
    pub(crate) async fn forget_candidate(&self) -> Result<()> {
        let mut p = self.production();
        if p.candidate.take().is_none() {
            return Ok(());
        }
        self.update(p).await
    }

    /// New requests wait (a swap, a restart) until the next switch; the requests in flight
    /// finish first, for up to `drain`, so what is stopped next cuts no stream. Returns how
    /// many were still in flight when the drain gave up.
    pub(crate) async fn hold(&self, drain: Duration, owner: Option<ProcessId>) -> usize {
        let was = self.cell.change(|s| {
            s.generation += 1;
            s.held_by = owner;
            std::mem::replace(&mut s.route, Route::Holding)
        });
        match was {
            Route::Serving(old) | Route::Suspect(old) => {
                self.metrics.event(Event::Switch);
                self.table.drain(&old.deployment, drain).await
            }
            Route::Holding | Route::Offline => 0,
        }
    }

    pub(crate) fn status(&self) -> DoorStatus {
        let (waiting, in_flight) = self.table.counts();
        DoorStatus {
            pid: std::process::id(),
            host: self.config.host.clone(),
            port: self.config.port,
            // A suspect upstream is production still (requests wait a moment for the watch).
            upstream: match self.table.route() {
                Route::Serving(u) | Route::Suspect(u) => Some(u),
                Route::Holding | Route::Offline => None,
            },
            holding: matches!(self.table.route(), Route::Holding | Route::Suspect(_)),
            waiting,
            in_flight: in_flight.into_iter().collect(),
            live: self
                .production()
                .serving()
                .and_then(|u| self.live.status(&u.deployment)),
            production: self.production(),
            pending_writes: self.deferred.pending(),
            models: Vec::new(),
            rollout: self.rollout.get().map(|r| r.status()),
        }
    }
}
