//! The watch over production, inside the front door: is the instance it routes to still
//! running, and generating? When not, requests are held, production is started again with
//! back-off, and after repeated failures the recipe's `fallback` serves instead. Every
//! recovery is a run record (`history`). Replaced productions kept warm are stopped when
//! their grace ends.
//!
//! It needs neither the state lock, nor the disk, nor the Docker Engine: a command that
//! holds the lock (an `up` benchmarking) does not stop it — a hold a running command asked
//! for is that command's, and a switch or hold made while the watch recovers wins over
//! the recovery; records that find the disk full are kept in memory and written later; a
//! process production or fallback is looked at and started without asking the engine.

mod demand;
mod sleep;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::judge::{Cause, Judge};
use crate::context::Context;
use crate::deploy::switch::{self, Hold, Plan};
use crate::deploy::{start, StartOptions, STOP_GRACE};
use crate::error::{Error, Result};
use crate::history::{Command, Outcome, RunRecord};
use crate::production::{Entry, Upstream};
use crate::runtime::ready::{health_now, Health, Liveness};
use crate::server::metrics::Event;
use crate::server::route::Route;
use crate::server::Door;

/// Between two looks at production.
const EVERY: Duration = Duration::from_secs(2);
/// Failed looks in a row before a running production is restarted.
const FAILED_LOOKS: u32 = 3;
/// A stream that sent nothing for this long while in flight, or a generation probe silent
/// this long: generation is stalled.
const STALLED: Duration = Duration::from_secs(60);
/// Attempts to start production again before the fallback.
const RESTARTS: u32 = 3;

pub(crate) struct Watch {
    ctx: Arc<Context>,
    /// Read again at each restart: production's recipe may have been fixed meanwhile.
    recipes_dir: PathBuf,
    door: Arc<Door>,
    client: reqwest::Client,
    /// Production judged on what it answers: live gates, golden prompts.
    judge: Judge,
}

enum Look {
    Fine,
    /// Its instance no longer runs: recover now.
    Gone(String),
    /// Running but not answering: recover after a few in a row.
    Failing(String),
    /// `/health` answers, but a one-token generation did not within its timeout: wedged,
    /// or busy with requests that did not come through the door (an `eval`, a client on
    /// the server's own port) on a server with no free slot. Recovered only once silent as
    /// long as a stalled stream: a busy server is not restarted under its clients.
    Silent(String),
}

impl Watch {
    pub(crate) fn new(ctx: Arc<Context>, recipes_dir: PathBuf, door: Arc<Door>) -> Watch {
        let client = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(Duration::from_secs(1))
            .build()
            .unwrap_or_default();
        Watch {
            judge: Judge::new(recipes_dir.clone(), door.clone()),
            ctx,
            recipes_dir,
            door,
            client,
        }
    }

    pub(crate) async fn run(
        self,
        mut unreachable: mpsc::UnboundedReceiver<Upstream>,
    ) -> Result<()> {
        let mut failed = 0u32;
        let mut silent_since: Option<Instant> = None;
        // A candidate the last front door left on trial, whose `up` is gone.
        self.stop_orphans().await;
        loop {
            tokio::select! {
                _ = unreachable.recv() => {}
                _ = self.door.demand.wake().notified() => {}
                _ = self.door.rollout.orphaned.notified() => self.stop_orphans().await,
                _ = tokio::time::sleep(self.door.demand.pause(EVERY)) => {}
            }
            // A command's `up --yes` asked this model to make room.
            if let Some(for_recipe) = self.door.demand.eviction_asked() {
                let r = self.evict_for_a_command(&for_recipe).await;
                self.door.demand.eviction_done(r);
            }
            // What a full disk kept back is written once there is room.
            if self.door.deferred.pending() > 0 {
                let deferred = self.door.deferred.clone();
                let _ = tokio::task::spawn_blocking(move || deferred.flush()).await;
            }
            self.expire_warm().await;
            match self.door.table.route() {
                Route::Serving(u) => match self.look(&u).await {
                    Look::Fine => {
                        failed = 0;
                        silent_since = None;
                        match self.judge.look(&u).await {
                            Some(cause) => self.recover_for(cause).await,
                            None => self.expire(&u).await,
                        }
                    }
                    Look::Gone(why) => self.recover(why).await,
                    Look::Silent(why) => {
                        let since = *silent_since.get_or_insert_with(Instant::now);
                        tracing::warn!(
                            "production {}: {why} (for {} s)",
                            u.recipe,
                            since.elapsed().as_secs()
                        );
                        if since.elapsed() >= STALLED {
                            silent_since = None;
                            self.recover(why).await;
                        }
                    }
                    Look::Failing(why) => {
                        failed += 1;
                        tracing::warn!("production {}: {why} ({failed} in a row)", u.recipe);
                        if failed >= FAILED_LOOKS {
                            failed = 0;
                            self.recover(why).await;
                        }
                    }
                },
                // It dropped a request it had taken: well, it serves again; not, at once
                // brought back (the requests wait meanwhile).
                Route::Suspect(u) => match self.look(&u).await {
                    Look::Fine => self.door.table.clear_suspicion(&u),
                    Look::Gone(why) | Look::Failing(why) | Look::Silent(why) => {
                        self.recover(why).await
                    }
                },
                // Unloaded (a model started on demand): started once a request waits.
                Route::Holding if self.door.demand.unloaded() => self.on_demand().await,
                // Holding with no command holding (none asked, or it died): production is
                // down, e.g. after a reboot.
                Route::Holding => {
                    if self.door.production().current.is_some() && !self.door.held_by_a_command() {
                        self.recover("nothing serves production".into()).await;
                    }
                }
                Route::Offline => {}
            }
        }
    }

