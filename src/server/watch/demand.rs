//! A model's server on demand, from its watch: started by the one switch plan when a
//! request waits for it (unloaded since the front door started, after its `ttl`, or evicted
//! for room), and stopped when it has been idle past its `ttl`. Its requests wait in its
//! own queue meanwhile; the other models' lanes are not touched — unless the start does not
//! fit beside them: then the idle ones are evicted, least recently used first, by what they
//! measurably hold, never one with a request in flight or waiting, one marked `keep`, or
//! one a command holds; the floor is never crossed.

use std::time::{Duration, Instant};

use super::Watch;
use crate::context::Context;
use crate::deploy::memory_beside;
use crate::error::Error;
use crate::production::Upstream;
use crate::server::demand::{Load, Unloaded};
use crate::server::route::Route;
use crate::server::Door;
use crate::units::format_duration;

/// Why a start on demand cannot be made now.
enum NoRoom {
    /// The models in the way are busy (or a command holds the state): their requests
    /// finish first, and the next look tries again; the waiting requests keep waiting.
    Busy(String),
    /// It cannot start, whatever stops: a start that failed.
    Never(Error),
}

impl Watch {
    /// The name clients send for this model, for the log and the metrics.
    pub(super) fn model_name(&self) -> String {
        model_name(&self.door)
    }

    /// An unloaded model: started once a request waits for it (unless a command holds it,
    /// or a start just failed).
    pub(super) async fn on_demand(&self) {
        let Load::Unloaded(was) = self.door.demand.load() else {
            return;
        };
        self.forget_failure_of_a_changed_recipe();
        let waiting = self.door.table.counts().0;
        if waiting == 0 || self.door.held_by_a_command() || !self.door.demand.may_try() {
            return;
        }
        self.load(was, waiting).await;
    }

    /// A start that failed is tried again at once when its recipe changed since (fixed).
    fn forget_failure_of_a_changed_recipe(&self) {
        let Some(failed) = self.door.demand.failure() else {
            return;
        };
        let Some(current) = self.door.production().current else {
            return;
        };
        let now = crate::recipe::load_dir(&self.recipes_dir)
            .ok()
            .and_then(|set| set.get(&current.recipe).ok().map(|l| l.recipe.hash()));
        if now.is_some_and(|h| h != failed.recipe_hash) {
            say!(
                "model {}: {} changed since its start failed: tried again",
                self.model_name(),
                current.recipe
            );
            self.door.demand.forget_failure();
        }
    }

