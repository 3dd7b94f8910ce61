//! What the device that serves decides, on machines this suite has no GPU of: nvidia-smi
//! gives answers recorded on a DGX Spark (GB10, `[N/A]` memory), a lent H100 and a lent
//! two-GPU machine (tests/fixtures/nvidia-smi). That is a fake of the GPU alone: sparkctl,
//! its recipes, the simulated engine it benchmarks and the HTTP between them are real.
//!
//! - The memory plan: a server on a discrete GPU is planned against that GPU's memory,
//!   whatever the host's RAM; on a Spark against the one unified pool.
//! - The roofline: its bound is the serving device's bandwidth, so a decode speed that is
//!   impossible on a Spark is a share of an H100's.

use serde_json::Value;

use crate::support::{free_port, Deck, Ran};

/// A llama-server process recipe offloading every layer that declares `gb` GB. Its binary
/// is never run: every command here is refused or a dry run.
fn llama_recipe(deck: &Deck, name: &str, args: &str, extra: &str, gb: u32) {
    let model = deck.dir.join("model.gguf");
    std::fs::write(&model, b"GGUF fixture").unwrap();
    deck.recipe(
        name,
        &format!(
            r#"engine: llama-server
runtime: process
binary: /bin/sh
model:
  path: {}
server:
  port: {}
  args: [{args}]
{extra}  memory_gb: {gb}
"#,
            model.display(),
            free_port()
        ),
    );
}

/// `start NAME --dry-run` on `gpu` with `host_gb` of host RAM, insisting on exit `code`: the
/// run and its plan (or the error document).
fn dry_run(deck: &Deck, gpu: &str, host_gb: &str, name: &str, code: i32) -> (Ran, Value) {
    let ran = Ran::of(
        deck.on_gpu(gpu, &["--json", "start", name, "--dry-run"])
            .env("SPARKCTL_MEMORY_GB", host_gb),
    )
    .exits(code);
    let plan = ran.json();
    (ran, plan)
}

/// `sparkctl ARGS` on one H100 with 1 TB of host RAM.
fn on_h100_with_1_tb(deck: &Deck, args: &[&str]) -> Ran {
    Ran::of(deck.on_gpu("h100", args).env("SPARKCTL_MEMORY_GB", "1000"))
}

#[test]
fn a_gpu_server_bigger_than_its_gpu_is_refused_before_anything_starts_whatever_the_host_ram() {
    let deck = Deck::new("gpu-plan");
    llama_recipe(&deck, "big", "-ngl, \"999\"", "", 100);
    // One H100 of 81559 MiB (85.5 GB): 100 GB do not fit, with 1 TB of host RAM or 128 GB.
    for host_gb in ["1000", "128"] {
        dry_run(&deck, "h100", host_gb, "big", 1)
            .0
            .says("big does not fit in memory even alone")
            .says("needs 100 GB of a 85.5 GB budget")
            .says("GPU 0: NVIDIA H100 80GB HBM3, 81559 MiB")
            .says("host RAM does not count");
    }
    // Not a dry run: refused the same way, and nothing ran.
    on_h100_with_1_tb(&deck, &["start", "big"])
        .exits(1)
        .warns("does not fit in memory even alone");
    assert!(deck.status().is_empty(), "{:?}", deck.status());
    // `doctor big` says the same before anyone tries.
    on_h100_with_1_tb(&deck, &["doctor", "big"])
        .exits(1)
        .says("big memory")
        .says("GPU 0: NVIDIA H100 80GB HBM3, 81559 MiB")
        .says("does not fit even alone");
}

/// Two of them hold it: the plan counts both GPUs it is given.
#[test]
fn two_gpus_hold_what_one_cannot() {
    let deck = Deck::new("gpu-two");
    llama_recipe(&deck, "big", "-ngl, \"999\"", "", 100);
    let (_, plan) = dry_run(&deck, "two-h100", "128", "big", 0);
    assert_eq!(plan["memory"]["pool"]["kind"], "gpus");
    assert_eq!(plan["memory"]["pool"]["indices"], serde_json::json!([0, 1]));
    assert!((plan["memory"]["budget_gb"].as_f64().unwrap() - 171.04).abs() < 0.01);
}

/// Pinned to the second GPU alone, it does not fit; a GPU that is not there is named.
#[test]
fn a_server_pinned_to_one_gpu_is_planned_on_that_gpu_alone() {
    let deck = Deck::new("gpu-pinned");
    llama_recipe(
        &deck,
        "second",
        "-ngl, \"999\"",
        "  env: {CUDA_VISIBLE_DEVICES: \"1\"}\n",
        100,
    );
    dry_run(&deck, "two-h100", "128", "second", 1)
        .0
        .says("GPU 1: NVIDIA H100 80GB HBM3");
    // A recipe this machine cannot serve as written is bad input (usage, exit 2).
    dry_run(&deck, "h100", "128", "second", 2)
        .0
        .says("nvidia-smi lists 1 here");
}

/// On a Spark the same recipe shares the one pool with the CPU: 100 of 120 GB fit.
#[test]
fn on_a_spark_a_gpu_server_is_planned_in_the_pool_it_shares_with_the_cpu() {
    let deck = Deck::new("gpu-spark");
    llama_recipe(&deck, "big", "-ngl, \"999\"", "", 100);
    let (_, plan) = dry_run(&deck, "gb10", "128", "big", 0);
    assert_eq!(plan["memory"]["pool"]["kind"], "unified");
    assert_eq!(plan["memory"]["budget_gb"], 120.0);
    dry_run(&deck, "gb10", "100", "big", 1)
        .0
        .says("unified memory NVIDIA GB10 shares with the CPU");
}

