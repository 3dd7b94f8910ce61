//! The front door: the long-lived process that owns the production port. It proxies the
//! OpenAI-compatible API to the production deployment on its own port, switches to another
//! deployment without dropping a request (promotion, rollback, restart, failover), holds
//! requests while nothing can serve, watches production, and exports `/metrics`.
//!
//! Two processes: `frontdoor run` (the supervisor: binds the port once, restarts the server
//! if it dies, so connections wait in the kernel's backlog instead of being refused) and
//! `frontdoor serve` (the proxy, the control socket, the watch). The CLI talks to it through
//! `STATE/frontdoor/control.sock`.

/// A line in the front door's log (its stdout). A full disk must not stop the front door,
/// so a failed write is dropped (println! would panic).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}
pub(crate) use say;

pub mod control;
pub mod metrics;
pub mod proxy;
pub mod route;
pub mod serve;
pub mod supervisor;
pub mod unit;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::production::{Production, Upstream};
use crate::state::StateDir;
use metrics::{Event, Metrics};
use route::{Route, Table};

/// How the front door behaves; from the environment, with defaults a user rarely changes.
#[derive(Debug, Clone, Serialize)]
pub struct Config {
    /// `SPARKCTL_FRONTDOOR_HOST` (default 127.0.0.1; 0.0.0.0 to serve the LAN).
    pub host: String,
    pub port: u16,
    /// How long a request may wait for a backend (`SPARKCTL_FRONTDOOR_HOLD`, default 2m:
    /// longer than the simulated and llama-server loads, shorter than most clients' timeouts).
    pub hold: Duration,
    /// Requests that may wait at once (`SPARKCTL_FRONTDOOR_QUEUE`, default 256).
    pub queue: usize,
    /// How long a switch lets the old upstream's streams finish (`SPARKCTL_FRONTDOOR_DRAIN`,
    /// default 2m).
    pub drain: Duration,
    /// How long a replaced production stays warm for an instant rollback, when memory allows
    /// (`SPARKCTL_WARM_GRACE`, default 10m; 0s stops it at once).
    pub warm_grace: Duration,
    /// Whether an API key is required (the key itself is never kept here, nor printed).
    pub api_key_required: bool,
}

fn env_duration(name: &str, default: Duration) -> Result<Duration> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => crate::units::parse_duration(v.trim())
            .map_err(|e| Error::Usage(format!("{name}={v}: {e}"))),
        _ => Ok(default),
    }
}

/// The API key: `SPARKCTL_FRONTDOOR_API_KEY`, or the first line of the file
/// `SPARKCTL_FRONTDOOR_API_KEY_FILE` names.
pub fn api_key() -> Result<Option<String>> {
    if let Ok(k) = std::env::var("SPARKCTL_FRONTDOOR_API_KEY") {
        if !k.is_empty() {
            return Ok(Some(k));
        }
    }
    match std::env::var_os("SPARKCTL_FRONTDOOR_API_KEY_FILE") {
        Some(path) => {
            let text = std::fs::read_to_string(&path).map_err(|e| {
                Error::io(
                    format!(
                        "SPARKCTL_FRONTDOOR_API_KEY_FILE: cannot read {}",
                        PathBuf::from(&path).display()
                    ),
                    e,
                )
            })?;
            let key = text.lines().next().unwrap_or_default().trim().to_string();
            if key.is_empty() {
                return Err(Error::Usage(format!(
                    "SPARKCTL_FRONTDOOR_API_KEY_FILE: {} is empty; put the key on its first line",
                    PathBuf::from(&path).display()
                )));
            }
            Ok(Some(key))
        }
        None => Ok(None),
    }
}

impl Config {
    pub fn from_env(port: u16) -> Result<Config> {
        let queue = match std::env::var("SPARKCTL_FRONTDOOR_QUEUE") {
            Ok(v) if !v.trim().is_empty() => v.trim().parse().map_err(|_| {
                Error::Usage(format!(
                    "SPARKCTL_FRONTDOOR_QUEUE={v} is not a number of requests"
                ))
            })?,
            _ => 256,
        };
        Ok(Config {
            host: std::env::var("SPARKCTL_FRONTDOOR_HOST")
                .ok()
                .filter(|h| !h.trim().is_empty())
                .unwrap_or_else(|| "127.0.0.1".into()),
            port,
            hold: env_duration("SPARKCTL_FRONTDOOR_HOLD", Duration::from_secs(120))?,
            queue,
            drain: env_duration("SPARKCTL_FRONTDOOR_DRAIN", Duration::from_secs(120))?,
            warm_grace: env_duration("SPARKCTL_WARM_GRACE", Duration::from_secs(600))?,
            api_key_required: api_key()?.is_some(),
        })
    }
}

