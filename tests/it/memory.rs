//! The memory check after a start, on real parts: the simulated engine really allocates
//! (`--hold-memory`) more than its recipe declares, as a process and in a container, and
//! `start` must measure it, say how, and warn; a server within its declaration must not be
//! warned about.

use serde_json::Value;

use crate::support::{self, free_port, sim_image, Deck};

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

/// A process recipe `name` of the sim with these args, declaring `gb`.
fn process_recipe(deck: &Deck, name: &str, args: &str, gb: f64) {
    deck.recipe(
        name,
        &format!(
            "engine: sim\nruntime: process\nserver:\n  port: {}\n  args: [{args}]\n  memory_gb: {gb}\nhealth:\n  timeout: 30s\n",
            free_port()
        ),
    );
}

#[test]
fn a_server_holding_more_than_it_declares_is_planned_with_what_it_holds_and_said_so() {
    let deck = Deck::new("mem-truth");
    // Production declares 0.1 GB and holds 600 MiB; the candidate declares 1 GB.
    process_recipe(&deck, "prod", "--hold-memory, 600m", 0.1);
    process_recipe(&deck, "cand", "--load-time, 200ms", 1.0);
    deck.ok(&["rollback", "--to", "prod"]);

    // status and doctor say so, with both figures.
    let row = deck.status_of("prod").unwrap();
    let held = &row["memory"];
    assert_eq!(held["over_declared"], true, "{row}");
    assert!(held["counted_gb"].as_f64().unwrap() >= 0.6, "{held}");
    let shown = deck.ok(&["status"]);
    assert!(
        shown.contains("more than its declared 0.1 GB: planned at 0."),
        "{shown}"
    );
    let doctor = deck.sparkctl(&["doctor"]).stdout();
    assert!(doctor.contains("memory held"), "{doctor}");
    assert!(doctor.contains("prod: GPU"), "{doctor}");
    assert!(doctor.contains("more than its declared 0.1 GB"), "{doctor}");

    // In a 1.5 GB pool the declarations fit together (0.1 + 1), what is held does not
    // (0.6 + 1): the plan is a swap, and its line gives both figures.
    let pool = |args: &[&str]| {
        support::Ran::of(
            deck.cmd(args)
                .env("SPARKCTL_MEMORY_GB", "1.5")
                .env("SPARKCTL_MEMORY_RESERVE_GB", "0"),
        )
    };
    pool(&["up", "cand", "--dry-run"])
        .succeeds()
        .warns("running: prod 0.6")
        .warns("GB held, more than its declared 0.1 GB")
        .warns("production prod must stop first (swap");
    // Declared alone it would have been blue/green: with a bigger pool it is.
    support::Ran::of(
        deck.cmd(&["up", "cand", "--dry-run"])
            .env("SPARKCTL_MEMORY_GB", "3")
            .env("SPARKCTL_MEMORY_RESERVE_GB", "0"),
    )
    .succeeds()
    .warns("keeps serving until cand serves (blue/green)");
}

/// MemTotal in GB, as the plan counts (decimal).
fn mem_total_gb() -> f64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kb: f64 = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap()
        .parse()
        .unwrap();
    kb * 1024.0 / 1e9
}

#[test]
fn a_start_that_would_leave_less_than_the_reserve_is_refused_before_anything_stops() {
    let deck = Deck::new("mem-floor");
    process_recipe(&deck, "prod", "--load-time, 100ms", 0.2);
    process_recipe(&deck, "cand", "--load-time, 100ms", 0.2);
    deck.ok(&["rollback", "--to", "prod"]);
    // The machine's own pool (no SPARKCTL_MEMORY_GB) with a reserve of all but 0.3 GB: the
    // budget holds one server of 0.2 GB (prod must stop for cand: a swap), but no machine
    // has all but 0.1 GB of its memory available, so the floor refuses it.
    let reserve = format!("{:.3}", mem_total_gb() - 0.3);
    let on_host = |args: &[&str]| {
        support::Ran::of(
            deck.cmd(args)
                .env_remove("SPARKCTL_MEMORY_GB")
                .env("SPARKCTL_MEMORY_RESERVE_GB", &reserve),
        )
    };
    on_host(&["up", "cand", "--yes"])
        .exits(1)
        .warns("cand does not fit in memory above the reserve")
        .warns("GB available (MemAvailable)")
        .warns(&format!("reserve {reserve} GB"))
        .warns("nothing was stopped or started")
        .never_says("stopping prod");
    // Nothing stopped, nothing started: production serves as before.
    let prod = deck.status_of("prod").unwrap();
    assert_eq!(prod["role"], "production", "{prod}");
    assert_eq!(prod["state"], "running", "{prod}");
    assert!(deck.status_of("cand").is_none());
    assert_eq!(
        support::http_status(&deck.door_url(), "/v1/models"),
        Some(200)
    );
    // `start` keeps the same floor.
    on_host(&["start", "cand", "--dry-run"])
        .exits(1)
        .warns("above the reserve");
    // Within the reserve, it is no more than a plan line.
    support::Ran::of(
        deck.cmd(&["up", "cand", "--dry-run"])
            .env_remove("SPARKCTL_MEMORY_GB")
            .env("SPARKCTL_MEMORY_RESERVE_GB", "0"),
    )
    .succeeds()
    .warns("GB available (MemAvailable)")
    .warns("reserve 0 GB");
}
