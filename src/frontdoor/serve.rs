//! `sparkctl frontdoor serve`: the proxy on the socket the supervisor handed down and the
//! control socket. The watch over production (`deploy::watch`) runs beside them in the same
//! process, restarted whole if it dies.

use std::os::unix::io::FromRawFd;
use std::sync::Arc;

use tokio::sync::mpsc::UnboundedReceiver;
use tokio::task::JoinHandle;

use super::proxy::{self, Proxy};
use super::route::Route;
use super::{control, control_socket, Config, Door};
use crate::error::{Error, Result};
use crate::production::{Production, Upstream};
use crate::runtime::Runtimes;
use crate::state::StateDir;

/// The serving front door: its shared state, what its proxy reports of upstreams that did
/// not answer (for the watch), and its control socket's task.
pub struct Opened {
    pub door: Arc<Door>,
    pub unreachable: UnboundedReceiver<Upstream>,
    pub control: JoinHandle<Result<()>>,
}

/// Starts proxying on `listen_fd` (the production port's socket) and answering the control
/// socket; they run until the process ends.
pub async fn open(
    state: &StateDir,
    runtimes: &Runtimes,
    config: Config,
    listen_fd: i32,
) -> Result<Opened> {
    // SAFETY: the supervisor passed this descriptor, a bound listening TCP socket, to us.
    let std_listener = unsafe { std::net::TcpListener::from_raw_fd(listen_fd) };
    std_listener
        .set_nonblocking(true)
        .map_err(|e| Error::io("the production port's socket", e))?;
    let listener = tokio::net::TcpListener::from_std(std_listener)
        .map_err(|e| Error::io("the production port's socket", e))?;
    let production = Production::load(state)?;
    // Serve what production.json names if it still runs; otherwise hold, and the watch
    // brings production back (after a reboot, or a crash of ours that took it along).
    let route = match production.serving() {
        Some(u) if super::alive(runtimes, u).await => Route::Serving(u.clone()),
        Some(_) => Route::Holding,
        None => Route::Offline,
    };
    super::say!(
        "front door serving {}:{} → {}",
        config.host,
        config.port,
        match &route {
            Route::Serving(u) => format!("{} ({}, {})", u.recipe, u.deployment, u.url),
            Route::Holding => "nothing yet (holding while production comes back)".into(),
            Route::Offline => "nothing: there is no production yet".into(),
        }
    );
    let api_key = super::api_key()?;
    let door = Arc::new(Door::new(state.clone(), config, production, route));
    let (unreachable_tx, unreachable_rx) = tokio::sync::mpsc::unbounded_channel();
    let proxy = Arc::new(Proxy::new(
        door.table.clone(),
        door.metrics.clone(),
        door.config.hold,
        api_key,
        unreachable_tx,
    ));
    let socket = control_socket(state);
    let control = tokio::spawn({
        let door = door.clone();
        async move { control::serve(&socket, door).await }
    });
    tokio::spawn(proxy::serve(listener, proxy));
    Ok(Opened {
        door,
        unreachable: unreachable_rx,
        control,
    })
}
