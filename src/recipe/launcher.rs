//! How a recipe runs: the runtime fits the engine, each runtime's own keys are where they
//! belong, and a process recipe names what it launches (`binary`, or `python` for an
//! engine served from a venv).

use super::diag::Report;
use super::{Recipe, Runtime};
use crate::engine::{Engine, Profile};

/// The runtime fits the engine, and each runtime's own keys are where they belong.
pub(super) fn check(out: &mut Report, r: &Recipe, profile: &Profile) {
    let runtime = r.runtime.unwrap_or(profile.runtimes[0]);
    if !profile.runtimes.contains(&runtime) {
        out.bad(
            "runtime",
            format!("engine {} cannot run under runtime {}", r.engine, runtime.as_str()),
            &format!(
                "use `runtime: {}`: {}; to run another OpenAI-compatible server on the host, use `engine: openai`",
                profile.runtimes[0].as_str(),
                profile.runtime_note
            ),
        );
    }
    match runtime {
        Runtime::Docker => {
            if r.image.as_deref().is_none_or(str::is_empty) {
                out.bad(
                    "image",
                    "runtime docker needs an image".into(),
                    "add `image: REPO:TAG`; `sparkctl images pin` then locks its digest",
                );
            }
            for key in ["binary", "python"] {
                let set = if key == "binary" {
                    &r.binary
                } else {
                    &r.python
                };
                if set.is_some() {
                    out.bad(
                        key,
                        format!("`{key}` is for runtime process; this recipe runs in docker"),
                        "remove it, or set `runtime: process`",
                    );
                }
            }
        }
        Runtime::Process => {
            if r.image.is_some() {
                out.bad(
                    "image",
                    "`image` is for runtime docker; this recipe runs a host process".into(),
                    "remove it, or set `runtime: docker`",
                );
            }
            check_launcher(out, r, profile);
            let s = &r.server;
            let docker_only = [
                ("server.gpus", s.gpus.is_some()),
                ("server.ipc", s.ipc.is_some()),
                ("server.shm_size", s.shm_size.is_some()),
                ("server.ulimits", !s.ulimits.is_empty()),
                ("server.user", s.user.is_some()),
                ("server.container_port", s.container_port.is_some()),
                ("server.mounts", !s.mounts.is_empty()),
                (
                    "model.mount",
                    r.model.as_ref().is_some_and(|m| m.mount.is_some()),
                ),
            ];
            for (key, set) in docker_only {
                if set {
                    out.bad(
                        key,
                        "only applies to runtime docker".into(),
                        "remove it; a host process gets the host's GPU, IPC and limits",
                    );
                }
            }
        }
    }

    let needs_model = !matches!(r.engine, Engine::Openai | Engine::Sim);
    if needs_model && r.model.is_none() {
        out.bad(
            "engine",
            format!("engine {} needs `model.path`", r.engine),
            "add `model: {path: ~/models/NAME}`",
        );
    }
}

/// What a process recipe runs: `binary`, or `python` (a venv) for an engine with a server
/// module; a sim recipe may name neither (sparkctl runs itself).
fn check_launcher(out: &mut Report, r: &Recipe, profile: &Profile) {
    let first_arg = r.server.args.first().map(String::as_str);
    match (&r.binary, &r.python, profile.python_module) {
        (Some(_), Some(_), _) => out.bad(
            "python",
            "`binary` and `python` both say what runs".into(),
            "keep one: `python` runs the engine's server module, `binary` an executable",
        ),
        (None, Some(_), None) => out.bad(
            "python",
            format!("engine {} has no server module sparkctl knows", r.engine),
            "use `binary:`; `python:` is for engines served from a venv (vllm, sglang)",
        ),
        (None, Some(_), Some(module)) if first_arg == Some("-m") => out.bad(
            "server.args",
            format!("`python:` already runs `-m {module}`"),
            "remove `-m MODULE` from server.args, or use `binary:` for another launcher",
        ),
        (None, None, _) if r.engine != Engine::Sim => out.bad(
            "binary",
            "runtime process needs `binary`, the server executable on the host (or `python`, \
             a venv, for vllm and sglang)"
                .into(),
            "e.g. `binary: ~/llama.cpp/build/bin/llama-server`, or `python: ~/vllm-env`",
        ),
        // The `vllm` CLI serves with a subcommand; without it, it prints its help and exits.
        (Some(binary), None, _)
            if r.engine == Engine::Vllm
                && std::path::Path::new(binary).file_name() == Some("vllm".as_ref())
                && first_arg != Some("serve") =>
        {
            out.bad(
                "server.args",
                "the `vllm` CLI serves with `vllm serve`".into(),
                "put `serve` first in server.args, or use `python: VENV`, which runs vLLM's \
                 API server module",
            )
        }
        _ => {}
    }
}
