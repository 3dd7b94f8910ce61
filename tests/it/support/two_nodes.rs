//! The two-node deck of `tests/it/nodes.rs`: recipes across the machine's engine (node a) and
//! the second engine (node b), and what the tests read back from both engines.
#![allow(dead_code)]

use std::collections::HashMap;

use bollard::query_parameters::{ListContainersOptionsBuilder, LogsOptionsBuilder};
use futures_util::StreamExt;
use serde_json::Value;

use super::second_engine::{
    self, engine, second_engine, HOST_ADDR, HOST_IF, NODE_ADDR, NODE_IF, TCP,
};
use crate::support::{self, block_on, docker, free_port, Deck};

/// The sim image these tests run, under a tag of their own: other test binaries (and other
/// worktrees on this machine) rebuild `sparkctl-sim:test` from their own binaries, which may
/// not know the sim's Ray parts.
pub fn sim_image() -> &'static str {
    static BUILT: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    const TAG: &str = "sparkctl-sim:nodes-test";
    BUILT.get_or_init(|| {
        block_on(async { support::build_sim_image(&docker().await, TAG).await });
    });
    TAG
}

/// Node b's copy of the sim image: the copy test removes it (write), the others run it.
static IMAGE_ON_B: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// A deck whose containers are removed from both engines when the test ends.
pub struct Two {
    pub deck: Deck,
    _image: Box<dyn std::any::Any>,
    pub port: u16,
    pub ray_port: u16,
}

impl Drop for Two {
    fn drop(&mut self) {
        if let Ok(state) = self.deck.dir.join("state").canonicalize() {
            let state = state.display().to_string();
            block_on(async move { second_engine::remove_containers_of(&state).await });
        }
    }
}

pub const SUITE: &str = "name: tiny\nwarmup: 1\nruns: 5\ncases:\n  - name: factual\n    turns: [\"What is the capital of Japan?\"]\n    expect: Tokyo\n    max_tokens: 16\n";

pub const SIM_ARGS: &str =
    "--load-time, 200ms, --ttft, 10ms, --token-rate, \"400\", --tokens, \"8\"";

impl Two {
    pub fn new(tag: &str) -> Two {
        Two::with_image(tag, false)
    }

    /// `remove_image`: this test removes node b's image, so none other may run it meanwhile.
    pub fn with_image(tag: &str, remove_image: bool) -> Two {
        second_engine();
        let image: Box<dyn std::any::Any> = if remove_image {
            Box::new(IMAGE_ON_B.write().unwrap_or_else(|e| e.into_inner()))
        } else {
            Box::new(IMAGE_ON_B.read().unwrap_or_else(|e| e.into_inner()))
        };
        let deck = Deck::new(tag);
        std::fs::create_dir_all(deck.dir.join("recipes/suites")).unwrap();
        std::fs::write(deck.dir.join("recipes/suites/tiny.yaml"), SUITE).unwrap();
        let two = Two {
            deck,
            _image: image,
            port: free_port(),
            ray_port: free_port(),
        };
        two.recipe("tp2", SIM_ARGS, TCP);
        two
    }

    /// A two-node sim recipe; `worker_engine` is how node b's engine is reached.
    pub fn recipe(&self, name: &str, args: &str, worker_engine: &str) {
        self.recipe_joining(name, args, worker_engine, "20s");
    }

    pub fn recipe_joining(&self, name: &str, args: &str, worker_engine: &str, join: &str) {
        self.deck.recipe(
            name,
            &format!(
                concat!(
                    "engine: sim\nruntime: docker\nimage: {image}\nserver:\n  port: {port}\n",
                    "  args: [{args}]\n  memory_gb: 12\nhealth:\n  timeout: 30s\n",
                    "bench:\n  suite: tiny\n  gates:\n    thinking_leak: \"== 0%\"\n",
                    "nodes:\n  ray_port: {ray}\n  join_timeout: {join}\n  members:\n",
                    "    - {{name: a, engine: local, address: {ha}, interface: {hi}}}\n",
                    "    - {{name: b, engine: \"{we}\", address: {na}, interface: {ni}, memory_gb: 100}}\n",
                ),
                image = sim_image(),
                port = self.port,
                args = args,
                ray = self.ray_port,
                join = join,
                ha = HOST_ADDR,
                hi = HOST_IF,
                we = worker_engine,
                na = NODE_ADDR,
                ni = NODE_IF,
            ),
        );
        self.deck.ok(&["images", "pin", name]);
    }

