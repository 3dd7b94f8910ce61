//! Live quality: the verdicts of production's recent answers, per instance, judged by the
//! recipe's live gates with the benchmark's own evaluator (`bench::gates::evaluate`); the
//! `/metrics` series and the `status` summary they make; and when a failed gate has lasted
//! long enough to make production unhealthy (the watch acts on it).

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::quality::{Asked, Verdict};
use crate::bench::gates::{self, GateOutcome, GateResult, Gates, Measures, Metric};
use crate::bench::stats::stats;
use crate::bench::suite::Check;
use crate::bench::Baseline;
use crate::exposition::{Exposed, Kind, Page};
pub(crate) use crate::frontdoor::status::{GoldenLast, LiveStatus};
use crate::production::Upstream;

/// Instances whose windows are kept (the newest; older ones were replaced).
const INSTANCES: usize = 8;

/// How the live gates are judged for one instance (the recipe's `live` section).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Judging {
    pub(in crate::server) window: usize,
    pub(in crate::server) min_answers: usize,
    pub(in crate::server) sustain: Duration,
}

impl Default for Judging {
    fn default() -> Judging {
        let spec = crate::recipe::live::Live::default();
        Judging {
            window: spec.window(),
            min_answers: spec.min_answers(),
            sustain: spec.sustain(),
        }
    }
}

/// A breach that lasted: production is unhealthy.
#[derive(Debug, Clone)]
pub(crate) struct Breach {
    /// One line: which gates failed, for how long, over how many answers.
    pub(in crate::server) why: String,
    /// The offending answers (trimmed, escaped), one per failed check.
    pub(in crate::server) evidence: Vec<String>,
    pub(in crate::server) gates: Vec<GateResult>,
}

struct Window {
    recipe: String,
    /// Answers kept: the judging window, once judged.
    cap: usize,
    used: u64,
    answers: VecDeque<Verdict>,
    failing_since: Option<Instant>,
    last: Vec<GateResult>,
}

#[derive(Default)]
struct Totals {
    answers: u64,
    errors: u64,
    /// Answers that failed a check or that the server failed.
    faulty: u64,
    faults: BTreeMap<Check, u64>,
}

#[derive(Default)]
struct State {
    windows: BTreeMap<String, Window>,
    uses: u64,
    totals: BTreeMap<String, Totals>,
    /// By recipe: rounds passed and failed, and the last.
    golden: BTreeMap<String, (u64, u64, GoldenLast)>,
}

/// One round of golden prompts: how many were asked, and each failure with its answer.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct GoldenRound {
    pub(in crate::server) cases: usize,
    pub(in crate::server) failed: Vec<String>,
}

/// The front door's live judge, shared by the proxy (which records) and the watch (which
/// judges).
pub struct Live {
    /// `SPARKCTL_FRONTDOOR_QUALITY=off` turns the classifier off (to measure its cost).
    enabled: bool,
    state: Mutex<State>,
}

impl Default for Live {
    fn default() -> Live {
        Live {
            enabled: true,
            state: Mutex::default(),
        }
    }
}

/// The parts of a chat request its answer is judged against, typed so the messages are
/// skipped, not built.
#[derive(Deserialize)]
struct Request {
    #[serde(default)]
    tools: Option<Vec<serde::de::IgnoredAny>>,
    #[serde(default)]
    temperature: Option<f64>,
}

impl Live {
    pub(crate) fn new(enabled: bool) -> Live {
        Live {
            enabled,
            ..Live::default()
        }
    }

    /// What a request asks, when its answer is to be judged (a chat completion, an
    /// Anthropic message, an OpenAI response).
    pub fn asked(&self, method: &hyper::Method, path: &str, body: &[u8]) -> Option<Asked> {
        let judged = ["/chat/completions", "/messages", "/responses"];
        if !self.enabled
            || method != hyper::Method::POST
            || !judged.iter().any(|j| path.ends_with(j))
        {
            return None;
        }
        let r: Request = serde_json::from_slice(body).ok()?;
        Some(Asked {
            tools: r.tools.is_some_and(|t| !t.is_empty()),
            deterministic: r.temperature == Some(0.0),
            api: crate::agents::Api::of(path),
        })
    }