    /// Starts production's recipe for the `waiting` requests and routes them to it.
    async fn load(&self, was: Unloaded, waiting: usize) {
        let _one_at_a_time = self.door.starting.lock().await;
        // Read again: a command may have held or switched it while another start ran.
        if self.door.demand.load() != Load::Unloaded(was) || self.door.held_by_a_command() {
            return;
        }
        let Some(current) = self.door.production().current else {
            return;
        };
        let generation = self.door.generation();
        let model = self.model_name();
        self.door.demand.set(Load::Starting);
        let began = Instant::now();
        // While the models in the way go, this one's files are read in, where there is room
        // (a look that must wait for room leaves the reading on: the next start finds them).
        let asleep = self.door.demand.asleep();
        let reading = match asleep {
            Some(_) => None,
            None => self.read_in(&current.recipe, &model),
        };
        let waking = asleep.as_ref().map(|(u, _)| u);
        match self.evict_for(&current.recipe, &model, waking).await {
            Ok(()) => {}
            Err(NoRoom::Busy(why)) => {
                tracing::info!("model {model}: waits for room: {why}");
                self.door.demand.set(Load::Unloaded(was));
                return;
            }
            Err(NoRoom::Never(e)) => {
                say!("model {model}: {} cannot start: {e}", current.recipe);
                self.start_failed(was, &current.recipe, &e);
                return;
            }
        }
        // Said once room is made: a look that waits for another model's turn says nothing.
        let how = if asleep.is_some() {
            "waking"
        } else {
            "starting"
        };
        say!(
            "model {model}: {how} {} for {waiting} waiting requests",
            current.recipe
        );
        if let Some(r) = reading {
            let _ = r.await;
        }
        if let Some((u, level)) = asleep {
            if self.woken(&u, level, generation, began).await {
                return;
            }
        }
        let up = match self.start_recipe(&current.recipe, None).await {
            Ok(up) => Ok(up),
            // Out of memory is a fact, not a retry: the plan trusted a figure that was too
            // low. What may go makes room, and the start is tried once more at once.
            Err(e) if crate::engine::out_of_memory(&e.to_string()) => {
                say!(
                    "model {model}: {} ran out of memory as it started: making room, \
                     trying once more",
                    current.recipe
                );
                self.evict_every_idle(&model).await;
                self.start_recipe(&current.recipe, None).await
            }
            Err(e) => Err(e),
        };
        let up = match up {
            Ok(up) => up,
            Err(e) => {
                say!("model {model}: {} did not start: {e}", current.recipe);
                self.start_failed(was, &current.recipe, &e);
                return;
            }
        };
        let recipe = current.recipe.clone();
        let switched = self.door.recover_to(generation, |next| {
            if let Some(e) = next.current.as_mut().filter(|e| e.recipe == recipe) {
                e.upstream = Some(up.clone());
            }
        });
        if switched.await.is_err() {
            // A command's switch overtook it: what it routes to now is the command's.
            stop_unrouted(&self.ctx, &self.door, &up).await;
            return;
        }
        self.door.demand.loaded(began.elapsed());
        self.door.metrics.loaded(&model);
        say!(
            "model {model}: {} serves after {:.1} s",
            current.recipe,
            began.elapsed().as_secs_f64()
        );
    }

    /// `recipe`'s model files read into the page cache on the blocking pool, when they are
    /// not there and the host has room (`pagecache::read_in_beside`).
    fn read_in(&self, recipe: &str, model: &str) -> Option<tokio::task::JoinHandle<()>> {
        let set = crate::recipe::load_dir(&self.recipes_dir).ok()?;
        let files = crate::pagecache::ModelFiles::of(&set.get(recipe).ok()?.recipe);
        let reserve_gb = self.ctx.settings.memory_reserve_gb;
        let reading = crate::pagecache::read_in_beside(&files, reserve_gb)?;
        let (model, recipe) = (model.to_string(), recipe.to_string());
        Some(tokio::spawn(async move {
            if let Ok((bytes, took)) = reading.await {
                say!(
                    "model {model}: {recipe} read in ({:.0} MB in {:.1} s) while room was made",
                    bytes as f64 / 1e6,
                    took.as_secs_f64()
                );
            }
        }))
    }

    /// The page cache of models stopped for room for `next`, on memory the GPU shares
    /// (their files only, none that `next` serves too): their cached pages would stand in
    /// the way of the next model's allocations.
    async fn drop_pages_of(&self, recipes: &[String], next: &str) {
        use crate::pagecache::ModelFiles;
        if recipes.is_empty() || !crate::pagecache::shared_with_the_gpu().await {
            return;
        }
        let Ok(set) = crate::recipe::load_dir(&self.recipes_dir) else {
            return;
        };
        let files_of = |r: &str| set.get(r).ok().map(|l| ModelFiles::of(&l.recipe));
        let kept = files_of(next).unwrap_or_default();
        let gone: Vec<ModelFiles> = (recipes.iter())
            .filter_map(|r| Some(files_of(r)?.without(&kept)))
            .collect();
        let _ = tokio::task::spawn_blocking(move || gone.iter().for_each(|f| f.drop_pages())).await;
    }

