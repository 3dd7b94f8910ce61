//! Replaying captured traffic (`bench NAME --replay captured|FILE`, or `captured` as a
//! recipe's suite): each request production received, sent once to the target as it came
//! (its messages, tools and sampling untouched; the model set to the target's, the answer
//! streamed), either with the gaps it arrived with or at the load level asked
//! (`--concurrency N`, `--rate R`). The answers get the benchmark's checks and gates, so a
//! candidate is judged on the user's own workload.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::client;
use super::load::{schedule, Arrival};
use super::sample::Sample;
use super::suite::{captured_request, CacheMode, Case, Suite};
use super::{Bench, Options};
use crate::agents::Api;
use crate::capture_file as capture;
use crate::error::{Error, Result};
use crate::state::StateDir;

/// The suite name that means production's captured traffic.
pub(crate) const CAPTURED: &str = "captured";

/// What a replay's result says of it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Replay {
    /// Where the requests came from.
    source: String,
    /// How they were sent: `as captured`, `concurrency N`, `constant R req/s`.
    pace: String,
    requests: usize,
    /// Each request's last user message, in the order sent.
    prompts: Vec<String>,
}

/// A suite by its spec: `captured`, a capture file, or a suite (built in, named, a file).
pub(crate) fn load_suite(spec: &str, suites_dir: &Path, state: &StateDir) -> Result<Suite> {
    let path = Path::new(spec);
    if spec == CAPTURED {
        return captured(spec, state);
    }
    if path.is_file() && is_capture(path) {
        return from_capture(path);
    }
    Suite::load(spec, suites_dir)
}

/// A recipe's `bench.suite` checked before anything loads: a suite loads and keeps every
/// suite rule. Captured traffic is there only when a benchmark runs: not checked here.
pub(crate) fn check_spec(spec: &str, suites_dir: &Path) -> Result<()> {
    let path = Path::new(spec);
    if spec == CAPTURED || (path.is_file() && is_capture(path)) {
        return Ok(());
    }
    Suite::load(spec, suites_dir).map(|_| ())
}

/// `captured` (what the front door captured) or a capture file, as a suite.
pub(crate) fn captured(from: &str, state: &StateDir) -> Result<Suite> {
    match from {
        CAPTURED => from_capture(&capture::dir(state)),
        file => from_capture(Path::new(file)),
    }
}

/// Whether a file's first line is a captured request.
fn is_capture(path: &Path) -> bool {
    use std::io::BufRead;
    let Ok(f) = std::fs::File::open(path) else {
        return false;
    };
    let mut first = String::new();
    let _ = std::io::BufReader::new(f).read_line(&mut first);
    serde_json::from_str::<capture::CapturedRequest>(&first).is_ok()
}

/// A captured request's turns: chat's and Messages' `messages`, Responses' `input` (a
/// list, or one user text); None for a request that is no conversation.
fn conversation(body: &Value) -> Option<Vec<Value>> {
    match (&body["messages"], &body["input"]) {
        (Value::Array(m), _) | (_, Value::Array(m)) => Some(m.clone()),
        (_, Value::String(text)) => {
            Some(vec![serde_json::json!({"role": "user", "content": text})])
        }
        _ => None,
    }
}

fn last_user_text(messages: &[Value]) -> String {
    messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .map(|m| match &m["content"] {
            Value::String(s) => s.clone(),
            Value::Array(parts) => parts
                .iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join(" "),
            _ => String::new(),
        })
        .unwrap_or_default()
}

