//! The rollout's decision from its tally: abort at the first significant regression,
//! promote when the window ends clean, inconclusive when the evidence is too thin (or
//! points the wrong way without being significant), as Argo Rollouts' analysis does.
//!
//! Each comparison is a one-sided exact binomial test at the rules' `alpha`:
//! - **faults** (an answer the server failed, or one that fails a live check: empty,
//!   looping, …): under shadow, McNemar on the pairs where one side was faulty and the other
//!   not; under canary, the candidate's faulty answers against production's share plus a
//!   margin;
//! - **agreement** (shadow, greedy requests): the answers that differ from production's
//!   against the share allowed to;
//! - **time between tokens** and **first token**: a sign test — how many of the candidate's
//!   answers are slower than production's (its pair, or production's median over the same
//!   window under canary) by more than the tolerance; under the hypothesis that the
//!   candidate is no slower than that, at most half are.

use serde::{Deserialize, Serialize};

use super::tally::{Pair, Sample};
use super::{Mode, Rules, Spec, Tally, Window};
use crate::eval::paired::{binomial_tail, binomial_tail_p};

/// What the rollout does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Decision {
    /// The window is still open.
    Going,
    Promote,
    Abort,
    Inconclusive,
}

impl Decision {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Decision::Going => "going",
            Decision::Promote => "promote",
            Decision::Abort => "abort",
            Decision::Inconclusive => "inconclusive",
        }
    }
}

/// One signal, production beside the candidate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Comparison {
    /// `faults`, `agreement`, `itl`, `ttft`.
    signal: String,
    /// One line with both sides' figures.
    pub(crate) detail: String,
    /// Requests it was judged on.
    n: u64,
    /// The one-sided p-value that the candidate is worse.
    p: f64,
    /// Worse beyond the tolerance as measured (significant or not).
    worse: bool,
    /// Worse, and significantly so.
    regressed: bool,
}

/// The pair (or answers) that show a regression best.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Evidence {
    production: Option<Sample>,
    candidate: Sample,
}

impl Evidence {
    /// One line: both answers (or the candidate's), with what was wrong.
    pub(crate) fn describe(&self) -> String {
        let side = |s: &Sample| {
            let text = s.text.as_deref().unwrap_or("");
            match &s.fault {
                Some(f) => format!("{f}: \"{text}\""),
                None => format!(
                    "\"{text}\" (itl {}, ttft {})",
                    s.itl_ms.map_or("-".into(), |v| format!("{v:.1} ms")),
                    s.ttft_ms.map_or("-".into(), |v| format!("{v:.0} ms"))
                ),
            }
        };
        match &self.production {
            Some(p) => format!(
                "candidate {} — production {}",
                side(&self.candidate),
                side(p)
            ),
            None => format!("candidate {}", side(&self.candidate)),
        }
    }
}

/// The decision and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Judgement {
    pub(crate) decision: Decision,
    pub(crate) reason: String,
    pub(crate) compared: u64,
    pub(crate) comparisons: Vec<Comparison>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) evidence: Option<Evidence>,
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

fn median(mut xs: Vec<f64>) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    xs.sort_by(f64::total_cmp);
    Some(xs[xs.len() / 2])
}

/// The evidence and comparison of one signal.
struct Signal {
    comparison: Comparison,
    evidence: Option<Evidence>,
}

