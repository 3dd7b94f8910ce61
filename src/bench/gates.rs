//! Quality checks on each answer, and the gate rules a recipe sets on the aggregate
//! (`thinking_leak: "== 0%"`, `decode_tps_p50: ">= 25"`, `vs_production_decode: ">= -10%"`).

use serde::{Deserialize, Serialize};

use super::client::Sample;
use super::suite::Case;

/// Headers, bold, lists, code fences: what a voice reads out as symbols.
pub fn has_markdown(text: &str) -> bool {
    text.contains("**")
        || text.contains("```")
        || text.contains("__")
        || text.lines().any(|l| {
            let t = l.trim_start();
            let numbered = t
                .split_once(". ")
                .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
            t.starts_with('#') && t.trim_start_matches('#').starts_with(' ')
                || t.starts_with("- ")
                || t.starts_with("* ")
                || numbered
        })
}

/// Reasoning that reached the content (the seeds' v1 mistake).
pub fn leaks_thinking(text: &str) -> bool {
    text.contains("<think>") || text.contains("</think>") || text.contains("Thinking Process:")
}

/// Every per-answer check.
pub const CHECKS: &[&str] = &[
    "non_empty",
    "expected_answer",
    "no_markdown",
    "thinking_leak",
    "tool_calls",
];

/// The per-answer checks that apply to this case: (check, passed).
pub fn checks(sample: &Sample, case: &Case) -> Vec<(&'static str, bool)> {
    let mut all = every_check(sample, case);
    if let Some(only) = &case.checks {
        all.retain(|(name, _)| only.iter().any(|o| o == name));
    }
    all
}

fn every_check(sample: &Sample, case: &Case) -> Vec<(&'static str, bool)> {
    let mut out = vec![
        (
            "non_empty",
            !sample.content.trim().is_empty() || !sample.tool_calls.is_empty(),
        ),
        ("no_markdown", !has_markdown(&sample.content)),
        ("thinking_leak", leaks_thinking(&sample.content)),
    ];
    if let Some(expect) = &case.expect {
        out.push((
            "expected_answer",
            sample
                .content
                .to_lowercase()
                .contains(&expect.to_lowercase()),
        ));
    }
    if let Some(tool) = &case.expect_tool {
        let called = sample.tool_calls.first().is_some_and(|t| {
            &t.name == tool
                && serde_json::from_str::<serde_json::Value>(&t.arguments)
                    .is_ok_and(|v| v.is_object())
        });
        out.push(("tool_calls", called));
    }
    out
}

/// One gate's outcome: three, as Argo Rollouts' analyses have. Inconclusive when the
/// evidence is missing (no production baseline, no case that checks it): never a pass.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GateOutcome {
    Pass,
    Fail,
    #[default]
    Inconclusive,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GateResult {
    pub gate: String,
    pub rule: String,
    pub value: Option<f64>,
    #[serde(default)]
    pub outcome: GateOutcome,
    pub detail: String,
}

/// Gates that compare with production's result.
pub fn is_relative(gate: &str) -> bool {
    gate.starts_with("vs_production_")
}

/// Does `value` satisfy `rule` (`>= 60%`, `== 0%`, `<= 200ms`, `>= 25`)?
pub fn satisfies(value: f64, rule: &str) -> Option<bool> {
    let rule = rule.trim();
    let op = ["==", ">=", "<=", "<", ">"]
        .into_iter()
        .find(|op| rule.starts_with(op))?;
    let number: f64 = rule[op.len()..]
        .trim()
        .trim_end_matches('%')
        .trim_end_matches("ms")
        .trim()
        .parse()
        .ok()?;
    Some(match op {
        "==" => (value - number).abs() < 1e-9,
        ">=" => value >= number - 1e-9,
        "<=" => value <= number + 1e-9,
        "<" => value < number,
        _ => value > number,
    })
}

/// What the gates are judged on, from one result (and the production's for `vs_*`).
pub struct Measures<'a> {
    pub rates: &'a std::collections::BTreeMap<String, f64>,
    pub ttft_p50_ms: Option<f64>,
    pub ttfo_p50_ms: Option<f64>,
    pub decode_tps_p50: Option<f64>,
}

