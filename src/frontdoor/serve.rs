//! `sparkctl frontdoor serve`: the proxy on the socket the supervisor handed down, the control
//! socket, and the watch over production — one process, restarted whole if it dies.

use std::os::unix::io::FromRawFd;
use std::sync::Arc;

use super::proxy::{self, Proxy};
use super::route::Route;
use super::watch::{self, Watch};
use super::{control, control_socket, Config, Door};
use crate::error::{Error, Result};
use crate::production::Production;

/// Runs until the process is stopped. `listen_fd` is the production port's socket.
pub async fn run(ctx: watch::Context, config: Config, listen_fd: i32) -> Result<()> {
    // SAFETY: the supervisor passed this descriptor, a bound listening TCP socket, to us.
    let std_listener = unsafe { std::net::TcpListener::from_raw_fd(listen_fd) };
    std_listener
        .set_nonblocking(true)
        .map_err(|e| Error::io("the production port's socket", e))?;
    let listener = tokio::net::TcpListener::from_std(std_listener)
        .map_err(|e| Error::io("the production port's socket", e))?;
    let production = Production::load(&ctx.state)?;
    // Serve what production.json names if it still runs; otherwise hold, and the watch
    // brings production back (after a reboot, or a crash of ours that took it along).
    let route = match production.serving() {
        Some(u) if super::alive(&ctx.runtimes, u).await => Route::Serving(u.clone()),
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
    let door = Arc::new(Door::new(ctx.state.clone(), config, production, route));
    let (unreachable_tx, unreachable_rx) = tokio::sync::mpsc::unbounded_channel();
    let proxy = Arc::new(Proxy::new(
        door.table.clone(),
        door.metrics.clone(),
        door.config.hold,
        api_key,
        unreachable_tx,
    ));
    let socket = control_socket(&ctx.state);
    let control = tokio::spawn({
        let door = door.clone();
        async move { control::serve(&socket, door).await }
    });
    tokio::spawn(proxy::serve(listener, proxy));
    let watcher = Watch::new(ctx, door.clone());
    tokio::select! {
        r = control => r.map_err(|e| Error::Failed(format!("control socket task: {e}")))?,
        r = watcher.run(unreachable_rx) => r,
    }
}
