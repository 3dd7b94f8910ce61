//! The OpenAI-compatible API as sparkctl speaks it to every engine: the model listing that
//! readiness, liveness and the benchmark all start from.

use std::time::Duration;

use serde_json::Value;

/// Why `GET /v1/models` gave no listing.
#[derive(Debug)]
pub(crate) enum ModelsError {
    /// Nothing answered (refused, reset, timed out).
    Unreachable(reqwest::Error),
    /// It answered with this status (503 while loading).
    Status(reqwest::StatusCode),
    /// It answered 2xx with something that is not JSON.
    Unreadable(reqwest::Error),
}

impl ModelsError {
    /// The error of a server at `url` whose model listing did not come: the one wording
    /// of each way it fails.
    pub(crate) fn at(self, url: &str) -> crate::error::Error {
        use crate::error::ServerProblem;
        let problem = match &self {
            ModelsError::Unreachable(_) => ServerProblem::Unreachable(self.to_string()),
            ModelsError::Status(s) => ServerProblem::Status(s.to_string()),
            ModelsError::Unreadable(_) => ServerProblem::Unreadable(self.to_string()),
        };
        crate::error::Error::Server {
            url: url.to_string(),
            problem,
        }
    }
}

impl std::fmt::Display for ModelsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModelsError::Unreachable(e) | ModelsError::Unreadable(e) => {
                write!(f, "GET /v1/models: {}", crate::error::chain(e))
            }
            ModelsError::Status(s) => write!(f, "GET /v1/models answered {s}"),
        }
    }
}

/// `GET {url}/v1/models` within `within`.
pub(crate) async fn list_models(
    client: &reqwest::Client,
    url: &str,
    within: Duration,
) -> Result<Value, ModelsError> {
    let resp = client
        .get(format!("{url}/v1/models"))
        .timeout(within)
        .send()
        .await
        .map_err(ModelsError::Unreachable)?;
    if !resp.status().is_success() {
        return Err(ModelsError::Status(resp.status()));
    }
    resp.json().await.map_err(ModelsError::Unreadable)
}

/// The first listed model: its id, and who the engine says owns it (`llamacpp`, `vllm`, …).
pub(crate) fn first_model(listing: &Value) -> Option<(&str, Option<&str>)> {
    let m = listing.pointer("/data/0")?;
    Some((m["id"].as_str()?, m["owned_by"].as_str()))
}
