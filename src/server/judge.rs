//! The watch's judge of what production answers: its recipe's live gates over the recent
//! answers the front door judged, and its golden prompts. A breach that lasted makes
//! production unhealthy, handled as a dead server is (`watch`): a restart first, and when
//! the restarted instance breaches again, the recipe's `fallback`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::golden::{self, Rounds};
use crate::bench::gates::{GateResult, Gates, Measures};
use crate::bench::Baseline;
use crate::production::Upstream;
use crate::server::live::Judging;
use crate::server::Door;

/// A recipe restarted for what it answered goes to its fallback when it breaches again
/// within this time.
const REMEMBER: Duration = Duration::from_secs(30 * 60);
/// The rules are read again this often (a recipe edited meanwhile).
const RELOAD: Duration = Duration::from_secs(30);

/// Why production is brought back, and how.
#[derive(Debug, Clone, Default)]
pub(crate) struct Cause {
    pub(in crate::server) why: String,
    /// It still answers (badly): the answers in flight finish before it is stopped.
    pub(in crate::server) drain: bool,
    /// Straight to the fallback: a restart was tried already.
    pub(in crate::server) fallback_now: bool,
    /// What showed it (the offending answers), for the run record.
    pub(in crate::server) evidence: Vec<String>,
    pub(in crate::server) gates: Vec<GateResult>,
}

impl Cause {
    pub(super) fn dead(why: String) -> Cause {
        Cause {
            why,
            ..Cause::default()
        }
    }

    pub(super) fn record(&self, record: &mut crate::history::RunRecord) {
        record.evidence = self.evidence.clone();
        record.gates = self.gates.clone();
    }
}

/// What production's recipe says about judging it.
struct Rules {
    deployment: String,
    read_at: Instant,
    gates: Gates,
    judging: Judging,
    /// Its own benchmark, for `vs_production_*`; or why there is none.
    baseline: Baseline<Measures>,
    golden: Option<golden::Plan>,
    has_fallback: bool,
}

pub(crate) struct Judge {
    recipes_dir: PathBuf,
    door: Arc<Door>,
    rules: Mutex<Option<Arc<Rules>>>,
    /// Recipe → when it was last restarted for what it answered.
    restarted: Mutex<HashMap<String, Instant>>,
    golden: Rounds,
}

impl Judge {
    pub(crate) fn new(recipes_dir: PathBuf, door: Arc<Door>) -> Judge {
        Judge {
            recipes_dir,
            door,
            rules: Mutex::new(None),
            restarted: Mutex::default(),
            golden: Rounds::default(),
        }
    }

    /// Judges `u` (production, answering): why it must be brought back, if it must.
    pub(crate) async fn look(&self, u: &Upstream) -> Option<Cause> {
        let s = self.rules_for(u).await?;
        let breach = self
            .door
            .live
            .judge(&u.deployment, &s.gates, s.judging, &s.baseline)
            .or_else(|| {
                let plan = s.golden.as_ref()?;
                self.golden.look(u, plan, &self.door.live)
            })?;
        let mut restarted = self.restarted.lock().expect("restarted");
        let again = restarted
            .get(&u.recipe)
            .is_some_and(|t| t.elapsed() < REMEMBER);
        let fallback_now = again && s.has_fallback;
        if !fallback_now {
            restarted.insert(u.recipe.clone(), Instant::now());
        }
        Some(Cause {
            why: format!("{} answers badly: {}", u.recipe, breach.why),
            drain: true,
            fallback_now,
            evidence: breach.evidence,
            gates: breach.gates,
        })
    }

    /// The judging rules of `u`'s recipe, read again for a new instance and every `RELOAD`.
    async fn rules_for(&self, u: &Upstream) -> Option<Arc<Rules>> {
        {
            let s = self.rules.lock().expect("rules");
            if let Some(s) = s
                .as_ref()
                .filter(|s| s.deployment == u.deployment && s.read_at.elapsed() < RELOAD)
            {
                return Some(s.clone());
            }
        }
        let bench = self
            .door
            .production()
            .current
            .filter(|e| e.recipe == u.recipe)
            .and_then(|e| e.bench);
        let (dir, u2) = (self.recipes_dir.clone(), u.clone());
        let read = tokio::task::spawn_blocking(move || read_rules(&dir, &u2, bench)).await;
        let fresh = Arc::new(read.ok()??);
        *self.rules.lock().expect("rules") = Some(fresh.clone());
        Some(fresh)
    }
}

fn read_rules(dir: &std::path::Path, u: &Upstream, bench: Option<PathBuf>) -> Option<Rules> {
    let set = crate::recipe::load_dir(dir).ok()?;
    let r = &set.get(&u.recipe).ok()?.recipe;
    let spec = r.live.clone().unwrap_or_default();
    let gates = crate::recipe::live::gates_of(r);
    let baseline = match bench {
        None => Baseline::missing("production has no benchmark result (started without `up`)"),
        Some(path) => match std::fs::read(&path)
            .map_err(|e| e.to_string())
            .and_then(|b| {
                serde_json::from_slice::<crate::bench::result::BenchResult>(&b)
                    .map_err(|e| e.to_string())
            }) {
            Ok(r) => Baseline::Measured(r.measures()),
            Err(e) => Baseline::missing(format!("{}: {e}", path.display())),
        },
    };
    let golden = spec.golden.as_ref().and_then(|g| {
        let name = crate::recipe::live::suite_of(r);
        let suite = crate::bench::suite::Suite::load(&name, &dir.join("suites")).ok()?;
        let cases = crate::recipe::live::golden_cases(&suite, &g.cases)
            .into_iter()
            .cloned()
            .collect();
        Some(golden::Plan {
            every: g.every.0,
            failures: g
                .failures
                .unwrap_or(crate::recipe::live::DEFAULT_GOLDEN_FAILURES),
            cases,
            kind: Some(crate::bench::server_kind(r.engine)),
            suite,
        })
    });
    Some(Rules {
        deployment: u.deployment.clone(),
        read_at: Instant::now(),
        gates,
        judging: Judging {
            window: spec.window(),
            min_answers: spec.min_answers(),
            sustain: spec.sustain(),
        },
        baseline,
        golden,
        has_fallback: r.fallback.is_some(),
    })
}
