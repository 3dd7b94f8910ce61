//! Other nodes' Docker Engines, reached from here: the address a recipe's node names,
//! connected with a timeout, and an error that names the node and what to check.

use bollard::Docker;

use crate::error::{Error, Result};
use crate::recipe::nodes::{Endpoint, Node, Nodes};

/// Seconds a call to a node's engine may take before it counts as unreachable.
const ENGINE_TIMEOUT_SECS: u64 = 20;

/// Connects to a node's engine and agrees on an API version; the error names the node
/// and the address, and says what to check.
pub(crate) async fn connect(node: &Node) -> Result<Docker> {
    let endpoint = node.endpoint()?;
    if let Some(why) = endpoint.unsupported() {
        return Err(Error::Usage(format!("node {}: {why}", node.name)));
    }
    let unreachable = |e: Option<bollard::errors::Error>| Error::NodeUnreachable {
        node: node.name.clone(),
        endpoint: endpoint.to_string(),
        cause: e.map(|e| e.to_string()),
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
    .map_err(|e| unreachable(Some(e)))?;
    // A node whose engine is gone must be noticed in seconds, not at a TCP timeout.
    let docker = docker.with_timeout(std::time::Duration::from_secs(ENGINE_TIMEOUT_SECS));
    tokio::time::timeout(
        std::time::Duration::from_secs(5),
        docker.clone().negotiate_version(),
    )
    .await
    .map_err(|_| unreachable(None))?
    .map_err(|e| unreachable(Some(e)))
}

/// A node and its connected engine.
#[derive(Clone, Debug)]
pub(crate) struct Connected {
    pub(crate) node: Node,
    pub(crate) docker: Docker,
}

/// Connects to every node at once; refuses (naming each) when any cannot be reached, so
/// nothing starts on some nodes and not others.
pub(crate) async fn connect_all(nodes: &Nodes) -> Result<Vec<Connected>> {
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
    Err(Error::NodesUnreachable { nodes: problems })
}

/// Connects to the nodes that answer; the others are named in the notes.
pub(crate) async fn reach(nodes: &Nodes) -> (Vec<Connected>, Vec<String>) {
    let mut conns = Vec::new();
    let mut notes = Vec::new();
    for n in &nodes.members {
        match connect(n).await {
            Ok(docker) => conns.push(Connected {
                node: n.clone(),
                docker,
            }),
            Err(e) => notes.push(e.to_string()),
        }
    }
    (conns, notes)
}
