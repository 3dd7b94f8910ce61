//! Gate rules a recipe sets on the aggregate (`thinking_leak: "== 0%"`, `ttft_p99_ms:
//! "<= 800"`, `goodput_rps: ">= 2"`, `vs_production_decode: ">= -10%"`), typed, and how
//! each is judged: pass, fail, or inconclusive when the evidence cannot decide. The
//! evaluation gate (`eval_accuracy`) is judged by `crate::eval::gate`.

use std::collections::BTreeMap;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::baseline::Baseline;
pub(crate) use super::metric::Metric;
pub(crate) use super::rule::Rule;
use super::stats::{relative_difference, Interval, Pct, Stats};
use super::suite::Check;

/// What a gate judges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gate {
    /// % of answers passing a check (leaking, for thinking_leak): `no_markdown`.
    Quality(Check),
    /// A percentile of a metric over the measured requests: `ttft_p90_ms`, `decode_tps_p50`.
    Percentile(Metric, Pct),
    /// Requests/s that met the SLO, at the load level where that was highest: `goodput_rps`.
    GoodputRps,
    /// % of that level's requests that met the SLO: `goodput_pct`.
    GoodputPct,
    /// % of requests the server failed (an error status, a stream cut or ended by an
    /// error): `errors_pct`.
    ErrorsPct,
    /// The metric's p50 against production's, % change: `vs_production_ttft`.
    VsProduction(Metric),
    /// % of the evaluation sets' items answered right (`bench.eval`), or the points
    /// between the candidate's and production's on the same items: `eval_accuracy`.
    EvalAccuracy,
}

/// The gate names a typo is matched against (the percentile forms are said in words).
pub(crate) const GATE_NAMES: &[&str] = &[
    "non_empty",
    "expected_answer",
    "no_markdown",
    "thinking_leak",
    "tool_calls",
    "no_loop",
    "finished",
    "errors_pct",
    "ttft_p50_ms",
    "ttfo_p50_ms",
    "decode_tps_p50",
    "goodput_rps",
    "goodput_pct",
    "vs_production_ttft",
    "vs_production_decode",
    "eval_accuracy",
];

const GATE_FORMS: &str = "a check (non_empty, expected_answer, no_markdown, thinking_leak, \
     tool_calls, no_loop, finished), METRIC_pNN_ms for ttft/ttfo/tpot/itl/e2el or \
     decode_tps_pNN (NN: 50, 90, 99), goodput_rps, goodput_pct, errors_pct, \
     vs_production_METRIC, or eval_accuracy";

impl FromStr for Gate {
    type Err = String;
    fn from_str(s: &str) -> Result<Gate, String> {
        if let Ok(c) = s.parse::<Check>() {
            return Ok(Gate::Quality(c));
        }
        match s {
            "goodput_rps" => return Ok(Gate::GoodputRps),
            "goodput_pct" => return Ok(Gate::GoodputPct),
            "errors_pct" => return Ok(Gate::ErrorsPct),
            "eval_accuracy" => return Ok(Gate::EvalAccuracy),
            _ => {}
        }
        if let Some(m) = s.strip_prefix("vs_production_") {
            return Metric::ALL
                .into_iter()
                .find(|x| x.name() == m)
                .map(Gate::VsProduction)
                .ok_or_else(|| format!("unknown gate `{s}`; a gate is {GATE_FORMS}"));
        }
        for m in Metric::ALL {
            for (p, tag) in [(Pct::P50, "p50"), (Pct::P90, "p90"), (Pct::P99, "p99")] {
                let name = match m {
                    Metric::Decode => format!("decode_tps_{tag}"),
                    _ => format!("{}_{tag}_{}", m.name(), m.unit()),
                };
                if name == s {
                    return Ok(Gate::Percentile(m, p));
                }
            }
        }
        Err(format!("unknown gate `{s}`; a gate is {GATE_FORMS}"))
    }
}

