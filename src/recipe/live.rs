//! A recipe's `live` section: how the front door judges it as production on what it says —
//! live gates over its recent answers (the same gate words as `bench.gates`) and golden
//! prompts (the suite's expected-answer cases) sent on a schedule — and its validation.

use std::collections::BTreeMap;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::diag::{suggest, Report};
use super::Recipe;
use crate::bench::gates::{Gate, GateError, GateRule, Gates, GATE_NAMES};
use crate::bench::suite::Check;
use crate::units::HumanDuration;

/// Answers judged together by default: the most recent ones.
pub(crate) const DEFAULT_WINDOW: usize = 20;
/// How long a live gate stays failed before production counts as unhealthy, by default.
pub(crate) const DEFAULT_SUSTAIN: Duration = Duration::from_secs(30);
/// Golden rounds failed in a row before production counts as unhealthy, by default.
pub(crate) const DEFAULT_GOLDEN_FAILURES: u32 = 2;

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Live {
    /// Gate name → rule, judged on production's most recent answers as they stream through
    /// the front door, in the words of `bench.gates`: `no_loop: ">= 90%"`, `thinking_leak:
    /// "== 0%"`, `tool_calls: ">= 60%"`, `errors_pct: "<= 5%"`, `ttft_p90_ms: "<= 2000"`,
    /// `vs_production_decode: ">= -50%"` (against its own benchmark). Without them, and
    /// beneath them, a floor: `non_empty: ">= 50%"` and `no_loop: ">= 50%"` (a gate of the
    /// same name set here replaces the floor's).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    gates: BTreeMap<String, String>,
    /// Answers judged together: the most recent this many (default 20).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    window: Option<usize>,
    /// Answers needed before a gate is judged (default: half the window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    min_answers: Option<usize>,
    /// How long a gate must stay failed before production counts as unhealthy: restarted,
    /// then replaced by its `fallback` (default 30s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sustain: Option<HumanDuration>,
    /// Known questions sent to production on a schedule, their answers checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) golden: Option<Golden>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Golden {
    /// How often a round of golden prompts is sent, e.g. `5m`.
    pub(crate) every: HumanDuration,
    /// The suite's cases to send (default: every case with `expect` or `expect_tool`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) cases: Vec<String>,
    /// The suite they come from (default: `bench.suite`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    suite: Option<String>,
    /// Rounds failed in a row before production counts as unhealthy (default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) failures: Option<u32>,
}

/// Whether a gate can be judged on live answers (nothing is expected of them, and no
/// load level runs).
pub(crate) fn judged_live(g: Gate) -> bool {
    match g {
        Gate::Quality(c) => c != Check::ExpectedAnswer,
        Gate::Percentile(..) | Gate::VsProduction(_) => true,
        Gate::ErrorsPct => true,
        Gate::GoodputRps | Gate::GoodputPct | Gate::EvalAccuracy => false,
    }
}

impl Live {
    pub(crate) fn window(&self) -> usize {
        self.window.unwrap_or(DEFAULT_WINDOW)
    }

    pub(crate) fn min_answers(&self) -> usize {
        self.min_answers.unwrap_or(self.window().div_ceil(2))
    }

    pub(crate) fn sustain(&self) -> Duration {
        self.sustain.map_or(DEFAULT_SUSTAIN, |d| d.0)
    }
}

/// The live gates every production is judged by when its recipe sets none of that name: an
/// answer that is empty, or loops, most of the time is a failure whether or not the recipe
/// has a `live` section (a production answering empty to clients that do not stream went
/// unnoticed without one).
pub(crate) const FLOOR_GATES: &[(&str, &str)] = &[("non_empty", ">= 50%"), ("no_loop", ">= 50%")];

/// The live gates of a recipe (`live.gates`), over the floor (`FLOOR_GATES`). Checked when
/// the recipe was loaded; a gate that does not parse is left out.
pub(crate) fn gates_of(r: &Recipe) -> Gates {
    let mut gates: Gates = FLOOR_GATES
        .iter()
        .filter_map(|(n, rule)| Some((n.to_string(), GateRule::new(n, rule).ok()?)))
        .collect();
    gates.extend(
        r.live
            .iter()
            .flat_map(|l| l.gates.iter())
            .filter_map(|(n, rule)| Some((n.clone(), GateRule::new(n, rule).ok()?))),
    );
    gates
}

