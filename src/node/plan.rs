//! What a multi-node recipe runs on each node, decided before anything starts: Ray's head
//! and the API server on the head node, a Ray worker on every other node, each with the
//! environment that puts NCCL, Gloo, UCX and Ray on the node's high-speed interface.
//! This follows NVIDIA's DGX Spark playbook and vLLM's multi-node guide (`run_cluster.sh`):
//! `ray start --head` / `ray start --address`, then `vllm serve … --tensor-parallel-size N
//! --distributed-executor-backend ray` on the head.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::engine::{Engine, Flag};
use crate::error::{Error, Result};
use crate::recipe::nodes::{Node, Nodes};
use crate::recipe::Recipe;
use crate::runtime::group::Role;

/// One container of the group.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Member {
    pub(crate) node: String,
    pub(crate) role: Role,
    /// Replaces the image's entrypoint (empty: the image's own, e.g. vLLM's API server).
    pub(crate) entrypoint: Vec<String>,
    pub(crate) cmd: Vec<String>,
    pub(crate) env: BTreeMap<String, String>,
}

/// The whole group.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct GroupPlan {
    /// `HEAD_ADDRESS:RAY_PORT`, where workers and the API server find Ray.
    pub(crate) ray_address: String,
    pub(crate) nodes: usize,
    pub(crate) gpus: u32,
    /// Ray head first, then the workers, then the API server: the order they start in.
    pub(crate) members: Vec<Member>,
    /// What asks Ray how many nodes and GPUs it has, run inside the Ray head's container.
    pub(crate) status_command: Vec<String>,
}

/// The per-node environment: every collective library on the high-speed interface, and
/// Ray and vLLM told the node's own address on it (else they pick the first interface,
/// usually the management LAN, and NCCL crawls or hangs).
pub(crate) fn node_env(node: &Node) -> BTreeMap<String, String> {
    let mut env = BTreeMap::from([
        ("NCCL_SOCKET_IFNAME".to_string(), node.interface.clone()),
        ("GLOO_SOCKET_IFNAME".to_string(), node.interface.clone()),
        ("UCX_NET_DEVICES".to_string(), node.interface.clone()),
        (
            "OMPI_MCA_btl_tcp_if_include".to_string(),
            node.interface.clone(),
        ),
        ("VLLM_HOST_IP".to_string(), node.address.clone()),
        ("RAY_NODE_IP_ADDRESS".to_string(), node.address.clone()),
    ]);
    if let Some(hca) = &node.ib_hca {
        env.insert("NCCL_IB_HCA".into(), hca.clone());
    }
    env
}

/// How one engine is told its Ray part. Only engines that run on Ray have one.
struct RayWords {
    /// Entrypoint of the Ray containers.
    ray: Vec<String>,
    /// Entrypoint of the API server (empty: the image's).
    api: Vec<String>,
}

fn ray_words(engine: Engine) -> Option<RayWords> {
    let words = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    match engine {
        Engine::Vllm => Some(RayWords {
            ray: words(&["ray"]),
            api: Vec::new(),
        }),
        Engine::Sim => Some(RayWords {
            ray: words(engine.profile().docker_command),
            api: words(engine.profile().docker_command),
        }),
        _ => None,
    }
}

fn ray_cmd(
    engine: Engine,
    role: Role,
    node: &Node,
    ray_address: &str,
    nodes: &Nodes,
) -> Vec<String> {
    let port = nodes.ray_port.to_string();
    let gpus = nodes.gpus_per_node.to_string();
    let bind = format!("{}:{port}", node.address);
    let v: Vec<&str> = match (engine, role) {
        (Engine::Sim, Role::RayHead) => vec![
            "--ray-head",
            &bind,
            "--ray-node-ip",
            &node.address,
            "--ray-gpus",
            &gpus,
        ],
        (Engine::Sim, _) => vec![
            "--ray-join",
            ray_address,
            "--ray-node-ip",
            &node.address,
            "--ray-gpus",
            &gpus,
        ],
        (_, Role::RayHead) => vec![
            "start",
            "--head",
            "--port",
            &port,
            "--node-ip-address",
            &node.address,
            "--num-gpus",
            &gpus,
            "--block",
        ],
        (_, _) => vec![
            "start",
            "--address",
            ray_address,
            "--node-ip-address",
            &node.address,
            "--num-gpus",
            &gpus,
            "--block",
        ],
    };
    v.into_iter().map(String::from).collect()
}

