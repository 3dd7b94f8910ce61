//! Two Sparks on one machine: the machine's Docker Engine is node `a` (the head, 10.77.0.1)
//! and a second real dockerd in its own network namespace is node `b` (10.77.0.2, reached
//! over a veth pair and tcp://10.77.0.2:2375). The simulated engine plays Ray's head and
//! worker over that link, and an API server that serves only once both nodes joined.

use std::collections::HashMap;

use bollard::query_parameters::ListContainersOptionsBuilder;
use serde_json::Value;

use crate::support::second_engine;
use crate::support::second_engine::{engine, HOST_ADDR, HOST_IF, NODE_ADDR, NODE_IF, TCP};
use crate::support::two_nodes::*;
use crate::support::{block_on, docker, free_port, http_status, Ran};

#[test]
fn a_group_starts_across_two_engines_and_serves_only_after_the_worker_joined() {
    let t = Two::new("nodes-start");
    let dry = t.deck.ok(&["start", "tp2", "--dry-run"]);
    for part in [
        "a ray-head",
        "b ray-worker",
        "a api",
        "--ray-join",
        "image on nodes",
        "nothing was started",
    ] {
        assert!(dry.contains(part), "{part} in the plan: {dry}");
    }
    assert!(members(false, &t.state()).is_empty() && members(true, &t.state()).is_empty());
    let out = t.deck.ok(&["start", "tp2"]);
    assert!(out.contains("tp2"), "{out}");
    let (a, b) = (members(false, &t.state()), members(true, &t.state()));
    let (head, api, worker) = (&a["ray-head"], &a["api"], &b["ray-worker"]);
    let sim = words(&["/sparkctl", "sim"]);
    assert_eq!(strings(&head["Config"]["Entrypoint"]), sim);
    assert_eq!(
        strings(&head["Config"]["Cmd"]),
        words(&[
            "--ray-head",
            &t.ray_address(),
            "--ray-node-ip",
            HOST_ADDR,
            "--ray-gpus",
            "1"
        ])
    );
    assert_eq!(
        strings(&worker["Config"]["Cmd"]),
        words(&[
            "--ray-join",
            &t.ray_address(),
            "--ray-node-ip",
            NODE_ADDR,
            "--ray-gpus",
            "1"
        ])
    );
    let port = t.port.to_string();
    let mut api_cmd = words(&[
        "--load-time",
        "200ms",
        "--ttft",
        "10ms",
        "--token-rate",
        "400",
        "--tokens",
        "8",
    ]);
    api_cmd.extend(words(&[
        "--host",
        "127.0.0.1",
        "--port",
        &port,
        "--tensor-parallel-size",
        "2",
        "--distributed-executor-backend",
        "ray",
        "--ray-address",
        &t.ray_address(),
        "--ray-nodes",
        "2",
    ]));
    assert_eq!(strings(&api["Config"]["Cmd"]), api_cmd);
    assert_node_env(head, HOST_IF, HOST_ADDR);
    assert_node_env(api, HOST_IF, HOST_ADDR);
    assert_node_env(worker, NODE_IF, NODE_ADDR);
    assert_eq!(env_of(api)["RAY_ADDRESS"], t.ray_address());
    assert!(running(head) && running(api) && running(worker));
    assert_eq!(
        http_status(&format!("http://127.0.0.1:{}", t.port), "/health"),
        Some(200)
    );

    // The API server started only once Ray had the worker, over the veth link.
    let head_log = logs_with_times(false, head["Id"].as_str().unwrap());
    let joined = head_log
        .iter()
        .find(|(_, l)| l.contains(&format!("node {NODE_ADDR} joined")))
        .unwrap_or_else(|| panic!("the worker joined the head: {head_log:?}"));
    let api_started = clock(api["State"]["StartedAt"].as_str().unwrap());
    assert!(
        api_started > joined.0,
        "API server at {api_started}, worker joined at {}",
        joined.0
    );
    let api_log = logs_with_times(false, api["Id"].as_str().unwrap());
    assert!(
        api_log
            .iter()
            .any(|(_, l)| l.contains("Ray cluster: 2 of 2 nodes")),
        "{api_log:?}"
    );

    let status = t.deck.status_of("tp2").expect("tp2 in status");
    assert_eq!(status["state"], "running");
    let mut parts: Vec<String> = status["nodes"]
        .as_array()
        .unwrap_or_else(|| panic!("status shows the group's nodes: {status}"))
        .iter()
        .map(|p| {
            format!(
                "{} {} {}",
                p["node"].as_str().unwrap(),
                p["role"].as_str().unwrap(),
                p["running"]
            )
        })
        .collect();
    parts.sort();
    assert_eq!(
        parts,
        ["a api true", "a ray-head true", "b ray-worker true"]
    );
    let table = t.deck.ok(&["status"]);
    assert!(
        table.contains("tp2 across nodes: a api running, b ray-worker running, a ray-head running"),
        "{table}"
    );
    let logs_b = t.deck.ok(&["logs", "tp2", "--node", "b"]);
    assert!(
        logs_b.contains(&format!("node {NODE_ADDR} joined the cluster")),
        "{logs_b}"
    );

    t.deck.ok(&["down", "tp2"]);
    let (a, b) = (members(false, &t.state()), members(true, &t.state()));
    for (role, v) in a.iter().chain(b.iter()) {
        assert!(!running(v), "{role} still runs after down");
    }
    let run = api["Config"]["Labels"]["io.sparkctl.run-id"]
        .as_str()
        .unwrap();
    let kept = t
        .deck
        .dir
        .join("state/runs")
        .join(run)
        .join("nodes/b-ray-worker.log");
    let kept = std::fs::read_to_string(&kept).unwrap_or_else(|e| panic!("{}: {e}", kept.display()));
    assert!(kept.contains("joined the cluster"), "{kept}");
}

