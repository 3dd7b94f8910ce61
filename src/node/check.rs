//! A recipe's `nodes:` checked before anything runs: each problem names the key and says
//! what to write instead.

use std::net::IpAddr;
use std::path::Path;

use super::plan::PER_NODE_ENV;
use super::{Endpoint, Nodes};
use crate::engine::Engine;
use crate::error::Diagnostic;
use crate::recipe::{Recipe, Runtime};

/// Problems of a recipe's `nodes:`; empty when it has none.
pub fn check(path: &Path, src: &str, r: &Recipe, out: &mut Vec<Diagnostic>) {
    let Some(nodes) = &r.nodes else { return };
    let mut bad = |key: &str, message: String, help: &str| {
        out.push(crate::recipe::diag_at(
            path,
            src,
            key,
            message,
            Some(help.into()),
        ));
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
fn check_engine(i: usize, n: &super::Node, bad: &mut impl FnMut(&str, String, &str)) {
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
