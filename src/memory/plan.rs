//! Room in the machine's memory for one more server: what must stop first, decided before
//! anything is touched. The room is the pool the server's memory comes from (`pools`): the
//! one unified pool of a Spark, or the GPUs a server on a discrete GPU is given. A running
//! server counts with the larger of what its recipe declares and what it measurably holds
//! (`Holder`); and no start may leave less available than the reserve (`Floor`).

use serde::Serialize;

use super::holder::Holder;
use super::measure;
use super::pools::{self, Pool};
use crate::nvidia::device::{Devices, Kind};
use crate::recipe::Recipe;
use crate::runtime::{Deployment, Runtimes};
use crate::settings::Settings;

const GB: f64 = 1e9;

/// What no start may push available memory under (`SPARKCTL_MEMORY_RESERVE_GB`): on a Spark
/// a host out of memory hangs rather than failing the start.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Floor {
    reserve_gb: f64,
    /// Available now; None when it cannot be had (`what` says why).
    available_gb: Option<f64>,
    /// Where `available_gb` comes from.
    what: String,
    /// What the stops the plan makes give back.
    freed_gb: f64,
}

impl Floor {
    /// What no start may push available memory under.
    pub(crate) fn reserve_gb(&self) -> f64 {
        self.reserve_gb
    }

    /// Available once the stops are made and the candidate holds `need_gb`.
    pub(crate) fn left_gb(&self, need_gb: f64) -> Option<f64> {
        Some(self.available_gb? + self.freed_gb - need_gb)
    }

    /// Whether the start leaves the reserve (true when available memory is not known: the
    /// budget alone decides then, and the plan says so).
    pub(crate) fn holds(&self, need_gb: f64) -> bool {
        self.left_gb(need_gb)
            .is_none_or(|left| left + 1e-9 >= self.reserve_gb)
    }

    fn describe(&self, need_gb: f64) -> String {
        match self.left_gb(need_gb) {
            Some(left) => format!(
                "floor: {:.1} GB available ({}){} leaves {left:.1} GB once it runs, reserve {} GB",
                self.available_gb.unwrap_or(0.0),
                self.what,
                if self.freed_gb > 0.0 {
                    format!(", {:.1} GB freed by the stops,", self.freed_gb)
                } else {
                    String::new()
                },
                self.reserve_gb
            ),
            None => format!("floor not checked: {}", self.what),
        }
    }
}

/// Which running deployments must stop for a candidate to fit.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct MemoryPlan {
    /// The pool the candidate's memory comes from.
    pub(crate) pool: Pool,
    /// That pool in words, with where its size comes from.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub(crate) pool_what: String,
    pub(crate) budget_gb: f64,
    /// The candidate's declared need (`server.memory_gb`); none declared counts as 0.
    pub(crate) need_gb: Option<f64>,
    /// Running deployments in this pool, in the order they would stop.
    pub(crate) running: Vec<Holder>,
    /// To stop, in this order, before the candidate starts.
    pub(crate) must_stop: Vec<String>,
    /// Whether the candidate fits in the budget once `must_stop` have stopped.
    pub(crate) fits: bool,
    /// Available memory once it runs, against the reserve.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) floor: Option<Floor>,
    /// A stop gives back what the server counts, not only what it measurably holds: the
    /// pool is one `SPARKCTL_MEMORY_GB` declares, and its available memory is worked out
    /// from the same counts.
    #[serde(skip)]
    pub(crate) frees_counted: bool,
    /// What the candidate held at an earlier start (`learned`), when that is more than it
    /// declares: the plan counts it instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) learned_gb: Option<f64>,
}

