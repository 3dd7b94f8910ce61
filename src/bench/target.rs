//! What was benchmarked: the server's address and what it runs (recipe, image, model,
//! engine, version) and the model's sizes the roofline needs.

use serde::{Deserialize, Serialize};

use super::suite::ServerKind;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Target {
    pub url: String,
    pub recipe: Option<String>,
    /// The instance benchmarked (container id or pid), when benchmarked by recipe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<String>,
    pub recipe_hash: Option<String>,
    pub image: Option<String>,
    /// The image id / digest the server ran on.
    pub image_digest: Option<String>,
    pub model_fingerprint: Option<String>,
    /// The model id the server answered with.
    pub model: String,
    /// The recipe's engine, when benchmarked by recipe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<crate::engine::Engine>,
    /// What the server is (from the recipe's engine, or what it answered to probes).
    #[serde(default)]
    pub server: ServerKind,
    /// llama-server `/props` build_info, vLLM `/version`, SGLang `/get_server_info`.
    pub server_version: Option<String>,
    pub weights_bytes: Option<u64>,
    /// Weights read per token, where fewer than all (MoE: the active experts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_weights_bytes: Option<u64>,
    /// KV-cache bytes per token of context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_bytes_per_token: Option<u64>,
    /// The memory bandwidth of the device that serves: the roofline's bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<super::bound::Bandwidth>,
    /// Why no bandwidth is known (no roofline, no sample judged impossible).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_bandwidth: Option<String>,
}

impl Target {
    /// The bound's bandwidth in bytes per second, when known.
    pub fn bandwidth_bytes_per_s(&self) -> Option<f64> {
        self.bandwidth.as_ref().map(|b| b.gb_per_s * 1e9)
    }

    /// Sets the bound, or why there is none.
    pub fn set_bound(&mut self, bound: Result<super::bound::Bandwidth, String>) {
        (self.bandwidth, self.no_bandwidth) = match bound {
            Ok(b) => (Some(b), None),
            Err(why) => (None, Some(why)),
        };
    }
}
