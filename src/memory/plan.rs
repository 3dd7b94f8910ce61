//! Room in the machine's memory for one more server: what must stop first, decided from
//! what the running deployments declared, before anything is touched. The room is the pool
//! the server's memory comes from (`pools`): the one unified pool of a Spark, or the GPUs a
//! server on a discrete GPU is given.

use serde::Serialize;

use super::pools::{self, Pool};
use crate::nvidia::device::{Devices, Kind};
use crate::recipe::Recipe;
use crate::runtime::{Deployment, Runtimes};

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
    /// Running deployments and what they declared.
    pub(crate) running: Vec<(String, Option<f64>)>,
    /// To stop, in this order, before the candidate starts.
    pub(crate) must_stop: Vec<String>,
    /// Whether the candidate fits once `must_stop` have stopped.
    pub(crate) fits: bool,
}

impl MemoryPlan {
    /// Candidates (not production) go first, biggest first; production only if still needed.
    /// `production` is the recipe production.json names: production runs on a port of its
    /// own behind the front door, so only that record says which deployment it is.
    pub(crate) fn new(
        budget_gb: f64,
        need_gb: Option<f64>,
        running: &[Deployment],
        production: Option<&str>,
    ) -> MemoryPlan {
        let need = need_gb.unwrap_or(0.0);
        let mut order: Vec<&Deployment> = running.iter().filter(|d| d.running()).collect();
        let is_production = |d: &Deployment| Some(d.name.as_str()) == production;
        order.sort_by(|a, b| {
            is_production(a).cmp(&is_production(b)).then(
                b.memory_gb
                    .unwrap_or(0.0)
                    .total_cmp(&a.memory_gb.unwrap_or(0.0)),
            )
        });
        let mut used: f64 = order.iter().map(|d| d.memory_gb.unwrap_or(0.0)).sum();
        let mut must_stop = Vec::new();
        for d in &order {
            if used + need <= budget_gb {
                break;
            }
            used -= d.memory_gb.unwrap_or(0.0);
            must_stop.push(d.name.clone());
        }
        MemoryPlan {
            pool: Pool::Unified,
            pool_what: String::new(),
            budget_gb,
            need_gb,
            running: order
                .iter()
                .map(|d| (d.name.clone(), d.memory_gb))
                .collect(),
            must_stop,
            fits: used + need <= budget_gb,
        }
    }

    /// The plan once `must_stop` have stopped: what still runs, nothing left to stop. What
    /// a start is given after the room was made for it.
    pub(crate) fn after_stops(&self) -> MemoryPlan {
        let mut next = self.clone();
        next.running.retain(|(n, _)| !self.must_stop.contains(n));
        next.must_stop.clear();
        next
    }

    pub(crate) fn describe(&self) -> String {
        let need = self
            .need_gb
            .map(|g| format!("{g} GB"))
            .unwrap_or_else(|| "no declared memory".into());
        let running: Vec<String> = self
            .running
            .iter()
            .map(|(n, g)| format!("{n} {}", g.map(|g| format!("{g} GB")).unwrap_or("?".into())))
            .collect();
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
        format!(
            "needs {need} of a {:.1} GB budget{pool}; running: {running}",
            self.budget_gb
        )
    }
}

/// The plan for a server `recipe` describes, in the pool its memory comes from. On a
/// machine with discrete GPUs a running deployment counts where nvidia-smi sees it: on the
/// GPUs when one of its processes holds GPU memory (by its declaration, or what it holds
/// when that is more), in host RAM otherwise. An error: the recipe asks for GPUs this
/// machine does not have.
pub(crate) async fn for_server(
    rt: &Runtimes,
    recipe: &Recipe,
    host_gb: f64,
    running: &[Deployment],
    production: Option<&str>,
) -> Result<MemoryPlan, String> {
    let devices = Devices::probe().await;
    let budget = pools::budget(&devices, host_gb, &recipe.gpu_use())?;
    let counted = match devices.kind() {
        Kind::Discrete => on_gpus(rt, running)
            .await
            .into_iter()
            .filter(|(_, on_gpu)| pools::counts_in(&budget.pool, *on_gpu))
            .map(|(d, _)| d)
            .collect(),
        _ => running.to_vec(),
    };
    let mut plan = MemoryPlan::new(budget.gb, recipe.server.memory_gb, &counted, production);
    plan.pool = budget.pool;
    plan.pool_what = budget.what;
    Ok(plan)
}

