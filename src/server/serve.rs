//! `sparkctl frontdoor serve`: the proxy on the socket the supervisor handed down and the
//! control socket, both through one accept loop (`accept`), with the watch over production
//! (`deploy::watch`) beside them. SIGTERM ends it gracefully: no new connection, the
//! answers in flight finish within the drain time. A supervisor that dies is replaced by
//! one that adopts this server, so it stays stoppable and restartable.

use std::future::Future;
use std::os::unix::io::FromRawFd;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::watch;

use super::accept::{Conns, Limits};
use super::demand::{Load, Unloaded};
use super::proxy::{self, Proxy};
use super::route::Route;
use super::{control, Door, Lanes, Shared};
use crate::error::{Error, Result};
use crate::frontdoor::{control_socket, handover, Config, Launch};
use crate::host::ProcessId;
use crate::production::Upstream;
use crate::runtime::Runtimes;
use crate::state::StateDir;

/// How long a request's head may take (and an idle kept-alive connection may wait).
const HEADER_TIMEOUT: Duration = Duration::from_secs(15);
/// Control-socket connections at once (the CLI opens one per call).
const CONTROL_CONNECTIONS: usize = 64;

/// The serving front door: every model's lane, the lanes added later and what its proxy
/// reports of upstreams that did not answer (for the watch), and how to end it.
pub(crate) struct Opened {
    pub(in crate::server) lanes: Arc<Lanes>,
    added: UnboundedReceiver<Arc<Door>>,
    unreachable: UnboundedReceiver<Upstream>,
    stop: watch::Sender<bool>,
    proxy_conns: Conns,
    listen_fd: i32,
    /// Each key's use, written at the stop.
    quota: Arc<super::quota::Quota>,
}

/// Starts proxying on `listen_fd` (the production port's socket) and answering the control
/// socket; they run until `Opened::run` ends them.
pub(crate) async fn open(
    state: &StateDir,
    runtimes: &Runtimes,
    config: Config,
    listen_fd: i32,
    recipes_dir: &std::path::Path,
) -> Result<Opened> {
    let fd_limit = handover::raise_fd_limit();
    super::body::tune_allocator();
    if !handover::is_listening_socket(listen_fd) {
        return Err(super::supervisor::not_listening(listen_fd));
    }
    // What this process starts (a production process, a supervisor) never gets it by
    // accident: only a supervisor taking over, on purpose.
    handover::set_cloexec(listen_fd, true);
    // SAFETY: the supervisor passed this descriptor, a listening TCP socket, to us.
    let std_listener = unsafe { std::net::TcpListener::from_raw_fd(listen_fd) };
    std_listener
        .set_nonblocking(true)
        .map_err(|e| Error::io("the production port's socket", e))?;
    let listener = tokio::net::TcpListener::from_std(std_listener)
        .map_err(|e| Error::io("the production port's socket", e))?;
    let mut book = crate::production::Book::load(state)?;
    let recipes = crate::recipe::load_dir(recipes_dir).ok();
    if let Some(recipes) = &recipes {
        crate::models::settle(&mut book, recipes);
        // Served as production.json says all the same: the next `up` refuses until fixed.
        if let Err(e) = crate::models::check(&book, recipes) {
            super::say!("production.json: {e}");
        }
    }
    // Serve what production.json names if it still runs; otherwise hold, and the watch
    // brings production back (after a reboot, or a crash of ours that took it along) —
    // or, one of several models (or one with a ttl) not preloaded, when a request names it.
    let several = crate::models::served(&book).len() > 1;
    let mut routes = Vec::new();
    for (model, production) in book.lanes() {
        let settings = (production.current.as_ref())
            .and_then(|e| recipes.as_ref()?.get(&e.recipe).ok())
            .map(|l| crate::recipe::serve::of(&l.recipe))
            .unwrap_or_default();
        let lazy = !settings.eager() && (several || settings.ttl.is_some());
        let (route, load) = match production.serving() {
            Some(u) if crate::frontdoor::alive(runtimes, u).await => {
                (Route::Serving(u.clone()), Load::Loaded)
            }
            Some(_) if lazy => (Route::Holding, Load::Unloaded(Unloaded::Boot)),
            Some(_) => (Route::Holding, Load::Loaded),
            None => (Route::Offline, Load::Loaded),
        };
        routes.push((model, route, load));
    }
    config.refuse_open()?;
    let limits = Limits {
        connections: config
            .max_connections
            .unwrap_or_else(|| handover::connection_cap(fd_limit)),
        header_timeout: HEADER_TIMEOUT,
        send_timeout: config.send_timeout,
    };
    super::say!(
        "front door server pid {} serving {}:{} → {} (at most {} connections at once)",
        std::process::id(),
        config.host,
        config.port,
        described(&routes),
        limits.connections
    );
    let access = super::key::Access::new(config.api_key()?, state);
    let quota = access.quota.clone();
    let shared = Arc::new(Shared::new(state.clone(), config, book));
    let (lanes, added) = Lanes::open(shared, routes, recipes_dir.to_path_buf());
    let door = lanes.primary();
    let (unreachable_tx, unreachable_rx) = tokio::sync::mpsc::unbounded_channel();
    let proxy = Arc::new(Proxy::new(
        lanes.clone(),
        door.metrics.clone(),
        door.live.clone(),
        door.capture.clone(),
        door.config.hold,
        access,
        unreachable_tx,
    ));
    let (stop, stopped) = watch::channel(false);
    let socket = control_socket(state);
    let control_limits = Limits {
        connections: CONTROL_CONNECTIONS,
        header_timeout: HEADER_TIMEOUT,
        send_timeout: door.config.send_timeout,
    };
    control::listen(&socket, lanes.clone(), control_limits, stopped.clone())?;
    tokio::spawn(super::page::sample(door.clone(), stopped.clone()));
    tokio::spawn(quota.clone().keep_written(stopped.clone()));
    let proxy_conns = Conns::new(limits.connections);
    tokio::spawn(proxy::serve(
        listener,
        proxy,
        limits,
        proxy_conns.clone(),
        stopped,
    ));
    Ok(Opened {
        lanes,
        added,
        unreachable: unreachable_rx,
        stop,
        proxy_conns,
        listen_fd,
        quota,
    })
}