    async fn look(&self, u: &Upstream) -> Look {
        let d = match self.ctx.runtimes.instance(&u.recipe, &u.deployment).await {
            Ok(Some(d)) => d,
            Ok(None) => {
                return Look::Gone(format!("{} ({}) no longer runs", u.recipe, u.deployment))
            }
            // The engine does not answer (dockerd restarting): what counts is whether
            // production does.
            Err(e) => {
                return match self.answers(u).await {
                    true => Look::Fine,
                    false => Look::Failing(format!(
                        "it does not answer, and the runtime cannot be asked: {e}"
                    )),
                }
            }
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
            // Asleep while routed to: its own idle sleep (llama-server's, which its next
            // request ends) is well; one the door must wake (vLLM's, left asleep by a door
            // that stopped) is woken, or its requests would wait for good.
            Liveness::Running(Health::Asleep) => match sleep::woken_by_requests(&d) {
                true => Look::Fine,
                false => match sleep::wake_routed(&self.ctx, u).await {
                    Ok(()) => Look::Fine,
                    Err(why) => Look::Failing(format!("asleep, and its wake failed: {why}")),
                },
            },
            Liveness::Exited(_) | Liveness::Created => Look::Gone(format!("{} exited", u.recipe)),
            Liveness::Running(h @ Health::GenerationSilent { .. }) => Look::Silent(h.to_string()),
            Liveness::Running(h) => Look::Failing(h.to_string()),
        }
    }

    /// Whether `u` answers its health probe, asked directly.
    async fn answers(&self, u: &Upstream) -> bool {
        let probe = self
            .client
            .get(format!("{}/health", u.url))
            .timeout(Duration::from_secs(2))
            .send()
            .await;
        probe.is_ok_and(|r| r.status().is_success())
    }

    /// Holds requests and brings production back: the same recipe, with back-off, then its
    /// fallback. A command that holds production (a swap in progress) is left to it, and a
    /// command's switch or hold made meanwhile ends the recovery.
    async fn recover(&self, why: String) {
        self.recover_for(Cause::dead(why)).await
    }