    /// Its sleeping server `u` woken and routed to, within what a start of its recipe takes;
    /// false when the wake failed (`u` is then stopped and a start follows).
    async fn woken(&self, u: &Upstream, level: u8, generation: u64, began: Instant) -> bool {
        let model = self.model_name();
        let p50 = crate::starts::p50_s(&self.ctx.state, &u.recipe);
        let limit = crate::starts::wake_limit(&self.ctx.state, &u.recipe);
        match super::sleep::wake(&self.ctx, u, level, limit).await {
            Ok(took) => {
                self.door.demand.set_asleep(None);
                let upstream = u.clone();
                let switched = self.door.recover_to(generation, |next| {
                    if let Some(e) = next
                        .current
                        .as_mut()
                        .filter(|e| e.recipe == upstream.recipe)
                    {
                        e.upstream = Some(upstream.clone());
                    }
                });
                if switched.await.is_err() {
                    return true;
                }
                self.door.demand.loaded(began.elapsed());
                self.door.metrics.loaded(&model);
                let start = p50.map_or("not measured yet".into(), |s| format!("{s:.1} s"));
                say!(
                    "model {model}: {} woke in {:.2} s (its start: {start})",
                    u.recipe,
                    took.as_secs_f64()
                );
                true
            }
            Err(why) => {
                say!(
                    "model {model}: {} did not wake ({why}): stopped, started again",
                    u.recipe
                );
                self.door.demand.set_asleep(None);
                stop_unrouted(&self.ctx, &self.door, u).await;
                false
            }
        }
    }

    /// Every other model idle now is stopped (one with a request as it is judged keeps
    /// its route): the room a start that ran out of memory is given before its retry.
    async fn evict_every_idle(&self, model: &str) {
        let lane = self.door.model();
        let (idle, _) = self.door.evictable(&lane, Instant::now());
        let Ok(_state) = self
            .ctx
            .state
            .lock("frontdoor watch: room after out of memory")
        else {
            return;
        };
        let mut gone = Vec::new();
        for i in idle.iter().filter(|i| !i.busy) {
            let said = format!("evicted: {model} ran out of memory beside it");
            if release(&self.ctx, &i.door, &i.upstream, Unloaded::Evicted, &said).await {
                gone.push(i.upstream.recipe.clone());
            }
        }
        self.drop_pages_of(
            &gone,
            &self
                .door
                .production()
                .current
                .map(|e| e.recipe)
                .unwrap_or_default(),
        )
        .await;
    }

    /// A start on demand failed: its waiting clients are told at once, and the next start
    /// waits out a back-off (`Demand::failed`).
    fn start_failed(&self, was: Unloaded, recipe: &str, e: &Error) {
        let hash = crate::recipe::load_dir(&self.recipes_dir)
            .ok()
            .and_then(|set| set.get(recipe).ok().map(|l| l.recipe.hash()))
            .unwrap_or_default();
        let f = self.door.demand.failed(was, e, &hash);
        say!(
            "model {}: start {} failed; the next in {} s",
            self.model_name(),
            f.attempts,
            f.retry_in().as_secs()
        );
    }

