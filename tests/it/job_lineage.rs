//! Jobs and the recipes around them: job recipes checked like serving recipes, and the
//! lineage a serving recipe names (`model.produced_by`): refused when its producing job
//! failed, served with its lineage recorded when it succeeded — the simulated engine in a
//! FROM-scratch container serving what a busybox job wrote, on the real Docker Engine.

use std::time::Duration;

use serde_json::Value;

use crate::jobs_support::*;
use crate::support::{self, in_repo};

/// A model job that copies its input in two steps, reporting each.
fn quantize(j: &Jobs) -> std::path::PathBuf {
    model_job(
        j,
        "quantize",
        "echo 'step 1/2'; cp /in/* /out/ && echo 'step 2/2'",
    )
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
    j.sparkctl(&["run", "export"])
        .exits(1)
        .says("ModelOpt 0.37.0 export bug");
    assert!(model.join(".sparkctl-incomplete.json").exists());
    let run_id = j.latest("export")["run_id"].as_str().unwrap().to_string();
    served_by(&j, "served", "export", &model);
    j.sparkctl(&["up", "served", "--yes"])
        .exits(1)
        .warns(&format!("its producing job export (run {run_id}) failed"));
    let status = j.deck.status();
    assert!(
        !status.iter().any(|d| d["name"] == "served"),
        "nothing of served was started: {status:?}"
    );
}

#[test]
fn a_job_run_shows_its_progress_and_verifies_its_outputs() {
    let j = Jobs::new("job-verified");
    let model = quantize(&j);
    let ran = j.sparkctl(&["run", "quantize"]).succeeds();
    // Not a terminal here: progress comes as lines, with the time left once there is a rate.
    let ran = ran
        .warns("progress 1/2 (50%)")
        .warns("progress 2/2 (100%), about 0s left")
        .says("job quantize succeeded");
    let out = ran.stdout();
    assert!(
        out.lines()
            .any(|l| l.trim_start().starts_with("ok ") && l.contains("quant_algo")),
        "the quant_algo check passed: {out}"
    );
    let rec = j.latest("quantize");
    assert!(
        rec["outputs"][0]["fingerprint"]
            .as_str()
            .unwrap()
            .starts_with("sha256:"),
        "{rec}"
    );
    assert!(rec["inputs"][0]["fingerprint"]
        .as_str()
        .unwrap()
        .starts_with("sha256:"));
    assert!(!model.join(".sparkctl-incomplete.json").exists());
}

#[test]
fn up_serves_a_job_s_outputs_and_records_their_lineage() {
    let j = Jobs::new("job-chain");
    let model = quantize(&j);
    with_production(&j);
    j.sparkctl(&["run", "quantize"]).succeeds();
    let rec = j.latest("quantize");
    let fp = rec["outputs"][0]["fingerprint"].as_str().unwrap();

    served_by(&j, "served", "quantize", &model);
    j.sparkctl(&["up", "served", "--yes"])
        .promoted("served", j.deck.door_port);
    // Production now is the instance serving the job's outputs.
    let row = j.deck.status_of("served").expect("served runs");
    assert_eq!(row["production"], true, "{row}");
    assert_eq!(row["model_fingerprint"], fp, "{row}");
    let runs = j.sparkctl(&["--json", "history"]).succeeds().json();
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
    assert_eq!(lineage["output_fingerprint"], fp);
    assert_eq!(lineage["image_digest"], rec["image_digest"]);
    j.sparkctl(&["history"])
        .succeeds()
        .says("made by job quantize");
    // The run it names is one `history show` opens: inputs → image → outputs.
    let job_run = j
        .sparkctl(&["history", "show", rec["run_id"].as_str().unwrap()])
        .succeeds()
        .json();
    assert_eq!(job_run["outputs"][0]["fingerprint"], fp);
    assert_eq!(job_run["inputs"], rec["inputs"]);
}

#[test]
fn a_model_older_than_its_job_s_inputs_is_refused() {
    let j = Jobs::new("job-stale");
    let model = quantize(&j);
    j.sparkctl(&["run", "quantize"]).succeeds();
    served_by(&j, "served", "quantize", &model);
    // An input changed after the job ran (modification times count to the second).
    std::thread::sleep(Duration::from_millis(1100));
    std::fs::write(j.deck.dir.join("bf16/config.json"), "{\"changed\": true}\n").unwrap();
    j.sparkctl(&["start", "served"])
        .exits(1)
        .warns("it is older than its inputs");
    assert!(
        j.deck.status_of("served").is_none(),
        "nothing of served was started"
    );
}

/// Writes `recipes/jobs/bad.yaml`, returning its path.
fn bad_job(j: &Jobs, yaml: &str) -> std::path::PathBuf {
    let path = j.deck.dir.join("recipes/jobs/bad.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

#[test]
fn a_bad_job_recipe_is_named_by_file_and_key() {
    let j = Jobs::new("job-bad");
    bad_job(
        &j,
        r#"name: bad
image: busybox:1
argv: [true]
progress: 'step (\d+)'
outputs:
  - {path: /tmp/x, mount: out}
"#,
    );
    j.sparkctl(&["recipes", "validate", "bad"])
        .exits(2)
        .warns("bad.yaml:4:1: progress: the pattern has 1 group")
        .warns("outputs[0].mount")
        // YAML's true is not an argv word.
        .warns("argv[0]");
}

#[test]
fn an_unknown_job_key_gets_a_did_you_mean_and_its_file_is_left_alone() {
    let j = Jobs::new("job-unknown-key");
    let yaml = r#"name: bad
image: busybox:1
argv: [x]
outputs: []
shm: 1g
"#;
    let path = bad_job(&j, yaml);
    j.sparkctl(&["recipes", "validate", "bad"])
        .exits(2)
        .warns("unknown field `shm`")
        .warns("shm_size");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), yaml, "untouched");
}

#[test]
fn the_shipped_job_recipes_validate_and_cite_their_facts() {
    let stdout = in_repo(&["recipes", "validate"]).succeeds().stdout();
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
}

#[test]
fn a_shipped_job_recipe_shows_its_docker_command() {
    let show = in_repo(&["--json", "recipes", "show", "nvfp4-ptq-9b"])
        .succeeds()
        .json();
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
}

#[test]
fn recipes_list_shows_the_job_recipes_as_jobs() {
    let list = in_repo(&["recipes", "list"]).succeeds().stdout();
    assert!(
        list.lines()
            .any(|l| l.split_whitespace().take(2).eq(["qat-export-9b", "job"])),
        "qat-export-9b listed with engine job: {list}"
    );
}

#[test]
fn the_job_recipe_schema_has_the_job_keys() {
    let schema: Value = in_repo(&["recipes", "schema", "--job"]).succeeds().json();
    for key in ["argv", "outputs", "inputs", "progress", "env_from_host"] {
        assert!(
            schema["properties"][key].is_object(),
            "{key} in the job schema"
        );
    }
}
