//! What the front door costs against nginx, in one run: the same simulated engine (TTFT
//! 20 ms, 100 tokens/s, 64-token answers) reached directly, through Debian's nginx
//! (`proxy_buffering off`, a kept-alive upstream) and through a real front door (metering
//! on), by the same client, interleaved round by round, at 1 and 32 streams. Prints TTFT
//! and ITL p99 added over direct, and the CPU each proxy spent per 1,000 tokens it passed
//! (all its processes and threads, from /proc schedstat, counted only while its own
//! rounds ran).
//!
//! `cargo bench --bench frontdoor_cpu`; installs nginx (Debian's) when missing.

#[path = "../tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::json;
use sparkctl::bench::client::{stream, Clients, Sample};
use support::Deck;

fn p(values: &mut [f64], q: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    values[(((q / 100.0) * values.len() as f64).ceil() as usize).clamp(1, values.len()) - 1]
}

/// CPU time of every thread of these processes so far, ns.
fn cpu_ns(pids: &[u32]) -> u64 {
    pids.iter()
        .flat_map(|pid| {
            std::fs::read_dir(format!("/proc/{pid}/task"))
                .into_iter()
                .flatten()
                .flatten()
        })
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|c| c.parse().ok())
        .collect()
}

fn nginx_binary() -> String {
    for path in ["/usr/sbin/nginx", "/usr/bin/nginx"] {
        if Path::new(path).exists() {
            return path.into();
        }
    }
    // Debian's package, as the test scripts install packages.
    let status = Command::new("bash")
        .args(["-c", ". .ci/lib.sh && apt_install nginx"])
        .current_dir(support::repo())
        .status()
        .expect("bash runs");
    assert!(status.success(), "installing nginx failed");
    "/usr/sbin/nginx".into()
}

struct Nginx {
    child: Child,
    version: String,
}

