//! Waiting for a server to serve: its health endpoint says ready AND a one-token chat
//! completion succeeds. Meanwhile its output and its exit are watched, so a crash, an
//! OOM kill or a known fatal log line is explained the moment it happens, not at timeout.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::{Event, Exit, Started};
use crate::engine::Engine;

/// Between two health probes: small at first, so a quick start is noticed within a few ms;
/// wider after `FAST_FOR`, so a model loading for minutes is not asked 200 times a second.
const PROBE_FAST: Duration = Duration::from_millis(5);
const PROBE_SLOW: Duration = Duration::from_millis(25);
const FAST_FOR: Duration = Duration::from_secs(10);
/// A server that answered and then refuses this long has closed its port.
const CLOSED_AFTER: Duration = Duration::from_millis(500);
/// How long after a fatal line an exit still counts as its consequence.
const FATAL_GRACE: Duration = Duration::from_millis(700);
/// Lines kept to explain a failure.
const KEEP_LINES: usize = 12;

/// What the health endpoint said last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// Nothing answered yet.
    Waiting,
    /// Connection refused or reset: nothing listens (yet).
    Refused,
    /// It answered with this status (503 while loading).
    Loading(u16),
    /// Health is fine but the one-token completion is not (yet).
    CompletionFailing(String),
    Ready,
}

impl std::fmt::Display for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Health::Waiting => f.write_str("starting"),
            Health::Refused => f.write_str("port not answering"),
            Health::Loading(code) => write!(f, "loading (health {code})"),
            Health::CompletionFailing(why) => write!(f, "health ok, completion failing: {why}"),
            Health::Ready => f.write_str("ready"),
        }
    }
}

/// Progress while waiting, for the display.
pub struct Waiting<'a> {
    pub elapsed: Duration,
    pub health: &'a Health,
    pub last_line: Option<&'a str>,
}

#[derive(Debug, Clone)]
pub struct Ready {
    /// From the start of waiting to readiness noticed.
    pub after: Duration,
    /// When readiness was noticed (Unix time), for latency measurements.
    pub noticed_at: Duration,
    /// The model id the server answered the check completion with.
    pub model: String,
}