impl MemoryPlan {
    /// Candidates (not production) go first, biggest first; production only if still needed.
    pub(crate) fn new(budget_gb: f64, need_gb: Option<f64>, running: Vec<Holder>) -> MemoryPlan {
        let need = need_gb.unwrap_or(0.0);
        let mut order = running;
        order.sort_by(|a, b| {
            a.production
                .cmp(&b.production)
                .then(b.gb().total_cmp(&a.gb()))
        });
        let mut used: f64 = order.iter().map(Holder::gb).sum();
        let mut must_stop = Vec::new();
        for h in &order {
            if used + need <= budget_gb {
                break;
            }
            used -= h.gb();
            must_stop.push(h.name.clone());
        }
        MemoryPlan {
            pool: Pool::Unified,
            pool_what: String::new(),
            budget_gb,
            need_gb,
            running: order,
            must_stop,
            fits: used + need <= budget_gb,
            floor: None,
            frees_counted: false,
            learned_gb: None,
        }
    }

    /// `name` stops too, last (the instance a start replaces: production of the same
    /// recipe, which one port and one name cannot run twice); what it holds is given back.
    pub(crate) fn stop_also(&mut self, name: &str) {
        if self.must_stop.iter().any(|n| n == name) {
            return;
        }
        let gb = self
            .running
            .iter()
            .find(|h| h.name == name)
            .map_or(0.0, Holder::gb);
        self.must_stop.push(name.to_string());
        if let Some(f) = self.floor.as_mut() {
            f.freed_gb += gb;
        }
        let left: f64 = (self.running.iter())
            .filter(|h| !self.must_stop.contains(&h.name))
            .map(Holder::gb)
            .sum();
        self.fits = left + self.need_gb.unwrap_or(0.0) <= self.budget_gb;
    }

    /// `name`, planned to stop, sleeps instead and holds `held_gb` asleep: kept in the plan
    /// as it is now (true) when the start still fits beside it, else left to stop (false).
    pub(crate) fn asleep_instead(&mut self, name: &str, held_gb: f64) -> bool {
        let need = self.need_gb.unwrap_or(0.0);
        let kept: f64 = (self.running.iter())
            .filter(|h| h.name != name && !self.must_stop.contains(&h.name))
            .map(Holder::gb)
            .sum();
        let fits = kept + held_gb + need <= self.budget_gb
            && self.floor.as_ref().is_none_or(|f| {
                (f.available_gb)
                    .is_none_or(|a| a + f.freed_gb - held_gb - need + 1e-9 >= f.reserve_gb)
            });
        let Some(h) = self.running.iter_mut().find(|h| h.name == name) else {
            return false;
        };
        if !fits {
            return false;
        }
        (h.measured_gb, h.asleep) = (Some(held_gb), true);
        self.must_stop.retain(|n| n != name);
        if let Some(f) = self.floor.as_mut() {
            f.freed_gb = (f.freed_gb - held_gb).max(0.0);
        }
        true
    }

    /// The plan once `must_stop` have stopped: what still runs, nothing left to stop, what
    /// they gave back available. What a start is given after the room was made for it.
    pub(crate) fn after_stops(&self) -> MemoryPlan {
        let mut next = self.clone();
        next.running.retain(|h| !self.must_stop.contains(&h.name));
        next.must_stop.clear();
        if let Some(f) = next.floor.as_mut() {
            f.available_gb = f.available_gb.map(|a| a + f.freed_gb);
            f.freed_gb = 0.0;
        }
        next
    }

    /// What stopping `h` gives back.
    fn frees(&self, h: &Holder) -> f64 {
        match self.frees_counted {
            true => h.gb(),
            false => h.frees_gb(),
        }
    }

