//! Runtimes against real parts: the Docker Engine running the FROM-scratch sim image, the
//! same static binary as a host process, real ports, real signals. Every test owns its
//! recipes and state dir (`Deck`) and removes what it started.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{self, docker, free_port, http_status, sim_image, Deck, Ran};

fn process_recipe(port: u16, args: &str) -> String {
    format!(
        r#"engine: sim
runtime: process
server:
  port: {port}
  args: [{args}]
  memory_gb: 7
health:
  timeout: 20s
"#
    )
}

fn docker_recipe(port: u16, args: &str) -> String {
    format!(
        r#"engine: sim
runtime: docker
image: {}
server:
  port: {port}
  args: [{args}]
  memory_gb: 12
health:
  timeout: 20s
"#,
        sim_image()
    )
}

/// A failure noticed, not timed out: well under the recipes' 20 s health timeout. How fast is
/// not asserted here (a loaded machine stretches every wall-clock figure; `cargo bench --bench
/// readiness` measures the detection latency); the stderr shows each figure.
const NOTICED: Duration = Duration::from_secs(10);

/// Runs `start NAME` expecting failure; returns its stderr and how long it took.
fn failing_start(deck: &Deck, name: &str, extra: &[&str]) -> (String, Duration) {
    let began = Instant::now();
    let mut args = vec!["start", name];
    args.extend_from_slice(extra);
    let ran = deck.sparkctl(&args);
    let took = began.elapsed();
    (ran.exits(1).stderr(), took)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_and_a_container_start_list_log_and_stop() {
    let deck = Deck::new("rt-both");
    let (pport, cport) = (free_port(), free_port());
    let model = deck.dir.join("model");
    std::fs::create_dir_all(&model).unwrap();
    std::fs::write(model.join("weights.gguf"), b"GGUF fixture").unwrap();
    deck.recipe(
        "prod",
        &format!(
            r#"model:
  path: {}
{}"#,
            model.display(),
            process_recipe(pport, "--load-time, 300ms")
        ),
    );
    deck.recipe("cand", &docker_recipe(cport, "--load-time, 500ms"));
    deck.ok(&["images", "pin", "cand"]);

    for name in ["prod", "cand"] {
        let out = deck.ok(&["start", name]);
        assert!(
            out.contains(&format!("{name} is ready at http://127.0.0.1:")),
            "{out}"
        );
    }
    assert_eq!(
        http_status(&format!("http://127.0.0.1:{pport}"), "/health"),
        Some(200)
    );
    assert_eq!(
        http_status(&format!("http://127.0.0.1:{cport}"), "/health"),
        Some(200)
    );

    let prod = deck.status_of("prod").expect("prod listed");
    assert_eq!(prod["runtime"], "process");
    assert_eq!(prod["state"], "running");
    assert_eq!(prod["health"], "ready");
    // The model that serves is recorded by its fingerprint.
    let expected = sparkctl::testkit::fingerprint(&model, &deck.dir.join("fp-cache"), 1)
        .unwrap()
        .digest;
    assert_eq!(prod["model_fingerprint"], expected.as_str());
    let cand = deck.status_of("cand").expect("cand listed");
    assert_eq!(cand["runtime"], "docker");
    assert_eq!(cand["health"], "ready");
    assert_eq!(cand["image_ref"], sim_image());
    assert!(cand["artifact"].as_str().unwrap().starts_with("sha256:"));
    let table = deck.ok(&["status"]);
    assert!(table.contains("prod") && table.contains("cand"), "{table}");

    // The container carries sparkctl's labels and is kept after it exits.
    let docker = docker().await;
    let id = cand["id"].as_str().unwrap();
    let info = docker.inspect_container(id, None).await.unwrap();
    let labels = info.config.unwrap().labels.unwrap();
    assert_eq!(labels["io.sparkctl.managed"], "true");
    assert_eq!(labels["io.sparkctl.recipe"], "cand");
    assert_eq!(
        labels["io.sparkctl.state"],
        deck.state().display().to_string()
    );
    assert!(labels["io.sparkctl.recipe-hash"].starts_with("sha256:"));
    assert_eq!(
        labels["io.sparkctl.run-id"],
        cand["run_id"].as_str().unwrap()
    );
    let host = info.host_config.unwrap();
    assert_eq!(host.auto_remove, Some(false));
    let binding = &host.port_bindings.unwrap()["8000/tcp"].clone().unwrap()[0];
    assert_eq!(binding.host_ip.as_deref(), Some("127.0.0.1"));
    assert_eq!(
        binding.host_port.as_deref(),
        Some(cport.to_string().as_str())
    );

    for name in ["prod", "cand"] {
        let logs = deck.ok(&["logs", name]);
        assert!(
            logs.contains("sparkctl-sim: listening on"),
            "{name}: {logs}"
        );
        assert!(
            logs.contains("POST /v1/chat/completions 200"),
            "readiness made one completion: {logs}"
        );
    }
    let tail = deck.ok(&["logs", "prod", "--tail", "1"]);
    assert_eq!(tail.lines().count(), 1, "{tail}");

    for name in ["prod", "cand"] {
        let out = deck.ok(&["down", name]);
        assert!(out.contains(&format!("stopped {name}")), "{out}");
    }
    assert_eq!(
        http_status(&format!("http://127.0.0.1:{pport}"), "/health"),
        None
    );
    assert_eq!(
        http_status(&format!("http://127.0.0.1:{cport}"), "/health"),
        None
    );
    let pid: i32 = prod["id"].as_str().unwrap().parse().unwrap();
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .unwrap_or_default()
                .contains(") Z "),
        "process {pid} is gone"
    );
    // Stopped, not removed: the container and both logs remain.
    let state = docker
        .inspect_container(id, None)
        .await
        .unwrap()
        .state
        .unwrap();
    assert_eq!(state.running, Some(false));
    for name in ["prod", "cand"] {
        assert_eq!(deck.status_of(name).unwrap()["state"], "exited");
        let logs = deck.ok(&["logs", name]);
        assert!(
            logs.contains("sparkctl-sim: shutting down"),
            "{name}: {logs}"
        );
    }
    let again = deck.ok(&["down", "prod"]);
    assert!(again.contains("not running; nothing to stop"), "{again}");
}

