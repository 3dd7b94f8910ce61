//! Which engine a server is, from what it runs: the program or module first (the surest
//! sign), then the image's name, then flags only one engine takes. Nothing matched: an
//! OpenAI-compatible server sparkctl passes no flags to.

use crate::engine::Engine;

/// The engine, and what gave it away (said in the recipe's comments).
pub(crate) fn engine(image: Option<&str>, argv: &[String]) -> (Engine, String) {
    if let Some(found) = by_program(argv) {
        return found;
    }
    if let Some(image) = image {
        let lower = image.to_ascii_lowercase();
        let by_image = [
            ("sparkctl", Engine::Sim),
            ("sglang", Engine::Sglang),
            ("vllm", Engine::Vllm),
            ("tensorrt-llm", Engine::Trtllm),
            ("tensorrt_llm", Engine::Trtllm),
            ("trtllm", Engine::Trtllm),
            ("llama.cpp", Engine::LlamaServer),
            ("llama-cpp", Engine::LlamaServer),
            ("llama-server", Engine::LlamaServer),
        ];
        if let Some((word, e)) = by_image.iter().find(|(w, _)| lower.contains(w)) {
            return (*e, format!("the image name contains `{word}`"));
        }
    }
    let by_flag = [
        ("--n-gpu-layers", Engine::LlamaServer),
        ("-ngl", Engine::LlamaServer),
        ("--alias", Engine::LlamaServer),
        ("--gpu-memory-utilization", Engine::Vllm),
        ("--max-model-len", Engine::Vllm),
        ("--model-path", Engine::Sglang),
        ("--mem-fraction-static", Engine::Sglang),
    ];
    for (flag, e) in by_flag {
        if argv
            .iter()
            .any(|a| a == flag || a.starts_with(&format!("{flag}=")))
        {
            return (e, format!("it takes `{flag}`, which only {e} takes"));
        }
    }
    (
        Engine::Openai,
        "nothing named the engine: sparkctl treats it as an OpenAI-compatible server and passes \
         it no flags of its own"
            .into(),
    )
}

fn by_program(argv: &[String]) -> Option<(Engine, String)> {
    for (i, word) in argv.iter().enumerate() {
        let base = word.rsplit('/').next().unwrap_or(word);
        let next = argv.get(i + 1).map(String::as_str);
        let found = match (base, next) {
            ("llama-server", _) => Some(Engine::LlamaServer),
            ("sparkctl", Some("sim")) => Some(Engine::Sim),
            ("vllm", _) => Some(Engine::Vllm),
            ("trtllm-serve", _) => Some(Engine::Trtllm),
            (m, _) if m.starts_with("vllm.entrypoints") => Some(Engine::Vllm),
            ("sglang.launch_server", _) => Some(Engine::Sglang),
            _ => None,
        };
        if let Some(e) = found {
            return Some((e, format!("it runs `{base}`")));
        }
        // Only the program and a launcher's module name count, not the arguments.
        if i >= 3 {
            break;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn the_engine_is_told_by_program_then_image_then_flags() {
        let e = |image, argv: &str| engine(image, &w(argv)).0;
        assert_eq!(e(None, "/x/bin/llama-server -m m"), Engine::LlamaServer);
        assert_eq!(e(None, "python3 -m sglang.launch_server"), Engine::Sglang);
        assert_eq!(e(None, "/venv/bin/vllm serve m"), Engine::Vllm);
        assert_eq!(e(None, "/usr/bin/sparkctl sim --port 1"), Engine::Sim);
        assert_eq!(
            e(Some("vllm/vllm-openai:cu130-nightly"), "--quantization x"),
            Engine::Vllm
        );
        assert_eq!(
            e(Some("ghcr.io/ggml-org/llama.cpp:server"), ""),
            Engine::LlamaServer
        );
        assert_eq!(e(Some("my/server:1"), "--model-path /m"), Engine::Sglang);
        assert_eq!(e(Some("my/server:1"), "--foo"), Engine::Openai);
    }
}
