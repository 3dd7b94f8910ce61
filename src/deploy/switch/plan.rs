//! The one switch of production, whatever changes it — `up`, `rollback`, the front door's
//! watch (a restart, the fallback), bisect's steps, `adopt`, the way back: one plan says
//! blue/green (the next one fits beside production) or swap (production stops first, the
//! front door holding its requests), and one execution makes the room: candidates stop
//! first, production last, then the start is given the memory as it is once they stopped.

use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;

use super::{upstream_of, Touched};
use crate::context::Context;
use crate::deploy::{plan_start, StartOptions, StartPlan, STOP_GRACE};
use crate::error::Result;
use crate::frontdoor::Remote;
use crate::memory::{Holder, MemoryPlan};
use crate::production::{Production, Upstream};
use crate::recipe::LoadedRecipe;
use crate::runtime::{Deployment, Runtimes};

/// How the next production takes the current one's place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Mode {
    /// Both fit: the next one starts beside production, which serves until the switch.
    BlueGreen,
    /// They do not: production stops first; the front door holds requests meanwhile.
    Swap,
}

impl Mode {
    /// Swap when the memory plan must stop production to make room.
    pub(crate) fn of(memory: &MemoryPlan) -> Mode {
        match memory
            .running
            .iter()
            .any(|h| h.production && memory.must_stop.contains(&h.name))
        {
            true => Mode::Swap,
            false => Mode::BlueGreen,
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mode::BlueGreen => "blue/green",
            Mode::Swap => "swap",
        })
    }
}

/// One switch, planned: the start (its memory plan made beside what runs now, `must_stop`
/// in the order they stop) and the mode that follows from it.
pub(crate) struct Plan {
    pub(crate) start: StartPlan,
    pub(crate) mode: Mode,
    /// Production may sleep instead of stopping, where its server can (its recipe's
    /// `serve.sleep: auto`; a flow that can wake it again sets it).
    pub(crate) production_may_sleep: bool,
}

impl Plan {
    /// Plans the start of `loaded` beside what runs now: every cheap check, nothing changed.
    /// What can never fit, or would leave less than the reserve, is refused here, before
    /// anything stops.
    pub(crate) async fn new(
        shared: &Context,
        loaded: &LoadedRecipe,
        opts: &StartOptions<'_>,
    ) -> Result<Plan> {
        let start = plan_start(shared, loaded, opts).await?;
        crate::models::refuse_stopping_others(shared, loaded, &start.memory)?;
        Ok(Plan {
            mode: Mode::of(&start.memory),
            start,
            production_may_sleep: false,
        })
    }

    /// Production's recipe, when the plan stops it.
    pub(crate) fn stops_production(&self) -> Option<&str> {
        let m = &self.start.memory;
        m.running
            .iter()
            .find(|h| h.production && m.must_stop.contains(&h.name))
            .map(|h| h.name.as_str())
    }

    /// What the plan stops that is not production.
    pub(crate) fn stops_others(&self) -> Vec<&str> {
        let prod = self.stops_production();
        let m = &self.start.memory;
        m.must_stop
            .iter()
            .map(String::as_str)
            .filter(|n| Some(*n) != prod)
            .collect()
    }

    /// How production fares, in words: `production` is the recipe the front door holds as
    /// production, `serving` whether its instance answers.
    pub(crate) fn how(&self, production: Option<&str>, serving: bool) -> String {
        match (production, self.mode, serving) {
            (Some(p), Mode::Swap, _) => format!(
                "production {p} must stop first (swap: the front door holds requests meanwhile)"
            ),
            (Some(p), Mode::BlueGreen, true) => {
                format!(
                    "production {p} keeps serving until {} serves (blue/green)",
                    self.start.name
                )
            }
            (Some(p), Mode::BlueGreen, false) => format!(
                "production {p} is not running: the front door holds requests until one serves"
            ),
            (None, _, _) => "no production yet: the front door answers 503 until one serves".into(),
        }
    }

    /// When production is a server sparkctl does not run (`adopt`): it counts as
    /// production holding `gb` (its recipe's declaration: it is the same server). A size
    /// nobody declared cannot be planned beside: it stops first.
    pub(crate) fn beside_foreign(&mut self, name: &str, gb: Option<f64>) {
        let m = &self.start.memory;
        let mut running = m.running.clone();
        running.push(Holder {
            name: name.to_string(),
            declared_gb: gb,
            measured_gb: None,
            production: true,
            asleep: false,
        });
        let mut next = MemoryPlan::new(m.budget_gb, m.need_gb, running);
        if gb.is_none() && !next.must_stop.iter().any(|n| n == name) {
            next.must_stop.push(name.to_string());
        }
        next.pool = m.pool.clone();
        next.pool_what = m.pool_what.clone();
        next.floor = m.floor.clone();
        next.frees_counted = m.frees_counted;
        next.learned_gb = m.learned_gb;
        self.mode = Mode::of(&next);
        self.start.memory = next;
    }
}

