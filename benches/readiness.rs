//! Readiness detection latency and `start` overhead, on the real engine and real processes.
//!
//! `cargo bench --bench readiness` (READINESS_RUNS=N for more than 20 starts per runtime).
//! The simulated server prints the instant its /health turns 200 (`ready_at_unix_us`);
//! `sparkctl --json start` reports the instant it noticed (`ready_noticed_at_us`). The
//! difference is the detection latency: health polling plus the one-token completion.
//! Overhead: `sparkctl start` wall time minus a raw Engine API create+start that polls
//! /health every millisecond, both with the same image and load time.

#[path = "../tests/it/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::{docker, free_port, sim_image, Deck};

const LOAD: &str = "300ms";

fn summary(label: &str, mut v: Vec<f64>) {
    v.sort_by(f64::total_cmp);
    println!(
        "{label:<44} n={:<3} p50 {:>7.2} ms  p99 {:>7.2} ms  min {:>7.2}  max {:>7.2}",
        v.len(),
        support::nearest_rank(&v, 50.0),
        support::nearest_rank(&v, 99.0),
        v[0],
        v[v.len() - 1]
    );
}

/// The sim's own ready instant, from its log line.
fn ready_at_us(logs: &str) -> f64 {
    logs.split("ready_at_unix_us=")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no ready_at_unix_us in:\n{logs}"))
}

fn start_runs(deck: &Deck, name: &str, runs: usize) -> (Vec<f64>, Vec<f64>) {
    let (mut latency, mut wall) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let began = Instant::now();
        let out = deck.ok(&["--json", "start", name]);
        wall.push(began.elapsed().as_secs_f64() * 1e3);
        let report: Value = serde_json::from_str(&out).unwrap();
        let noticed = report["ready_noticed_at_us"].as_f64().unwrap();
        let logs = deck.ok(&["logs", name]);
        latency.push((noticed - ready_at_us(&logs)) / 1e3);
        deck.ok(&["down", name]);
    }
    (latency, wall)
}

async fn raw_container_runs(runs: usize) -> Vec<f64> {
    use bollard::query_parameters::RemoveContainerOptionsBuilder;
    let docker = docker().await;
    let mut wall = Vec::new();
    for i in 0..runs {
        let port = free_port();
        let name = format!("sparkctl-bench-raw-{}-{i}", std::process::id());
        let began = Instant::now();
        support::run_plain_sim(
            &docker,
            sim_image(),
            &name,
            port,
            &[],
            &["--load-time", LOAD],
        )
        .await;
        let url = format!("http://127.0.0.1:{port}");
        while support::http_status(&url, "/health") != Some(200) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        wall.push(began.elapsed().as_secs_f64() * 1e3);
        let opts = RemoveContainerOptionsBuilder::new().force(true).build();
        docker.remove_container(&name, Some(opts)).await.unwrap();
    }
    wall
}

fn main() {
    // `cargo bench` passes --bench; nothing else is accepted.
    let runs: usize = std::env::var("READINESS_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let deck = Deck::new("bench-readiness");
    let args = format!("--load-time, {LOAD}, --ttft, 0ms");
    deck.recipe(
        "proc",
        &format!(
            "engine: sim\nruntime: process\nserver:\n  port: {}\n  args: [{args}]\n",
            free_port()
        ),
    );
    deck.recipe(
        "cont",
        &format!(
            "engine: sim\nruntime: docker\nimage: {}\nserver:\n  port: {}\n  args: [{args}]\n",
            sim_image(),
            free_port()
        ),
    );
    deck.ok(&["images", "pin", "cont"]);
    println!("readiness: {runs} starts per runtime, sim load time {LOAD}, TTFT 0");
    let (proc_latency, proc_wall) = start_runs(&deck, "proc", runs);
    let (cont_latency, cont_wall) = start_runs(&deck, "cont", runs);
    let raw = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(raw_container_runs(runs));

    summary(
        "detection latency, process (ready -> noticed)",
        proc_latency,
    );
    summary(
        "detection latency, docker  (ready -> noticed)",
        cont_latency,
    );
    summary("sparkctl start wall time, process", proc_wall.clone());
    summary("sparkctl start wall time, docker", cont_wall.clone());
    summary("raw create+start+poll(1 ms) wall time, docker", raw.clone());
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        support::nearest_rank(&v, 50.0)
    };
    println!(
        "start overhead beyond a raw container start (p50 - p50): {:.1} ms",
        median(cont_wall) - median(raw)
    );
}