#[test]
fn a_crash_during_load_is_explained_long_before_the_health_timeout_in_both_runtimes() {
    let deck = Deck::new("rt-crash");
    // Crashes at half the load time: 1 s after start.
    let args = "--load-time, 2s, --load-fault, crash";
    deck.recipe("pcrash", &process_recipe(free_port(), args));
    deck.recipe("ccrash", &docker_recipe(free_port(), args));
    deck.ok(&["images", "pin", "ccrash"]);
    for name in ["pcrash", "ccrash"] {
        let (err, took) = failing_start(&deck, name, &[]);
        eprintln!("{name}: crash at 1.0 s, reported after {took:?}");
        // Normally the exit arrives with the fatal line; on a loaded machine the engine's
        // exit event can trail it, and the fatal line alone is reported.
        assert!(
            err.contains("exited with code 1 while starting") || err.contains("cannot start"),
            "{err}"
        );
        assert!(
            err.contains("fatal: torch.AcceleratorError: CUDA error: no kernel image"),
            "{err}"
        );
        assert!(err.contains("help: the image's CUDA kernels were not built for SM 12.1"));
        assert!(err.contains(&format!("`sparkctl logs {name}`")), "{err}");
        assert!(took < NOTICED, "{name}: {took:?}");
        // The logs outlive the crash.
        let logs = deck.ok(&["logs", name]);
        assert!(logs.contains("no kernel image is available"), "{logs}");
    }
}

#[test]
fn an_oom_like_kill_is_named_as_such() {
    let deck = Deck::new("rt-killed");
    let args = "--load-time, 2s, --load-fault, killed";
    deck.recipe("ckilled", &docker_recipe(free_port(), args));
    deck.ok(&["images", "pin", "ckilled"]);
    deck.recipe("pkilled", &process_recipe(free_port(), args));
    for (name, expect) in [
        ("ckilled", "(exit code 137)"),
        ("pkilled", "killed by SIGKILL"),
    ] {
        let (err, took) = failing_start(&deck, name, &[]);
        eprintln!("{name}: killed at 1.0 s, reported after {took:?}");
        assert!(err.contains("killed by SIGKILL"), "{err}");
        assert!(err.contains(expect), "{err}");
        assert!(err.contains("usually memory"), "{err}");
        assert!(took < NOTICED, "{name}: {took:?}");
    }
}

