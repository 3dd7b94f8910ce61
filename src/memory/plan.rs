//! Room in the machine's memory for one more server: what must stop first, decided from
//! what the running deployments declared, before anything is touched.

use serde::Serialize;

use crate::runtime::Deployment;

/// Which running deployments must stop for a candidate to fit.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryPlan {
    pub budget_gb: f64,
    /// The candidate's declared need (`server.memory_gb`); none declared counts as 0.
    pub need_gb: Option<f64>,
    /// Running deployments and what they declared.
    pub running: Vec<(String, Option<f64>)>,
    /// To stop, in this order, before the candidate starts.
    pub must_stop: Vec<String>,
    /// Whether the candidate fits once `must_stop` have stopped.
    pub fits: bool,
}

impl MemoryPlan {
    /// Candidates (not production) go first, biggest first; production only if still needed.
    pub fn new(
        budget_gb: f64,
        need_gb: Option<f64>,
        running: &[Deployment],
        production_port: u16,
    ) -> MemoryPlan {
        let need = need_gb.unwrap_or(0.0);
        let mut order: Vec<&Deployment> = running.iter().filter(|d| d.running()).collect();
        order.sort_by(|a, b| {
            (a.port == production_port)
                .cmp(&(b.port == production_port))
                .then(
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

    pub fn describe(&self) -> String {
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
        format!(
            "needs {need} of a {:.1} GB budget; running: {running}",
            self.budget_gb
        )
    }
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
            8003,
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
        let plan = MemoryPlan::new(120.0, Some(109.0), &deps, 8003);
        assert_eq!(plan.must_stop, vec!["big"]);
        assert!(plan.fits);
        // 116 needs big, small and then production too.
        let plan = MemoryPlan::new(120.0, Some(116.0), &deps, 8003);
        assert_eq!(plan.must_stop, vec!["big", "small", "llama-server"]);
        assert!(plan.fits);
    }

    #[test]
    fn a_candidate_bigger_than_the_budget_never_fits() {
        let plan = MemoryPlan::new(100.0, Some(109.0), &[], 8003);
        assert!(!plan.fits);
        assert!(plan
            .describe()
            .contains("needs 109 GB of a 100.0 GB budget"));
    }
}
