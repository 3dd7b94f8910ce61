//! The `eval_accuracy` gate: the candidate's share of right answers against an absolute
//! threshold (`">= 60%"`), or against production's on the same items (`">= production -
//! 3"`, in points) with the paired test deciding whether a shortfall is more than chance.

use serde::{Deserialize, Serialize};

use super::paired::{min_discordant, pair, Paired, ALPHA};
use super::Report;

/// What an evaluation left: the candidate's answers, and production's on the same sets
/// when the gate compares with it (or why there are none).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Evaluation {
    candidate: Report,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    production: Option<Report>,
    /// Why production's answers are missing, when a gate needed them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    production_missing: Option<String>,
    /// The two side by side, item by item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    paired: Option<Paired>,
}

impl Evaluation {
    pub(crate) fn candidate(&self) -> &Report {
        &self.candidate
    }

    pub(crate) fn production(&self) -> Option<&Report> {
        self.production.as_ref()
    }

    pub(crate) fn production_missing(&self) -> Option<&str> {
        self.production_missing.as_deref()
    }

    pub(crate) fn paired(&self) -> Option<&Paired> {
        self.paired.as_ref()
    }

    pub(crate) fn new(candidate: Report, production: Result<Report, String>) -> Evaluation {
        let (production, production_missing) = match production {
            Ok(p) => (Some(p), None),
            Err(why) => (None, Some(why)),
        };
        let paired = production.as_ref().map(|p| pair(&candidate, p));
        Evaluation {
            candidate,
            production,
            production_missing,
            paired,
        }
    }

    /// The items the server failed to answer (not wrong answers: no answer), one line each.
    pub(crate) fn failures(&self) -> Vec<String> {
        self.candidate
            .items
            .iter()
            .filter_map(|i| Some(format!("evaluation {}: {}", i.key, i.failed.as_deref()?)))
            .collect()
    }
}

/// What a run record keeps of an evaluation: each set's score on both sides, and item by
/// item which answers were right.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Record {
    candidate: Vec<super::SetScore>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    production: Vec<super::SetScore>,
    items: Vec<RecordItem>,
    /// The items production got right and the candidate wrong.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    lost: Vec<String>,
}

impl Record {
    pub(crate) fn candidate(&self) -> &[super::SetScore] {
        &self.candidate
    }

    pub(crate) fn production(&self) -> &[super::SetScore] {
        &self.production
    }

    pub(crate) fn lost(&self) -> &[String] {
        &self.lost
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RecordItem {
    key: String,
    /// None: the server did not answer it.
    candidate: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    production: Option<bool>,
}

impl Evaluation {
    pub(crate) fn record(&self) -> Record {
        let theirs = self
            .production
            .as_ref()
            .map(Report::answered)
            .unwrap_or_default();
        Record {
            candidate: self.candidate.sets.clone(),
            production: self
                .production
                .as_ref()
                .map(|p| p.sets.clone())
                .unwrap_or_default(),
            items: self
                .candidate
                .items
                .iter()
                .map(|i| RecordItem {
                    key: i.key.clone(),
                    candidate: i.failed.is_none().then_some(i.right),
                    production: theirs.get(i.key.as_str()).copied(),
                })
                .collect(),
            lost: self
                .paired
                .as_ref()
                .map(|p| p.lost().to_vec())
                .unwrap_or_default(),
        }
    }

    /// The items production got right and the candidate missed, for a rejection's message.
    pub(crate) fn lost_line(&self) -> Option<String> {
        let lost = self.paired.as_ref()?.lost();
        if lost.is_empty() {
            return None;
        }
        let shown: Vec<&str> = lost.iter().take(12).map(String::as_str).collect();
        Some(format!(
            "it got wrong {} item(s) production got right: {}{}",
            lost.len(),
            shown.join(", "),
            if lost.len() > shown.len() {
                ", …"
            } else {
                ""
            }
        ))
    }
}

/// A gate's three outcomes, as the benchmark's gates have them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Pass,
    Fail,
    Inconclusive,
}

/// The gate's figure, outcome and why.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Judged {
    value: Option<f64>,
    outcome: Outcome,
    detail: String,
}

impl Judged {
    pub(crate) fn value(&self) -> Option<f64> {
        self.value
    }

    pub(crate) fn outcome(&self) -> Outcome {
        self.outcome
    }

    pub(crate) fn detail(&self) -> &str {
        &self.detail
    }
}

