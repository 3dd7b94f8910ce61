//! After a rejection, when nights were skipped: the digests fetched and kept since the
//! last good one (the pin) lie between it and the rejected one, and the existing bisect
//! finds which of them broke it — judged on what rejected it (the evaluation against
//! production's score, an absolute gate, or a relative one's metric).

use crate::bench::gates::{Gate, GateOutcome, GateRule};
use crate::bisect::Criterion;
use crate::deploy::switch::SwitchContext;
use crate::history::{BisectNote, RunRecord};
use crate::images::history::History;
use crate::progress::Progress;

/// The digests between `old` (the pin) and `new` that are on this machine: what a bisect
/// can measure without the registry.
pub(super) fn between<'h>(h: &'h History, old: &str, new: &str) -> Vec<&'h str> {
    match (h.position(old), h.position(new)) {
        (Some(o), Some(n)) if o + 1 < n => h.entries[o + 1..n]
            .iter()
            .filter(|e| e.present)
            .map(|e| e.digest.as_str())
            .collect(),
        _ => Vec::new(),
    }
}

/// What the bisect judges on, from the rejected run: the evaluation gate as an absolute
/// share (production's score plus the rule's offset: a bisect compares digests with each
/// other, not with production), else the first absolute gate that failed, else the metric
/// of a failed `vs_production_*` gate.
pub(super) fn criterion(run: &RunRecord) -> Option<Criterion> {
    let failed: Vec<GateRule> = run
        .gates
        .iter()
        .filter(|g| g.outcome == GateOutcome::Fail)
        .filter_map(|g| GateRule::new(&g.gate, &g.rule).ok())
        .collect();
    if let Some(g) = failed.iter().find(|g| g.gate == Gate::EvalAccuracy) {
        if !g.rule.of_production {
            return Criterion::check_gate(&format!("{}={}", g.name, g.text)).ok();
        }
        let sets = &run.eval.as_ref()?.production();
        let (right, items) = sets
            .iter()
            .fold((0, 0), |(r, n), s| (r + s.right(), n + s.items()));
        if items == 0 {
            return None;
        }
        let share = right as f64 / items as f64 * 100.0 + g.rule.threshold;
        let op = g.rule.op.as_str();
        return Criterion::check_gate(&format!("eval_accuracy={op} {share:.1}%")).ok();
    }
    if let Some(g) = failed.iter().find(|g| !g.is_relative()) {
        return Criterion::check_gate(&format!("{}={}", g.name, g.text)).ok();
    }
    failed.iter().find_map(|g| match g.gate {
        Gate::VsProduction(m) => Some(Criterion::Metric(m)),
        _ => None,
    })
}

/// Runs the bisect between `old` and `new` on `criterion`; what it named, or why not.
pub(super) async fn run(
    flow: &SwitchContext<'_>,
    name: &str,
    (old, new): (&str, &str),
    criterion: Criterion,
    progress: &dyn Progress,
) -> BisectNote {
    let judged_on = criterion.describe(None);
    let no = |_: &str| false;
    let opts = crate::bisect::Options {
        good: Some(old.to_string()),
        bad: Some(new.to_string()),
        criterion,
        suite: None,
        runs: None,
        warmup: None,
        repeat: 2,
        rounds: 4,
        // Unattended: production is never stopped for a step; a step that needs its
        // memory stops the bisect, which says how to go on by hand.
        allow_swap: false,
        builds: None,
        resume: false,
        fresh: false,
        dry_run: false,
        confirm: &no,
        progress,
    };
    match crate::bisect::bisect(flow, name, &opts).await {
        Ok(report) => {
            let answer = report.bisect().answer();
            BisectNote {
                id: Some(report.bisect().id().to_string()),
                judged_on,
                last_good: answer.map(|a| a.last_good().to_string()),
                first_bad: answer.map(|a| a.first_bad().to_string()),
                error: None,
            }
        }
        Err(e) => BisectNote {
            id: None,
            judged_on,
            last_good: None,
            first_bad: None,
            error: Some(e.to_string()),
        },
    }
}
