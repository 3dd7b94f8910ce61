//! `sparkctl import`: what a user already runs, as a recipe. The command lines of the
//! production llama-server and of the vLLM serve in the project's notes give the shipped
//! recipes back (paths aside); a container started by hand with `docker run` flags gives a
//! recipe whose planned container is the same, its image digest pinned.

use std::process::Command;

use serde_json::Value;

use crate::support::{self, free_port, text, Deck, Ran};

/// The production llama-server's command line, exactly as it was typed on the Spark.
const LLAMA_LINE: &str = r#"~/llama-cpp-latest/build-gpu/bin/llama-server \
    --host 0.0.0.0 --port 8003 \
    -m ~/models/Qwen3.5-9B-Claude-Opus-Distilled-Q4_K_M.gguf \
    --alias qwen3.5-9b --ctx-size 32768 --n-gpu-layers 999 -fa auto --jinja \
    --reasoning-budget 0 --metrics"#;

/// The vLLM serve line of the QAT v2b notes: the checklist's `docker run …
/// vllm/vllm-openai:cu130-nightly --quantization modelopt_fp4 --enforce-eager
/// --language-model-only --trust-remote-code`, with the elided options and the flags the
/// same notes settled on (hermes tool parser, 0.85 of memory, 8K context, 16g shm) written out.
fn vllm_line(model_dir: &str) -> String {
    format!(
        "docker run --gpus all --rm --ipc=host --shm-size 16g -p 8000:8000 \\\n  -v {model_dir}:/model \\\n  \
         vllm/vllm-openai:cu130-nightly --model /model --served-model-name qwen3.5-9b \\\n  \
         --quantization modelopt_fp4 --enforce-eager --language-model-only --trust-remote-code \\\n  \
         --reasoning-parser qwen3 --enable-auto-tool-choice --tool-call-parser hermes \\\n  \
         --gpu-memory-utilization 0.85 --max-model-len 8192"
    )
}

/// `recipes show NAME --json`'s launch, with the host paths given replaced by a marker.
fn launch_of(deck: &Deck, name: &str, paths: &[&str]) -> Value {
    let out = deck.ok(&["--json", "recipes", "show", name]);
    let mut text =
        serde_json::to_string(&serde_json::from_str::<Value>(&out).unwrap()["launch"]).unwrap();
    for p in paths {
        text = text.replace(p, "<PATH>");
    }
    serde_json::from_str(&text).unwrap()
}

fn copy_shipped(deck: &Deck, name: &str) {
    std::fs::copy(
        support::repo().join(format!("recipes/{name}.yaml")),
        deck.dir.join(format!("recipes/{name}.yaml")),
    )
    .unwrap();
}

/// The vLLM model dir as the export left it: transformers 5 names, no preprocessor.
fn exported_model(deck: &Deck) -> String {
    let model = deck.dir.join("qat-v2b");
    std::fs::create_dir_all(&model).unwrap();
    std::fs::write(
        model.join("config.json"),
        r#"{"model_type":"qwen3_5_text","architectures":["Qwen3_5ForCausalLM"]}"#,
    )
    .unwrap();
    std::fs::write(
        model.join("tokenizer_config.json"),
        r#"{"tokenizer_class":"TokenizersBackend"}"#,
    )
    .unwrap();
    model.display().to_string()
}

