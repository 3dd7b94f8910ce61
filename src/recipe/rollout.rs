//! A recipe's `rollout` section: how `up` lets the candidate meet live traffic after its
//! gates pass and before it takes it all (`crate::rollout`), and its validation. The
//! flags of `up` (`--shadow`, `--canary`, `--window`, `--share`) say the same and win.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::diag::Report;
use super::Recipe;
use crate::bench::gates::{Gate, GateRule, Metric};
use crate::rollout::{self as r, Mode, Rules, Spec, Window};
use crate::units::HumanDuration;

/// A number or a string in YAML: `window: 50`, `window: 10m`, `share: 10%`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub(crate) enum Scalar {
    Number(f64),
    Text(String),
}

impl std::fmt::Display for Scalar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scalar::Number(n) => write!(f, "{n}"),
            Scalar::Text(t) => f.write_str(t),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Rollout {
    /// `shadow` (copies of live requests; production answers every client) or `canary` (a
    /// share of the conversations answered by the candidate).
    mode: Mode,
    /// % of requests copied (shadow, default 100%) or of conversations sent (canary,
    /// default 10%).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    share: Option<Scalar>,
    /// Requests compared (`50`, the default) or a duration (`10m`) before promoting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    window: Option<Scalar>,
    /// A window of requests ends inconclusive when they do not come within this (default
    /// 1h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    within: Option<HumanDuration>,
    /// Answers to greedy requests (temperature 0) that may differ from production's, e.g.
    /// `20%` (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_disagreement: Option<Scalar>,
    /// How much slower between tokens than production is no regression, e.g. `15%` (default:
    /// from `bench.gates.vs_production_decode`, else 15%).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    itl_tolerance: Option<Scalar>,
    /// The same for the first token (default: from `bench.gates.vs_production_ttft`, else
    /// 50%).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ttft_tolerance: Option<Scalar>,
}

/// What `up`'s flags ask of the rollout; each wins over the recipe's section.
#[derive(Debug, Clone, Default)]
pub(crate) struct Asked {
    /// `--shadow [WINDOW]`: Some(None) without a window.
    pub(crate) shadow: Option<Option<String>>,
    /// `--canary SHARE`.
    pub(crate) canary: Option<String>,
    /// `--window WINDOW`.
    pub(crate) window: Option<String>,
    /// `--share SHARE` (shadow's sample).
    pub(crate) share: Option<String>,
    /// No rollout, whatever the recipe says (an upgrade replaces production in place).
    pub(crate) off: bool,
}

impl Asked {
    pub(crate) fn off() -> Asked {
        Asked {
            off: true,
            ..Asked::default()
        }
    }
}

/// A problem with a value: where (a flag or the recipe key) and why.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Bad {
    pub(crate) at: String,
    pub(crate) why: String,
}

fn bad(at: &str, why: String) -> Bad {
    Bad {
        at: at.to_string(),
        why,
    }
}

/// A percentage as a fraction, from `10%` (or `10`), in [0, `most`]%: an allowance (at most
/// 100%) or a tolerance (slower by up to 10×).
fn fraction(at: &str, s: &Scalar, most: f64) -> Result<f64, Bad> {
    let text = s.to_string();
    let t = text.trim();
    match t.strip_suffix('%').unwrap_or(t).trim().parse::<f64>() {
        Ok(p) if (0.0..=most).contains(&p) => Ok(p / 100.0),
        _ => Err(bad(
            at,
            format!("`{text}` is not a percentage from 0% to {most}%; write e.g. `15%`"),
        )),
    }
}