impl Gate {
    /// Gates that compare with production's result.
    pub(crate) fn is_relative(self) -> bool {
        matches!(self, Gate::VsProduction(_))
    }
}

/// One gate as a recipe or `--gate` writes it (`thinking_leak: "== 0%"`), parsed once where
/// it comes in: recipe validation, `bench --gate` and the judging all read this.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GateRule {
    /// The name as written; results and reports show it.
    pub(crate) name: String,
    pub(crate) gate: Gate,
    /// The rule as written.
    pub(crate) text: String,
    pub(crate) rule: Rule,
}

/// Why a gate does not parse; its message says what is allowed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum GateError {
    /// `--gate` without `=`.
    Form(String),
    /// An unknown gate name: (name, message).
    Gate(String, String),
    /// A rule that is not `OP NUMBER[%|ms]`: (name, message).
    Rule(String, String),
}

/// A `--gate` flag that does not parse.
pub(crate) fn bad_gate_flag(e: &GateError) -> crate::error::Error {
    crate::error::Error::BadFlag(crate::error::FlagProblem::Said {
        flag: "--gate",
        why: e.to_string(),
    })
}

impl std::fmt::Display for GateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GateError::Form(text) => {
                write!(f, "{text}: write NAME=RULE, e.g. thinking_leak='== 0%'")
            }
            GateError::Gate(name, e) | GateError::Rule(name, e) => write!(f, "{name}: {e}"),
        }
    }
}

impl GateRule {
    pub(crate) fn new(name: &str, rule: &str) -> Result<GateRule, GateError> {
        let gate = name
            .parse::<Gate>()
            .map_err(|e| GateError::Gate(name.to_string(), e))?;
        let parsed = rule
            .parse::<Rule>()
            .map_err(|e| GateError::Rule(name.to_string(), e))?;
        if parsed.of_production && gate != Gate::EvalAccuracy {
            return Err(GateError::Rule(
                name.to_string(),
                format!(
                    "`{rule}`: only eval_accuracy is written against `production`; give this \
                     gate a number, or compare with production through vs_production_* (a % \
                     change, e.g. vs_production_ttft: \"<= 10%\")"
                ),
            ));
        }
        Ok(GateRule {
            name: name.to_string(),
            gate,
            text: rule.to_string(),
            rule: parsed,
        })
    }

    /// Compares with production's result.
    pub(crate) fn is_relative(&self) -> bool {
        self.gate.is_relative() || self.rule.of_production
    }
}

/// `NAME=RULE`, as `bench --gate` takes it.
impl FromStr for GateRule {
    type Err = GateError;
    fn from_str(s: &str) -> Result<GateRule, GateError> {
        let (name, rule) = s
            .split_once('=')
            .ok_or_else(|| GateError::Form(s.to_string()))?;
        GateRule::new(name, rule)
    }
}

/// A run's gates by name: the order they are judged and shown in; a later one of the same
/// name replaces an earlier one.
pub(crate) type Gates = BTreeMap<String, GateRule>;

/// Takes out the gates that compare with production; their names.
pub(crate) fn take_relative(gates: &mut Gates) -> Vec<String> {
    let names: Vec<String> = gates
        .values()
        .filter(|g| g.is_relative())
        .map(|g| g.name.clone())
        .collect();
    gates.retain(|_, g| !g.is_relative());
    names
}

/// Parses gates as a recipe writes them (name → rule).
pub(crate) fn parse_all(written: &BTreeMap<String, String>) -> Result<Gates, GateError> {
    written
        .iter()
        .map(|(name, rule)| Ok((name.clone(), GateRule::new(name, rule)?)))
        .collect()
}

/// One gate's outcome: three, as Argo Rollouts' analyses have. Inconclusive when the
/// evidence is missing or cannot decide (no baseline, no case that checks it, a 95%
/// interval that holds the threshold): never a pass. A fourth for a gate relative to
/// production when there is no production: it does not apply, and the others decide.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum GateOutcome {
    Pass,
    Fail,
    #[default]
    Inconclusive,
    NotApplied,
}