    /// Which of `idle` (other models' productions that nobody uses now, least recently used
    /// first) must stop, in that order, for the candidate to fit and leave the reserve,
    /// once what is not production (candidates, warm instances) stopped first as always.
    /// The rest of production is never touched. `Err(wait)`: stopping every one of `idle` is
    /// not enough; `wait` says whether stopping the busy ones too would be (the start may
    /// wait for them) or not even that: `kept` never stop, so it can never fit beside them.
    pub(crate) fn evicting(
        &self,
        idle: &[String],
        kept: &[String],
    ) -> std::result::Result<Vec<String>, bool> {
        let need = self.need_gb.unwrap_or(0.0);
        // As `Floor::holds`, with what these stops free in place of the plan's own.
        let fits = |used: f64, freed: f64| {
            used + need <= self.budget_gb
                && self.floor.as_ref().is_none_or(|f| {
                    (f.available_gb).is_none_or(|a| a + freed - need + 1e-9 >= f.reserve_gb)
                })
        };
        let others = (self.running.iter()).filter(|h| !h.production);
        let order: Vec<&Holder> = others
            .chain(
                idle.iter()
                    .filter_map(|n| (self.running.iter()).find(|h| h.production && &h.name == n)),
            )
            .collect();
        let (mut used, mut freed) = (self.running.iter().map(Holder::gb).sum::<f64>(), 0.0);
        let mut evicted = Vec::new();
        for h in order {
            if fits(used, freed) {
                break;
            }
            used -= h.gb();
            freed += self.frees(h);
            if h.production {
                evicted.push(h.name.clone());
            }
        }
        if fits(used, freed) {
            return Ok(evicted);
        }
        let rest = (self.running.iter())
            .filter(|h| h.production && !idle.contains(&h.name) && !kept.contains(&h.name))
            .fold((used, freed), |(u, f), h| (u - h.gb(), f + self.frees(h)));
        Err(fits(rest.0, rest.1))
    }

    /// Whether the start leaves the reserve available (see `Floor`).
    pub(crate) fn above_floor(&self) -> bool {
        self.floor
            .as_ref()
            .is_none_or(|f| f.holds(self.need_gb.unwrap_or(0.0)))
    }

    /// Running servers that hold more than they declare, each with both figures.
    pub(crate) fn over_declared(&self) -> Vec<String> {
        self.running
            .iter()
            .filter(|h| h.over())
            .map(Holder::describe)
            .collect()
    }

    pub(crate) fn describe(&self) -> String {
        let need = match (self.learned_gb, self.need_gb) {
            (Some(l), _) => format!("{l:.2} GB (held at an earlier start, more than it declares)"),
            (None, Some(g)) => format!("{g} GB"),
            (None, None) => "no declared memory".into(),
        };
        let running: Vec<String> = self.running.iter().map(Holder::describe).collect();
        let running = if running.is_empty() {
            "nothing".to_string()
        } else {
            running.join(", ")
        };
        let pool = if self.pool_what.is_empty() {
            String::new()
        } else {
            format!(" of {}", self.pool_what)
        };
        let floor = self
            .floor
            .as_ref()
            .map(|f| format!("; {}", f.describe(self.need_gb.unwrap_or(0.0))))
            .unwrap_or_default();
        format!(
            "needs {need} of a {:.1} GB budget{pool}; running: {running}{floor}",
            self.budget_gb
        )
    }
}

/// The plan for a server `recipe` describes, in the pool its memory comes from, beside
/// `running` (`production` names each model's production recipe: they stop last), with `jobs_gb` held
/// by running jobs. On a machine with discrete GPUs a running deployment counts where
/// nvidia-smi sees it: on the GPUs when one of its processes holds GPU memory, in host RAM
/// otherwise. An error: the recipe asks for GPUs this machine does not have.
pub(crate) async fn for_server(
    rt: &Runtimes,
    recipe: &Recipe,
    settings: &Settings,
    jobs_gb: f64,
    running: &[Deployment],
    production: &[String],
    learned_gb: Option<f64>,
) -> Result<MemoryPlan, String> {
    let devices = Devices::probe().await;
    let host_gb = settings.memory_budget_gb - jobs_gb;
    let budget = pools::budget(&devices, host_gb, &recipe.gpu_use())?;
    let apps = crate::nvidia::compute_apps().await.unwrap_or_default();
    let discrete = devices.kind() == Kind::Discrete;
    let running: Vec<&Deployment> = running.iter().filter(|d| d.running()).collect();
    let shares =
        futures_util::future::join_all(running.iter().map(|d| measure::share(rt, d, &apps))).await;
    let asleep = super::holder::asleep(&running).await;
    let holders: Vec<Holder> = running
        .iter()
        .zip(shares)
        .zip(asleep)
        .filter(|((_, s), _)| !discrete || pools::counts_in(&budget.pool, s.on_gpu))
        .map(|((d, s), asleep)| Holder {
            measured_gb: s.gb(discrete),
            asleep,
            ..Holder::declared(d, production)
        })
        .collect();
    // What it held before counts when it is more than it declares.
    let learned_gb = learned_gb.filter(|l| *l > recipe.server.memory_gb.unwrap_or(0.0));
    let mut plan = MemoryPlan::new(budget.gb, learned_gb.or(recipe.server.memory_gb), holders);
    plan.learned_gb = learned_gb;
    plan.frees_counted = settings.memory_declared_gb.is_some() && !is_gpus(&budget.pool);
    let freed: f64 = (plan.running.iter())
        .filter(|h| plan.must_stop.contains(&h.name))
        .map(|h| plan.frees(h))
        .sum();
    let (available_gb, what) = available(&budget.pool, &devices, settings, jobs_gb, &plan).await;
    plan.floor = Some(Floor {
        reserve_gb: settings.memory_reserve_gb,
        available_gb,
        what,
        freed_gb: freed,
    });
    plan.pool = budget.pool;
    plan.pool_what = budget.what;
    Ok(plan)
}

