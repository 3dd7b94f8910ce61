//! What was benchmarked: the server's address and what it runs (recipe, image, model,
//! engine, version) and the model's sizes the roofline needs.

use serde::{Deserialize, Serialize};

use super::suite::ServerKind;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Target {
    pub(crate) url: String,
    pub(crate) recipe: Option<String>,
    /// The instance benchmarked (container id or pid), when benchmarked by recipe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) deployment: Option<String>,
    pub(crate) recipe_hash: Option<String>,
    pub(crate) image: Option<String>,
    /// The image id / digest the server ran on.
    pub(crate) image_digest: Option<String>,
    pub(crate) model_fingerprint: Option<String>,
    /// The model id the server answered with.
    pub(crate) model: String,
    /// The recipe's engine, when benchmarked by recipe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) engine: Option<crate::engine::Engine>,
    /// What the server is (from the recipe's engine, or what it answered to probes).
    #[serde(default)]
    pub(crate) server: ServerKind,
    /// llama-server `/props` build_info, vLLM `/version`, SGLang `/get_server_info`.
    pub(crate) server_version: Option<String>,
    pub(crate) weights_bytes: Option<u64>,
    /// Weights read per token, where fewer than all (MoE: the active experts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) active_weights_bytes: Option<u64>,
    /// KV-cache bytes per token of context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) kv_bytes_per_token: Option<u64>,
    /// The memory bandwidth of the device that serves: the roofline's bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) bandwidth: Option<super::bound::Bandwidth>,
    /// Why no bandwidth is known (no roofline, no sample judged impossible).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) no_bandwidth: Option<String>,
}

impl Target {
    /// The bound's bandwidth in bytes per second, when known.
    pub(crate) fn bandwidth_bytes_per_s(&self) -> Option<f64> {
        self.bandwidth.as_ref().map(|b| b.gb_per_s * 1e9)
    }

    /// Sets the bound, or why there is none.
    pub(crate) fn set_bound(&mut self, bound: Result<super::bound::Bandwidth, String>) {
        (self.bandwidth, self.no_bandwidth) = match bound {
            Ok(b) => (Some(b), None),
            Err(why) => (None, Some(why)),
        };
    }
}
