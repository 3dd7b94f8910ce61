//! Two Sparks on one machine (see `tests/it/nodes.rs` for the setup): `doctor` on every node,
//! each node's memory plan, and old runs' Ray containers pruned on every node.

use std::collections::HashMap;

use bollard::query_parameters::ListContainersOptionsBuilder;
use serde_json::Value;

use crate::support::second_engine;
use crate::support::second_engine::{engine, NODE_ADDR};
use crate::support::two_nodes::*;
use crate::support::{block_on, free_port, Ran};

#[test]
fn doctor_checks_every_node_and_names_the_one_that_does_not_answer() {
    let t = Two::new("nodes-doctor");
    let rows = |ran: &Ran| -> Vec<Value> {
        // The checks first; a failed doctor then prints its error as JSON too.
        serde_json::Deserializer::from_slice(&ran.out.stdout)
            .into_iter::<Value>()
            .next()
            .unwrap_or_else(|| panic!("no JSON: {}", ran.shown()))
            .unwrap()
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let verdict = |rows: &[Value], name: &str| -> String {
        rows.iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no check {name}: {rows:?}"))["verdict"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let ok = rows(&t.deck.sparkctl(&["--json", "doctor", "tp2"]));
    for name in [
        "node a engine",
        "node b engine",
        "node a interface",
        "node b reachable from a",
    ] {
        assert_eq!(verdict(&ok, name), "ok", "{name}: {ok:?}");
    }
    t.recipe("tp2", SIM_ARGS, &format!("tcp://{NODE_ADDR}:2399"));
    let bad = rows(&t.deck.sparkctl(&["--json", "doctor", "tp2"]).exits(1));
    assert_eq!(verdict(&bad, "node b engine"), "fail", "{bad:?}");

    // Node b's engine answers, but nothing holds its high-speed address on the link.
    t.recipe("tp2", SIM_ARGS, second_engine::TCP);
    let path = t.deck.dir.join("recipes/tp2.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let text = text.replace(&format!("address: {NODE_ADDR}"), "address: 10.77.0.9");
    std::fs::write(&path, text).unwrap();
    let silent = rows(&t.deck.sparkctl(&["--json", "doctor", "tp2"]));
    assert_eq!(verdict(&silent, "node b engine"), "ok", "{silent:?}");
    assert_eq!(
        verdict(&silent, "node b reachable from a"),
        "fail",
        "{silent:?}"
    );
}

#[test]
fn each_node_has_its_own_memory_plan() {
    let t = Two::new("nodes-mem");
    t.deck.ok(&["start", "tp2"]);
    // A second group on the same two nodes: the head's 128 GB hold both, node b's 100 do not.
    let body = std::fs::read_to_string(t.deck.dir.join("recipes/tp2.yaml"))
        .unwrap()
        .replace("name: tp2", "name: big")
        .replace("memory_gb: 12", "memory_gb: 95")
        .replace(
            &format!("port: {}", t.port),
            &format!("port: {}", free_port()),
        )
        .replace(
            &format!("ray_port: {}", t.ray_port),
            &format!("ray_port: {}", free_port()),
        );
    std::fs::write(t.deck.dir.join("recipes/big.yaml"), body).unwrap();
    t.deck.ok(&["images", "pin", "big"]);
    t.deck
        .sparkctl(&["start", "big"])
        .exits(1)
        .warns("big: node b cannot hold its share (95 GB, server.memory_gb) in its 100 GB")
        .warns("beside sparkctl-tp2-")
        .warns("nothing was started");
    let a = members(false, &t.state());
    assert!(
        a.values()
            .all(|v| v["Config"]["Labels"]["io.sparkctl.group"] == "tp2"),
        "nothing of big started"
    );
    t.deck.ok(&["down", "tp2"]);
}

#[test]
fn old_runs_ray_containers_are_pruned_on_every_node() {
    let t = Two::new("nodes-prune");
    let workers_on_b = || {
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
            engine()
                .await
                .list_containers(Some(opts))
                .await
                .unwrap()
                .len()
        })
    };
    for _ in 0..3 {
        Ran::of(
            t.deck
                .cmd(&["start", "tp2"])
                .env("SPARKCTL_KEEP_EXITED", "1"),
        )
        .succeeds();
        t.deck.ok(&["down", "tp2"]);
    }
    // Run 1 went when run 3 started; run 2 (the newest ended then) and run 3 stay.
    assert_eq!(workers_on_b(), 2);
}
