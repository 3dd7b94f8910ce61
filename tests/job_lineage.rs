//! Jobs and the recipes around them: job recipes checked like serving recipes, and the
//! lineage a serving recipe names (`model.produced_by`): refused when its producing job
//! failed, served with its lineage recorded when it succeeded — the simulated engine in a
//! FROM-scratch container serving what a busybox job wrote, on the real Docker Engine.

mod jobs_support;
mod support;

use std::time::Duration;

use jobs_support::*;
use serde_json::Value;
use support::text;

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
    let ran = j.run(&["run", "quantize"]);
    let (out, err) = (text(&ran.stdout), text(&ran.stderr));
    assert_eq!(ran.status.code(), Some(0), "{out}{err}");
    // Not a terminal here: progress comes as lines, with the time left once there is a rate.
    assert!(err.contains("progress 1/2 (50%)"), "{err}");
    assert!(err.contains("progress 2/2 (100%), about 0s left"), "{err}");
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
    j.ok(&["up", "served", "--yes"]);
    // Production now is the instance serving the job's outputs, not merely some `up` that
    // exited 0.
    let row = j.deck.status_of("served").expect("served runs");
    assert_eq!(row["production"], true, "{row}");
    assert_eq!(row["model_fingerprint"], fp.as_str(), "{row}");
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
    // The run it names is one `history show` opens: inputs → image → outputs.
    let job_run: Value =
        serde_json::from_str(&j.ok(&["history", "show", rec["run_id"].as_str().unwrap()])).unwrap();
    assert_eq!(job_run["outputs"][0]["fingerprint"], fp.as_str());
    assert_eq!(job_run["inputs"], rec["inputs"]);

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