    /// Makes room for `recipe` among the other models: when it does not fit (or leave the
    /// reserve) without stopping another model's production, the idle ones are evicted,
    /// least recently used first, until it does. The rest of the room (candidates, warm
    /// instances) is the switch plan's, as for any start.
    async fn evict_for(
        &self,
        recipe: &str,
        model: &str,
        waking: Option<&Upstream>,
    ) -> Result<(), NoRoom> {
        let ctx = &self.ctx;
        let set = crate::recipe::load_dir(&self.recipes_dir).map_err(NoRoom::Never)?;
        let loaded = set.get(recipe).map_err(NoRoom::Never)?;
        let mut all = match ctx.runtimes.list().await {
            Ok((all, _)) => all,
            Err(e) => return Err(NoRoom::Busy(format!("the runtimes do not answer: {e}"))),
        };
        // Its own sleeping server is planned as the start it is about to be.
        all.retain(|d| waking.is_none_or(|w| w.deployment != d.id));
        // Already running (the start adopts a healthy instance): nothing to make room for.
        if all.iter().any(|d| d.name == recipe && d.running()) {
            return Ok(());
        }
        let (memory, _) = memory_beside(ctx, &loaded.recipe, &all, None)
            .await
            .map_err(NoRoom::Never)?;
        let beside = crate::models::refuse_stopping_others(ctx, loaded, &memory);
        if memory.fits && memory.above_floor() && beside.is_ok() {
            return Ok(());
        }
        let refused = beside.err().unwrap_or_else(|| Error::DoesNotFit {
            name: recipe.to_string(),
            plan: memory.describe(),
            unfit: crate::error::Unfit::UnderFloor,
        });
        let lane = self.door.model();
        let waiting = (self.door.demand.turn().waiting_since).unwrap_or_else(Instant::now);
        let (idle, next) = self.door.evictable(&lane, waiting);
        let names: Vec<String> = idle.iter().map(|i| i.upstream.recipe.clone()).collect();
        let in_use = |why: String| {
            self.door.demand.look_again_at(next);
            NoRoom::Busy(why)
        };
        let victims = match memory.evicting(&names, &self.door.kept(&lane)) {
            Ok(v) if !v.is_empty() => v,
            // Nothing of the other models' to stop: the switch plan decides the rest.
            Ok(_) => return Ok(()),
            Err(true) => {
                return Err(in_use(format!(
                    "{refused}; the models in the way are in use, within their turn"
                )))
            }
            Err(false) => return Err(NoRoom::Never(refused)),
        };
        // Turns go to the model that has waited longest.
        if !self.door.first_in_line(&lane, waiting) {
            return Err(in_use("another model has waited longer for room".into()));
        }
        // A command changing state (an `up` benchmarking, a job starting) decides first.
        let Ok(_state) = ctx.state.lock("frontdoor watch: evicting a model") else {
            return Err(NoRoom::Busy(
                "a running command holds the state lock".into(),
            ));
        };
        let weighed: Vec<String> = idle.iter().filter(|i| !i.busy).map(|i| i.shown()).collect();
        if !weighed.is_empty() {
            say!(
                "model {model}: room from the idle, cheapest to bring back first: {}",
                weighed.join(", ")
            );
        }
        let mut gone = Vec::new();
        for i in idle.iter().filter(|i| victims.contains(&i.upstream.recipe)) {
            if i.busy {
                let turn = i.door.demand.turn().length();
                let said = format!(
                    "its turn of {} is over: {model} waits",
                    format_duration(turn)
                );
                yield_turn(ctx, &i.door, &i.upstream, &said).await;
                gone.push(i.upstream.recipe.clone());
                continue;
            }
            let said = format!("evicted for {model}, idle for {}", format_duration(i.for_s));
            if !release(ctx, &i.door, &i.upstream, Unloaded::Evicted, &said).await {
                self.drop_pages_of(&gone, recipe).await;
                return Err(NoRoom::Busy(format!(
                    "{} took a request as it was evicted",
                    i.upstream.recipe
                )));
            }
            gone.push(i.upstream.recipe.clone());
        }
        self.drop_pages_of(&gone, recipe).await;
        Ok(())
    }

    /// Its idle server stopped for `for_recipe`, as a start on demand evicts it, at a
    /// command's asking (`up --yes` of a model that does not fit beside it); why not when
    /// it may not go: kept, judged by a rollout, busy, or not serving.
    pub(super) async fn evict_for_a_command(&self, for_recipe: &str) -> Result<(), String> {
        if self.door.demand.settings().keep {
            return Err("it is kept (serve.keep)".into());
        }
        if self.door.rollout.get().is_some() {
            return Err("a rollout is judging it".into());
        }
        let Route::Serving(u) = self.door.table.route() else {
            return Err("it is not serving".into());
        };
        if self.door.table.idle_for().is_none() {
            return Err("it has requests in flight or waiting".into());
        }
        let said = format!("evicted for {for_recipe}, as `up --yes` asked");
        match release(&self.ctx, &self.door, &u, Unloaded::Evicted, &said).await {
            true => {
                self.drop_pages_of(std::slice::from_ref(&u.recipe), for_recipe)
                    .await;
                Ok(())
            }
            false => Err("a request came as it was evicted".into()),
        }
    }

