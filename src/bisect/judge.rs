//! How a bisect judges what it measured: a metric's per-run p50 against the two ends', a
//! gate with its three outcomes, or the metric that differs most between the ends. A
//! figure whose 95% interval cannot tell the sides apart is inconclusive, never guessed:
//! the bisect measures it again.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::bench::gates::{self, GateOutcome, GateRule, Measures, Metric};
use crate::bench::stats::{relative_difference, t975, Interval};
use crate::bench::Baseline;

/// What each digest is judged on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Criterion {
    /// A metric's p50 per run, nearer the good end's or the bad end's (`--metric ttft_p50`).
    Metric(Metric),
    /// A gate as written (`--gate 'decode_tps_p50=>= 30'`): pass is good, fail is bad.
    Gate(String),
    /// The metric that differs most beyond the noise between the two ends.
    Differs,
}

/// `ttft`, `ttft_p50`, `ttft_p50_ms`, `decode_tps_p50`: a metric's p50 (the figure each
/// repeated run measures once).
pub(crate) fn parse_metric(text: &str) -> Result<Metric, String> {
    let base = text
        .strip_suffix("_ms")
        .or_else(|| text.strip_suffix("_tps"))
        .unwrap_or(text);
    let (name, pct) = match base.rsplit_once('_') {
        Some((n, p)) if p.starts_with('p') => (n, Some(p)),
        _ => (base, None),
    };
    let name = name.strip_suffix("_tps").unwrap_or(name);
    let names: Vec<&str> = Metric::ALL.iter().map(|m| m.name()).collect();
    let metric = Metric::ALL
        .into_iter()
        .find(|m| m.name() == name)
        .ok_or_else(|| {
            format!(
                "`{text}` is not a metric; give one of {} (its p50: ttft_p50, decode_tps_p50)",
                names.join(", ")
            )
        })?;
    match pct {
        None | Some("p50") => Ok(metric),
        Some(p) => Err(format!(
            "`{text}`: a bisect judges the p50, the figure measured once per repeated run; \
             for the {p}, give a gate (`--gate '{}_{p}_ms=<= 800'`)",
            metric.name()
        )),
    }
}

impl Criterion {
    /// The gate, parsed (checked when the bisect began).
    pub(crate) fn gate(&self) -> Option<GateRule> {
        match self {
            Criterion::Gate(text) => text.parse().ok(),
            _ => None,
        }
    }

    /// The evaluation sets each round asks, when the gate judges them (`eval_accuracy`):
    /// the recipe's `bench.eval`.
    pub(crate) fn eval_plan(
        &self,
        recipe: &crate::recipe::Recipe,
        recipes_dir: &std::path::Path,
    ) -> crate::error::Result<Option<crate::eval::Plan>> {
        if !self
            .gate()
            .is_some_and(|g| g.gate == gates::Gate::EvalAccuracy)
        {
            return Ok(None);
        }
        let names = recipe.bench.as_ref().map_or(&[][..], |b| &b.eval[..]);
        crate::eval::plan(names, recipes_dir)
    }

    /// Checks a gate for a bisect: it must parse and judge the candidate alone.
    pub(crate) fn check_gate(text: &str) -> Result<Criterion, String> {
        let rule: GateRule = text.parse().map_err(|e: gates::GateError| e.to_string())?;
        if rule.is_relative() {
            return Err(format!(
                "{}: a bisect compares digests with each other, not with production; give an \
                 absolute gate (decode_tps_p50, ttft_p90_ms, no_markdown) or --metric",
                rule.name
            ));
        }
        Ok(Criterion::Gate(text.to_string()))
    }

