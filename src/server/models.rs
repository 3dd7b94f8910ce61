//! `sparkctl frontdoor serve`: the front door's proxy and control socket, and a watch per
//! model beside them (`deploy::watch`): each model's production is looked at, restarted
//! and failed over on its own, so one model recovering never holds another's requests. A
//! model whose first production comes while the front door runs gets its watch then.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};
use tokio::task::JoinSet;

use super::watch::Watch;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::frontdoor::{Config, Launch};
use crate::production::Upstream;
use crate::server::route::Route;
use crate::server::{Door, Lanes};

/// `sparkctl frontdoor serve`: the front door's proxy and control socket, and the watches
/// beside them; returns when the server is told to stop (after its drain) or the watch
/// ends (the supervisor restarts the process).
pub(crate) async fn serve_frontdoor(
    mut ctx: Context,
    recipes_dir: PathBuf,
    config: Config,
    listen_fd: i32,
) -> Result<()> {
    let opened =
        crate::server::serve::open(&ctx.state, &ctx.runtimes, config, listen_fd, &recipes_dir)
            .await?;
    ctx.runtimes
        .process
        .defer_writes(opened.lanes.shared.deferred.clone());
    let launch = Launch::new(&ctx.self_exe, &recipes_dir, &ctx.lock_path);
    let state = ctx.state.clone();
    let lanes = opened.lanes.clone();
    opened
        .run(&state, &launch, move |unreachable, added| {
            every_model(Arc::new(ctx), recipes_dir, lanes, unreachable, added)
        })
        .await
}

/// Runs every model's watch until one ends: its error ends the front door's server (the
/// supervisor starts another), as the one watch's always did.
pub(crate) async fn every_model(
    ctx: Arc<Context>,
    recipes_dir: PathBuf,
    lanes: Arc<Lanes>,
    mut unreachable: UnboundedReceiver<Upstream>,
    mut added: UnboundedReceiver<Arc<Door>>,
) -> Result<()> {
    let mut tells: BTreeMap<String, (Arc<Door>, UnboundedSender<Upstream>)> = BTreeMap::new();
    let mut watches = JoinSet::new();
    let start = |door: Arc<Door>, watches: &mut JoinSet<Result<()>>| {
        let (tx, rx) = mpsc::unbounded_channel();
        let watch = Watch::new(ctx.clone(), recipes_dir.clone(), door.clone());
        watches.spawn(watch.run(rx));
        (door.model(), (door, tx))
    };
    for door in lanes.all() {
        let (m, tell) = start(door, &mut watches);
        tells.insert(m, tell);
    }
    loop {
        tokio::select! {
            Some(door) = added.recv() => {
                let (m, tell) = start(door, &mut watches);
                tells.insert(m, tell);
            }
            Some(u) = unreachable.recv() => {
                // Told to the model that routes to it.
                for (door, tx) in tells.values() {
                    if routes_to(door, &u) {
                        let _ = tx.send(u.clone());
                    }
                }
            }
            Some(ended) = watches.join_next() => {
                return ended.map_err(|e| Error::TaskLost {
                    what: crate::error::Task::ModelWatch,
                    cause: e.to_string(),
                })?;
            }
        }
    }
}

fn routes_to(door: &Door, u: &Upstream) -> bool {
    match door.table.route() {
        Route::Serving(now) | Route::Suspect(now) => now.deployment == u.deployment,
        Route::Holding | Route::Offline => false,
    }
}