    async fn recover_for(&self, cause: Cause) {
        let why = cause.why.clone();
        let production = self.door.production();
        let Some(current) = production.current.clone() else {
            return;
        };
        // Unloaded on purpose (its ttl, or evicted while this look ran): not a failure.
        if self.door.held_by_a_command() || self.door.demand.unloaded() {
            return;
        }
        // A production that still answers finishes what it took: no client sees a failure.
        let drain = match cause.drain {
            true => self.door.config.drain,
            false => Duration::ZERO,
        };
        self.door.hold(drain, None).await;
        let generation = self.door.generation();
        tracing::warn!("production {} needs recovering: {why}", current.recipe);
        let began = Instant::now();
        let wedged = current.upstream.clone();
        let mut backoff = Duration::from_secs(1);
        let mut last_error = String::new();
        let restarts = if cause.fallback_now { 0 } else { RESTARTS };
        for attempt in 1..=restarts {
            if self.door.generation() != generation {
                return;
            }
            // One start at a time with the other models' (each plans beside what runs).
            let started = {
                let _one_at_a_time = self.door.starting.lock().await;
                self.start_recipe(&current.recipe, wedged.as_ref()).await
            };
            match started {
                Ok(up) => {
                    let recipe = current.recipe.clone();
                    let switched = self.door.recover_to(generation, |next| {
                        if let Some(e) = next.current.as_mut().filter(|e| e.recipe == recipe) {
                            e.upstream = Some(up.clone());
                        }
                    });
                    let what = (Command::Restart, current.recipe.as_str(), &up);
                    self.finish(switched.await.is_ok(), what, &cause, began, attempt)
                        .await;
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
        if self.door.generation() != generation {
            return;
        }
        let why = match restarts {
            0 => format!("{why}; it was restarted for this already"),
            n => format!(
                "{why}; {n} restarts of {} failed: {last_error}",
                current.recipe
            ),
        };
        let cause = Cause { why, ..cause };
        self.fail_over(&current.recipe, &cause, generation, began)
            .await;
        // Replaced for what it answered, it still runs: stopped (its logs are kept).
        if let (true, Some(w)) = (cause.drain, wedged) {
            let routed = self.door.status().upstream;
            if routed.is_some_and(|r| r.deployment != w.deployment) {
                if let Ok(Some(d)) = self.ctx.runtimes.instance(&w.recipe, &w.deployment).await {
                    let _ = self.ctx.runtimes.stop(&d, STOP_GRACE).await;
                }
            }
        }
    }

    /// The recipe's fallback serves instead (a running one that answers, or one started).
    async fn fail_over(&self, recipe: &str, cause: &Cause, generation: u64, began: Instant) {
        let fallback = crate::recipe::load_dir(&self.recipes_dir)
            .ok()
            .and_then(|set| set.get(recipe).ok().and_then(|l| l.recipe.fallback.clone()));
        let mut why = cause.why.clone();
        if let Some(fb) = fallback {
            let started = {
                let _one_at_a_time = self.door.starting.lock().await;
                self.start_pinned(&fb, None).await
            };
            match started {
                Ok((up, image)) => {
                    let entry = Entry {
                        recipe: fb.clone(),
                        since: crate::units::now_utc(),
                        run_id: None,
                        bench: None,
                        upstream: Some(up.clone()),
                        image,
                        pin_move: None,
                    };
                    let switched = self
                        .door
                        .recover_to(generation, |next| {
                            // A warm fallback serves now: its grace must not stop it.
                            next.warm.retain(|w| w.upstream.deployment != up.deployment);
                            next.promote(entry)
                        })
                        .await;
                    if switched.is_ok() {
                        self.door.metrics.event(Event::Failover);
                    }
                    self.finish(
                        switched.is_ok(),
                        (Command::Failover, &fb, &up),
                        cause,
                        began,
                        1,
                    )
                    .await;
                    return;
                }
                Err(e) => why = format!("{why}; fallback {fb}: {e}"),
            }
        }
        let mut record = RunRecord::new(Command::Restart, recipe);
        record.outcome = Outcome::Failed;
        cause.record(&mut record);
        record.error = Some(format!("{why}; could not bring production back"));
        record.finished_at = crate::units::now_utc();
        self.save(&record);
    }

    /// Records a recovery; when a command's change overtook it, what it started is stopped
    /// again (it started it; nothing routes to it).
    async fn finish(
        &self,
        switched: bool,
        (command, recipe, up): (Command, &str, &Upstream),
        cause: &Cause,
        began: Instant,
        attempts: u32,
    ) {
        if !switched {
            tracing::warn!("recovery of {recipe} overtaken by a command's switch; leaving it");
            let routed = self.door.status().upstream;
            if routed.is_none_or(|r| r.deployment != up.deployment) {
                if let Ok(Some(d)) = self.ctx.runtimes.instance(recipe, &up.deployment).await {
                    let _ = self.ctx.runtimes.stop(&d, STOP_GRACE).await;
                }
            }
            return;
        }
        if command == Command::Restart {
            self.door.metrics.event(Event::Restart);
        }
        let mut record = RunRecord::new(command, recipe);
        record.outcome = Outcome::Recovered;
        cause.record(&mut record);
        record.error = Some(format!(
            "{} (back after {:.1} s, attempt {attempts})",
            cause.why,
            began.elapsed().as_secs_f64()
        ));
        record.serving = self
            .door
            .status()
            .upstream
            .map(|u| format!("{} ({})", u.recipe, u.deployment));
        record.finished_at = crate::units::now_utc();
        self.save(&record);
    }

    /// A run record, kept in memory while the disk is full.
    fn save(&self, record: &RunRecord) {
        if let Ok(path) = self.ctx.state.run_record_file(&record.run_id) {
            if let Err(e) = self.door.deferred.write_json(&path, record) {
                tracing::warn!("run record of the watch: {e}");
            }
        }
    }

    /// `name` serving on its own port: a running instance that answers is taken as it is;
    /// otherwise `wedged` (the instance production named, if it still runs) is stopped and
    /// a new one started, waited for until it serves.
    async fn start_recipe(&self, name: &str, wedged: Option<&Upstream>) -> Result<Upstream> {
        Ok(self.start_pinned(name, wedged).await?.0)
    }

    /// As `start_recipe`, with the pin a new instance runs (None: taken as it was, or no
    /// pin). Production's own recipe starts at the digest its entry records, not at
    /// images.lock's pin: after a rollback the two differ, and what served is what serves.
    async fn start_pinned(
        &self,
        name: &str,
        wedged: Option<&Upstream>,
    ) -> Result<(Upstream, Option<crate::lock::Pin>)> {
        let set = crate::recipe::load_dir(&self.recipes_dir)?;
        let loaded = set.get(name)?;
        let running = self.ctx.runtimes.find(name).await?.filter(|d| d.running());
        if let Some(d) = running {
            let is_wedged = wedged.is_some_and(|w| w.deployment == d.id);
            let well = matches!(
                health_now(&self.client, &d).await,
                Liveness::Running(Health::Ready | Health::Asleep)
            );
            if !is_wedged && well {
                return Ok((switch::upstream_of(&d), None));
            }
            if is_wedged {
                self.ctx.runtimes.stop(&d, STOP_GRACE).await?;
            }
        }
        let image = (self.door.production().current)
            .filter(|e| e.recipe == name)
            .and_then(|e| e.image);
        let lock = crate::lock::Lock::load(&self.ctx.lock_path)?.with_image(name, image.as_ref());
        let opts = StartOptions {
            lock: &lock,
            // What served before may have been unpinned; leaving production dark is worse.
            allow_unpinned: true,
            replacing: None,
        };
        let mut plan = Plan::new(&self.ctx, loaded, &opts).await?;
        self.make_room(name, &mut plan).await?;
        let report = start(&self.ctx.runtimes, &plan.start, None, |_| {}).await?;
        Ok((switch::upstream_of(&report.deployment), plan.start.pin))
    }

    /// Makes the room the switch plan names (requests are held already) — unless a command
    /// is running (it holds the state lock): what it runs (a candidate under test) is not
    /// the watch's to stop.
    async fn make_room(&self, name: &str, plan: &mut Plan) -> Result<()> {
        if plan.start.memory.must_stop.is_empty() {
            return Ok(());
        }
        let Ok(_state_lock) = self.ctx.state.lock("frontdoor watch: making room") else {
            return Err(Error::Failed(format!(
                "{name} needs {} stopped first, which a running command uses",
                plan.start.memory.must_stop.join(", ")
            )));
        };
        let log = crate::progress::ToLog;
        switch::make_room(&self.ctx.runtimes, plan, Hold::Held, None, &log).await
    }

    /// Stops the candidates of rollouts whose `up` died before it ended them: the way back
    /// of a SIGKILLed `up --shadow/--canary`, which nobody else runs.
    async fn stop_orphans(&self) {
        let mut gone = self.door.rollout.orphans(self.door.config.drain).await;
        // A rollout the front door lost (it restarted) whose `up` is gone too.
        let lost = self.door.production().candidate;
        if let Some(c) = lost.filter(|_| self.door.rollout.get().is_none()) {
            if !c.owner.is_some_and(|o| o.alive()) {
                gone.push(c.upstream);
            }
        }
        for c in gone {
            if let Ok(Some(d)) = self.ctx.runtimes.instance(&c.recipe, &c.deployment).await {
                if d.running() {
                    let _ = self.ctx.runtimes.stop(&d, STOP_GRACE).await;
                }
            }
            let _ = self.door.forget_candidate().await;
            crate::server::say!(
                "rollout of {}: its `up` ended without a decision; the candidate was stopped",
                c.recipe
            );
        }
    }

    /// Stops replaced productions whose grace is over.
    async fn expire_warm(&self) {
        let now = crate::units::unix_now().as_secs();
        let production = self.door.production();
        if !production.warm.iter().any(|w| w.until <= now) {
            return;
        }
        // A rollback may be switching back to one right now.
        let Ok(_state_lock) = self
            .ctx
            .state
            .lock("frontdoor watch: stopping a warm production")
        else {
            return;
        };
        let mut next = production.clone();
        next.warm.retain(|w| w.until > now);
        let serving = production.serving().map(|u| u.deployment.clone());
        for w in production
            .warm
            .iter()
            .filter(|w| w.until <= now && Some(&w.upstream.deployment) != serving.as_ref())
        {
            let (recipe, id) = (&w.upstream.recipe, &w.upstream.deployment);
            if let Ok(Some(d)) = self.ctx.runtimes.instance(recipe, id).await {
                if d.running() {
                    let _ = self.ctx.runtimes.stop(&d, STOP_GRACE).await;
                }
            }
        }
        let _ = self.door.update(next).await;
    }
}