/// Judges `eval_accuracy`. `relative`: the rule's figure is the difference from
/// production, in points; else the candidate's accuracy, %. `holds` is the rule.
pub(crate) fn judge(
    eval: Option<&Evaluation>,
    relative: bool,
    holds: &dyn Fn(f64) -> bool,
) -> Judged {
    let none = |detail: String| Judged {
        value: None,
        outcome: Outcome::Inconclusive,
        detail,
    };
    let Some(e) = eval else {
        return none("no evaluation ran (the recipe's bench.eval names the sets)".into());
    };
    let c = &e.candidate;
    if !relative {
        let value = c.accuracy_pct;
        let failed = c.items.iter().filter(|i| i.failed.is_some()).count();
        return Judged {
            value: Some(value),
            outcome: if holds(value) {
                Outcome::Pass
            } else {
                Outcome::Fail
            },
            detail: format!(
                "{}/{} items right{}",
                c.right,
                c.total,
                if failed > 0 {
                    format!(" ({failed} not answered)")
                } else {
                    String::new()
                }
            ),
        };
    }
    let Some(p) = &e.paired else {
        return none(format!(
            "no production answers to compare with: {}",
            e.production_missing.as_deref().unwrap_or("none")
        ));
    };
    if p.items == 0 {
        return none(
            "production answered none of these items (another version of the sets?)".into(),
        );
    }
    let value = p.difference_points;
    if holds(value) {
        return Judged {
            value: Some(value),
            outcome: Outcome::Pass,
            detail: p.describe(),
        };
    }
    // A rule that wants more (>=) fails on a candidate worse than it; one that wants less
    // on a better one: the test looks in that direction.
    let (p_value, against) = if holds(f64::MAX) {
        (p.p_worse, p.lost().len())
    } else {
        (p.p_better, p.gained.len())
    };
    let discordant = p.lost().len() + p.gained.len();
    if p_value < ALPHA {
        return Judged {
            value: Some(value),
            outcome: Outcome::Fail,
            detail: p.describe(),
        };
    }
    let why = if discordant < min_discordant() {
        format!(
            "{discordant} discordant item(s) ({against} against it): too few for the paired \
             test to reach significance either way (at least {} are needed at 95%); a larger \
             set would decide",
            min_discordant()
        )
    } else {
        format!("p = {p_value:.3} ≥ {ALPHA}: the shortfall may be chance")
    };
    Judged {
        value: Some(value),
        outcome: Outcome::Inconclusive,
        detail: format!("{}; {why}", p.describe()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::{ItemResult, Report};

    fn report(rights: &[bool]) -> Report {
        let items: Vec<ItemResult> = rights
            .iter()
            .enumerate()
            .map(|(i, &right)| ItemResult {
                key: format!("s#{i}@00"),
                set: "s".into(),
                index: i,
                right,
                ..Default::default()
            })
            .collect();
        Report::of("http://x".into(), "m".into(), items, 1.0)
    }

    fn at_least_minus_3(v: f64) -> bool {
        v >= -3.0 - 1e-9
    }

    #[test]
    fn a_clear_shortfall_fails_a_small_one_is_inconclusive_and_a_tie_passes() {
        let prod = report(&[true; 25]);
        // 5 of 25 lost: 20 points, p = 1/32.
        let mut worse = vec![true; 25];
        worse[..5].fill(false);
        let e = Evaluation::new(report(&worse), Ok(prod.clone()));
        let j = judge(Some(&e), true, &at_least_minus_3);
        assert_eq!(j.outcome, Outcome::Fail, "{}", j.detail);
        assert_eq!(j.value, Some(-20.0));
        assert_eq!(e.paired.as_ref().unwrap().lost().len(), 5);
        // 2 of 25 lost: 8 points down, but 2 discordant items cannot decide.
        let mut two = vec![true; 25];
        two[..2].fill(false);
        let e = Evaluation::new(report(&two), Ok(prod.clone()));
        let j = judge(Some(&e), true, &at_least_minus_3);
        assert_eq!(j.outcome, Outcome::Inconclusive, "{}", j.detail);
        assert!(j.detail.contains("too few"), "{}", j.detail);
        // Identical answers pass: no discordant item is no shortfall.
        let e = Evaluation::new(prod.clone(), Ok(prod));
        assert_eq!(
            judge(Some(&e), true, &at_least_minus_3).outcome,
            Outcome::Pass
        );
        // Without production's answers the relative form cannot decide.
        let e = Evaluation::new(report(&two), Err("production is not running".into()));
        let j = judge(Some(&e), true, &at_least_minus_3);
        assert_eq!(j.outcome, Outcome::Inconclusive);
        assert!(j.detail.contains("production is not running"));
        // The absolute form is the share right.
        let j = judge(Some(&e), false, &|v| v >= 60.0);
        assert_eq!((j.outcome, j.value), (Outcome::Pass, Some(92.0)));
    }
}
