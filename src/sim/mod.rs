//! sparkctl's simulated OpenAI-compatible engine: what the demo recipes, the tests and a
//! newcomer without a GPU run. Every timing and fault is set on the command line (or by
//! `SIM_*` variables, which suit containers).

mod agents;
mod cache;
mod eval;
mod metrics;
mod ray;
mod script;
mod server;
mod sleep;
mod stream;

use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::units::{parse_duration, parse_size, ByteSize};

pub(crate) use server::serve;

fn duration(text: &str) -> Result<Duration, String> {
    parse_duration(text)
}

fn fraction(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(f) if (0.0..=1.0).contains(&f) => Ok(f),
        _ => Err(format!("`{text}` is not a fraction from 0 to 1")),
    }
}

fn size(text: &str) -> Result<ByteSize, String> {
    parse_size(text).map(ByteSize)
}

/// Whose wire the simulator follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Mimic {
    /// sparkctl's own: /health 503 while loading, `reasoning_content` deltas (as
    /// llama-server sends them), one chunk per token, usage with cached tokens.
    Generic,
    /// vLLM 0.32's, as the suite's real vLLM shows it (tests/it/vllm.rs holds the two side by
    /// side): no port until loaded, /health 200 with no body, `owned_by: vllm`,
    /// `delta.reasoning`, the model's `<think>`, `</think>` and end-of-sequence tokens
    /// counted in usage but in no chunk, usage in every chunk when `continuous_usage_stats`
    /// is asked, `finish_reason: length` on the last token's own chunk.
    Vllm,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ReasoningAs {
    /// A delta field of its own, as an engine with a reasoning parser sends it:
    /// `reasoning_content` (llama-server; `--mimic generic`), `reasoning` (vLLM 0.32).
    Field,
    /// `<think>…</think>` inside `content`: the leak the seeds' v1 benchmark fell for.
    Leak,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ToolCallsAs {
    /// `tool_calls` deltas, as a server with a matching tool-call parser sends them.
    Field,
    /// `<tool_call>` XML left in `content` (the seeds' qwen3_coder parser mismatch).
    Content,
    /// Ignore tools and answer in text.
    Off,
}

/// What goes wrong when a sleeping engine is woken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum WakeFault {
    /// `/wake_up` answers 500, and the engine sleeps on.
    Fail,
    /// `/wake_up` never answers.
    Hang,
}

/// What goes wrong while the model loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum LoadFault {
    /// Print --fatal-line to stderr and exit with status 1.
    Crash,
    /// Die by SIGKILL (exit 137 in a container), as the kernel's OOM killer does.
    Killed,
    /// Print --fatal-line and keep running, never ready (vLLM's engine core does this).
    FatalHang,
    /// Stop answering on the port (connections refused) and keep running.
    ClosePort,
}

