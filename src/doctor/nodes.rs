//! `doctor` for multi-node recipes: per node, its engine, the NVIDIA runtime, a GPU, the
//! high-speed interface, and the head reaching every other node on it.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::Duration;

use super::{Check, Verdict};
use crate::recipe::nodes::{Node, Nodes};

fn check(name: String, verdict: Verdict, detail: impl Into<String>) -> Check {
    Check {
        name,
        verdict,
        detail: detail.into(),
    }
}

/// Checks for every node of one recipe's group, and the links from its head.
pub(super) async fn group(nodes: &Nodes, wants_gpus: bool) -> Vec<Check> {
    let mut checks = Vec::new();
    for (i, node) in nodes.members.iter().enumerate() {
        checks.extend(node_checks(node, i == 0, wants_gpus).await);
    }
    checks.extend(reach_checks(nodes).await);
    checks
}

async fn node_checks(node: &Node, head: bool, wants_gpus: bool) -> Vec<Check> {
    let name = |what: &str| format!("node {} {what}", node.name);
    let mut out = Vec::new();
    let docker = match crate::runtime::remote::connect(node).await {
        Ok(d) => d,
        Err(e) => return vec![check(name("engine"), Verdict::Fail, e.to_string())],
    };
    let info = docker.info().await.ok();
    let version = info
        .as_ref()
        .and_then(|i| i.server_version.clone())
        .unwrap_or_else(|| "?".into());
    out.push(check(
        name("engine"),
        Verdict::Ok,
        format!("Docker Engine {version} at {}", node.engine),
    ));
    let nvidia = info
        .as_ref()
        .and_then(|i| i.runtimes.as_ref())
        .is_some_and(|r| r.contains_key("nvidia"));
    out.push(match (nvidia, wants_gpus) {
        (true, _) => check(
            name("nvidia runtime"),
            Verdict::Ok,
            "`nvidia` runtime registered",
        ),
        (false, true) => check(
            name("nvidia runtime"),
            Verdict::Fail,
            "no `nvidia` runtime: the group asks for GPUs; install the NVIDIA Container Toolkit \
             on that node (nvidia-ctk runtime configure --runtime=docker) and restart dockerd",
        ),
        (false, false) => check(
            name("nvidia runtime"),
            Verdict::Warn,
            "no `nvidia` runtime (the recipe asks for no GPU)",
        ),
    });
    out.push(gpu_check(&name("gpu"), head, wants_gpus).await);
    if head {
        out.push(interface_check(node));
    }
    out
}

async fn gpu_check(name: &str, head: bool, wants_gpus: bool) -> Check {
    if !head {
        // No shell on another node: its GPU shows when Ray reports the group's GPUs.
        return check(
            name.into(),
            Verdict::Ok,
            "counted at start: the group waits until Ray reports every node's GPU",
        );
    }
    let missing = match wants_gpus {
        true => Verdict::Fail,
        false => Verdict::Warn,
    };
    match crate::nvidia::gpus().await {
        Ok(g) if !g.is_empty() => check(name.into(), Verdict::Ok, format!("{} GPU(s)", g.len())),
        Ok(_) => check(name.into(), missing, "nvidia-smi lists no GPU"),
        Err(e) => check(name.into(), missing, e.to_string()),
    }
}

/// On this machine (the head): the interface is up and holds the node's address.
fn interface_check(node: &Node) -> Check {
    let name = format!("node {} interface", node.name);
    let state = std::fs::read_to_string(format!("/sys/class/net/{}/operstate", node.interface))
        .map(|s| s.trim().to_string());
    let Ok(state) = state else {
        return check(
            name,
            Verdict::Fail,
            format!(
                "no interface {} on this machine; `ip link` lists them (nodes.members[].interface)",
                node.interface
            ),
        );
    };
    let Ok(addr) = node.address.parse::<IpAddr>() else {
        return check(
            name,
            Verdict::Fail,
            format!("`{}` is not an address", node.address),
        );
    };
    // Binding works only to an address this machine holds.
    let holds = UdpSocket::bind(SocketAddr::new(addr, 0)).is_ok();
    match (state.as_str(), holds) {
        ("up" | "unknown", true) => check(
            name,
            Verdict::Ok,
            format!("{} is {state} with {}", node.interface, node.address),
        ),
        (_, true) => check(
            name,
            Verdict::Fail,
            format!(
                "{} is {state}; bring it up (`ip link set {} up`)",
                node.interface, node.interface
            ),
        ),
        (_, false) => check(
            name,
            Verdict::Fail,
            format!(
                "this machine does not hold {} (nodes.members[].address); give {} that address",
                node.address, node.interface
            ),
        ),
    }
}

/// From the head's own high-speed address, every other node's answers (a refused
/// connection is an answer: the host is there; silence is not). The connection leaves from
/// the head's address, so it tests that link and not whatever the default route reaches.
async fn reach_checks(nodes: &Nodes) -> Vec<Check> {
    let Some(head) = nodes.members.first() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for n in &nodes.members[1..] {
        let name = format!("node {} reachable from {}", n.name, head.name);
        let (Ok(from), Ok(to)) = (head.address.parse::<IpAddr>(), n.address.parse::<IpAddr>())
        else {
            out.push(check(
                name,
                Verdict::Fail,
                "the nodes' addresses are not IP addresses",
            ));
            continue;
        };
        out.push(
            match reach(from, SocketAddr::new(to, nodes.ray_port)).await {
                Ok(()) => check(
                    name,
                    Verdict::Ok,
                    format!("{to} answers {from} on the link"),
                ),
                Err(e) => check(name, Verdict::Fail, e),
            },
        );
    }
    out
}

async fn reach(from: IpAddr, to: SocketAddr) -> std::result::Result<(), String> {
    let socket = match from {
        IpAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
        IpAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
    }
    .map_err(|e| format!("no socket: {e}"))?;
    socket.bind(SocketAddr::new(from, 0)).map_err(|e| {
        format!(
            "this machine does not hold the head's address {from} ({e}); the link cannot be tested"
        )
    })?;
    match tokio::time::timeout(Duration::from_secs(2), socket.connect(to)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => Ok(()),
        Ok(Err(e)) => Err(format!(
            "{} does not answer {from} ({e}); check the cable, both interfaces and their addresses",
            to.ip()
        )),
        Err(_) => Err(format!(
            "{} does not answer {from} within 2 s; check the cable, both interfaces and their \
             addresses",
            to.ip()
        )),
    }
}
