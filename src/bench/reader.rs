//! Reads a stream's events into a sample: first tokens, per-chunk token counts, usage and
//! the server's timings; then per-token gaps, decode speed and the burst check.

use serde_json::Value;

use super::sample::{ChunkTokens, Sample, ServerTimings, TokenSource, ToolCall};

/// Whether a streamed choice carries a token: text, a tool call, or an empty text delta
/// that neither announces the role nor closes the stream (a token with no visible text of
/// its own still took a decoding step).
pub(crate) fn bears_token(choice: &Value) -> bool {
    let delta = &choice["delta"];
    let text = |key: &str| delta.get(key).and_then(Value::as_str);
    let texts = [
        text("content"),
        text("reasoning_content"),
        text("reasoning"),
    ];
    let calls = delta["tool_calls"]
        .as_array()
        .is_some_and(|c| !c.is_empty());
    let empty_token = delta.get("role").is_none()
        && choice["finish_reason"].as_str().is_none()
        && texts.iter().any(Option::is_some);
    calls || texts.iter().flatten().any(|t| !t.is_empty()) || empty_token
}

/// Token counts from a `usage` block; later blocks win, missing fields keep earlier ones.
fn read_usage(s: &mut Sample, u: &Value) {
    s.prompt_tokens = u["prompt_tokens"].as_u64().or(s.prompt_tokens);
    s.completion_tokens = u["completion_tokens"].as_u64().or(s.completion_tokens);
    s.reasoning_tokens = u
        .pointer("/completion_tokens_details/reasoning_tokens")
        .and_then(Value::as_u64)
        .or(s.reasoning_tokens);
    s.cached_tokens = u
        .pointer("/prompt_tokens_details/cached_tokens")
        .and_then(Value::as_u64)
        .or(s.cached_tokens);
}

/// What a stream has told so far, beyond what the sample keeps.
#[derive(Default)]
pub(super) struct Reader {
    pub(super) done: bool,
    tools: Vec<ToolCall>,
    /// A running completion-token count per token-bearing chunk, where the chunk had one.
    running: Vec<Option<u64>>,
}

impl Reader {
    pub(super) fn event(&mut self, s: &mut Sample, v: &Value, at: f64) {
        if s.id.is_none() {
            s.id = v["id"].as_str().map(str::to_string);
        }
        let usage = v.get("usage").filter(|u| !u.is_null());
        if let Some(u) = usage {
            read_usage(s, u);
        }
        let timings = v.get("timings").filter(|t| t.is_object());
        if let Some(t) = timings {
            s.server_timings = Some(ServerTimings::from_json(t));
        }
        let Some(choice) = v.pointer("/choices/0") else {
            return;
        };
        if let Some(reason) = choice["finish_reason"].as_str() {
            s.finish_reason = Some(reason.to_string());
        }
        let delta = &choice["delta"];
        let text = |key: &str| delta.get(key).and_then(Value::as_str);
        let reasoning = text("reasoning_content").or(text("reasoning"));
        let content = text("content");
        let calls = delta["tool_calls"].as_array().filter(|c| !c.is_empty());
        let mut output = false;
        if let Some(r) = reasoning.filter(|r| !r.is_empty()) {
            s.reasoning.push_str(r);
            s.reasoning_deltas += 1;
            s.ttfr_ms.get_or_insert(at);
        }
        if let Some(c) = content.filter(|c| !c.is_empty()) {
            s.content.push_str(c);
            s.content_deltas += 1;
            output = true;
        }
        for call in calls.into_iter().flatten() {
            self.tool_call(call);
            // A tool call is the answer's output, as content would be.
            output = true;
        }
        if output {
            s.ttfo_ms.get_or_insert(at);
        }
        if bears_token(choice) {
            s.ttft_ms.get_or_insert(at);
            s.chunk_at_ms.push(at);
            let running = timings
                .and_then(|t| t["predicted_n"].as_u64())
                .or_else(|| usage.and_then(|u| u["completion_tokens"].as_u64()));
            self.running.push(running);
        }
    }

    /// Adds a tool-call delta to the call at its index.
    fn tool_call(&mut self, call: &Value) {
        let index = call["index"].as_u64().unwrap_or(0) as usize;
        while self.tools.len() <= index {
            self.tools.push(ToolCall::default());
        }
        if let Some(name) = call.pointer("/function/name").and_then(Value::as_str) {
            self.tools[index].name.push_str(name);
        }
        if let Some(args) = call.pointer("/function/arguments").and_then(Value::as_str) {
            self.tools[index].arguments.push_str(args);
        }
    }