impl GateOutcome {
    /// As records and reports write it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            GateOutcome::Pass => "pass",
            GateOutcome::Fail => "fail",
            GateOutcome::Inconclusive => "inconclusive",
            GateOutcome::NotApplied => "not-applied",
        }
    }
}

/// The detail of a relative gate with no production to compare with.
pub(crate) const NOT_APPLIED: &str = "not applied, no production to compare with";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct GateResult {
    pub(crate) gate: String,
    pub(crate) rule: String,
    pub(crate) value: Option<f64>,
    /// The value's 95% interval over repeated runs, when it was measured more than once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) interval: Option<(f64, f64)>,
    #[serde(default)]
    pub(crate) outcome: GateOutcome,
    pub(crate) detail: String,
}

/// The best goodput of a result's load levels.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct GoodputFigure {
    pub(in crate::bench) rps: f64,
    pub(in crate::bench) pct: f64,
}

impl GoodputFigure {
    pub(crate) fn rps(&self) -> f64 {
        self.rps
    }

    pub(crate) fn pct(&self) -> f64 {
        self.pct
    }
}

/// What the gates are judged on, from one result (and production's for `vs_*`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Measures {
    /// Check name → % of answers.
    pub(crate) rates: BTreeMap<String, f64>,
    /// Each metric over the measured requests (per-token ones over decoding streams only).
    pub(crate) stats: BTreeMap<Metric, Stats>,
    /// Each metric's per-run p50 over repeated runs.
    pub(crate) confidence: BTreeMap<Metric, Interval>,
    pub(crate) goodput: Option<GoodputFigure>,
    /// % of requests the server failed.
    pub(crate) errors_pct: Option<f64>,
    /// The evaluation sets' answers (and production's, for the relative form).
    pub(crate) eval: Option<crate::eval::Evaluation>,
}

/// A value, its interval if any, and what it is.
struct Judged {
    value: Option<f64>,
    interval: Option<(f64, f64)>,
    detail: String,
}

fn judge_relative(m: Metric, now: &Measures, production: &Baseline<Measures>) -> Judged {
    let none = |detail: String| Judged {
        value: None,
        interval: None,
        detail,
    };
    let base = match production {
        Baseline::Missing(why) => return none(format!("no production baseline: {why}")),
        Baseline::NoProduction => return none(NOT_APPLIED.into()),
        Baseline::Measured(b) => b,
    };
    let (Some(c), Some(b)) = (now.stats.get(&m), base.stats.get(&m)) else {
        return none(format!("no {} p50 on one side", m.name()));
    };
    if b.p50 <= 0.0 {
        return none(format!("production's {} p50 is 0", m.name()));
    }
    let ci = now
        .confidence
        .get(&m)
        .zip(base.confidence.get(&m))
        .and_then(|(a, b)| relative_difference(a, b));
    Judged {
        value: Some(ci.map_or((c.p50 - b.p50) / b.p50 * 100.0, |x| x.0)),
        interval: ci.map(|(_, lo, hi)| (lo, hi)),
        detail: format!(
            "{} p50 {:.1} vs production {:.1}{}",
            m.name(),
            c.p50,
            b.p50,
            if ci.is_some() {
                " (means of repeated runs)"
            } else {
                ""
            }
        ),
    }
}