    pub(crate) fn describe(&self, chosen: Option<Metric>) -> String {
        match (self, chosen) {
            (Criterion::Metric(m), _) => format!("{} p50", m.name()),
            (Criterion::Gate(g), _) => format!("gate {g}"),
            (Criterion::Differs, Some(m)) => {
                format!("{} p50 (differs most between the ends)", m.name())
            }
            (Criterion::Differs, None) => {
                "whatever differs beyond the noise between the ends".into()
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Verdict {
    Good,
    Bad,
    /// The evidence cannot decide: measured again (up to the bound), never guessed.
    Inconclusive,
}

/// A verdict, the figure it rests on and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Judgement {
    pub(in crate::bisect) verdict: Verdict,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bisect) value: Option<f64>,
    /// The figure's 95% interval over every run measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bisect) interval: Option<(f64, f64)>,
    pub(in crate::bisect) detail: String,
}

impl Judgement {
    pub(crate) fn value(&self) -> Option<f64> {
        self.value
    }

    pub(crate) fn interval(&self) -> Option<(f64, f64)> {
        self.interval
    }

    pub(crate) fn inconclusive(detail: String) -> Judgement {
        Judgement {
            verdict: Verdict::Inconclusive,
            value: None,
            interval: None,
            detail,
        }
    }
}

/// An interval of `n` runs with this mean and sample sd.
pub(crate) fn interval_of(n: usize, mean: f64, sd: f64) -> Interval {
    let half = if n >= 2 {
        t975(n - 1) * sd / (n as f64).sqrt()
    } else {
        f64::INFINITY
    };
    Interval {
        n,
        mean,
        sd,
        cv: if mean != 0.0 { sd / mean.abs() } else { 0.0 },
        low: mean - half,
        high: mean + half,
    }
}

/// One interval over all the runs of several (each from its own runs of the same figure):
/// the mean and the sample sd of the pooled runs, exactly.
pub(crate) fn pool(parts: &[&Interval]) -> Option<Interval> {
    let n: usize = parts.iter().map(|p| p.n).sum();
    if n < 2 {
        return None;
    }
    let mean = parts.iter().map(|p| p.n as f64 * p.mean).sum::<f64>() / n as f64;
    let ss: f64 = parts
        .iter()
        .map(|p| {
            (p.n.saturating_sub(1)) as f64 * p.sd.powi(2) + p.n as f64 * (p.mean - mean).powi(2)
        })
        .sum();
    Some(interval_of(n, mean, (ss / (n - 1) as f64).sqrt()))
}

/// Each metric pooled over the rounds' intervals.
pub(crate) fn pool_all(rounds: &[&BTreeMap<Metric, Interval>]) -> BTreeMap<Metric, Interval> {
    Metric::ALL
        .into_iter()
        .filter_map(|m| {
            let parts: Vec<&Interval> = rounds.iter().filter_map(|r| r.get(&m)).collect();
            Some((m, pool(&parts)?))
        })
        .collect()
}

fn unit(m: Metric) -> &'static str {
    if m == Metric::Decode {
        "tok/s"
    } else {
        "ms"
    }
}

/// Whether `c` sits on the good or the bad side of the midpoint between the ends: the 95%
/// interval of (c − midpoint), with the ends' own uncertainty in it (Welch–Satterthwaite
/// degrees of freedom), must lie wholly on one side.
pub(crate) fn against_ends(m: Metric, c: &Interval, good: &Interval, bad: &Interval) -> Judgement {
    let mid = (good.mean + bad.mean) / 2.0;
    let d = c.mean - mid;
    let var = |i: &Interval, w: f64| w * i.sd.powi(2) / i.n.max(1) as f64;
    let parts = [
        (var(c, 1.0), c.n),
        (var(good, 0.25), good.n),
        (var(bad, 0.25), bad.n),
    ];
    let v: f64 = parts.iter().map(|p| p.0).sum();
    let denom: f64 = parts
        .iter()
        .filter(|p| p.1 > 1)
        .map(|p| p.0.powi(2) / (p.1 - 1) as f64)
        .sum();
    let t = if v > 0.0 && denom > 0.0 && c.n > 1 {
        t975((v.powi(2) / denom).floor() as usize)
    } else if c.n > 1 {
        1.96
    } else {
        f64::INFINITY
    };
    let half = t * v.sqrt();
    let (lo, hi) = (d - half, d + half);
    let bad_above = bad.mean > good.mean;
    let verdict = if (hi < 0.0 && bad_above) || (lo > 0.0 && !bad_above) {
        Verdict::Good
    } else if (lo > 0.0 && bad_above) || (hi < 0.0 && !bad_above) {
        Verdict::Bad
    } else {
        Verdict::Inconclusive
    };
    let u = unit(m);
    let side = match verdict {
        Verdict::Good => "on the good side".to_string(),
        Verdict::Bad => "on the bad side".to_string(),
        Verdict::Inconclusive => "holds the midpoint: measured again".to_string(),
    };
    Judgement {
        verdict,
        value: Some(c.mean),
        interval: Some((c.low, c.high)),
        detail: format!(
            "{} p50 {:.1} {u} over {} runs (good end {:.1}, bad end {:.1}); its distance to the \
             midpoint {mid:.1}, 95% interval [{lo:+.1}, {hi:+.1}], {side}",
            m.name(),
            c.mean,
            c.n,
            good.mean,
            bad.mean
        ),
    }
}

/// The bad end's difference from the good end, % (and its 95% interval), when it is beyond
/// the noise.
pub(crate) fn ends_differ(good: &Interval, bad: &Interval) -> Option<(f64, f64, f64)> {
    relative_difference(bad, good).filter(|(_, lo, hi)| *lo > 0.0 || *hi < 0.0)
}

/// The metric whose difference between the ends is largest (relative), among those beyond
/// the noise.
pub(crate) fn most_different(
    good: &BTreeMap<Metric, Interval>,
    bad: &BTreeMap<Metric, Interval>,
) -> Option<(Metric, f64)> {
    Metric::ALL
        .into_iter()
        .filter_map(|m| {
            let (pct, _, _) = ends_differ(good.get(&m)?, bad.get(&m)?)?;
            Some((m, pct))
        })
        .max_by(|a, b| a.1.abs().total_cmp(&b.1.abs()))
}

/// A gate's outcome as a verdict: pass is good, fail is bad, inconclusive is measured again.
pub(crate) fn by_gate(rule: &GateRule, now: &Measures) -> Judgement {
    let gates = gates::Gates::from([(rule.name.clone(), rule.clone())]);
    let no_baseline = Baseline::missing("a bisect has no production baseline");
    let r = gates::evaluate(&gates, now, &no_baseline)
        .pop()
        .expect("one gate, one result");
    Judgement {
        verdict: match r.outcome {
            GateOutcome::Pass => Verdict::Good,
            GateOutcome::Fail => Verdict::Bad,
            // Its baseline is missing, never absent: "not applied" does not come here.
            GateOutcome::Inconclusive | GateOutcome::NotApplied => Verdict::Inconclusive,
        },
        value: r.value,
        interval: r.interval,
        detail: format!(
            "{} {}: {} ({})",
            r.gate,
            r.rule,
            r.value.map_or("not measured".into(), |v| format!("{v:.1}")),
            r.detail
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::stats::interval;

    #[test]
    fn metrics_are_named_as_gates_and_flags_name_them() {
        assert_eq!(parse_metric("ttft_p50"), Ok(Metric::Ttft));
        assert_eq!(parse_metric("ttft_p50_ms"), Ok(Metric::Ttft));
        assert_eq!(parse_metric("ttft"), Ok(Metric::Ttft));
        assert_eq!(parse_metric("decode_tps_p50"), Ok(Metric::Decode));
        assert!(parse_metric("ttft_p90")
            .unwrap_err()
            .contains("give a gate"));
        assert!(parse_metric("speed").unwrap_err().contains("ttft, ttfo"));
        assert!(Criterion::check_gate("vs_production_ttft=>= -10%")
            .unwrap_err()
            .contains("not with production"));
        let g = Criterion::check_gate("decode_tps_p50=>= 30").unwrap();
        assert_eq!(g.gate().unwrap().name, "decode_tps_p50");
    }

    #[test]
    fn pooling_rounds_equals_one_interval_over_all_their_runs() {
        let (a, b) = ([50.0, 52.0, 51.0], [60.0, 58.0]);
        let all = interval(&[&a[..], &b[..]].concat()).unwrap();
        let pooled = pool(&[&interval(&a).unwrap(), &interval(&b).unwrap()]).unwrap();
        assert_eq!(pooled.n, 5);
        assert!((pooled.mean - all.mean).abs() < 1e-9);
        assert!((pooled.sd - all.sd).abs() < 1e-9);
        assert!((pooled.low - all.low).abs() < 1e-9);
    }

    #[test]
    fn a_step_is_judged_by_the_side_of_the_midpoint_its_interval_lies_on() {
        let good = interval(&[50.0, 51.0, 50.5]).unwrap();
        let bad = interval(&[400.0, 402.0, 399.0]).unwrap();
        let like_good = interval(&[49.0, 52.0]).unwrap();
        let j = against_ends(Metric::Ttft, &like_good, &good, &bad);
        assert_eq!(j.verdict, Verdict::Good, "{}", j.detail);
        let like_bad = interval(&[398.0, 404.0]).unwrap();
        assert_eq!(
            against_ends(Metric::Ttft, &like_bad, &good, &bad).verdict,
            Verdict::Bad
        );
        // Noisy: two runs far apart; the interval holds the midpoint.
        let noisy = interval(&[150.0, 420.0]).unwrap();
        let j = against_ends(Metric::Ttft, &noisy, &good, &bad);
        assert_eq!(j.verdict, Verdict::Inconclusive, "{}", j.detail);
        assert!(j.detail.contains("measured again"), "{}", j.detail);
        // More runs narrow it: the same noise, decided.
        let more = interval(&[380.0, 420.0, 395.0, 410.0, 388.0, 402.0]).unwrap();
        assert_eq!(
            against_ends(Metric::Ttft, &more, &good, &bad).verdict,
            Verdict::Bad
        );
        // A speed: bad is lower.
        let (g, b) = (
            interval(&[40.0, 41.0]).unwrap(),
            interval(&[20.0, 21.0]).unwrap(),
        );
        let c = interval(&[39.5, 40.5]).unwrap();
        assert_eq!(
            against_ends(Metric::Decode, &c, &g, &b).verdict,
            Verdict::Good
        );
    }

    #[test]
    fn ends_within_the_noise_are_not_told_apart_and_differs_picks_the_largest() {
        let a = interval(&[50.0, 60.0, 40.0]).unwrap();
        let b = interval(&[55.0, 45.0, 62.0]).unwrap();
        assert!(ends_differ(&a, &b).is_none());
        let good = BTreeMap::from([
            (Metric::Ttft, interval(&[50.0, 51.0, 49.0]).unwrap()),
            (Metric::E2el, interval(&[100.0, 101.0, 99.0]).unwrap()),
            (Metric::Decode, interval(&[50.0, 60.0, 40.0]).unwrap()),
        ]);
        let bad = BTreeMap::from([
            (Metric::Ttft, interval(&[400.0, 401.0, 399.0]).unwrap()),
            (Metric::E2el, interval(&[450.0, 451.0, 449.0]).unwrap()),
            (Metric::Decode, interval(&[55.0, 45.0, 62.0]).unwrap()),
        ]);
        assert_eq!(most_different(&good, &bad).map(|x| x.0), Some(Metric::Ttft));
    }

    #[test]
    fn a_gate_passes_fails_or_asks_for_more() {
        let rule: GateRule = "ttft_p50_ms=<= 200".parse().unwrap();
        let mut m = Measures::default();
        m.confidence
            .insert(Metric::Ttft, interval(&[50.0, 51.0]).unwrap());
        m.stats.insert(Metric::Ttft, Default::default());
        assert_eq!(by_gate(&rule, &m).verdict, Verdict::Good);
        m.confidence
            .insert(Metric::Ttft, interval(&[100.0, 290.0]).unwrap());
        assert_eq!(by_gate(&rule, &m).verdict, Verdict::Inconclusive);
        m.confidence
            .insert(Metric::Ttft, interval(&[400.0, 401.0]).unwrap());
        assert_eq!(by_gate(&rule, &m).verdict, Verdict::Bad);
    }
}