/// With no layer offloaded it is a CPU server: host RAM is its pool.
#[test]
fn a_llama_server_with_no_layer_offloaded_is_planned_in_host_ram() {
    let deck = Deck::new("gpu-cpu");
    llama_recipe(&deck, "cpu", "-ngl, \"0\"", "", 100);
    let (_, plan) = dry_run(&deck, "h100", "1000", "cpu", 0);
    assert_eq!(plan["memory"]["pool"]["kind"], "host_ram");
}

/// Benchmarks a sim recipe decoding 300 tok/s from 5300 MiB of weights on `gpu`.
/// Insists on exit `code`; returns the run and its result.
fn bench_on(deck: &Deck, gpu: Option<&str>, tag: &str, code: i32) -> (Ran, Value) {
    let suite = deck.dir.join("one.yaml");
    std::fs::write(
        &suite,
        r#"name: one
warmup: 1
runs: 5
cases:
  - name: q
    turns: ["Tell me."]
"#,
    )
    .unwrap();
    let file = deck.dir.join(format!("{tag}.json"));
    let args = [
        "bench",
        "fast",
        "--suite",
        suite.to_str().unwrap(),
        "--out",
        file.to_str().unwrap(),
    ];
    let ran = match gpu {
        Some(g) => Ran::of(&mut deck.on_gpu(g, &args)),
        None => deck.sparkctl(&args),
    }
    .exits(code);
    let r = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    (ran, r)
}

#[test]
fn the_roofline_is_the_serving_devices_so_a_spark_s_impossible_is_an_h100_s_share() {
    let deck = Deck::new("gpu-roofline");
    let model = deck.dir.join("model.gguf");
    std::fs::write(&model, b"fixture").unwrap();
    // Given GPU 0 (on a Spark: the GB10), decoding 300 tok/s from 5300 MiB.
    deck.recipe(
        "fast",
        &format!(
            r#"engine: sim
runtime: process
model:
  path: {}
  weights: 5300m
server:
  port: {}
  args: [--load-time, 0s, --ttft, 10ms, --token-rate, "300"]
  env: {{CUDA_VISIBLE_DEVICES: "0"}}
bench:
  gates:
    decode_tps_p50: ">= 100"
"#,
            model.display(),
            free_port()
        ),
    );
    deck.ok(&["start", "fast"]);

    // A Spark's 273 GB/s allow 49 tok/s: 300 is impossible, the gate cannot decide.
    let (ran, r) = bench_on(&deck, Some("gb10"), "spark", 1);
    assert_eq!(r["roofline"]["impossible"], true, "{}", ran.shown());
    assert_eq!(r["verdict"], "inconclusive", "{}", ran.shown());

    // An H100 SXM's 3350 GB/s allow 602 tok/s: nothing is impossible, the roofline share
    // is shown below 100%, and the decode gate decides.
    let (ran, r) = bench_on(&deck, Some("h100"), "h100", 0);
    let samples = r["samples"].as_array().unwrap();
    assert!(
        samples.iter().all(|s| s["impossible"] == false),
        "{}",
        ran.shown()
    );
    assert_eq!(r["target"]["bandwidth"]["from"], "NVIDIA H100 80GB HBM3");
    let share = r["roofline_share"].as_f64().unwrap();
    let expected = r["decode_tps_p50"].as_f64().unwrap() * 5300.0 * 1048576.0 / 3350e9;
    assert!((share - expected).abs() < 1e-9 && share < 1.0, "{share}");
    assert_eq!(r["gates"][0]["outcome"], "pass", "{}", r["gates"]);
    assert_eq!(r["verdict"], "pass");
    ran.says("that 3350 GB/s allows: NVIDIA H100 80GB HBM3)");

    // No GPU at all (this machine): no bound, so no roofline and nothing impossible; the
    // result says why and how to declare one.
    let (_, r) = bench_on(&deck, None, "none", 0);
    assert!(r["roofline"].is_null());
    let notes = r["notes"].to_string();
    assert!(notes.contains("no roofline: no NVIDIA GPU here"), "{notes}");
    assert!(notes.contains("SPARKCTL_BANDWIDTH_GBPS"), "{notes}");

    // The host's figure wins over the device's, and a bad one is refused by name.
    Ran::of(
        deck.on_gpu("h100", &["bench", "fast", "--runs", "5"])
            .env("SPARKCTL_BANDWIDTH_GBPS", "fast"),
    )
    .exits(2)
    .warns("SPARKCTL_BANDWIDTH_GBPS=fast is not a bandwidth");
    deck.ok(&["down", "fast"]);
}

#[test]
fn status_shows_what_a_deployment_holds_beside_its_declaration() {
    let deck = Deck::new("gpu-status");
    let port = free_port();
    deck.recipe(
        "holder",
        &format!(
            r#"engine: sim
runtime: process
server:
  port: {port}
  args: [--load-time, 0s, --hold-memory, 64m]
  memory_gb: 0.5
"#
        ),
    );
    deck.ok(&["start", "holder"]);
    let row = deck.status_of("holder").unwrap();
    let memory = &row["memory"];
    assert_eq!(memory["declared_gb"], 0.5, "{row}");
    assert!(
        memory["resident"]["bytes"].as_u64().unwrap() >= 64 << 20,
        "{memory}"
    );
    // No nvidia-smi here: the GPU figure says why, never a zero.
    assert!(memory["gpu"]["bytes"].is_null(), "{memory}");
    let table = deck.ok(&["status"]);
    assert!(table.contains("declared 0.5 GB"), "{table}");
    assert!(table.contains("+ RSS 0."), "{table}");
    deck.ok(&["down", "holder"]);
}
