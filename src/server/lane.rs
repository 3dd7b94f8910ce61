//! One model's lane, as one owner: everything about it that changes — where its requests
//! go, who waits and who is in flight, whether its server is loaded, its turn, its failed
//! start, the command holding it — in one `State` behind one lock. The races of earlier
//! turns were between separate cells (a route in one, a count in another, a load in a
//! third); here a decision reads and writes them together. `route::Table` and
//! `demand::Demand` are views of it for the proxy and the watch; every change that a
//! waiting request or a drain may wait for ticks `ticks`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{watch, Notify};

use crate::frontdoor::status::Load;
use crate::host::ProcessId;
use crate::production::Upstream;
use crate::recipe::serve::Serve;
use crate::server::accept::Client;

/// What the table says now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    Serving(Upstream),
    /// Production dropped a request it had taken without answering (a dying server): new
    /// requests wait until the watch has looked at it — serving again, or brought back.
    Suspect(Upstream),
    /// Production is being switched or brought back: requests wait.
    Holding,
    /// There is no production (none yet, or it was taken down): nothing to wait for.
    Offline,
}

/// A start on demand that failed: what its waiting clients are told at once, until the
/// back-off ends.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StartFailed {
    /// Why, as the start said it (the engine's fatal line among it).
    pub(in crate::server) reason: String,
    /// The error's kind, as `--json` names it.
    pub(in crate::server) kind: crate::error::ErrorKind,
    /// Failed starts in a row.
    pub(in crate::server) attempts: u32,
    /// The recipe's hash when it failed: a changed recipe is tried at once.
    pub(in crate::server) recipe_hash: String,
    pub(super) until: Instant,
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

/// One model's lane state and what waits on it.
pub(crate) struct Cell {
    state: Mutex<State>,
    /// Ticked on every change a waiting request or a drain may be waiting for.
    ticks: watch::Sender<u64>,
    /// A request found the model unloaded: its watch starts it now rather than at its next
    /// look.
    pub(in crate::server) wake: Notify,
}

/// Everything about one lane that changes.
pub(crate) struct State {
    /// The model this lane serves (`crate::models`; `""`: the unnamed one). It changes when
    /// one model's lane is taken by another model's recipe (`Door::switch`).
    pub(in crate::server) model: String,
    pub(in crate::server) route: Route,
    /// Requests waiting for an upstream.
    pub(in crate::server) waiting: usize,
    /// When a request last claimed an upstream or finished with it (the lane's start before
    /// any did): how long the model has been idle.
    pub(in crate::server) last: Instant,
    /// Requests in flight per upstream deployment (two instances on one port stay apart).
    pub(in crate::server) in_flight: HashMap<String, usize>,
    pub(in crate::server) load: Load,
    /// Its production recipe's `serve` section, as last read.
    pub(in crate::server) settings: Serve,
    /// Starts on demand since the front door started.
    pub(in crate::server) loads: u64,
    /// The last start on demand failed: its reason, and when the next may be tried.
    pub(in crate::server) failure: Option<Arc<StartFailed>>,
    /// Whether requests are refused with `failure` now (from the failure until the back-off
    /// ends and a request asks again, or a start serves).
    pub(in crate::server) refusing: bool,
    /// How long its last start on demand took, from starting the server to ready.
    pub(in crate::server) last_start: Option<Duration>,
    /// When its server last began to serve: its turn, while another model waits.
    pub(in crate::server) serving_since: Option<Instant>,
    /// Since when requests wait for its server (None: none waits, or it serves).
    pub(in crate::server) waiting_since: Option<Instant>,
    /// When its watch looks again for room: the moment another model's turn ends.
    pub(in crate::server) look_again: Option<Instant>,
    /// The command that asked for the hold in force (`up`, `rollback`): production is its
    /// business while it lives.
    pub(in crate::server) held_by: Option<ProcessId>,
    /// Counts the switches and holds: the watch's recovery gives way to a command's change
    /// made meanwhile.
    pub(in crate::server) generation: u64,
    /// Its server put to sleep instead of stopped (`serve.sleep: auto`), and the level.
    pub(in crate::server) asleep: Option<(Upstream, u8)>,
    /// A command's ask that this model make room (`up --yes`), and its answer.
    pub(in crate::server) eviction: Eviction,
    /// The clients whose requests ended here lately, newest last (at most `RECENT`).
    pub(in crate::server) recent: Vec<(Client, Instant)>,
    /// The clients whose requests wait here, one entry a request.
    pub(in crate::server) waiters: Vec<Client>,
}