/// The number in a relative gate's rule (`>= -10%` → 10), as a fraction; None for a rule
/// that asks for an improvement (`>= +5%`), which is no tolerance.
fn gate_percent(rule: &GateRule) -> Option<f64> {
    if rule.text.contains('+') {
        return None;
    }
    let digits: String = rule
        .text
        .chars()
        .filter(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    digits.parse::<f64>().ok().map(|p| p / 100.0)
}

/// The tolerances the recipe's relative bench gates already state: a decode rate allowed
/// to fall by X% is a time between tokens allowed to grow by X/(100-X).
fn tolerances_of_gates(recipe: &Recipe) -> (Option<f64>, Option<f64>) {
    let gates = recipe.bench.iter().flat_map(|b| b.gates.iter());
    let (mut itl, mut ttft) = (None, None);
    for (name, rule) in gates {
        let Ok(g) = GateRule::new(name, rule) else {
            continue;
        };
        match g.gate {
            Gate::VsProduction(Metric::Decode) => {
                itl = gate_percent(&g).filter(|f| *f < 1.0).map(|f| f / (1.0 - f))
            }
            Gate::VsProduction(Metric::Ttft) => ttft = gate_percent(&g),
            _ => {}
        }
    }
    (itl, ttft)
}

/// The rollout `up` runs for `recipe` as `asked`: None when neither the flags nor the recipe
/// ask for one.
pub(crate) fn spec(recipe: &Recipe, asked: &Asked) -> Result<Option<Spec>, Bad> {
    if asked.off {
        return Ok(None);
    }
    let section = recipe.rollout.as_ref();
    let mode = match (&asked.shadow, &asked.canary, section) {
        (Some(_), Some(_), _) => {
            return Err(bad("--shadow", "and --canary together: choose one".into()))
        }
        (Some(_), None, _) => Mode::Shadow,
        (None, Some(_), _) => Mode::Canary,
        (None, None, Some(s)) => s.mode,
        (None, None, None) => {
            if let Some((flag, _)) = [("--window", &asked.window), ("--share", &asked.share)]
                .into_iter()
                .find(|(_, v)| v.is_some())
            {
                return Err(bad(
                    flag,
                    "needs a rollout: add --shadow or --canary (or a `rollout` section)".into(),
                ));
            }
            return Ok(None);
        }
    };
    let share = match (mode, &asked.canary, &asked.share) {
        (Mode::Canary, Some(s), _) => r::parse_share(s).map_err(|e| bad("--canary", e))?,
        (Mode::Canary, None, Some(_)) => {
            return Err(bad(
                "--share",
                "is shadow's sample; a canary's share is --canary's".into(),
            ))
        }
        (Mode::Shadow, _, Some(s)) => r::parse_share(s).map_err(|e| bad("--share", e))?,
        _ => match section.and_then(|s| s.share.as_ref()) {
            Some(s) => r::parse_share(&s.to_string()).map_err(|e| bad("rollout.share", e))?,
            None if mode == Mode::Canary => 10.0,
            None => 100.0,
        },
    };
    let window = match (
        asked.shadow.as_ref().and_then(|w| w.as_ref()),
        &asked.window,
    ) {
        (Some(w), _) => Window::parse(w).map_err(|e| bad("--shadow", e))?,
        (None, Some(w)) => Window::parse(w).map_err(|e| bad("--window", e))?,
        (None, None) => match section.and_then(|s| s.window.as_ref()) {
            Some(w) => Window::parse(&w.to_string()).map_err(|e| bad("rollout.window", e))?,
            None => Window::Requests(r::DEFAULT_WINDOW),
        },
    };
    let (itl, ttft) = tolerances_of_gates(recipe);
    let mut rules = Rules::default();
    rules.itl_tolerance = itl.unwrap_or(rules.itl_tolerance);
    rules.ttft_tolerance = ttft.unwrap_or(rules.ttft_tolerance);
    if let Some(s) = section {
        let set = |v: &Option<Scalar>, key: &str, most: f64, into: &mut f64| match v {
            Some(v) => fraction(&format!("rollout.{key}"), v, most).map(|f| *into = f),
            None => Ok(()),
        };
        let r = &mut rules;
        set(
            &s.max_disagreement,
            "max_disagreement",
            100.0,
            &mut r.max_disagreement,
        )?;
        set(
            &s.itl_tolerance,
            "itl_tolerance",
            1000.0,
            &mut r.itl_tolerance,
        )?;
        set(
            &s.ttft_tolerance,
            "ttft_tolerance",
            1000.0,
            &mut r.ttft_tolerance,
        )?;
    }
    let within = section
        .and_then(|s| s.within)
        .map_or(r::DEFAULT_WITHIN, |d| d.0);
    if within < Duration::from_secs(1) {
        return Err(bad(
            "rollout.within",
            format!(
                "{} is too short to see any traffic; give e.g. 1h",
                HumanDuration(within)
            ),
        ));
    }
    Ok(Some(Spec {
        mode,
        share,
        window,
        within,
        rules,
    }))
}

/// The section's problems, each at its key.
pub(super) fn check(out: &mut Report, r: &Recipe) {
    let Some(s) = &r.rollout else { return };
    if let Some(Err(e)) = s.share.as_ref().map(|v| r::parse_share(&v.to_string())) {
        out.bad("rollout.share", e, "");
    }
    if let Some(Err(e)) = s.window.as_ref().map(|v| Window::parse(&v.to_string())) {
        out.bad("rollout.window", e, "");
    }
    if s.within.is_some_and(|d| d.0 < Duration::from_secs(1)) {
        out.bad(
            "rollout.within",
            "too short to see any traffic".into(),
            "give e.g. 1h",
        );
    }
    let shares = [
        ("max_disagreement", &s.max_disagreement, 100.0),
        ("itl_tolerance", &s.itl_tolerance, 1000.0),
        ("ttft_tolerance", &s.ttft_tolerance, 1000.0),
    ];
    for (key, v, most) in shares {
        let at = format!("rollout.{key}");
        if let Some(Err(b)) = v.as_ref().map(|v| fraction(&at, v, most)) {
            out.bad(&b.at, b.why, "");
        }
    }
}