/// Whether `u`'s very instance still runs.
pub async fn alive(rt: &crate::runtime::Runtimes, u: &Upstream) -> bool {
    matches!(rt.find(&u.recipe).await, Ok(Some(d)) if d.running() && d.id == u.deployment)
}

/// Where the front door keeps its files.
pub fn dir(state: &StateDir) -> PathBuf {
    state.root().join("frontdoor")
}

pub fn control_socket(state: &StateDir) -> PathBuf {
    dir(state).join("control.sock")
}

/// What the front door says about itself (`GET /state`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DoorStatus {
    pub pid: u32,
    pub host: String,
    pub port: u16,
    /// Where new requests go; None while holding or without production.
    pub upstream: Option<Upstream>,
    /// Requests wait for production to come back (a swap, a restart); otherwise, without an
    /// upstream, there is no production and requests get 503 at once.
    #[serde(default)]
    pub holding: bool,
    /// Requests waiting for a backend.
    pub waiting: usize,
    /// In flight per deployment.
    pub in_flight: std::collections::BTreeMap<String, usize>,
    pub production: Production,
}

/// What a switch did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SwitchReport {
    /// The upstream new requests went to before.
    pub replaced: Option<Upstream>,
    /// Its requests still in flight when the drain gave up (0: all finished).
    pub left_in_flight: usize,
}

/// The serve process's shared state: the table, the metrics, production as last written.
pub struct Door {
    pub state: StateDir,
    pub config: Config,
    pub table: Table,
    pub metrics: Arc<Metrics>,
    production: Mutex<Production>,
}

impl Door {
    pub fn new(state: StateDir, config: Config, production: Production, route: Route) -> Door {
        Door {
            table: Table::new(route, config.queue),
            metrics: Arc::new(Metrics::default()),
            production: Mutex::new(production),
            state,
            config,
        }
    }

    pub fn production(&self) -> Production {
        self.production.lock().expect("production").clone()
    }

    /// Makes `new` production: written first (a write that fails changes nothing), then new
    /// requests go to its upstream (or wait, if it has none), then the old upstream's
    /// requests finish, for up to `drain`.
    pub async fn switch(&self, new: Production, drain: Duration) -> Result<SwitchReport> {
        crate::state::write_json_off_thread(self.state.production_file(), new.clone()).await?;
        let route = match new.serving() {
            Some(u) => Route::Serving(u.clone()),
            None => Route::Offline,
        };
        *self.production.lock().expect("production") = new;
        let old = self.table.set(route.clone());
        if old != route {
            self.metrics.event(Event::Switch);
        }
        let replaced = match old {
            Route::Serving(u) => Some(u),
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
        Ok(SwitchReport {
            replaced,
            left_in_flight,
        })
    }

    /// Writes `new` without changing where requests go (a warm production stopped).
    pub async fn update(&self, new: Production) -> Result<()> {
        crate::state::write_json_off_thread(self.state.production_file(), new.clone()).await?;
        *self.production.lock().expect("production") = new;
        Ok(())
    }

    /// New requests wait (a swap, a restart) until the next switch; the requests in flight
    /// finish first, for up to `drain`, so what is stopped next cuts no stream. Returns how
    /// many were still in flight when the drain gave up.
    pub async fn hold(&self, drain: Duration) -> usize {
        match self.table.set(Route::Holding) {
            Route::Serving(old) => {
                self.metrics.event(Event::Switch);
                self.table.drain(&old.deployment, drain).await
            }
            Route::Holding | Route::Offline => 0,
        }
    }

    pub fn status(&self) -> DoorStatus {
        let (waiting, in_flight) = self.table.counts();
        DoorStatus {
            pid: std::process::id(),
            host: self.config.host.clone(),
            port: self.config.port,
            upstream: match self.table.route() {
                Route::Serving(u) => Some(u),
                Route::Holding | Route::Offline => None,
            },
            holding: self.table.route() == Route::Holding,
            waiting,
            in_flight: in_flight.into_iter().collect(),
            production: self.production(),
        }
    }
}

pub use control::Remote;
pub use supervisor::{answering, ensure, Launch};
