//! The watch over production, inside the front door: is the instance it routes to still
//! running, and generating? When not, requests are held, production is started again with
//! back-off, and after repeated failures the recipe's `fallback` serves instead. Every
//! recovery is a run record (`history`). Replaced productions kept warm are stopped when
//! their grace ends.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::{plan_start, start, StartOptions, STOP_GRACE};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::frontdoor::metrics::Event;
use crate::frontdoor::route::Route;
use crate::frontdoor::{Config, Door};
use crate::history::{Command, Outcome, RunRecord};
use crate::production::{Entry, Production, Upstream};
use crate::runtime::ready::{health_now, Health, Liveness};

/// Between two looks at production.
const EVERY: Duration = Duration::from_secs(2);
/// Failed looks in a row before a running production is restarted.
const FAILED_LOOKS: u32 = 3;
/// A stream that sent nothing for this long while in flight: generation is stalled.
const STALLED: Duration = Duration::from_secs(60);
/// Attempts to start production again before the fallback.
const RESTARTS: u32 = 3;

/// `sparkctl frontdoor serve`: the front door's proxy and control socket, and this watch
/// beside them; returns when one of them ends (the supervisor restarts the process).
pub async fn serve_frontdoor(
    ctx: Context,
    recipes_dir: PathBuf,
    config: Config,
    listen_fd: i32,
) -> Result<()> {
    let opened =
        crate::frontdoor::serve::open(&ctx.state, &ctx.runtimes, config, listen_fd).await?;
    let watch = Watch::new(ctx, recipes_dir, opened.door);
    tokio::select! {
        r = opened.control => r.map_err(|e| Error::Failed(format!("control socket task: {e}")))?,
        r = watch.run(opened.unreachable) => r,
    }
}

pub struct Watch {
    ctx: Context,
    /// Read again at each restart: production's recipe may have been fixed meanwhile.
    recipes_dir: PathBuf,
    door: Arc<Door>,
    client: reqwest::Client,
}

impl Watch {
    pub fn new(ctx: Context, recipes_dir: PathBuf, door: Arc<Door>) -> Watch {
        let client = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(Duration::from_secs(1))
            .build()
            .unwrap_or_default();
        Watch {
            ctx,
            recipes_dir,
            door,
            client,
        }
    }

    pub async fn run(self, mut unreachable: mpsc::UnboundedReceiver<Upstream>) -> Result<()> {
        let mut failed = 0u32;
        loop {
            tokio::select! {
                _ = unreachable.recv() => {}
                _ = tokio::time::sleep(EVERY) => {}
            }
            self.expire_warm().await;
            match self.door.table.route() {
                Route::Serving(u) => match self.look(&u).await {
                    Look::Fine => failed = 0,
                    Look::Gone(why) => self.recover(why).await,
                    Look::Failing(why) => {
                        failed += 1;
                        tracing::warn!("production {}: {why} ({failed} in a row)", u.recipe);
                        if failed >= FAILED_LOOKS {
                            failed = 0;
                            self.recover(why).await;
                        }
                    }
                },
                // Holding with nobody switching (no CLI command holds the state lock):
                // production is down, e.g. after a reboot.
                Route::Holding => {
                    if self.door.production().current.is_some() {
                        self.recover("nothing serves production".into()).await;
                    }
                }
                Route::Offline => {}
            }
        }
    }

    async fn look(&self, u: &Upstream) -> Look {
        let d = match self.ctx.runtimes.find(&u.recipe).await {
            Ok(Some(d)) if d.id == u.deployment => d,
            Ok(_) => return Look::Gone(format!("{} ({}) no longer runs", u.recipe, u.deployment)),
            Err(e) => return Look::Failing(format!("cannot ask the runtime: {e}")),
        };
        if !d.running() {
            return Look::Gone(format!("{} exited", u.recipe));
        }
        // While its answers are streaming, they are the probe (an extra request would wait
        // behind them on a one-slot server and look like a hang).
        let busy = self
            .door
            .table
            .counts()
            .1
            .get(&u.deployment)
            .copied()
            .unwrap_or(0);
        if busy > 0 {
            return match self.door.metrics.quiet_for(&u.recipe) {
                Some(q) if q > STALLED => Look::Failing(format!(
                    "{busy} requests in flight and nothing streamed for {} s: generation stalled",
                    q.as_secs()
                )),
                _ => Look::Fine,
            };
        }
        match health_now(&self.client, &d).await {
            Liveness::Running(Health::Ready) => Look::Fine,
            Liveness::Exited(_) | Liveness::Created => Look::Gone(format!("{} exited", u.recipe)),
            Liveness::Running(h) => Look::Failing(h.to_string()),
        }
    }

