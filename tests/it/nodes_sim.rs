//! Multi-node recipes without a second engine: a bad `nodes:` block refused naming each
//! key, and the simulated engine's stand-in for Ray (real processes, real TCP).

use crate::support::{self, free_port, http_status, in_repo, Deck};

#[test]
fn a_bad_nodes_block_is_refused_naming_each_key() {
    let deck = Deck::new("nodes-bad");
    deck.recipe(
        "bad",
        r#"engine: vllm
image: vllm/vllm-openai:v1
server:
  port: 8000
  env: {NCCL_SOCKET_IFNAME: eth0}
nodes:
  members:
    - {name: a, engine: "tcp://10.0.0.1:2375", address: 10.0.0.1, interface: enp1s0f1np1}
    - {name: b, engine: "ssh:/b", address: 10.0.0.1, interface: "en p1"}
"#,
    );
    let validate = deck.sparkctl(&["recipes", "validate"]).exits(2);
    for key in [
        "server.env.NCCL_SOCKET_IFNAME",
        "nodes.members[0].engine",
        "nodes.members[1].engine",
        "nodes.members[1].address",
        "nodes.members[1].interface",
    ] {
        assert!(
            validate.stderr().contains(key),
            "{key} named in: {}",
            validate.shown()
        );
    }
    validate.warns("put the node this machine is first, with engine: local");
}

#[test]
fn the_sim_api_server_serves_only_once_every_ray_node_joined_and_dies_when_one_leaves() {
    use std::process::Stdio;
    use std::time::{Duration, Instant};
    let head_addr = format!("127.0.0.1:{}", free_port());
    let quiet = |args: &[&str]| {
        support::sparkctl()
            .arg("sim")
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut head = quiet(&["--ray-head", &head_addr, "--ray-node-ip", "127.0.0.1"]);
    let mut api = support::Sim::start(&[
        "--ray-address",
        &head_addr,
        "--ray-nodes",
        "2",
        "--tensor-parallel-size",
        "2",
        "--distributed-executor-backend",
        "ray",
    ]);
    let status = || in_repo(&["sim", "--ray-status", &head_addr]).stdout();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        http_status(&api.url, "/health"),
        Some(503),
        "one node of two: not ready"
    );
    let one = status();
    assert_eq!(one.matches(" 1 node_").count(), 1, "{one}");
    assert!(one.contains(" 0.0/1.0 GPU"), "{one}");

    let mut worker = quiet(&["--ray-join", &head_addr, "--ray-node-ip", "127.0.0.2"]);
    api.wait_ready(Duration::from_secs(10));
    let two = status();
    assert_eq!(two.matches(" 1 node_").count(), 2, "{two}");
    assert!(two.contains(" 0.0/2.0 GPU"), "{two}");

    // A node leaving ends the API server, as a dead Ray actor ends vLLM.
    worker.kill().unwrap();
    let _ = worker.wait();
    let deadline = Instant::now() + Duration::from_secs(30);
    let code = loop {
        if let Some(s) = api.child.try_wait().unwrap() {
            break s.code();
        }
        assert!(
            Instant::now() < deadline,
            "the API server outlived its Ray node"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(code, Some(1));
    head.kill().unwrap();
    let _ = head.wait();
}
