//! The roofline's bound: the memory bandwidth of the device that serves, never a fixed
//! figure. A recipe may declare it (`bench.bandwidth_gbps`), a host may
//! (`SPARKCTL_BANDWIDTH_GBPS`), `bench --bandwidth-gbps` may; otherwise it is the known
//! bandwidth of the GPUs the server is given (nvidia-smi's names,
//! `nvidia::bandwidth::KNOWN`). A server on another machine has none unless declared:
//! this machine's GPUs say nothing about it.

use serde::{Deserialize, Serialize};

use crate::nvidia::bandwidth;
use crate::nvidia::device::{Devices, GpuUse, Kind};

/// The host's own figure, GB/s.
pub(crate) const HOST_ENV: &str = crate::settings::BANDWIDTH_GBPS;

/// Where a bound comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Source {
    /// `bench --bandwidth-gbps`.
    Flag,
    /// The recipe's `bench.bandwidth_gbps`.
    Recipe,
    /// `SPARKCTL_BANDWIDTH_GBPS` on this host.
    Host,
    /// The GPUs nvidia-smi lists, from the table of known ones.
    Device,
}

/// A memory bandwidth that bounds single-stream decoding, and where it comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Bandwidth {
    pub(in crate::bench) gb_per_s: f64,
    source: Source,
    /// In words: the GPUs, the variable or the key it was read from.
    pub(in crate::bench) from: String,
}

impl std::fmt::Display for Bandwidth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} GB/s ({})", fmt_gbps(self.gb_per_s), self.from)
    }
}

/// 273, 3350, 1555.5: whole where whole.
pub(crate) fn fmt_gbps(g: f64) -> String {
    if g.fract() == 0.0 {
        format!("{g:.0}")
    } else {
        format!("{g:.1}")
    }
}

/// A declared figure (flag, recipe, host).
pub(crate) fn declared(gb_per_s: f64, source: Source, from: impl Into<String>) -> Bandwidth {
    Bandwidth {
        gb_per_s,
        source,
        from: from.into(),
    }
}

/// The host's own figure (`SPARKCTL_BANDWIDTH_GBPS`, checked by `Settings`), when set.
fn host(gbps: Option<f64>) -> Option<Bandwidth> {
    gbps.map(|g| declared(g, Source::Host, format!("{HOST_ENV}={g}")))
}

/// The bound of the GPUs `use_` names on this machine, or why there is none.
pub(crate) fn of_devices(devices: &Devices, use_: &GpuUse) -> Result<Bandwidth, String> {
    let declare = format!("declare one: the recipe's bench.bandwidth_gbps or {HOST_ENV}");
    match devices.kind() {
        Kind::NoGpu => Err(format!(
            "no NVIDIA GPU here ({}), so no memory-bandwidth bound is known; {declare}",
            devices.why_none()
        )),
        Kind::Unified => {
            // One pool: CPU and GPU read the same memory at the same rate.
            let g = &devices.gpus[0];
            match bandwidth::lookup(&g.name) {
                Some(k) => Ok(declared(
                    k.gb_per_s,
                    Source::Device,
                    format!("{}, unified memory", g.name),
                )),
                None => Err(format!(
                    "the bandwidth of a {} is not in sparkctl's table; {declare}",
                    g.name
                )),
            }
        }
        Kind::Discrete => discrete(devices, use_, &declare),
    }
}

/// GPUs with memory of their own: the sum over the GPUs the server is given (tensor
/// parallel reads each one's share at once; a layer split reads them in turn, so its
/// share of this bound reads low, never impossible).
fn discrete(devices: &Devices, use_: &GpuUse, declare: &str) -> Result<Bandwidth, String> {
    if let GpuUse::None { why } = use_ {
        return Err(format!(
            "the server runs on the CPU ({why}): host RAM's bandwidth is not known; {declare}"
        ));
    }
    let given = devices.given(use_);
    if given.is_empty() {
        return Err(format!(
            "none of the GPUs the server is given exist here (nvidia-smi lists {}); {declare}",
            devices.gpus.len()
        ));
    }
    let mut total = 0.0;
    for (_, g) in &given {
        match bandwidth::lookup(&g.name) {
            Some(k) => total += k.gb_per_s,
            None => {
                return Err(format!(
                    "the bandwidth of a {} is not in sparkctl's table; {declare}",
                    g.name
                ))
            }
        }
    }
    let from = match given.as_slice() {
        [(_, g)] => g.name.clone(),
        many => format!("{} GPUs: {}", many.len(), names(many)),
    };
    Ok(declared(total, Source::Device, from))
}

