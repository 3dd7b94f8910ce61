//! The simulator's stand-in for Ray in a multi-node group, where real Ray cannot run (no
//! GPUs, FROM-scratch images). It keeps what sparkctl relies on: a head that workers join
//! over the network and that reports them (`ray status`), workers that keep a connection
//! and end when the head goes, and an API server that serves only once every node joined
//! and dies when one leaves (as vLLM does when a Ray node dies under it).
//!
//! Protocol, one line per message over TCP: a worker sends `JOIN IP GPUS` and keeps the
//! connection; `STATUS` answers `ray status`' text and closes; a driver sends `DRIVER` and
//! receives `NODES N GPUS G` on every change and `DIED IP` when a node leaves.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;

use super::SimConfig;
use crate::error::{Error, Result};
use crate::stdio;

/// How long a worker keeps trying to reach its head (`ray start --address` retries too).
const JOIN_PATIENCE: Duration = Duration::from_secs(30);

#[derive(Clone, Debug)]
enum Change {
    Nodes(usize, u32),
    Died(String),
}

struct Head {
    /// (ip, gpus) of every node, the head's own first.
    nodes: Mutex<Vec<(String, u32)>>,
    changes: broadcast::Sender<Change>,
}

impl Head {
    fn totals(&self) -> (usize, u32) {
        let nodes = self.nodes.lock().expect("nodes lock");
        (nodes.len(), nodes.iter().map(|(_, g)| g).sum())
    }

    /// The shape of `ray status`, which sparkctl parses (`node::ray::parse_status`).
    fn status_text(&self) -> String {
        let nodes = self.nodes.lock().expect("nodes lock");
        let gpus: u32 = nodes.iter().map(|(_, g)| g).sum();
        let mut text = String::from(
            "======== Autoscaler status (sparkctl sim) ========\nNode status\n\
             ---------------------------------------------------------------\nActive:\n",
        );
        for (i, (ip, _)) in nodes.iter().enumerate() {
            text.push_str(&format!(" 1 node_{i:04x}{}\n", ip.replace('.', "")));
        }
        text.push_str(
            "Pending:\n (no pending nodes)\nRecent failures:\n (no failures)\n\nResources\n\
             ---------------------------------------------------------------\nUsage:\n",
        );
        text.push_str(&format!(" 0.0/{gpus}.0 GPU\n"));
        text
    }
}

fn node_ip(cfg: &SimConfig) -> String {
    cfg.ray_node_ip
        .clone()
        .unwrap_or_else(|| "127.0.0.1".into())
}

/// `ray start --head --port P --block`: accepts workers, drivers and status queries.
pub(crate) async fn head(cfg: &SimConfig, addr: &str) -> Result<()> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| Error::io(format!("sim ray head: cannot listen on {addr}"), e))?;
    let (changes, _) = broadcast::channel(64);
    let state = Arc::new(Head {
        nodes: Mutex::new(vec![(node_ip(cfg), cfg.ray_gpus)]),
        changes,
    });
    stdio::out(format_args!(
        "Ray runtime started (sparkctl sim head on {addr}, node {}, {} GPU)",
        node_ip(cfg),
        cfg.ray_gpus
    ));
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| Error::io("sim: cannot watch SIGTERM", e))?;
    loop {
        let conn = tokio::select! {
            c = listener.accept() => c,
            _ = term.recv() => return Ok(()),
        };
        let Ok((stream, _)) = conn else { continue };
        tokio::spawn(serve_conn(state.clone(), stream));
    }
}

async fn serve_conn(head: Arc<Head>, stream: TcpStream) {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    let Ok(Some(first)) = lines.next_line().await else {
        return;
    };
    let words: Vec<&str> = first.split_whitespace().collect();
    match words.as_slice() {
        ["JOIN", ip, gpus] => {
            let (ip, gpus) = (ip.to_string(), gpus.parse().unwrap_or(0));
            head.nodes
                .lock()
                .expect("nodes lock")
                .push((ip.clone(), gpus));
            let (n, g) = head.totals();
            stdio::out(format_args!(
                "ray head: node {ip} joined ({gpus} GPU); {n} nodes, {g} GPUs"
            ));
            let _ = head.changes.send(Change::Nodes(n, g));
            let _ = write.write_all(b"WELCOME\n").await;
            // The worker is alive as long as its connection is.
            while let Ok(Some(_)) = lines.next_line().await {}
            let mut nodes = head.nodes.lock().expect("nodes lock");
            if let Some(i) = nodes.iter().rposition(|(a, _)| *a == ip) {
                nodes.remove(i);
            }
            drop(nodes);
            stdio::out(format_args!("ray head: node {ip} died (connection lost)"));
            let _ = head.changes.send(Change::Died(ip));
        }
        ["STATUS"] => {
            let _ = write.write_all(head.status_text().as_bytes()).await;
        }
        ["DRIVER"] => {
            let mut rx = head.changes.subscribe();
            let (n, g) = head.totals();
            if write
                .write_all(format!("NODES {n} GPUS {g}\n").as_bytes())
                .await
                .is_err()
            {
                return;
            }
            while let Ok(change) = rx.recv().await {
                let line = match change {
                    Change::Nodes(n, g) => format!("NODES {n} GPUS {g}\n"),
                    Change::Died(ip) => format!("DIED {ip}\n"),
                };
                if write.write_all(line.as_bytes()).await.is_err() {
                    return;
                }
            }
        }
        _ => stdio::out(format_args!("ray head: unknown request {first:?}")),
    }
}

