//! Sweeps: load levels stepped in order until the server saturates, and the knee where it
//! did (the last level whose extra load still bought throughput).

use serde::{Deserialize, Serialize};

use super::load::{LoadRun, Sweep, SweepKind};

/// Where a sweep found the server saturated.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Knee {
    /// The last level whose extra load still bought throughput.
    pub(in crate::bench) level: f64,
    /// The level past it, where throughput stopped growing and latency (or the queue) grew.
    pub(in crate::bench) saturated_at: f64,
    pub(in crate::bench) why: String,
}

/// Throughput must grow by this share of the added load to count as growing.
const GROWTH_SHARE: f64 = 0.25;
/// TTFT p50 growth (or a server queue appearing) that says requests are waiting.
const TTFT_GROWTH: f64 = 1.5;

/// Whether level `b` (after `a`) saturated: throughput grew by less than a quarter of what
/// the added load would give a server with room, while TTFT (or the server's queue) grew.
pub(crate) fn saturated(a: &LoadRun, b: &LoadRun) -> Option<String> {
    let offered = b.profile.level() / a.profile.level().max(1e-9);
    let gained = b.output_tps / a.output_tps.max(1e-9);
    let room = 1.0 + GROWTH_SHARE * (offered - 1.0);
    if gained >= room {
        return None;
    }
    let ttft = |r: &LoadRun| r.ttft_ms.as_ref().map(|s| s.p50);
    let ttft_grew = ttft(a)
        .zip(ttft(b))
        .is_some_and(|(x, y)| y > TTFT_GROWTH * x);
    let queue = |r: &LoadRun| r.server.as_ref().and_then(|s| s.waiting_mean);
    let queue_grew = queue(a).zip(queue(b)).is_some_and(|(x, y)| y > x + 0.5);
    if !(ttft_grew || queue_grew) {
        return None;
    }
    Some(format!(
        "load ×{offered:.2} bought throughput ×{gained:.2} ({:.0} → {:.0} tok/s) while TTFT p50 went {} → {} ms{}",
        a.output_tps,
        b.output_tps,
        ttft(a).map_or("-".into(), |v| format!("{v:.0}")),
        ttft(b).map_or("-".into(), |v| format!("{v:.0}")),
        match (queue(a), queue(b)) {
            (Some(x), Some(y)) => format!(" and the server's queue {x:.1} → {y:.1}"),
            _ => String::new(),
        }
    ))
}

/// A sweep's levels, and where it found the knee.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SweepResult {
    pub(in crate::bench) kind: SweepKind,
    asked: Vec<f64>,
    pub(in crate::bench) levels: Vec<LoadRun>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bench) knee: Option<Knee>,
    /// How the sweep ended, in one line.
    pub(in crate::bench) outcome: String,
}

impl SweepResult {
    pub(crate) fn levels(&self) -> &[LoadRun] {
        &self.levels
    }

    pub(crate) fn outcome(&self) -> &str {
        &self.outcome
    }

    pub(crate) fn new(sweep: &Sweep, levels: Vec<LoadRun>, knee: Option<Knee>) -> SweepResult {
        let outcome = match &knee {
            Some(k) => format!(
                "saturated at {}; knee at {}: {}",
                k.saturated_at, k.level, k.why
            ),
            None => format!(
                "no saturation up to {}: throughput still grew with load (the knee is higher)",
                sweep.levels.last().copied().unwrap_or(0.0)
            ),
        };
        SweepResult {
            kind: sweep.kind,
            asked: sweep.levels.clone(),
            levels,
            knee,
            outcome,
        }
    }
}