fn judge(gate: Gate, now: &Measures, production: &Baseline<Measures>) -> Judged {
    let plain = |value: Option<f64>, detail: String| Judged {
        value,
        interval: None,
        detail,
    };
    match gate {
        Gate::Quality(c) => match now.rates.get(c.name()) {
            Some(v) => plain(
                Some(*v),
                format!(
                    "% of answers ({})",
                    if c == Check::ThinkingLeak {
                        "leaking"
                    } else {
                        "passing"
                    }
                ),
            ),
            None => plain(None, "no case in the suite checks this".into()),
        },
        Gate::Percentile(m, p) => {
            let value = now.stats.get(&m).map(|s| s.at(p));
            // Only the p50 is measured per repeated run.
            let ci = (p == Pct::P50).then(|| now.confidence.get(&m)).flatten();
            Judged {
                value: ci.map(|i| i.mean).or(value),
                interval: ci.map(|i| (i.low, i.high)),
                detail: match (value, ci) {
                    (None, _) => format!("no {} measured", m.name()),
                    (_, Some(i)) => format!("mean of {} runs' p50", i.n),
                    _ => format!("{} {p:?}", m.name()),
                },
            }
        }
        Gate::GoodputRps | Gate::GoodputPct => match now.goodput {
            Some(g) if gate == Gate::GoodputRps => {
                plain(Some(g.rps), "requests/s meeting the SLO".into())
            }
            Some(g) => plain(Some(g.pct), "% of requests meeting the SLO".into()),
            None => plain(
                None,
                "no load run with an SLO (give --slo and a load)".into(),
            ),
        },
        Gate::ErrorsPct => match now.errors_pct {
            Some(v) => plain(Some(v), "% of requests the server failed".into()),
            None => plain(None, "no requests counted".into()),
        },
        Gate::VsProduction(m) => judge_relative(m, now, production),
        // `evaluate` hands it to the evaluation's own judgement (`eval_gate`).
        Gate::EvalAccuracy => plain(None, "judged by the evaluation".into()),
    }
}

/// Judges each gate. `production` is the baseline of the relative gates, or why there is
/// none that can be trusted, or that there is no production (they do not apply). A gate whose 95% interval holds its threshold cannot say
/// which side the truth is on: inconclusive.
pub(crate) fn evaluate(
    gates: &Gates,
    now: &Measures,
    production: &Baseline<Measures>,
) -> Vec<GateResult> {
    gates
        .values()
        .map(|g| {
            if g.is_relative() && matches!(production, Baseline::NoProduction) {
                return GateResult {
                    gate: g.name.clone(),
                    rule: g.text.clone(),
                    value: None,
                    interval: None,
                    outcome: GateOutcome::NotApplied,
                    detail: NOT_APPLIED.into(),
                };
            }
            if g.gate == Gate::EvalAccuracy {
                return eval_gate(g, now);
            }
            let j = judge(g.gate, now, production);
            let threshold = g.rule.threshold;
            let straddles = j
                .interval
                .is_some_and(|(lo, hi)| lo < threshold && threshold < hi);
            let outcome = match j.value.map(|v| g.rule.holds(v)) {
                _ if straddles => GateOutcome::Inconclusive,
                Some(true) => GateOutcome::Pass,
                Some(false) => GateOutcome::Fail,
                None => GateOutcome::Inconclusive,
            };
            let detail = match j.interval {
                Some((lo, hi)) if straddles => format!(
                    "{}; its 95% interval [{lo:.1}, {hi:.1}] holds the threshold {threshold}",
                    j.detail
                ),
                Some((lo, hi)) => format!("{}; 95% interval [{lo:.1}, {hi:.1}]", j.detail),
                None => j.detail,
            };
            GateResult {
                gate: g.name.clone(),
                rule: g.text.clone(),
                value: j.value,
                interval: j.interval,
                outcome,
                detail,
            }
        })
        .collect()
}

/// `eval_accuracy`: the evaluation's own judgement (the paired test for the relative form).
fn eval_gate(g: &GateRule, now: &Measures) -> GateResult {
    use crate::eval::gate::{judge, Outcome};
    let rule = g.rule;
    let j = judge(now.eval.as_ref(), rule.of_production, &|v| rule.holds(v));
    GateResult {
        gate: g.name.clone(),
        rule: g.text.clone(),
        value: j.value(),
        interval: None,
        outcome: match j.outcome() {
            Outcome::Pass => GateOutcome::Pass,
            Outcome::Fail => GateOutcome::Fail,
            Outcome::Inconclusive => GateOutcome::Inconclusive,
        },
        detail: j.detail().to_string(),
    }
}

#[cfg(test)]
mod tests;
