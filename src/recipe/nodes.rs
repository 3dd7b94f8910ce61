//! A recipe's `nodes:` block (two Sparks linked by their ConnectX-7 ports): the schema,
//! how each node's engine address parses, and the checks made before anything runs. Each
//! problem names the key and says what to write instead. Running a group is `node`'s.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Recipe, Runtime};
use crate::engine::Engine;
use crate::error::{Diagnostic, Error, Result};
use crate::units::HumanDuration;

/// The `nodes:` block of a recipe. The first member is the head: it runs Ray's head and
/// the API server, and must be the engine sparkctl itself talks to (its front door routes
/// there).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Nodes {
    /// Port of Ray's head (GCS) on the head's high-speed address.
    #[serde(default = "default_ray_port")]
    pub(crate) ray_port: u16,
    /// GPUs each node brings to Ray (a Spark has one).
    #[serde(default = "default_gpus")]
    pub(crate) gpus_per_node: u32,
    /// How long every worker may take to join Ray before the start fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) join_timeout: Option<HumanDuration>,
    /// The nodes, head first.
    pub(crate) members: Vec<Node>,
}

fn default_ray_port() -> u16 {
    6379
}

fn default_gpus() -> u32 {
    1
}

/// One node.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Node {
    /// What users type (`sparkctl logs NAME --node spark-b`).
    pub(crate) name: String,
    /// Its Docker Engine: `local` (DOCKER_HOST or the default socket), `unix:///path`,
    /// `tcp://host:port`, or `ssh://user@host`.
    pub(crate) engine: String,
    /// A directory with ca.pem, cert.pem and key.pem for a `tcp://` engine (as docker's
    /// DOCKER_CERT_PATH).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tls: Option<String>,
    /// Its address on the high-speed interface: Ray, NCCL and the other nodes use it.
    pub(crate) address: String,
    /// The high-speed interface's name (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME, UCX).
    pub(crate) interface: String,
    /// The RDMA device for NCCL (NCCL_IB_HCA), e.g. `rocep1s0f1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ib_hca: Option<String>,
    /// Memory this node may give the group, in GB (default: sparkctl's budget).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) memory_gb: Option<f64>,
}

/// How sparkctl reaches a node's Docker Engine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub(crate) enum Endpoint {
    Local,
    Unix { path: PathBuf },
    Tcp { addr: String, tls: Option<PathBuf> },
    Ssh { target: String },
}

impl Endpoint {
    /// Parses a node's `engine` (and `tls`); the error says what is accepted.
    pub(crate) fn parse(engine: &str, tls: Option<&str>) -> std::result::Result<Endpoint, String> {
        let endpoint = if engine == "local" {
            Endpoint::Local
        } else if let Some(path) = engine.strip_prefix("unix://") {
            Endpoint::Unix {
                path: PathBuf::from(super::expand_home(path)),
            }
        } else if let Some(addr) = engine.strip_prefix("tcp://") {
            let (host, port) = addr
                .rsplit_once(':')
                .ok_or_else(|| format!("`{engine}` has no port; write tcp://HOST:PORT"))?;
            if host.is_empty() || port.parse::<u16>().is_err() {
                return Err(format!("`{engine}` is not tcp://HOST:PORT"));
            }
            Endpoint::Tcp {
                addr: addr.to_string(),
                tls: tls.map(|t| PathBuf::from(super::expand_home(t))),
            }
        } else if let Some(target) = engine.strip_prefix("ssh://") {
            if target.is_empty() {
                return Err(format!("`{engine}` names no host; write ssh://USER@HOST"));
            }
            Endpoint::Ssh {
                target: target.to_string(),
            }
        } else {
            return Err(format!(
                "`{engine}` is not an engine address; write `local`, unix:///PATH, \
                 tcp://HOST:PORT or ssh://USER@HOST"
            ));
        };
        if tls.is_some() && !matches!(endpoint, Endpoint::Tcp { .. }) {
            return Err("`tls` applies to tcp:// engines only".into());
        }
        Ok(endpoint)
    }

    /// Why this sparkctl cannot use the endpoint, if it cannot: its Engine API client is
    /// built without the ssh and TLS transports (they would add a TLS stack to every build).
    pub(crate) fn unsupported(&self) -> Option<String> {
        match self {
            Endpoint::Ssh { target } => Some(format!(
                "ssh://{target}: this sparkctl has no SSH transport yet; forward the node's \
                 socket (`ssh -NL /run/spark-b.sock:/var/run/docker.sock {target}`) and write \
                 engine: unix:///run/spark-b.sock"
            )),
            Endpoint::Tcp { tls: Some(_), addr } => Some(format!(
                "tcp://{addr} with tls: this sparkctl has no TLS transport yet; forward the \
                 node's socket over SSH and use a unix:// engine instead"
            )),
            _ => None,
        }
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Local => write!(f, "local"),
            Endpoint::Unix { path } => write!(f, "unix://{}", path.display()),
            Endpoint::Tcp { addr, tls: None } => write!(f, "tcp://{addr}"),
            Endpoint::Tcp { addr, tls: Some(_) } => write!(f, "tcp://{addr} (TLS)"),
            Endpoint::Ssh { target } => write!(f, "ssh://{target}"),
        }
    }
}