    /// One answer of `up`'s, judged.
    pub fn record(&self, up: &Upstream, v: Verdict) {
        let mut s = self.state.lock().expect("live");
        let t = s.totals.entry(up.recipe.clone()).or_default();
        t.answers += 1;
        t.errors += u64::from(v.error.is_some());
        let faulty = v.error.is_some() || v.checks.iter().any(|(c, _)| v.fails(*c));
        t.faulty += u64::from(faulty);
        for (c, _) in v.checks.iter().filter(|(c, _)| v.fails(*c)) {
            *t.faults.entry(*c).or_default() += 1;
        }
        s.uses += 1;
        let uses = s.uses;
        if !s.windows.contains_key(&up.deployment) {
            if s.windows.len() >= INSTANCES {
                let oldest = s
                    .windows
                    .iter()
                    .min_by_key(|(_, w)| w.used)
                    .map(|(k, _)| k.clone());
                if let Some(k) = oldest {
                    s.windows.remove(&k);
                }
            }
            s.windows.insert(
                up.deployment.clone(),
                Window {
                    recipe: up.recipe.clone(),
                    cap: Judging::default().window,
                    used: uses,
                    answers: VecDeque::new(),
                    failing_since: None,
                    last: Vec::new(),
                },
            );
        }
        let w = s.windows.get_mut(&up.deployment).expect("inserted above");
        w.used = uses;
        w.answers.push_back(v);
        while w.answers.len() > w.cap {
            w.answers.pop_front();
        }
    }

    /// Judges `deployment`'s most recent answers by `gates`; a breach when a gate has been
    /// failing for `sustain`. `baseline` is the instance's own benchmark (for
    /// `vs_production_*`), or why there is none.
    pub(crate) fn judge(
        &self,
        deployment: &str,
        gates: &Gates,
        how: Judging,
        baseline: &Baseline<Measures>,
    ) -> Option<Breach> {
        let mut s = self.state.lock().expect("live");
        let w = s.windows.get_mut(deployment)?;
        w.cap = how.window;
        while w.answers.len() > how.window {
            w.answers.pop_front();
        }
        let n = w.answers.len();
        let results = if n < how.min_answers {
            gates
                .values()
                .map(|g| GateResult {
                    gate: g.name.clone(),
                    rule: g.text.clone(),
                    value: None,
                    interval: None,
                    outcome: GateOutcome::Inconclusive,
                    detail: format!("{n} of the {} answers needed so far", how.min_answers),
                })
                .collect()
        } else {
            gates::evaluate(gates, &measures(&w.answers, how.min_answers), baseline)
        };
        let failed: Vec<GateResult> = results
            .iter()
            .filter(|r| r.outcome == GateOutcome::Fail)
            .cloned()
            .collect();
        w.last = results;
        if failed.is_empty() {
            w.failing_since = None;
            return None;
        }
        let since = *w.failing_since.get_or_insert_with(Instant::now);
        if since.elapsed() < how.sustain {
            return None;
        }
        let what: Vec<String> = failed
            .iter()
            .map(|g| match g.value {
                Some(v) => format!("{} {v:.1} (rule {})", g.gate, g.rule),
                None => format!("{} (rule {})", g.gate, g.rule),
            })
            .collect();
        Some(Breach {
            why: format!(
                "live gates failed for {:.0} s over its last {n} answers: {}",
                since.elapsed().as_secs_f64(),
                what.join(", ")
            ),
            evidence: evidence(&w.answers, &failed),
            gates: failed,
        })
    }

    /// The live summary of `deployment`, as last judged.
    pub(crate) fn status(&self, deployment: &str) -> Option<LiveStatus> {
        let s = self.state.lock().expect("live");
        let w = s.windows.get(deployment)?;
        Some(LiveStatus {
            recipe: w.recipe.clone(),
            deployment: deployment.to_string(),
            answers: w.answers.len(),
            rates: measures(&w.answers, 1).rates,
            gates: w.last.clone(),
            failing_for_s: w.failing_since.map(|t| t.elapsed().as_secs_f64()),
            golden: s.golden.get(&w.recipe).map(|g| g.2.clone()),
        })
    }

    /// By recipe: answers judged so far, and how many of them were faulty (the live page's
    /// quality chart takes differences).
    pub(crate) fn counts(&self) -> BTreeMap<String, (u64, u64)> {
        let s = self.state.lock().expect("live");
        s.totals
            .iter()
            .map(|(up, t)| (up.clone(), (t.answers, t.faulty)))
            .collect()
    }

    /// A golden round of `recipe`'s, done.
    pub(crate) fn golden(&self, recipe: &str, round: &GoldenRound) {
        let mut s = self.state.lock().expect("live");
        let g = s.golden.entry(recipe.to_string()).or_default();
        match round.failed.is_empty() {
            true => g.0 += 1,
            false => g.1 += 1,
        }
        g.2 = GoldenLast {
            at: crate::units::now_utc(),
            cases: round.cases,
            failed: round.failed.clone(),
        };
    }
}