fn faults(mode: Mode, t: &Tally, r: &Rules) -> Option<Signal> {
    let faulty = |s: &Sample| s.fault.is_some();
    match mode {
        Mode::Shadow => {
            let n = t.pairs.len() as u64;
            if n == 0 {
                return None;
            }
            let lost: Vec<&Pair> = (t.pairs.iter())
                .filter(|p| faulty(&p.candidate) && !faulty(&p.production))
                .collect();
            let gained = (t.pairs.iter())
                .filter(|p| !faulty(&p.candidate) && faulty(&p.production))
                .count();
            let (c, p) = (
                t.pairs.iter().filter(|p| faulty(&p.candidate)).count() as u64,
                t.pairs.iter().filter(|p| faulty(&p.production)).count() as u64,
            );
            let pv = binomial_tail(lost.len() + gained, lost.len());
            let worse = pct(c, n) > pct(p, n) + r.fault_margin * 100.0;
            Some(Signal {
                comparison: Comparison {
                    signal: "faults".into(),
                    detail: format!(
                        "faulty answers: candidate {c} of {n} ({:.0}%), production {p} ({:.0}%); \
                         {} only the candidate's, {gained} only production's (p = {pv:.3})",
                        pct(c, n),
                        pct(p, n),
                        lost.len()
                    ),
                    n,
                    p: pv,
                    worse,
                    regressed: worse && pv < r.alpha,
                },
                evidence: lost.first().map(|p| Evidence {
                    production: Some(p.production.clone()),
                    candidate: p.candidate.clone(),
                }),
            })
        }
        Mode::Canary => {
            let n = t.candidate.len() as u64;
            if n == 0 {
                return None;
            }
            let k = t.candidate.iter().filter(|s| faulty(s)).count() as u64;
            let np = t.production.len() as u64;
            let kp = t.production.iter().filter(|s| faulty(s)).count() as u64;
            // Production's share, smoothed so a handful of its answers is not read as
            // certainty, plus the margin allowed.
            let allowed = ((kp as f64 + 1.0) / (np as f64 + 2.0) + r.fault_margin).min(0.99);
            let pv = binomial_tail_p(n as usize, k as usize, allowed);
            let worse = pct(k, n) > pct(kp, np.max(1)) + r.fault_margin * 100.0;
            Some(Signal {
                comparison: Comparison {
                    signal: "faults".into(),
                    detail: format!(
                        "faulty answers: candidate {k} of {n} ({:.0}%), production {kp} of {np} \
                         ({:.0}%) (p = {pv:.3})",
                        pct(k, n),
                        pct(kp, np)
                    ),
                    n,
                    p: pv,
                    worse,
                    regressed: worse && pv < r.alpha,
                },
                evidence: t.candidate.iter().find(|s| faulty(s)).map(|s| Evidence {
                    production: None,
                    candidate: s.clone(),
                }),
            })
        }
    }
}

fn agreement(t: &Tally, r: &Rules) -> Option<Signal> {
    let judged: Vec<&Pair> = t.pairs.iter().filter(|p| p.agree.is_some()).collect();
    let m = judged.len() as u64;
    if m == 0 {
        return None;
    }
    let differ: Vec<&&Pair> = judged.iter().filter(|p| p.agree == Some(false)).collect();
    let d = differ.len() as u64;
    let pv = binomial_tail_p(m as usize, d as usize, r.max_disagreement);
    let worse = pct(d, m) > r.max_disagreement * 100.0;
    Some(Signal {
        comparison: Comparison {
            signal: "agreement".into(),
            detail: format!(
                "answers to greedy requests that differ from production's: {d} of {m} ({:.0}%, \
                 {:.0}% allowed) (p = {pv:.3})",
                pct(d, m),
                r.max_disagreement * 100.0
            ),
            n: m,
            p: pv,
            worse,
            regressed: worse && pv < r.alpha,
        },
        // A fluent wrong answer shows a disagreement best; a faulty one shows a fault.
        evidence: (differ.iter().find(|p| p.candidate.fault.is_none()))
            .or(differ.first())
            .map(|p| Evidence {
                production: Some(p.production.clone()),
                candidate: p.candidate.clone(),
            }),
    })
}

/// A latency signal: `get` reads it from a sample; `tolerance` is how much slower is fine.
fn latency(
    mode: Mode,
    t: &Tally,
    r: &Rules,
    signal: &str,
    tolerance: f64,
    get: fn(&Sample) -> Option<f64>,
) -> Option<Signal> {
    // (candidate, its reference, the production sample it was set against)
    let compared: Vec<(f64, f64, Option<&Sample>, &Sample)> = match mode {
        Mode::Shadow => (t.pairs.iter())
            .filter_map(|p| {
                Some((
                    get(&p.candidate)?,
                    get(&p.production)?,
                    Some(&p.production),
                    &p.candidate,
                ))
            })
            .collect(),
        Mode::Canary => {
            let theirs: Vec<f64> = t.production.iter().filter_map(get).collect();
            if theirs.len() < 5 {
                return None;
            }
            let reference = median(theirs)?;
            (t.candidate.iter())
                .filter_map(|s| Some((get(s)?, reference, None, s)))
                .collect()
        }
    };
    let n = compared.len() as u64;
    if n == 0 {
        return None;
    }
    let slower = (compared.iter())
        .filter(|(c, p, ..)| *c > p * (1.0 + tolerance))
        .count();
    let pv = binomial_tail(n as usize, slower);
    let ratio = median(compared.iter().map(|(c, p, ..)| c / p.max(1e-9)).collect())?;
    let cand = median(compared.iter().map(|(c, ..)| *c).collect())?;
    let prod = median(compared.iter().map(|(_, p, ..)| *p).collect())?;
    let worse = ratio > 1.0 + tolerance;
    let worst = compared
        .iter()
        .max_by(|a, b| (a.0 / a.1.max(1e-9)).total_cmp(&(b.0 / b.1.max(1e-9))))?;
    Some(Signal {
        comparison: Comparison {
            signal: signal.into(),
            detail: format!(
                "{signal} median: candidate {cand:.1} ms, production {prod:.1} ms ({:+.0}%, \
                 {:.0}% allowed); {slower} of {n} slower than allowed (p = {pv:.3})",
                (ratio - 1.0) * 100.0,
                tolerance * 100.0
            ),
            n,
            p: pv,
            worse,
            regressed: worse && pv < r.alpha,
        },
        evidence: Some(Evidence {
            production: worst.2.cloned(),
            candidate: worst.3.clone(),
        }),
    })
}