impl Node {
    pub(crate) fn endpoint(&self) -> Result<Endpoint> {
        Endpoint::parse(&self.engine, self.tls.as_deref())
            .map_err(|e| Error::Usage(format!("node {}: engine: {e}", self.name)))
    }
}

/// Environment names sparkctl sets per node; a recipe's `server.env` may not set them
/// (one value cannot be right for two nodes whose interfaces differ).
pub(crate) const PER_NODE_ENV: &[&str] = &[
    "NCCL_SOCKET_IFNAME",
    "GLOO_SOCKET_IFNAME",
    "UCX_NET_DEVICES",
    "NCCL_IB_HCA",
    "OMPI_MCA_btl_tcp_if_include",
    "VLLM_HOST_IP",
    "RAY_NODE_IP_ADDRESS",
];

/// Problems of a recipe's `nodes:`; empty when it has none.
pub(super) fn check(path: &Path, src: &str, r: &Recipe, out: &mut Vec<Diagnostic>) {
    let Some(nodes) = &r.nodes else { return };
    let mut bad = |key: &str, message: String, help: &str| {
        out.push(super::diag_at(path, src, key, message, Some(help.into())));
    };
    if !matches!(r.engine, Engine::Vllm | Engine::Sim) {
        bad(
            "nodes",
            format!("engine {} does not run across nodes here", r.engine),
            "multi-node recipes use engine: vllm (Ray + tensor parallel); remove nodes: to run on one",
        );
    }
    if r.runtime() != Runtime::Docker {
        bad(
            "nodes",
            "a multi-node recipe runs in containers".into(),
            "use runtime: docker",
        );
    }
    if nodes.members.len() < 2 {
        bad(
            "nodes.members",
            format!("{} node(s): a group needs two or more", nodes.members.len()),
            "list the head first and at least one worker, or remove nodes: to run on one engine",
        );
    }
    for name in r.server.env.keys() {
        if PER_NODE_ENV.contains(&name.as_str()) {
            bad(
                &format!("server.env.{name}"),
                format!("{name} is set per node by sparkctl"),
                "remove it: it comes from each node's interface, ib_hca and address",
            );
        }
    }
    check_members(nodes, &mut bad);
}

fn check_members(nodes: &Nodes, bad: &mut impl FnMut(&str, String, &str)) {
    let mut names: Vec<&str> = Vec::new();
    let mut addresses: Vec<&str> = Vec::new();
    for (i, n) in nodes.members.iter().enumerate() {
        let key = |k: &str| format!("nodes.members[{i}].{k}");
        if names.contains(&n.name.as_str()) {
            bad(
                &key("name"),
                format!("node name `{}` appears twice", n.name),
                "give each node its own name",
            );
        }
        names.push(&n.name);
        if n.address.parse::<IpAddr>().is_err() {
            bad(
                &key("address"),
                format!("`{}` is not an IP address", n.address),
                "write the node's address on its high-speed interface, e.g. 192.168.100.10",
            );
        } else if addresses.contains(&n.address.as_str()) {
            bad(
                &key("address"),
                format!("address {} appears twice", n.address),
                "each node has its own address",
            );
        }
        addresses.push(&n.address);
        let interface_ok = !n.interface.is_empty()
            && n.interface.len() <= 15
            && n.interface
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        if !interface_ok {
            bad(
                &key("interface"),
                format!("`{}` is not an interface name", n.interface),
                "write the name `ip link` shows, e.g. enp1s0f1np1",
            );
        }
        check_engine(i, n, bad);
        if n.memory_gb.is_some_and(|m| m.is_nan() || m <= 0.0) {
            bad(
                &key("memory_gb"),
                "a node's memory must be above 0".into(),
                "write its budget in GB, e.g. 110",
            );
        }
    }
}

/// A node's `engine`: parses; the head's is the engine sparkctl runs beside.
fn check_engine(i: usize, n: &Node, bad: &mut impl FnMut(&str, String, &str)) {
    let key = format!("nodes.members[{i}].engine");
    match Endpoint::parse(&n.engine, n.tls.as_deref()) {
        Err(e) => bad(
            &key,
            e,
            "e.g. local, unix:///run/spark-b.sock or tcp://10.0.0.2:2375",
        ),
        Ok(Endpoint::Local) => {}
        Ok(_) if i > 0 => {}
        Ok(other) => bad(
            &key,
            format!("the head ({other}) must be the engine sparkctl runs beside"),
            "put the node this machine is first, with engine: local",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_and_refuse_with_a_reason() {
        assert_eq!(Endpoint::parse("local", None), Ok(Endpoint::Local));
        assert_eq!(
            Endpoint::parse("tcp://10.0.0.2:2375", None),
            Ok(Endpoint::Tcp {
                addr: "10.0.0.2:2375".into(),
                tls: None
            })
        );
        assert!(Endpoint::parse("tcp://10.0.0.2", None)
            .unwrap_err()
            .contains("no port"));
        assert!(Endpoint::parse("http://x:1", None)
            .unwrap_err()
            .contains("not an engine address"));
        assert!(Endpoint::parse("local", Some("/certs"))
            .unwrap_err()
            .contains("tcp:// engines only"));
        let ssh = Endpoint::parse("ssh://me@spark-b", None).unwrap();
        assert!(ssh.unsupported().unwrap().contains("unix://"));
    }
}
