//! The gates' parsing and judging, on measures made here.

use super::*;
use crate::bench::stats::interval;

#[test]
fn gate_names_parse_to_typed_gates_and_bad_ones_say_what_is_allowed() {
    assert_eq!("no_markdown".parse(), Ok(Gate::Quality(Check::NoMarkdown)));
    assert_eq!(
        "ttft_p99_ms".parse(),
        Ok(Gate::Percentile(Metric::Ttft, Pct::P99))
    );
    assert_eq!(
        "decode_tps_p50".parse(),
        Ok(Gate::Percentile(Metric::Decode, Pct::P50))
    );
    assert_eq!(
        "tpot_p90_ms".parse(),
        Ok(Gate::Percentile(Metric::Tpot, Pct::P90))
    );
    assert_eq!("goodput_rps".parse(), Ok(Gate::GoodputRps));
    assert_eq!(
        "vs_production_ttft".parse(),
        Ok(Gate::VsProduction(Metric::Ttft))
    );
    let e = "ttft_p95_ms".parse::<Gate>().unwrap_err();
    assert!(
        e.contains("`ttft_p95_ms`") && e.contains("NN: 50, 90, 99"),
        "{e}"
    );
    assert!("about 5".parse::<Rule>().unwrap_err().contains("`about 5`"));
}

fn satisfies(value: f64, rule: &str) -> Option<bool> {
    rule.parse::<Rule>().ok().map(|r| r.holds(value))
}

#[test]
fn gates_parse_once_with_their_names_and_say_which_part_is_wrong() {
    let g: GateRule = "ttft_p90_ms=<= 800ms".parse().unwrap();
    assert_eq!(g.gate, Gate::Percentile(Metric::Ttft, Pct::P90));
    assert_eq!(
        (g.name.as_str(), g.text.as_str()),
        ("ttft_p90_ms", "<= 800ms")
    );
    assert!(!g.is_relative());
    assert!("vs_production_ttft=>= -10%"
        .parse::<GateRule>()
        .unwrap()
        .is_relative());
    let e = "thinking_leak".parse::<GateRule>().unwrap_err();
    assert_eq!(e, GateError::Form("thinking_leak".into()));
    assert!(e.to_string().contains("write NAME=RULE"), "{e}");
    assert!(matches!(
        "ttft_p95_ms=<= 1".parse::<GateRule>(),
        Err(GateError::Gate(..))
    ));
    let e = "no_markdown=lots".parse::<GateRule>().unwrap_err();
    assert!(matches!(e, GateError::Rule(..)));
    assert!(
        e.to_string()
            .starts_with("no_markdown: `lots` is not a gate rule"),
        "{e}"
    );
}

#[test]
fn every_suggested_gate_name_is_a_gate() {
    for name in GATE_NAMES {
        assert!(name.parse::<Gate>().is_ok(), "{name}");
    }
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

fn measures(decode: f64, runs: &[f64]) -> Measures {
    let mut m = Measures::default();
    m.rates.insert("no_markdown".into(), 100.0);
    m.stats.insert(
        Metric::Decode,
        Stats {
            n: 5,
            p50: decode,
            p90: decode,
            p99: decode,
            min: decode,
            max: decode,
        },
    );
    if let Some(i) = interval(runs) {
        m.confidence.insert(Metric::Decode, i);
    }
    m
}

#[test]
fn a_relative_gate_without_a_baseline_is_inconclusive_never_a_pass() {
    let now = measures(30.0, &[]);
    let gates = parse_all(&BTreeMap::from([
        ("vs_production_decode".to_string(), ">= -10%".to_string()),
        ("no_markdown".to_string(), ">= 80%".to_string()),
        ("tool_calls".to_string(), ">= 60%".to_string()),
    ]))
    .unwrap();
    let r = evaluate(
        &gates,
        &now,
        &Baseline::missing("its run had 3 failed requests"),
    );
    let outcome = |r: &[GateResult], g: &str| r.iter().find(|x| x.gate == g).unwrap().outcome;
    assert_eq!(
        outcome(&r, "vs_production_decode"),
        GateOutcome::Inconclusive
    );
    assert_eq!(outcome(&r, "no_markdown"), GateOutcome::Pass);
    assert_eq!(outcome(&r, "tool_calls"), GateOutcome::Inconclusive);
    let base = Baseline::Measured(measures(40.0, &[]));
    let r = evaluate(&gates, &now, &base);
    let g = r.iter().find(|x| x.gate == "vs_production_decode").unwrap();
    assert_eq!((g.outcome, g.value), (GateOutcome::Fail, Some(-25.0)));
    // No production at all: the relative gates do not apply; the others are judged.
    let mut with_eval = gates.clone();
    let eval = GateRule::new("eval_accuracy", ">= production - 3").unwrap();
    with_eval.insert(eval.name.clone(), eval);
    let r = evaluate(&with_eval, &now, &Baseline::NoProduction);
    for g in ["vs_production_decode", "eval_accuracy"] {
        let g = r.iter().find(|x| x.gate == g).unwrap();
        assert_eq!(
            (g.outcome, g.detail.as_str()),
            (GateOutcome::NotApplied, NOT_APPLIED)
        );
    }
    assert_eq!(outcome(&r, "no_markdown"), GateOutcome::Pass);
}

#[test]
fn a_gate_whose_interval_holds_the_threshold_is_inconclusive() {
    let gates = parse_all(&BTreeMap::from([(
        "vs_production_decode".to_string(),
        ">= -10%".to_string(),
    )]))
    .unwrap();
    // Means 36 vs 40 (−10%) with a wide spread: the interval straddles −10%.
    let now = measures(36.0, &[30.0, 42.0, 36.0, 33.0, 39.0]);
    let base = Baseline::Measured(measures(40.0, &[39.0, 41.0, 40.0, 38.0, 42.0]));
    let g = &evaluate(&gates, &now, &base)[0];
    assert_eq!(g.outcome, GateOutcome::Inconclusive, "{g:?}");
    assert!(g.detail.contains("holds the threshold"), "{}", g.detail);
    // Tight runs well below: a clear fail.
    let now = measures(30.0, &[30.0, 30.5, 29.5, 30.2, 29.8]);
    let g = &evaluate(&gates, &now, &base)[0];
    assert_eq!(g.outcome, GateOutcome::Fail, "{g:?}");
    // An absolute gate too.
    let gates = parse_all(&BTreeMap::from([(
        "decode_tps_p50".to_string(),
        ">= 35".to_string(),
    )]))
    .unwrap();
    let now = measures(36.0, &[30.0, 42.0, 36.0, 33.0, 39.0]);
    assert_eq!(
        evaluate(&gates, &now, &Baseline::missing("-"))[0].outcome,
        GateOutcome::Inconclusive
    );
}
