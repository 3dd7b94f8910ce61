//! The memory-bandwidth roofline of decoding: each token reads the active weights once
//! (MoE models only their active experts: `model.active_weights`) plus the KV cache of the
//! context so far (`model.kv_bytes_per_token` × depth), at the bandwidth of the device that
//! serves (`bound`: 273 GB/s on a Spark, 3.35 TB/s on an H100 SXM, …). A decode speed above
//! it is impossible, reported as such and never as a share; where no bandwidth is known
//! there is no roofline, and nothing is called impossible.

use serde::{Deserialize, Serialize};

use super::depth::DepthPoint;
use super::sample::Sample;
use super::stats::median;
use super::target::Target;

/// The context a sample's decode read on average: its prompt and half its answer.
pub(crate) fn depth_of(prompt: Option<u64>, completion: Option<u64>) -> f64 {
    prompt.unwrap_or(0) as f64 + completion.unwrap_or(0) as f64 / 2.0
}

/// Bytes read per decoded token at `depth` tokens of context, where the model's size is known.
pub(crate) fn bytes_per_token(target: &Target, depth: f64) -> Option<f64> {
    let weights = target
        .active_weights_bytes
        .or(target.weights_bytes)
        .filter(|&b| b > 0)?;
    Some(weights as f64 + target.kv_bytes_per_token.unwrap_or(0) as f64 * depth)
}

/// The highest single-stream decode speed the memory bandwidth allows at `depth` tokens of
/// context (each token reads the active weights once, plus the KV cache where declared),
/// where the model size and the device's bandwidth are known.
pub(crate) fn tps_at(target: &Target, depth: f64) -> Option<f64> {
    Some(target.bandwidth_bytes_per_s()? / bytes_per_token(target, depth)?)
}

/// The server's own timings agree with the client's decode speed within this share: the
/// stream was delivered as it was decoded, not buffered.
const AGREE: f64 = 0.10;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Roofline {
    /// The bound's bandwidth, GB/s, and where it comes from.
    #[serde(default)]
    pub(in crate::bench) bandwidth_gb_per_s: f64,
    #[serde(default)]
    pub(in crate::bench) bandwidth_from: String,
    /// The weights read per token (active ones for MoE), bytes.
    weights_bytes: u64,
    /// KV-cache bytes per token of context, when the recipe declares it.
    kv_bytes_per_token: Option<u64>,
    /// Median context of the decoding samples, tokens.
    depth_tokens: f64,
    bytes_per_token: f64,
    /// The bandwidth over bytes per token.
    pub(in crate::bench) bound_tps: f64,
    measured_tps: Option<f64>,
    /// The server's own decode speed over the same samples (llama-server
    /// `timings.predicted_per_second`), when it sends one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    server_tps: Option<f64>,
    /// measured / bound, when it is possible (≤ 1).
    pub(in crate::bench) share: Option<f64>,
    pub(in crate::bench) impossible: bool,
    /// Per depth of the depth sweep: (depth, bound tok/s).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    per_depth: Vec<(usize, f64)>,
}

impl Roofline {
    pub(crate) fn bandwidth_gb_per_s(&self) -> f64 {
        self.bandwidth_gb_per_s
    }

    pub(crate) fn bandwidth_from(&self) -> &str {
        &self.bandwidth_from
    }

    pub(crate) fn bound_tps(&self) -> f64 {
        self.bound_tps
    }