async fn connect_patiently(addr: &str) -> Result<TcpStream> {
    let deadline = tokio::time::Instant::now() + JOIN_PATIENCE;
    loop {
        match TcpStream::connect(addr).await {
            Ok(s) => return Ok(s),
            Err(e) if tokio::time::Instant::now() >= deadline => {
                return Err(Error::io(
                    format!("ray worker: cannot reach the head at {addr}"),
                    e,
                ))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// `ray start --address HEAD:P --block`: joins, then lives as long as the connection.
/// SIGTERM ends it at any point (as a container's pid 1 it would otherwise be ignored).
pub(crate) async fn worker(cfg: &SimConfig, addr: &str) -> Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| Error::io("sim: cannot watch SIGTERM", e))?;
    tokio::select! {
        r = join_and_stay(cfg, addr) => r,
        _ = term.recv() => Ok(()),
    }
}

async fn join_and_stay(cfg: &SimConfig, addr: &str) -> Result<()> {
    let stream = connect_patiently(addr).await?;
    let (read, mut write) = stream.into_split();
    write
        .write_all(format!("JOIN {} {}\n", node_ip(cfg), cfg.ray_gpus).as_bytes())
        .await
        .map_err(|e| Error::io("ray worker: cannot join", e))?;
    let mut lines = BufReader::new(read).lines();
    if !matches!(lines.next_line().await, Ok(Some(l)) if l == "WELCOME") {
        return Err(Error::Failed(format!(
            "ray worker: the head at {addr} refused us"
        )));
    }
    stdio::out(format_args!(
        "Ray runtime started: node {} joined the cluster at {addr} ({} GPU)",
        node_ip(cfg),
        cfg.ray_gpus
    ));
    while let Ok(Some(_)) = lines.next_line().await {}
    Err(Error::Failed(format!(
        "ray worker: lost the connection to the head at {addr}"
    )))
}

/// `ray status --address HEAD:P`.
pub(crate) async fn status(addr: &str) -> Result<()> {
    let mut stream = TcpStream::connect(addr)
        .await
        .map_err(|e| Error::io(format!("ray status: cannot reach {addr}"), e))?;
    stream
        .write_all(b"STATUS\n")
        .await
        .map_err(|e| Error::io("ray status", e))?;
    let mut text = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut stream, &mut text)
        .await
        .map_err(|e| Error::io("ray status", e))?;
    stdio::text(&text);
    Ok(())
}

/// The API server's side (vLLM's Ray executor): `ready` turns true once `nodes` nodes are
/// in the cluster; a node leaving ends the process as a dead Ray actor ends vLLM.
pub(crate) fn drive(addr: String, nodes: usize, ready: Arc<std::sync::atomic::AtomicBool>) {
    tokio::spawn(async move {
        let died = |why: String| -> ! {
            stdio::err(format_args!(
                "ray.exceptions.RayActorError: The actor died unexpectedly: {why}"
            ));
            std::process::exit(1);
        };
        let stream = match connect_patiently(&addr).await {
            Ok(s) => s,
            Err(e) => died(e.to_string()),
        };
        let (read, mut write) = stream.into_split();
        if write.write_all(b"DRIVER\n").await.is_err() {
            died(format!("the Ray head at {addr} closed"));
        }
        let mut lines = BufReader::new(read).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["NODES", n, "GPUS", g] => {
                    let n: usize = n.parse().unwrap_or(0);
                    stdio::out(format_args!("Ray cluster: {n} of {nodes} nodes, {g} GPUs"));
                    if n >= nodes {
                        ready.store(true, std::sync::atomic::Ordering::SeqCst);
                    }
                }
                ["DIED", ip] => died(format!("Ray node {ip} died")),
                _ => {}
            }
        }
        died(format!("lost the Ray head at {addr}"));
    });
}

/// One binary plays every part of a multi-node group: `sha256sum`, and Ray's head, worker
/// and status. `None` when this run is the server.
pub(super) async fn other_part(cfg: &SimConfig) -> Option<Result<()>> {
    if !cfg.sha256_files.is_empty() {
        // As sha256sum: a file it cannot read is said on stderr and left out.
        for file in &cfg.sha256_files {
            match crate::patch::fingerprint::sha256_file(std::path::Path::new(file)) {
                Ok(sha) => stdio::out(format_args!("{sha}  {file}")),
                Err(e) => stdio::err(format_args!("sha256sum: {e}")),
            }
        }
        return Some(Ok(()));
    }
    Some(if let Some(addr) = &cfg.ray_status {
        status(addr).await
    } else if let Some(addr) = &cfg.ray_head {
        head(cfg, addr).await
    } else if let Some(addr) = &cfg.ray_join {
        worker(cfg, addr).await
    } else {
        return None;
    })
}