    /// Holds requests and brings production back: the same recipe, with back-off, then its
    /// fallback. A CLI command in progress owns production meanwhile: then nothing is done.
    async fn recover(&self, why: String) {
        let Ok(_lock) = self
            .ctx
            .state
            .lock("frontdoor watch: recovering production")
        else {
            return;
        };
        let production = self.door.production();
        let Some(current) = production.current.clone() else {
            return;
        };
        self.door.hold(std::time::Duration::ZERO).await;
        tracing::warn!("production {} needs recovering: {why}", current.recipe);
        let began = Instant::now();
        let mut backoff = Duration::from_secs(1);
        let mut last_error = String::new();
        for attempt in 1..=RESTARTS {
            match self.start_recipe(&current.recipe).await {
                Ok(up) => {
                    let mut next = production.clone();
                    if let Some(e) = next.current.as_mut() {
                        e.upstream = Some(up);
                    }
                    self.finish(
                        next,
                        Command::Restart,
                        &current.recipe,
                        &why,
                        began,
                        attempt,
                    )
                    .await;
                    self.door.metrics.event(Event::Restart);
                    return;
                }
                Err(e) => {
                    last_error = e.to_string();
                    tracing::warn!("restart {attempt} of {}: {last_error}", current.recipe);
                    tokio::time::sleep(backoff).await;
                    backoff *= 2;
                }
            }
        }
        let fallback = crate::recipe::load_dir(&self.recipes_dir)
            .ok()
            .and_then(|set| {
                set.get(&current.recipe)
                    .ok()
                    .and_then(|l| l.recipe.fallback.clone())
            });
        if let Some(fb) = fallback {
            match self.start_recipe(&fb).await {
                Ok(up) => {
                    let mut next = production.clone();
                    next.promote(Entry {
                        recipe: fb.clone(),
                        since: crate::units::now_utc(),
                        run_id: None,
                        bench: None,
                        upstream: Some(up),
                    });
                    let why = format!(
                        "{why}; {RESTARTS} restarts of {} failed: {last_error}",
                        current.recipe
                    );
                    self.finish(next, Command::Failover, &fb, &why, began, 1)
                        .await;
                    self.door.metrics.event(Event::Failover);
                    return;
                }
                Err(e) => last_error = format!("{last_error}; fallback {fb}: {e}"),
            }
        }
        let mut record = RunRecord::new(Command::Restart, &current.recipe);
        record.outcome = Outcome::Failed;
        record.error = Some(format!(
            "{why}; could not bring production back: {last_error}"
        ));
        record.finished_at = crate::units::now_utc();
        let _ = record.save(&self.ctx.state);
    }

    async fn finish(
        &self,
        next: Production,
        command: Command,
        recipe: &str,
        why: &str,
        began: Instant,
        attempts: u32,
    ) {
        let mut record = RunRecord::new(command, recipe);
        match self.door.switch(next, Duration::ZERO).await {
            Ok(_) => record.outcome = Outcome::Recovered,
            Err(e) => {
                record.outcome = Outcome::Failed;
                record.error = Some(format!("switching to the restarted instance: {e}"));
            }
        }
        record.error.get_or_insert(format!(
            "{why} (back after {:.1} s, attempt {attempts})",
            began.elapsed().as_secs_f64()
        ));
        record.serving = self
            .door
            .status()
            .upstream
            .map(|u| format!("{} ({})", u.recipe, u.deployment));
        record.finished_at = crate::units::now_utc();
        let _ = record.save(&self.ctx.state);
    }

    /// Starts `name` on its own port (stopping a wedged instance of it first) and waits
    /// until it serves.
    async fn start_recipe(&self, name: &str) -> Result<Upstream> {
        let set = crate::recipe::load_dir(&self.recipes_dir)?;
        let loaded = set.get(name)?;
        if let Some(d) = self.ctx.runtimes.find(name).await?.filter(|d| d.running()) {
            self.ctx.runtimes.stop(&d, STOP_GRACE).await?;
        }
        let lock = crate::lock::Lock::load(&self.ctx.lock_path)?;
        let opts = StartOptions {
            lock: &lock,
            // What served before may have been unpinned; leaving production dark is worse.
            allow_unpinned: true,
        };
        let plan = plan_start(&self.ctx, loaded, &opts).await?;
        if !plan.memory.fits {
            return Err(Error::Failed(format!(
                "{name} does not fit in memory: {}",
                plan.memory.describe()
            )));
        }
        for victim in &plan.memory.must_stop {
            if let Some(d) = self
                .ctx
                .runtimes
                .find(victim)
                .await?
                .filter(|d| d.running())
            {
                self.ctx.runtimes.stop(&d, STOP_GRACE).await?;
            }
        }
        let report = start(&self.ctx.runtimes, &plan, None, |_| {}).await?;
        let d = report.deployment;
        Ok(Upstream {
            recipe: d.name.clone(),
            deployment: d.id.clone(),
            url: d.url(),
        })
    }

    /// Stops replaced productions whose grace is over.
    async fn expire_warm(&self) {
        let now = crate::units::unix_now().as_secs();
        let production = self.door.production();
        if !production.warm.iter().any(|w| w.until <= now) {
            return;
        }
        let Ok(_lock) = self
            .ctx
            .state
            .lock("frontdoor watch: stopping a warm production")
        else {
            return;
        };
        let mut next = production.clone();
        next.warm.retain(|w| w.until > now);
        for w in production.warm.iter().filter(|w| w.until <= now) {
            if let Ok(Some(d)) = self.ctx.runtimes.find(&w.upstream.recipe).await {
                if d.running() && d.id == w.upstream.deployment {
                    let _ = self.ctx.runtimes.stop(&d, STOP_GRACE).await;
                }
            }
        }
        let _ = self.door.update(next).await;
    }
}

enum Look {
    Fine,
    /// Its instance no longer runs: recover now.
    Gone(String),
    /// Running but not answering: recover after a few in a row.
    Failing(String),
}
