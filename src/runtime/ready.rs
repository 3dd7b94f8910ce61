//! Waiting for a server to serve: its health endpoint says ready AND a one-token chat
//! completion answers within `health.completion_timeout`. Meanwhile its output and its exit
//! are watched, so a crash, an OOM kill or a known fatal log line is explained the moment it
//! happens, not at timeout.
//!
//! How real engines behave while they load, and what that means here:
//! - vLLM binds its API port only once the engine is up: until then connections are
//!   refused. Refused before the first answer is "still starting", never a fault; refused
//!   after it answered is a server that closed its port.
//! - llama-server answers `/health` with 503 and a JSON body
//!   (`{"error":{"code":503,"message":"Loading model",…}}`) while loading: its own words
//!   are shown while waiting and in the timeout explanation.
//! - SGLang answers 503 while starting; afterwards its `/health` (by default) and its
//!   `/health_generate` (always) run a one-token generation with a 20 s limit of their own.
//! - Any engine can answer health 200 while generation is wedged (requests hang for good):
//!   the completion has its own, shorter, timeout, and a completion that does not answer
//!   within it fails the start at once as wedged instead of waiting out `health.timeout`.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::{Event, Started};
use crate::engine::{Engine, FirstError};
use crate::units::format_duration;

mod ask;
mod fault;
mod phases;

use ask::{ask_health, completion, Generation};
pub use ask::{asleep, health_now, Liveness};
pub use fault::Fault;
pub use phases::Phases;
use phases::Seen;

/// Between two health probes: small at first, so a quick start is noticed within a few ms;
/// wider after `FAST_FOR`, so a model loading for minutes is not asked 200 times a second.
const PROBE_FAST: Duration = Duration::from_millis(5);
const PROBE_SLOW: Duration = Duration::from_millis(25);
const FAST_FOR: Duration = Duration::from_secs(10);
/// One health request (and the `/v1/models` listing) may take this long. SGLang's `/health`
/// runs a generation and polls for it once a second, so a healthy one takes over 1 s.
pub const HEALTH_PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// A server that answered and then refuses this long has closed its port.
const CLOSED_AFTER: Duration = Duration::from_millis(500);
/// How long after a fatal line an exit still counts as its consequence.
const FATAL_GRACE: Duration = Duration::from_millis(700);
/// Lines kept to explain a failure.
const KEEP_LINES: usize = 12;

/// `status` asks every running deployment at once and must stay quick: health gets this
/// long, then the generation check (a one-token completion, or the engine's own generating
/// health endpoint) gets `STATUS_GENERATION_TIMEOUT`. A warm server on a Spark answers a
/// one-token completion in about 0.1 s (the seeds' TTFT), so 3 s is 30 times that; a busy
/// one may be slower, which the status text says ("busy or wedged").
pub(crate) const STATUS_HEALTH_TIMEOUT: Duration = Duration::from_secs(2);
pub const STATUS_GENERATION_TIMEOUT: Duration = Duration::from_secs(3);

/// What checks generation, after health said ok.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GenerationCheck {
    /// sparkctl's one-token chat completion against the first listed model.
    Completion,
    /// The engine's own endpoint that runs a generation (SGLang's `/health_generate`).
    Endpoint(&'static str),
}

impl std::fmt::Display for GenerationCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GenerationCheck::Completion => f.write_str("completion"),
            GenerationCheck::Endpoint(path) => f.write_str(path),
        }
    }
}

/// What the server said last (health endpoint, then the generation check).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// Nothing asked yet.
    Waiting,
    /// Connection refused or reset: nothing listens (yet). vLLM refuses until its API
    /// server is up.
    Refused,
    /// The port accepted the connection but the health endpoint gave no answer in time.
    Silent {
        within: Duration,
    },
    /// The health endpoint answered this non-2xx status, with the server's own message when
    /// its body had one (llama-server: 503 "Loading model").
    Loading {
        code: u16,
        message: Option<String>,
    },
    /// Health is ok; the generation check was sent and has not answered yet.
    GenerationPending {
        check: GenerationCheck,
        within: Duration,
    },
    /// Health is ok but the generation check answered with an error.
    GenerationFailing {
        check: GenerationCheck,
        why: String,
    },
    /// Health is ok but the generation check did not answer within `within`: generation is
    /// wedged (or, for `status`, too busy to answer in time).
    GenerationSilent {
        check: GenerationCheck,
        within: Duration,
    },
    Ready,
    /// Health is ok and the server says it sleeps (its own idle sleep, or put to sleep):
    /// well, holding less, and not woken to be asked whether it generates.
    Asleep,
}