/// What asks Ray for its nodes and GPUs inside the head's container.
fn status_command(engine: Engine, words: &RayWords, ray_address: &str) -> Vec<String> {
    match engine {
        Engine::Sim => [
            words.ray.clone(),
            vec!["--ray-status".into(), ray_address.to_string()],
        ]
        .concat(),
        _ => ["ray", "status", "--address", ray_address]
            .map(String::from)
            .to_vec(),
    }
}

fn push_flag(argv: &mut Vec<String>, flag: Flag, value: &str) {
    if let Flag::Named(name) = flag {
        argv.extend([name.to_string(), value.to_string()]);
    }
}

/// The API server's arguments: the recipe's, the model, and — with host networking, as
/// NCCL needs — the recipe's own host and port, then the tensor-parallel split over Ray.
fn api_cmd(recipe: &Recipe, plan: &GroupPlan, model_mount: Option<&str>) -> Vec<String> {
    let profile = recipe.engine.profile();
    let mut cmd = recipe.server.args.clone();
    if let Some(mount) = model_mount {
        push_flag(&mut cmd, profile.model_flag, mount);
    }
    if let Some(name) = recipe.model.as_ref().and_then(|m| m.served_name.as_ref()) {
        push_flag(&mut cmd, profile.served_name_flag, name);
    }
    push_flag(&mut cmd, profile.host_flag, &recipe.server.host);
    push_flag(&mut cmd, profile.port_flag, &recipe.server.port.to_string());
    cmd.extend([
        "--tensor-parallel-size".to_string(),
        plan.gpus.to_string(),
        "--distributed-executor-backend".to_string(),
        "ray".to_string(),
    ]);
    if recipe.engine == Engine::Sim {
        // The sim's stand-in for vLLM's Ray executor: serve once every node joined.
        cmd.extend([
            "--ray-address".to_string(),
            plan.ray_address.clone(),
            "--ray-nodes".to_string(),
            plan.nodes.to_string(),
        ]);
    }
    cmd
}

impl GroupPlan {
    /// The group a recipe with `nodes:` runs; an error for recipes without, or engines
    /// that do not run on Ray.
    pub(crate) fn new(recipe: &Recipe) -> Result<GroupPlan> {
        let cannot = |why: crate::error::RecipeProblem| Error::RecipeCannot {
            recipe: recipe.name.clone(),
            why,
        };
        let nodes = recipe
            .nodes
            .as_ref()
            .ok_or_else(|| cannot(crate::error::RecipeProblem::NoNodes))?;
        let words = ray_words(recipe.engine).ok_or_else(|| {
            cannot(crate::error::RecipeProblem::NotAcrossNodes {
                engine: recipe.engine.to_string(),
            })
        })?;
        let head = nodes
            .members
            .first()
            .ok_or_else(|| cannot(crate::error::RecipeProblem::NoMembers))?;
        let ray_address = format!("{}:{}", head.address, nodes.ray_port);
        let mut plan = GroupPlan {
            ray_address: ray_address.clone(),
            nodes: nodes.members.len(),
            gpus: nodes.members.len() as u32 * nodes.gpus_per_node,
            members: Vec::new(),
            status_command: status_command(recipe.engine, &words, &ray_address),
        };
        let with_recipe_env = |node: &Node| {
            let mut env = recipe.server.env.clone();
            env.extend(node_env(node));
            env
        };
        for (i, node) in nodes.members.iter().enumerate() {
            let role = if i == 0 {
                Role::RayHead
            } else {
                Role::RayWorker
            };
            plan.members.push(Member {
                node: node.name.clone(),
                role,
                entrypoint: words.ray.clone(),
                cmd: ray_cmd(recipe.engine, role, node, &ray_address, nodes),
                env: with_recipe_env(node),
            });
        }
        let mount = recipe
            .model
            .as_ref()
            .map(|m| m.mount.clone().unwrap_or_else(|| "/model".into()));
        let cmd = api_cmd(recipe, &plan, mount.as_deref());
        let mut env = with_recipe_env(head);
        // vLLM's driver joins the running cluster instead of starting one of its own.
        env.insert("RAY_ADDRESS".into(), ray_address);
        plan.members.push(Member {
            node: head.name.clone(),
            role: Role::Api,
            entrypoint: words.api,
            cmd,
            env,
        });
        Ok(plan)
    }