/// The captured requests at `path` (a capture directory or file) as a suite: one case
/// each, sent once.
pub(crate) fn from_capture(path: &Path) -> Result<Suite> {
    if !path.exists() {
        return Err(Error::NoSuch {
            what: crate::error::Thing::Capture,
            name: path.display().to_string(),
            hint: crate::error::Hint::CaptureOn,
        });
    }
    let (captured, _) = capture::read(path)?;
    let first = captured.first().map_or(0, |c| c.unix_ms);
    let cases: Vec<Case> = captured
        .into_iter()
        .filter_map(|c| Some((conversation(&c.body)?, c)))
        .enumerate()
        .map(|(i, (messages, c))| {
            let max = ["max_completion_tokens", "max_tokens", "max_output_tokens"]
                .iter()
                .find_map(|k| c.body[*k].as_u64())
                .unwrap_or(256);
            Case {
                name: format!("captured-{:04}", i + 1),
                turns: vec![last_user_text(&messages)],
                max_tokens: u32::try_from(max).unwrap_or(u32::MAX),
                enable_thinking: false,
                tools: Vec::new(),
                expect: None,
                expect_tool: None,
                checks: None,
                system_tokens: None,
                cache: CacheMode::WarmPrefix,
                api: Api::of(&c.path),
                body: Some(c.body),
                at_ms: Some(c.unix_ms - first),
            }
        })
        .collect();
    if cases.is_empty() {
        return Err(Error::NoSuch {
            what: crate::error::Thing::Capture,
            name: path.display().to_string(),
            hint: crate::error::Hint::NoChatRequest,
        });
    }
    Ok(Suite {
        name: CAPTURED.into(),
        description: Some(format!(
            "{} requests captured at {}",
            cases.len(),
            path.display()
        )),
        warmup: 0,
        runs: 1,
        system: None,
        tools: Default::default(),
        cases,
        replay: Some(path.display().to_string()),
        fields: Vec::new(),
    })
}

/// How the replay is paced: the load level asked, or the gaps it was captured with.
fn pace(opts: &Options) -> String {
    match (opts.concurrency.first(), opts.rate) {
        (Some(n), _) => format!("concurrency {n}"),
        (None, Some(r)) => {
            format!("{:?} {r} req/s", opts.arrival.unwrap_or(Arrival::Poisson)).to_lowercase()
        }
        (None, None) => "as captured".into(),
    }
}

/// Sends every captured request once, paced; their samples, in the captured order.
pub(super) async fn run(
    b: &Bench<'_>,
    opts: &Options,
    progress: &mut impl FnMut(usize, usize, &str),
) -> (Vec<Sample>, Replay) {
    let cases = &b.suite.cases;
    let bodies: Vec<Value> = cases
        .iter()
        .map(|c| {
            captured_request(
                c.body.as_ref().unwrap_or(&Value::Null),
                &b.info.model,
                b.info.kind,
                c.api,
            )
        })
        .collect();
    let n = bodies.len();
    let start = Instant::now();
    let send = |i: usize, at: Option<Duration>| {
        let (clients, url, body) = (b.clients.clone(), b.url.clone(), bodies[i].clone());
        let api = cases[i].api;
        async move {
            if let Some(at) = at {
                tokio::time::sleep_until((start + at).into()).await;
            }
            client::stream_in(&clients, &url, api, &body).await
        }
    };
    let mut samples: Vec<Sample> = match (opts.concurrency.first(), opts.rate) {
        // Closed loop: each stream sends the next request as its last answer ends.
        (Some(&streams), _) => {
            let next = std::sync::atomic::AtomicUsize::new(0);
            let worker = || async {
                let mut out = Vec::new();
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= n {
                        return out;
                    }
                    out.push((i, send(i, None).await));
                }
            };
            let mut all: Vec<(usize, Sample)> =
                futures_util::future::join_all((0..streams.max(1)).map(|_| worker()))
                    .await
                    .into_iter()
                    .flatten()
                    .collect();
            all.sort_by_key(|(i, _)| *i);
            progress(n, n, "replay");
            all.into_iter().map(|(_, s)| s).collect()
        }
        (None, rate) => {
            let times: Vec<f64> = match rate {
                Some(rps) => schedule(
                    rps,
                    opts.arrival.unwrap_or(Arrival::Poisson),
                    opts.seed.unwrap_or(1),
                    n,
                ),
                None => cases
                    .iter()
                    .map(|c| c.at_ms.unwrap_or(0) as f64 / 1e3)
                    .collect(),
            };
            let tasks = (0..n).map(|i| send(i, Some(Duration::from_secs_f64(times[i]))));
            let done = futures_util::future::join_all(tasks).await;
            progress(n, n, "replay");
            done
        }
    };
    for (s, c) in samples.iter_mut().zip(cases) {
        s.case = c.name.clone();
        s.turn = 1;
    }
    let replay = Replay {
        source: b.suite.replay.clone().unwrap_or_default(),
        pace: pace(opts),
        requests: n,
        prompts: cases.iter().map(|c| c.turns[0].clone()).collect(),
    };
    (samples, replay)
}
