//! The front door: the long-lived process that owns the production port. It proxies the
//! OpenAI-compatible API to the production deployment on its own port, switches to another
//! deployment without dropping a request (promotion, rollback, restart, failover), holds
//! requests while nothing can serve, watches production, and exports `/metrics`.
//!
//! Two processes: `frontdoor run` (the supervisor: binds the port once, restarts the server
//! if it dies, so connections wait in the kernel's backlog instead of being refused) and
//! `frontdoor serve` (the proxy, the control socket, the watch). The CLI talks to it through
//! `STATE/frontdoor/control.sock`.

/// A line in the front door's log (its stdout).
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::stdio::out(format_args!($($arg)*))
    };
}
pub(crate) use say;

pub(crate) mod accept;
pub(crate) mod body;
pub(crate) mod capture;
pub(crate) mod chunk;
pub(crate) mod control;
pub(crate) mod demand;
pub(crate) mod handover;
pub(crate) mod hosts;
pub(crate) mod lanes;
pub(crate) mod live;
pub(crate) mod metered;
pub(crate) mod metrics;
pub(crate) mod origin;
pub(crate) mod page;
pub(crate) mod proxy;
pub(crate) mod quality;
pub(crate) mod reading;
pub(crate) mod rollout;
pub(crate) mod route;
pub(crate) mod serve;
pub(crate) mod supervisor;
pub(crate) mod turns;
pub(crate) mod unit;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub(crate) use lanes::{Lanes, Shared};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::host::ProcessId;
use crate::production::{Production, Upstream};
use crate::state::StateDir;
use metrics::Event;
use route::{Route, Table};

/// How the front door behaves: its settings (see `settings::DoorSettings`, which says the
/// variable and default of each) and the port.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Config {
    /// 127.0.0.1 unless set (0.0.0.0 to serve the LAN).
    pub(crate) host: String,
    pub(crate) port: u16,
    /// How long a request may wait for a backend: longer than the simulated and
    /// llama-server loads, shorter than most clients' timeouts.
    pub(crate) hold: Duration,
    /// Requests that may wait at once.
    pub(crate) queue: usize,
    /// How long a switch lets the old upstream's streams finish.
    pub(crate) drain: Duration,
    /// How long a replaced production stays warm for an instant rollback, when memory
    /// allows (0s stops it at once).
    pub(crate) warm_grace: Duration,
    /// Whether an API key is required (the key itself is never kept here, nor printed).
    pub(crate) api_key_required: bool,
    /// The file the key is read from, when it comes from one.
    pub(crate) api_key_file: Option<PathBuf>,
    /// Client connections at once (default: what the open-file limit allows); beyond it
    /// they wait in the kernel's backlog.
    pub(crate) max_connections: Option<usize>,
    /// The names it answers to beside its addresses and `localhost` (the machine's own
    /// name always).
    pub(crate) names: Vec<String>,
    /// The names as `SPARKCTL_FRONTDOOR_NAMES` gives them: what a unit file passes on.
    #[serde(skip)]
    pub(crate) names_set: Vec<String>,
    /// The web pages that may call the API beside the door's own (`origin`).
    pub(crate) origins: origin::Origins,
    /// How long a client may leave an answer unread before its connection is closed: a
    /// client that stops reading would otherwise hold its connection, its upstream stream
    /// and their buffers for ever.
    pub(crate) send_timeout: Duration,
    /// The live page: off, it neither samples nor serves (to measure its cost).
    pub(crate) page: bool,
    /// The live quality classifier: off to measure its cost.
    pub(crate) quality: bool,
}

/// The API key: `SPARKCTL_FRONTDOOR_API_KEY`, or the first line of the file
/// `SPARKCTL_FRONTDOOR_API_KEY_FILE` names.
fn api_key(file: Option<&std::path::Path>) -> Result<Option<String>> {
    if let Some(k) = crate::settings::api_key_value() {
        return Ok(Some(k));
    }
    match file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                Error::io(
                    format!(
                        "SPARKCTL_FRONTDOOR_API_KEY_FILE: cannot read {}",
                        path.display()
                    ),
                    e,
                )
            })?;
            let key = text.lines().next().unwrap_or_default().trim().to_string();
            if key.is_empty() {
                return Err(Error::Setting {
                    name: crate::settings::FRONTDOOR_API_KEY_FILE,
                    value: path.display().to_string(),
                    want: "is empty; put the key on its first line".into(),
                });
            }
            private_key_file(path)?;
            Ok(Some(key))
        }
        None => Ok(None),
    }
}

/// A key file others may read is no secret: refused, saying how to make it its owner's.
fn private_key_file(path: &std::path::Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)
        .map_err(|e| {
            Error::io(
                format!("SPARKCTL_FRONTDOOR_API_KEY_FILE: {}", path.display()),
                e,
            )
        })?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(Error::Setting {
            name: crate::settings::FRONTDOOR_API_KEY_FILE,
            value: path.display().to_string(),
            want: format!(
                "is a file other users may read (mode {:o}); `chmod 600 {}`",
                mode & 0o777,
                path.display()
            ),
        });
    }
    Ok(())
}