#[derive(Debug, Clone, Args)]
pub(crate) struct SimConfig {
    /// Address to listen on.
    #[arg(long, env = "SIM_HOST", default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on; 0 picks a free one (printed at start).
    #[arg(long, env = "SIM_PORT", default_value_t = 8000)]
    port: u16,
    /// Whose wire to follow: `generic`, or `vllm` (vLLM 0.32's).
    #[arg(long, env = "SIM_MIMIC", value_enum, default_value = "generic")]
    mimic: Mimic,
    /// Model id served in /v1/models.
    #[arg(long, env = "SIM_MODEL_NAME", default_value = "sim-model")]
    model_name: String,
    /// Time /health answers 503 before the model counts as loaded.
    #[arg(long, env = "SIM_LOAD_TIME", default_value = "0s", value_parser = duration)]
    load_time: Duration,
    /// Time from request to the first generated token (reasoning or content).
    #[arg(long, env = "SIM_TTFT", default_value = "50ms", value_parser = duration)]
    ttft: Duration,
    /// Noise on each request's TTFT: drawn evenly from ttft × (1 ± this fraction), 0 to 1
    /// (0: none). The draws follow the request number, so a run of a fresh server repeats.
    #[arg(long, env = "SIM_TTFT_JITTER", default_value_t = 0.0, value_parser = fraction)]
    ttft_jitter: f64,
    /// Decode speed in tokens per second; tokens are spaced 1/rate apart.
    #[arg(long, env = "SIM_TOKEN_RATE", default_value_t = 50.0)]
    token_rate: f64,
    /// Content tokens per answer (capped by the request's max_tokens).
    #[arg(long, env = "SIM_TOKENS", default_value_t = 24)]
    tokens: usize,
    /// Reasoning tokens generated before the content.
    #[arg(long, env = "SIM_REASONING_TOKENS", default_value_t = 0)]
    reasoning_tokens: usize,
    /// How reasoning reaches the client.
    #[arg(long, env = "SIM_REASONING_AS", value_enum, default_value = "field")]
    reasoning_as: ReasoningAs,
    /// Answer with markdown (headers, bold, lists).
    #[arg(long, env = "SIM_MARKDOWN")]
    markdown: bool,
    /// How tool calls are returned when the request offers tools.
    #[arg(long, env = "SIM_TOOL_CALLS", value_enum, default_value = "field")]
    tool_calls: ToolCallsAs,
    /// Never send a usage block, even when asked.
    #[arg(long, env = "SIM_NO_USAGE")]
    no_usage: bool,
    /// Fault halfway through loading (see --fatal-line for the line printed).
    #[arg(long, env = "SIM_LOAD_FAULT", value_enum)]
    load_fault: Option<LoadFault>,
    /// Fault: die of out-of-memory as it loads while a server answers at this URL — a
    /// GPU whose memory that other server holds (the line is CUDA's).
    #[arg(long, env = "SIM_OOM_BESIDE", value_name = "URL")]
    oom_beside: Option<String>,
    /// Fault: stay loading forever (/health is 503 for good).
    #[arg(long, env = "SIM_NEVER_READY")]
    never_ready: bool,
    /// Fault: every Nth chat request answers 500 (0 = never).
    #[arg(long, env = "SIM_FAIL_EVERY", default_value_t = 0)]
    fail_every: u64,
    /// Fault: a chat request whose messages contain TEXT answers 500 (live traffic marked
    /// so fails while a benchmark's questions pass).
    #[arg(long, env = "SIM_FAIL_ON", value_name = "TEXT")]
    fail_on: Option<String>,
    /// Fault: the first connection whose request head (its request line and headers: a
    /// client's User-Agent, say) contains TEXT is reset before it is read, as a server at
    /// its connection limit (or a proxy in front of one) does; every other one is served.
    #[arg(long, env = "SIM_RESET_ONCE_ON", value_name = "TEXT")]
    reset_once_on: Option<String>,
    /// Fault: stop sending after N tokens and hold the stream open.
    #[arg(long, env = "SIM_STALL_AFTER")]
    stall_after: Option<usize>,
    /// Fault: send an error event after N tokens and end the stream.
    #[arg(long, env = "SIM_ERROR_AFTER")]
    error_after: Option<usize>,
    /// Fault: after N chat requests, answers turn to garbled text past their first tokens
    /// (replacement characters and fragments), while /health stays 200 and one-token
    /// answers stay correct — a server whose kernels or KV cache went bad.
    #[arg(long, env = "SIM_GARBAGE_AFTER", value_name = "N")]
    garbage_after: Option<u64>,
    /// Fault: after N chat requests, answers loop past their first tokens (the same words
    /// over and over).
    #[arg(long, env = "SIM_LOOP_AFTER", value_name = "N")]
    loop_after: Option<u64>,
    /// Fault: after N chat requests, answers are empty (healthy, finished, no text).
    #[arg(long, env = "SIM_EMPTY_AFTER", value_name = "N")]
    empty_after: Option<u64>,
    /// Fault: after N chat requests, tool calls are left in the content as `<tool_call>`
    /// text (as `--tool-calls content` does from the start).
    #[arg(long, env = "SIM_TOOL_TEXT_AFTER", value_name = "N")]
    tool_text_after: Option<u64>,
    /// The built-in evaluation sets' items are answered right, except this share of each
    /// set (`20%`), always the same items, answered fluently and wrong: a model that got
    /// that many points worse.
    #[arg(long, env = "SIM_EVAL_WRONG", default_value = "0", value_parser = eval::share, value_name = "SHARE")]
    eval_wrong: f64,
    /// Allocate this much RAM (e.g. 512m, 2g) at startup, touch every page so it is really
    /// resident, and hold it while serving: a server that takes memory, as a real engine's
    /// weights and KV cache do.
    #[arg(long, env = "SIM_HOLD_MEMORY", value_parser = size, value_name = "SIZE")]
    hold_memory: Option<ByteSize>,
    /// vLLM's sleep mode: with `VLLM_SERVER_DEV_MODE=1`, `POST /sleep?level=N` frees what
    /// `--hold-memory` holds and `POST /wake_up` takes it back (without this flag a sleep
    /// only pauses, as vLLM's CPU worker does).
    #[arg(long, env = "SIM_ENABLE_SLEEP_MODE")]
    enable_sleep_mode: bool,
    /// vLLM's development mode: its development routes (sleep's among them) open. Set by
    /// the variable vLLM reads, `VLLM_SERVER_DEV_MODE=1`.
    #[arg(long, env = "VLLM_SERVER_DEV_MODE", hide = true, value_name = "1")]
    dev_mode: Option<String>,
    /// How long a wake from sleep takes (its memory taken back).
    #[arg(long, env = "SIM_WAKE_TIME", value_parser = duration, default_value = "200ms")]
    wake_time: Duration,
    /// Fault: a wake from sleep fails (500), or never answers.
    #[arg(long, env = "SIM_WAKE_FAULT", value_enum)]
    wake_fault: Option<WakeFault>,
    /// Requests served at once; more wait in a queue, their TTFT clock already running
    /// (0 = no limit). A known saturation point for load sweeps.
    #[arg(long, env = "SIM_SLOTS", default_value_t = 0)]
    slots: usize,
    /// Prompt tokens evaluated per second: each uncached prompt token adds 1/rate to the
    /// TTFT (0 = prompts cost nothing).
    #[arg(long, env = "SIM_PREFILL_RATE", default_value_t = 0.0)]
    prefill_rate: f64,
    /// Keep evaluated prompt prefixes (in blocks of 16 tokens, as vLLM's prefix cache does):
    /// a repeated prefix is not evaluated again and is reported as cached tokens.
    #[arg(long, env = "SIM_PREFIX_CACHE")]
    prefix_cache: bool,
    /// KV-cache tokens per slot: the denominator of the kv-cache usage metric.
    #[arg(long, env = "SIM_CTX_SIZE", default_value_t = 8192)]
    ctx_size: usize,
    /// Log line printed before a crash (a real engine's fatal line by default).
    #[arg(
        long,
        env = "SIM_FATAL_LINE",
        default_value = "torch.AcceleratorError: CUDA error: no kernel image is available for execution on the device"
    )]
    fatal_line: String,
    /// Ray's part in a multi-node group: play `ray start --head` listening on ADDR:PORT
    /// (no HTTP); workers join it, `--ray-status` asks it.
    #[arg(long, env = "SIM_RAY_HEAD", value_name = "ADDR:PORT")]
    ray_head: Option<String>,
    /// Play `ray start --address HEAD:PORT --block`: join, keep the connection, end with
    /// status 1 when it drops.
    #[arg(long, env = "SIM_RAY_JOIN", value_name = "HEAD:PORT")]
    ray_join: Option<String>,
    /// This node's address as it reports itself to the head (`--node-ip-address`).
    #[arg(long, env = "SIM_RAY_NODE_IP", value_name = "IP")]
    ray_node_ip: Option<String>,
    /// GPUs this node brings to the cluster.
    #[arg(long, env = "SIM_RAY_GPUS", default_value_t = 1)]
    ray_gpus: u32,
    /// Print the head's `ray status` (nodes, GPUs) and exit.
    #[arg(long, value_name = "HEAD:PORT")]
    ray_status: Option<String>,
    /// The API server of a group: ready only once the Ray head at HEAD:PORT reports
    /// `--ray-nodes` nodes; ends with status 1 when a node leaves.
    #[arg(long, env = "SIM_RAY_ADDRESS", value_name = "HEAD:PORT")]
    ray_address: Option<String>,
    /// Nodes the API server waits for (the tensor-parallel group's size in nodes).
    #[arg(long, env = "SIM_RAY_NODES", default_value_t = 1)]
    ray_nodes: usize,
    /// Print `sha256sum`-style lines (`HASH  FILE`) for these files and exit: what a
    /// group's model check runs on another node, where a FROM-scratch image has no coreutils.
    #[arg(long, num_args = 1.., value_name = "FILE")]
    sha256_files: Vec<String>,
    /// Taken as vLLM takes it, so a group's API server has vLLM's argv; logged only.
    #[arg(long, value_name = "N")]
    tensor_parallel_size: Option<u32>,
    /// Taken as vLLM takes it (`ray`); logged only.
    #[arg(long, value_name = "BACKEND")]
    distributed_executor_backend: Option<String>,
}