#[test]
fn the_production_llama_server_line_imports_as_the_shipped_recipe() {
    let deck = Deck::new("import-llama");
    let home = std::env::var("HOME").unwrap();
    copy_shipped(&deck, "llama-server");
    // The port the llama-server served on is the production port here, as on the Spark.
    let eighty_eighty_free = std::net::TcpListener::bind("127.0.0.1:8080").is_ok();
    Ran::of(
        deck.cmd(&["import", "imported-llama", "--command", LLAMA_LINE])
            .env("SPARKCTL_PRODUCTION_PORT", "8003"),
    )
    .succeeds();
    let written = std::fs::read_to_string(deck.dir.join("recipes/imported-llama.yaml")).unwrap();
    assert!(written.contains("the production port"), "{written}");
    assert!(written.contains("NOT INFERRED"), "{written}");
    assert!(written.contains("server.memory_gb"), "{written}");
    let shipped = launch_of(&deck, "llama-server", &[&home]);
    let imported = launch_of(&deck, "imported-llama", &[&home]);
    // Same program, same argv, same bind address; the port is the recipe's own (8080 where
    // that is free) — the front door serves 8003.
    assert_eq!(imported["launch"], shipped["launch"], "{imported:#}");
    assert_eq!(imported["host"], "127.0.0.1");
    assert_ne!(imported["port"], 8003);
    if eighty_eighty_free {
        assert_eq!(imported["port"], shipped["port"]);
    }
    assert_eq!(imported["engine"], "llama-server");
    assert_eq!(imported["runtime"], "process");
}

#[test]
fn the_qat_vllm_line_imports_as_the_shipped_recipe_with_the_patches_it_needs() {
    let deck = Deck::new("import-qat");
    let home = std::env::var("HOME").unwrap();
    // With its fallback, which must be a recipe of the dir.
    copy_shipped(&deck, "qat-v2b");
    copy_shipped(&deck, "llama-server");
    let model_dir = exported_model(&deck);
    deck.sparkctl(&[
        "import",
        "imported-qat",
        "--docker-run",
        &vllm_line(&model_dir),
    ])
    .succeeds();
    let written = std::fs::read_to_string(deck.dir.join("recipes/imported-qat.yaml")).unwrap();
    for step in ["wrap-vl-config", "copy-from", "preprocessor_config.json"] {
        assert!(written.contains(step), "no {step} suggested:\n{written}");
    }
    let shipped_model = format!("{home}/models/Qwen3.5-9B-Opus-Distilled-NVFP4-QAT-v2b");
    let shipped = launch_of(&deck, "qat-v2b", &[&shipped_model]);
    let imported = launch_of(&deck, "imported-qat", &[&model_dir]);
    assert_eq!(imported["launch"], shipped["launch"], "{imported:#}");
    assert_eq!(imported["port"], shipped["port"]);
    assert_eq!(imported["engine"], "vllm");
}

#[test]
fn an_import_never_writes_over_a_recipe_that_exists_unless_forced() {
    let deck = Deck::new("import-exists");
    let line = vllm_line(&exported_model(&deck));
    deck.sparkctl(&["import", "imported-qat", "--docker-run", &line])
        .succeeds();
    let path = deck.dir.join("recipes/imported-qat.yaml");
    let written = std::fs::read_to_string(&path).unwrap();
    deck.sparkctl(&["import", "imported-qat", "--docker-run", &line])
        .exits(2)
        .warns("--force");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), written);
}

#[test]
fn a_line_that_needs_a_shell_is_refused_not_run() {
    let deck = Deck::new("import-shell");
    deck.sparkctl(&[
        "import",
        "x",
        "--docker-run",
        "docker run img $(touch /tmp/sparkctl-pwned)",
    ])
    .exits(2);
    assert!(!std::path::Path::new("/tmp/sparkctl-pwned").exists());
}

/// `docker run` flags paired (`-e A`, `--ulimit x=1`), sorted: two lines that ask for the
/// same container compare equal whatever their order.
fn flag_pairs(words: &[String]) -> Vec<String> {
    let mut pairs = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let w = &words[i];
        if w.starts_with('-') && w.contains('=') && w.starts_with("--") {
            pairs.push(w.clone());
            i += 1;
        } else if w.starts_with('-') && i + 1 < words.len() && !words[i + 1].starts_with('-') {
            pairs.push(format!("{w}={}", words[i + 1]));
            i += 2;
        } else {
            pairs.push(w.clone());
            i += 1;
        }
    }
    pairs.sort();
    pairs
}

