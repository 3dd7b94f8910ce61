//! What serves a recipe: the machine's kind of memory (one pool the CPU and GPU share, as on
//! a DGX Spark, or GPUs with memory of their own beside the host's RAM) and which of its
//! GPUs a recipe is given.

use serde::Serialize;

use super::{Gpu, SmiError};
use crate::engine::Engine;
use crate::recipe::{Gpus, Recipe, Runtime};

/// The machine's GPUs as nvidia-smi listed them (in its index order), or why it listed none.
#[derive(Debug, Clone)]
pub struct Devices {
    pub gpus: Vec<Gpu>,
    /// Why there is no list: no driver, nvidia-smi failed.
    pub unknown: Option<SmiError>,
}

/// How memory is laid out on this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// CPU and GPU allocate from one pool, the memory /proc/meminfo counts (a GB10:
    /// nvidia-smi reports `[N/A]` for its memory).
    Unified,
    /// GPUs with memory of their own (VRAM per GPU from nvidia-smi); host RAM is apart.
    Discrete,
    /// No NVIDIA GPU answered: host RAM is the only pool.
    NoGpu,
}

impl Devices {
    pub async fn probe() -> Devices {
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

    pub fn kind(&self) -> Kind {
        if self.gpus.is_empty() {
            Kind::NoGpu
        } else if self.gpus.iter().all(Gpu::shares_system_memory) {
            Kind::Unified
        } else {
            Kind::Discrete
        }
    }

    /// The GPUs `use_` names that exist here, with their indices.
    pub fn given<'a>(&'a self, use_: &GpuUse) -> Vec<(usize, &'a Gpu)> {
        let all = self.gpus.iter().enumerate();
        match use_ {
            GpuUse::None { .. } => Vec::new(),
            GpuUse::All => all.collect(),
            GpuUse::First(n) => all.take(*n).collect(),
            GpuUse::Indices(ix) => all.filter(|(i, _)| ix.contains(i)).collect(),
        }
    }

    /// Why no GPU is known, in words.
    pub fn why_none(&self) -> String {
        match &self.unknown {
            Some(e) => e.to_string(),
            None => "nvidia-smi lists no GPU".into(),
        }
    }
}

/// Which GPUs a server uses, as its recipe says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "gpus", rename_all = "snake_case")]
pub enum GpuUse {
    /// None: its memory is host RAM.
    None { why: String },
    All,
    /// The first N (`server.gpus: N`, as `docker run --gpus N` takes them).
    First(usize),
    /// These indices (`CUDA_VISIBLE_DEVICES=0,2` in `server.env`).
    Indices(Vec<usize>),
}

impl GpuUse {
    pub fn uses_gpu(&self) -> bool {
        !matches!(self, GpuUse::None { .. })
    }

    /// What a recipe's server is given: `server.gpus` first, then `CUDA_VISIBLE_DEVICES`,
    /// then what its engine does by default. A llama-server that offloads no layer
    /// (`-ngl 0`) runs on the CPU; one that does not say counts as offloading, as every
    /// recent llama.cpp build does by default: a refusal fixed by `-ngl 0` costs less than
    /// an out-of-memory crash.
    pub fn of(recipe: &Recipe) -> GpuUse {
        let server = &recipe.server;
        match server.gpus {
            Some(Gpus::None) => {
                return GpuUse::None {
                    why: "server.gpus: none".into(),
                }
            }
            Some(Gpus::Count(0)) => {
                return GpuUse::None {
                    why: "server.gpus: 0".into(),
                }
            }
            Some(Gpus::Count(n)) => return GpuUse::First(n as usize),
            Some(Gpus::All) => return GpuUse::All,
            None => {}
        }
        if let Some(v) = server.env.get("CUDA_VISIBLE_DEVICES") {
            return visible_devices(v);
        }
        if recipe.runtime() == Runtime::Docker {
            // A container sees no GPU unless asked for one.
            return GpuUse::None {
                why: "a container without server.gpus sees no GPU".into(),
            };
        }
        match recipe.engine {
            Engine::Sim | Engine::Openai => GpuUse::None {
                why: format!("{} does not use a GPU", recipe.engine.as_str()),
            },
            Engine::LlamaServer => match offloaded_layers(&server.args) {
                Some(0) => GpuUse::None {
                    why: "llama-server offloads no layer (-ngl 0)".into(),
                },
                _ => GpuUse::All,
            },
            Engine::Vllm | Engine::Sglang | Engine::Trtllm => GpuUse::All,
        }
    }
}