    pub(crate) fn of(
        target: &Target,
        samples: &[Sample],
        depths: &[DepthPoint],
    ) -> Option<Roofline> {
        let bandwidth = target.bandwidth.as_ref()?;
        let bytes_per_s = bandwidth.gb_per_s * 1e9;
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
        let bound = bytes_per_s / bytes;
        // The figure is impossible when most streams decoded faster than the bound allows;
        // otherwise its share is of the decode p50 the result reports, which leaves the
        // few impossible streams out.
        let all = median(&ok.iter().filter_map(|s| s.decode_tps).collect::<Vec<_>>());
        let impossible = all.is_some_and(|m| m > bound);
        let measured = match impossible {
            true => all,
            false => median(
                &ok.iter()
                    .filter(|s| !s.impossible)
                    .filter_map(|s| s.decode_tps)
                    .collect::<Vec<_>>(),
            ),
        };
        let server_tps = median(
            &ok.iter()
                .filter(|s| s.decode_tps.is_some())
                .filter_map(|s| s.server_timings.as_ref()?.predicted_per_second)
                .filter(|v| *v > 0.0)
                .collect::<Vec<_>>(),
        );
        let mut per_depth: Vec<(usize, f64)> = depths
            .iter()
            .filter_map(|p| {
                Some((
                    p.depth,
                    bytes_per_s / bytes_per_token(target, p.depth as f64)?,
                ))
            })
            .collect();
        per_depth.dedup_by_key(|x| x.0);
        Some(Roofline {
            bandwidth_gb_per_s: bandwidth.gb_per_s,
            bandwidth_from: bandwidth.from.clone(),
            weights_bytes: target
                .active_weights_bytes
                .or(target.weights_bytes)
                .unwrap_or(0),
            kv_bytes_per_token: target.kv_bytes_per_token,
            depth_tokens: depth,
            bytes_per_token: bytes,
            bound_tps: bound,
            measured_tps: measured,
            server_tps,
            share: measured.filter(|_| !impossible).map(|m| m / bound),
            impossible,
            per_depth,
        })
    }

