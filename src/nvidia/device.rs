//! What serves: the machine's kind of memory (one pool the CPU and GPU share, as on a DGX
//! Spark, or GPUs with memory of their own beside the host's RAM), and which of its GPUs a
//! server is given (`GpuUse`; a recipe says which: `Recipe::gpu_use`).

use serde::Serialize;

use super::{Gpu, SmiError};

/// The machine's GPUs as nvidia-smi listed them (in its index order), or why it listed none.
#[derive(Debug, Clone)]
pub(crate) struct Devices {
    pub(crate) gpus: Vec<Gpu>,
    /// Why there is no list: no driver, nvidia-smi failed.
    pub(crate) unknown: Option<SmiError>,
}

/// How memory is laid out on this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Kind {
    /// CPU and GPU allocate from one pool, the memory /proc/meminfo counts (a GB10:
    /// nvidia-smi reports `[N/A]` for its memory).
    Unified,
    /// GPUs with memory of their own (VRAM per GPU from nvidia-smi); host RAM is apart.
    Discrete,
    /// No NVIDIA GPU answered: host RAM is the only pool.
    NoGpu,
}

impl Devices {
    pub(crate) async fn probe() -> Devices {
        match super::gpus().await {
            Ok(gpus) => Devices {
                gpus,
                unknown: None,
            },
            Err(e) => Devices {
                gpus: Vec::new(),
                unknown: Some(e),
            },
        }
    }

    pub(crate) fn kind(&self) -> Kind {
        if self.gpus.is_empty() {
            Kind::NoGpu
        } else if self.gpus.iter().all(Gpu::shares_system_memory) {
            Kind::Unified
        } else {
            Kind::Discrete
        }
    }

    /// The GPUs `use_` names that exist here, with their indices.
    pub(crate) fn given<'a>(&'a self, use_: &GpuUse) -> Vec<(usize, &'a Gpu)> {
        let all = self.gpus.iter().enumerate();
        match use_ {
            GpuUse::None { .. } => Vec::new(),
            GpuUse::All => all.collect(),
            GpuUse::First(n) => all.take(*n).collect(),
            GpuUse::Indices(ix) => all.filter(|(i, _)| ix.contains(i)).collect(),
        }
    }

    /// Why no GPU is known, in words.
    pub(crate) fn why_none(&self) -> String {
        match &self.unknown {
            Some(e) => e.to_string(),
            None => "nvidia-smi lists no GPU".into(),
        }
    }
}

/// Which GPUs a server uses, as its recipe says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "gpus", rename_all = "snake_case")]
pub(crate) enum GpuUse {
    /// None: its memory is host RAM.
    None {
        why: String,
    },
    All,
    /// The first N (`server.gpus: N`, as `docker run --gpus N` takes them).
    First(usize),
    /// These indices (`CUDA_VISIBLE_DEVICES=0,2` in `server.env`).
    Indices(Vec<usize>),
}

impl Devices {
    /// GPUs as nvidia-smi would list them, by name and MiB (None: `[N/A]`), for tests.
    #[cfg(test)]
    pub(crate) fn listed(gpus: &[(&str, Option<u64>)]) -> Devices {
        Devices {
            gpus: gpus
                .iter()
                .map(|(n, mib)| Gpu {
                    name: n.to_string(),
                    memory_total_bytes: mib.map(|m| m << 20),
                    compute_capability: "9.0".into(),
                })
                .collect(),
            unknown: None,
        }
    }
}

impl GpuUse {
    pub(crate) fn uses_gpu(&self) -> bool {
        !matches!(self, GpuUse::None { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(name: &str, mib: Option<u64>) -> Gpu {
        Gpu {
            name: name.into(),
            memory_total_bytes: mib.map(|m| m << 20),
            compute_capability: "9.0".into(),
        }
    }

    #[test]
    fn the_kind_of_machine_comes_from_what_nvidia_smi_says_of_memory() {
        let spark = Devices {
            gpus: vec![gpu("NVIDIA GB10", None)],
            unknown: None,
        };
        assert_eq!(spark.kind(), Kind::Unified);
        let two = Devices {
            gpus: vec![
                gpu("NVIDIA H100 80GB HBM3", Some(81559)),
                gpu("NVIDIA H100 80GB HBM3", Some(81559)),
            ],
            unknown: None,
        };
        assert_eq!(two.kind(), Kind::Discrete);
        assert_eq!(two.given(&GpuUse::First(1)).len(), 1);
        assert_eq!(two.given(&GpuUse::Indices(vec![1, 7]))[0].0, 1);
        assert_eq!(two.given(&GpuUse::All).len(), 2);
        let none = Devices {
            gpus: vec![],
            unknown: Some(SmiError::NotInstalled),
        };
        assert_eq!(none.kind(), Kind::NoGpu);
        assert!(none.why_none().contains("not on PATH"));
    }
}