/// `CUDA_VISIBLE_DEVICES`: indices; empty or -1 hides every GPU; UUIDs or MIG names
/// cannot be mapped to nvidia-smi's order, so they count as all.
fn visible_devices(value: &str) -> GpuUse {
    let value = value.trim();
    if value.is_empty() || value == "-1" {
        return GpuUse::None {
            why: format!("CUDA_VISIBLE_DEVICES={value:?} hides every GPU"),
        };
    }
    let ix: Option<Vec<usize>> = value.split(',').map(|x| x.trim().parse().ok()).collect();
    ix.map(GpuUse::Indices).unwrap_or(GpuUse::All)
}

/// The `-ngl N` / `--n-gpu-layers N` / `--gpu-layers N` (or `=N`) a llama-server is given;
/// `auto`/`all` or anything unparsed count as offloading.
fn offloaded_layers(args: &[String]) -> Option<u64> {
    const FLAGS: [&str; 3] = ["-ngl", "--n-gpu-layers", "--gpu-layers"];
    let mut found = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let value = match a.split_once('=') {
            Some((flag, v)) if FLAGS.contains(&flag) => Some(v.to_string()),
            _ if FLAGS.contains(&a.as_str()) => it.next().cloned(),
            _ => None,
        };
        if let Some(v) = value {
            found = Some(v.trim().parse().unwrap_or(u64::MAX));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recipe(yaml: &str) -> Recipe {
        let yaml = format!("{yaml}model:\n  path: /m\n");
        crate::recipe::parse_recipe(std::path::Path::new("t.yaml"), yaml.as_bytes())
            .unwrap()
            .recipe
    }

    fn gpu(name: &str, mib: Option<u64>) -> Gpu {
        Gpu {
            name: name.into(),
            memory_total_bytes: mib.map(|m| m << 20),
            compute_capability: "9.0".into(),
        }
    }

    #[test]
    fn what_a_recipe_is_given_follows_gpus_then_cuda_visible_devices_then_the_engine() {
        let llama = |args: &str| {
            GpuUse::of(&recipe(&format!(
                "name: t\nengine: llama-server\nruntime: process\nbinary: /b\nserver:\n  port: 1\n  args: [{args}]\n"
            )))
        };
        assert_eq!(llama("-ngl, \"999\""), GpuUse::All);
        assert_eq!(llama("--n-gpu-layers=12"), GpuUse::All);
        assert!(!llama("-ngl, \"0\"").uses_gpu());
        assert!(!llama("--gpu-layers, \"0\"").uses_gpu());
        // Unsaid: counted as offloading.
        assert_eq!(llama("--ctx-size, \"4096\""), GpuUse::All);
        let sim = recipe("name: t\nengine: sim\nruntime: process\nserver:\n  port: 1\n");
        assert!(!GpuUse::of(&sim).uses_gpu());
        let pinned = recipe(
            "name: t\nengine: llama-server\nruntime: process\nbinary: /b\nserver:\n  port: 1\n  env: {CUDA_VISIBLE_DEVICES: \"1\"}\n",
        );
        assert_eq!(GpuUse::of(&pinned), GpuUse::Indices(vec![1]));
        let hidden = recipe(
            "name: t\nengine: llama-server\nruntime: process\nbinary: /b\nserver:\n  port: 1\n  env: {CUDA_VISIBLE_DEVICES: \"\"}\n",
        );
        assert!(!GpuUse::of(&hidden).uses_gpu());
        let counted = recipe("name: t\nengine: vllm\nimage: v:1\nserver:\n  port: 1\n  gpus: 1\n");
        assert_eq!(GpuUse::of(&counted), GpuUse::First(1));
        let container = recipe("name: t\nengine: vllm\nimage: v:1\nserver:\n  port: 1\n");
        assert!(!GpuUse::of(&container).uses_gpu());
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
