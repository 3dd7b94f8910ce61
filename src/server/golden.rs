//! Golden prompts: the suite's cases whose answers are known (`expect`, `expect_tool`),
//! sent to production on a schedule (`live.golden`) and checked with the benchmark's own
//! checks (`bench::quality::checks`). Rounds run beside the watch, never blocking it;
//! `failures` rounds failed in a row make production unhealthy.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::bench::client::{self, Clients};
use crate::bench::quality::checks;
use crate::bench::suite::{Case, Check, ServerKind, Suite, Tag};
use crate::production::Upstream;
use crate::server::live::{Breach, GoldenRound, Live};
use crate::server::quality::escape;

/// What a recipe's `live.golden` asks, resolved.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub(in crate::server) every: Duration,
    pub(in crate::server) failures: u32,
    pub(in crate::server) suite: Suite,
    pub(in crate::server) cases: Vec<Case>,
    pub(in crate::server) kind: Option<ServerKind>,
}

#[derive(Default)]
struct State {
    deployment: String,
    next: Option<Instant>,
    running: bool,
    failed_in_row: u32,
    /// The failed rounds' evidence, newest last.
    evidence: Vec<String>,
}

/// The golden rounds of production's instance.
#[derive(Clone, Default)]
pub(crate) struct Rounds {
    state: Arc<Mutex<State>>,
}

impl Rounds {
    /// Starts a round when one is due; a breach once `failures` rounds failed in a row.
    pub(crate) fn look(&self, u: &Upstream, plan: &Plan, live: &Arc<Live>) -> Option<Breach> {
        let mut s = self.state.lock().expect("golden");
        if s.deployment != u.deployment {
            // A new instance: its first round at once, nothing held against it.
            *s = State {
                deployment: u.deployment.clone(),
                ..State::default()
            };
        }
        if s.failed_in_row >= plan.failures {
            let n = s.failed_in_row;
            s.failed_in_row = 0;
            return Some(Breach {
                why: format!("golden prompts failed {n} rounds in a row"),
                evidence: std::mem::take(&mut s.evidence),
                gates: Vec::new(),
            });
        }
        let due = s.next.is_none_or(|t| Instant::now() >= t);
        if due && !s.running {
            s.running = true;
            s.next = Some(Instant::now() + plan.every);
            let (rounds, u, plan, live) = (self.clone(), u.clone(), plan.clone(), live.clone());
            tokio::spawn(async move {
                let round = round(&u, &plan).await;
                live.golden(&u.recipe, &round);
                rounds.finished(&u.deployment, round);
            });
        }
        None
    }

    fn finished(&self, deployment: &str, round: GoldenRound) {
        let mut s = self.state.lock().expect("golden");
        if s.deployment != deployment {
            return;
        }
        s.running = false;
        match round.failed.is_empty() {
            true => {
                s.failed_in_row = 0;
                s.evidence.clear();
            }
            false => {
                s.failed_in_row += 1;
                s.evidence.extend(round.failed);
                let keep = s.evidence.len().saturating_sub(8);
                s.evidence.drain(..keep);
            }
        }
    }
}

/// One round: each golden case asked of `u` (its turns in order), its last answer checked.
pub(crate) async fn round(u: &Upstream, plan: &Plan) -> GoldenRound {
    let mut out = GoldenRound {
        cases: plan.cases.len(),
        ..GoldenRound::default()
    };
    let clients = match Clients::new() {
        Ok(c) => c,
        Err(e) => {
            out.failed.push(format!("golden: {e}"));
            return out;
        }
    };
    let info = match crate::bench::server::probe(clients.pooled(), &u.url, plan.kind).await {
        Ok(i) => i,
        Err(e) => {
            out.failed.push(format!("golden: {e}"));
            return out;
        }
    };
    let nonce = format!("golden-{}", crate::units::unix_now().as_millis());
    for (i, case) in plan.cases.iter().enumerate() {
        let tag = Tag {
            nonce: &nonce,
            run: i,
            turn: 1,
        };
        let mut history: Vec<Value> = Vec::new();
        let mut last = None;
        for (t, user) in case.turns().iter().enumerate() {
            history.push(json!({"role": "user", "content": user}));
            let tag = Tag { turn: t + 1, ..tag };
            let body = plan
                .suite
                .request(info.model(), case, &history, tag, info.kind());
            let s = client::stream(&clients, &u.url, &body).await;
            history.push(json!({"role": "assistant", "content": s.content}));
            let ok = s.ok;
            last = Some(s);
            if !ok {
                break;
            }
        }
        let Some(s) = last else { continue };
        if !s.ok {
            out.failed.push(format!(
                "golden {}: no answer: {}",
                case.name(),
                s.error.unwrap_or_default()
            ));
            continue;
        }
        let failed: Vec<String> = checks(&s, case)
            .into_iter()
            .filter(|(c, passed)| *passed == (*c == Check::ThinkingLeak))
            .map(|(c, _)| c.to_string())
            .collect();
        if failed.is_empty() {
            continue;
        }
        let calls: Vec<String> = s.tool_calls.iter().map(|t| t.name.clone()).collect();
        let answer: String = s.content.chars().take(300).collect();
        let more = if s.content.chars().count() > 300 {
            "…"
        } else {
            ""
        };
        out.failed.push(format!(
            "golden {} failed {}: \"{}{more}\"{}",
            case.name(),
            failed.join(", "),
            escape(&answer),
            match calls.is_empty() {
                true => " (no tool_calls)".to_string(),
                false => format!(" (tool_calls: {})", calls.join(", ")),
            }
        ));
    }
    out
}