    /// Token counts, per-token timing, decode speed and the burst check, once the stream
    /// is over.
    pub(super) fn finish(self, s: &mut Sample) {
        s.tool_calls = self.tools;
        let chunks = s.chunk_at_ms.len();
        let from_server = s
            .completion_tokens
            .or_else(|| s.server_timings.as_ref().and_then(|t| t.predicted_n));
        s.completion_tokens = from_server;
        if s.cached_tokens.is_none() {
            s.cached_tokens = s.server_timings.as_ref().and_then(|t| t.cache_n);
        }
        if s.prompt_tokens.is_none() {
            if let Some(t) = &s.server_timings {
                s.prompt_tokens = t.prompt_n.map(|n| n + t.cache_n.unwrap_or(0));
            }
        }
        let total = match from_server {
            Some(n) => n as f64,
            None => {
                s.token_source = TokenSource::Chunks;
                s.usage_estimated = true;
                chunks as f64
            }
        };
        // Each chunk's share: the running counts when every chunk had one, else the total
        // spread evenly, else one each.
        let exact: Option<Vec<f64>> = self
            .running
            .iter()
            .scan(0u64, |prev, r| {
                Some(r.map(|n| {
                    let d = n.saturating_sub(*prev);
                    *prev = n;
                    d as f64
                }))
            })
            .collect();
        let (counts, kind) = match exact {
            // Tokens that never became text (a held-back partial character at the end)
            // are in the total, not in any chunk.
            Some(c) if chunks > 0 && c.iter().sum::<f64>() <= total => (c, ChunkTokens::Exact),
            _ if from_server.is_some() && chunks > 0 => {
                (vec![total / chunks as f64; chunks], ChunkTokens::Spread)
            }
            _ => (vec![1.0; chunks], ChunkTokens::OnePerChunk),
        };
        s.chunk_tokens = kind;
        s.chunk_token_counts = counts;
        s.itl_ms = per_token_gaps(&s.chunk_at_ms, &s.chunk_token_counts);
        s.burst = is_burst(&s.chunk_at_ms, &s.chunk_token_counts);
        if s.burst {
            return;
        }
        if let (Some(&first), Some(&last)) = (s.chunk_at_ms.first(), s.chunk_at_ms.last()) {
            let after_first = total - s.chunk_token_counts[0];
            if after_first >= 1.0 && last > first {
                s.decode_tps = Some(after_first / ((last - first) / 1e3));
            }
            if total > 1.0 {
                s.tpot_ms = Some((s.e2e_ms - first) / (total - 1.0));
            }
        }
    }
}

/// Per-token gaps: each chunk's gap from the previous one, divided over the tokens it
/// carried (one value per token when counts are whole, one per chunk otherwise). A chunk
/// that carried no token hands its gap on to the next.
pub(crate) fn per_token_gaps(at: &[f64], counts: &[f64]) -> Vec<f64> {
    let mut out = Vec::new();
    let mut since = at.first().copied().unwrap_or(0.0);
    for (&t, &n) in at.iter().zip(counts).skip(1) {
        if n <= 0.0 {
            continue;
        }
        let gap = (t - since) / n;
        let whole = (n - n.round()).abs() < 1e-9;
        let repeat = if whole { n.round() as usize } else { 1 };
        out.extend(std::iter::repeat_n(gap, repeat));
        since = t;
    }
    out
}

/// Tokens arriving faster than this each (inside the window holding 90% of them) were
/// not decoded one by one as they arrived: no single stream decodes at 20,000 tok/s.
pub(crate) const BURST_PER_TOKEN_MS: f64 = 0.05;