    /// The equivalent commands a person could type, each after `[NODE ROLE]`, for review
    /// (the recipe's mounts, GPUs and IPC apply to every one).
    pub(crate) fn command_lines(&self, image: &str) -> Vec<String> {
        let mut v = Vec::new();
        for m in &self.members {
            v.push(format!("[{} {}]", m.node, m.role.as_str()));
            v.extend(["docker", "run", "-d", "--network", "host"].map(String::from));
            for (k, val) in &m.env {
                v.extend(["-e".into(), format!("{k}={val}")]);
            }
            if let [first, rest @ ..] = m.entrypoint.as_slice() {
                v.extend(["--entrypoint".into(), first.clone(), image.to_string()]);
                v.extend(rest.iter().cloned());
            } else {
                v.push(image.to_string());
            }
            v.extend(m.cmd.iter().cloned());
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_SPARKS: &str = "name: tp2\nengine: vllm\nimage: vllm/vllm-openai:v1\n\
model:\n  path: /models/q27\n  served_name: q27\nserver:\n  port: 8010\n  args: [--max-model-len, \"8192\"]\n  env: {NCCL_DEBUG: INFO}\n\
nodes:\n  members:\n    - {name: a, engine: local, address: 192.168.100.10, interface: enp1s0f1np1, ib_hca: rocep1s0f1}\n    \
- {name: b, engine: \"tcp://10.0.0.2:2375\", address: 192.168.100.11, interface: enp1s0f1np1}\n";

    fn words(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_vllm_group_runs_ray_then_vllm_serve_over_ray() {
        let recipe: Recipe = serde_yaml_ng::from_str(TWO_SPARKS).unwrap();
        let plan = GroupPlan::new(&recipe).unwrap();
        assert_eq!((plan.nodes, plan.gpus), (2, 2));
        let [head, worker, api] = plan.members.as_slice() else {
            panic!("three members: {:?}", plan.members)
        };
        assert_eq!((head.node.as_str(), head.role), ("a", Role::RayHead));
        assert_eq!(head.entrypoint, words(&["ray"]));
        assert_eq!(
            head.cmd,
            words(&[
                "start",
                "--head",
                "--port",
                "6379",
                "--node-ip-address",
                "192.168.100.10",
                "--num-gpus",
                "1",
                "--block"
            ])
        );
        assert_eq!(
            worker.cmd,
            words(&[
                "start",
                "--address",
                "192.168.100.10:6379",
                "--node-ip-address",
                "192.168.100.11",
                "--num-gpus",
                "1",
                "--block"
            ])
        );
        assert_eq!(worker.env["NCCL_SOCKET_IFNAME"], "enp1s0f1np1");
        assert_eq!(worker.env["VLLM_HOST_IP"], "192.168.100.11");
        assert!(!worker.env.contains_key("NCCL_IB_HCA"));
        assert_eq!(head.env["NCCL_IB_HCA"], "rocep1s0f1");
        assert_eq!(head.env["NCCL_DEBUG"], "INFO");
        assert!(
            api.entrypoint.is_empty(),
            "the image's entrypoint is vllm serve"
        );
        assert_eq!(
            api.cmd,
            words(&[
                "--max-model-len",
                "8192",
                "--model",
                "/model",
                "--served-model-name",
                "q27",
                "--host",
                "127.0.0.1",
                "--port",
                "8010",
                "--tensor-parallel-size",
                "2",
                "--distributed-executor-backend",
                "ray"
            ])
        );
        assert_eq!(api.env["RAY_ADDRESS"], "192.168.100.10:6379");
        assert_eq!(
            plan.status_command,
            words(&["ray", "status", "--address", "192.168.100.10:6379"])
        );
    }
}