/// Why a server did not become ready.
#[derive(Debug, Clone)]
pub enum Fault {
    Exited {
        exit: Exit,
        after: Duration,
        fatal: Option<(String, &'static str)>,
        last_lines: Vec<String>,
    },
    FatalLine {
        line: String,
        hint: &'static str,
        after: Duration,
    },
    /// It answered, then stopped answering while still alive.
    PortClosed {
        after: Duration,
        url: String,
        last_lines: Vec<String>,
    },
    Timeout {
        after: Duration,
        health: Health,
        url: String,
        last_lines: Vec<String>,
    },
}

impl Fault {
    /// One explanation for people: what happened, the evidence, what to do.
    pub fn explain(&self, name: &str) -> String {
        let tail = |lines: &[String]| {
            if lines.is_empty() {
                String::new()
            } else {
                let shown: Vec<String> = lines.iter().map(|l| format!("  | {l}")).collect();
                format!("\n  last output:\n{}", shown.join("\n"))
            }
        };
        match self {
            Fault::Exited {
                exit,
                after,
                fatal,
                last_lines,
            } => {
                let mut s = format!(
                    "{name} {exit} while starting ({:.1} s in)",
                    after.as_secs_f64()
                );
                if let Some((line, hint)) = fatal {
                    s.push_str(&format!("\n  fatal: {line}\n  help: {hint}"));
                }
                s + &tail(last_lines)
            }
            Fault::FatalLine { line, hint, after } => format!(
                "{name} cannot start ({:.1} s in); its log says:\n  fatal: {line}\n  help: {hint}",
                after.as_secs_f64()
            ),
            Fault::PortClosed {
                after,
                url,
                last_lines,
            } => {
                format!(
                    "{name} answered on {url}, then refused connections for {:.1} s while still \
                 running ({:.1} s in): it closed its port; the output says why",
                    CLOSED_AFTER.as_secs_f64(),
                    after.as_secs_f64()
                ) + &tail(last_lines)
            }
            Fault::Timeout {
                after,
                health,
                url,
                last_lines,
            } => {
                let why = match health {
                    Health::Waiting | Health::Refused => format!(
                        "nothing answered on {url}: check the server's port flags \
                         (container_port for a container)"
                    ),
                    Health::Loading(code) => format!(
                        "its health endpoint still answers {code}; if the model needs longer, \
                         raise health.timeout"
                    ),
                    Health::CompletionFailing(why) => {
                        format!("health is ready but a one-token chat completion fails: {why}")
                    }
                    Health::Ready => "ready too late".to_string(),
                };
                format!(
                    "{name} was not ready within {:.0} s: {why}",
                    after.as_secs_f64()
                ) + &tail(last_lines)
            }
        }
    }
}

/// Probes health, then the completion, and reports each change of state.
async fn probe(url: String, health_path: String, tx: mpsc::Sender<(Health, Option<String>)>) {
    let client = match reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .connect_timeout(Duration::from_secs(2))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            let _ = tx
                .send((Health::CompletionFailing(e.to_string()), None))
                .await;
            return;
        }
    };
    let mut last = Health::Waiting;
    let began = Instant::now();
    loop {
        let health = match client
            .get(format!("{url}{health_path}"))
            .timeout(Duration::from_secs(2))
            .send()
            .await
        {
            Ok(r) if r.status().is_success() => match completion(&client, &url).await {
                Ok(model) => {
                    let _ = tx.send((Health::Ready, Some(model))).await;
                    return;
                }
                Err(why) => Health::CompletionFailing(why),
            },
            Ok(r) => Health::Loading(r.status().as_u16()),
            Err(_) => Health::Refused,
        };
        if health != last {
            if tx.send((health.clone(), None)).await.is_err() {
                return;
            }
            last = health;
        }
        let pause = if began.elapsed() < FAST_FOR {
            PROBE_FAST
        } else {
            PROBE_SLOW
        };
        tokio::time::sleep(pause).await;
    }
}

/// What a deployment's health endpoint says now (or how it ended), for `status`.
pub async fn health_now(client: &reqwest::Client, d: &super::Deployment) -> String {
    if let super::RunState::Exited { exit } = &d.state {
        return exit
            .as_ref()
            .map_or_else(|| "exited".into(), ToString::to_string);
    }
    match client
        .get(format!("{}{}", d.url(), d.health_path))
        .send()
        .await
    {
        Ok(r) if r.status().is_success() => "ready".into(),
        Ok(r) => format!("loading ({})", r.status().as_u16()),
        Err(_) => "not answering".into(),
    }
}