impl Nginx {
    fn start(dir: &Path, port: u16, upstream: u16) -> Nginx {
        let bin = nginx_binary();
        let version = support::text(&Command::new(&bin).arg("-v").output().unwrap().stderr)
            .trim()
            .to_string();
        let prefix = dir.join("nginx");
        std::fs::create_dir_all(prefix.join("logs")).unwrap();
        let conf = prefix.join("nginx.conf");
        std::fs::write(
            &conf,
            format!(
                "worker_processes auto;\ndaemon off;\npid {pre}/nginx.pid;\nerror_log {pre}/logs/error.log;\n\
                 events {{ worker_connections 4096; }}\n\
                 http {{\n  access_log off;\n  client_body_temp_path {pre}/body;\n  proxy_temp_path {pre}/proxy;\n\
                 fastcgi_temp_path {pre}/fastcgi;\n  uwsgi_temp_path {pre}/uwsgi;\n  scgi_temp_path {pre}/scgi;\n\
                 upstream sim {{ server 127.0.0.1:{upstream}; keepalive 64; }}\n\
                 server {{\n    listen 127.0.0.1:{port};\n    location / {{\n      proxy_pass http://sim;\n\
                 proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n      proxy_buffering off;\n    }}\n  }}\n}}\n",
                pre = prefix.display()
            ),
        )
        .unwrap();
        let child = Command::new(&bin)
            .args(["-p", prefix.to_str().unwrap(), "-c", conf.to_str().unwrap()])
            .stdout(Stdio::null())
            .spawn()
            .expect("nginx starts");
        // Stopped on drop, answering or not.
        let nginx = Nginx { child, version };
        let url = format!("http://127.0.0.1:{port}");
        for _ in 0..100 {
            if support::http_status(&url, "/health") == Some(200) {
                return nginx;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("nginx did not answer on {url}");
    }

    fn pids(&self) -> Vec<u32> {
        let mut pids = vec![self.child.id()];
        pids.extend(children_of(self.child.id()));
        pids
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One target's figures over a phase.
#[derive(Default)]
struct Tally {
    samples: Vec<Sample>,
    cpu_ns: u64,
}

impl Tally {
    fn tokens(&self) -> u64 {
        self.samples
            .iter()
            .filter(|s| s.ok)
            .filter_map(|s| s.completion_tokens)
            .sum()
    }

    fn ttft_p50(&self) -> f64 {
        let mut t: Vec<f64> = self.samples.iter().filter_map(|s| s.ttft_ms).collect();
        p(&mut t, 50.0)
    }

    fn itl_p99(&self) -> f64 {
        let mut t: Vec<f64> = self
            .samples
            .iter()
            .flat_map(|s| s.itl_ms.iter().copied())
            .collect();
        p(&mut t, 99.0)
    }

    fn failed(&self) -> usize {
        self.samples.iter().filter(|s| !s.ok).count()
    }
}

async fn round(clients: &Clients, url: &str, streams: usize) -> Vec<Sample> {
    let body = json!({
        "model": "sim-model", "max_tokens": 64, "stream": true,
        "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "Tell me about the history of the bicycle."}],
    });
    futures_util::future::join_all((0..streams).map(|_| stream(clients, url, &body))).await
}

fn main() {
    let deck = Deck::new("bench-frontdoor-cpu");
    let sim_port = support::free_port();
    deck.recipe(
        "sim",
        &format!("engine: sim\nruntime: process\nserver:\n  port: {sim_port}\n  args: [--load-time, 0s, --ttft, 20ms, --token-rate, \"100\", --tokens, \"64\"]\n  memory_gb: 1\n"),
    );
    deck.ok(&["rollback", "--to", "sim"]);
    let supervisor: serde_json::Value = serde_json::from_slice(
        &std::fs::read(deck.dir.join("state/frontdoor/supervisor.json")).unwrap(),
    )
    .unwrap();
    let sup = supervisor["pid"].as_u64().unwrap() as u32;
    let door_pids = || {
        let mut pids = vec![sup];
        pids.extend(children_of(sup));
        pids
    };
    let nginx_port = support::free_port();
    let nginx = Nginx::start(&deck.dir, nginx_port, sim_port);
    let targets = [
        ("direct", format!("http://127.0.0.1:{sim_port}")),
        ("nginx", format!("http://127.0.0.1:{nginx_port}")),
        ("front door", deck.door_url()),
    ];
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let clients = Clients::new().unwrap();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "front door vs {} (proxy_buffering off, kept-alive upstream), one sim (TTFT 20 ms, 100 tok/s, 64 tokens), one client, interleaved; {cores} cores",
        nginx.version
    );
    println!(
        "  {:>7}  {:<10}  {:>9}  {:>9}  {:>10}  {:>9}  {:>9}  {:>7}",
        "streams", "target", "TTFT p50", "added", "ITL p99", "added", "CPU/1k tok", "failed"
    );
    for (streams, rounds) in [(1usize, 30usize), (32, 8)] {
        // Warm connections and caches, uncounted.
        for (_, url) in &targets {
            rt.block_on(round(&clients, url, streams));
        }
        let mut tallies: Vec<Tally> = targets.iter().map(|_| Tally::default()).collect();
        for _ in 0..rounds {
            for (i, (name, url)) in targets.iter().enumerate() {
                let pids = match *name {
                    "nginx" => nginx.pids(),
                    "front door" => door_pids(),
                    _ => Vec::new(),
                };
                let before = cpu_ns(&pids);
                let samples = rt.block_on(round(&clients, url, streams));
                tallies[i].cpu_ns += cpu_ns(&pids).saturating_sub(before);
                tallies[i].samples.extend(samples);
            }
        }
        let (direct_ttft, direct_itl) = (tallies[0].ttft_p50(), tallies[0].itl_p99());
        for ((name, _), t) in targets.iter().zip(&tallies) {
            let cpu = if *name == "direct" {
                "-".to_string()
            } else {
                format!(
                    "{:.1} ms",
                    t.cpu_ns as f64 / 1e6 / t.tokens().max(1) as f64 * 1e3
                )
            };
            println!(
                "  {streams:>7}  {name:<10}  {:>6.2} ms  {:>+6.2} ms  {:>7.2} ms  {:>+6.2} ms  {cpu:>10}  {:>7}",
                t.ttft_p50(),
                t.ttft_p50() - direct_ttft,
                t.itl_p99(),
                t.itl_p99() - direct_itl,
                t.failed()
            );
        }
        let per_token = |t: &Tally| t.cpu_ns as f64 / t.tokens().max(1) as f64;
        println!(
            "  {streams:>7}  front door / nginx CPU per token: {:.2}x ({} tokens each way)",
            per_token(&tallies[2]) / per_token(&tallies[1]).max(1.0),
            tallies[2].tokens()
        );
    }
}