/// A command's ask that a model's idle server make room, as its watch takes it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) enum Eviction {
    #[default]
    None,
    /// Asked, for the recipe named: the watch evicts it at its next look.
    Asked(String),
    /// Done: evicted, or kept and why.
    Done(Result<(), String>),
}

/// Clients remembered per lane: more than a household's or a team's agents at once.
const RECENT: usize = 32;

impl State {
    /// `client`'s request here ended now.
    pub(crate) fn ended(&mut self, client: Client) {
        let now = Instant::now();
        self.last = now;
        self.recent.retain(|(c, _)| *c != client);
        if self.recent.len() == RECENT {
            self.recent.remove(0);
        }
        self.recent.push((client, now));
    }

    /// Whether everyone who used this idle lane within `within` now waits in `waiters` (for
    /// another model): its clients moved on, so none of them is between two requests here.
    pub(crate) fn moved_on(&self, waiters: &[Client], within: Duration) -> bool {
        let mut lately = (self.recent.iter()).filter(|(_, at)| at.elapsed() < within);
        let mut any = false;
        let all = lately.all(|(c, _)| {
            any = true;
            waiters.contains(c)
        });
        any && all
    }
}

impl State {
    /// Its server is where `load` says. One that comes to serve begins a turn.
    pub(crate) fn set_load(&mut self, load: Load) {
        if load == Load::Loaded && self.load != Load::Loaded {
            self.serving_since = Some(Instant::now());
            self.waiting_since = None;
            self.look_again = None;
        }
        self.load = load;
    }
}

impl Cell {
    pub(crate) fn new(model: &str, route: Route, load: Load) -> Arc<Cell> {
        Arc::new(Cell {
            state: Mutex::new(State {
                model: model.to_string(),
                route,
                waiting: 0,
                last: Instant::now(),
                in_flight: HashMap::new(),
                load,
                settings: Serve::default(),
                loads: 0,
                failure: None,
                refusing: false,
                last_start: None,
                serving_since: (load == Load::Loaded).then(Instant::now),
                waiting_since: None,
                look_again: None,
                held_by: None,
                generation: 0,
                asleep: None,
                eviction: Eviction::None,
                recent: Vec::new(),
                waiters: Vec::new(),
            }),
            ticks: watch::Sender::new(0),
            wake: Notify::new(),
        })
    }

    /// The lane's state, to read or change; `tick` after a change others may wait for.
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("lane")
    }

    /// Wakes what waits on the lane (requests for an upstream, drains) to look again.
    pub(crate) fn tick(&self) {
        self.ticks.send_modify(|t| *t = t.wrapping_add(1));
    }

    /// Ticks from now on.
    pub(crate) fn ticks(&self) -> watch::Receiver<u64> {
        self.ticks.subscribe()
    }

    /// Changes the state with `f`, then ticks.
    pub(crate) fn change<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let out = f(&mut self.lock());
        self.tick();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lane_s_clients_moved_on_when_all_who_used_it_lately_wait_elsewhere() {
        let cell = Cell::new("a", Route::Offline, Load::Loaded);
        let mut s = cell.lock();
        let gap = Duration::from_secs(60);
        // Nobody used it: nobody moved on (the gap decides).
        assert!(!s.moved_on(&[Client(1)], gap));
        s.ended(Client(1));
        assert!(s.moved_on(&[Client(1)], gap));
        assert!(!s.moved_on(&[Client(2)], gap));
        // Another client used it too and does not wait elsewhere: it may be back.
        s.ended(Client(2));
        assert!(!s.moved_on(&[Client(1)], gap));
        assert!(s.moved_on(&[Client(2), Client(1), Client(3)], gap));
        // Only the clients of the last `within` count.
        assert!(!s.moved_on(&[Client(1)], Duration::ZERO));
        // Bounded: the oldest go first, each client once.
        for c in 0..100 {
            s.ended(Client(c));
        }
        assert_eq!(s.recent.len(), RECENT);
        assert_eq!(s.recent.last().map(|r| r.0), Some(Client(99)));
    }
}
