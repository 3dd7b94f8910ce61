//! Jobs and the machine they share: the memory plan (servers stopped to make room,
//! production only when confirmed), memory a running job holds against servers and other
//! jobs, a removed container's run, only this state dir's labelled containers stopped, and
//! `prune` of old job containers — on the real Docker Engine with busybox jobs.

use std::time::Duration;

use serde_json::Value;

use crate::jobs_support::*;
use crate::support::{self, free_port};

/// A process-runtime sim recipe `name` taking `memory_gb`, with these server args.
fn server(j: &Jobs, name: &str, memory_gb: u32, args: &str) {
    j.deck.recipe(
        name,
        &format!(
            r#"engine: sim
runtime: process
server:
  port: {}
  args: [{args}]
  memory_gb: {memory_gb}
"#,
            free_port()
        ),
    );
}

#[test]
fn the_memory_plan_stops_servers_and_asks_before_production() {
    let j = Jobs::new("job-memory");
    with_production(&j);
    server(&j, "big", 60, "--load-time, 100ms");
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
    j.sparkctl(&["run", "train"])
        .exits(2)
        .warns("needs production prod stopped");
    assert_eq!(j.deck.status_of("prod").unwrap()["state"], "running");
    j.sparkctl(&["run", "train", "--yes"])
        .succeeds()
        .says("job train succeeded");
    assert_ne!(j.deck.status_of("big").unwrap()["state"], "running");
    assert_ne!(j.deck.status_of("prod").unwrap()["state"], "running");
    // Production comes back with rollback once the job is done.
    j.ok(&["rollback"]);
    assert_eq!(j.deck.status_of("prod").unwrap()["state"], "running");
}

/// A 100 GB job `train` running detached, writing a partial output, and a 60 GB server
/// `big` that does not fit beside it.
fn train_holding_100_gb(tag: &str) -> Jobs {
    let j = Jobs::new(tag);
    j.job(
        "train",
        "trap 'exit 143' TERM; echo part > /out/partial; while true; do sleep 0.2; done",
        "memory_gb: 100\n",
    );
    j.ok(&["run", "train", "--detach"]);
    server(&j, "big", 60, "");
    j
}

#[test]
fn a_running_job_holds_its_memory_against_servers_and_other_jobs() {
    let j = train_holding_100_gb("job-holds");
    let status = j.ok(&["status"]);
    assert!(
        status.contains("job train running") && status.contains("holds 100 GB"),
        "{status}"
    );
    j.sparkctl(&["start", "big"])
        .exits(1)
        .warns("while job(s) train 100 GB run");
    assert!(j.deck.status_of("big").is_none(), "nothing was started");
    // Nor does a second job fit beside it; and `down` points at `stop`.
    j.job("export", "echo x > /out/x", "memory_gb: 30\n");
    j.sparkctl(&["run", "export"])
        .exits(1)
        .warns("running jobs hold train 100 GB");
    assert!(!j.out_dir("export-out").exists());
    j.sparkctl(&["down", "train"])
        .exits(2)
        .warns("sparkctl stop train");
}

/// Removed behind sparkctl's back: the run is lost, its outputs marked, never a result.
#[test]
fn a_job_whose_container_is_removed_is_lost_and_holds_no_memory() {
    let j = train_holding_100_gb("job-lost");
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

#[test]
fn only_containers_labelled_as_this_state_dir_s_job_are_stopped() {
    let j = Jobs::new("job-labels");
    j.job(
        "forever",
        "trap 'exit 143' TERM; while true; do sleep 0.2; done",
        "",
    );
    j.ok(&["run", "forever", "--detach"]);
    // A container sparkctl did not make, and a record tampered to point at it.
    let name = format!("sparkctl-test-intruder-{}", std::process::id());
    let (image, n) = (support::busybox_image().to_string(), name.clone());
    let intruder = support::block_on(async move {
        let docker = support::docker().await;
        let body = bollard::models::ContainerCreateBody {
            image: Some(image),
            cmd: Some(vec!["sleep".into(), "60".into()]),
            ..Default::default()
        };
        let opts = bollard::query_parameters::CreateContainerOptionsBuilder::new()
            .name(&n)
            .build();
        let id = docker.create_container(Some(opts), body).await.unwrap().id;
        docker.start_container(&id, None).await.unwrap();
        id
    });
    let rec = j.latest("forever");
    let file = j.deck.dir.join(format!(
        "state/jobs/{}.json",
        rec["run_id"].as_str().unwrap()
    ));
    let original = std::fs::read_to_string(&file).unwrap();
    let own = rec["container"].as_str().unwrap();
    std::fs::write(&file, original.replace(own, &intruder)).unwrap();
    j.sparkctl(&["stop", "forever"])
        .exits(1)
        .warns("only its own containers");
    let (id, n) = (intruder.clone(), name.clone());
    let running = support::block_on(async move {
        let docker = support::docker().await;
        let state = docker
            .inspect_container(&id, None)
            .await
            .unwrap()
            .state
            .unwrap();
        let opts = bollard::query_parameters::RemoveContainerOptionsBuilder::new()
            .force(true)
            .build();
        docker.remove_container(&n, Some(opts)).await.unwrap();
        state.running == Some(true)
    });
    assert!(running, "the intruder was not touched");
    std::fs::write(&file, original).unwrap();
    assert!(j
        .ok(&["stop", "forever", "--grace", "2s"])
        .contains("job forever stopped"));
}

#[test]
fn prune_removes_old_job_containers_and_keeps_records_logs_and_outputs() {
    let j = Jobs::new("job-prune");
    j.job(
        "quick",
        "echo \"run at $(date +%s%N)\"; echo ok > /out/done",
        "",
    );
    for _ in 0..3 {
        j.ok(&["run", "quick"]);
    }
    let runs: Value = serde_json::from_str(&j.ok(&["--json", "jobs"])).unwrap();
    let runs = runs.as_array().unwrap().clone();
    assert_eq!(runs.len(), 3);
    let dry = j.ok(&["prune", "--keep", "1"]);
    assert!(
        dry.contains("job quick") && dry.contains("would remove 2"),
        "{dry}"
    );
    assert!(runs
        .iter()
        .all(|r| container_exists(r["container"].as_str().unwrap())));
    j.ok(&["prune", "--keep", "1", "--yes"]);
    // Newest first: the newest container stays, the two older go; every record and log stays.
    assert!(container_exists(runs[0]["container"].as_str().unwrap()));
    for r in &runs[1..] {
        assert!(!container_exists(r["container"].as_str().unwrap()));
        let log = std::fs::read_to_string(r["log"].as_str().unwrap()).unwrap();
        assert!(log.contains("run at"), "{log}");
    }
    let after: Value = serde_json::from_str(&j.ok(&["--json", "jobs"])).unwrap();
    assert_eq!(after.as_array().unwrap().len(), 3);
    assert!(after
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["state"] == "succeeded"));
    assert!(j.out_dir("quick-out").join("done").exists());
}