fn names(given: &[(usize, &crate::nvidia::Gpu)]) -> String {
    given
        .iter()
        .map(|(i, g)| format!("{i}: {}", g.name))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether `url` is served on this machine (loopback).
pub(crate) fn is_local(url: &str) -> bool {
    let host = url
        .split("://")
        .nth(1)
        .unwrap_or(url)
        .split('/')
        .next()
        .unwrap_or("");
    let host = match host.rsplit_once(':') {
        // [::1]:8003, 127.0.0.1:8003; a bare IPv6 address keeps its colons.
        Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) && !h.ends_with(':') => h,
        _ => host,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The bound for a server at `url` that no recipe describes: this machine's GPUs when it
/// is local (the host's figure first), none when it is elsewhere.
pub(crate) async fn for_url(url: &str, host_gbps: Option<f64>) -> Result<Bandwidth, String> {
    if !is_local(url) {
        return Err(format!(
            "{url} is not on this machine: its device's bandwidth is not known here; give \
             `--bandwidth-gbps` to bound it"
        ));
    }
    if let Some(b) = host(host_gbps) {
        return Ok(b);
    }
    of_devices(&Devices::probe().await, &GpuUse::All)
}

/// The bound for a recipe's running deployment: its own figure (`bench.bandwidth_gbps`),
/// the host's, then that of the GPUs it is given (`Recipe::gpu_use`).
pub(crate) async fn for_recipe(
    name: &str,
    declared_gbps: Option<f64>,
    host_gbps: Option<f64>,
    gpus: &GpuUse,
) -> Result<Bandwidth, String> {
    if let Some(g) = declared_gbps {
        return Ok(declared(
            g,
            Source::Recipe,
            format!("bench.bandwidth_gbps of recipe {name}"),
        ));
    }
    if let Some(b) = host(host_gbps) {
        return Ok(b);
    }
    of_devices(&Devices::probe().await, gpus)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvidia::SmiError;

    fn devices(gpus: &[(&str, Option<u64>)]) -> Devices {
        Devices::listed(gpus)
    }

    #[test]
    fn the_bound_is_the_serving_devices_bandwidth() {
        let spark = devices(&[("NVIDIA GB10", None)]);
        let b = of_devices(&spark, &GpuUse::All).unwrap();
        assert_eq!((b.gb_per_s, b.source), (273.0, Source::Device));
        assert_eq!(b.to_string(), "273 GB/s (NVIDIA GB10, unified memory)");
        // A CPU-only server on a Spark reads the same memory.
        let cpu = GpuUse::None { why: "sim".into() };
        assert_eq!(of_devices(&spark, &cpu).unwrap().gb_per_s, 273.0);

        let h100 = devices(&[("NVIDIA H100 80GB HBM3", Some(81559))]);
        let b = of_devices(&h100, &GpuUse::All).unwrap();
        assert_eq!(b.to_string(), "3350 GB/s (NVIDIA H100 80GB HBM3)");
        // On a machine with discrete GPUs, a server on the CPU has no known bound.
        assert!(of_devices(&h100, &cpu)
            .unwrap_err()
            .contains("runs on the CPU"));

        let two = devices(&[
            ("NVIDIA H100 80GB HBM3", Some(81559)),
            ("NVIDIA H100 PCIe", Some(81559)),
        ]);
        assert_eq!(
            of_devices(&two, &GpuUse::All).unwrap().gb_per_s,
            3350.0 + 2000.0
        );
        let second = of_devices(&two, &GpuUse::Indices(vec![1])).unwrap();
        assert_eq!(
            (second.gb_per_s, second.from.as_str()),
            (2000.0, "NVIDIA H100 PCIe")
        );
        assert!(of_devices(&two, &GpuUse::Indices(vec![5])).is_err());
    }

    #[test]
    fn no_gpu_or_an_unknown_one_gives_no_bound_and_says_how_to_declare_one() {
        let none = Devices {
            gpus: vec![],
            unknown: Some(SmiError::NotInstalled),
        };
        let why = of_devices(&none, &GpuUse::All).unwrap_err();
        assert!(why.contains("no NVIDIA GPU here"), "{why}");
        assert!(
            why.contains("bench.bandwidth_gbps") && why.contains(HOST_ENV),
            "{why}"
        );
        let odd = devices(&[("NVIDIA L4", Some(23034))]);
        assert!(of_devices(&odd, &GpuUse::All)
            .unwrap_err()
            .contains("NVIDIA L4 is not in sparkctl's table"));
    }

    #[test]
    fn local_urls_are_told_from_remote_ones() {
        for local in [
            "http://127.0.0.1:8003",
            "http://localhost:8080/",
            "http://[::1]:8003",
            "http://127.0.0.2",
        ] {
            assert!(is_local(local), "{local}");
        }
        for remote in [
            "http://10.0.0.5:8003",
            "https://api.example.com",
            "http://spark2:8000",
        ] {
            assert!(!is_local(remote), "{remote}");
        }
    }
}