/// The decision on `tally` after `elapsed`.
pub(crate) fn judge(spec: &Spec, tally: &Tally, elapsed: std::time::Duration) -> Judgement {
    let (mode, r) = (spec.mode, &spec.rules);
    let signals: Vec<Signal> = [
        faults(mode, tally, r),
        (mode == Mode::Shadow)
            .then(|| agreement(tally, r))
            .flatten(),
        latency(mode, tally, r, "itl", r.itl_tolerance, |s| s.itl_ms),
        latency(mode, tally, r, "ttft", r.ttft_tolerance, |s| s.ttft_ms),
    ]
    .into_iter()
    .flatten()
    .collect();
    let compared = tally.compared(mode);
    let comparisons: Vec<Comparison> = signals.iter().map(|s| s.comparison.clone()).collect();
    let done = |decision, reason: String, evidence| Judgement {
        decision,
        reason,
        compared,
        comparisons: comparisons.clone(),
        evidence,
    };
    if let Some(s) = signals.iter().find(|s| s.comparison.regressed) {
        return done(
            Decision::Abort,
            format!("a significant regression: {}", s.comparison.detail),
            s.evidence.clone(),
        );
    }
    let (complete, needed) = match spec.window {
        Window::Requests(n) => (compared >= n, r.min_compared.min(n)),
        Window::Time(d) => (elapsed >= d, r.min_compared),
    };
    let out_of_time = matches!(spec.window, Window::Requests(_)) && elapsed >= spec.within;
    if !complete && !out_of_time {
        return done(Decision::Going, format!("{compared} compared so far"), None);
    }
    // A window of requests that did not fill within its time is never promoted.
    if !complete {
        return done(
            Decision::Inconclusive,
            format!(
                "only {compared} requests compared in {} of the window's {}",
                crate::units::format_duration(elapsed),
                spec.window
            ),
            None,
        );
    }
    // A canary's latency is judged against production's answers over the same window: too
    // few of them (a share near 100%) and it was not judged at all.
    let reference = tally
        .production
        .iter()
        .filter(|s| s.itl_ms.is_some())
        .count();
    if mode == Mode::Canary && reference < 5 {
        return done(
            Decision::Inconclusive,
            format!(
                "production answered {reference} streamed requests over the window: too few to \
                 compare the candidate's latency with (lower the share)"
            ),
            None,
        );
    }
    if compared < needed {
        return done(
            Decision::Inconclusive,
            format!(
                "only {compared} requests compared in {}; {needed} are needed to promote",
                crate::units::format_duration(elapsed)
            ),
            None,
        );
    }
    if let Some(s) = signals.iter().find(|s| s.comparison.worse) {
        return done(
            Decision::Inconclusive,
            format!("worse, though not significantly: {}", s.comparison.detail),
            s.evidence.clone(),
        );
    }
    done(
        Decision::Promote,
        format!("the window ended clean: {compared} requests compared"),
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn spec(mode: Mode, n: u64) -> Spec {
        Spec {
            mode,
            share: 100.0,
            window: Window::Requests(n),
            within: Duration::from_secs(3600),
            rules: Rules::default(),
        }
    }

    fn sample(fault: bool, itl: f64, text: &str) -> Sample {
        Sample {
            fault: fault.then(|| "failed no_loop".to_string()),
            ttft_ms: Some(50.0),
            itl_ms: Some(itl),
            text: Some(text.into()),
        }
    }

    fn pair(p: Sample, c: Sample, agree: Option<bool>) -> Pair {
        Pair {
            production: p,
            candidate: c,
            agree,
        }
    }

    #[test]
    fn a_clean_window_promotes_and_a_thin_one_is_inconclusive() {
        let mut t = Tally::default();
        for _ in 0..20 {
            t.pair(pair(
                sample(false, 20.0, "a"),
                sample(false, 20.5, "a"),
                Some(true),
            ));
        }
        let j = judge(&spec(Mode::Shadow, 20), &t, Duration::from_secs(5));
        assert_eq!(j.decision, Decision::Promote, "{j:?}");
        let j = judge(&spec(Mode::Shadow, 30), &t, Duration::from_secs(5));
        assert_eq!(j.decision, Decision::Going, "{j:?}");
        // Out of time with too few compared: inconclusive, never promoted.
        let mut thin = Tally::default();
        thin.pair(pair(
            sample(false, 20.0, "a"),
            sample(false, 20.0, "a"),
            None,
        ));
        let j = judge(&spec(Mode::Shadow, 30), &thin, Duration::from_secs(7200));
        assert_eq!(j.decision, Decision::Inconclusive, "{j:?}");
    }

    /// The numbers of requests each regression needs, as the guide states them.
    #[test]
    fn regressions_abort_within_the_stated_numbers_of_requests() {
        let abort_at = |mode: Mode, add: &dyn Fn(&mut Tally)| {
            let mut t = Tally::default();
            for i in 1..=100 {
                add(&mut t);
                if judge(&spec(mode, 1000), &t, Duration::ZERO).decision == Decision::Abort {
                    return i;
                }
            }
            panic!("never aborted");
        };
        // Hollow answers under shadow: McNemar needs 7 discordant pairs at 1%.
        let hollow = abort_at(Mode::Shadow, &|t| {
            t.pair(pair(
                sample(false, 20.0, "Paris"),
                sample(true, 20.0, ""),
                Some(false),
            ))
        });
        assert!(hollow <= 7, "{hollow}");
        // Wrong words on greedy requests: 3 disagreeing pairs against 20% allowed.
        let wrong = abort_at(Mode::Shadow, &|t| {
            t.pair(pair(
                sample(false, 20.0, "Paris"),
                sample(false, 20.0, "Lyon"),
                Some(false),
            ))
        });
        assert_eq!(wrong, 3);
        // 30% slower between tokens under canary: 7 of its answers beside production's.
        let slow = abort_at(Mode::Canary, &|t| {
            t.answer(false, sample(false, 20.0, "a"));
            t.answer(true, sample(false, 26.0, "a"));
        });
        assert_eq!(slow, 7);
        // 10% slower is within the tolerance: never aborted.
        let mut t = Tally::default();
        for _ in 0..200 {
            t.answer(false, sample(false, 20.0, "a"));
            t.answer(true, sample(false, 22.0, "a"));
        }
        assert_ne!(
            judge(&spec(Mode::Canary, 1000), &t, Duration::ZERO).decision,
            Decision::Abort
        );
        // Failing every request under canary.
        let failing = abort_at(Mode::Canary, &|t| {
            t.answer(false, sample(false, 20.0, "a"));
            t.answer(
                true,
                Sample {
                    fault: Some("answered 500".into()),
                    ttft_ms: None,
                    itl_ms: None,
                    text: None,
                },
            );
        });
        assert!(failing <= 4, "{failing}");
    }

    #[test]
    fn a_window_that_did_not_fill_or_a_canary_without_production_is_never_promoted() {
        let mut t = Tally::default();
        for _ in 0..12 {
            t.pair(pair(
                sample(false, 20.0, "a"),
                sample(false, 20.0, "a"),
                Some(true),
            ));
        }
        // 12 of 50 compared when the time ran out: enough to judge, not the window asked.
        let j = judge(&spec(Mode::Shadow, 50), &t, Duration::from_secs(7200));
        assert_eq!(j.decision, Decision::Inconclusive, "{j:?}");
        // A canary at a share so high that production answered too little to compare with.
        let mut t = Tally::default();
        for i in 0..20 {
            t.answer(true, sample(false, 60.0, "a"));
            if i < 3 {
                t.answer(false, sample(false, 20.0, "a"));
            }
        }
        let j = judge(&spec(Mode::Canary, 20), &t, Duration::ZERO);
        assert_eq!(j.decision, Decision::Inconclusive, "{j:?}");
    }

    #[test]
    fn worse_but_not_significant_is_inconclusive_with_its_evidence() {
        let mut t = Tally::default();
        for i in 0..10 {
            let bad = i < 2;
            t.pair(pair(
                sample(false, 20.0, "Paris"),
                sample(bad, 20.0, "Paris"),
                Some(true),
            ));
        }
        let j = judge(&spec(Mode::Shadow, 10), &t, Duration::ZERO);
        assert_eq!(j.decision, Decision::Inconclusive, "{j:?}");
        assert!(j.evidence.is_some());
    }
}