impl SimConfig {
    /// Interval between tokens.
    pub(crate) fn itl(&self) -> Duration {
        Duration::from_secs_f64(1.0 / self.token_rate.max(1e-3))
    }

    /// Request `n`'s time to first token, with its jitter (a splitmix64 draw of `n`).
    pub(crate) fn ttft_for(&self, n: u64) -> Duration {
        if self.ttft_jitter <= 0.0 {
            return self.ttft;
        }
        let mut z = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let unit = (z >> 11) as f64 / (1u64 << 53) as f64;
        self.ttft
            .mul_f64((1.0 + self.ttft_jitter * (2.0 * unit - 1.0)).max(0.0))
    }

    /// Time to evaluate `tokens` uncached prompt tokens.
    pub(crate) fn prefill(&self, tokens: usize) -> Duration {
        if self.prefill_rate > 0.0 {
            Duration::from_secs_f64(tokens as f64 / self.prefill_rate)
        } else {
            Duration::ZERO
        }
    }
}

/// `--oom-beside URL`: the other server answers, so its memory is not free — this one dies
/// as a CUDA engine does, with the line such an engine prints.
pub(crate) async fn out_of_memory_beside(cfg: &SimConfig) {
    let Some(url) = &cfg.oom_beside else { return };
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(std::time::Duration::from_secs(1))
        .build()
        .unwrap_or_default();
    if client.get(format!("{url}/health")).send().await.is_ok() {
        crate::stdio::err(format_args!(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (another \
             server at {url} holds the GPU's memory)"
        ));
        std::process::exit(1);
    }
}