#[test]
fn a_fatal_log_line_fails_at_once_and_the_hung_server_is_stopped() {
    let deck = Deck::new("rt-fatal");
    let port = free_port();
    deck.recipe(
        "hang",
        &process_recipe(
            port,
            "--load-time, 2s, --load-fault, fatal-hang, --fatal-line, \"(EngineCore pid=77) RuntimeError: Engine core initialization failed. See root cause above.\"",
        ),
    );
    let (err, took) = failing_start(&deck, "hang", &[]);
    eprintln!("hang: fatal line at 1.0 s, reported after {took:?}");
    assert!(err.contains("hang cannot start"), "{err}");
    assert!(
        err.contains("fatal: (EngineCore pid=77) RuntimeError: Engine core initialization failed")
    );
    assert!(took < NOTICED, "{took:?}");
    // It was alive and useless: sparkctl stopped it.
    assert_eq!(deck.status_of("hang").unwrap()["state"], "exited");
    assert_eq!(
        http_status(&format!("http://127.0.0.1:{port}"), "/health"),
        None
    );
}

#[test]
fn a_server_that_closes_its_port_is_caught_before_the_timeout() {
    let deck = Deck::new("rt-closed");
    deck.recipe(
        "closer",
        &process_recipe(free_port(), "--load-time, 2s, --load-fault, close-port"),
    );
    let (err, took) = failing_start(&deck, "closer", &[]);
    eprintln!("closer: port closed at 1.0 s, reported after {took:?}");
    assert!(err.contains("then refused connections"), "{err}");
    assert!(err.contains("closed its port"), "{err}");
    assert!(took < NOTICED, "{took:?}");
}

#[test]
fn never_ready_times_out_with_what_health_said() {
    let deck = Deck::new("rt-never");
    deck.recipe("never", &docker_recipe(free_port(), "--never-ready"));
    deck.ok(&["images", "pin", "never"]);
    let (err, took) = failing_start(&deck, "never", &["--timeout", "2s"]);
    assert!(err.contains("never was not ready within 2 s"), "{err}");
    assert!(err.contains("still answers 503"), "{err}");
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(20),
        "{took:?}"
    );
    assert_eq!(deck.status_of("never").unwrap()["state"], "exited");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_port_is_refused_before_anything_starts_and_names_its_owner() {
    let deck = Deck::new("rt-port");
    // A plain listener of this test process.
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = holder.local_addr().unwrap().port();
    deck.recipe("blocked", &docker_recipe(port, "--load-time, 0s"));
    deck.ok(&["images", "pin", "blocked"]);
    let (err, _) = failing_start(&deck, "blocked", &[]);
    assert!(
        err.contains(&format!(
            "port {port} is taken by pid {}",
            std::process::id()
        )),
        "{err}"
    );
    assert!(err.contains("not sparkctl's"), "{err}");
    assert!(deck.status().is_empty(), "no container was created");
    drop(holder);

    // A container sparkctl did not create holds a port: named, and never touched.
    let docker = docker().await;
    let port = free_port();
    let foreign = format!("not-sparkctl-{}", std::process::id());
    // A running container with a recipe-like label but not sparkctl's marks.
    support::run_plain_sim(
        &docker,
        sim_image(),
        &foreign,
        port,
        &[("io.sparkctl.recipe", "blocked2")],
        &[],
    )
    .await;
    deck.recipe("blocked2", &process_recipe(port, "--load-time, 0s"));
    let (err, _) = failing_start(&deck, "blocked2", &[]);
    assert!(
        err.contains(&format!("taken by container {foreign} (not sparkctl's)")),
        "{err}"
    );
    let out = deck.ok(&["down", "blocked2"]);
    assert!(out.contains("not running"), "{out}");
    assert!(deck.status().is_empty(), "{:?}", deck.status());
    let state = docker
        .inspect_container(&foreign, None)
        .await
        .unwrap()
        .state
        .unwrap();
    assert_eq!(
        state.running,
        Some(true),
        "the foreign container still runs"
    );
    let opts = bollard::query_parameters::RemoveContainerOptionsBuilder::new()
        .force(true)
        .build();
    docker.remove_container(&foreign, Some(opts)).await.unwrap();
}

