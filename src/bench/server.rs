//! What answers at a URL: the model it serves, what kind of server it is, its version.
//! The kind decides how requests ask for per-chunk token counts and cache control.

use std::time::Duration;

use serde_json::Value;

use super::suite::ServerKind;
use crate::error::Result;

/// What a server said about itself.
#[derive(Debug, Clone)]
pub(crate) struct ServerInfo {
    pub(in crate::bench) model: String,
    pub(in crate::bench) kind: ServerKind,
    pub(in crate::bench) version: Option<String>,
}

impl ServerInfo {
    pub(crate) fn model(&self) -> &str {
        &self.model
    }

    pub(crate) fn kind(&self) -> ServerKind {
        self.kind
    }
}

async fn get_json(client: &reqwest::Client, url: &str, path: &str) -> Option<Value> {
    let r = client
        .get(format!("{url}{path}"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .ok()?;
    if !r.status().is_success() {
        return None;
    }
    r.json().await.ok()
}

/// The kind a server's `/v1/models` entry names as its owner (each engine writes its own).
fn kind_from_owner(owned_by: &str) -> ServerKind {
    match owned_by {
        "llamacpp" => ServerKind::LlamaServer,
        "vllm" => ServerKind::Vllm,
        "sglang" => ServerKind::Sglang,
        _ => ServerKind::Other,
    }
}

/// Asks the server at `url` what it serves. `known` is the kind the recipe's engine says,
/// which wins over what the server's answers suggest. An error when it does not answer.
pub(crate) async fn probe(
    client: &reqwest::Client,
    url: &str,
    known: Option<ServerKind>,
) -> Result<ServerInfo> {
    use crate::openai::{first_model, list_models};
    let listing = list_models(client, url, Duration::from_secs(10))
        .await
        .map_err(|e| e.at(url))?;
    let (model, owner) = first_model(&listing).unwrap_or(("default", None));
    let (model, owner) = (model.to_string(), owner.unwrap_or_default());
    let kind = known.unwrap_or_else(|| kind_from_owner(owner));
    // Each engine tells its version in its own place.
    let version = match kind {
        ServerKind::LlamaServer => get_json(client, url, "/props")
            .await
            .and_then(|v| v["build_info"].as_str().map(str::to_string)),
        ServerKind::Sglang => get_json(client, url, "/get_server_info")
            .await
            .and_then(|v| v["version"].as_str().map(|s| format!("sglang {s}"))),
        ServerKind::Vllm | ServerKind::Other => get_json(client, url, "/version")
            .await
            .and_then(|v| v["version"].as_str().map(str::to_string)),
    };
    Ok(ServerInfo {
        model,
        kind,
        version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_engine_is_known_by_the_owner_it_writes() {
        assert_eq!(kind_from_owner("llamacpp"), ServerKind::LlamaServer);
        assert_eq!(kind_from_owner("vllm"), ServerKind::Vllm);
        assert_eq!(kind_from_owner("sglang"), ServerKind::Sglang);
        assert_eq!(kind_from_owner("sparkctl-sim"), ServerKind::Other);
    }
}
