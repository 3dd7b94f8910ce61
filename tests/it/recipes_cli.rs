//! The recipe commands, through the real binary on the shipped recipes and the bad corpus.

use std::fs;

use crate::support::{self, in_repo, repo, strings};

#[test]
fn every_shipped_recipe_validates() {
    let stdout = in_repo(&["recipes", "validate"]).succeeds().stdout();
    let files: Vec<_> = fs::read_dir(repo().join("recipes"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    assert!(files.len() >= 9, "the seed and demo recipes are shipped");
    for f in &files {
        let name = f.file_stem().unwrap().to_str().unwrap();
        assert!(
            stdout.contains(&format!("ok  {name} ")),
            "{name} missing from:\n{stdout}"
        );
    }
    assert!(stdout.contains(&format!("{} recipe(s) valid", files.len())));
}

/// Each bad recipe fails alone, with exit code 2, its exact expected message on stderr,
/// nothing on stdout, and the file untouched.
#[test]
fn bad_recipe_corpus_fails_with_expected_messages() {
    let dir = repo().join("tests/bad-recipes");
    let mut cases = 0;
    let mut entries: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        let rel = path
            .strip_prefix(repo())
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        let (args, expected_file): (Vec<String>, _) = if path.is_dir() {
            let args = vec![
                "--recipes".into(),
                rel.clone(),
                "recipes".into(),
                "validate".into(),
            ];
            (args, path.with_extension("expected"))
        } else if path.extension().is_some_and(|e| e == "yaml") {
            (
                vec!["recipes".into(), "validate".into(), rel.clone()],
                path.with_extension("expected"),
            )
        } else {
            continue;
        };
        let before = fs::read(if path.is_dir() {
            path.join("dup.yaml")
        } else {
            path.clone()
        })
        .unwrap();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let ran = in_repo(&args).exits(2);
        let expected = fs::read_to_string(&expected_file)
            .unwrap_or_else(|_| panic!("{} has no .expected file", rel));
        assert_eq!(ran.stderr(), expected, "{rel}");
        assert!(ran.stdout().is_empty(), "{rel}: stdout {}", ran.stdout());
        assert!(
            expected.starts_with(&format!("error: {rel}")),
            "{rel}: message names the file"
        );
        let after = fs::read(if path.is_dir() {
            path.join("dup.yaml")
        } else {
            path.clone()
        })
        .unwrap();
        assert_eq!(before, after, "{rel} was changed");
        cases += 1;
    }
    assert!(cases >= 18, "corpus shrank to {cases} cases");
}

#[test]
fn every_message_names_line_column_and_key() {
    for entry in fs::read_dir(repo().join("tests/bad-recipes")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "expected") {
            let first = fs::read_to_string(&path).unwrap();
            let first = first.lines().next().unwrap();
            // error: FILE:LINE:COL: KEY: message   (syntax errors have no key)
            let after_file = first
                .split(".yaml:")
                .nth(1)
                .or(first.split(".yml:").nth(1))
                .unwrap();
            let mut parts = after_file.splitn(3, ':');
            assert!(
                parts.next().unwrap().parse::<usize>().is_ok(),
                "line in {first}"
            );
            assert!(
                parts.next().unwrap().parse::<usize>().is_ok(),
                "column in {first}"
            );
        }
    }
}

const SEED_VLLM_FLAGS: &[&[&str]] = &[
    &["--quantization", "modelopt_fp4"],
    &["--enforce-eager"],
    &["--language-model-only"],
    &["--trust-remote-code"],
    &["--reasoning-parser", "qwen3"],
    &["--enable-auto-tool-choice"],
    &["--tool-call-parser", "hermes"],
    &["--gpu-memory-utilization", "0.85"],
    &["--max-model-len", "8192"],
];

#[test]
fn show_qat_v2b_prints_image_every_seed_flag_and_patch_steps_in_order() {
    let s = in_repo(&["recipes", "show", "qat-v2b"]).succeeds().stdout();
    assert!(
        s.contains("image:      vllm/vllm-openai:cu130-nightly"),
        "{s}"
    );
    let cmd_line = s.lines().find(|l| l.starts_with("cmd:")).expect("cmd line");
    for flag in SEED_VLLM_FLAGS {
        assert!(
            cmd_line.contains(&flag.join(" ")),
            "{flag:?} missing from {cmd_line}"
        );
    }
    let steps = [
        "1. chown → invoking-user",
        "2. wrap-vl-config: config.json → model_type qwen3_5, architectures [Qwen3_5ForConditionalGeneration]",
        "3. copy-from ~/models/Qwen3.5-27B-NVFP4: tokenizer.json, tokenizer_config.json, preprocessor_config.json",
        "4. expect hf_quant_config.json /quantization/quant_algo == \"NVFP4\"",
        "5. expect safetensors headers parse",
    ];
    let mut last = 0;
    for step in steps {
        let at = s
            .find(step)
            .unwrap_or_else(|| panic!("{step} missing:\n{s}"));
        assert!(at > last, "{step} out of order");
        last = at;
    }
    let docker = s
        .lines()
        .find(|l| l.starts_with("docker run"))
        .expect("equivalent command");
    for part in [
        "--gpus all",
        "--ipc=host",
        "--shm-size=16g",
        "-p 127.0.0.1:8000:8000",
        ":/model:ro",
    ] {
        assert!(docker.contains(part), "{part} missing from {docker}");
    }
}

