//! The memory bandwidth of the GPUs people serve models on, by the name nvidia-smi prints
//! (`--query-gpu=name`): what bounds single-stream decoding, since every token reads the
//! weights once.
//!
//! Vendor figures (peak, not sustained: a measured decode stays below them). Where sources
//! disagree the higher figure is kept: a bound that is too high only makes a share read low,
//! one that is too low would call a real measurement impossible. Each figure below was read
//! from the pages named beside it; a GPU missing here has no bound until the host
//! (`SPARKCTL_BANDWIDTH_GBPS`) or the recipe (`bench.bandwidth_gbps`) declares one.

/// One kind of GPU: the name nvidia-smi prints (or how it begins, for a family whose
/// editions share their memory), its peak memory bandwidth, and whether its memory is
/// the system's (a GB10 shares LPDDR5X with the CPU).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Known {
    name: &'static str,
    pub(crate) gb_per_s: f64,
    unified: bool,
}

const fn gpu(name: &'static str, gb_per_s: f64) -> Known {
    Known {
        name,
        gb_per_s,
        unified: false,
    }
}

/// Longest name first wins (`NVIDIA H200 NVL` before `NVIDIA H200`).
pub(crate) const KNOWN: &[Known] = &[
    // DGX Spark: 128 GB LPDDR5X shared by CPU and GPU, 273 GB/s (the project's reference
    // figure since its first roofline).
    Known {
        name: "NVIDIA GB10",
        gb_per_s: 273.0,
        unified: true,
    },
    // H100 SXM5 (nvidia-smi: "NVIDIA H100 80GB HBM3"): 3.35 TB/s; H100 NVL 3.9 TB/s
    // (acecloud.ai's summary of NVIDIA's spec sheets); H100 PCIe "greater than 2,000 GBps"
    // (NVIDIA H100 PCIe product brief PB-11133-001).
    gpu("NVIDIA H100 80GB HBM3", 3350.0),
    gpu("NVIDIA H100 NVL", 3900.0),
    gpu("NVIDIA H100 PCIe", 2000.0),
    // H200 (SXM) and H200 NVL: 141 GB HBM3e at 4.8 TB/s (NVIDIA's spec sheet as cited by
    // acecloud.ai and openmetal.io).
    gpu("NVIDIA H200", 4800.0),
    // B200: 8 TB/s HBM3e (glennklockwood.com; the HGX B200 sheet lists 7.7, pytorch/ao#4002
    // derives 7.68 from the bus width: the higher is kept); GB200 pairs the same GPU with
    // a Grace CPU.
    gpu("NVIDIA B200", 8000.0),
    gpu("NVIDIA GB200", 8000.0),
    // RTX PRO 6000 Blackwell (Workstation, Max-Q and Server editions): 96 GB GDDR7,
    // 512-bit at 28 Gbps, 1,792 GB/s.
    gpu("NVIDIA RTX PRO 6000 Blackwell", 1792.0),
    // GeForce RTX 5090: 32 GB GDDR7, 1,792 GB/s; RTX 4090: 24 GB GDDR6X, 1,008 GB/s.
    gpu("NVIDIA GeForce RTX 5090", 1792.0),
    gpu("NVIDIA GeForce RTX 4090", 1008.0),
    // L40S: 48 GB GDDR6 with ECC, 864 GB/s (NVIDIA's L40/L40S table).
    gpu("NVIDIA L40S", 864.0),
    // A100: 40 GB HBM2 1,555 GB/s (SXM4 and PCIe); 80 GB HBM2e SXM4 2,039 GB/s
    // (glennklockwood.com after NVIDIA's A100 datasheet); 80 GB PCIe 1,935 GB/s.
    gpu("NVIDIA A100-SXM4-80GB", 2039.0),
    gpu("NVIDIA A100-SXM4-40GB", 1555.0),
    gpu("NVIDIA A100 80GB PCIe", 1935.0),
    gpu("NVIDIA A100-PCIE-40GB", 1555.0),
];

/// The known GPU a name nvidia-smi printed is, if any: the longest known name it begins
/// with as whole words (case and surrounding blanks ignored): `NVIDIA H200 NVL` is an
/// `NVIDIA H200`, an `NVIDIA GB100` is no `NVIDIA GB10`.
pub(crate) fn lookup(name: &str) -> Option<&'static Known> {
    let name = name.trim().to_ascii_lowercase();
    KNOWN
        .iter()
        .filter(|k| {
            name.strip_prefix(&k.name.to_ascii_lowercase())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(' '))
        })
        .max_by_key(|k| k.name.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_as_nvidia_smi_prints_them_find_their_bandwidth() {
        let gbps = |n: &str| lookup(n).map(|k| k.gb_per_s);
        assert_eq!(gbps("NVIDIA GB10"), Some(273.0));
        assert!(lookup("NVIDIA GB10").unwrap().unified);
        assert_eq!(gbps("NVIDIA H100 80GB HBM3"), Some(3350.0));
        assert_eq!(gbps("NVIDIA H100 PCIe"), Some(2000.0));
        assert_eq!(gbps("NVIDIA H100 NVL"), Some(3900.0));
        assert_eq!(gbps("NVIDIA H200"), Some(4800.0));
        assert_eq!(gbps("NVIDIA H200 NVL"), Some(4800.0));
        assert_eq!(gbps("NVIDIA B200"), Some(8000.0));
        assert_eq!(gbps("NVIDIA GB200"), Some(8000.0));
        assert_eq!(
            gbps("NVIDIA RTX PRO 6000 Blackwell Workstation Edition"),
            Some(1792.0)
        );
        assert_eq!(
            gbps("NVIDIA RTX PRO 6000 Blackwell Server Edition"),
            Some(1792.0)
        );
        assert_eq!(gbps("NVIDIA GeForce RTX 5090"), Some(1792.0));
        assert_eq!(gbps("  nvidia geforce rtx 4090 "), Some(1008.0));
        assert_eq!(gbps("NVIDIA L40S"), Some(864.0));
        assert_eq!(gbps("NVIDIA A100-SXM4-80GB"), Some(2039.0));
        assert_eq!(gbps("NVIDIA A100-SXM4-40GB"), Some(1555.0));
        assert_eq!(gbps("NVIDIA A100 80GB PCIe"), Some(1935.0));
        assert_eq!(gbps("NVIDIA A100-PCIE-40GB"), Some(1555.0));
        // Discrete GPUs have memory of their own.
        assert!(!lookup("NVIDIA H100 80GB HBM3").unwrap().unified);
    }

    #[test]
    fn an_unknown_gpu_has_no_bound_rather_than_a_neighbours() {
        // The L40 (no S) and an L4 are not an L40S; a GB100 is not a GB10.
        assert_eq!(lookup("NVIDIA L40"), None);
        assert_eq!(lookup("NVIDIA L4"), None);
        assert_eq!(lookup("NVIDIA GB100"), None);
        assert_eq!(lookup("Tesla T4"), None);
        assert_eq!(lookup(""), None);
    }
}