/// The `live` section's problems, each at its key.
pub(super) fn check(out: &mut Report, r: &Recipe) {
    let Some(live) = &r.live else { return };
    for (gate, rule) in &live.gates {
        let key = format!("live.gates.{gate}");
        match GateRule::new(gate, rule) {
            Err(GateError::Gate(..)) => out.bad(
                &key,
                format!("unknown gate `{gate}`"),
                &suggest(gate, GATE_NAMES, "gates"),
            ),
            Err(GateError::Rule(..) | GateError::Form(_)) => out.bad(
                &key,
                format!("`{rule}` is not a gate rule"),
                "write an operator and a number, e.g. \"== 0%\", \">= 90%\" or \"<= 1500ms\"",
            ),
            Ok(g) if !judged_live(g.gate) => out.bad(
                &key,
                format!("`{gate}` cannot be judged on live answers"),
                "nothing is expected of a user's question and no load level runs: check \
                 expected answers with `live.golden`, goodput with `bench`",
            ),
            Ok(_) => {}
        }
    }
    let window = live.window();
    if !(5..=1000).contains(&window) {
        out.bad(
            "live.window",
            format!("{window} answers cannot be judged together"),
            "give 5 to 1000 (the most recent answers judged together)",
        );
    }
    if live.min_answers.is_some_and(|m| m == 0 || m > window) {
        out.bad(
            "live.min_answers",
            format!("min_answers must be 1 to the window ({window})"),
            "",
        );
    }
    if live.sustain().is_zero() {
        out.bad(
            "live.sustain",
            "a breach must last some time before production is replaced".into(),
            "give a duration such as 30s",
        );
    }
    if let Some(g) = &live.golden {
        check_golden(out, r, g);
    }
}

fn check_golden(out: &mut Report, r: &Recipe, g: &Golden) {
    if g.every.0 < Duration::from_secs(1) {
        out.bad(
            "live.golden.every",
            format!("every {} is too often", g.every),
            "give 1s or more, e.g. 5m",
        );
    }
    if g.failures == Some(0) {
        out.bad(
            "live.golden.failures",
            "0 rounds: at least one round must fail".into(),
            "",
        );
    }
    let suites = out
        .path
        .parent()
        .map(|p| p.join("suites"))
        .unwrap_or_default();
    let name = suite_of(r);
    match crate::bench::suite::Suite::load(&name, &suites) {
        Err(e) => out.bad(
            "live.golden.suite",
            format!("the suite `{name}` does not load: {e}"),
            "name a built-in suite, one in recipes/suites/, or a file",
        ),
        Ok(suite) => {
            let names: Vec<&str> = suite.cases().iter().map(|c| c.name()).collect();
            for (i, c) in g.cases.iter().enumerate() {
                match suite.cases().iter().find(|x| x.name() == c) {
                    None => out.bad(
                        &format!("live.golden.cases[{i}]"),
                        format!("the suite `{name}` has no case `{c}`"),
                        &suggest(c, &names, "cases"),
                    ),
                    Some(x) if x.expect().is_none() && x.expect_tool().is_none() => out.bad(
                        &format!("live.golden.cases[{i}]"),
                        format!("case `{c}` expects nothing (no `expect`, no `expect_tool`)"),
                        "a golden prompt is a case whose answer is known",
                    ),
                    Some(_) => {}
                }
            }
            if g.cases.is_empty() && golden_cases(&suite, &[]).is_empty() {
                out.bad(
                    "live.golden",
                    format!("the suite `{name}` has no case with `expect` or `expect_tool`"),
                    "name a suite with expected answers, or list `cases`",
                );
            }
        }
    }
}

/// The suite golden prompts come from.
pub(crate) fn suite_of(r: &Recipe) -> String {
    r.live
        .as_ref()
        .and_then(|l| l.golden.as_ref())
        .and_then(|g| g.suite.clone())
        .or_else(|| r.bench.as_ref().map(|b| b.suite.clone()))
        .unwrap_or_else(|| crate::bench::suite::DEFAULT_SUITE.to_string())
}

/// The golden cases of `suite`: those named, or every case whose answer is known.
pub(crate) fn golden_cases<'a>(
    suite: &'a crate::bench::suite::Suite,
    named: &[String],
) -> Vec<&'a crate::bench::suite::Case> {
    suite
        .cases()
        .iter()
        .filter(|c| match named.is_empty() {
            true => c.expect().is_some() || c.expect_tool().is_some(),
            false => named.iter().any(|n| n == c.name()),
        })
        .collect()
}