#[test]
fn a_killed_worker_stops_the_group_on_both_engines_and_says_why() {
    let t = Two::new("nodes-kill");
    // Loading takes long enough to kill the worker while sparkctl waits for the server.
    t.recipe("tp2", "--load-time, 6s", TCP);
    let start = Ran::spawn(&mut t.deck.cmd(&["start", "tp2"]));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let worker = loop {
        let (a, b) = (members(false, &t.state()), members(true, &t.state()));
        if let (Some(_), Some(w)) = (a.get("api"), b.get("ray-worker")) {
            break w["Id"].as_str().unwrap().to_string();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the group never got to its API server"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    block_on(async move {
        engine()
            .await
            .kill_container(
                &worker,
                None::<bollard::query_parameters::KillContainerOptions>,
            )
            .await
            .unwrap()
    });
    let err = start
        .wait()
        .exits(1)
        .warns("the group was stopped on every node")
        .warns("[b ray-worker]")
        .warns("[a ray-head]")
        .warns("[a api]")
        .stderr();
    eprintln!("{err}");
    // Which of the two is seen first depends on the race between the watches.
    assert!(
        err.contains(&format!("{NODE_ADDR} died")) || err.contains("node b's ray-worker"),
        "{err}"
    );
    all_stopped(&t);
}

#[test]
fn an_unreachable_node_is_refused_before_anything_starts() {
    let t = Two::new("nodes-gone");
    // Nothing listens on that port of node b.
    t.recipe("tp2", SIM_ARGS, &format!("tcp://{NODE_ADDR}:2399"));
    t.deck
        .sparkctl(&["start", "tp2"])
        .exits(1)
        .warns("node b: cannot reach its Docker Engine at tcp://10.77.0.2:2399")
        .warns("nothing was started");
    assert!(members(false, &t.state()).is_empty() && members(true, &t.state()).is_empty());
}

#[test]
fn an_image_missing_on_a_node_is_copied_and_its_id_verified() {
    let t = Two::with_image("nodes-copy", true);
    let id = block_on(async {
        docker()
            .await
            .inspect_image(sim_image())
            .await
            .unwrap()
            .id
            .unwrap()
    });
    let gone = id.clone();
    block_on(async move {
        let b = engine().await;
        // Whatever an earlier test copied; containers using it are this test's to remove.
        let opts = bollard::query_parameters::RemoveImageOptionsBuilder::new()
            .force(true)
            .build();
        let _ = b.remove_image(&gone, Some(opts), None).await;
        assert!(
            b.inspect_image(&gone).await.is_err(),
            "node b lacks the image now"
        );
    });
    t.deck.ok(&["start", "tp2"]);
    let b = members(true, &t.state());
    assert_eq!(
        b["ray-worker"]["Image"],
        id.as_str(),
        "node b runs the very image id"
    );
    let copied = id.clone();
    let there = block_on(async move {
        engine()
            .await
            .inspect_image(&copied)
            .await
            .unwrap()
            .id
            .unwrap()
    });
    assert_eq!(there, id);
    t.deck.ok(&["down", "tp2"]);
}