/// A one-token chat completion against the first model the server lists.
async fn completion(client: &reqwest::Client, url: &str) -> Result<String, String> {
    let models: serde_json::Value = client
        .get(format!("{url}/v1/models"))
        .send()
        .await
        .map_err(|e| format!("GET /v1/models: {e}"))?
        .json()
        .await
        .map_err(|e| format!("GET /v1/models: {e}"))?;
    let model = models
        .pointer("/data/0/id")
        .and_then(|v| v.as_str())
        .ok_or("GET /v1/models lists no model")?
        .to_string();
    let body = serde_json::json!({
        "model": model,
        "messages": [{"role": "user", "content": "Say OK."}],
        "max_tokens": 1,
        "stream": false,
    });
    let resp = client
        .post(format!("{url}/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .map_err(|e| format!("POST /v1/chat/completions: {e}"))?;
    let status = resp.status();
    let answer: serde_json::Value = resp
        .json()
        .await
        .map_err(|e| format!("POST /v1/chat/completions answered {status}: {e}"))?;
    if !status.is_success() || answer.pointer("/choices/0").is_none() {
        return Err(format!(
            "POST /v1/chat/completions answered {status}: {answer}"
        ));
    }
    Ok(model)
}

/// Waits until `started` serves, fails, or `timeout` passes. `progress` sees every change.
pub async fn wait_ready(
    started: &mut Started,
    engine: Engine,
    timeout: Duration,
    mut progress: impl FnMut(&Waiting),
) -> Result<Ready, Fault> {
    let began = Instant::now();
    let deadline = tokio::time::Instant::now() + timeout;
    let url = started.deployment.url();
    let health_path = started.deployment.health_path.clone();
    let (probe_tx, mut probes) = mpsc::channel(16);
    let prober = tokio::spawn(probe(url.clone(), health_path, probe_tx));
    let _stop_prober = AbortOnDrop(prober);

    let mut health = Health::Waiting;
    let mut lines: VecDeque<String> = VecDeque::new();
    let mut events_open = true;
    let mut answered = false;
    let mut refused_since: Option<tokio::time::Instant> = None;
    // A fatal line is usually the server's last: wait a moment for its exit, which
    // explains more (exit code, OOM); a server that hangs on instead is failed anyway.
    let mut fatal_seen: Option<(String, &'static str, Duration, tokio::time::Instant)> = None;
    loop {
        let fatal_grace = async {
            match &fatal_seen {
                Some((.., until)) => tokio::time::sleep_until(*until).await,
                None => std::future::pending().await,
            }
        };
        let closed_check = async {
            match refused_since {
                Some(at) => tokio::time::sleep_until(at + CLOSED_AFTER).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            event = started.events.recv(), if events_open => match event {
                Some(Event::Line(line)) => {
                    if let (Some(f), None) = (engine.fatal(&line), &fatal_seen) {
                        let until = tokio::time::Instant::now() + FATAL_GRACE;
                        fatal_seen = Some((line.clone(), f.hint, began.elapsed(), until));
                    }
                    keep(&mut lines, line);
                }
                Some(Event::Exited(exit)) => {
                    let after = began.elapsed();
                    // Its last words may still be on the way (logs and exit travel apart).
                    drain_lines(&mut started.events, &mut lines).await;
                    let fatal = lines.iter().find_map(|l| engine.fatal(l).map(|f| (l.clone(), f.hint)));
                    return Err(Fault::Exited { exit, after, fatal, last_lines: lines.into() });
                }
                None => events_open = false,
            },
            report = probes.recv() => match report {
                Some((Health::Ready, model)) => {
                    return Ok(Ready {
                        after: began.elapsed(),
                        noticed_at: crate::units::unix_now(),
                        model: model.unwrap_or_default(),
                    });
                }
                Some((h, _)) => {
                    refused_since = match h {
                        Health::Refused if answered => Some(tokio::time::Instant::now()),
                        _ => None,
                    };
                    answered |= matches!(h, Health::Loading(_) | Health::CompletionFailing(_));
                    health = h;
                }
                None => {}
            },
            _ = fatal_grace => {
                let (line, hint, after, _) = fatal_seen.take().expect("armed only when set");
                return Err(Fault::FatalLine { line, hint, after });
            }
            _ = closed_check => {
                return Err(Fault::PortClosed { after: began.elapsed(), url, last_lines: lines.into() });
            }
            _ = tokio::time::sleep_until(deadline) => {
                return Err(Fault::Timeout { after: timeout, health, url, last_lines: lines.into() });
            }
        }
        progress(&Waiting {
            elapsed: began.elapsed(),
            health: &health,
            last_line: lines.back().map(String::as_str),
        });
    }
}

fn keep(lines: &mut VecDeque<String>, line: String) {
    if lines.len() == KEEP_LINES {
        lines.pop_front();
    }
    lines.push_back(line);
}

async fn drain_lines(events: &mut mpsc::Receiver<Event>, lines: &mut VecDeque<String>) {
    let until = tokio::time::Instant::now() + Duration::from_secs(1);
    while let Ok(Some(event)) = tokio::time::timeout_at(
        until.min(tokio::time::Instant::now() + Duration::from_millis(100)),
        events.recv(),
    )
    .await
    {
        if let Event::Line(line) = event {
            keep(lines, line);
        }
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