    /// Unloaded when idle past its `ttl` (a kept model never is).
    pub(super) async fn expire(&self, u: &Upstream) {
        let settings = self.door.demand.settings();
        let Some(ttl) = settings.ttl.filter(|_| !settings.keep) else {
            return;
        };
        // A rollout judges it on its traffic: it stays while the rollout runs.
        if self.door.rollout.get().is_some() {
            return;
        }
        // Not while another model starts (its plan counts this one running); and read again
        // under the lock.
        let Ok(_one_at_a_time) = self.door.starting.try_lock() else {
            return;
        };
        let serving = matches!(self.door.table.route(), Route::Serving(now) if now.deployment == u.deployment);
        match self.door.table.idle_for() {
            Some(idle) if idle >= ttl.0 && serving && self.door.demand.load() == Load::Loaded => {
                let why = format!("idle for {}, its ttl", format_duration(idle));
                release(&self.ctx, &self.door, u, Unloaded::Ttl, &why).await;
            }
            _ => {}
        }
    }
}

fn model_name(door: &Door) -> String {
    let p = door.production();
    crate::models::answers_to(&door.model(), &p).unwrap_or_default()
}

/// Its turn over, `u` (the server of `door`'s model) makes way: its next requests wait in
/// its queue from now on (its turn comes again), the ones in flight finish, for up to the
/// drain, then it stops.
async fn yield_turn(ctx: &Context, door: &Door, u: &Upstream, said: &str) {
    let model = model_name(door);
    // Set first: a request that comes meanwhile waits for its next start.
    door.demand.set(Load::Unloaded(Unloaded::Evicted));
    let left = door.hold(door.config.drain, None).await;
    if left > 0 {
        say!("model {model}: {left} requests still in flight after the drain");
    }
    stopped(ctx, door, u, Unloaded::Evicted, said).await;
}

/// Stops `u`, the idle server of `door`'s model (past its `ttl`, or evicted for room), only
/// if it is still idle once its requests are held: one that took a request as it was
/// judged idle is given its route back, and false. Its next request starts it again.
async fn release(ctx: &Context, door: &Door, u: &Upstream, why: Unloaded, said: &str) -> bool {
    // Set first: a request that comes meanwhile wakes the watch for a start.
    door.demand.set(Load::Unloaded(why));
    let left = door.hold(Duration::ZERO, None).await;
    if left > 0 || door.table.counts().0 > 0 {
        door.table.set(Route::Serving(u.clone()));
        door.demand.set(Load::Loaded);
        say!(
            "model {}: kept, a request came as it was judged idle",
            model_name(door)
        );
        return false;
    }
    stopped(ctx, door, u, why, said).await;
    true
}

/// The end of an unload, its requests held: `u` put to sleep where its recipe asks for it
/// (`serve.sleep: auto`), else stopped (a sleeping one that must go for room is stopped);
/// counted and said.
async fn stopped(ctx: &Context, door: &Door, u: &Upstream, why: Unloaded, said: &str) {
    let label = match why {
        Unloaded::Ttl => "ttl",
        Unloaded::Evicted => "evicted",
        Unloaded::Boot => "boot",
    };
    let model = model_name(door);
    let was_asleep = door
        .demand
        .asleep()
        .is_some_and(|(a, _)| a.deployment == u.deployment);
    if !was_asleep {
        if let Some(level) = super::sleep::put_to_sleep(ctx, door, u).await {
            door.demand.set_asleep(Some((u.clone(), level)));
            door.metrics.unloaded(&model, label);
            say!(
                "model {model}: {} put to sleep, level {level} ({said})",
                u.recipe
            );
            return;
        }
    }
    door.demand.set_asleep(None);
    stop_unrouted(ctx, door, u).await;
    door.metrics.unloaded(&model, label);
    say!("model {model}: {} unloaded ({said})", u.recipe);
}

/// Stops `u` unless `door` routes to it.
async fn stop_unrouted(ctx: &Context, door: &Door, u: &Upstream) {
    let routed = door.status().upstream;
    if routed.is_some_and(|r| r.deployment == u.deployment) {
        return;
    }
    if let Ok(Some(d)) = ctx.runtimes.instance(&u.recipe, &u.deployment).await {
        let _ = ctx.runtimes.stop(&d, crate::runtime::STOP_GRACE).await;
    }
}