impl std::fmt::Display for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Health::Waiting => f.write_str("starting"),
            Health::Refused => f.write_str("port not open yet (connection refused)"),
            Health::Silent { within } => write!(
                f,
                "port open, health not answering within {}",
                format_duration(*within)
            ),
            Health::Loading {
                code,
                message: Some(m),
            } => write!(f, "loading (health {code}: {m})"),
            Health::Loading {
                code,
                message: None,
            } => write!(f, "loading (health {code})"),
            Health::GenerationPending { check, within } => write!(
                f,
                "health ok, waiting for a one-token {check} (up to {})",
                format_duration(*within)
            ),
            Health::GenerationFailing { check, why } => {
                write!(f, "health ok, {check} failing: {why}")
            }
            Health::GenerationSilent { check, within } => write!(
                f,
                "health ok, {check} not answering within {}",
                format_duration(*within)
            ),
            Health::Ready => f.write_str("ready"),
            Health::Asleep => f.write_str("asleep (ready; wakes for its next request)"),
        }
    }
}

/// Progress while waiting, for the display.
pub struct Waiting<'a> {
    pub(crate) elapsed: Duration,
    pub health: &'a Health,
    pub(crate) last_line: Option<&'a str>,
}

#[derive(Debug, Clone)]
pub struct Ready {
    /// From the start of waiting to readiness noticed.
    pub after: Duration,
    /// Each step of the wait, from its start (`launched_ms` 0: the caller adds the launch).
    pub(crate) phases: Phases,
    /// When readiness was noticed (Unix time), for latency measurements.
    pub(crate) noticed_at: Duration,
    /// The model id the server answered the check completion with.
    pub model: String,
}

/// What the prober tells the waiter.
enum Report {
    /// A new state to show.
    Now(Health),
    /// Ready; the model id the completion answered with.
    Ready(String),
    /// Health ok, but the completion did not answer within the limit.
    Wedged(Duration),
}

/// Probes health, then the completion, and reports each change of state.
async fn probe(
    url: String,
    health_path: String,
    completion_timeout: Duration,
    tx: mpsc::Sender<Report>,
) {
    let client = match reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(Duration::from_secs(2))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            let _ = tx
                .send(Report::Now(Health::GenerationFailing {
                    check: GenerationCheck::Completion,
                    why: format!("HTTP client: {e}"),
                }))
                .await;
            return;
        }
    };
    let check = GenerationCheck::Completion;
    let mut last = Health::Waiting;
    let began = Instant::now();
    loop {
        let health = match ask_health(
            &client,
            &format!("{url}{health_path}"),
            HEALTH_PROBE_TIMEOUT,
        )
        .await
        {
            Health::Ready => {
                // Shown while the completion runs, so a slow one is visible as such; not
                // again between retries of a failing one (the display would flicker).
                if !matches!(last, Health::GenerationFailing { .. }) {
                    let pending = Health::GenerationPending {
                        check,
                        within: completion_timeout,
                    };
                    if pending != last {
                        if tx.send(Report::Now(pending.clone())).await.is_err() {
                            return;
                        }
                        last = pending;
                    }
                }
                match completion(&client, &url, HEALTH_PROBE_TIMEOUT, completion_timeout).await {
                    Ok(model) => {
                        let _ = tx.send(Report::Ready(model)).await;
                        return;
                    }
                    Err(Generation::Silent) => {
                        let _ = tx.send(Report::Wedged(completion_timeout)).await;
                        return;
                    }
                    Err(Generation::Failed(why)) => Health::GenerationFailing { check, why },
                }
            }
            other => other,
        };
        if health != last {
            if tx.send(Report::Now(health.clone())).await.is_err() {
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

/// Waits until `started` serves, fails, or `timeout` passes. `progress` sees every change.
/// The one-token completion may take `started.completion_timeout`; if it does not answer
/// by then the server is wedged and this fails at once (see the module comment).
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
    let prober = tokio::spawn(probe(
        url.clone(),
        health_path,
        started.completion_timeout,
        probe_tx,
    ));
    let _stop_prober = AbortOnDrop(prober);

    let mut health = Health::Waiting;
    let mut seen = Seen::default();
    let mut lines = Lines::default();
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
                    lines.keep(line);
                }
                Some(Event::Exited(exit)) => {
                    let after = began.elapsed();
                    // Its last words may still be on the way (logs and exit travel apart).
                    drain_lines(&mut started.events, &mut lines).await;
                    // The fatal line seen earlier (vLLM's comes some 50 lines before its
                    // end), else one among its last words.
                    let fatal = match fatal_seen {
                        Some((line, hint, ..)) => Some((line, hint)),
                        None => lines.last.iter().find_map(|l| engine.fatal(l).map(|f| (l.clone(), f.hint))),
                    };
                    let (last_lines, first_error) = lines.take();
                    return Err(Fault::Exited { exit, after, fatal, last_lines, first_error });
                }
                None => events_open = false,
            },
            report = probes.recv() => match report {
                Some(Report::Ready(model)) => {
                    let after = began.elapsed();
                    return Ok(Ready {
                        after,
                        phases: seen.phases(after),
                        noticed_at: crate::units::unix_now(),
                        model,
                    });
                }
                Some(Report::Wedged(within)) => {
                    let (last_lines, first_error) = lines.take();
                    return Err(Fault::Wedged { after: began.elapsed(), within, url, last_lines, first_error });
                }
                Some(Report::Now(h)) => {
                    // Refused before any answer is a server still starting (vLLM binds its
                    // port late); refused after one is a port being closed.
                    refused_since = match h {
                        Health::Refused if answered => Some(tokio::time::Instant::now()),
                        _ => None,
                    };
                    answered |= !matches!(h, Health::Waiting | Health::Refused);
                    seen.saw(&h, began.elapsed());
                    health = h;
                }
                None => {}
            },
            _ = fatal_grace => {
                let (line, hint, after, _) = fatal_seen.take().expect("armed only when set");
                let first_error = lines.take().1;
                return Err(Fault::FatalLine { line, hint, after, first_error });
            }
            _ = closed_check => {
                let (last_lines, first_error) = lines.take();
                // A port closed after a fatal line is that line's consequence (vLLM's API
                // server shuts down once its engine died).
                if let Some((line, hint, after, _)) = fatal_seen.take() {
                    return Err(Fault::FatalLine { line, hint, after, first_error });
                }
                return Err(Fault::PortClosed { after: began.elapsed(), url, last_lines, first_error });
            }
            _ = tokio::time::sleep_until(deadline) => {
                let (last_lines, first_error) = lines.take();
                return Err(Fault::Timeout { after: timeout, health, url, last_lines, first_error });
            }
        }
        progress(&Waiting {
            elapsed: began.elapsed(),
            health: &health,
            last_line: lines.last.back().map(String::as_str),
        });
    }
}

