//! The pools a server's memory comes from, per kind of machine. On a DGX Spark the CPU and
//! the GPU allocate from one pool (MemTotal; nvidia-smi says `[N/A]` for the GPU's own), so
//! every server counts there. Where GPUs have memory of their own, a server that uses a GPU
//! counts against the memory of the GPUs it is given (nvidia-smi's memory.total), whatever
//! the host's RAM, and a server on the CPU against host RAM.

use serde::Serialize;

use crate::nvidia::device::{Devices, GpuUse, Kind};

/// The plan counts in decimal GB, as `memory_gb` is written.
const GB: f64 = 1e9;

/// Where a server's declared memory is counted.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Pool {
    /// The machine's one pool: unified memory (a GB10), or host RAM with no GPU at all.
    Unified,
    /// Host RAM beside GPUs with memory of their own: servers that use no GPU.
    HostRam,
    /// The memory of these GPUs (nvidia-smi's indices).
    Gpus { indices: Vec<usize> },
}

/// A pool and its size.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Budget {
    pub(in crate::memory) pool: Pool,
    pub(in crate::memory) gb: f64,
    /// The pool in words, with where its size comes from.
    pub(in crate::memory) what: String,
}

/// The budget a server using `use_` is planned against. `host_gb` is the host's budget
/// (MemTotal or SPARKCTL_MEMORY_GB, less the reserve). An error: the recipe asks for GPUs
/// this machine does not have.
pub(crate) fn budget(devices: &Devices, host_gb: f64, use_: &GpuUse) -> Result<Budget, String> {
    match devices.kind() {
        Kind::NoGpu => Ok(Budget {
            pool: Pool::Unified,
            gb: host_gb,
            what: format!("host memory (no GPU: {})", devices.why_none()),
        }),
        Kind::Unified => Ok(Budget {
            pool: Pool::Unified,
            gb: host_gb,
            what: format!(
                "unified memory {} shares with the CPU (MemTotal less the reserve)",
                devices.gpus[0].name
            ),
        }),
        Kind::Discrete if !use_.uses_gpu() => Ok(Budget {
            pool: Pool::HostRam,
            gb: host_gb,
            what: "host RAM (the server uses no GPU)".into(),
        }),
        Kind::Discrete => gpu_budget(devices, use_),
    }
}

fn gpu_budget(devices: &Devices, use_: &GpuUse) -> Result<Budget, String> {
    let given = devices.given(use_);
    if given.is_empty() {
        return Err(format!(
            "it is given GPU(s) {} but nvidia-smi lists {} here",
            match use_ {
                GpuUse::Indices(ix) => format!("{ix:?}"),
                other => format!("{other:?}"),
            },
            devices.gpus.len()
        ));
    }
    let bytes: u64 = given
        .iter()
        .map(|(_, g)| g.memory_total_bytes.unwrap_or(0))
        .sum();
    let each: Vec<String> = given
        .iter()
        .map(|(i, g)| {
            format!(
                "GPU {i}: {}, {} MiB",
                g.name,
                g.memory_total_bytes.unwrap_or(0) >> 20
            )
        })
        .collect();
    Ok(Budget {
        pool: Pool::Gpus {
            indices: given.iter().map(|(i, _)| *i).collect(),
        },
        gb: bytes as f64 / GB,
        what: format!(
            "GPU memory ({} by nvidia-smi; host RAM does not count for a server on the GPU)",
            each.join("; ")
        ),
    })
}

/// Whether a running deployment that nvidia-smi sees on a GPU counts in `pool`: on a
/// machine with discrete GPUs, every GPU pool shares the deployments on GPUs (which GPU
/// each one holds is not tracked: counting all of them errs toward stopping one too many,
/// never toward an out-of-memory crash).
pub(crate) fn counts_in(pool: &Pool, on_gpu: bool) -> bool {
    match pool {
        Pool::Unified => true,
        Pool::HostRam => !on_gpu,
        Pool::Gpus { .. } => on_gpu,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvidia::SmiError;

    fn devices(gpus: &[(&str, Option<u64>)]) -> Devices {
        Devices::listed(gpus)
    }

    #[test]
    fn a_spark_plans_every_server_in_its_one_pool() {
        let spark = devices(&[("NVIDIA GB10", None)]);
        for use_ in [GpuUse::All, GpuUse::None { why: "sim".into() }] {
            let b = budget(&spark, 120.0, &use_).unwrap();
            assert_eq!((b.pool, b.gb), (Pool::Unified, 120.0));
        }
        let bare = Devices {
            gpus: vec![],
            unknown: Some(SmiError::NotInstalled),
        };
        let b = budget(&bare, 16.0, &GpuUse::All).unwrap();
        assert_eq!((b.pool, b.gb), (Pool::Unified, 16.0));
        assert!(b.what.contains("no GPU"), "{}", b.what);
    }

    #[test]
    fn a_gpu_server_is_planned_against_its_gpus_whatever_the_host_ram() {
        let h100 = devices(&[("NVIDIA H100 80GB HBM3", Some(81559))]);
        let b = budget(&h100, 1000.0, &GpuUse::All).unwrap();
        assert_eq!(b.pool, Pool::Gpus { indices: vec![0] });
        assert!((b.gb - 85.520_809_984).abs() < 1e-9, "{}", b.gb);
        assert!(
            b.what.contains("GPU 0: NVIDIA H100 80GB HBM3, 81559 MiB"),
            "{}",
            b.what
        );
        let cpu = budget(
            &h100,
            1000.0,
            &GpuUse::None {
                why: "-ngl 0".into(),
            },
        )
        .unwrap();
        assert_eq!((cpu.pool, cpu.gb), (Pool::HostRam, 1000.0));

        let two = devices(&[
            ("NVIDIA H100 80GB HBM3", Some(81559)),
            ("NVIDIA H100 80GB HBM3", Some(81559)),
        ]);
        assert!((budget(&two, 10.0, &GpuUse::All).unwrap().gb - 2.0 * 85.520_809_984).abs() < 1e-6);
        let second = budget(&two, 10.0, &GpuUse::Indices(vec![1])).unwrap();
        assert_eq!(second.pool, Pool::Gpus { indices: vec![1] });
        let missing = budget(&two, 10.0, &GpuUse::Indices(vec![3])).unwrap_err();
        assert!(missing.contains("nvidia-smi lists 2"), "{missing}");
    }

    #[test]
    fn running_servers_count_in_the_pool_they_hold() {
        assert!(counts_in(&Pool::Unified, true) && counts_in(&Pool::Unified, false));
        assert!(counts_in(&Pool::HostRam, false) && !counts_in(&Pool::HostRam, true));
        let gpus = Pool::Gpus { indices: vec![0] };
        assert!(counts_in(&gpus, true) && !counts_in(&gpus, false));
    }
}
