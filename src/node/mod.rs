//! Nodes: the Docker Engines a multi-node recipe runs on (two Sparks linked by their
//! ConnectX-7 ports), how sparkctl reaches each, and the high-speed interface the group
//! talks over. A recipe with `nodes:` runs the existing distributed engine — Ray plus vLLM
//! tensor parallel — across them (`plan`, `group`), and fails as one.

pub mod check;
pub mod doctor;
pub mod group;
pub mod image;
pub mod model;
pub mod plan;
pub mod ray;
pub mod start;

use std::path::PathBuf;

use bollard::Docker;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::units::HumanDuration;

/// The `nodes:` block of a recipe. The first member is the head: it runs Ray's head and
/// the API server, and must be the engine sparkctl itself talks to (its front door routes
/// there).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Nodes {
    /// Port of Ray's head (GCS) on the head's high-speed address.
    #[serde(default = "default_ray_port")]
    pub ray_port: u16,
    /// GPUs each node brings to Ray (a Spark has one).
    #[serde(default = "default_gpus")]
    pub gpus_per_node: u32,
    /// How long every worker may take to join Ray before the start fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub join_timeout: Option<HumanDuration>,
    /// The nodes, head first.
    pub members: Vec<Node>,
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
pub struct Node {
    /// What users type (`sparkctl logs NAME --node spark-b`).
    pub name: String,
    /// Its Docker Engine: `local` (DOCKER_HOST or the default socket), `unix:///path`,
    /// `tcp://host:port`, or `ssh://user@host`.
    pub engine: String,
    /// A directory with ca.pem, cert.pem and key.pem for a `tcp://` engine (as docker's
    /// DOCKER_CERT_PATH).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<String>,
    /// Its address on the high-speed interface: Ray, NCCL and the other nodes use it.
    pub address: String,
    /// The high-speed interface's name (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME, UCX).
    pub interface: String,
    /// The RDMA device for NCCL (NCCL_IB_HCA), e.g. `rocep1s0f1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ib_hca: Option<String>,
    /// Memory this node may give the group, in GB (default: sparkctl's budget).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_gb: Option<f64>,
}

/// How sparkctl reaches a node's Docker Engine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Endpoint {
    Local,
    Unix { path: PathBuf },
    Tcp { addr: String, tls: Option<PathBuf> },
    Ssh { target: String },
}

impl Endpoint {
    /// Parses a node's `engine` (and `tls`); the error says what is accepted.
    pub fn parse(engine: &str, tls: Option<&str>) -> std::result::Result<Endpoint, String> {
        let endpoint = if engine == "local" {
            Endpoint::Local
        } else if let Some(path) = engine.strip_prefix("unix://") {
            Endpoint::Unix {
                path: PathBuf::from(crate::recipe::expand_home(path)),
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
                tls: tls.map(|t| PathBuf::from(crate::recipe::expand_home(t))),
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
    pub fn unsupported(&self) -> Option<String> {
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
    pub fn endpoint(&self) -> Result<Endpoint> {
        Endpoint::parse(&self.engine, self.tls.as_deref())
            .map_err(|e| Error::Usage(format!("node {}: engine: {e}", self.name)))
    }
}

/// Seconds a call to a node's engine may take before it counts as unreachable.
const ENGINE_TIMEOUT_SECS: u64 = 20;

/// Connects to a node's engine and agrees on an API version; the error names the node
/// and the address, and says what to check.
pub async fn connect(node: &Node) -> Result<Docker> {
    let endpoint = node.endpoint()?;
    if let Some(why) = endpoint.unsupported() {
        return Err(Error::Usage(format!("node {}: {why}", node.name)));
    }
    let unreachable = |e: bollard::errors::Error| {
        Error::Failed(format!(
            "node {}: cannot reach its Docker Engine at {endpoint} ({e}); is dockerd running \
             there, and is the address right? `sparkctl doctor` checks every node",
            node.name
        ))
    };
    let version = bollard::API_DEFAULT_VERSION;
    let docker = match &endpoint {
        Endpoint::Local => Docker::connect_with_local_defaults(),
        Endpoint::Unix { path } => {
            Docker::connect_with_unix(&path.display().to_string(), ENGINE_TIMEOUT_SECS, version)
        }
        Endpoint::Tcp { addr, .. } => Docker::connect_with_http(addr, ENGINE_TIMEOUT_SECS, version),
        Endpoint::Ssh { .. } => unreachable!("refused above"),
    }
    .map_err(unreachable)?;
    // A node whose engine is gone must be noticed in seconds, not at a TCP timeout.
    let docker = docker.with_timeout(std::time::Duration::from_secs(ENGINE_TIMEOUT_SECS));
    tokio::time::timeout(
        std::time::Duration::from_secs(5),
        docker.clone().negotiate_version(),
    )
    .await
    .map_err(|_| {
        Error::Failed(format!(
            "node {}: its Docker Engine at {endpoint} did not answer within 5 s; is the node up \
             and the address right? `sparkctl doctor` checks every node",
            node.name
        ))
    })?
    .map_err(unreachable)
}

/// A node and its connected engine.
#[derive(Clone, Debug)]
pub struct Connected {
    pub node: Node,
    pub docker: Docker,
}

/// Connects to every node at once; refuses (naming each) when any cannot be reached, so
/// nothing starts on some nodes and not others.
pub async fn connect_all(nodes: &Nodes) -> Result<Vec<Connected>> {
    let tries = futures_util::future::join_all(nodes.members.iter().map(|n| async move {
        connect(n).await.map(|docker| Connected {
            node: n.clone(),
            docker,
        })
    }))
    .await;
    let mut ok = Vec::new();
    let mut problems = Vec::new();
    for t in tries {
        match t {
            Ok(c) => ok.push(c),
            Err(e) => problems.push(e.to_string()),
        }
    }
    if problems.is_empty() {
        return Ok(ok);
    }
    Err(Error::Failed(format!(
        "not every node's engine answers; nothing was started:\n  {}",
        problems.join("\n  ")
    )))
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