/// Whether `host` (an address to listen on) is reachable from this machine only.
pub(crate) fn loopback_only(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .trim_matches(['[', ']'])
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

impl Config {
    /// Refuses to serve an address others can reach without a key.
    pub(crate) fn refuse_open(&self) -> Result<()> {
        if self.api_key_required || loopback_only(&self.host) {
            return Ok(());
        }
        Err(Error::OpenWithoutKey {
            what: format!(
                "the front door would serve {}:{} to the network",
                self.host, self.port
            ),
            then: "or serve this machine only: SPARKCTL_FRONTDOOR_HOST=127.0.0.1".into(),
        })
    }

    pub(crate) fn new(settings: &crate::settings::Settings, port: u16) -> Result<Config> {
        let door = &settings.door;
        Ok(Config {
            names: hosts::configured_names(&door.names, &door.host),
            names_set: door.names.clone(),
            origins: origin::Origins::new(&door.origins),
            host: door.host.clone(),
            port,
            hold: door.hold,
            queue: door.queue,
            drain: door.drain,
            warm_grace: door.warm_grace,
            api_key_required: api_key(door.api_key_file.as_deref())?.is_some(),
            api_key_file: door.api_key_file.clone(),
            max_connections: door.max_connections,
            send_timeout: door.send_timeout,
            page: door.page,
            quality: door.quality,
        })
    }

    /// The key clients must send, when one is set.
    pub(crate) fn api_key(&self) -> Result<Option<String>> {
        api_key(self.api_key_file.as_deref())
    }
}

/// Whether `u`'s very instance still runs.
pub(crate) async fn alive(rt: &crate::runtime::Runtimes, u: &Upstream) -> bool {
    matches!(rt.instance(&u.recipe, &u.deployment).await, Ok(Some(d)) if d.running())
}

/// Where the front door keeps its files.
pub(crate) fn dir(state: &StateDir) -> PathBuf {
    state.root().join("frontdoor")
}

pub(crate) fn control_socket(state: &StateDir) -> PathBuf {
    dir(state).join("control.sock")
}

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
    pub(crate) live: Option<live::LiveStatus>,
    /// Every model behind the front door, each with its own production (`crate::models`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) models: Vec<lanes::ModelStatus>,
    /// A candidate meeting production's traffic, while one does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) rollout: Option<rollout::RolloutStatus>,
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

/// One model's lane through the serve process: its table, its hold, its production (in the
/// book all models share), and what they share (`Shared`: settings, metrics, the page).
pub(crate) struct Door {
    shared: Arc<Shared>,
    /// The model this lane serves (`crate::models`; `""`: the unnamed one). It changes
    /// when one model's lane is taken by another model's recipe (`Door::switch`).
    model: Mutex<String>,
    pub(crate) table: Table,
    /// Whether its server is loaded, starting on demand, or unloaded.
    pub(crate) demand: demand::Demand,
    /// The command that asked for the hold in force (`up`, `rollback`): production is its
    /// business while it lives.
    held_by: Mutex<Option<ProcessId>>,
    /// Counts the switches and holds: the watch's recovery gives way to a command's change
    /// made meanwhile.
    generation: std::sync::atomic::AtomicU64,
    /// A candidate meeting this model's traffic (shadow, canary), while one does.
    pub(crate) rollout: Arc<rollout::Slot>,
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
        Door {
            table: Table::new(route, shared.config.queue),
            demand: demand::Demand::new(load),
            model: Mutex::new(model.to_string()),
            held_by: Mutex::new(None),
            generation: std::sync::atomic::AtomicU64::new(0),
            rollout: Arc::default(),
            shared,
        }
    }

    /// A request for this model: an unloaded server's watch is woken to start it, and once
    /// a failed start's back-off is over the request waits for the next attempt (during
    /// it, the request is refused at once with the failure).
    pub(crate) fn want(&self) {
        if !self.demand.unloaded() {
            return;
        }
        if !self.demand.backing_off() {
            self.table.clear_failure();
        }
        self.demand.wanted(self.table.counts().0 == 0);
    }

    /// Whether a command that asked for the hold in force still runs.
    pub(crate) fn held_by_a_command(&self) -> bool {
        self.held_by
            .lock()
            .expect("held_by")
            .is_some_and(|p| p.alive())
    }

    /// The model this lane serves now.
    pub(crate) fn model(&self) -> String {
        self.model.lock().expect("model").clone()
    }

    pub(crate) fn production(&self) -> Production {
        self.book.lock().expect("book").lane(&self.model())
    }

    /// production.json with this model's production replaced by `new`.
    fn book_with(&self, new: Production) -> Production {
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
            *self.model.lock().expect("model") = to.clone();
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
        self.generation.load(std::sync::atomic::Ordering::SeqCst)
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
    fn route_to(&self, book: Production) -> (Route, Route) {
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        *self.held_by.lock().expect("held_by") = None;
        let route = match book.lane(&self.model()).serving() {
            Some(u) => Route::Serving(u.clone()),
            None => Route::Offline,
        };
        if matches!(route, Route::Serving(_)) {
            self.demand.set(demand::Load::Loaded);
        }
        *self.book.lock().expect("book") = book;
        let old = self.table.set(route.clone());
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
        asking: rollout::Asking,
    ) -> Result<rollout::RolloutStatus> {
        let mut p = self.production();
        p.candidate = Some(crate::production::Candidate {
            upstream: asking.candidate.clone(),
            owner: asking.owner,
        });
        self.update(p).await?;
        Ok(self.rollout.start(asking))
    }

    /// Ends the rollout (`rollout::Slot::end`) and takes its candidate out of the book.
    pub(crate) async fn end_rollout(&self) -> Result<Option<rollout::RolloutStatus>> {
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
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        *self.held_by.lock().expect("held_by") = owner;
        match self.table.set(Route::Holding) {
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

pub(crate) use control::Remote;
pub(crate) use supervisor::{answering, ensure, Launch, Takeover};
