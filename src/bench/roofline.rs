//! The memory-bandwidth roofline of decoding: each token reads the active weights once
//! (MoE models only their active experts: `model.active_weights`) plus the KV cache of the
//! context so far (`model.kv_bytes_per_token` × depth), at 273 GB/s on a Spark. A decode
//! speed above it is impossible, reported as such and never as a share.

use serde::{Deserialize, Serialize};

use super::depth::DepthPoint;
use super::sample::Sample;
use super::stats::median;
use super::target::Target;

/// DGX Spark's memory bandwidth.
pub const SPARK_BANDWIDTH_BYTES_PER_S: f64 = 273e9;

/// The context a sample's decode read on average: its prompt and half its answer.
pub fn depth_of(prompt: Option<u64>, completion: Option<u64>) -> f64 {
    prompt.unwrap_or(0) as f64 + completion.unwrap_or(0) as f64 / 2.0
}

/// Bytes read per decoded token at `depth` tokens of context, where the model's size is known.
pub fn bytes_per_token(target: &Target, depth: f64) -> Option<f64> {
    let weights = target
        .active_weights_bytes
        .or(target.weights_bytes)
        .filter(|&b| b > 0)?;
    Some(weights as f64 + target.kv_bytes_per_token.unwrap_or(0) as f64 * depth)
}

/// The highest single-stream decode speed the memory bandwidth allows at `depth` tokens of
/// context (each token reads the active weights once, plus the KV cache where declared),
/// where the model size is known.
pub fn tps_at(target: &Target, depth: f64) -> Option<f64> {
    bytes_per_token(target, depth).map(|b| SPARK_BANDWIDTH_BYTES_PER_S / b)
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Roofline {
    /// The weights read per token (active ones for MoE), bytes.
    pub weights_bytes: u64,
    /// KV-cache bytes per token of context, when the recipe declares it.
    pub kv_bytes_per_token: Option<u64>,
    /// Median context of the decoding samples, tokens.
    pub depth_tokens: f64,
    pub bytes_per_token: f64,
    /// 273 GB/s over bytes per token.
    pub bound_tps: f64,
    pub measured_tps: Option<f64>,
    /// measured / bound, when it is possible (≤ 1).
    pub share: Option<f64>,
    pub impossible: bool,
    /// Per depth of the depth sweep: (depth, bound tok/s).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_depth: Vec<(usize, f64)>,
}

impl Roofline {
    pub fn of(target: &Target, samples: &[Sample], depths: &[DepthPoint]) -> Option<Roofline> {
        let ok: Vec<&Sample> = samples
            .iter()
            .filter(|s| s.ok && !s.warmup && !s.burst)
            .collect();
        let depth = median(
            &ok.iter()
                .map(|s| depth_of(s.prompt_tokens, s.completion_tokens))
                .collect::<Vec<_>>(),
        )
        .unwrap_or(0.0);
        let bytes = bytes_per_token(target, depth)?;
        let bound = SPARK_BANDWIDTH_BYTES_PER_S / bytes;
        let measured = median(&ok.iter().filter_map(|s| s.decode_tps).collect::<Vec<_>>());
        let impossible = measured.is_some_and(|m| m > bound);
        let mut per_depth: Vec<(usize, f64)> = depths
            .iter()
            .filter_map(|p| {
                Some((
                    p.depth,
                    SPARK_BANDWIDTH_BYTES_PER_S / bytes_per_token(target, p.depth as f64)?,
                ))
            })
            .collect();
        per_depth.dedup_by_key(|x| x.0);
        Some(Roofline {
            weights_bytes: target
                .active_weights_bytes
                .or(target.weights_bytes)
                .unwrap_or(0),
            kv_bytes_per_token: target.kv_bytes_per_token,
            depth_tokens: depth,
            bytes_per_token: bytes,
            bound_tps: bound,
            measured_tps: measured,
            share: measured.filter(|_| !impossible).map(|m| m / bound),
            impossible,
            per_depth,
        })
    }

    /// What a reader must know: an impossible figure, or a bound without KV reads.
    pub fn note(&self) -> Option<String> {
        if self.impossible {
            return Some(format!(
                "decode p50 is above the {:.0} tok/s that 273 GB/s allows for {:.0} bytes per \
                 token: IMPOSSIBLE, so no share of the roofline is reported (buffered stream, \
                 or the recipe's model size is wrong)",
                self.bound_tps, self.bytes_per_token
            ));
        }
        if self.kv_bytes_per_token.is_none() {
            return Some(
                "the roofline counts weights only (no model.kv_bytes_per_token): KV-cache \
                 reads would lower it"
                    .into(),
            );
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(decode: f64, prompt: u64) -> Sample {
        Sample {
            ok: true,
            decode_tps: Some(decode),
            prompt_tokens: Some(prompt),
            completion_tokens: Some(100),
            ..Default::default()
        }
    }

    #[test]
    fn active_weights_and_kv_reads_at_depth_make_the_bound_and_above_it_is_impossible() {
        let t = Target {
            weights_bytes: Some(60_000_000_000),
            active_weights_bytes: Some(3_000_000_000),
            kv_bytes_per_token: Some(100_000),
            ..Default::default()
        };
        // MoE: the active 3 GB, not all 60 GB; plus 100 KB × (950 + 50) tokens of KV.
        assert_eq!(bytes_per_token(&t, 1000.0), Some(3.1e9));
        let r = Roofline::of(&t, &[sample(40.0, 950)], &[]).unwrap();
        assert!((r.bound_tps - 273e9 / 3.1e9).abs() < 1e-6);
        assert!(!r.impossible && (r.share.unwrap() - 40.0 / r.bound_tps).abs() < 1e-9);
        // Faster than the bandwidth allows: impossible, and no share is given.
        let r = Roofline::of(&t, &[sample(120.0, 950)], &[]).unwrap();
        assert!(r.impossible && r.share.is_none());
        assert!(r.note().unwrap().contains("IMPOSSIBLE"));
        // No size known: no roofline.
        assert!(Roofline::of(&Target::default(), &[sample(1.0, 1)], &[]).is_none());
    }
}
