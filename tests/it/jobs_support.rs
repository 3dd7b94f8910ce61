//! What the job tests share: a deck with a job recipe dir whose commands run "via sudo" by
//! uid 4321, busybox job recipes, a model-writing job, a serving recipe made by a job.
#![allow(dead_code)]

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{self, busybox_image, free_port, sim_image, Deck, Ran};

pub const UID: u32 = 4321;

/// A deck with a job recipe dir, its commands run "via sudo" by uid 4321.
pub struct Jobs {
    pub deck: Deck,
}

impl Jobs {
    pub fn new(tag: &str) -> Jobs {
        let deck = Deck::new(tag);
        std::fs::create_dir_all(deck.dir.join("recipes/jobs")).unwrap();
        Jobs { deck }
    }

    pub fn out_dir(&self, name: &str) -> PathBuf {
        self.deck.dir.join(name)
    }

    /// `recipes/jobs/NAME.yaml` running `script` under busybox sh, writing to `out`.
    pub fn job(&self, name: &str, script: &str, extra: &str) {
        let body = format!(
            r#"name: {name}
image: {}
argv: [sh, -c, {}]
outputs:
  - path: {}
    mount: /out
{extra}"#,
            busybox_image(),
            serde_json::to_string(script).unwrap(),
            self.out_dir(&format!("{name}-out")).display()
        );
        std::fs::write(
            self.deck.dir.join(format!("recipes/jobs/{name}.yaml")),
            body,
        )
        .unwrap();
        self.ok(&["images", "pin", name]);
    }

    pub fn cmd(&self, args: &[&str]) -> std::process::Command {
        let mut c = self.deck.cmd(args);
        c.env("SUDO_UID", UID.to_string())
            .env("SUDO_GID", UID.to_string())
            .env_remove("SPARKCTL_CHOWN_HELPER");
        c
    }

    /// Runs `sparkctl ARGS` "via sudo", for chained assertions (`Ran`).
    pub fn sparkctl(&self, args: &[&str]) -> Ran {
        Ran::of(&mut self.cmd(args))
    }

    /// Runs and insists on exit 0; returns stdout.
    #[track_caller]
    pub fn ok(&self, args: &[&str]) -> String {
        self.sparkctl(args).succeeds().stdout()
    }

    /// The newest run of `job`, as `jobs --json` shows it (which also finalizes).
    pub fn latest(&self, job: &str) -> Value {
        let v: Value = serde_json::from_str(&self.ok(&["--json", "jobs"])).unwrap();
        v.as_array()
            .unwrap()
            .iter()
            .find(|r| r["job"] == job)
            .cloned()
            .unwrap_or_else(|| panic!("no run of {job} in {v}"))
    }

    pub fn wait_for(&self, what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if cond() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("{what} did not happen within {within:?}");
    }
}

pub fn owners(root: &Path) -> Vec<(String, u32, u32)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        let m = std::fs::symlink_metadata(&p).unwrap();
        out.push((p.display().to_string(), m.uid(), m.gid()));
        if m.is_dir() {
            stack.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        }
    }
    out
}

pub fn container_exists(id: &str) -> bool {
    let id = id.to_string();
    support::block_on(async move {
        support::docker()
            .await
            .inspect_container(&id, None)
            .await
            .is_ok()
    })
}

/// A job that copies a real model (config, NVFP4 quant config, safetensors) from its input.
pub fn model_job(j: &Jobs, name: &str, script: &str) -> PathBuf {
    let input = j.deck.dir.join("bf16");
    std::fs::create_dir_all(&input).unwrap();
    std::fs::write(input.join("config.json"), "{\"model_type\": \"qwen3_5\"}\n").unwrap();
    std::fs::write(
        input.join("hf_quant_config.json"),
        "{\"quantization\": {\"quant_algo\": \"NVFP4\"}}\n",
    )
    .unwrap();
    sparkctl::testkit::write_fixture(&input.join("model.safetensors"), &[("w", 64)]).unwrap();
    j.job(
        name,
        script,
        &format!(
            r#"    size: 1m
    expect:
      - expect: {{file: hf_quant_config.json, pointer: /quantization/quant_algo, equals: NVFP4}}
      - expect-safetensors: {{}}
inputs:
  - {{path: {}, mount: /in}}
progress: 'step (\d+)/(\d+)'
"#,
            input.display()
        ),
    );
    j.out_dir(&format!("{name}-out"))
}

/// A serving recipe (the sim in a container) whose model is `model`, made by `job`.
pub fn served_by(j: &Jobs, name: &str, job: &str, model: &Path) {
    // The suite it names must be there: a recipe is checked with its suite when it loads.
    write_suite(j);
    j.deck.recipe(
        name,
        &format!(
            r#"engine: sim
runtime: docker
image: {}
model:
  path: {}
  produced_by: {job}
  patches:
    - expect-safetensors: {{}}
server:
  port: {}
  args: [--load-time, 100ms, --ttft, 10ms, --token-rate, "400", --tokens, "8"]
  memory_gb: 8
health:
  timeout: 20s
bench:
  suite: tiny
  gates:
    thinking_leak: "== 0%"
"#,
            sim_image(),
            model.display(),
            free_port()
        ),
    );
    j.ok(&["images", "pin", name]);
}

pub const SUITE: &str = r#"name: tiny
warmup: 1
runs: 5
cases:
  - name: factual
    turns: ["What is the capital of Japan?"]
    expect: Tokyo
    max_tokens: 16
"#;

fn write_suite(j: &Jobs) {
    std::fs::create_dir_all(j.deck.dir.join("recipes/suites")).unwrap();
    std::fs::write(j.deck.dir.join("recipes/suites/tiny.yaml"), SUITE).unwrap();
}

pub fn with_production(j: &Jobs) {
    write_suite(j);
    j.deck.recipe(
        "prod",
        &format!(
            r#"engine: sim
runtime: process
server:
  port: {}
  args: [--load-time, 100ms, --tokens, "8"]
  memory_gb: 7
bench:
  suite: tiny
"#,
            free_port()
        ),
    );
    j.ok(&["rollback", "--to", "prod"]);
}
