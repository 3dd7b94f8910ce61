//! How many streams one client sustains on this machine, and what each token costs it:
//! sparkctl's streaming client beside a Python asyncio (aiohttp) client of the same method
//! (benches/aiohttp_client.py), in the same run, against the same simulated engine.
//!
//! `cargo bench --bench client_capacity`. At each level, N streams run at once, each 40
//! tokens 50 ms apart. Per client and level: CPU time per token (getrusage of the client's
//! own process: user + system), and the client's inter-token latency error against the
//! moment the sim handed each token to its HTTP layer (its log), which is the client's own
//! measurement error. A level is *sustained* when every stream completed and the ITL error
//! p99 stays within `SUSTAINED_P99_MS`. Python: SPARKCTL_TEST_PYTHON, else the test venv
//! that `.ci/lib.sh ensure_test_gguf` makes (~/.cache/sparkctl/venv, with aiohttp).

#[path = "../tests/support/mod.rs"]
mod support;

use std::path::PathBuf;
use std::time::Instant;

use serde_json::{json, Value};
use sparkctl::bench::client::stream;
use support::Sim;

const TOKENS: usize = 40;
const ITL_MS: f64 = 50.0;
/// The ITL error a client may add and still count as measuring (p99, ms).
const SUSTAINED_P99_MS: f64 = 5.0;
const LEVELS: [usize; 6] = [16, 64, 128, 256, 384, 480];

