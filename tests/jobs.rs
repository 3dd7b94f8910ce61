//! Jobs end to end on the real Docker Engine: busybox containers (Debian's static busybox
//! in a FROM-scratch image) write into real output dirs; the real sparkctl binary starts,
//! follows, stops and finalizes them; `up` of a recipe that serves a job's outputs runs
//! the simulated engine in a FROM-scratch container.
//!
//! The suite runs as root, so "the invoking user" is set the way sudo sets it
//! (SUDO_UID/SUDO_GID): these tests prove that the outputs end owned by that uid — given
//! back after a root container wrote them, or written by a container running as it.

mod support;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{busybox_image, free_port, sim_image, text, Deck};

const UID: u32 = 4321;

/// A deck with a job recipe dir, its commands run "via sudo" by uid 4321.
struct Jobs {
    deck: Deck,
}

impl Jobs {
    fn new(tag: &str) -> Jobs {
        let deck = Deck::new(tag);
        std::fs::create_dir_all(deck.dir.join("recipes/jobs")).unwrap();
        Jobs { deck }
    }

    fn out_dir(&self, name: &str) -> PathBuf {
        self.deck.dir.join(name)
    }

    /// `recipes/jobs/NAME.yaml` running `script` under busybox sh, writing to `out`.
    fn job(&self, name: &str, script: &str, extra: &str) {
        let body = format!(
            "name: {name}\nimage: {}\nargv: [sh, -c, {}]\noutputs:\n  - path: {}\n    mount: /out\n{extra}",
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

    fn cmd(&self, args: &[&str]) -> std::process::Command {
        let mut c = self.deck.cmd(args);
        c.env("SUDO_UID", UID.to_string())
            .env("SUDO_GID", UID.to_string())
            .env_remove("SPARKCTL_CHOWN_HELPER");
        c
    }

    fn run(&self, args: &[&str]) -> std::process::Output {
        self.cmd(args).output().unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}:\n{}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    /// The newest run of `job`, as `jobs --json` shows it (which also finalizes).
    fn latest(&self, job: &str) -> Value {
        let v: Value = serde_json::from_str(&self.ok(&["--json", "jobs"])).unwrap();
        v.as_array()
            .unwrap()
            .iter()
            .find(|r| r["job"] == job)
            .cloned()
            .unwrap_or_else(|| panic!("no run of {job} in {v}"))
    }

    fn wait_for(&self, what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
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

fn owners(root: &Path) -> Vec<(String, u32, u32)> {
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

fn container_exists(id: &str) -> bool {
    let id = id.to_string();
    support::block_on(async move {
        support::docker()
            .await
            .inspect_container(&id, None)
            .await
            .is_ok()
    })
}

#[test]
fn a_root_job_leaves_outputs_owned_by_the_invoking_user() {
    let j = Jobs::new("job-owner");
    let script =
        "id -u > /out/written-by && mkdir -p /out/sub && echo w > /out/sub/weights && echo done";
    j.job("as-root", script, "user: root\n");
    // As root sparkctl chowns directly; the helper container (the job's own image) is what
    // a non-root sparkctl uses: force it, so that path is the one proven here.
    let out = j
        .cmd(&["run", "as-root"])
        .env("SPARKCTL_CHOWN_HELPER", "always")
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("job as-root succeeded"), "{stdout}");
    let dir = j.out_dir("as-root-out");
    assert_eq!(
        std::fs::read_to_string(dir.join("written-by"))
            .unwrap()
            .trim(),
        "0"
    );
    for (path, uid, gid) in owners(&dir) {
        assert_eq!((uid, gid), (UID, UID), "{path} is not the invoking user's");
    }
    let rec = j.latest("as-root");
    assert_eq!(rec["state"], "succeeded");
    assert!(rec["chowned"].as_u64().unwrap() >= 3, "{rec}");
    assert!(!dir.join(".sparkctl-incomplete.json").exists());

    // Left to its default, the container runs as the invoking user and writes as it; a
    // secret from the host reaches it and nothing sparkctl writes or prints.
    const SECRET: &str = "hf_secret_value_4321";
    j.job(
        "as-user",
        "id -u > /out/written-by && echo \"$JOB_TOKEN\" > /out/token",
        "env_from_host: [JOB_TOKEN]\n",
    );
    let dry = j
        .cmd(&["run", "as-user", "--dry-run"])
        .env("JOB_TOKEN", SECRET)
        .output()
        .unwrap();
    assert!(
        text(&dry.stdout).contains("-e JOB_TOKEN "),
        "{}",
        text(&dry.stdout)
    );
    let out = j
        .cmd(&["run", "as-user"])
        .env("JOB_TOKEN", SECRET)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!text(&out.stdout).contains(SECRET) && !text(&out.stderr).contains(SECRET));
    let dir = j.out_dir("as-user-out");
    assert_eq!(
        std::fs::read_to_string(dir.join("token")).unwrap().trim(),
        SECRET
    );
    for e in std::fs::read_dir(j.deck.dir.join("state/jobs")).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            assert!(
                !std::fs::read_to_string(&p).unwrap().contains(SECRET),
                "{}",
                p.display()
            );
        }
    }
    assert_eq!(
        std::fs::read_to_string(dir.join("written-by"))
            .unwrap()
            .trim(),
        UID.to_string()
    );
    for (path, uid, _) in owners(&dir) {
        assert_eq!(uid, UID, "{path}");
    }
    assert_eq!(j.latest("as-user")["chowned"], 0);
}

#[test]
fn a_job_killed_midway_keeps_its_logs_and_marks_its_partial_outputs() {
    let j = Jobs::new("job-killed");
    let script = "i=0; while [ $i -lt 100 ]; do i=$((i+1)); echo \"step $i/100\"; echo part > /out/shard-$i; sleep 0.2; done";
    j.job(
        "train",
        script,
        "    expect:\n      - expect-files: {files: [shard-100]}\nprogress: 'step (\\d+)/(\\d+)'\n",
    );
    j.ok(&["run", "train", "--detach"]);
    let dir = j.out_dir("train-out");
    j.wait_for("a few shards", Duration::from_secs(20), || {
        dir.join("shard-3").exists()
    });
    let rec = j.latest("train");
    assert_eq!(rec["state"], "running");
    // Progress from the log, by the recipe's pattern.
    assert!(rec["progress"][1] == 100, "{rec}");
    assert!(j.ok(&["jobs"]).contains("/100"));
    let id = rec["container"].as_str().unwrap().to_string();
    // Killed from outside, as the kernel's OOM killer or a `docker kill` would.
    let kill = id.clone();
    support::block_on(async move {
        support::docker()
            .await
            .kill_container(
                &kill,
                None::<bollard::query_parameters::KillContainerOptions>,
            )
            .await
            .unwrap()
    });
    j.wait_for("the finalize", Duration::from_secs(20), || {
        j.latest("train")["state"] != "running"
    });
    let rec = j.latest("train");
    assert_eq!(rec["state"], "failed", "{rec}");
    let why = rec["explanation"].as_str().unwrap();
    assert!(why.contains("137") && why.contains("SIGKILL"), "{why}");
    // Partial outputs: marked, no fingerprint, the shards left as they were.
    assert!(dir.join(".sparkctl-incomplete.json").exists());
    assert!(rec["outputs"][0]["fingerprint"].is_null());
    assert_eq!(rec["outputs"][0]["incomplete"], true);
    assert!(!dir.join("shard-100").exists() && dir.join("shard-3").exists());
    // The logs: copied into the run, and the container kept.
    let log = std::fs::read_to_string(rec["log"].as_str().unwrap()).unwrap();
    assert!(log.contains("step 3/100"), "{log}");
    assert!(container_exists(&id), "the container is never auto-removed");
    let logs = j.ok(&["logs", "train"]);
    assert!(logs.contains("step 3/100"), "{logs}");
}

#[test]
fn a_detached_job_outlives_the_cli_and_is_listed_followed_and_stopped() {
    let j = Jobs::new("job-detach");
    let script = "trap 'echo got TERM; exit 143' TERM; i=0; while true; do i=$((i+1)); echo \"tick $i\"; echo $i > /out/last; sleep 0.2; done";
    j.job("forever", script, "");
    let cli = j
        .cmd(&["run", "forever"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let dir = j.out_dir("forever-out");
    j.wait_for("ticks", Duration::from_secs(20), || {
        dir.join("last").exists()
    });
    std::thread::sleep(Duration::from_millis(500));
    // Ctrl-C at the CLI: it detaches; the job keeps running.
    unsafe { libc::kill(cli.id() as i32, libc::SIGINT) };
    let out = cli.wait_with_output().unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains("tick 1"),
        "it followed the output: {stdout}"
    );
    assert!(stdout.contains("keeps running, detached"), "{stdout}");
    let before: u64 = std::fs::read_to_string(dir.join("last"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let after: u64 = std::fs::read_to_string(dir.join("last"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(after > before, "still running after the CLI exited");

    let table = j.ok(&["jobs"]);
    assert!(
        table.contains("forever") && table.contains("running"),
        "{table}"
    );
    assert!(j.ok(&["logs", "forever", "--tail", "2"]).contains("tick"));
    let follower = j
        .cmd(&["logs", "forever", "-f"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(1));

    let stopped = j.ok(&["stop", "forever", "--grace", "5s"]);
    assert!(stopped.contains("job forever stopped"), "{stopped}");
    assert!(stopped.contains("sparkctl stop"), "{stopped}");
    let followed = follower.wait_with_output().unwrap();
    let followed = text(&followed.stdout);
    assert!(
        followed.contains("got TERM"),
        "the follower saw the end: {followed}"
    );
    let rec = j.latest("forever");
    assert_eq!(rec["state"], "stopped");
    assert!(dir.join(".sparkctl-incomplete.json").exists());
    assert!(container_exists(rec["container"].as_str().unwrap()));
    let again = j.run(&["stop", "forever"]);
    assert_eq!(again.status.code(), Some(2), "{}", text(&again.stderr));
}

#[test]
fn an_oom_like_exit_is_named() {
    let j = Jobs::new("job-oom");
    j.job(
        "quantize",
        "echo 'Inserted 843 quantizers'; echo 'torch.OutOfMemoryError: CUDA out of memory.'; exit 137",
        "",
    );
    let out = j.run(&["run", "quantize"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("job quantize failed"), "{stdout}");
    assert!(stdout.contains("out of memory (OOM)"), "{stdout}");
    assert!(
        stdout.contains("sparkctl down NAME"),
        "the known line's fix: {stdout}"
    );
    assert!(stdout.contains("marked incomplete"), "{stdout}");
}

#[test]
fn the_free_disk_check_refuses_before_anything_starts() {
    let j = Jobs::new("job-disk");
    j.job("huge", "echo never", "    size: 900t\n");
    let out = j.run(&["run", "huge"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("outputs[0]") && stderr.contains("free"),
        "{stderr}"
    );
    assert!(stderr.contains("nothing was started"), "{stderr}");
    assert!(!j.out_dir("huge-out").exists(), "no output dir was created");
    let runs: Value = serde_json::from_str(&j.ok(&["--json", "jobs"])).unwrap();
    assert_eq!(runs, Value::Array(vec![]), "no run was recorded");
    let state = j.deck.state().display().to_string();
    let none = support::block_on(async move {
        let filters = std::collections::HashMap::from([(
            "label",
            vec![format!("io.sparkctl.state={state}")],
        )]);
        let opts = bollard::query_parameters::ListContainersOptionsBuilder::new()
            .all(true)
            .filters(&filters)
            .build();
        support::docker()
            .await
            .list_containers(Some(opts))
            .await
            .unwrap()
            .is_empty()
    });
    assert!(none, "no container was created");
}

/// A job that copies a real model (config, NVFP4 quant config, safetensors) from its input.
fn model_job(j: &Jobs, name: &str, script: &str) -> PathBuf {
    let input = j.deck.dir.join("bf16");
    std::fs::create_dir_all(&input).unwrap();
    std::fs::write(input.join("config.json"), "{\"model_type\": \"qwen3_5\"}\n").unwrap();
    std::fs::write(
        input.join("hf_quant_config.json"),
        "{\"quantization\": {\"quant_algo\": \"NVFP4\"}}\n",
    )
    .unwrap();
    sparkctl::patch::safetensors::write_fixture(&input.join("model.safetensors"), &[("w", 64)])
        .unwrap();
    j.job(
        name,
        script,
        &format!(
            "    size: 1m\n    expect:\n      - expect: {{file: hf_quant_config.json, pointer: /quantization/quant_algo, equals: NVFP4}}\n      - expect-safetensors: {{}}\ninputs:\n  - {{path: {}, mount: /in}}\n",
            input.display()
        ),
    );
    j.out_dir(&format!("{name}-out"))
}

/// A serving recipe (the sim in a container) whose model is `model`, made by `job`.
fn served_by(j: &Jobs, name: &str, job: &str, model: &Path) {
    j.deck.recipe(
        name,
        &format!(
            "engine: sim\nruntime: docker\nimage: {}\nmodel:\n  path: {}\n  produced_by: {job}\n  patches:\n    - expect-safetensors: {{}}\nserver:\n  port: {}\n  args: [--load-time, 100ms, --ttft, 10ms, --token-rate, \"400\", --tokens, \"8\"]\n  memory_gb: 8\nhealth:\n  timeout: 20s\nbench:\n  suite: tiny\n  gates:\n    thinking_leak: \"== 0%\"\n",
            sim_image(),
            model.display(),
            free_port()
        ),
    );
    j.ok(&["images", "pin", name]);
}

const SUITE: &str = "name: tiny\nwarmup: 1\nruns: 5\ncases:\n  - name: factual\n    turns: [\"What is the capital of Japan?\"]\n    expect: Tokyo\n    max_tokens: 16\n";

fn with_production(j: &Jobs) {
    std::fs::create_dir_all(j.deck.dir.join("recipes/suites")).unwrap();
    std::fs::write(j.deck.dir.join("recipes/suites/tiny.yaml"), SUITE).unwrap();
    j.deck.recipe(
        "prod",
        &format!(
            "engine: sim\nruntime: process\nserver:\n  port: {}\n  args: [--load-time, 100ms, --tokens, \"8\"]\n  memory_gb: 7\nbench:\n  suite: tiny\n",
            free_port()
        ),
    );
    j.ok(&["rollback", "--to", "prod"]);
}

#[test]
fn a_serving_recipe_is_refused_when_its_producing_job_failed() {
    let j = Jobs::new("job-refused");
    let model = model_job(
        &j,
        "export",
        "cp /in/config.json /out/ && echo \"RuntimeError: Invalid device string: 'bfloat16'\" && exit 1",
    );
    with_production(&j);
    let out = j.run(&["run", "export"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("ModelOpt 0.37.0 export bug"), "{stdout}");
    assert!(model.join(".sparkctl-incomplete.json").exists());
    served_by(&j, "served", "export", &model);
    let up = j.run(&["up", "served", "--yes"]);
    let stderr = text(&up.stderr);
    assert_ne!(up.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("producing job export") && stderr.contains("failed"),
        "{stderr}"
    );
    let status = j.deck.status();
    assert!(
        !status.iter().any(|d| d["name"] == "served"),
        "nothing of served was started: {status:?}"
    );
}

#[test]
fn chain_job_outputs_verified_then_up_serves_them_with_lineage() {
    let j = Jobs::new("job-chain");
    let model = model_job(
        &j,
        "quantize",
        "echo 'step 1/2'; cp /in/* /out/ && echo 'step 2/2'",
    );
    with_production(&j);
    let out = j.ok(&["run", "quantize"]);
    assert!(out.contains("job quantize succeeded"), "{out}");
    assert!(out.contains("ok  ") && out.contains("quant_algo"), "{out}");
    let rec = j.latest("quantize");
    let fp = rec["outputs"][0]["fingerprint"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(fp.starts_with("sha256:"), "{rec}");
    assert!(rec["inputs"][0]["fingerprint"]
        .as_str()
        .unwrap()
        .starts_with("sha256:"));
    assert!(!model.join(".sparkctl-incomplete.json").exists());

    served_by(&j, "served", "quantize", &model);
    let up = j.ok(&["up", "served", "--yes"]);
    assert!(up.contains("promoted") || up.contains("serving"), "{up}");
    let runs: Value = serde_json::from_str(&j.ok(&["--json", "history"])).unwrap();
    let run = runs
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["recipe"] == "served")
        .unwrap();
    assert_eq!(run["outcome"], "promoted", "{run}");
    let lineage = &run["produced_by"];
    assert_eq!(lineage["job"], "quantize");
    assert_eq!(lineage["run_id"], rec["run_id"]);
    assert_eq!(lineage["output_fingerprint"], fp.as_str());
    assert_eq!(lineage["image_digest"], rec["image_digest"]);
    assert!(j.ok(&["history"]).contains("made by job quantize"));

    // An input changed after the job ran: the model is older than its inputs.
    j.ok(&["down", "served", "--force"]);
    std::thread::sleep(Duration::from_millis(1100));
    std::fs::write(j.deck.dir.join("bf16/config.json"), "{\"changed\": true}\n").unwrap();
    let again = j.run(&["start", "served"]);
    let stderr = text(&again.stderr);
    assert_ne!(again.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("older than its inputs"), "{stderr}");
}

#[test]
fn bad_job_recipes_are_named_by_file_and_key() {
    let j = Jobs::new("job-bad");
    let path = j.deck.dir.join("recipes/jobs/bad.yaml");
    std::fs::write(
        &path,
        "name: bad\nimage: busybox:1\nargv: [true]\nprogress: 'step (\\d+)'\noutputs:\n  - {path: /tmp/x, mount: out}\n",
    )
    .unwrap();
    let out = j.run(&["recipes", "validate", "bad"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("bad.yaml:4:1: progress: the pattern has 1 group"),
        "{stderr}"
    );
    assert!(stderr.contains("outputs[0].mount"), "{stderr}");
    assert!(
        stderr.contains("argv[0]"),
        "YAML's true is not an argv word: {stderr}"
    );
    std::fs::write(
        &path,
        "name: bad\nimage: busybox:1\nargv: [x]\noutputs: []\nshm: 1g\n",
    )
    .unwrap();
    let stderr = text(&j.run(&["recipes", "validate", "bad"]).stderr);
    assert!(stderr.contains("unknown field `shm`"), "{stderr}");
    assert!(stderr.contains("shm_size"), "did-you-mean: {stderr}");
    assert_eq!(
        std::fs::read_to_string(&path).unwrap().lines().count(),
        5,
        "untouched"
    );
}

#[test]
fn shipped_job_recipes_validate_show_list_and_have_a_schema() {
    let out = support::run(&["recipes", "validate"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for job in [
        "nvfp4-ptq-9b",
        "qat-train-9b",
        "qat-export-9b",
        "gguf-q4km-qat-9b",
    ] {
        assert!(stdout.contains(&format!("ok  job {job} ")), "{stdout}");
        let file = support::repo().join(format!("recipes/jobs/{job}.yaml"));
        let body = std::fs::read_to_string(&file).unwrap();
        assert!(body.starts_with("# seed facts:"), "{job} cites the seeds");
    }
    let show: Value = serde_json::from_slice(
        &support::run(&["--json", "recipes", "show", "nvfp4-ptq-9b"]).stdout,
    )
    .unwrap();
    let argv = support::strings(&show["equivalent_command"]);
    for pair in [
        ["--gpus", "all"],
        ["--ulimit", "memlock=-1"],
        ["--ulimit", "stack=67108864"],
        ["-e", "HF_TOKEN"],
    ] {
        assert!(argv.windows(2).any(|w| w == pair), "{pair:?} in {argv:?}");
    }
    assert!(argv.contains(&"--ipc=host"), "{argv:?}");
    assert!(
        argv.iter().any(|a| a.ends_with(":/models/src:ro")),
        "inputs read-only: {argv:?}"
    );
    assert_eq!(
        argv.last(),
        Some(&show["recipe"]["argv"][2].as_str().unwrap())
    );
    let list = text(&support::run(&["recipes", "list"]).stdout);
    assert!(
        list.contains("qat-export-9b") && list.contains("job"),
        "{list}"
    );
    let schema: Value =
        serde_json::from_slice(&support::run(&["recipes", "schema", "--job"]).stdout).unwrap();
    for key in ["argv", "outputs", "inputs", "progress", "env_from_host"] {
        assert!(
            schema["properties"][key].is_object(),
            "{key} in the job schema"
        );
    }
}

#[test]
fn the_memory_plan_stops_servers_and_asks_before_production() {
    let j = Jobs::new("job-memory");
    with_production(&j);
    j.deck.recipe(
        "big",
        &format!(
            "engine: sim\nruntime: process\nserver:\n  port: {}\n  args: [--load-time, 100ms]\n  memory_gb: 60\n",
            free_port()
        ),
    );
    j.ok(&["start", "big"]);
    // 128 GB pool - 8 reserve = 120; prod 7 + big 60 + this 115 > 120: big must stop, then
    // production too.
    j.job("train", "echo trained > /out/done", "memory_gb: 115\n");
    let dry = j.ok(&["run", "train", "--dry-run"]);
    assert!(
        dry.contains("stops:   big") && dry.contains("stops:   prod"),
        "{dry}"
    );
    assert!(
        j.deck.status_of("big").unwrap()["state"] == "running",
        "dry-run stops nothing"
    );
    // No terminal and no --yes: production is not stopped, nor anything else.
    let refused = j.run(&["run", "train"]);
    let stderr = text(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("needs production prod stopped"), "{stderr}");
    assert_eq!(j.deck.status_of("prod").unwrap()["state"], "running");
    let out = j.ok(&["run", "train", "--yes"]);
    assert!(out.contains("job train succeeded"), "{out}");
    assert_ne!(j.deck.status_of("big").unwrap()["state"], "running");
    assert_ne!(j.deck.status_of("prod").unwrap()["state"], "running");
    // Production comes back with rollback once the job is done.
    j.ok(&["rollback"]);
    assert_eq!(j.deck.status_of("prod").unwrap()["state"], "running");
}

#[test]
fn a_running_job_holds_its_memory_against_servers_and_a_removed_one_is_lost() {
    let j = Jobs::new("job-holds");
    j.job(
        "train",
        "trap 'exit 143' TERM; echo part > /out/partial; while true; do sleep 0.2; done",
        "memory_gb: 100\n",
    );
    j.ok(&["run", "train", "--detach"]);
    j.deck.recipe(
        "big",
        &format!(
            "engine: sim\nruntime: process\nserver:\n  port: {}\n  memory_gb: 60\n",
            free_port()
        ),
    );
    let refused = j.run(&["start", "big"]);
    let stderr = text(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("while job(s) train 100 GB run"), "{stderr}");
    assert!(j.deck.status_of("big").is_none(), "nothing was started");
    // Nor does a second job fit beside it; and `down` points at `stop`.
    j.job("export", "echo x > /out/x", "memory_gb: 30\n");
    let second = j.run(&["run", "export"]);
    let stderr = text(&second.stderr);
    assert_eq!(second.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("running jobs hold train 100 GB"),
        "{stderr}"
    );
    assert!(!j.out_dir("export-out").exists());
    let down = j.run(&["down", "train"]);
    assert_eq!(down.status.code(), Some(2));
    assert!(text(&down.stderr).contains("sparkctl stop train"));

    // Removed behind sparkctl's back: the run is lost, its outputs marked, never a result.
    let rec = j.latest("train");
    let id = rec["container"].as_str().unwrap().to_string();
    j.wait_for("the partial output", Duration::from_secs(20), || {
        j.out_dir("train-out").join("partial").exists()
    });
    support::block_on(async move {
        let opts = bollard::query_parameters::RemoveContainerOptionsBuilder::new()
            .force(true)
            .build();
        support::docker()
            .await
            .remove_container(&id, Some(opts))
            .await
            .unwrap()
    });
    let rec = j.latest("train");
    assert_eq!(rec["state"], "lost", "{rec}");
    assert!(
        rec["explanation"].as_str().unwrap().contains("gone"),
        "{rec}"
    );
    assert!(j
        .out_dir("train-out")
        .join(".sparkctl-incomplete.json")
        .exists());
    // And it no longer holds memory.
    j.ok(&["start", "big"]);
}