impl Exposed for Live {
    /// The live series: answers and their faults, golden rounds, and each recipe's most
    /// recently used instance's rates, gates and decode speed.
    fn expose(&self, page: &mut Page<'_>) -> fmt::Result {
        let s = self.state.lock().expect("live");
        let mut f = page.family(
            "sparkctl_frontdoor_answers",
            "Answers judged on live traffic, by upstream.",
            Kind::Counter,
        )?;
        for (up, t) in &s.totals {
            f.counter(&[("upstream", up)], t.answers)?;
        }
        let mut f = page.family(
            "sparkctl_frontdoor_answer_faults",
            "Judged answers that failed a check (empty, markdown, thinking leak, tool call left as text, loop or garbled, cut by length), by upstream and check; error: failed by the server.",
            Kind::Counter,
        )?;
        for (up, t) in &s.totals {
            for (c, n) in &t.faults {
                f.counter(&[("upstream", up), ("check", c.name())], *n)?;
            }
            f.counter(&[("upstream", up), ("check", "error")], t.errors)?;
        }
        let mut f = page.family(
            "sparkctl_frontdoor_golden_rounds",
            "Rounds of golden prompts sent to production, by upstream and outcome.",
            Kind::Counter,
        )?;
        for (up, (passed, failed, _)) in &s.golden {
            f.counter(&[("upstream", up), ("outcome", "pass")], *passed)?;
            f.counter(&[("upstream", up), ("outcome", "fail")], *failed)?;
        }
        let current: Vec<(&String, &Window)> = latest_per_recipe(&s.windows);
        let mut f = page.family(
            "sparkctl_frontdoor_live_rate",
            "% of the instance's recent answers passing each check (leaking, for thinking_leak).",
            Kind::Gauge,
        )?;
        for (id, w) in &current {
            for (check, v) in measures(&w.answers, 1).rates {
                let labels = [
                    ("upstream", w.recipe.as_str()),
                    ("deployment", id),
                    ("check", &check),
                ];
                f.gauge(&labels, v)?;
            }
        }
        let mut f = page.family(
            "sparkctl_frontdoor_live_gate",
            "Each live gate as last judged: 1 pass, 0 fail, -1 inconclusive.",
            Kind::Gauge,
        )?;
        for (id, w) in &current {
            for g in &w.last {
                let v: i64 = match g.outcome {
                    GateOutcome::Pass => 1,
                    GateOutcome::Fail => 0,
                    // Live gates judge production itself: none is ever "not applied".
                    GateOutcome::Inconclusive | GateOutcome::NotApplied => -1,
                };
                let labels = [
                    ("upstream", w.recipe.as_str()),
                    ("deployment", id),
                    ("gate", &g.gate),
                ];
                f.gauge(&labels, v)?;
            }
        }
        let mut f = page.family(
            "sparkctl_frontdoor_live_decode_tps",
            "Median decode speed of the instance's recent answers, tokens/s.",
            Kind::Gauge,
        )?;
        for (id, w) in &current {
            if let Some(d) = measures(&w.answers, 1).stats.get(&Metric::Decode) {
                f.gauge(
                    &[("upstream", w.recipe.as_str()), ("deployment", id)],
                    d.p50(),
                )?;
            }
        }
        Ok(())
    }
}

/// Each recipe's most recently used instance.
fn latest_per_recipe(windows: &BTreeMap<String, Window>) -> Vec<(&String, &Window)> {
    let mut best: BTreeMap<&str, (&String, &Window)> = BTreeMap::new();
    for (id, w) in windows {
        let keep = best
            .get(w.recipe.as_str())
            .is_none_or(|(_, b)| b.used < w.used);
        if keep {
            best.insert(&w.recipe, (id, w));
        }
    }
    best.into_values().collect()
}

/// What the gates are judged on: each check's rate over the answers it applied to (given
/// at least `min` of them), each latency figure over the answers the server did not fail,
/// and the share it failed.
fn measures(answers: &VecDeque<Verdict>, min: usize) -> Measures {
    let served: Vec<&Verdict> = answers.iter().filter(|v| v.error.is_none()).collect();
    let mut counts: BTreeMap<Check, (usize, usize)> = BTreeMap::new();
    for v in &served {
        for (c, passed) in &v.checks {
            let e = counts.entry(*c).or_default();
            e.0 += usize::from(*passed);
            e.1 += 1;
        }
    }
    let need = (min / 2).max(1);
    let rates = counts
        .into_iter()
        .filter(|(_, (_, n))| *n >= need)
        .map(|(c, (p, n))| (c.to_string(), 100.0 * p as f64 / n as f64))
        .collect();
    let pick = |f: fn(&Verdict) -> Option<f64>| {
        stats(&served.iter().filter_map(|v| f(v)).collect::<Vec<_>>())
    };
    let mut stats_of = BTreeMap::new();
    for (m, s) in [
        (Metric::Ttft, pick(|v| v.ttft_ms)),
        (Metric::Ttfo, pick(|v| v.ttfo_ms)),
        (Metric::Tpot, pick(|v| v.tpot_ms)),
        (Metric::E2el, pick(|v| Some(v.e2el_ms))),
        (Metric::Decode, pick(|v| v.decode_tps)),
    ] {
        if let Some(s) = s {
            stats_of.insert(m, s);
        }
    }
    Measures {
        rates,
        stats: stats_of,
        errors_pct: (!answers.is_empty())
            .then(|| 100.0 * (answers.len() - served.len()) as f64 / answers.len() as f64),
        ..Measures::default()
    }
}