    /// What a reader must know: an impossible figure and what the evidence says caused it,
    /// or a bound without KV reads.
    pub(crate) fn note(&self) -> Option<String> {
        if self.impossible {
            return Some(format!(
                "decode p50 {:.0} tok/s is above the {:.0} tok/s that {} GB/s ({}) allows for \
                 {:.0} bytes per token: IMPOSSIBLE, so no share of the roofline is reported; {}",
                self.measured_tps.unwrap_or(0.0),
                self.bound_tps,
                super::bound::fmt_gbps(self.bandwidth_gb_per_s),
                self.bandwidth_from,
                self.bytes_per_token,
                self.cause()
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

    /// Why a decode speed can be above the bound, as far as the evidence goes: streams that
    /// arrived in bursts are already set aside, so what is left is either the server's own
    /// figure agreeing (the stream is true: the bound or the model size is off) or nothing to
    /// tell them apart.
    fn cause(&self) -> String {
        let declared = "the bandwidth (bench.bandwidth_gbps, SPARKCTL_BANDWIDTH_GBPS) or the \
                        model size (model.weights, model.active_weights) is wrong";
        match (self.server_tps, self.measured_tps) {
            (Some(server), Some(client)) if ((client - server) / server).abs() <= AGREE => {
                format!(
                    "the server's own timings agree ({server:.0} tok/s), so the stream was not \
                     buffered: {declared}"
                )
            }
            (Some(server), _) => format!(
                "the server's own timings say {server:.0} tok/s: the stream was delivered \
                 faster than it was decoded (buffered), or {declared}"
            ),
            (None, _) => format!(
                "either {declared}, or the server paced its stream unlike its decoding (it \
                 sends no timings to tell)"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::bound::{declared, Source};
    use crate::bench::sample::ServerTimings;

    fn sample(decode: f64, prompt: u64) -> Sample {
        Sample {
            ok: true,
            decode_tps: Some(decode),
            prompt_tokens: Some(prompt),
            completion_tokens: Some(100),
            ..Default::default()
        }
    }

    fn timed(decode: f64, server: f64) -> Sample {
        Sample {
            server_timings: Some(ServerTimings {
                predicted_per_second: Some(server),
                ..Default::default()
            }),
            ..sample(decode, 100)
        }
    }

    fn target(gb_per_s: Option<f64>) -> Target {
        Target {
            weights_bytes: Some(60_000_000_000),
            active_weights_bytes: Some(3_000_000_000),
            kv_bytes_per_token: Some(100_000),
            bandwidth: gb_per_s.map(|g| declared(g, Source::Device, "NVIDIA GB10")),
            ..Default::default()
        }
    }

    #[test]
    fn active_weights_and_kv_reads_at_depth_make_the_bound_and_above_it_is_impossible() {
        let t = target(Some(273.0));
        // MoE: the active 3 GB, not all 60 GB; plus 100 KB × (950 + 50) tokens of KV.
        assert_eq!(bytes_per_token(&t, 1000.0), Some(3.1e9));
        let r = Roofline::of(&t, &[sample(40.0, 950)], &[]).unwrap();
        assert!((r.bound_tps - 273e9 / 3.1e9).abs() < 1e-6);
        assert!(!r.impossible && (r.share.unwrap() - 40.0 / r.bound_tps).abs() < 1e-9);
        // Faster than the bandwidth allows: impossible, and no share is given.
        let r = Roofline::of(&t, &[sample(120.0, 950)], &[]).unwrap();
        assert!(r.impossible && r.share.is_none());
        assert!(r.note().unwrap().contains("IMPOSSIBLE"));
        // A few bunched streams above the bound do not make the figure impossible, and the
        // share is of the decode p50 the result reports, which leaves them out.
        let mut fast = sample(120.0, 950);
        fast.impossible = true;
        let r = Roofline::of(&t, &[sample(40.0, 950), sample(44.0, 950), fast], &[]).unwrap();
        assert!(!r.impossible && (r.share.unwrap() - 40.0 / r.bound_tps).abs() < 1e-9);
        // No size known: no roofline.
        let sizeless = Target {
            bandwidth: t.bandwidth.clone(),
            ..Default::default()
        };
        assert!(Roofline::of(&sizeless, &[sample(1.0, 1)], &[]).is_none());
    }

    #[test]
    fn the_bound_is_the_devices_and_without_one_nothing_is_impossible() {
        // 723 tok/s from 2.15 GB: far above what 273 GB/s allows, well under an H100's.
        let mut t = Target {
            weights_bytes: Some(2_150_000_000),
            ..Default::default()
        };
        let samples = [timed(723.0, 722.0)];
        assert!(Roofline::of(&t, &samples, &[]).is_none());
        assert_eq!(tps_at(&t, 0.0), None);
        t.bandwidth = Some(declared(3350.0, Source::Device, "NVIDIA H100 80GB HBM3"));
        let r = Roofline::of(&t, &samples, &[]).unwrap();
        assert!(!r.impossible);
        assert!((r.share.unwrap() - 723.0 * 2.15e9 / 3350e9).abs() < 1e-9);
        assert_eq!(r.server_tps, Some(722.0));
    }

    #[test]
    fn the_stated_cause_follows_the_evidence() {
        let mut t = Target {
            weights_bytes: Some(2_150_000_000),
            bandwidth: Some(declared(273.0, Source::Host, "SPARKCTL_BANDWIDTH_GBPS=273")),
            ..Default::default()
        };
        // The server's timings agree with the client: not a buffered stream.
        let note = Roofline::of(&t, &[timed(723.0, 724.0)], &[])
            .unwrap()
            .note()
            .unwrap();
        assert!(
            note.contains("273 GB/s (SPARKCTL_BANDWIDTH_GBPS=273)"),
            "{note}"
        );
        assert!(note.contains("timings agree (724 tok/s)"), "{note}");
        assert!(note.contains("not buffered"), "{note}");
        assert!(note.contains("model size"), "{note}");
        // The server says it decoded far slower than the client received: buffered.
        let note = Roofline::of(&t, &[timed(723.0, 90.0)], &[])
            .unwrap()
            .note()
            .unwrap();
        assert!(note.contains("(buffered)"), "{note}");
        // Nothing to tell.
        t.bandwidth = Some(declared(273.0, Source::Device, "NVIDIA GB10"));
        let note = Roofline::of(&t, &[sample(723.0, 10)], &[])
            .unwrap()
            .note()
            .unwrap();
        assert!(note.contains("sends no timings"), "{note}");
    }
}
