//! Which GPUs a recipe's server is given, read from the recipe alone (the machine's side is
//! `nvidia::device`).

use super::{Gpus, Recipe, Runtime};
use crate::engine::Engine;
use crate::nvidia::device::GpuUse;

impl Recipe {
    /// What this recipe's server is given: `server.gpus` first, then `CUDA_VISIBLE_DEVICES`,
    /// then what its engine does by default. A llama-server that offloads no layer
    /// (`-ngl 0`) runs on the CPU; one that does not say counts as offloading, as every
    /// recent llama.cpp build does by default: a refusal fixed by `-ngl 0` costs less than
    /// an out-of-memory crash.
    pub(crate) fn gpu_use(&self) -> GpuUse {
        let (recipe, server) = (self, &self.server);
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
        super::super::parse_recipe(std::path::Path::new("t.yaml"), yaml.as_bytes())
            .unwrap()
            .recipe
    }

    #[test]
    fn what_a_recipe_is_given_follows_gpus_then_cuda_visible_devices_then_the_engine() {
        let llama = |args: &str| {
            recipe(&format!(
                "name: t\nengine: llama-server\nruntime: process\nbinary: /b\nserver:\n  port: 1\n  args: [{args}]\n"
            ))
            .gpu_use()
        };
        assert_eq!(llama("-ngl, \"999\""), GpuUse::All);
        assert_eq!(llama("--n-gpu-layers=12"), GpuUse::All);
        assert!(!llama("-ngl, \"0\"").uses_gpu());
        assert!(!llama("--gpu-layers, \"0\"").uses_gpu());
        // Unsaid: counted as offloading.
        assert_eq!(llama("--ctx-size, \"4096\""), GpuUse::All);
        let sim = recipe("name: t\nengine: sim\nruntime: process\nserver:\n  port: 1\n");
        assert!(!sim.gpu_use().uses_gpu());
        let pinned = recipe(
            "name: t\nengine: llama-server\nruntime: process\nbinary: /b\nserver:\n  port: 1\n  env: {CUDA_VISIBLE_DEVICES: \"1\"}\n",
        );
        assert_eq!(pinned.gpu_use(), GpuUse::Indices(vec![1]));
        let hidden = recipe(
            "name: t\nengine: llama-server\nruntime: process\nbinary: /b\nserver:\n  port: 1\n  env: {CUDA_VISIBLE_DEVICES: \"\"}\n",
        );
        assert!(!hidden.gpu_use().uses_gpu());
        let counted = recipe("name: t\nengine: vllm\nimage: v:1\nserver:\n  port: 1\n  gpus: 1\n");
        assert_eq!(counted.gpu_use(), GpuUse::First(1));
        let container = recipe("name: t\nengine: vllm\nimage: v:1\nserver:\n  port: 1\n");
        assert!(!container.gpu_use().uses_gpu());
    }
}
