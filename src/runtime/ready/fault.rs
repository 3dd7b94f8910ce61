//! Why a server did not become ready, explained for people: what happened, the evidence
//! (exit code, fatal line, the server's last words), and what to do.

use std::time::Duration;

use super::{Health, CLOSED_AFTER};
use crate::engine::ErrorLine;
use crate::runtime::Exit;
use crate::units::format_duration;

/// Why a server did not become ready.
#[derive(Debug, Clone)]
pub enum Fault {
    Exited {
        exit: Exit,
        after: Duration,
        fatal: Option<(String, &'static str)>,
        last_lines: Vec<String>,
        first_error: Option<ErrorLine>,
    },
    FatalLine {
        line: String,
        hint: &'static str,
        after: Duration,
        first_error: Option<ErrorLine>,
    },
    /// It answered, then stopped answering while still alive.
    PortClosed {
        after: Duration,
        url: String,
        last_lines: Vec<String>,
        first_error: Option<ErrorLine>,
    },
    /// Health said ok, but a one-token completion got no answer within `within`.
    Wedged {
        after: Duration,
        within: Duration,
        url: String,
        last_lines: Vec<String>,
        first_error: Option<ErrorLine>,
    },
    Timeout {
        after: Duration,
        health: Health,
        url: String,
        last_lines: Vec<String>,
        first_error: Option<ErrorLine>,
    },
}

impl Fault {
    /// One explanation for people: what happened, the evidence (the server's first error
    /// line, a known fatal line and what to do about it, its last lines), what to do.
    pub fn explain(&self, name: &str) -> String {
        let tail = last_output;
        match self {
            Fault::Exited {
                exit,
                after,
                fatal,
                last_lines,
                first_error,
            } => {
                let mut s = format!(
                    "{name} {exit} while starting ({:.1} s in)",
                    after.as_secs_f64()
                );
                s += &error_line(first_error.as_ref(), fatal.as_ref().map(|f| f.0.as_str()));
                if let Some((line, hint)) = fatal {
                    s.push_str(&format!("\n  fatal: {line}\n  help: {hint}"));
                }
                s + &tail(last_lines)
            }
            Fault::FatalLine {
                line,
                hint,
                after,
                first_error,
            } => format!(
                "{name} cannot start ({:.1} s in); its log says:{}\n  fatal: {line}\n  help: {hint}",
                after.as_secs_f64(),
                error_line(first_error.as_ref(), Some(line)),
            ),
            Fault::PortClosed {
                after,
                url,
                last_lines,
                first_error,
            } => {
                format!(
                    "{name} answered on {url}, then refused connections for {:.1} s while still \
                 running ({:.1} s in): it closed its port; the output says why",
                    CLOSED_AFTER.as_secs_f64(),
                    after.as_secs_f64()
                ) + &error_line(first_error.as_ref(), None)
                    + &tail(last_lines)
            }
            Fault::Wedged {
                after,
                within,
                url,
                last_lines,
                first_error,
            } => {
                format!(
                "{name} is not ready ({:.1} s in): its health endpoint on {url} says ok, but a \
                 one-token chat completion got no answer within {}: generation is wedged \
                 (health ok, requests hang)\n  help: the output below and `sparkctl logs {name}` \
                 say why; if its first completion is legitimately slow, raise \
                 health.completion_timeout",
                after.as_secs_f64(),
                format_duration(*within)
            ) + &error_line(first_error.as_ref(), None)
                    + &tail(last_lines)
            }
            Fault::Timeout {
                after,
                health,
                url,
                last_lines,
                first_error,
            } => {
                let why = timeout_reason(health, url);
                format!(
                    "{name} was not ready within {:.0} s: {why}",
                    after.as_secs_f64()
                ) + &error_line(first_error.as_ref(), None)
                    + &tail(last_lines)
            }
        }
    }
}

/// The server's first error line, with its number in its output (`sparkctl logs` shows it
/// whole); nothing when it is the fatal line already quoted.
fn error_line(first: Option<&ErrorLine>, fatal: Option<&str>) -> String {
    match first {
        Some(e) if fatal.is_none_or(|f| !f.contains(&e.text)) => format!(
            "\n  error: {} (output line {}, its first error)",
            e.text, e.number
        ),
        _ => String::new(),
    }
}

/// The server's last lines, quoted, for an explanation's end.
fn last_output(lines: &[String]) -> String {
    if lines.is_empty() {
        return String::new();
    }
    let shown: Vec<String> = lines.iter().map(|l| format!("  | {l}")).collect();
    format!("\n  last output:\n{}", shown.join("\n"))
}

/// Why a server that is still running was not ready in time, from what its health said last.
fn timeout_reason(health: &Health, url: &str) -> String {
    match health {
        Health::Waiting | Health::Refused => format!(
            "nothing answered on {url}: check the server's port flags \
             (container_port for a container)"
        ),
        Health::Silent { within } => format!(
            "{url} accepts connections but its health endpoint gives no answer \
             within {} (an engine whose health check runs a generation, like \
             SGLang's /health, hangs there when generation is wedged)",
            format_duration(*within)
        ),
        Health::Loading { code, message } => format!(
            "its health endpoint still answers {code}{}; if the model needs longer, \
             raise health.timeout",
            message
                .as_ref()
                .map(|m| format!(" \"{m}\""))
                .unwrap_or_default()
        ),
        Health::GenerationPending { check, .. } => format!(
            "health is ok but the one-token {check} sent last has not answered yet: \
             generation is wedged or still warming up; raise health.timeout or \
             health.completion_timeout if it only needs longer"
        ),
        Health::GenerationFailing { check, why } => {
            format!("health is ready but a one-token {check} fails: {why}")
        }
        Health::GenerationSilent { check, within } => format!(
            "health is ok but a one-token {check} gives no answer within {}: \
             generation is wedged",
            format_duration(*within)
        ),
        Health::Ready | Health::Asleep => "ready too late".to_string(),
    }
}
