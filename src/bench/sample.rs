//! What one streamed request measured: the sample's fields, the failure kinds and where
//! its token counts came from. Filled in by `client` and `reader`, read by everything else.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Why a request yielded no complete answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Failure {
    /// No response byte arrived, even after one retry on a fresh connection: refused,
    /// reset or closed. The client's or the network's problem as far as the evidence goes.
    Transport,
    /// The server answered with an error status, or with something that is not a stream.
    Http,
    /// The stream broke after it began: cut, truncated, invalid JSON, an error event.
    Stream,
    /// No complete answer within the request timeout.
    Timeout,
}

impl Failure {
    /// Whether the server is to blame (not the client or the network).
    pub(crate) fn blames_server(self) -> bool {
        !matches!(self, Failure::Transport)
    }
}

/// Where a sample's token count comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum TokenSource {
    /// The server's `usage` (or llama-server's `timings.predicted_n`).
    #[default]
    Usage,
    /// No usage: one token per token-bearing chunk, an estimate.
    Chunks,
}

/// How the tokens of a sample are spread over its chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum ChunkTokens {
    /// Every chunk carried a running count (llama-server `timings_per_token`, vLLM and
    /// SGLang `continuous_usage_stats`): per-token figures are exact.
    #[default]
    Exact,
    /// The total is known, not each chunk's share: spread evenly over the chunks.
    Spread,
    /// Nothing told: one token per chunk assumed.
    OnePerChunk,
}

/// llama-server's own measurements of a request (`timings`), typed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct ServerTimings {
    /// Prompt tokens reused from the server's cache.
    pub(in crate::bench) cache_n: Option<u64>,
    /// Prompt tokens evaluated for this request.
    pub(in crate::bench) prompt_n: Option<u64>,
    pub(in crate::bench) prompt_ms: Option<f64>,
    pub(in crate::bench) predicted_n: Option<u64>,
    pub(in crate::bench) predicted_ms: Option<f64>,
    pub(in crate::bench) predicted_per_second: Option<f64>,
}

impl ServerTimings {
    pub(super) fn from_json(v: &Value) -> ServerTimings {
        ServerTimings {
            cache_n: v["cache_n"].as_u64(),
            prompt_n: v["prompt_n"].as_u64(),
            prompt_ms: v["prompt_ms"].as_f64(),
            predicted_n: v["predicted_n"].as_u64(),
            predicted_ms: v["predicted_ms"].as_f64(),
            predicted_per_second: v["predicted_per_second"].as_f64(),
        }
    }
}

/// Everything measured about one request. Times are ms from the request's send (the
/// retry's send when the first attempt never reached the server).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Sample {
    pub(in crate::bench) case: String,
    pub(in crate::bench) run: usize,
    /// 1-based turn of a multi-turn case.
    pub(in crate::bench) turn: usize,
    pub(in crate::bench) warmup: bool,
    /// Which of the `--repeat` runs of the suite it belongs to (0-based).
    #[serde(default)]
    pub(in crate::bench) repeat: usize,
    pub ok: bool,
    /// The response's `id` (to find it in the server's log).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// When the request was sent, Unix µs: lines the sample up with server-side timestamps.
    pub sent_unix_us: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bench) failure: Option<Failure>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The first attempt's transport error, when the request was sent again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bench) retried_after: Option<String>,
    pub(in crate::bench) status: Option<u16>,
    /// TTFT: time to the first token of any kind (reasoning, content or tool call).
    pub ttft_ms: Option<f64>,
    /// TTFO: time to the first output token (content or tool call; reasoning does not count).
    #[serde(default)]
    pub(in crate::bench) ttfo_ms: Option<f64>,
    /// Time to the first reasoning token.
    pub(in crate::bench) ttfr_ms: Option<f64>,
    /// E2EL: until the stream ended.
    pub(in crate::bench) e2e_ms: f64,
    /// TPOT: (E2EL − TTFT) / (tokens − 1), as vLLM's benchmark defines it.
    #[serde(default)]
    pub(in crate::bench) tpot_ms: Option<f64>,
    /// ITL: per-token inter-token latency (a chunk's gap over the tokens it carried).
    pub itl_ms: Vec<f64>,
    /// When each token-bearing chunk arrived, and the tokens it carried (see `chunk_tokens`).
    #[serde(default)]
    pub chunk_at_ms: Vec<f64>,
    #[serde(default)]
    pub(in crate::bench) chunk_token_counts: Vec<f64>,
    #[serde(default)]
    pub(in crate::bench) chunk_tokens: ChunkTokens,
    pub(in crate::bench) content_deltas: usize,
    pub(in crate::bench) reasoning_deltas: usize,
    pub(in crate::bench) prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub(in crate::bench) reasoning_tokens: Option<u64>,
    /// Prompt tokens the server served from its cache (`usage.prompt_tokens_details.
    /// cached_tokens`, or llama-server's `timings.cache_n`).
    pub(in crate::bench) cached_tokens: Option<u64>,
    /// Decode speed: tokens after the first chunk, over the time from the first chunk to
    /// the last.
    pub decode_tps: Option<f64>,
    #[serde(default)]
    pub(in crate::bench) token_source: TokenSource,
    /// True when no `usage` came and token counts are estimated from chunks.
    pub(in crate::bench) usage_estimated: bool,
    /// Most tokens arrived within a few ms: the server buffered the stream, so per-token
    /// figures say nothing about decoding.
    #[serde(default)]
    pub(in crate::bench) burst: bool,
    /// Its decode speed is above what the memory bandwidth allows for the model's size.
    #[serde(default)]
    pub(in crate::bench) impossible: bool,
    /// llama-server's own `timings`, when sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bench) server_timings: Option<ServerTimings>,
    pub(crate) content: String,
    pub(in crate::bench) reasoning: String,
    pub(crate) tool_calls: Vec<ToolCall>,
    pub(in crate::bench) finish_reason: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub(crate) struct ToolCall {
    pub(crate) name: String,
    pub(in crate::bench) arguments: String,
}

impl Sample {
    /// The error's kind and message together.
    pub(super) fn fail(&mut self, kind: Failure, message: String) {
        self.failure.get_or_insert(kind);
        self.error.get_or_insert(message);
    }
}