fn p(values: &mut [f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    values[(((q / 100.0) * values.len() as f64).ceil() as usize).clamp(1, values.len()) - 1]
}

/// What one stream measured, whichever client.
struct Stream {
    id: String,
    itl_ms: Vec<f64>,
    ok: bool,
}

/// One client at one level: its streams and its CPU seconds.
struct Run {
    streams: Vec<Stream>,
    cpu_s: f64,
    wall_s: f64,
}

fn cpu_self() -> f64 {
    // SAFETY: getrusage fills the struct it is given; RUSAGE_SELF is always valid.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

fn rust_client(rt: &tokio::runtime::Runtime, url: &str, n: usize) -> Run {
    let client = sparkctl::bench::http_client().unwrap();
    let body = json!({
        "model": "sim-model",
        "messages": [{"role": "user", "content": "Tell me about the history of the bicycle."}],
        "max_tokens": TOKENS,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    let (cpu0, wall) = (cpu_self(), Instant::now());
    let samples = rt.block_on(futures_util::future::join_all(
        (0..n).map(|_| stream(&client, url, &body)),
    ));
    let (cpu_s, wall_s) = (cpu_self() - cpu0, wall.elapsed().as_secs_f64());
    let streams = samples
        .into_iter()
        .map(|s| Stream {
            id: s.id.unwrap_or_default(),
            itl_ms: s.itl_ms,
            ok: s.ok,
        })
        .collect();
    Run {
        streams,
        cpu_s,
        wall_s,
    }
}

fn python() -> Option<PathBuf> {
    let p = std::env::var_os("SPARKCTL_TEST_PYTHON")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|h| PathBuf::from(h).join(".cache/sparkctl/venv/bin/python"))
        })?;
    let ok = std::process::Command::new(&p)
        .args(["-c", "import aiohttp"])
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then_some(p)
}

fn python_client(py: &PathBuf, url: &str, n: usize) -> Run {
    let script = support::repo().join("benches/aiohttp_client.py");
    let out = std::process::Command::new(py)
        .arg(script)
        .args([url, &n.to_string(), &TOKENS.to_string()])
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (last, streams) = lines.split_last().unwrap();
    let streams = streams
        .iter()
        .map(|v| Stream {
            id: v["id"].as_str().unwrap_or_default().to_string(),
            itl_ms: v["itl_ms"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect(),
            ok: v["ok"] == true,
        })
        .collect();
    Run {
        streams,
        cpu_s: last["cpu_s"].as_f64().unwrap(),
        wall_s: last["wall_s"].as_f64().unwrap(),
    }
}

/// |client ITL − the sim's hand-over gap| per token, ms.
fn itl_errors(run: &Run, sim: &Sim) -> Vec<f64> {
    let log = sim.log.lock().unwrap().clone();
    let mut out = Vec::new();
    for s in run.streams.iter().filter(|s| s.ok) {
        let Some(line) = log
            .iter()
            .find(|l| l.starts_with("handed") && l.contains(&format!("id={} ", s.id)))
        else {
            continue;
        };
        let gaps: Vec<f64> = line
            .split("unix_us=")
            .nth(1)
            .unwrap()
            .trim()
            .split('+')
            .skip(1)
            .map(|v| v.parse::<f64>().unwrap() / 1e3)
            .collect();
        out.extend(s.itl_ms.iter().zip(&gaps).map(|(i, g)| (i - g).abs()));
    }
    out
}

/// Prints one row; whether the level was sustained.
fn report(name: &str, n: usize, run: &Run, sim: &Sim) -> (bool, f64) {
    let ok = run.streams.iter().filter(|s| s.ok).count();
    let mut err = itl_errors(run, sim);
    let tokens = (ok * TOKENS) as f64;
    let cpu_per_token_us = run.cpu_s / tokens.max(1.0) * 1e6;
    let (p50, p99) = (p(&mut err, 50.0), p(&mut err, 99.0));
    let sustained = ok == n && p99 <= SUSTAINED_P99_MS;
    println!(
        "  {name:<7} {n:>4} streams: {ok:>4} ok, wall {:>5.2} s, CPU {:>6.3} s = {cpu_per_token_us:>6.1} µs/token ({:>4.0}% of one core), ITL error vs hand-over p50 {p50:.3} ms p99 {p99:.3} ms{}",
        run.wall_s,
        run.cpu_s,
        run.cpu_s / run.wall_s * 100.0,
        if sustained { "" } else { "  NOT SUSTAINED" }
    );
    (sustained, cpu_per_token_us)
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let sim = Sim::start(&[
        "--ttft",
        "20ms",
        "--token-rate",
        "20",
        "--tokens",
        &TOKENS.to_string(),
    ]);
    sim.wait_ready(std::time::Duration::from_secs(10));
    let py = python();
    println!(
        "client capacity on {} cores vs the simulated engine ({TOKENS} tokens {ITL_MS} ms apart per stream); sustained = all ok and ITL error p99 <= {SUSTAINED_P99_MS} ms",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    if py.is_none() {
        println!("  no Python baseline: no interpreter with aiohttp (set SPARKCTL_TEST_PYTHON, or run .ci/lib.sh ensure_test_gguf)");
    }
    let (mut best_rust, mut best_py) = (0, 0);
    let (mut cpu_rust, mut cpu_py) = (Vec::new(), Vec::new());
    for n in LEVELS {
        let run = rust_client(&rt, &sim.url, n);
        let (ok, cpu) = report("sparkctl", n, &run, &sim);
        if ok {
            best_rust = n;
            cpu_rust.push(cpu);
        }
        if let Some(py) = &py {
            let run = python_client(py, &sim.url, n);
            let (ok, cpu) = report("aiohttp", n, &run, &sim);
            if ok {
                best_py = n;
                cpu_py.push(cpu);
            }
        }
    }
    println!("most streams sustained: sparkctl {best_rust}, aiohttp {best_py} (of the levels tried, up to {}: the sim paces each stream on a thread of its own, at most 512)", LEVELS[LEVELS.len() - 1]);
    if let (Some(r), Some(p)) = (cpu_rust.last(), cpu_py.last()) {
        println!("CPU per token at the highest level both sustained or each one's highest: sparkctl {r:.1} µs, aiohttp {p:.1} µs ({:.1}x)", p / r);
    }
}
