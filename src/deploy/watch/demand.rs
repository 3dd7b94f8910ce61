//! A model's server on demand, from its watch: started by the one switch plan when a
//! request waits for it (unloaded since the front door started, after its `ttl`, or evicted
//! for room), and stopped when it has been idle past its `ttl`. Its requests wait in its
//! own queue meanwhile; the other models' lanes are not touched.

use std::time::Instant;

use super::Watch;
use crate::frontdoor::demand::{Load, Unloaded};
use crate::frontdoor::say;
use crate::production::Upstream;
use crate::units::format_duration;

impl Watch {
    /// The name clients send for this model, for the log and the metrics.
    pub(super) fn model_name(&self) -> String {
        let p = self.door.production();
        crate::models::answers_to(&self.door.model, &p).unwrap_or_default()
    }

    /// An unloaded model: started once a request waits for it (unless a command holds it,
    /// or a start just failed).
    pub(super) async fn on_demand(&self) {
        let Load::Unloaded(was) = self.door.demand.load() else {
            return;
        };
        let waiting = self.door.table.counts().0;
        if waiting == 0 || self.door.held_by_a_command() || !self.door.demand.may_try() {
            return;
        }
        self.load(was, waiting).await;
    }

    /// Starts production's recipe for the `waiting` requests and routes them to it.
    async fn load(&self, was: Unloaded, waiting: usize) {
        let Some(current) = self.door.production().current else {
            return;
        };
        let generation = self.door.generation();
        let model = self.model_name();
        self.door.demand.set(Load::Starting);
        say!(
            "model {model}: starting {} for {waiting} waiting requests",
            current.recipe
        );
        let began = Instant::now();
        let up = match self.start_recipe(&current.recipe, None).await {
            Ok(up) => up,
            Err(e) => {
                say!("model {model}: {} did not start: {e}", current.recipe);
                self.door.demand.failed(was);
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
            self.stop_unrouted(&up).await;
            return;
        }
        self.door.demand.loaded();
        self.door.metrics.loaded(&model);
        say!(
            "model {model}: {} serves after {:.1} s",
            current.recipe,
            began.elapsed().as_secs_f64()
        );
    }

    /// Unloaded when idle past its `ttl` (a kept model never is).
    pub(super) async fn expire(&self, u: &Upstream) {
        let settings = self.door.demand.settings();
        let Some(ttl) = settings.ttl.filter(|_| !settings.keep) else {
            return;
        };
        match self.door.table.idle_for() {
            Some(idle) if idle >= ttl.0 => {
                let why = format!("idle for {}, its ttl", format_duration(idle));
                self.unload(u, Unloaded::Ttl, &why).await;
            }
            _ => {}
        }
    }

    /// Stops `u`, this model's server: its requests wait from now on, and the next one
    /// starts it again.
    pub(super) async fn unload(&self, u: &Upstream, why: Unloaded, said: &str) {
        let model = self.model_name();
        // Set first: a request that comes meanwhile wakes the watch for a start.
        self.door.demand.set(Load::Unloaded(why));
        let left = self.door.hold(self.door.config.drain, None).await;
        if left > 0 {
            say!("model {model}: {left} requests still in flight after the drain");
        }
        self.stop_unrouted(u).await;
        let label = match why {
            Unloaded::Ttl => "ttl",
            Unloaded::Evicted => "evicted",
            Unloaded::Boot => "boot",
        };
        self.door.metrics.unloaded(&model, label);
        say!("model {model}: {} unloaded ({said})", u.recipe);
    }

    /// Stops `u` unless the front door routes to it.
    async fn stop_unrouted(&self, u: &Upstream) {
        let routed = self.door.status().upstream;
        if routed.is_some_and(|r| r.deployment == u.deployment) {
            return;
        }
        if let Ok(Some(d)) = self.ctx.runtimes.instance(&u.recipe, &u.deployment).await {
            let _ = self.ctx.runtimes.stop(&d, crate::runtime::STOP_GRACE).await;
        }
    }
}