/// How production's requests wait while it is stopped.
pub(crate) enum Hold<'a> {
    /// A command asks the front door (over its socket), draining for this long.
    Ask(&'a Remote, Duration),
    /// The caller holds already (the front door's watch; `adopt`, whose door holds from its
    /// first moment), or there is nothing to hold.
    Held,
}

/// Makes the room the plan names: candidates stop first, then production, once the front
/// door holds its requests. `touched` learns what the way back must undo. The plan's start
/// is then given the memory as it is once they stopped.
pub(crate) async fn make_room(
    rt: &Runtimes,
    plan: &mut Plan,
    hold: Hold<'_>,
    touched: Option<&Mutex<Touched>>,
    progress: &dyn crate::progress::Progress,
) -> Result<()> {
    let prod = plan.stops_production().map(String::from);
    // While production drains and stops, the candidate's files are read in where the host
    // has room for them: its start then reads them from memory.
    let reading = match plan.start.memory.must_stop.is_empty() {
        true => None,
        false => {
            let floor = plan.start.memory.floor.as_ref();
            let reserve_gb = floor.map_or(0.0, crate::memory::Floor::reserve_gb);
            crate::pagecache::read_in_beside(&plan.start.model_files, reserve_gb)
        }
    };
    for victim in plan.start.memory.must_stop.clone() {
        let Some(d) = rt.find(&victim).await?.filter(Deployment::running) else {
            continue;
        };
        if Some(&victim) == prod.as_ref() {
            if let Hold::Ask(door, drain) = &hold {
                // Requests wait at the front door instead of finding nothing.
                door.hold(*drain).await?;
                if let Some(t) = touched {
                    t.lock().expect("touched").held = true;
                }
            }
            if let (Some(t), true) = (touched, plan.production_may_sleep) {
                if let Some(level) = asleep_instead(rt, plan, &d, progress).await {
                    t.lock().expect("touched").production_asleep = Some((upstream_of(&d), level));
                    continue;
                }
            }
            if let Some(t) = touched {
                t.lock().expect("touched").production_stopped = Some(upstream_of(&d));
            }
        }
        progress.step(&format!("stopping {victim} to make room"));
        rt.stop(&d, STOP_GRACE).await?;
    }
    if let Some(Ok((bytes, took))) = match reading {
        Some(r) => Some(r.await),
        None => None,
    } {
        progress.step(&format!(
            "{}: its files read in ({:.0} MB in {:.1} s) while room was made",
            plan.start.name,
            bytes as f64 / 1e6,
            took.as_secs_f64()
        ));
    }
    plan.start.memory = plan.start.memory.after_stops();
    Ok(())
}

/// Puts production `d` to sleep in place of a stop; its level when it sleeps and the start
/// still fits beside what it holds asleep. Else it is left awake (to be stopped).
async fn asleep_instead(
    rt: &Runtimes,
    plan: &mut Plan,
    d: &Deployment,
    progress: &dyn crate::progress::Progress,
) -> Option<u8> {
    progress.step(&format!("putting {} to sleep to make room", d.name));
    let level = match crate::runtime::sleep::put_to_sleep(d).await {
        Ok(level) => level,
        Err(why) => {
            progress.step(&format!("{} cannot sleep ({why}): stopped instead", d.name));
            return None;
        }
    };
    let held = crate::memory::held(rt, &[d]).await;
    let gb = held.first().and_then(|h| h.counted_gb);
    match gb.filter(|gb| plan.start.memory.asleep_instead(&d.name, *gb)) {
        Some(gb) => {
            progress.step(&format!(
                "{} asleep (level {level}), holding {gb:.2} GB: room made without a stop",
                d.name
            ));
            Some(level)
        }
        None => {
            let held = gb.map_or("an unmeasured amount".into(), |g| format!("{g:.2} GB"));
            progress.step(&format!(
                "{} asleep still holds {held}, too much beside {}: stopped instead",
                d.name, plan.start.name
            ));
            None
        }
    }
}

/// After the front door switched to `next`: `old` (what it routed to before) stops unless
/// `next` still routes to it or keeps it warm.
pub(crate) async fn retire(rt: &Runtimes, next: &Production, old: Option<&Upstream>) -> Result<()> {
    let Some(old) = old else { return Ok(()) };
    let kept = next
        .serving()
        .is_some_and(|u| u.deployment == old.deployment)
        || next
            .warm
            .iter()
            .any(|w| w.upstream.deployment == old.deployment);
    if kept {
        return Ok(());
    }
    if let Some(d) = rt.find(&old.recipe).await? {
        if d.running() && d.id == old.deployment {
            rt.stop(&d, STOP_GRACE).await?;
        }
    }
    Ok(())
}