#[test]
fn a_missing_image_or_binary_is_refused_with_the_fix() {
    let deck = Deck::new("rt-missing");
    deck.recipe(
        "noimage",
        &format!(
            r#"engine: sim
runtime: docker
image: sparkctl-absent:nope
server:
  port: {}
"#,
            free_port()
        ),
    );
    // No pin: refused as bad input.
    deck.sparkctl(&["start", "noimage"])
        .exits(2)
        .warns("has no pin in images.lock; run `sparkctl images pin noimage`");
    let (err, _) = failing_start(&deck, "noimage", &["--allow-unpinned"]);
    assert!(
        err.contains("image sparkctl-absent:nope (recipe noimage) is not on this machine"),
        "{err}"
    );
    deck.recipe(
        "nobinary",
        &format!(
            r#"engine: llama-server
runtime: process
binary: /nonexistent/llama-server
model:
  path: {}
server:
  port: {}
"#,
            deck.dir.display(),
            free_port()
        ),
    );
    deck.sparkctl(&["start", "nobinary"])
        .exits(2)
        .warns("binary /nonexistent/llama-server does not exist");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_requests_reach_the_container_spec_and_fail_early_without_the_nvidia_runtime() {
    let deck = Deck::new("rt-gpu");
    let port = free_port();
    let model = deck.dir.join("model");
    std::fs::create_dir_all(&model).unwrap();
    deck.recipe(
        "gpu",
        &format!(
            r#"engine: vllm
image: {}
model:
  path: {}
server:
  port: {port}
  gpus: all
  ipc: host
  shm_size: 1g
  ulimits: {{memlock: -1, stack: 67108864}}
  user: "1000:1000"
  env: {{VLLM_LOGGING_LEVEL: DEBUG}}
  env_from_host: [SPARKCTL_TEST_SECRET]
"#,
            sim_image(),
            model.display()
        ),
    );
    let docker = docker().await;
    let has_nvidia = docker
        .info()
        .await
        .unwrap()
        .runtimes
        .unwrap_or_default()
        .contains_key("nvidia");

    // What sparkctl would create, created for real (not started) and read back.
    let set = sparkctl::testkit::load_dir(&deck.dir.join("recipes")).unwrap();
    let recipe = &set.get("gpu").unwrap().recipe;
    let spec = sparkctl::testkit::StartSpec {
        resolved: recipe.resolve("sparkctl"),
        recipe_hash: recipe.hash(),
        run_id: "test".into(),
        model_fingerprint: Some("sha256:0123".into()),
        unpinned: false,
        image_ref: None,
    };
    let body = sparkctl::testkit::container_spec(
        &spec,
        sim_image(),
        &deck.state().display().to_string(),
        vec!["SPARKCTL_TEST_SECRET=s3cret".into()],
    );
    let name = format!("sparkctl-gpu-spec-{}", std::process::id());
    let opts = bollard::query_parameters::CreateContainerOptionsBuilder::new()
        .name(&name)
        .build();
    docker.create_container(Some(opts), body).await.unwrap();
    let info = docker.inspect_container(&name, None).await.unwrap();
    let host = info.host_config.unwrap();
    let req = &host.device_requests.unwrap()[0];
    assert_eq!(req.driver.as_deref(), Some("nvidia"));
    assert_eq!(req.count, Some(-1), "--gpus all");
    assert_eq!(req.capabilities, Some(vec![vec!["gpu".to_string()]]));
    assert_eq!(host.ipc_mode.as_deref(), Some("host"));
    assert_eq!(host.shm_size, Some(1 << 30));
    let ulimits: Vec<(String, i64)> = host
        .ulimits
        .unwrap()
        .into_iter()
        .map(|u| (u.name.unwrap(), u.soft.unwrap()))
        .collect();
    assert!(ulimits.contains(&("memlock".into(), -1)), "{ulimits:?}");
    assert!(ulimits.contains(&("stack".into(), 67108864)), "{ulimits:?}");
    assert_eq!(
        host.binds.unwrap(),
        vec![format!("{}:/model:ro", model.display())]
    );
    let config = info.config.unwrap();
    assert_eq!(
        config.labels.as_ref().unwrap()["io.sparkctl.model-fingerprint"],
        "sha256:0123"
    );
    assert_eq!(config.user.as_deref(), Some("1000:1000"));
    let env = config.env.unwrap();
    assert!(
        env.contains(&"VLLM_LOGGING_LEVEL=DEBUG".to_string()),
        "{env:?}"
    );
    let cmd = config.cmd.unwrap();
    assert!(
        cmd.windows(2).any(|w| w == ["--model", "/model"]),
        "{cmd:?}"
    );
    assert!(cmd.windows(2).any(|w| w == ["--port", "8000"]), "{cmd:?}");
    let opts = bollard::query_parameters::RemoveContainerOptionsBuilder::new()
        .force(true)
        .build();
    docker.remove_container(&name, Some(opts)).await.unwrap();

    if !has_nvidia {
        deck.ok(&["images", "pin", "gpu"]);
        // The CLI refuses before creating anything and names what is missing.
        let began = Instant::now();
        Ran::of(
            deck.cmd(&["start", "gpu"])
                .env("SPARKCTL_TEST_SECRET", "s3cret"),
        )
        .exits(1)
        .warns("has no `nvidia` runtime")
        .warns("NVIDIA Container Toolkit")
        // Secrets are never printed.
        .never_says("s3cret");
        assert!(began.elapsed() < NOTICED);
        assert!(deck.status().is_empty());
    }
}

/// Two starters of one recipe at once (the front door's watch restarting production while
/// a command's way back starts it too) once both spawned: the last one's record named a
/// process that then lost the port and died, and the one that held the port was nobody's
/// ("not sparkctl's"), stoppable by no `down`.
#[test]
fn concurrent_starts_of_one_recipe_run_one_server_and_it_is_the_recorded_one() {
    let deck = Deck::new("rt-race");
    let port = free_port();
    deck.recipe("prod", &process_recipe(port, "--load-time, 500ms"));
    let starts: Vec<_> = (0..4)
        .map(|_| support::Ran::spawn(&mut deck.cmd(&["start", "prod"])))
        .collect();
    let ran: Vec<support::Ran> = starts.into_iter().map(|s| s.wait()).collect();
    let shown: String = ran.iter().map(|r| r.shown()).collect();
    let ok = ran.iter().filter(|r| r.code() == Some(0)).count();
    assert_eq!(ok, 1, "one start succeeds: {shown}");
    for r in ran.iter().filter(|r| r.code() != Some(0)) {
        let err = r.stderr();
        assert!(
            err.contains("prod is already running")
                || err.contains("is taken by sparkctl deployment prod"),
            "a refused start says why: {err}"
        );
    }
    let prod = deck.status_of("prod").expect("prod listed");
    assert_eq!(prod["state"], "running", "{prod}");
    let pid: i32 = prod["id"].as_str().unwrap().parse().unwrap();
    assert_eq!(
        unsafe { libc::kill(pid, 0) },
        0,
        "the recorded pid {pid} runs"
    );
    assert_eq!(
        http_status(&format!("http://127.0.0.1:{port}"), "/health"),
        Some(200)
    );
    // The recorded one is the one that serves: stopping it by name frees the port.
    deck.ok(&["down", "prod"]);
    assert_eq!(
        http_status(&format!("http://127.0.0.1:{port}"), "/health"),
        None,
        "{shown}"
    );
}

#[test]
fn a_recipe_that_does_not_fit_in_memory_names_what_must_stop() {
    let deck = Deck::new("rt-memory");
    deck.recipe("small", &process_recipe(free_port(), "--load-time, 0s"));
    deck.recipe("big", &docker_recipe(free_port(), "--load-time, 0s"));
    deck.ok(&["images", "pin", "big"]);
    deck.ok(&["start", "small"]);
    // 7 GB runs; 12 more do not fit in 15.
    let tight = |args: &[&str]| {
        Ran::of(
            deck.cmd(args)
                .env("SPARKCTL_MEMORY_GB", "15")
                .env("SPARKCTL_MEMORY_RESERVE_GB", "0"),
        )
    };
    let plan = tight(&["--json", "start", "big", "--dry-run"])
        .succeeds()
        .json();
    assert_eq!(plan["memory"]["must_stop"], serde_json::json!(["small"]));
    assert_eq!(plan["memory"]["fits"], true);
    tight(&["start", "big"])
        .exits(1)
        .warns("big does not fit in memory")
        .warns("stop `sparkctl down small` first");
    assert!(deck.status_of("big").is_none(), "nothing was started");
    // With room it starts next to the other.
    deck.ok(&["start", "big"]);
    deck.ok(&["down", "big"]);
    deck.ok(&["down", "small"]);
}

#[test]
fn ctrl_c_while_waiting_stops_the_server_and_says_so() {
    let deck = Deck::new("rt-sigint");
    let port = free_port();
    deck.recipe("slow", &docker_recipe(port, "--never-ready"));
    deck.ok(&["images", "pin", "slow"]);
    let start = Ran::spawn(&mut deck.cmd(&["start", "slow"]));
    // Wait until the container exists, then interrupt.
    let deadline = Instant::now() + Duration::from_secs(60);
    while http_status(&format!("http://127.0.0.1:{port}"), "/health") != Some(503) {
        assert!(Instant::now() < deadline, "slow never answered 503");
        std::thread::sleep(Duration::from_millis(20));
    }
    start.interrupt();
    start
        .wait()
        .exits(130)
        .warns("interrupted: stopped slow before it was ready");
    assert_eq!(deck.status_of("slow").unwrap()["state"], "exited");
    assert_eq!(
        http_status(&format!("http://127.0.0.1:{port}"), "/health"),
        None
    );
}

#[test]
fn without_a_docker_engine_processes_still_list_and_containers_get_a_clear_error() {
    let deck = Deck::new("rt-nodocker");
    deck.recipe("p", &process_recipe(free_port(), "--load-time, 0s"));
    deck.recipe("c", &docker_recipe(free_port(), "--load-time, 0s"));
    deck.ok(&["images", "pin", "c"]);
    let nodocker = |args: &[&str]| {
        Ran::of(
            deck.cmd(args)
                .env("DOCKER_HOST", "unix:///nonexistent/docker.sock"),
        )
    };
    nodocker(&["start", "p"]).succeeds();
    nodocker(&["start", "c"])
        .exits(1)
        .warns("cannot reach the Docker Engine");
    nodocker(&["status"])
        .succeeds()
        .says(" p ")
        .warns("warning: containers not shown");
    // In use is a process: without an engine the machine still serves it.
    nodocker(&["doctor"]).succeeds().says("warn  docker engine");
    // The docker recipe asked for cannot run: doctor fails.
    nodocker(&["doctor", "c"])
        .exits(1)
        .says("FAIL  docker engine");
    deck.ok(&["down", "p"]);
}

#[test]
fn doctor_reports_engine_ports_and_state_dir() {
    let deck = Deck::new("rt-doctor");
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = holder.local_addr().unwrap().port();
    deck.recipe("a", &process_recipe(taken, "--load-time, 0s"));
    deck.recipe("b", &docker_recipe(free_port(), "--load-time, 0s"));
    let ran = deck.sparkctl(&["--json", "doctor", "a", "b"]).exits(1);
    // The checks, then the failure as a JSON document of its own.
    let checks: Value = serde_json::Deserializer::from_str(&ran.stdout())
        .into_iter()
        .next()
        .expect("the checks as JSON")
        .unwrap();
    let find = |name: &str| {
        checks
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no {name} check in {checks}"))
            .clone()
    };
    assert_eq!(find("docker engine")["verdict"], "ok");
    assert!(find("docker engine")["detail"]
        .as_str()
        .unwrap()
        .contains("Docker Engine"));
    let port = find("a port");
    assert_eq!(port["verdict"], "fail");
    assert!(port["detail"]
        .as_str()
        .unwrap()
        .contains(&format!("{taken} is taken by pid {}", std::process::id())));
    assert_eq!(find("a binary")["verdict"], "ok");
    assert_eq!(find("b port")["verdict"], "ok");
    let image = find("b image");
    assert_eq!(image["verdict"], "fail", "unpinned: `start b` would refuse");
    assert!(image["detail"]
        .as_str()
        .unwrap()
        .contains("sparkctl images pin b"));
    assert_eq!(find("state dir")["verdict"], "ok");
    assert!(find("nvidia runtime")["verdict"] != "fail");

    // Asked about nothing, with nothing in use: the machine only, and a line for the rest.
    deck.sparkctl(&["doctor"])
        .succeeds()
        .says("not checked")
        .says("a, b (not in use); `sparkctl doctor RECIPE` checks one")
        .never_says("a port");
}

#[test]
fn logs_follow_new_output_until_the_server_stops() {
    use std::io::{BufRead, BufReader};
    let deck = Deck::new("rt-follow");
    let (pport, cport) = (free_port(), free_port());
    deck.recipe("pf", &process_recipe(pport, "--load-time, 0s"));
    deck.recipe("cf", &docker_recipe(cport, "--load-time, 0s"));
    deck.ok(&["images", "pin", "cf"]);
    for (name, port) in [("pf", pport), ("cf", cport)] {
        deck.ok(&["start", name]);
        let mut follower = Ran::spawn(&mut deck.cmd(&["logs", name, "-f", "--tail", "0"]));
        let lines = BufReader::new(follower.child.stdout.take().unwrap()).lines();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        // The follower shows only lines written after it attaches, and nothing says when
        // that is: each request writes a new line, so ask until one comes through.
        let deadline = Instant::now() + Duration::from_secs(60);
        let line = loop {
            assert_eq!(
                http_status(&format!("http://127.0.0.1:{port}"), "/v1/models"),
                Some(200)
            );
            match rx.recv_timeout(Duration::from_millis(500)) {
                Ok(line) => break line,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    panic!("{name}: logs -f ended before a new line")
                }
                Err(_) if Instant::now() < deadline => continue,
                Err(e) => panic!("{name}: no new line within 60 s ({e})"),
            }
        };
        assert!(line.contains("GET /v1/models"), "{name}: {line}");
        deck.ok(&["down", name]);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if follower.child.try_wait().unwrap().is_some() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{name}: logs -f did not end with the server"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn a_container_created_but_never_started_shows_as_created_not_exited() {
    use bollard::models::ContainerCreateBody;
    let deck = Deck::new("rt-created");
    let state = deck.state().display().to_string();
    let image = sim_image();
    let name = format!("sparkctl-created-{}", std::process::id());
    support::block_on({
        let (state, name) = (state.clone(), name.clone());
        async move {
            let docker = docker().await;
            let labels = [
                ("io.sparkctl.managed", "true"),
                ("io.sparkctl.state", state.as_str()),
                ("io.sparkctl.recipe", "ghost"),
                ("io.sparkctl.engine", "sim"),
                ("io.sparkctl.port", "8000"),
            ];
            let body = ContainerCreateBody {
                image: Some(image.into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            };
            let opts = bollard::query_parameters::CreateContainerOptionsBuilder::new()
                .name(&name)
                .build();
            docker.create_container(Some(opts), body).await.unwrap();
        }
    });
    let row = deck
        .status_of("ghost")
        .expect("the created container is listed");
    assert_eq!(row["state"], "created", "{row}");
    assert_eq!(row["health"], "created, never started", "{row}");
    let table = deck.ok(&["status"]);
    assert!(!table.contains("exited with code 0"), "{table}");
}