fn is_gpus(pool: &Pool) -> bool {
    matches!(pool, Pool::Gpus { .. })
}

/// Available memory in `pool` now, and where the figure comes from: the GPUs' free memory
/// (nvidia-smi); MemAvailable for host memory; or, for a pool `SPARKCTL_MEMORY_GB` declares,
/// that pool less what the plan counts running (MemAvailable is the real machine's, not
/// the declared pool's).
async fn available(
    pool: &Pool,
    devices: &Devices,
    settings: &Settings,
    jobs_gb: f64,
    plan: &MemoryPlan,
) -> (Option<f64>, String) {
    match pool {
        Pool::Gpus { indices } => match crate::nvidia::free_memory().await {
            Ok(free) => {
                let given: Vec<Option<u64>> = indices
                    .iter()
                    .map(|i| free.get(*i).copied().flatten())
                    .collect();
                match given.iter().all(Option::is_some) {
                    true => (
                        Some(given.iter().flatten().sum::<u64>() as f64 / GB),
                        format!("free memory of GPU(s) {indices:?} by nvidia-smi"),
                    ),
                    false => (None, "nvidia-smi gives no free memory for the GPU".into()),
                }
            }
            Err(e) => (None, format!("the GPUs' free memory is unknown: {e}")),
        },
        _ if settings.memory_declared_gb.is_some() => {
            let total = settings.memory_budget_gb + settings.memory_reserve_gb;
            let used: f64 = plan.running.iter().map(Holder::gb).sum::<f64>() + jobs_gb;
            (
                Some(total - used),
                "the pool SPARKCTL_MEMORY_GB declares, less what runs in it".into(),
            )
        }
        _ => match crate::host::meminfo() {
            Some(m) => (Some(m.available as f64 / GB), "MemAvailable".into()),
            None => (
                None,
                format!(
                    "/proc/meminfo gives no MemAvailable ({})",
                    devices.why_none()
                ),
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(name: &str, gb: f64, production: bool) -> Holder {
        Holder {
            name: name.into(),
            declared_gb: Some(gb),
            measured_gb: None,
            production,
            asleep: false,
        }
    }

    #[test]
    fn a_candidate_that_fits_stops_nothing() {
        let plan = MemoryPlan::new(120.0, Some(12.0), vec![holder("llama-server", 7.1, true)]);
        assert!(plan.fits);
        assert!(plan.must_stop.is_empty());
    }

    #[test]
    fn candidates_stop_before_production_and_biggest_first() {
        let deps = |prod: &str| {
            vec![
                holder("llama-server", 7.1, prod == "llama-server"),
                holder("small", 2.0, prod == "small"),
                holder("big", 20.0, prod == "big"),
            ]
        };
        // 29.1 in use; 109 more needs 138.1 of 120: stopping big (20) is enough.
        let plan = MemoryPlan::new(120.0, Some(109.0), deps("llama-server"));
        assert_eq!(plan.must_stop, vec!["big"]);
        assert!(plan.fits);
        // 116 needs big, small and then production too.
        let plan = MemoryPlan::new(120.0, Some(116.0), deps("llama-server"));
        assert_eq!(plan.must_stop, vec!["big", "small", "llama-server"]);
        assert!(plan.fits);
        // Once they stopped, nothing is left to stop and the candidate still fits.
        let after = plan.after_stops();
        assert!(after.must_stop.is_empty() && after.fits);
        assert!(after.running.is_empty(), "{:?}", after.running);
        // Production is known by its record, not its size: the biggest is not stopped
        // before smaller candidates when it is production.
        let plan = MemoryPlan::new(120.0, Some(100.0), deps("big"));
        assert_eq!(plan.must_stop, vec!["llama-server", "small"]);
    }

    #[test]
    fn the_instance_a_start_replaces_stops_last_and_gives_its_memory_back() {
        // Production of the candidate's own recipe, beside a smaller candidate: both fit, yet
        // one recipe runs one instance, so it stops (last), and what it held counts freed.
        let mut plan = MemoryPlan::new(
            120.0,
            Some(12.0),
            vec![holder("nightly", 12.0, true), holder("small", 2.0, false)],
        );
        plan.floor = Some(Floor {
            reserve_gb: 8.0,
            available_gb: Some(10.0),
            what: "MemAvailable".into(),
            freed_gb: 0.0,
        });
        assert!(plan.must_stop.is_empty());
        plan.stop_also("nightly");
        plan.stop_also("nightly");
        assert_eq!(plan.must_stop, vec!["nightly"]);
        assert!(plan.fits && plan.above_floor(), "{}", plan.describe());
        assert_eq!(plan.floor.as_ref().unwrap().freed_gb, 12.0);
    }

    #[test]
    fn eviction_stops_idle_models_least_recently_used_first_and_never_the_busy() {
        // 120 GB: three models' productions of 40, 30 and 30 GB and a 10 GB candidate run;
        // a fourth model of 35 GB needs 25 more after the candidate stops.
        let running = vec![
            holder("chat", 40.0, true),
            holder("coder", 30.0, true),
            holder("tools", 30.0, true),
            holder("trial", 10.0, false),
        ];
        let plan = MemoryPlan::new(120.0, Some(35.0), running);
        // Least recently used first, whatever their sizes: coder (30) is enough.
        let idle = vec!["coder".to_string(), "chat".to_string()];
        assert_eq!(plan.evicting(&idle, &[]), Ok(vec!["coder".to_string()]));
        // chat first: chat alone is enough too.
        let idle = vec!["chat".to_string(), "coder".to_string()];
        assert_eq!(plan.evicting(&idle, &[]), Ok(vec!["chat".to_string()]));
        // None idle: it must wait (stopping a busy one would make room, but it is busy).
        assert_eq!(plan.evicting(&[], &[]), Err(true));
        // Only kept ones in the way: waiting would never help.
        let kept = ["chat", "coder", "tools"].map(String::from);
        assert_eq!(plan.evicting(&[], &kept), Err(false));
        // Bigger than everything: never.
        let plan = MemoryPlan::new(120.0, Some(121.0), vec![holder("chat", 40.0, true)]);
        assert_eq!(plan.evicting(&["chat".to_string()], &[]), Err(false));
    }

    #[test]
    fn eviction_keeps_going_until_the_reserve_is_left() {
        // The budget fits after one eviction, but available memory (what the kernel says)
        // leaves the reserve only after two.
        let running = vec![holder("a", 20.0, true), holder("b", 20.0, true)];
        let mut plan = MemoryPlan::new(100.0, Some(70.0), running);
        plan.floor = Some(Floor {
            reserve_gb: 8.0,
            available_gb: Some(50.0),
            what: "MemAvailable".into(),
            freed_gb: 0.0,
        });
        let idle = vec!["a".to_string(), "b".to_string()];
        assert_eq!(plan.evicting(&idle, &[]), Ok(idle.clone()));
        // A reserve nothing can leave: not even both.
        plan.floor.as_mut().unwrap().reserve_gb = 40.0;
        assert_eq!(plan.evicting(&idle, &[]), Err(false));
    }

    #[test]
    fn production_asleep_instead_of_stopped_stays_in_the_plan_only_when_the_start_fits() {
        // 0.6 GB: production's 0.35 must go for the candidate's 0.35.
        let plan = MemoryPlan::new(0.6, Some(0.35), vec![holder("prod", 0.35, true)]);
        assert_eq!(plan.must_stop, vec!["prod"]);
        // Asleep it holds 0.05: the candidate fits beside it, and it stops nothing.
        let mut asleep = plan.clone();
        assert!(asleep.asleep_instead("prod", 0.05));
        assert!(asleep.must_stop.is_empty());
        let h = &asleep.running[0];
        assert!(h.asleep && h.measured_gb == Some(0.05) && (h.gb() - 0.05).abs() < 1e-9);
        // Asleep it still holds 0.3: no room beside it; it is to stop, as planned.
        let mut heavy = plan.clone();
        assert!(!heavy.asleep_instead("prod", 0.3));
        assert_eq!(heavy.must_stop, vec!["prod"]);
        assert!(!heavy.running[0].asleep);
    }

    #[test]
    fn a_candidate_bigger_than_the_budget_never_fits() {
        let plan = MemoryPlan::new(100.0, Some(109.0), vec![]);
        assert!(!plan.fits);
        assert!(plan
            .describe()
            .contains("needs 109 GB of a 100.0 GB budget"));
    }

    #[test]
    fn a_server_holding_more_than_it_declares_counts_with_what_it_holds() {
        // Declared, 7 + 5 fits in 14; held, 9.5 + 5 does not: production must stop.
        let mut prod = holder("prod", 7.0, true);
        prod.measured_gb = Some(9.5);
        let plan = MemoryPlan::new(14.0, Some(5.0), vec![prod.clone()]);
        assert_eq!(plan.must_stop, vec!["prod"]);
        assert_eq!(
            plan.over_declared(),
            vec!["prod 9.50 GB held, more than its declared 7 GB"]
        );
        assert!(plan.describe().contains("running: prod 9.50 GB held"));
        // Holding less than declared: the declaration counts, and nothing is said.
        prod.measured_gb = Some(0.2);
        let plan = MemoryPlan::new(14.0, Some(5.0), vec![prod]);
        assert!(plan.must_stop.is_empty() && plan.over_declared().is_empty());
    }

    #[test]
    fn the_floor_counts_what_the_stops_free_and_refuses_under_the_reserve() {
        let mut plan = MemoryPlan::new(100.0, Some(30.0), vec![holder("prod", 40.0, true)]);
        plan.floor = Some(Floor {
            reserve_gb: 8.0,
            available_gb: Some(30.0),
            what: "MemAvailable".into(),
            freed_gb: 0.0,
        });
        // 30 available, 30 needed: 0 left, under the 8 GB reserve.
        assert!(plan.fits && !plan.above_floor());
        assert!(plan
            .describe()
            .contains("leaves 0.0 GB once it runs, reserve 8 GB"));
        plan.floor.as_mut().unwrap().freed_gb = 40.0;
        assert!(plan.above_floor());
        let after = plan.after_stops();
        assert_eq!(after.floor.as_ref().unwrap().available_gb, Some(70.0));
        assert!(after.above_floor());
        // Not known: the budget alone decides, and the plan says why.
        plan.floor = Some(Floor {
            reserve_gb: 8.0,
            available_gb: None,
            what: "no figure".into(),
            freed_gb: 0.0,
        });
        assert!(plan.above_floor());
        assert!(plan.describe().contains("floor not checked: no figure"));
    }
}