#[test]
fn up_and_rollback_of_a_two_node_candidate_over_a_one_node_production() {
    let t = Two::new("nodes-up");
    let prod_port = free_port();
    t.deck.recipe(
        "prod",
        &format!(
            "engine: sim\nruntime: process\nserver:\n  port: {prod_port}\n  args: [--load-time, 200ms, --ttft, 30ms, --token-rate, \"200\", --tokens, \"8\"]\n  memory_gb: 7\nbench:\n  suite: tiny\n  gates:\n    thinking_leak: \"== 0%\"\n"
        ),
    );
    let serving = || {
        let rows = t.deck.status();
        rows.iter()
            .find(|d| d["state"] == "running" && d["role"] == "production")
            .map(|d| d["name"].as_str().unwrap().to_string())
    };
    t.deck.ok(&["rollback", "--to", "prod"]);
    assert_eq!(serving().as_deref(), Some("prod"));

    t.deck
        .sparkctl(&["up", "tp2", "--yes"])
        .promoted("tp2", t.deck.door_port)
        .warns("plan: tp2 (docker, 2 nodes: a, b)");
    assert_eq!(http_status(&t.deck.door_url(), "/v1/models"), Some(200));
    assert_eq!(serving().as_deref(), Some("tp2"));
    let worker = members(true, &t.state())["ray-worker"].clone();
    assert!(running(&worker), "node b's worker serves with it");

    // Node b's worker dies while the group serves production: vLLM's server (the sim's)
    // dies with it, and the front door's watch brings the whole group back, orphans first.
    let id = worker["Id"].as_str().unwrap().to_string();
    block_on(async move {
        engine()
            .await
            .kill_container(&id, None::<bollard::query_parameters::KillContainerOptions>)
            .await
            .unwrap()
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    loop {
        let b = members(true, &t.state());
        let back = b["ray-worker"]["Id"] != worker["Id"] && running(&b["ray-worker"]);
        if back && http_status(&t.deck.door_url(), "/v1/models") == Some(200) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the group never came back: {:?}",
            t.deck.status()
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let a = members(false, &t.state());
    assert!(
        running(&a["api"]) && running(&a["ray-head"]),
        "the whole group is back"
    );

    let out = t.deck.ok(&["rollback"]);
    assert!(out.contains("rolled back"), "{out}");
    assert_eq!(serving().as_deref(), Some("prod"));
    assert_eq!(http_status(&t.deck.door_url(), "/v1/models"), Some(200));
    all_stopped(&t);
}

#[test]
fn a_worker_that_never_joins_stops_the_group_after_the_join_timeout() {
    // Node b cannot reach the head (a blackhole route in its namespace) while its engine still
    // answers on its unix socket; the link is node b's alone meanwhile (write lock).
    let t = Two::with_image("nodes-nojoin", true);
    t.recipe_joining("tp2", SIM_ARGS, &second_engine::socket(), "3s");
    let head = format!("{HOST_ADDR}/32");
    let route = ["netns", "exec", second_engine::NETNS, "ip", "route"];
    let blackhole = [&route[..], &["add", "blackhole", &head]].concat();
    assert!(std::process::Command::new("ip")
        .args(&blackhole)
        .status()
        .unwrap()
        .success());
    let start = t.deck.sparkctl(&["start", "tp2"]);
    let unblock = [&route[..], &["del", "blackhole", &head]].concat();
    assert!(std::process::Command::new("ip")
        .args(&unblock)
        .status()
        .unwrap()
        .success());
    start
        .exits(1)
        .warns("Ray reports 1 of 2 nodes (1 of 2 GPUs) after 3s: a worker never joined")
        .warns("the group was stopped on every node")
        .warns("[b ray-worker]");
    assert!(
        !members(false, &t.state()).contains_key("api"),
        "the API server never started"
    );
    all_stopped(&t);
}

#[test]
fn a_node_whose_model_differs_is_refused_naming_the_files() {
    use second_engine::{MODEL, MODEL_ON_B};
    // The model paths are node b's alone while this runs (write lock).
    let t = Two::with_image("nodes-model", true);
    let files = [
        ("config.json", "{\"model_type\": \"qwen3_5\"}\n"),
        ("tokenizer.json", "{}\n"),
    ];
    for dir in [MODEL, MODEL_ON_B] {
        // Emptied, not removed: node b's mount holds on to the directory itself.
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            std::fs::remove_file(e.path()).unwrap();
        }
        for (name, body) in files {
            std::fs::write(format!("{dir}/{name}"), body).unwrap();
        }
    }
    // The sim passes no model flag; the model is mounted on every node all the same.
    let with_model = |t: &Two| {
        let path = t.deck.dir.join("recipes/tp2.yaml");
        let text = std::fs::read_to_string(&path).unwrap();
        let text = text.replace("server:\n", &format!("model:\n  path: {MODEL}\nserver:\n"));
        std::fs::write(&path, text).unwrap();
    };
    with_model(&t);
    t.deck.ok(&["start", "tp2"]);
    t.deck.ok(&["down", "tp2"]);

    std::fs::write(
        format!("{MODEL_ON_B}/config.json"),
        "{\"model_type\": \"other\"}\n",
    )
    .unwrap();
    std::fs::remove_file(format!("{MODEL_ON_B}/tokenizer.json")).unwrap();
    let started_before = members(true, &t.state()).len();
    t.deck
        .sparkctl(&["start", "tp2"])
        .exits(1)
        .warns(&format!(
            "node b's model at {MODEL} is not the head's: config.json (differs), tokenizer.json (missing or unreadable)"
        ))
        .warns("nothing was started");
    assert_eq!(
        members(true, &t.state()).len(),
        started_before,
        "nothing new on node b"
    );
}

#[test]
fn a_group_whose_server_died_is_cleaned_by_down_and_by_the_next_start() {
    let t = Two::new("nodes-orphan");
    t.deck.ok(&["start", "tp2"]);
    let api = members(false, &t.state())["api"]["Id"]
        .as_str()
        .unwrap()
        .to_string();
    // The API server dies on its own: Ray's head and the worker are left running.
    block_on(async move {
        docker()
            .await
            .kill_container(
                &api,
                None::<bollard::query_parameters::KillContainerOptions>,
            )
            .await
            .unwrap()
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(running(&members(true, &t.state())["ray-worker"]));
    // The next start stops them first (they hold the Ray port), then serves.
    t.deck.ok(&["start", "tp2"]);
    let workers: Vec<Value> = {
        let state = t.state();
        block_on(async move {
            let filters = HashMap::from([(
                "label",
                vec![
                    format!("io.sparkctl.state={state}"),
                    "io.sparkctl.role=ray-worker".into(),
                ],
            )]);
            let opts = ListContainersOptionsBuilder::new()
                .all(true)
                .filters(&filters)
                .build();
            let list = engine().await.list_containers(Some(opts)).await.unwrap();
            list.into_iter()
                .map(|c| serde_json::to_value(c).unwrap())
                .collect()
        })
    };
    assert_eq!(workers.len(), 2, "one worker per run on node b");
    assert_eq!(
        workers.iter().filter(|w| w["State"] == "running").count(),
        1,
        "{workers:?}"
    );
    // Its server dies again; `down` still stops the rest on every node.
    let api = members(false, &t.state())["api"]["Id"]
        .as_str()
        .unwrap()
        .to_string();
    block_on(async move {
        docker()
            .await
            .kill_container(
                &api,
                None::<bollard::query_parameters::KillContainerOptions>,
            )
            .await
            .unwrap()
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    t.deck.ok(&["down", "tp2"]);
    all_stopped(&t);
}

#[test]
fn ctrl_c_during_a_group_up_stops_it_on_both_engines_and_nothing_is_left_half_started() {
    let t = Two::new("nodes-int");
    t.recipe("tp2", "--load-time, 6s", TCP);
    let up = Ran::spawn(&mut t.deck.cmd(&["up", "tp2", "--yes"]));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !members(false, &t.state()).contains_key("api") {
        assert!(
            std::time::Instant::now() < deadline,
            "the group never got to its API server"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    up.interrupt();
    up.wait().exits(130).warns("interrupted");
    all_stopped(&t);

    // Running, a second `up` of it is refused; whatever the refusal's clean-up does to the
    // running instance (today: `up`'s restore stops it, as for a one-node recipe), it does to
    // the whole group: no node is left half-started.
    t.recipe("tp2", SIM_ARGS, TCP);
    t.deck.ok(&["start", "tp2"]);
    let err = t
        .deck
        .sparkctl(&["up", "tp2", "--yes"])
        .exits(1)
        .warns("tp2 is already running")
        .stderr();
    let (a, b) = (members(false, &t.state()), members(true, &t.state()));
    let states = [
        running(&a["api"]),
        running(&a["ray-head"]),
        running(&b["ray-worker"]),
    ];
    assert!(states.iter().all(|s| *s == states[0]), "{states:?}: {err}");
    t.deck.ok(&["down", "tp2"]);
}