#[test]
fn a_container_started_by_hand_imports_with_its_spec_and_its_digest_pinned() {
    let image = support::sim_image();
    let deck = Deck::new("import-container");
    let port = free_port();
    let data = deck.dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let name = format!("sparkctl-import-test-{}", std::process::id());
    let _ = Command::new("docker").args(["rm", "-f", &name]).output();
    let run_flags: Vec<String> = [
        "-e",
        "SIM_IMPORT_A=1",
        "-v",
        &format!("{}:/data:ro", data.display()),
        "--shm-size",
        "256m",
        "--ulimit",
        "nofile=4096",
        "--ulimit",
        "core=0",
        "-p",
        &format!("127.0.0.1:{port}:8000"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let cmd: Vec<String> = [
        "sim", "--host", "0.0.0.0", "--port", "8000", "--ttft", "5ms",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let started = Command::new("docker")
        .args(["run", "-d", "--name", &name])
        .args(&run_flags)
        .arg(image)
        .args(&cmd)
        .output()
        .unwrap();
    assert!(started.status.success(), "{}", text(&started.stderr));
    let removed = Remove(name.clone());

    Ran::of(
        deck.cmd(&["import", "handmade", "--container", &name])
            .env("SIM_IMPORT_A", "1"),
    )
    .succeeds()
    .says("pinned handmade");
    // Names only: the value never reaches the recipe.
    let written = std::fs::read_to_string(deck.dir.join("recipes/handmade.yaml")).unwrap();
    assert!(
        written.contains("SIM_IMPORT_A") && !written.contains("SIM_IMPORT_A=1"),
        "{written}"
    );

    // The digest in the lock is the image the container runs.
    let inspect = Command::new("docker")
        .args(["inspect", "--format", "{{.Image}}", &name])
        .output()
        .unwrap();
    let image_id = text(&inspect.stdout).trim().to_string();
    let lock = std::fs::read_to_string(deck.dir.join("images.lock")).unwrap();
    assert!(
        lock.contains("handmade:") && lock.contains(&image_id),
        "{lock}"
    );

    // `start --dry-run` plans the same container: flags, image, command (once the one
    // started by hand no longer holds the port).
    let stopped = Command::new("docker")
        .args(["stop", "-t", "1", &name])
        .output()
        .unwrap();
    assert!(stopped.status.success(), "{}", text(&stopped.stderr));
    let plan = Ran::of(
        deck.cmd(&["--json", "start", "handmade", "--dry-run"])
            .env("SIM_IMPORT_A", "1"),
    )
    .succeeds()
    .json();
    let planned: Vec<String> = plan["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap().to_string())
        .collect();
    let at = planned
        .iter()
        .position(|w| w.starts_with("--entrypoint"))
        .unwrap();
    let (flags, rest) = planned[3..].split_at(at - 3);
    let mut expected_flags: Vec<String> = run_flags.clone();
    // Values stay on the host: the plan passes the name.
    expected_flags[1] = "SIM_IMPORT_A".into();
    assert_eq!(
        flag_pairs(flags),
        flag_pairs(&expected_flags),
        "{planned:?}"
    );
    // `--entrypoint /sparkctl IMAGE sim ARGS`: the image's entrypoint and the same command.
    assert_eq!(rest[1], "/sparkctl", "{planned:?}");
    let argv: Vec<String> = rest[3..].to_vec();
    assert_eq!(flag_pairs(&argv), flag_pairs(&cmd), "{planned:?}");
    drop(removed);
}

/// Removes the hand-made container when the test ends, passed or not.
struct Remove(String);

impl Drop for Remove {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rm", "-f", &self.0]).output();
    }
}

/// Issue 39 (2): a key in a pasted line, in a flag or inside one word of it (`bash -c …`,
/// `VAR=… server`), or in a docker option, reaches no file, no output, no `--json`.
#[test]
fn a_key_in_a_pasted_line_reaches_no_file_and_no_output() {
    const KEY: &str = "sk-live-Qm7Zp2Vx9Lk4Tr8Nw";
    let deck = Deck::new("import-secret");
    let port = free_port();
    let lines: Vec<(&str, String)> = vec![
        (
            "--command",
            format!("llama-server -m /m.gguf --port {port} --api-key {KEY}"),
        ),
        (
            "--command",
            format!("bash -c 'exec llama-server -m /m.gguf --port {port} --api-key {KEY}'"),
        ),
        (
            "--command",
            format!("bash -c 'LLAMA_API_KEY={KEY} llama-server -m /m.gguf --port {port}'"),
        ),
        (
            "--docker-run",
            format!(
                "docker run -p {port}:30000 lmsysorg/sglang:latest python -m sglang.launch_server \
                 --model-path /m --api-key={KEY}"
            ),
        ),
        (
            "--docker-run",
            format!("docker run --label token={KEY} -p {port}:8000 vllm/vllm-openai:latest --model /m --hf-auth {KEY}"),
        ),
    ];
    let mut shown = String::new();
    for (i, (how, line)) in lines.iter().enumerate() {
        let name = format!("keyed-{i}");
        for extra in [vec!["--dry-run"], vec!["--json", "--dry-run"], vec![]] {
            let mut args = vec!["import", &name, how, line];
            if extra.first() == Some(&"--json") {
                args.insert(0, "--json");
            }
            args.extend(extra.iter().filter(|a| **a != "--json"));
            let ran = deck.sparkctl(&args).succeeds();
            shown.push_str(&(ran.stdout() + &ran.stderr()));
        }
        let written =
            std::fs::read_to_string(deck.dir.join(format!("recipes/{name}.yaml"))).unwrap();
        assert!(written.contains("left out"), "{written}");
        for json in [false, true] {
            let mut args = vec!["recipes", "show", &name];
            if json {
                args.insert(0, "--json");
            }
            let ran = deck.sparkctl(&args).succeeds();
            shown.push_str(&(ran.stdout() + &ran.stderr()));
        }
    }
    // A docker option whose value cannot be read is refused without quoting its value.
    let bad = deck
        .sparkctl(&[
            "import",
            "bad",
            "--docker-run",
            &format!("docker run --env 'MY KEY={KEY}' img"),
        ])
        .exits(2);
    shown.push_str(&(bad.stdout() + &bad.stderr()));
    assert!(!shown.contains(KEY), "{shown}");
    for dir in ["recipes", "state"] {
        let holding = support::files_holding(&deck.dir.join(dir), KEY);
        assert!(holding.is_empty(), "{holding}");
    }
}

/// Issue 39 (6): a pasted second line is a second command, never more arguments; a CRLF
/// line continuation (a line copied from Windows) joins the lines as `\` + LF does.
#[test]
fn a_pasted_second_line_is_refused_and_a_crlf_continuation_joins() {
    let deck = Deck::new("import-lines");
    for line in [
        "llama-server -m /m.gguf --port 9000\nrm -rf ~/models/*",
        "llama-server -m /m.gguf --port 9000\r\nrm -rf ~/models/*\r\n",
        "export X=1\nllama-server -m /m.gguf",
    ] {
        deck.sparkctl(&["import", "two", "--command", line])
            .exits(2)
            .warns("line 2");
        assert!(!deck.dir.join("recipes/two.yaml").exists());
    }
    deck.sparkctl(&[
        "import",
        "crlf",
        "--command",
        "llama-server -m /m.gguf \\\r\n  --port 9000 -t 4 \\\r\n  --jinja\r\n# a comment\r\n",
    ])
    .succeeds();
    let shown: Value =
        serde_json::from_str(&deck.ok(&["--json", "recipes", "show", "crlf"])).unwrap();
    assert_eq!(
        shown["recipe"]["server"]["args"],
        serde_json::json!(["-t", "4", "--jinja"]),
        "{shown:#}"
    );
}
