//! The memory check after a start, on real parts: the simulated engine really allocates
//! (`--hold-memory`) more than its recipe declares, as a process and in a container, and
//! `start` must measure it, say how, and warn; a server within its declaration must not be
//! warned about.

mod support;

use serde_json::Value;
use support::{free_port, sim_image, Deck};

/// What the sim holds in these tests; its recipes declare 0.1 GB.
const HOLD_MIB: u64 = 256;

/// A figure of what the sim holds: at least that, plus at most its binary's own memory
/// (a figure of the whole machine would be far above).
fn about_held() -> std::ops::Range<u64> {
    (HOLD_MIB << 20)..((HOLD_MIB + 200) << 20)
}

fn nvidia_smi_installed() -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("nvidia-smi").is_file()))
}

/// `--json start NAME`: the report and what went to stderr.
fn start_json(deck: &Deck, name: &str) -> (Value, String) {
    let ran = deck.sparkctl(&["--json", "start", name]).succeeds();
    (ran.json(), ran.stderr())
}

fn bytes(v: &Value) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("not a byte count: {v}"))
}

/// Where there is no nvidia-smi (this test machine), the GPU figure is missing and says
/// why, never a zero; where there is one, it is a number.
fn assert_gpu_figure(observed: &Value) {
    let gpu = &observed["gpu"];
    assert_eq!(gpu["method"], "nvidia_smi_compute_apps");
    if nvidia_smi_installed() {
        assert!(gpu["bytes"].is_u64(), "{gpu}");
    } else {
        assert!(gpu["bytes"].is_null(), "{gpu}");
        assert!(
            gpu["how"]
                .as_str()
                .unwrap()
                .contains("not measured: nvidia-smi is not on PATH"),
            "{gpu}"
        );
    }
}

/// The best measure is at least what the sim holds, and the report says it exceeds 0.1 GB.
fn assert_over_declaration(observed: &Value, resident_words: &str) {
    let held = HOLD_MIB << 20;
    assert_eq!(observed["declared_gb"], 0.1);
    let best = &observed["best"];
    let measure = best["measure"].as_str().unwrap();
    assert!(
        ["resident", "gpu_plus_resident"].contains(&measure),
        "{best}"
    );
    assert!(bytes(&best["bytes"]) >= held, "{best}");
    assert!(
        best["what"].as_str().unwrap().contains(resident_words),
        "{best}"
    );
    assert_eq!(observed["exceeds_declared"], true);
    // MemAvailable is reported, labelled noisy, and not what the verdict rests on.
    let mem = &observed["mem_available"];
    assert_eq!(mem["noisy"], true);
    assert!(mem["how"].as_str().unwrap().contains("noisy"), "{mem}");
    assert!(bytes(&mem["before_bytes"]) > 0 && bytes(&mem["after_bytes"]) > 0);
}

fn assert_warned(report: &Value, stderr: &str, name: &str, resident_words: &str) {
    let warnings: Vec<&str> = report["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let w = warnings[0];
    assert!(w.starts_with(&format!("{name} holds 0.")), "{w}");
    assert!(w.contains(resident_words), "{w}");
    assert!(
        w.contains("more than its declared server.memory_gb 0.1 GB"),
        "{w}"
    );
    assert!(w.contains("raise memory_gb in its recipe"), "{w}");
    // The CLI prints it; the JSON on stdout stays one document.
    assert!(stderr.contains(&format!("warning: {w}")), "{stderr}");
}

#[test]
fn a_process_holding_more_than_it_declared_is_measured_and_warned_about() {
    let deck = Deck::new("mem-proc");
    deck.recipe(
        "hog",
        &format!(
            "engine: sim\nruntime: process\nserver:\n  port: {}\n  args: [--hold-memory, {HOLD_MIB}m]\n  memory_gb: 0.1\nhealth:\n  timeout: 30s\n",
            free_port()
        ),
    );
    deck.recipe(
        "lean",
        &format!(
            "engine: sim\nruntime: process\nserver:\n  port: {}\n  memory_gb: 1\nhealth:\n  timeout: 30s\n",
            free_port()
        ),
    );

    let (report, stderr) = start_json(&deck, "hog");
    let observed = &report["memory_observed"];
    let pid: u32 = report["deployment"]["id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let processes = &observed["processes"];
    assert_eq!(processes["found_by"], "process_session");
    assert_eq!(processes["pids"], serde_json::json!([pid]));
    let resident = &observed["resident"];
    assert_eq!(resident["method"], "session_rss");
    assert!(
        about_held().contains(&bytes(&resident["bytes"])),
        "{resident}"
    );
    assert_gpu_figure(observed);
    assert_over_declaration(observed, "VmRSS");
    assert_warned(
        &report,
        &stderr,
        "hog",
        "resident memory (VmRSS) of its processes",
    );

    // Within its declaration: measured, no warning, and the human output says so.
    let ran = deck
        .sparkctl(&["start", "lean"])
        .succeeds()
        .says("  memory: holds 0.0")
        .says("declared 1 GB");
    assert!(!ran.stderr().contains("warning"), "{}", ran.shown());
}

#[test]
fn a_container_holding_more_than_it_declared_is_measured_by_its_cgroup_and_warned_about() {
    let deck = Deck::new("mem-docker");
    deck.recipe(
        "boxed",
        &format!(
            "engine: sim\nruntime: docker\nimage: {}\nserver:\n  port: {}\n  args: [--hold-memory, {HOLD_MIB}m]\n  memory_gb: 0.1\nhealth:\n  timeout: 30s\n",
            sim_image(),
            free_port()
        ),
    );
    deck.ok(&["images", "pin", "boxed"]);

    let (report, stderr) = start_json(&deck, "boxed");
    let observed = &report["memory_observed"];
    // The container's processes as host pids, found through the Engine API: its sim.
    let processes = &observed["processes"];
    assert_eq!(processes["found_by"], "docker_top", "{processes}");
    let pids = processes["pids"].as_array().unwrap();
    assert_eq!(pids.len(), 1, "{processes}");
    let comm = std::fs::read_to_string(format!("/proc/{}/comm", pids[0])).unwrap();
    assert_eq!(comm.trim(), "sparkctl");
    let resident = &observed["resident"];
    assert_eq!(resident["method"], "container_cgroup");
    assert!(
        about_held().contains(&bytes(&resident["bytes"])),
        "{resident}"
    );
    assert_gpu_figure(observed);
    assert_over_declaration(observed, "cgroup");
    assert_warned(&report, &stderr, "boxed", "the container's cgroup memory");
}
