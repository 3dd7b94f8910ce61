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

/// One gate's verdict. `passed` is None when it could not be judged (no baseline, no data).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GateResult {
    pub gate: String,
    pub rule: String,
    pub value: Option<f64>,
    pub passed: Option<bool>,
    pub detail: String,
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
    pub decode_tps_p50: Option<f64>,
}

pub fn evaluate(
    gates: &std::collections::BTreeMap<String, String>,
    now: &Measures,
    production: Option<&Measures>,
) -> Vec<GateResult> {
    gates
        .iter()
        .map(|(gate, rule)| {
            let relative = |cur: Option<f64>, base: Option<f64>, what: &str| match (cur, base) {
                (Some(c), Some(b)) if b > 0.0 => (
                    Some((c - b) / b * 100.0),
                    format!("{what} {c:.1} vs production {b:.1}"),
                ),
                (_, None) if production.is_none() => {
                    (None, "no production result to compare with".into())
                }
                _ => (None, format!("no {what} measured")),
            };
            let (value, detail) = match gate.as_str() {
                "ttft_p50_ms" => (now.ttft_p50_ms, "TTFT p50 in ms".to_string()),
                "decode_tps_p50" => (now.decode_tps_p50, "decode tok/s p50".to_string()),
                "vs_production_ttft" => relative(
                    now.ttft_p50_ms,
                    production.and_then(|p| p.ttft_p50_ms),
                    "TTFT p50 ms",
                ),
                "vs_production_decode" => relative(
                    now.decode_tps_p50,
                    production.and_then(|p| p.decode_tps_p50),
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
            GateResult {
                gate: gate.clone(),
                rule: rule.clone(),
                passed: value.and_then(|v| satisfies(v, rule)),
                value,
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
}