#[test]
fn show_json_has_the_exact_argv() {
    let v = in_repo(&["--json", "recipes", "show", "qat-v2b"])
        .succeeds()
        .json();
    let cmd: Vec<&str> = strings(&v["launch"]["launch"]["cmd"]);
    for flag in SEED_VLLM_FLAGS {
        assert!(
            cmd.windows(flag.len()).any(|w| w == *flag),
            "{flag:?} not adjacent in {cmd:?}"
        );
    }
    assert_eq!(v["launch"]["launch"]["gpus"], "all");
    assert_eq!(
        v["recipe"]["health"]["path"], "/health",
        "engine default filled in"
    );
    assert_eq!(v["patch_steps"].as_array().unwrap().len(), 5);
}

#[test]
fn production_llama_server_keeps_its_seed_command_line() {
    let v = in_repo(&["--json", "recipes", "show", "llama-server"])
        .succeeds()
        .json();
    let launch = &v["launch"]["launch"];
    assert_eq!(launch["runtime"], "process");
    let args: Vec<&str> = strings(&launch["args"]);
    for pair in [
        ["--port", "8080"],
        ["--reasoning-budget", "0"],
        ["--alias", "qwen3.5-9b"],
        ["--ctx-size", "32768"],
    ] {
        assert!(args.windows(2).any(|w| w == pair), "{pair:?} in {args:?}");
    }
}

#[test]
fn list_json_names_the_shipped_recipes() {
    let v = in_repo(&["--json", "recipes", "list"]).succeeds().json();
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    for n in [
        "qat-v2b",
        "nvfp4-27b",
        "ptq-9b",
        "sglang-9b",
        "llama-server",
        "demo-candidate",
        "demo-production",
    ] {
        assert!(names.contains(&n), "{n} in {names:?}");
    }
}

/// A process recipe's column says what runs: a venv's python and the engine's module, not
/// the simulated engine (which runs only for a sim recipe with neither).
#[test]
fn list_shows_the_program_a_process_recipe_runs() {
    let table = in_repo(&["recipes", "list"]).succeeds().stdout();
    let row = |name: &str| {
        table
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no row {name} in:\n{table}"))
            .to_string()
    };
    let sglang = row("sglang-9b");
    assert!(
        sglang.contains("~/sglang-env/bin/python -m sglang.launch_server"),
        "{sglang}"
    );
    assert!(!sglang.contains("sparkctl sim"), "{sglang}");
    assert!(row("demo-production").contains("sparkctl sim"));
    assert!(row("llama-server").contains("~/llama-cpp-latest/build-gpu/bin/llama-server"));
    let v = in_repo(&["--json", "recipes", "list"]).succeeds().json();
    let sglang = v
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "sglang-9b")
        .unwrap();
    assert_eq!(
        sglang["runs"], "~/sglang-env/bin/python -m sglang.launch_server",
        "{sglang}"
    );
}

#[test]
fn an_unknown_recipe_name_gets_a_did_you_mean() {
    in_repo(&["recipes", "show", "qat-v2"])
        .exits(2)
        .warns("did you mean `qat-v2b`?");
}

#[test]
fn schema_is_json_schema_for_the_recipe_format() {
    let ran = in_repo(&["recipes", "schema"]).succeeds();
    let v = ran.json();
    assert!(v["$schema"].as_str().unwrap().contains("json-schema.org"));
    let required: Vec<&str> = strings(&v["required"]);
    for key in ["name", "engine", "server"] {
        assert!(required.contains(&key), "{key} required");
    }
    assert_eq!(
        v["additionalProperties"], false,
        "unknown keys are errors for editors too"
    );
    // A venv as the launcher: what it runs, for each engine that has a server module.
    let python = v["properties"]["python"]["description"].as_str().unwrap();
    for module in ["vllm.entrypoints.openai.api_server", "sglang.launch_server"] {
        assert!(python.contains(module), "{python}");
    }
    let text = ran.stdout();
    for step in [
        "wrap-vl-config",
        "copy-from",
        "expect-safetensors",
        "llama-server",
    ] {
        assert!(text.contains(step), "{step} in schema");
    }
}

#[test]
fn help_lists_the_whole_command_surface() {
    let help = in_repo(&["--help"]).succeeds().stdout();
    for cmd in [
        "up", "start", "rollback", "status", "ps", "logs", "down", "history", "bench", "patch",
        "images", "recipes", "doctor", "sim",
    ] {
        assert!(
            help.contains(&format!("\n  {cmd} ")),
            "{cmd} in --help:\n{help}"
        );
    }
}