/// What is kept of the server's output to explain a failure: its last lines, and its first
/// error line with its number (a traceback's cause comes long before the shutdown's noise).
#[derive(Default)]
struct Lines {
    last: VecDeque<String>,
    first_error: FirstError,
}

impl Lines {
    fn keep(&mut self, line: String) {
        self.first_error.see(&line);
        if self.last.len() == KEEP_LINES {
            self.last.pop_front();
        }
        self.last.push_back(line);
    }

    fn take(&mut self) -> (Vec<String>, Option<crate::engine::ErrorLine>) {
        (
            std::mem::take(&mut self.last).into(),
            self.first_error.get(),
        )
    }
}

async fn drain_lines(events: &mut mpsc::Receiver<Event>, lines: &mut Lines) {
    let until = tokio::time::Instant::now() + Duration::from_secs(1);
    while let Ok(Some(event)) = tokio::time::timeout_at(
        until.min(tokio::time::Instant::now() + Duration::from_millis(100)),
        events.recv(),
    )
    .await
    {
        if let Event::Line(line) = event {
            lines.keep(line);
        }
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::ask::server_message;

    #[test]
    fn servers_say_why_in_their_own_words() {
        // llama-server while loading
        let llama =
            r#"{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}"#;
        assert_eq!(server_message(llama).as_deref(), Some("Loading model"));
        // FastAPI (SGLang, vLLM routes), plain text, a status field, nothing
        assert_eq!(
            server_message(r#"{"detail":"Not Found"}"#).as_deref(),
            Some("Not Found")
        );
        assert_eq!(
            server_message("\n  upstream not ready\nmore").as_deref(),
            Some("upstream not ready")
        );
        assert_eq!(
            server_message(r#"{"status":"loading"}"#).as_deref(),
            Some("loading")
        );
        assert_eq!(server_message(""), None);
        assert_eq!(server_message(r#"{"code":503}"#), None);
        let long = "x".repeat(500);
        assert_eq!(server_message(&long).unwrap().chars().count(), 161);
    }
}