/// For each failed gate, its most recent offending answer.
fn evidence(answers: &VecDeque<Verdict>, failed: &[GateResult]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for g in failed {
        let found = match g.gate.parse::<gates::Gate>() {
            Ok(gates::Gate::Quality(c)) => answers.iter().rev().find(|v| v.fails(c)).map(|v| {
                let how = match (c, v.degenerate) {
                    (Check::NoLoop, Some(d)) => format!(" ({d})"),
                    _ => String::new(),
                };
                format!("{c}{how}: \"{}\"", v.evidence.clone().unwrap_or_default())
            }),
            Ok(gates::Gate::ErrorsPct) => answers
                .iter()
                .rev()
                .find_map(|v| v.error.as_ref())
                .map(|e| format!("errors_pct: {e}")),
            _ => Some(format!("{}: {}", g.gate, g.detail)),
        };
        if let Some(e) = found.filter(|e| !out.contains(e)) {
            out.push(e);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::quality::{Answer, Delta};

    fn answer(text: &str) -> Verdict {
        let mut a = Answer::new(Asked::default(), Instant::now());
        for w in text.split_inclusive(' ') {
            a.delta(
                Delta {
                    content: Some(w),
                    tokens: 1,
                    ..Default::default()
                },
                Instant::now(),
            );
        }
        a.end()
    }

    fn up(d: &str) -> Upstream {
        Upstream {
            recipe: "prod".into(),
            deployment: d.into(),
            url: "http://127.0.0.1:1".into(),
        }
    }

    #[test]
    fn a_gate_failed_for_the_sustain_time_is_a_breach_with_its_evidence() {
        let live = Live::default();
        let gates = gates::parse_all(&BTreeMap::from([
            ("no_loop".to_string(), ">= 80%".to_string()),
            ("non_empty".to_string(), ">= 90%".to_string()),
        ]))
        .unwrap();
        let how = Judging {
            window: 10,
            min_answers: 4,
            sustain: Duration::from_millis(50),
        };
        for _ in 0..3 {
            live.record(&up("a"), answer("Tokyo is the capital of Japan."));
        }
        // Too few answers: nothing is judged.
        assert!(live
            .judge("a", &gates, how, &Baseline::missing("-"))
            .is_none());
        assert!(live
            .status("a")
            .unwrap()
            .gates
            .iter()
            .all(|g| g.outcome == GateOutcome::Inconclusive));
        for _ in 0..10 {
            live.record(
                &up("a"),
                answer(&"\u{1b}[0m the same words again ".repeat(6)),
            );
        }
        // Failing, not yet for long enough.
        assert!(live
            .judge("a", &gates, how, &Baseline::missing("-"))
            .is_none());
        std::thread::sleep(Duration::from_millis(60));
        let b = live
            .judge("a", &gates, how, &Baseline::missing("-"))
            .expect("a breach");
        assert!(
            b.why.contains("no_loop 0.0 (rule >= 80%)") && b.why.contains("last 10 answers"),
            "{}",
            b.why
        );
        assert_eq!(b.gates.len(), 1);
        assert!(
            b.evidence[0].starts_with("no_loop (a repetition loop"),
            "{:?}",
            b.evidence
        );
        assert!(
            b.evidence[0].contains("\\u{1b}[0m the same"),
            "{:?}",
            b.evidence
        );
        // Another instance starts with a clean slate; the metrics say both.
        assert!(live
            .judge("b", &gates, how, &Baseline::missing("-"))
            .is_none());
        let live = std::sync::Arc::new(live);
        let text = crate::exposition::encode(
            crate::exposition::Format::Text,
            vec![Box::new(live.clone())],
        );
        assert!(
            text.contains("sparkctl_frontdoor_answers_total{upstream=\"prod\"} 13"),
            "{text}"
        );
        assert!(
            text.contains(
                "sparkctl_frontdoor_answer_faults_total{upstream=\"prod\",check=\"no_loop\"} 10"
            ),
            "{text}"
        );
        assert!(text.contains("sparkctl_frontdoor_live_gate{upstream=\"prod\",deployment=\"a\",gate=\"no_loop\"} 0"), "{text}");
        // Healthy answers push the loops out: the breach ends.
        for _ in 0..10 {
            live.record(&up("a"), answer("Tokyo is the capital of Japan."));
        }
        assert!(live
            .judge("a", &gates, how, &Baseline::missing("-"))
            .is_none());
        assert!(live.status("a").unwrap().failing_for_s.is_none());
    }
}
