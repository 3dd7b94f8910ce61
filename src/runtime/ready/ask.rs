//! Asking a server: its health endpoint, a one-token completion, and — for `status` — whether
//! it is alive and generating now.

use std::time::Duration;

use super::{GenerationCheck, Health, STATUS_GENERATION_TIMEOUT, STATUS_HEALTH_TIMEOUT};
use crate::runtime::{Deployment, Exit, RunState};

/// How the server answered a health request.
pub(super) async fn ask_health(client: &reqwest::Client, url: &str, within: Duration) -> Health {
    match client.get(url).timeout(within).send().await {
        Ok(r) if r.status().is_success() => Health::Ready,
        Ok(r) => {
            let code = r.status().as_u16();
            // The body says why (llama-server: "Loading model"); a body that never ends
            // does not hold the probe up past its limit.
            let message = r.text().await.ok().and_then(|body| server_message(&body));
            Health::Loading { code, message }
        }
        // Connected but no answer in time: the port is open, the server is stuck or slow.
        Err(e) if e.is_timeout() && !e.is_connect() => Health::Silent { within },
        Err(_) => Health::Refused,
    }
}

/// The server's own words in an error body: OpenAI-style `error.message` (llama-server,
/// vLLM), FastAPI's `detail`, a `message` or `status` field, else the first line of text.
pub(crate) fn server_message(body: &str) -> Option<String> {
    const MAX: usize = 160;
    let text = match serde_json::from_str::<serde_json::Value>(body) {
        Ok(v) => ["/error/message", "/error", "/detail", "/message", "/status"]
            .iter()
            .find_map(|p| v.pointer(p).and_then(|m| m.as_str()).map(str::to_string))?,
        Err(_) => body
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())?
            .to_string(),
    };
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    Some(if text.chars().count() > MAX {
        format!("{}…", text.chars().take(MAX).collect::<String>())
    } else {
        text.to_string()
    })
}

/// What a deployment's health says now (or how it ended), for `status`.
#[derive(Debug, Clone, PartialEq)]
pub enum Liveness {
    /// A container created but never started.
    Created,
    Exited(Option<Exit>),
    Running(Health),
}

impl std::fmt::Display for Liveness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Liveness::Created => f.write_str("created, never started"),
            Liveness::Exited(Some(exit)) => exit.fmt(f),
            Liveness::Exited(None) => f.write_str("exited"),
            // For a server that served, a refused connection is not "yet".
            Liveness::Running(Health::Refused) => f.write_str("not answering (connection refused)"),
            Liveness::Running(h @ Health::GenerationSilent { .. }) => {
                write!(f, "{h} (busy or wedged)")
            }
            Liveness::Running(h) => h.fmt(f),
        }
    }
}