    pub fn ray_address(&self) -> String {
        format!("{HOST_ADDR}:{}", self.ray_port)
    }

    pub fn state(&self) -> String {
        self.deck.state().display().to_string()
    }
}

/// This deck's containers on one engine: role → inspect JSON.
pub fn members(on_b: bool, state: &str) -> HashMap<String, Value> {
    let state = state.to_string();
    block_on(async move {
        let docker = if on_b { engine().await } else { docker().await };
        let filters = HashMap::from([("label", vec![format!("io.sparkctl.state={state}")])]);
        let opts = ListContainersOptionsBuilder::new()
            .all(true)
            .filters(&filters)
            .build();
        let mut out = HashMap::new();
        for c in docker.list_containers(Some(opts)).await.unwrap() {
            let id = c.id.unwrap();
            // Removed between the list and the inspect (a start that failed): not a member.
            let Ok(info) = docker.inspect_container(&id, None).await else {
                continue;
            };
            let v = serde_json::to_value(&info).unwrap();
            let role = v["Config"]["Labels"]["io.sparkctl.role"]
                .as_str()
                .unwrap_or("-")
                .to_string();
            // Of several runs' containers in one role, the running one.
            if !out.get(&role).is_some_and(running) {
                out.insert(role, v);
            }
        }
        out
    })
}

pub fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

pub fn env_of(v: &Value) -> HashMap<String, String> {
    strings(&v["Config"]["Env"])
        .into_iter()
        .filter_map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect()
}

pub fn words(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// Seconds of the day of an RFC 3339 time as docker writes it.
pub fn clock(ts: &str) -> f64 {
    let time = ts.split('T').nth(1).unwrap().trim_end_matches('Z');
    let parts: Vec<f64> = time.split(':').map(|p| p.parse().unwrap()).collect();
    parts[0] * 3600.0 + parts[1] * 60.0 + parts[2]
}

/// A container's log lines with their times.
pub fn logs_with_times(on_b: bool, id: &str) -> Vec<(f64, String)> {
    let id = id.to_string();
    block_on(async move {
        let docker = if on_b { engine().await } else { docker().await };
        let opts = LogsOptionsBuilder::new()
            .stdout(true)
            .stderr(true)
            .timestamps(true)
            .build();
        let mut stream = docker.logs(&id, Some(opts));
        let mut out = Vec::new();
        while let Some(Ok(chunk)) = stream.next().await {
            for line in String::from_utf8_lossy(&chunk.into_bytes()).lines() {
                if let Some((ts, rest)) = line.split_once(' ') {
                    out.push((clock(ts), rest.to_string()));
                }
            }
        }
        out
    })
}

pub fn running(v: &Value) -> bool {
    v["State"]["Running"] == true
}

pub const PER_NODE: [&str; 5] = [
    "NCCL_SOCKET_IFNAME",
    "GLOO_SOCKET_IFNAME",
    "UCX_NET_DEVICES",
    "VLLM_HOST_IP",
    "RAY_NODE_IP_ADDRESS",
];

pub fn assert_node_env(v: &Value, interface: &str, address: &str) {
    let env = env_of(v);
    let want = [interface, interface, interface, address, address];
    for (k, w) in PER_NODE.iter().zip(want) {
        assert_eq!(env.get(*k).map(String::as_str), Some(w), "{k} in {env:?}");
    }
    assert!(!env.contains_key("NCCL_IB_HCA"), "no ib_hca given: {env:?}");
    assert_eq!(v["HostConfig"]["NetworkMode"], "host");
}

pub fn all_stopped(t: &Two) {
    let (a, b) = (members(false, &t.state()), members(true, &t.state()));
    assert!(!b.is_empty(), "node b had containers of this deck");
    for (role, v) in a.iter().chain(b.iter()) {
        assert!(!running(v), "{role} still runs: {}", v["Name"]);
    }
}