impl Opened {
    /// Runs `watch` beside the proxy until SIGTERM/SIGINT (then drains and returns Ok) or
    /// until the watch ends (its error ends the process; the supervisor starts another).
    pub(crate) async fn run<W, F>(self, state: &StateDir, launch: &Launch, watch: W) -> Result<()>
    where
        W: FnOnce(UnboundedReceiver<Upstream>, UnboundedReceiver<Arc<Door>>) -> F,
        F: Future<Output = Result<()>> + Send + 'static,
    {
        let Opened {
            lanes,
            added,
            unreachable,
            stop,
            proxy_conns,
            listen_fd,
            quota,
        } = self;
        let watching = tokio::spawn(watch(unreachable, added));
        let supervised = tokio::spawn(stay_supervised(
            state.clone(),
            launch.clone(),
            listen_fd,
            stop.subscribe(),
        ));
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .map_err(|e| Error::io("cannot watch signals", e))?;
        let ended = tokio::select! {
            r = watching => Some(r),
            _ = terminate.recv() => None,
            _ = tokio::signal::ctrl_c() => None,
        };
        if let Some(r) = ended {
            supervised.abort();
            return r.map_err(|e| Error::TaskLost {
                what: crate::error::Task::DoorWatch,
                cause: e.to_string(),
            })?;
        }
        // No new connection from here; what is being answered finishes.
        let _ = stop.send(true);
        let (open, busy) = proxy_conns.counts();
        super::say!(
            "front door server pid {} draining: {busy} answers in flight, {open} connections",
            std::process::id()
        );
        let deadline = tokio::time::Instant::now() + lanes.shared.config.drain;
        let left = proxy_conns.drained(deadline).await;
        quota.flush();
        super::say!(
            "front door server pid {} done{}",
            std::process::id(),
            if left > 0 {
                format!(": {left} connections still open after the drain time")
            } else {
                String::new()
            }
        );
        Ok(())
    }
}

/// Where each model's requests go, for the log.
fn described(routes: &[(String, Route, Load)]) -> String {
    let one = |route: &Route| match route {
        Route::Serving(u) | Route::Suspect(u) => {
            format!("{} ({}, {})", u.recipe, u.deployment, u.url)
        }
        Route::Holding => "nothing yet (holding while production comes back)".into(),
        Route::Offline => "nothing: there is no production yet".into(),
    };
    match routes {
        [] => one(&Route::Offline),
        [(_, route, _)] => one(route),
        several => (several.iter())
            .map(|(m, route, load)| {
                (
                    m,
                    if *load == Load::Loaded {
                        one(route)
                    } else {
                        "nothing until a request names it".into()
                    },
                )
            })
            .map(|(m, route)| match m.as_str() {
                crate::models::UNNAMED => format!("the unnamed model: {route}"),
                m => format!("model {m}: {route}"),
            })
            .collect::<Vec<_>>()
            .join("; "),
    }
}

/// Checks that this server's supervisor lives; when it died (SIGKILL), starts a new one
/// that adopts this server and the socket, so `frontdoor stop` finds it and a crash of
/// this server is restarted again. Ends when the server stops.
async fn stay_supervised(
    state: StateDir,
    launch: Launch,
    listen_fd: i32,
    mut stopping: watch::Receiver<bool>,
) {
    // SAFETY: getppid cannot fail.
    let Some(mut supervisor) = ProcessId::of(unsafe { libc::getppid() } as u32) else {
        return;
    };
    loop {
        tokio::select! {
            _ = supervisor.ended() => {}
            changed = stopping.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
        if *stopping.borrow() {
            return;
        }
        if supervisor.alive() {
            continue;
        }
        let me = std::process::id().to_string();
        let mut cmd = launch.command(
            &state,
            &[
                "run",
                "--listen-fd",
                &listen_fd.to_string(),
                "--server",
                &me,
            ],
        );
        cmd.stdin(std::process::Stdio::null());
        {
            use std::os::unix::process::CommandExt;
            // SAFETY: `inherit` only calls fcntl, which is async-signal-safe.
            unsafe { cmd.pre_exec(handover::inherit(listen_fd)) };
        }
        match tokio::process::Command::from(cmd).spawn() {
            Ok(child) => {
                let pid = child.id().unwrap_or_default();
                super::say!(
                    "the front door's supervisor pid {} is gone; pid {pid} took over",
                    supervisor.pid
                );
                // Reaped when it ends, so that its end is seen (a zombie is not alive).
                tokio::spawn(async move {
                    let mut child = child;
                    let _ = child.wait().await;
                });
                match ProcessId::of(pid) {
                    Some(p) => supervisor = p,
                    None => continue,
                }
            }
            Err(e) => {
                super::say!("the supervisor is gone and a new one did not start: {e}");
                // Not again at once: a spawn that failed would fail in a loop.
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}