/// Each running deployment, whether a GPU holds memory for it, and the figure it counts
/// with (the measured GPU memory where above the declaration).
async fn on_gpus(rt: &Runtimes, running: &[Deployment]) -> Vec<(Deployment, bool)> {
    let apps = crate::nvidia::compute_apps().await.unwrap_or_default();
    let mut out = Vec::new();
    for d in running.iter().filter(|d| d.running()) {
        let pids = super::measure::processes(rt, d).await.pids;
        let held: u64 = apps
            .iter()
            .filter(|a| pids.contains(&a.pid))
            .filter_map(|a| a.used_bytes)
            .sum();
        let on_gpu = apps.iter().any(|a| pids.contains(&a.pid));
        let mut d = d.clone();
        let measured = held as f64 / 1e9;
        if on_gpu && d.memory_gb.is_none_or(|gb| gb < measured) {
            d.memory_gb = Some(measured);
        }
        out.push((d, on_gpu));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Engine;
    use crate::recipe::Runtime;
    use crate::runtime::RunState;

    fn running(name: &str, port: u16, gb: f64) -> Deployment {
        Deployment {
            name: name.into(),
            runtime: Runtime::Process,
            engine: Engine::Sim,
            id: "1".into(),
            run_id: "r".into(),
            recipe_hash: String::new(),
            model_fingerprint: None,
            artifact: String::new(),
            image_ref: None,
            host: "127.0.0.1".into(),
            port,
            health_path: "/health".into(),
            memory_gb: Some(gb),
            started_at: 0,
            state: RunState::Running,
            log_file: None,
        }
    }

    #[test]
    fn a_candidate_that_fits_stops_nothing() {
        let plan = MemoryPlan::new(
            120.0,
            Some(12.0),
            &[running("llama-server", 8003, 7.1)],
            Some("llama-server"),
        );
        assert!(plan.fits);
        assert!(plan.must_stop.is_empty());
    }

    #[test]
    fn candidates_stop_before_production_and_biggest_first() {
        let deps = [
            running("llama-server", 8003, 7.1),
            running("small", 8001, 2.0),
            running("big", 8002, 20.0),
        ];
        // 29.1 in use; 109 more needs 138.1 of 120: stopping big (20) is enough.
        let prod = Some("llama-server");
        let plan = MemoryPlan::new(120.0, Some(109.0), &deps, prod);
        assert_eq!(plan.must_stop, vec!["big"]);
        assert!(plan.fits);
        // 116 needs big, small and then production too.
        let plan = MemoryPlan::new(120.0, Some(116.0), &deps, prod);
        assert_eq!(plan.must_stop, vec!["big", "small", "llama-server"]);
        assert!(plan.fits);
        // Once they stopped, nothing is left to stop and the candidate still fits.
        let after = plan.after_stops();
        assert!(after.must_stop.is_empty() && after.fits);
        assert!(after.running.is_empty(), "{:?}", after.running);
        // Production is known by its record, not its port (it has one of its own): the
        // biggest is not stopped before a smaller candidate when it is production.
        let plan = MemoryPlan::new(120.0, Some(100.0), &deps, Some("big"));
        assert_eq!(plan.must_stop, vec!["llama-server", "small"]);
    }

    #[test]
    fn a_candidate_bigger_than_the_budget_never_fits() {
        let plan = MemoryPlan::new(100.0, Some(109.0), &[], None);
        assert!(!plan.fits);
        assert!(plan
            .describe()
            .contains("needs 109 GB of a 100.0 GB budget"));
    }
}
