//! The verdicts a bisect reaches from its measurements: each round's judgement (against
//! the ends, or by the gate), whether the ends are what they are called, and what it says
//! when a step stays inconclusive.

use super::judge::{self, Criterion, Judgement, Verdict};
use super::record::{Bisect, Measurement, Role};
use super::search;
use crate::bench::result::BenchResult;
use crate::error::{EndProblem, Error, Result};

/// A step left inconclusive at the bound: the bisect stops there, with the range so far.
pub(crate) fn undecided(b: &Bisect, i: usize, m: &Measurement) -> Error {
    let known = b.known();
    let good = known[..i]
        .iter()
        .rposition(|k| *k == search::Known::Good)
        .unwrap_or(0);
    let bad = i + known[i..]
        .iter()
        .position(|k| *k == search::Known::Bad)
        .unwrap_or(known.len() - 1 - i);
    let short = |j: usize| crate::units::short_digest(&b.digests[j].digest);
    Error::Failed(format!(
        "step {} ({}) is still inconclusive after {} round(s): {}. It is not guessed: the first \
         bad digest lies after {} and up to {}. `sparkctl bisect {} --resume` measures it again \
         (its runs so far are pooled with the new ones); a quieter machine or a larger --repeat \
         narrows each round",
        m.step,
        short(i),
        m.rounds.len(),
        m.judgement
            .as_ref()
            .map_or("no figure", |j| j.detail.as_str()),
        short(good),
        short(bad),
        b.recipe
    ))
}

/// Each end must be what it is called, beyond the noise; else there is nothing to bisect.
pub(crate) fn check_end(b: &Bisect, digest: &str, role: Role) -> Result<()> {
    let m = &b.measurements[digest];
    let what = if role == Role::GoodEnd { "good" } else { "bad" };
    let bad_end = |problem| Error::BadEnd {
        role: what,
        digest: crate::units::short_digest(digest),
        problem,
    };
    if let Some(why) = &m.skipped {
        return Err(bad_end(EndProblem::NotMeasured(why.clone())));
    }
    let detail = m
        .judgement
        .as_ref()
        .map_or("", |j| j.detail.as_str())
        .to_string();
    match (role, m.verdict()) {
        (Role::GoodEnd, Some(Verdict::Good)) | (Role::BadEnd, Some(Verdict::Bad)) => Ok(()),
        (_, Some(Verdict::Inconclusive) | None) => Err(bad_end(EndProblem::Undecided {
            rounds: m.rounds.len(),
            detail,
        })),
        _ => Err(bad_end(EndProblem::NotSo { role: what, detail })),
    }
}

/// The verdict on a measurement after a round.
pub(crate) fn judge_one(b: &Bisect, m: &Measurement, last: &BenchResult) -> Judgement {
    let pooled = m.pooled();
    if let Some(rule) = b.criterion.gate() {
        let mut now = last.measures();
        now.confidence = pooled;
        return judge::by_gate(&rule, &now);
    }
    let ends = |d: &str| b.measurements.get(d).map(Measurement::pooled);
    match m.role {
        Role::GoodEnd => {
            let metric = b.metric();
            let figure = metric.and_then(|x| pooled.get(&x));
            Judgement {
                verdict: Verdict::Good,
                value: figure.map(|i| i.mean),
                interval: figure.map(|i| (i.low, i.high)),
                detail: "the good end: the steps are judged against it".into(),
            }
        }
        Role::BadEnd => {
            let Some(good) = ends(b.good_end()) else {
                return Judgement::inconclusive("the good end is not measured".into());
            };
            let told = match b.criterion {
                Criterion::Metric(x) => good
                    .get(&x)
                    .zip(pooled.get(&x))
                    .and_then(|(g, c)| Some((x, judge::ends_differ(g, c)?.0))),
                _ => judge::most_different(&good, &pooled),
            };
            match told {
                Some((x, pct)) => Judgement {
                    verdict: Verdict::Bad,
                    value: pooled.get(&x).map(|i| i.mean),
                    interval: pooled.get(&x).map(|i| (i.low, i.high)),
                    detail: format!(
                        "{} p50 {pct:+.0}% from the good end's, beyond the noise",
                        x.name()
                    ),
                },
                None => Judgement::inconclusive(format!(
                    "{} does not differ from the good end's beyond the noise yet",
                    b.criterion.describe(b.chosen)
                )),
            }
        }
        Role::Step => {
            let metric = b.metric().expect("chosen once the ends were measured");
            let (good, bad) = (ends(b.good_end()), ends(b.bad_end()));
            let get = |p: &Option<std::collections::BTreeMap<_, _>>| {
                p.as_ref().and_then(|p| p.get(&metric).cloned())
            };
            match (pooled.get(&metric), get(&good), get(&bad)) {
                (Some(c), Some(g), Some(x)) => judge::against_ends(metric, c, &g, &x),
                _ => Judgement::inconclusive(format!(
                    "no {} p50 measured over two runs or more ({} failed request(s))",
                    metric.name(),
                    last.problems.len()
                )),
            }
        }
    }
}