#[test]
fn bash_completions_cover_the_subcommands() {
    in_repo(&["completions", "bash"])
        .succeeds()
        .says("sparkctl__subcmd__recipes__subcmd__validate");
}

#[test]
fn recipe_hash_follows_what_would_run_not_how_it_is_written() {
    let dir = tempdir();
    let base = std::fs::read_to_string(repo().join("recipes/demo-candidate.yaml")).unwrap();
    // Its fallback must be there too.
    std::fs::copy(
        repo().join("recipes/demo-production.yaml"),
        dir.join("demo-production.yaml"),
    )
    .unwrap();
    let hash = |yaml: &str| {
        std::fs::write(dir.join("demo-candidate.yaml"), yaml).unwrap();
        let v = in_repo(&[
            "--recipes",
            dir.to_str().unwrap(),
            "--json",
            "recipes",
            "show",
            "demo-candidate",
        ])
        .succeeds()
        .json();
        v["recipe_hash"].as_str().unwrap().to_string()
    };
    let original = hash(&base);
    assert!(original.starts_with("sha256:") && original.len() == 71);
    // A comment and a default spelled out change nothing that runs.
    let same = format!(
        "# reviewed\n{}",
        base.replace("  port: 8000\n", "  port: 8000\n  host: 127.0.0.1\n")
    );
    assert_eq!(hash(&same), original);
    assert_ne!(
        hash(&base.replace("--ttft, 90ms", "--ttft, 91ms")),
        original
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

fn tempdir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("sparkctl-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_fallback_must_name_another_recipe_of_the_dir() {
    let dir = std::env::temp_dir().join(format!("sparkctl-fallback-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let recipe = |name: &str, fallback: &str| {
        std::fs::write(
            dir.join(format!("{name}.yaml")),
            format!(
                r#"name: {name}
engine: sim
runtime: process
server:
  port: 9999
fallback: {fallback}
"#
            ),
        )
        .unwrap();
    };
    recipe("prod", "cand");
    recipe("cand", "prdo");
    let validate = || in_repo(&["--recipes", dir.to_str().unwrap(), "recipes", "validate"]);
    validate()
        .exits(2)
        .warns("cand.yaml:6:1: fallback: fallback `prdo` is not a recipe")
        .warns("did you mean `prod`?");
    recipe("cand", "cand");
    validate().exits(2).warns("`cand` is this recipe");
    recipe("cand", "prod");
    validate().succeeds();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A suite the benchmark would refuse (`runs: 3`) is found before anything loads: by
/// `recipes validate`, `start --dry-run` and `up --dry-run`, naming the suite file and its
/// key, and nothing starts (bad input: exit 2, as for every recipe problem).
#[test]
fn a_suite_a_run_would_refuse_is_refused_before_anything_loads() {
    let deck = support::Deck::new("suite-runs");
    fs::create_dir_all(deck.dir.join("recipes/suites")).unwrap();
    fs::write(
        deck.dir.join("recipes/suites/short.yaml"),
        "name: short\nwarmup: 1\nruns: 3\ncases:\n  - name: a\n    turns: [\"hi\"]\n",
    )
    .unwrap();
    deck.recipe(
        "big",
        &format!(
            "engine: sim\nruntime: process\nserver:\n  port: {}\n  memory_gb: 34\nbench:\n  suite: short\n",
            support::free_port()
        ),
    );
    let suite_key = "recipes/suites/short.yaml: runs: 3 measured runs are too few to report \
                     p50/p90; use 5 or more";
    for args in [
        &["recipes", "validate"][..],
        &["recipes", "validate", "big"],
        &["start", "big", "--dry-run"],
        &["up", "big", "--dry-run"],
        &["up", "big", "--yes"],
    ] {
        deck.sparkctl(args)
            .exits(2)
            .warns("big.yaml:8:3: bench.suite: the suite `short` does not load: ")
            .warns(suite_key);
    }
    assert!(deck.status_of("big").is_none(), "nothing started");
    assert!(
        !deck.dir.join("state/frontdoor/supervisor.json").exists(),
        "no front door started"
    );
    // Fixed, it validates.
    fs::write(
        deck.dir.join("recipes/suites/short.yaml"),
        "name: short\nwarmup: 1\nruns: 5\ncases:\n  - name: a\n    turns: [\"hi\"]\n",
    )
    .unwrap();
    deck.sparkctl(&["recipes", "validate"]).succeeds();
}

/// A name that is no recipe starts nothing: no front door is left answering 503 on the
/// production port.
#[test]
fn up_or_rollback_to_a_recipe_that_does_not_exist_starts_no_front_door() {
    let deck = support::Deck::new("up-nosuch");
    for args in [
        &["up", "nosuch", "--yes"][..],
        &["rollback", "--to", "nosuch"],
    ] {
        deck.sparkctl(args).exits(2).warns("nosuch");
        assert!(
            !deck.dir.join("state/frontdoor/supervisor.json").exists(),
            "{args:?} started the front door"
        );
        assert_eq!(support::http_status(&deck.door_url(), "/health"), None);
    }
}