/// True when 90% of at least 8 tokens arrived inside a window shorter than
/// `BURST_PER_TOKEN_MS` per token: the server buffered the answer and sent it in bursts.
pub(crate) fn is_burst(at: &[f64], counts: &[f64]) -> bool {
    let total: f64 = counts.iter().sum();
    if total < 8.0 {
        return false;
    }
    let need = (0.9 * total).ceil();
    // Smallest window [at[i], at[j]] whose chunks hold `need` tokens (two pointers).
    let (mut best, mut held, mut i) = (f64::INFINITY, 0.0, 0);
    for j in 0..at.len() {
        held += counts[j];
        while held - counts[i] >= need && i < j {
            held -= counts[i];
            i += 1;
        }
        if held >= need {
            best = best.min(at[j] - at[i]);
        }
    }
    best < BURST_PER_TOKEN_MS * total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_are_split_over_the_tokens_a_chunk_carried() {
        let at = [10.0, 20.0, 40.0, 41.0];
        assert_eq!(
            per_token_gaps(&at, &[1.0, 1.0, 2.0, 1.0]),
            vec![10.0, 10.0, 10.0, 1.0]
        );
        // An empty chunk's gap goes to the next one.
        assert_eq!(
            per_token_gaps(&at, &[1.0, 0.0, 2.0, 1.0]),
            vec![15.0, 15.0, 1.0]
        );
        // Spread counts give one value per chunk.
        assert_eq!(
            per_token_gaps(&at[..3], &[1.5; 3]),
            vec![10.0 / 1.5, 20.0 / 1.5]
        );
    }

    #[test]
    fn a_buffered_stream_is_a_burst_and_a_paced_one_is_not() {
        // 64 tokens 20 ms apart: decoding.
        let paced: Vec<f64> = (0..64).map(|i| 100.0 + 20.0 * i as f64).collect();
        assert!(!is_burst(&paced, &[1.0; 64]));
        // The same 64 tokens all within 1 ms after a long wait: buffered.
        let burst: Vec<f64> = (0..64).map(|i| 2000.0 + 0.015 * i as f64).collect();
        assert!(is_burst(&burst, &[1.0; 64]));
        // One chunk with everything.
        assert!(is_burst(&[500.0], &[64.0]));
        // A fast but real 10,000 tok/s stream (0.1 ms apart) is not a burst.
        let fast: Vec<f64> = (0..200).map(|i| 5.0 + 0.1 * i as f64).collect();
        assert!(!is_burst(&fast, &[1.0; 200]));
        // Few tokens decide nothing.
        assert!(!is_burst(&[1.0, 1.0], &[1.0, 1.0]));
    }

    fn read(events: &[Value]) -> Sample {
        let mut s = Sample::default();
        let mut r = Reader::default();
        for (i, e) in events.iter().enumerate() {
            r.event(&mut s, e, 100.0 + 10.0 * i as f64);
        }
        s.e2e_ms = 100.0 + 10.0 * events.len() as f64;
        r.finish(&mut s);
        s
    }

    fn delta(d: Value) -> Value {
        serde_json::json!({"id": "x", "choices": [{"index": 0, "delta": d, "finish_reason": null}]})
    }

    #[test]
    fn without_usage_every_token_bearing_chunk_counts_and_the_role_chunk_does_not() {
        let s = read(&[
            delta(serde_json::json!({"role": "assistant", "content": ""})),
            delta(serde_json::json!({"content": "Tok"})),
            delta(serde_json::json!({"content": ""})),
            delta(serde_json::json!({"content": "yo"})),
            serde_json::json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        ]);
        assert_eq!(s.chunk_at_ms, vec![110.0, 120.0, 130.0]);
        assert_eq!(s.completion_tokens, None);
        assert_eq!(s.token_source, TokenSource::Chunks);
        assert_eq!(s.chunk_tokens, ChunkTokens::OnePerChunk);
        assert_eq!(s.ttft_ms, Some(110.0));
        assert_eq!(s.content, "Tokyo");
        // 2 tokens after the first chunk over 20 ms.
        assert_eq!(s.decode_tps, Some(100.0));
    }

    #[test]
    fn running_counts_give_exact_tokens_per_chunk() {
        let chunk = |text: &str, n: u64| {
            let mut v = delta(serde_json::json!({"content": text}));
            v["timings"] = serde_json::json!({"predicted_n": n, "cache_n": 0, "prompt_n": 9});
            v
        };
        let s = read(&[chunk("a", 2), chunk("b", 3), chunk("cd", 6)]);
        assert_eq!(s.chunk_tokens, ChunkTokens::Exact);
        assert_eq!(s.chunk_token_counts, vec![2.0, 1.0, 3.0]);
        assert_eq!(s.completion_tokens, Some(6));
        assert_eq!(s.cached_tokens, Some(0));
        assert_eq!(s.prompt_tokens, Some(9));
        // 4 tokens after the first chunk, over 20 ms.
        assert_eq!(s.decode_tps, Some(200.0));
        assert_eq!(s.itl_ms.len(), 4);
        // Reasoning first: TTFT at the reasoning token, TTFO at the content.
        let s = read(&[
            delta(serde_json::json!({"reasoning_content": "hmm"})),
            delta(serde_json::json!({"content": "Tokyo"})),
        ]);
        assert_eq!(
            (s.ttft_ms, s.ttfo_ms, s.ttfr_ms),
            (Some(100.0), Some(110.0), Some(100.0))
        );
    }
}