/// What a deployment's health endpoint says now and whether it generates, for `status`.
///
/// "ready" needs health 2xx AND a generation answered within
/// `STATUS_GENERATION_TIMEOUT`: a server whose health is fine while requests hang is
/// exactly what users report on Spark tooling. The generation check is the engine's own
/// generating health endpoint when it has one (SGLang's `/health_generate`: it adds no
/// request to a busy server, and it generates even where `/health` was set not to), else
/// a one-token chat completion. Bounded: at most `STATUS_HEALTH_TIMEOUT` for health and for
/// the model listing each, plus `STATUS_GENERATION_TIMEOUT`, per deployment; `status` asks
/// them all at once.
pub async fn health_now(client: &reqwest::Client, d: &Deployment) -> Liveness {
    if d.state == RunState::Created {
        return Liveness::Created;
    }
    if let RunState::Exited { exit } = &d.state {
        return Liveness::Exited(exit.clone());
    }
    let url = d.url();
    let health = ask_health(
        client,
        &format!("{url}{}", d.health_path),
        STATUS_HEALTH_TIMEOUT,
    )
    .await;
    if health != Health::Ready {
        return Liveness::Running(health);
    }
    if asleep(client, d).await {
        return Liveness::Running(Health::Asleep);
    }
    let within = STATUS_GENERATION_TIMEOUT;
    if let Some(path) = d.engine.profile().liveness_path {
        let check = GenerationCheck::Endpoint(path);
        match ask_health(client, &format!("{url}{path}"), within).await {
            Health::Ready => return Liveness::Running(Health::Ready),
            // An older or custom build without the endpoint: use the completion instead.
            Health::Loading { code: 404, .. } => {}
            Health::Silent { .. } => {
                return Liveness::Running(Health::GenerationSilent { check, within })
            }
            Health::Loading { code, message } => {
                let why = match message {
                    Some(m) => format!("{code} {m}"),
                    None => code.to_string(),
                };
                return Liveness::Running(Health::GenerationFailing { check, why });
            }
            other => return Liveness::Running(other),
        }
    }
    let check = GenerationCheck::Completion;
    Liveness::Running(
        match completion(client, &url, STATUS_HEALTH_TIMEOUT, within).await {
            Ok(_) => Health::Ready,
            Err(Generation::Silent) => Health::GenerationSilent { check, within },
            Err(Generation::Failed(why)) => Health::GenerationFailing { check, why },
        },
    )
}

/// Whether `d` says it sleeps (`Profile::sleep_probe`); no when it cannot say.
pub async fn asleep(client: &reqwest::Client, d: &Deployment) -> bool {
    let Some(path) = d.engine.profile().sleep_probe else {
        return false;
    };
    let url = format!("{}{path}", d.url());
    let Ok(r) = client.get(url).timeout(STATUS_HEALTH_TIMEOUT).send().await else {
        return false;
    };
    if !r.status().is_success() {
        return false;
    }
    let said: Option<serde_json::Value> = r.json().await.ok();
    said.and_then(|v| v.get("is_sleeping")?.as_bool()) == Some(true)
}

/// Why the one-token completion did not succeed.
pub(super) enum Generation {
    /// No answer within the limit (generation wedged, or busy).
    Silent,
    /// It answered, with an error.
    Failed(String),
}

/// A one-token chat completion against the first model the server lists (the listing may
/// take `list_within`); `within` bounds the completion from send to the last byte of its
/// answer.
pub(super) async fn completion(
    client: &reqwest::Client,
    url: &str,
    list_within: Duration,
    within: Duration,
) -> Result<String, Generation> {
    let listing = crate::openai::list_models(client, url, list_within)
        .await
        .map_err(|e| Generation::Failed(e.to_string()))?;
    let model = crate::openai::first_model(&listing)
        .ok_or_else(|| Generation::Failed("GET /v1/models lists no model".into()))?
        .0
        .to_string();
    let body = serde_json::json!({
        "model": model,
        "messages": [{"role": "user", "content": "Say OK."}],
        "max_tokens": 1,
        "stream": false,
    });
    let silent_or = |e: reqwest::Error, what: String| {
        if e.is_timeout() {
            Generation::Silent
        } else {
            Generation::Failed(format!("{what}: {e}"))
        }
    };
    let resp = client
        .post(format!("{url}/v1/chat/completions"))
        .timeout(within)
        .json(&body)
        .send()
        .await
        .map_err(|e| silent_or(e, "POST /v1/chat/completions".into()))?;
    let status = resp.status();
    let text = resp.text().await.map_err(|e| {
        silent_or(
            e,
            format!("POST /v1/chat/completions answered {status}, then"),
        )
    })?;
    let answer: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        Generation::Failed(format!(
            "POST /v1/chat/completions answered {status} with no JSON ({e})"
        ))
    })?;
    if !status.is_success() || answer.pointer("/choices/0").is_none() {
        let said = server_message(&text).unwrap_or_else(|| answer.to_string());
        return Err(Generation::Failed(format!(
            "POST /v1/chat/completions answered {status}: {said}"
        )));
    }
    Ok(model)
}
