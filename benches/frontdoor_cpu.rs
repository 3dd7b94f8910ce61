//! What the front door costs against nginx, in one run: the same simulated engine (TTFT
//! 20 ms, 100 tokens/s, 64-token answers) reached directly, through Debian's nginx
//! (`proxy_buffering off`, a kept-alive upstream) and through four real front doors — bare
//! (metering only: `SPARKCTL_FRONTDOOR_QUALITY=off SPARKCTL_FRONTDOOR_PAGE=off`), with the
//! live quality watch judging every answer, with the live page too (sampling its charts,
//! nobody looking), with the page's data polled as an open browser tab polls it, and with a
//! shadow rollout copying every request to a second sim (issue 37: the copies' answers read
//! and judged, paired with production's) — by the same client, interleaved round by round,
//! at 1 and 32 streams. Prints TTFT and ITL
//! p99 added over direct, and the CPU each proxy spent per 1,000 tokens it passed (all its
//! processes and threads, from /proc schedstat, counted only while its own rounds ran);
//! then each door's CPU per token as a multiple of nginx's.
//!
//! `cargo bench --bench frontdoor_cpu`; installs nginx (Debian's) when missing.

#[path = "../tests/it/support/mod.rs"]
mod support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::json;
use sparkctl::testkit::{stream, Clients, Sample};
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
    /// SIGQUIT, nginx's graceful stop: the master takes its workers with it (SIGKILL to
    /// the master alone left them running, holding CPU and ports after the bench).
    fn drop(&mut self) {
        // SAFETY: a signal to the nginx master this bench started and still holds.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGQUIT) };
        for _ in 0..100 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
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

/// A front door of its own (its deck, its sim), started with `env`.
struct Door {
    deck: Deck,
    sim_port: u16,
    supervisor: u32,
}

/// The rollout a shadowing door runs: every request copied, a window no run reaches.
fn shadow_everything(deck: &Deck) {
    let cand_port = support::free_port();
    deck.recipe(
        "cand",
        &format!("engine: sim\nruntime: process\nserver:\n  port: {cand_port}\n  args: [--load-time, 0s, --ttft, 20ms, --token-rate, \"100\", --tokens, \"64\"]\n  memory_gb: 1\n"),
    );
    deck.ok(&["start", "cand"]);
    let id = deck.status_of("cand").unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let asking = json!({
        "spec": {"mode": "shadow", "share": 100.0, "window": {"requests": 1_000_000},
                 "within": 86_400_000u64,
                 "rules": {"alpha": 0.01, "itl_tolerance": 0.15, "ttft_tolerance": 0.5,
                           "max_disagreement": 0.2, "fault_margin": 0.05, "min_compared": 10}},
        "candidate": {"recipe": "cand", "deployment": id, "url": format!("http://127.0.0.1:{cand_port}")},
        "owner": null,
    });
    let socket = deck.dir.join("state/frontdoor/control.sock");
    let out = Command::new("curl")
        .args(["-sf", "--unix-socket"])
        .arg(&socket)
        .args([
            "-X",
            "POST",
            "http://frontdoor/rollout",
            "-d",
            &asking.to_string(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "POST /rollout: {}",
        support::text(&out.stdout)
    );
}

/// The shadowing door's rollout so far: copies sent and dropped, pairs compared.
fn shadowed(deck: &Deck) -> String {
    let socket = deck.dir.join("state/frontdoor/control.sock");
    let out = Command::new("curl")
        .args(["-s", "--unix-socket"])
        .arg(&socket)
        .arg("http://frontdoor/rollout")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    format!(
        "{} copies sent to the candidate, {} dropped, {} pairs compared: {}",
        v["tally"]["to_candidate"],
        v["tally"]["dropped"],
        v["judgement"]["compared"],
        v["judgement"]["reason"]
    )
}

impl Door {
    fn start(tag: &str, env: &[(&str, &str)]) -> Door {
        let deck = Deck::new(tag);
        let sim_port = support::free_port();
        deck.recipe(
            "sim",
            &format!("engine: sim\nruntime: process\nserver:\n  port: {sim_port}\n  args: [--load-time, 0s, --ttft, 20ms, --token-rate, \"100\", --tokens, \"64\"]\n  memory_gb: 1\n"),
        );
        let mut cmd = deck.cmd(&["rollback", "--to", "sim"]);
        cmd.envs(env.iter().copied());
        let out = cmd.output().expect("sparkctl runs");
        assert!(out.status.success(), "{}", support::text(&out.stderr));
        let supervisor: serde_json::Value = serde_json::from_slice(
            &std::fs::read(deck.dir.join("state/frontdoor/supervisor.json")).unwrap(),
        )
        .unwrap();
        let supervisor = supervisor["pid"].as_u64().unwrap() as u32;
        Door {
            deck,
            sim_port,
            supervisor,
        }
    }

    fn pids(&self) -> Vec<u32> {
        let mut pids = vec![self.supervisor];
        pids.extend(children_of(self.supervisor));
        pids
    }
}

/// GETs `path` on `url` every 2 s (as the live page's script does) until `stop`.
fn poll(
    url: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let mut n = 0;
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            assert_eq!(support::http_status(&url, "/_sparkctl/data"), Some(200));
            n += 1;
            for _ in 0..20 {
                if stop.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        n
    })
}

/// The quality watch alone, in this process: what the proxy adds per answer (reading the
/// request for its tools, judging every delta, recording the verdict), ns per token, over
/// 64-token answers of plain prose delivered a word per chunk.
fn quality_alone() -> f64 {
    use sparkctl::testkit::{Answer, Delta, Live};
    let live = Live::default();
    let up = sparkctl::testkit::Upstream {
        recipe: "sim".into(),
        deployment: "d".into(),
        url: "http://127.0.0.1:1".into(),
    };
    let body = serde_json::to_vec(&json!({
        "model": "sim-model", "max_tokens": 64, "stream": true,
        "messages": [{"role": "user", "content": "Tell me about the history of the bicycle."}],
    }))
    .unwrap();
    let prose = "The first bicycles were built in Germany around 1817, pushed along by the rider's feet; pedals came decades later, then the chain drive and air-filled tyres made the safety bicycle of the 1880s the shape most bikes still have today, and cycling clubs spread across Europe and America within a few years of it";
    let words: Vec<String> = prose
        .split_inclusive(' ')
        .cycle()
        .take(64)
        .map(String::from)
        .collect();
    let answers = 20_000;
    let started = std::time::Instant::now();
    for _ in 0..answers {
        let asked = live
            .asked(&hyper::Method::POST, "/v1/chat/completions", &body)
            .expect("a chat request is judged");
        let mut a = Answer::new(asked, std::time::Instant::now());
        for (i, w) in words.iter().enumerate() {
            let d = Delta {
                content: Some(w),
                tool_call: false,
                finish: (i == words.len() - 1).then_some("stop"),
                tokens: 1,
            };
            a.delta(d, std::time::Instant::now());
        }
        live.record(&up, a.end());
    }
    started.elapsed().as_nanos() as f64 / (answers * words.len()) as f64
}

fn main() {
    println!(
        "the live quality watch alone (request read, every delta judged, verdict recorded): {:.0} ns per token, 64-token answers a word per chunk, one thread",
        quality_alone()
    );
    let off = [
        ("SPARKCTL_FRONTDOOR_QUALITY", "off"),
        ("SPARKCTL_FRONTDOOR_PAGE", "off"),
    ];
    let doors = [
        Door::start("bench-frontdoor-cpu-bare", &off),
        Door::start(
            "bench-frontdoor-cpu-quality",
            &[("SPARKCTL_FRONTDOOR_PAGE", "off")],
        ),
        Door::start("bench-frontdoor-cpu-page", &[]),
        Door::start("bench-frontdoor-cpu-polled", &[]),
        Door::start("bench-frontdoor-cpu-shadow", &[]),
    ];
    shadow_everything(&doors[4].deck);
    let sim_port = doors[0].sim_port;
    let nginx_port = support::free_port();
    let nginx = Nginx::start(&doors[0].deck.dir, nginx_port, sim_port);
    // The page's door has a browser tab open on it: the page loaded, its data polled.
    assert_eq!(
        support::http_status(&doors[3].deck.door_url(), "/_sparkctl/"),
        Some(200)
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let polling = poll(doors[3].deck.door_url(), stop.clone());
    let targets = [
        ("direct", format!("http://127.0.0.1:{sim_port}")),
        ("nginx", format!("http://127.0.0.1:{nginx_port}")),
        ("door bare", doors[0].deck.door_url()),
        ("+quality", doors[1].deck.door_url()),
        ("+q +page", doors[2].deck.door_url()),
        ("+q +page/2s", doors[3].deck.door_url()),
        ("+q +p +shadow", doors[4].deck.door_url()),
    ];
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let clients = Clients::new().unwrap();
    idle(&nginx, &doors);
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "front doors vs {} (proxy_buffering off, kept-alive upstream), one sim each (TTFT 20 ms, 100 tok/s, 64 tokens), one client, interleaved; {cores} cores",
        nginx.version
    );
    println!("  door bare: metering only (SPARKCTL_FRONTDOOR_QUALITY=off SPARKCTL_FRONTDOOR_PAGE=off); +quality: the live quality watch on; +q +page: and the live page (sampling, nobody looking); +q +page/2s: its data polled every 2 s, as an open tab does; +q +p +shadow: as +q +page, with every request copied to a second sim and the two answers paired (the copies' reading counted in its CPU)");
    println!(
        "  {:>7}  {:<13}  {:>9}  {:>9}  {:>10}  {:>9}  {:>9}  {:>7}",
        "streams", "target", "TTFT p50", "added", "ITL p99", "added", "CPU/1k tok", "failed"
    );
    for (streams, rounds) in [(1usize, 30usize), (32, 8)] {
        // Warm connections and caches, uncounted.
        for (_, url) in &targets {
            rt.block_on(round(&clients, url, streams));
        }
        let mut tallies: Vec<Tally> = targets.iter().map(|_| Tally::default()).collect();
        for r in 0..rounds {
            // Each round starts at another target: no target always follows the same one.
            for i in (0..targets.len()).map(|k| (k + r) % targets.len()) {
                let url = &targets[i].1;
                let pids = match i {
                    0 => Vec::new(),
                    1 => nginx.pids(),
                    d => doors[d - 2].pids(),
                };
                let before = cpu_ns(&pids);
                let samples = rt.block_on(round(&clients, url, streams));
                tallies[i].cpu_ns += cpu_ns(&pids).saturating_sub(before);
                tallies[i].samples.extend(samples);
            }
        }
        print_level(streams, &targets, &tallies);
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let polls = polling.join().unwrap();
    println!("  (the page's data was polled {polls} times during the rounds)");
    println!("  shadow: {}", shadowed(&doors[4].deck));
    page_alone(&doors[3]);
}

/// What each proxy spends with no traffic at all, over 10 s: the front door's watch rounds
/// (each looks at production: its record, its process, a readiness probe when it is not
/// streaming) and timers. Part of every per-token figure below is this, not the tokens.
fn idle(nginx: &Nginx, doors: &[Door]) {
    let names = [
        "door bare",
        "+quality",
        "+q +page",
        "+q +page/2s",
        "+q +p +shadow",
    ];
    let mut who: Vec<(&str, Vec<u32>)> = vec![("nginx", nginx.pids())];
    who.extend(names.iter().copied().zip(doors.iter().map(Door::pids)));
    let before: Vec<u64> = who.iter().map(|(_, p)| cpu_ns(p)).collect();
    std::thread::sleep(Duration::from_secs(10));
    let each: Vec<String> = who
        .iter()
        .zip(before)
        .map(|((name, p), b)| {
            let ms = cpu_ns(p).saturating_sub(b) as f64 / 1e6 / 10.0;
            format!("{name} {ms:.2}")
        })
        .collect();
    println!(
        "  idle, no traffic, 10 s (ms of CPU per second): {}",
        each.join(", ")
    );
}

/// What one look at the page costs the door, with no traffic: its CPU over requests for
/// the page and for its data, back to back.
fn page_alone(door: &Door) {
    let url = door.deck.door_url();
    for (path, n) in [("/_sparkctl/", 50), ("/_sparkctl/data", 200)] {
        let before = cpu_ns(&door.pids());
        for _ in 0..n {
            assert_eq!(support::http_status(&url, path), Some(200));
        }
        let each = cpu_ns(&door.pids()).saturating_sub(before) as f64 / n as f64 / 1e6;
        println!(
            "  GET {path}: {each:.2} ms of the door's CPU each ({:.3}% of a core at one every 2 s)",
            each / 2000.0 * 100.0
        );
    }
}

fn print_level(streams: usize, targets: &[(&str, String)], tallies: &[Tally]) {
    let (direct_ttft, direct_itl) = (tallies[0].ttft_p50(), tallies[0].itl_p99());
    for ((name, _), t) in targets.iter().zip(tallies) {
        let cpu = if *name == "direct" {
            "-".to_string()
        } else {
            format!(
                "{:.1} ms",
                t.cpu_ns as f64 / 1e6 / t.tokens().max(1) as f64 * 1e3
            )
        };
        println!(
            "  {streams:>7}  {name:<13}  {:>6.2} ms  {:>+6.2} ms  {:>7.2} ms  {:>+6.2} ms  {cpu:>10}  {:>7}",
            t.ttft_p50(),
            t.ttft_p50() - direct_ttft,
            t.itl_p99(),
            t.itl_p99() - direct_itl,
            t.failed()
        );
    }
    let per_token = |t: &Tally| t.cpu_ns as f64 / t.tokens().max(1) as f64;
    let nginx = per_token(&tallies[1]);
    // Each door against nginx: the target (DESIGN, issue 25) is 1.5× with metering and the
    // quality watch on.
    let doors: Vec<String> = targets[2..]
        .iter()
        .zip(&tallies[2..])
        .map(|((name, _), t)| {
            let cpu = per_token(t);
            format!("{name} {:.1} µs ({:.2}x)", cpu / 1e3, cpu / nginx.max(1.0))
        })
        .collect();
    println!(
        "  {streams:>7}  CPU per token: nginx {:.1} µs; {}; {} tokens each way",
        nginx / 1e3,
        doors.join(", "),
        tallies[5].tokens()
    );
    // What shadowing adds, against the same door without it, in this run.
    let (plain, shadow) = (&tallies[4], &tallies[6]);
    println!(
        "  {streams:>7}  shadowing adds: TTFT p50 {:+.2} ms, ITL p99 {:+.2} ms, CPU per token {:+.1} µs ({:.2}x the same door without it)",
        shadow.ttft_p50() - plain.ttft_p50(),
        shadow.itl_p99() - plain.itl_p99(),
        (per_token(shadow) - per_token(plain)) / 1e3,
        per_token(shadow) / per_token(plain).max(1.0)
    );
}