/// Judges each gate. `production` is the baseline of the relative gates, or why there is
/// none that can be trusted.
pub fn evaluate(
    gates: &std::collections::BTreeMap<String, String>,
    now: &Measures,
    production: Result<&Measures, &str>,
) -> Vec<GateResult> {
    gates
        .iter()
        .map(|(gate, rule)| {
            let relative = |cur: Option<f64>, base: fn(&Measures) -> Option<f64>, what: &str| {
                match (cur, production.map(base)) {
                    (_, Err(why)) => (None, format!("no production baseline: {why}")),
                    (Some(c), Ok(Some(b))) if b > 0.0 => (
                        Some((c - b) / b * 100.0),
                        format!("{what} {c:.1} vs production {b:.1}"),
                    ),
                    (None, Ok(_)) => (None, format!("no {what} measured")),
                    (Some(_), Ok(_)) => (None, format!("production has no {what}")),
                }
            };
            let (value, detail) = match gate.as_str() {
                "ttft_p50_ms" => (now.ttft_p50_ms, "TTFT p50 in ms".to_string()),
                "ttfo_p50_ms" => (now.ttfo_p50_ms, "TTFO p50 in ms".to_string()),
                "decode_tps_p50" => (now.decode_tps_p50, "decode tok/s p50".to_string()),
                "vs_production_ttft" => {
                    relative(now.ttft_p50_ms, |p| p.ttft_p50_ms, "TTFT p50 ms")
                }
                "vs_production_decode" => relative(
                    now.decode_tps_p50,
                    |p| p.decode_tps_p50,
                    "decode tok/s p50",
                ),
                rate => match now.rates.get(rate) {
                    Some(v) => (
                        Some(*v),
                        format!(
                            "% of answers ({})",
                            if rate == "thinking_leak" {
                                "leaking"
                            } else {
                                "passing"
                            }
                        ),
                    ),
                    None => (None, "no case in the suite checks this".to_string()),
                },
            };
            let outcome = match value.and_then(|v| satisfies(v, rule)) {
                Some(true) => GateOutcome::Pass,
                Some(false) => GateOutcome::Fail,
                None => GateOutcome::Inconclusive,
            };
            GateResult {
                gate: gate.clone(),
                rule: rule.clone(),
                value,
                outcome,
                detail,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_and_leaks_are_recognised() {
        assert!(has_markdown("## Tokyo\nIt is big."));
        assert!(has_markdown("It is **big**."));
        assert!(has_markdown("Options:\n- one\n- two"));
        assert!(has_markdown("1. first\n2. second"));
        assert!(has_markdown("```\ncode\n```"));
        assert!(!has_markdown(
            "Tokyo is the capital of Japan. It has 14 million people."
        ));
        assert!(!has_markdown("I paid $5 - no, $6."));
        assert!(leaks_thinking("<think>hmm</think>Tokyo"));
        assert!(leaks_thinking("Thinking Process: first"));
        assert!(!leaks_thinking("I think it is Tokyo."));
    }

    #[test]
    fn rules_compare_as_written() {
        assert_eq!(satisfies(0.0, "== 0%"), Some(true));
        assert_eq!(satisfies(20.0, "== 0%"), Some(false));
        assert_eq!(satisfies(60.0, ">= 60%"), Some(true));
        assert_eq!(satisfies(250.0, "<= 200ms"), Some(false));
        assert_eq!(satisfies(-12.0, ">= -10%"), Some(false));
        assert_eq!(satisfies(1.0, "about 5"), None);
    }

    #[test]
    fn a_relative_gate_without_a_baseline_is_inconclusive_never_a_pass() {
        let rates = std::collections::BTreeMap::from([("no_markdown".to_string(), 100.0)]);
        let now = Measures {
            rates: &rates,
            ttft_p50_ms: Some(100.0),
            ttfo_p50_ms: Some(100.0),
            decode_tps_p50: Some(30.0),
        };
        let gates = std::collections::BTreeMap::from([
            ("vs_production_decode".to_string(), ">= -10%".to_string()),
            ("no_markdown".to_string(), ">= 80%".to_string()),
            ("tool_calls".to_string(), ">= 60%".to_string()),
        ]);
        let r = evaluate(&gates, &now, Err("its run had 3 failed requests"));
        let outcome = |g: &str| r.iter().find(|x| x.gate == g).unwrap().outcome;
        assert_eq!(outcome("vs_production_decode"), GateOutcome::Inconclusive);
        assert_eq!(outcome("no_markdown"), GateOutcome::Pass);
        assert_eq!(outcome("tool_calls"), GateOutcome::Inconclusive);
        let base = Measures {
            decode_tps_p50: Some(40.0),
            ..now
        };
        let now = Measures {
            rates: &rates,
            ttft_p50_ms: Some(100.0),
            ttfo_p50_ms: Some(100.0),
            decode_tps_p50: Some(30.0),
        };
        let r = evaluate(&gates, &now, Ok(&base));
        let g = r.iter().find(|x| x.gate == "vs_production_decode").unwrap();
        assert_eq!((g.outcome, g.value), (GateOutcome::Fail, Some(-25.0)));
    }
}
