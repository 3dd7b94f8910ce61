//! Shared by the integration tests: the real sparkctl binary, real processes, real HTTP.
#![allow(dead_code)]

pub mod cdp;
pub mod disk;
pub mod lan;
pub mod registry;
pub mod second_engine;
pub mod two_nodes;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::Value;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn sparkctl() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sparkctl"));
    cmd.current_dir(repo())
        .env("NO_COLOR", "1")
        .env_remove("SPARKCTL_RECIPES");
    cmd
}

/// `sparkctl ARGS` in the repository, on the recipes it ships.
pub fn in_repo(args: &[&str]) -> Ran {
    Ran::of(sparkctl().args(args))
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A `sparkctl sim` process on a free loopback port, killed on drop.
pub struct Sim {
    pub child: Child,
    pub url: String,
    pub started: Instant,
    /// Its stdout lines so far (request log).
    pub log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Sim {
    pub fn start(args: &[&str]) -> Sim {
        Sim::start_with_env(args, &[])
    }

    /// As `start`, with these environment variables (vLLM's `VLLM_SERVER_DEV_MODE`, say).
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Sim {
        let started = Instant::now();
        let mut child = sparkctl()
            .args(["sim", "--host", "127.0.0.1", "--port", "0"])
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("sim starts");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout piped")).lines();
        // Its address, once it listens (at once; after loading with `--mimic vllm`).
        let url = loop {
            let line = lines
                .next()
                .expect("sim prints its address")
                .expect("utf-8");
            if let Some(url) = line.split("listening on ").nth(1) {
                break url.trim().to_string();
            }
        };
        // Keep draining stdout so the sim never blocks on a full pipe.
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Sim {
            child,
            url,
            started,
            log,
        }
    }

    pub fn wait_ready(&self, within: Duration) {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if http_status(&self.url, "/health") == Some(200) {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        panic!("sim at {} not ready within {within:?}", self.url);
    }
}

/// Status code of a plain GET, with no async runtime (usable from any test).
/// The files under `dir` that hold `needle`, one path a line (empty: none does).
pub fn files_holding(dir: &Path, needle: &str) -> String {
    let grep = Command::new("grep")
        .args(["-rl", "--", needle])
        .arg(dir)
        .output()
        .expect("grep runs");
    text(&grep.stdout)
}

/// Peak and current resident memory of a process (VmHWM, VmRSS from /proc), bytes.
pub fn memory_of(pid: i64) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap()
            * 1024
    };
    (kb("VmHWM:"), kb("VmRSS:"))
}

pub fn http_status(base: &str, path: &str) -> Option<u16> {
    use std::io::{Read, Write};
    let addr = base.trim_start_matches("http://");
    let mut conn = std::net::TcpStream::connect(addr).ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(conn, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut head = [0u8; 12];
    conn.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One server-sent event and when its last byte arrived, from the request's send.
#[derive(Debug, Clone)]
pub struct Event {
    pub at: Duration,
    pub data: String,
}

impl Event {
    pub fn json(&self) -> Option<Value> {
        serde_json::from_str(&self.data).ok()
    }
}

/// POSTs a chat request and returns every SSE event with its arrival time.
pub async fn stream_chat(client: &::reqwest::Client, url: &str, body: &Value) -> (u16, Vec<Event>) {
    let sent = Instant::now();
    let resp = client
        .post(format!("{url}/v1/chat/completions"))
        .json(body)
        .send()
        .await
        .expect("request sent");
    let status = resp.status().as_u16();
    let mut stream = resp.bytes_stream();
    let mut buf: Vec<u8> = Vec::new();
    let mut events = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.expect("stream chunk");
        let at = sent.elapsed();
        buf.extend_from_slice(&chunk);
        while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
            let raw: Vec<u8> = buf.drain(..end + 2).collect();
            let text = String::from_utf8(raw).expect("utf-8 event");
            for line in text.lines() {
                if let Some(data) = line.strip_prefix("data: ") {
                    events.push(Event {
                        at,
                        data: data.to_string(),
                    });
                }
            }
        }
    }
    (status, events)
}

/// A benchmark result's samples, warm-up runs left out.
pub fn measured(r: &Value) -> Vec<&Value> {
    r["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["warmup"] == false)
        .collect()
}

/// The strings of a JSON array (argv lists, names, required keys).
pub fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_str().unwrap_or_else(|| panic!("not a string: {x}")))
        .collect()
}

pub fn content_of(v: &Value) -> Option<&str> {
    v.pointer("/choices/0/delta/content")
        .and_then(Value::as_str)
}

pub fn percentile(values: &mut [f64], p: f64) -> f64 {
    values.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
    let rank = ((p / 100.0) * (values.len() - 1) as f64).round() as usize;
    values[rank]
}

/// True when the ELF file has no program interpreter, i.e. it runs in a FROM-scratch image.
pub fn is_static_elf(path: &std::path::Path) -> bool {
    let Ok(bytes) = std::fs::read(path) else {
        return false;
    };
    if bytes.len() < 64 || &bytes[..4] != b"\x7fELF" || bytes[4] != 2 {
        return false;
    }
    let u16_at = |o: usize| u16::from_le_bytes([bytes[o], bytes[o + 1]]) as usize;
    let phoff = u64::from_le_bytes(bytes[0x20..0x28].try_into().unwrap()) as usize;
    let (size, count) = (u16_at(0x36), u16_at(0x38));
    const PT_INTERP: u32 = 3;
    (0..count).all(|i| {
        let at = phoff + i * size;
        u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) != PT_INTERP
    })
}

/// A statically linked sparkctl: the test binary's own when the suite was built static
/// (as `.ci/test` does), else built once here with glibc's crt-static.
pub fn static_sparkctl() -> PathBuf {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_sparkctl"));
    if is_static_elf(&exe) {
        return exe;
    }
    let host = text(
        &Command::new("rustc")
            .arg("-vV")
            .output()
            .expect("rustc runs")
            .stdout,
    )
    .lines()
    .find_map(|l| l.strip_prefix("host: ").map(str::to_string))
    .expect("rustc reports its host");
    let target_dir = repo().join("target/static");
    let status = Command::new(option_env!("CARGO").unwrap_or("cargo"))
        .args(["build", "--bin", "sparkctl", "--target", &host])
        .env("RUSTFLAGS", "-C target-feature=+crt-static")
        .env("CARGO_TARGET_DIR", &target_dir)
        .current_dir(repo())
        .status()
        .expect("cargo runs");
    assert!(status.success(), "static build of sparkctl failed");
    let built = target_dir.join(host).join("debug/sparkctl");
    assert!(is_static_elf(&built), "{} is not static", built.display());
    built
}

/// The local Docker Engine. No skipping: the suite's command starts one when none runs.
pub async fn docker() -> bollard::Docker {
    let hint = "no Docker Engine answers; run the suite with `bash .ci/test`, which starts dockerd";
    bollard::Docker::connect_with_local_defaults()
        .unwrap_or_else(|e| panic!("{hint}: {e}"))
        .negotiate_version()
        .await
        .unwrap_or_else(|e| panic!("{hint}: {e}"))
}

/// Builds `tag` FROM scratch holding the static sparkctl, through the Engine API.
pub async fn build_sim_image(docker: &bollard::Docker, tag: &str) {
    let binary = std::fs::read(static_sparkctl()).expect("static binary readable");
    let dockerfile = b"FROM scratch\nCOPY sparkctl /sparkctl\nENTRYPOINT [\"/sparkctl\"]\nCMD [\"sim\", \"--host\", \"0.0.0.0\"]\n";
    build_image(
        docker,
        tag,
        &[
            ("Dockerfile", &dockerfile[..], 0o644),
            ("sparkctl", &binary, 0o755),
        ],
    )
    .await;
}

/// Builds `tag` from an in-memory context of (name, bytes, mode) files.
pub async fn build_image(docker: &bollard::Docker, tag: &str, files: &[(&str, &[u8], u32)]) {
    let mut tar = tar::Builder::new(Vec::new());
    for (name, data, mode) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(*mode);
        header.set_cksum();
        tar.append_data(&mut header, name, *data).unwrap();
    }
    let context = tar.into_inner().unwrap();
    let options = bollard::query_parameters::BuildImageOptionsBuilder::new()
        .t(tag)
        .rm(true)
        .build();
    let mut progress = docker.build_image(options, None, Some(bollard::body_full(context.into())));
    while let Some(step) = progress.next().await {
        let info = step.unwrap_or_else(|e| panic!("building {tag}: {e}"));
        if let Some(err) = info.error_detail.and_then(|d| d.message) {
            panic!("building {tag}: {err}");
        }
    }
}

/// A free loopback port (bound, then released for the server under test). Taken below
/// Linux's default ephemeral range (32768 and up): there, any outgoing connection or bind
/// to port 0 of the three test binaries running at once could take it in the seconds
/// before the server binds. Each test process hands out ports from blocks of its own: it
/// claims a block of 20000..32000 by holding a listener on the block's first port for as
/// long as it runs, so no other test process hands out that block's ports.
pub fn free_port() -> u16 {
    use std::net::TcpListener;
    const LOW: u16 = 20_000;
    const BLOCK: u16 = 100;
    const BLOCKS: u16 = 120;
    struct Claim {
        _holder: TcpListener,
        base: u16,
        next: u16,
    }
    // Blocks tried so far (from a pid-based first one), and the block in use.
    static CLAIM: std::sync::Mutex<(u16, Option<Claim>)> = std::sync::Mutex::new((0, None));
    let mut guard = CLAIM.lock().unwrap_or_else(|e| e.into_inner());
    let (tried, claim) = &mut *guard;
    let first = (std::process::id() % u32::from(BLOCKS)) as u16;
    loop {
        if let Some(c) = claim.as_mut() {
            while c.next < BLOCK {
                let port = c.base + c.next;
                c.next += 1;
                if TcpListener::bind(("127.0.0.1", port)).is_ok() {
                    return port;
                }
            }
        }
        assert!(
            *tried < BLOCKS,
            "no free block of loopback ports left in {LOW}..32000"
        );
        let base = LOW + (first + *tried) % BLOCKS * BLOCK;
        *tried += 1;
        if let Ok(holder) = TcpListener::bind(("127.0.0.1", base)) {
            *claim = Some(Claim {
                _holder: holder,
                base,
                next: 1,
            });
        }
    }
}

/// Runs `future` to completion on a short-lived runtime of its own thread: usable from
/// sync tests, from `Drop`, and from inside another runtime alike.
pub fn block_on<F>(future: F) -> F::Output
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(future)
    })
    .join()
    .expect("the future completes without panicking")
}

/// One finished sparkctl run. Its assertions chain and, when one fails, print the command
/// and everything it wrote, so a scenario reads as the user's steps:
/// `deck.sparkctl(&["up", "x"]).exits(3).says("rejected").warns("gate")`.
pub struct Ran {
    pub args: Vec<String>,
    pub out: Output,
}

impl Ran {
    /// Runs a prepared command (extra env, stdin) to completion.
    pub fn of(cmd: &mut Command) -> Ran {
        let args = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        Ran {
            args,
            out: cmd.output().expect("sparkctl runs"),
        }
    }

    /// Starts a prepared command with its output piped, to signal it or watch it run.
    pub fn spawn(cmd: &mut Command) -> Running {
        let args = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("sparkctl starts");
        Running { args, child }
    }

    pub fn code(&self) -> Option<i32> {
        self.out.status.code()
    }

    pub fn stdout(&self) -> String {
        text(&self.out.stdout)
    }

    pub fn stderr(&self) -> String {
        text(&self.out.stderr)
    }

    /// The command, its exit and both its streams: context for an assertion of its own.
    pub fn shown(&self) -> String {
        format!(
            "sparkctl {:?} exited {:?}\n--- stdout\n{}--- stderr\n{}",
            self.args,
            self.code(),
            self.stdout(),
            self.stderr()
        )
    }

    #[track_caller]
    pub fn exits(self, code: i32) -> Ran {
        assert_eq!(self.code(), Some(code), "{}", self.shown());
        self
    }

    #[track_caller]
    pub fn succeeds(self) -> Ran {
        self.exits(0)
    }

    /// Its stdout holds `needle`.
    #[track_caller]
    pub fn says(self, needle: &str) -> Ran {
        assert!(
            self.stdout().contains(needle),
            "no {needle:?} in stdout: {}",
            self.shown()
        );
        self
    }

    /// Its stderr holds `needle`.
    #[track_caller]
    pub fn warns(self, needle: &str) -> Ran {
        assert!(
            self.stderr().contains(needle),
            "no {needle:?} in stderr: {}",
            self.shown()
        );
        self
    }

    /// Neither stream holds `needle` (a secret, a path it must not touch).
    #[track_caller]
    pub fn never_says(self, needle: &str) -> Ran {
        assert!(
            !self.stdout().contains(needle) && !self.stderr().contains(needle),
            "{needle:?} was printed: {}",
            self.shown()
        );
        self
    }

    /// `up NAME` promoted it: it says so, and that the production port `port` serves it now
    /// (not merely that the run ended well: `--no-promote` ends well too).
    #[track_caller]
    pub fn promoted(self, name: &str, port: u16) -> Ran {
        self.succeeds()
            .says(&format!("{name} promoted: "))
            .says(&format!("serving on port {port}: {name} ("))
    }

    /// Its stdout as JSON (for `--json` commands).
    #[track_caller]
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.out.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", self.shown()))
    }
}

/// A sparkctl run still going: its pid to signal, its pipes to read; `wait` gives its `Ran`.
pub struct Running {
    args: Vec<String>,
    pub child: Child,
}

impl Running {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Ctrl-C, as a terminal sends it.
    pub fn interrupt(&self) {
        // SAFETY: kill(2) on our own child's pid, which it keeps until it is waited for.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGINT);
        }
    }

    /// Waits for it to end (what was taken of its pipes is not in the `Ran`).
    pub fn wait(self) -> Ran {
        Ran {
            args: self.args,
            out: self.child.wait_with_output().expect("sparkctl ends"),
        }
    }
}

/// The FROM-scratch sim image, built once per test binary (tests run in parallel).
pub fn sim_image() -> &'static str {
    static BUILT: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    const TAG: &str = "sparkctl-sim:test";
    BUILT.get_or_init(|| {
        block_on(async { build_sim_image(&docker().await, TAG).await });
    });
    TAG
}

/// One test's own recipes dir and state dir; whatever it started is stopped and its
/// containers removed on drop, so tests neither share nor leak deployments.
pub struct Deck {
    pub dir: PathBuf,
    /// This deck's production port: where its front door listens.
    pub door_port: u16,
    /// Its tag, free again for another deck once this one is dropped.
    tag: String,
}

impl Deck {
    pub fn new(tag: &str) -> Deck {
        claim_tag(tag);
        let dir = std::env::temp_dir().join(format!("sparkctl-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("recipes")).unwrap();
        std::fs::create_dir_all(dir.join("state")).unwrap();
        Deck {
            dir,
            door_port: free_port(),
            tag: tag.to_string(),
        }
    }

    /// The front door's base URL.
    pub fn door_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.door_port)
    }

    pub fn state(&self) -> PathBuf {
        self.dir.join("state").canonicalize().unwrap()
    }

    /// Writes `recipes/NAME.yaml` with `body` after the name line.
    pub fn recipe(&self, name: &str, body: &str) {
        std::fs::write(
            self.dir.join(format!("recipes/{name}.yaml")),
            format!("name: {name}\n{body}"),
        )
        .unwrap();
    }

    /// `sparkctl import NAME ARGS…`, then the recipe moved to a port of this test's own: an
    /// import picks the engine's usual port (8000 for the sim) when the server it reads holds
    /// the production port, and another test process may take that one before this test
    /// starts the recipe.
    pub fn import(&self, name: &str, args: &[&str]) -> Ran {
        let mut all = vec!["import", name];
        all.extend_from_slice(args);
        let ran = self.sparkctl(&all).succeeds();
        let path = self.dir.join(format!("recipes/{name}.yaml"));
        let text = std::fs::read_to_string(&path).unwrap();
        let port = free_port();
        let moved: Vec<String> = text
            .lines()
            .map(|l| match l.strip_prefix("  port: ") {
                Some(p) if p.parse::<u16>().is_ok() => format!("  port: {port}"),
                _ => l.to_string(),
            })
            .collect();
        std::fs::write(&path, moved.join("\n") + "\n").unwrap();
        ran
    }

    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = sparkctl();
        cmd.arg("--recipes")
            .arg(self.dir.join("recipes"))
            .env("SPARKCTL_STATE_DIR", self.dir.join("state"))
            .env("SPARKCTL_MEMORY_GB", "128")
            .env_remove("SPARKCTL_MEMORY_RESERVE_GB")
            .env("SPARKCTL_PRODUCTION_PORT", self.door_port.to_string())
            .env_remove("SPARKCTL_FRONTDOOR_API_KEY")
            .env_remove("SPARKCTL_FRONTDOOR_API_KEY_FILE")
            .env_remove("SPARKCTL_NVIDIA_SMI")
            .env_remove("SPARKCTL_BANDWIDTH_GBPS")
            .args(args);
        cmd
    }

    /// `sparkctl ARGS` on a machine whose nvidia-smi gives the answers recorded in
    /// tests/fixtures/nvidia-smi/`gpu` (gb10, h100, two-h100): a fake of the GPU alone.
    pub fn on_gpu(&self, gpu: &str, args: &[&str]) -> Command {
        let fixtures = repo().join("tests/fixtures/nvidia-smi");
        let mut cmd = self.cmd(args);
        cmd.env("SPARKCTL_NVIDIA_SMI", fixtures.join("answer"))
            .env("NVIDIA_SMI_ANSWERS", fixtures.join(gpu));
        cmd
    }

    /// The bare output of `sparkctl ARGS`, for the tests not yet on the builder (frontdoor,
    /// frontdoor_faults, bisect, llama_server); `sparkctl` is the way to assert on a run.
    pub fn run(&self, args: &[&str]) -> Output {
        self.sparkctl(args).out
    }

    /// Runs `sparkctl ARGS` in this deck, for chained assertions (`Ran`).
    pub fn sparkctl(&self, args: &[&str]) -> Ran {
        Ran::of(&mut self.cmd(args))
    }

    /// Runs and insists on exit 0; returns stdout.
    #[track_caller]
    pub fn ok(&self, args: &[&str]) -> String {
        self.sparkctl(args).succeeds().stdout()
    }

    /// The front door's `/metrics` text.
    pub fn metrics(&self) -> String {
        text(
            &Command::new("curl")
                .args(["-s", &format!("{}/metrics", self.door_url())])
                .output()
                .expect("curl runs")
                .stdout,
        )
    }

    /// `status --json`, as values.
    pub fn status(&self) -> Vec<Value> {
        let v: Value = serde_json::from_str(&self.ok(&["--json", "status"])).unwrap();
        v.as_array().unwrap().clone()
    }

    pub fn status_of(&self, name: &str) -> Option<Value> {
        self.status().into_iter().find(|d| d["name"] == name)
    }
}

/// Kills the front door of the state dir `state`: its supervisor's process group, which
/// holds its server (the test is over; nothing else would stop it).
pub fn kill_frontdoor(state: &Path) {
    let Ok(v) = std::fs::read(state.join("frontdoor/supervisor.json")) else {
        return;
    };
    // Its process group: the supervisor's own, or the server's that a new supervisor
    // joined when it adopted that server.
    if let Some(pid) = serde_json::from_slice::<Value>(&v)
        .ok()
        .and_then(|v| v["pgid"].as_i64().or(v["pid"].as_i64()))
    {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{pid}")])
            .stderr(Stdio::null())
            .status();
    }
}

impl Drop for Deck {
    fn drop(&mut self) {
        // The front door first, so its watch does not bring back what is stopped next.
        kill_frontdoor(&self.dir.join("state"));
        // Processes: every record's process group gets SIGKILL (the test is over).
        if let Ok(entries) = std::fs::read_dir(self.dir.join("state/deployments")) {
            for e in entries.flatten() {
                let Ok(v) = serde_json::from_slice::<Value>(&std::fs::read(e.path()).unwrap())
                else {
                    continue;
                };
                if let Some(pid) = v.pointer("/process/pid").and_then(Value::as_i64) {
                    let _ = Command::new("kill")
                        .args(["-KILL", "--", &format!("-{pid}")])
                        .stderr(Stdio::null())
                        .status();
                }
            }
        }
        let state = self.dir.join("state").canonicalize().ok();
        if let Some(state) = state {
            block_on(async move { remove_containers_of(&state.display().to_string()).await });
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        live_tags().remove(&self.tag);
    }
}

/// The deck tags in use in this process. A deck's dir is named by its tag and the pid, and
/// all the modules of the one test binary share a pid: two live decks of one tag (tests of
/// two modules, run in one process) would share, then delete, one dir.
fn live_tags() -> std::sync::MutexGuard<'static, std::collections::BTreeSet<String>> {
    static LIVE: std::sync::Mutex<std::collections::BTreeSet<String>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

fn claim_tag(tag: &str) {
    assert!(
        live_tags().insert(tag.to_string()),
        "the deck tag {tag:?} is in use by another test of this process: give each its own"
    );
}

/// Every container (running or not) labelled with this state dir.
pub async fn containers_of(state: &str) -> Vec<bollard::models::ContainerSummary> {
    let filters =
        std::collections::HashMap::from([("label", vec![format!("io.sparkctl.state={state}")])]);
    let opts = bollard::query_parameters::ListContainersOptionsBuilder::new()
        .all(true)
        .filters(&filters)
        .build();
    docker().await.list_containers(Some(opts)).await.unwrap()
}

/// Force-removes every container labelled with this state dir.
pub async fn remove_containers_of(state: &str) {
    let Ok(docker) = bollard::Docker::connect_with_local_defaults() else {
        return;
    };
    let Ok(docker) = docker.negotiate_version().await else {
        return;
    };
    remove_labelled(&docker, state).await;
}

/// Force-removes every container on `docker` labelled with this state dir.
pub async fn remove_labelled(docker: &bollard::Docker, state: &str) {
    use bollard::query_parameters::{ListContainersOptionsBuilder, RemoveContainerOptionsBuilder};
    let filters =
        std::collections::HashMap::from([("label", vec![format!("io.sparkctl.state={state}")])]);
    let opts = ListContainersOptionsBuilder::new()
        .all(true)
        .filters(&filters)
        .build();
    for c in docker.list_containers(Some(opts)).await.unwrap_or_default() {
        let opts = RemoveContainerOptionsBuilder::new().force(true).build();
        let _ = docker
            .remove_container(c.id.as_deref().unwrap_or_default(), Some(opts))
            .await;
    }
}

const BUSYBOX_TAG: &str = "sparkctl-busybox:test";

/// The busybox image's tag, for recipes that name it without needing it built.
pub fn busybox_image_name() -> &'static str {
    BUSYBOX_TAG
}

/// A FROM-scratch image holding Debian's static busybox with its applets linked
/// (`chown`, `sh`, …), built once per test binary through the Engine API.
pub fn busybox_image() -> &'static str {
    static BUILT: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    const TAG: &str = BUSYBOX_TAG;
    BUILT.get_or_init(|| {
        let busybox = std::fs::read("/bin/busybox")
            .expect("/bin/busybox (Debian's busybox-static; `bash .ci/test` installs it)");
        let dockerfile = b"FROM scratch\nCOPY busybox /bin/busybox\nRUN [\"/bin/busybox\", \"--install\", \"-s\", \"/bin\"]\n";
        block_on(async move {
            build_image(
                &docker().await,
                TAG,
                &[("Dockerfile", &dockerfile[..], 0o644), ("busybox", &busybox, 0o755)],
            )
            .await
        });
    });
    TAG
}

/// Creates and starts a plain container (no sparkctl labels unless given) of `image`
/// running `sparkctl sim` on 8000, published on 127.0.0.1:`host_port`.
pub async fn run_plain_sim(
    docker: &bollard::Docker,
    image: &str,
    name: &str,
    host_port: u16,
    labels: &[(&str, &str)],
    args: &[&str],
) {
    use bollard::models::{ContainerCreateBody, HostConfig, PortBinding};
    let mut cmd: Vec<String> = ["sim", "--host", "0.0.0.0", "--port", "8000"]
        .map(String::from)
        .to_vec();
    cmd.extend(args.iter().map(|a| a.to_string()));
    let body = ContainerCreateBody {
        image: Some(image.into()),
        cmd: Some(cmd),
        labels: Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        exposed_ports: Some(vec!["8000/tcp".into()]),
        host_config: Some(HostConfig {
            port_bindings: Some(std::collections::HashMap::from([(
                "8000/tcp".to_string(),
                Some(vec![PortBinding {
                    host_ip: Some("127.0.0.1".into()),
                    host_port: Some(host_port.to_string()),
                }]),
            )])),
            ..Default::default()
        }),
        ..Default::default()
    };
    let opts = bollard::query_parameters::CreateContainerOptionsBuilder::new()
        .name(name)
        .build();
    docker.create_container(Some(opts), body).await.unwrap();
    docker.start_container(name, None).await.unwrap();
}

/// What a client streaming to a server saw.
#[derive(Debug, Default, Clone)]
pub struct TrafficReport {
    pub ok: usize,
    /// Answered with an error status (503 from a front door past its hold bound, say).
    pub http_errors: Vec<u16>,
    /// No answer: refused, reset, closed before a response.
    pub transport_errors: Vec<String>,
    /// A 200 stream that ended without `[DONE]`.
    pub cut: usize,
    /// The `x-sparkctl-upstream` header of each answered request, in order.
    pub upstreams: Vec<String>,
    /// Each request's time to its complete answer, ms.
    pub latency_ms: Vec<f64>,
    /// `Retry-After` was present on every 503.
    pub retry_after_on_503: bool,
}

impl TrafficReport {
    pub fn failed(&self) -> usize {
        self.http_errors.len() + self.transport_errors.len()
    }

    /// Connections refused: the port was closed.
    pub fn refused(&self) -> usize {
        self.transport_errors
            .iter()
            .filter(|e| e.to_lowercase().contains("refused"))
            .count()
    }
}

/// The User-Agent a `Traffic` client sends.
pub const TRAFFIC_AGENT: &str = "sparkctl-test-traffic";

/// A client that sends a 1-token streamed chat request to `url` every `every`, on its own
/// thread, until stopped: a user of the production port while things change behind it.
pub struct Traffic {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Complete answers so far, for a test to wait on traffic rather than sleep for it.
    answered: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    thread: Option<std::thread::JoinHandle<TrafficReport>>,
}

impl Traffic {
    pub fn start(url: &str, every: Duration) -> Traffic {
        Traffic::asking_for(url, every, "any")
    }

    /// As `start`, on a new connection for every request: a client whose kept-alive
    /// connection to a server that is then stopped (`adopt`'s foreign one) cannot be cut.
    pub fn fresh_connections(url: &str, every: Duration) -> Traffic {
        Traffic::spawn(url, every, "any", false)
    }

    /// As `start`, naming `model` (a server that checks the name, as vLLM does, answers 404
    /// to any other).
    pub fn asking_for(url: &str, every: Duration, model: &str) -> Traffic {
        Traffic::spawn(url, every, model, true)
    }

    /// As `start`, a client that gives a request up after `patience` (a transport error):
    /// one that hangs is a failure, not a stall of the test.
    pub fn impatient(url: &str, every: Duration, patience: Duration) -> Traffic {
        Traffic::spawn_with(url, every, "any", (true, patience, None))
    }

    /// As `asking_for`, sending `Authorization: Bearer key`.
    pub fn with_key(url: &str, every: Duration, model: &str, key: &str) -> Traffic {
        let patience = Duration::from_secs(300);
        Traffic::spawn_with(url, every, model, (true, patience, Some(key.to_string())))
    }

    fn spawn(url: &str, every: Duration, model: &str, keep_alive: bool) -> Traffic {
        Traffic::spawn_with(
            url,
            every,
            model,
            (keep_alive, Duration::from_secs(300), None),
        )
    }

    fn spawn_with(
        url: &str,
        every: Duration,
        model: &str,
        how: (bool, Duration, Option<String>),
    ) -> Traffic {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let answered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (flag, count) = (stop.clone(), answered.clone());
        let (url, model) = (url.to_string(), model.to_string());
        let thread = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(traffic(url, every, model, how, flag, count))
        });
        Traffic {
            stop,
            answered,
            thread: Some(thread),
        }
    }

    /// Waits until `n` more requests have been answered completely; panics after `within`.
    pub fn answers(&self, n: usize, within: Duration) {
        let load = || self.answered.load(std::sync::atomic::Ordering::SeqCst);
        let (target, deadline) = (load() + n, Instant::now() + within);
        while load() < target {
            assert!(
                Instant::now() < deadline,
                "{n} more answers did not come within {within:?} ({} of {target})",
                load()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn stop(mut self) -> TrafficReport {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.thread.take().unwrap().join().unwrap()
    }
}

async fn traffic(
    url: String,
    every: Duration,
    model: String,
    (keep_alive, patience, key): (bool, Duration, Option<String>),
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    answered: std::sync::Arc<std::sync::atomic::AtomicUsize>,
) -> TrafficReport {
    // Named, so that a fault can pick this client's requests out (`sim --reset-once-on`).
    let mut builder = ::reqwest::Client::builder()
        .no_proxy()
        .user_agent(TRAFFIC_AGENT)
        .timeout(patience);
    if !keep_alive {
        builder = builder.pool_max_idle_per_host(0);
    }
    let client = builder.build().unwrap();
    let body = serde_json::json!({
        "model": model, "max_tokens": 1, "stream": true,
        "messages": [{"role": "user", "content": "What is the capital of Japan?"}],
    });
    let mut report = TrafficReport {
        retry_after_on_503: true,
        ..Default::default()
    };
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        let began = Instant::now();
        let mut asked = client.post(format!("{url}/v1/chat/completions"));
        if let Some(k) = &key {
            asked = asked.bearer_auth(k);
        }
        match asked.json(&body).send().await {
            Err(e) => report.transport_errors.push(format!("{e:?}")),
            Ok(r) => {
                let status = r.status().as_u16();
                if let Some(u) = r.headers().get("x-sparkctl-upstream") {
                    report
                        .upstreams
                        .push(u.to_str().unwrap_or_default().to_string());
                }
                if status == 503 && r.headers().get("retry-after").is_none() {
                    report.retry_after_on_503 = false;
                }
                match r.text().await {
                    Ok(text) if status == 200 && text.contains("[DONE]") => {
                        report.ok += 1;
                        answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                    Ok(_) if status == 200 => report.cut += 1,
                    Ok(_) => report.http_errors.push(status),
                    Err(_) => report.cut += 1,
                }
            }
        }
        report.latency_ms.push(began.elapsed().as_secs_f64() * 1e3);
        tokio::time::sleep(every.saturating_sub(began.elapsed())).await;
    }
    report
}

/// `n` "builds" of a server under `dir` (`build-I/server`, oldest first by mtime), each a
/// script running this sparkctl's sim; from build `slow_from` on, with `slow_ttft` to the
/// first token instead of `fast_ttft`: what `bisect --builds` searches. Their paths.
pub fn sim_builds(
    dir: &Path,
    n: usize,
    slow_from: usize,
    (fast_ttft, slow_ttft): (&str, &str),
) -> Vec<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let now = std::time::SystemTime::now();
    (1..=n)
        .map(|i| {
            let path = dir.join(format!("build-{i}/server"));
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let ttft = if i >= slow_from { slow_ttft } else { fast_ttft };
            let script = format!(
                "#!/bin/sh\n# build {i}\nexec {} sim --ttft {ttft} \"$@\"\n",
                env!("CARGO_BIN_EXE_sparkctl")
            );
            std::fs::write(&path, script).unwrap();
            let f = std::fs::File::options().write(true).open(&path).unwrap();
            f.set_permissions(std::fs::Permissions::from_mode(0o755))
                .unwrap();
            f.set_modified(now - Duration::from_secs(600 - 60 * i as u64))
                .unwrap();
            path
        })
        .collect()
}

/// The real CPU llama-server and the random-weight test model `.ci/test` builds and caches.
/// No skipping: without them the test fails and says how to get them.
pub fn llama_server_and_model() -> (PathBuf, PathBuf) {
    let get = |var: &str| {
        let path = std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| {
            panic!("{var} is not set: run the suite with `bash .ci/test`, which builds llama-server and writes the test model")
        });
        assert!(path.is_file(), "{var}={} does not exist", path.display());
        path
    };
    (get("SPARKCTL_TEST_LLAMA_SERVER"), get("SPARKCTL_TEST_GGUF"))
}

/// Another process holding the state dir's lock (util-linux `flock`), until dropped.
pub struct LockHolder(std::process::Child);

impl LockHolder {
    pub fn take(state: &Path) -> LockHolder {
        let lock = state.join("lock");
        // No fork: the pid is sleep's own, so that killing it lets the lock go.
        let child = Command::new("flock")
            .arg("--no-fork")
            .arg(&lock)
            .args(["sleep", "120"])
            .spawn()
            .expect("flock runs (util-linux)");
        // Held once a non-blocking try fails.
        let deadline = Instant::now() + Duration::from_secs(30);
        while Command::new("flock")
            .args(["-n"])
            .arg(&lock)
            .arg("true")
            .status()
            .unwrap()
            .success()
        {
            assert!(Instant::now() < deadline, "the lock was not taken");
            std::thread::sleep(Duration::from_millis(20));
        }
        LockHolder(child)
    }
}

impl Drop for LockHolder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One streamed answer through a port, as a client saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub at: Instant,
    pub status: u16,
    /// The `x-sparkctl-upstream` header: which instance answered.
    pub upstream: String,
    pub content: String,
    /// The stream reached `[DONE]`.
    pub done: bool,
}

/// The body of the `i`th request of client `t`.
pub type Ask = std::sync::Arc<dyn Fn(usize, usize) -> Value + Send + Sync>;

/// Clients streaming chat answers from a URL, one request after another each, until
/// stopped: users of a production port while things change behind it.
pub struct Streamers {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    seen: std::sync::Arc<std::sync::Mutex<Vec<Seen>>>,
    errors: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Streamers {
    /// `n` clients of `url`, each sending the bodies `ask` gives.
    pub fn start(url: &str, n: usize, ask: Ask) -> Streamers {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let errors = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let threads = (0..n)
            .map(|t| {
                let (s, v, e, ask) = (stop.clone(), seen.clone(), errors.clone(), ask.clone());
                let url = format!("{url}/v1/chat/completions");
                std::thread::spawn(move || {
                    block_on(async move {
                        let client = reqwest::Client::builder().no_proxy().build().unwrap();
                        let mut i = 0;
                        while !s.load(Ordering::SeqCst) {
                            i += 1;
                            match one_stream(&client, &url, &ask(t, i)).await {
                                Ok(seen) => v.lock().unwrap().push(seen),
                                Err(err) => e.lock().unwrap().push(err),
                            }
                        }
                    })
                })
            })
            .collect();
        Streamers {
            stop,
            seen,
            errors,
            threads,
        }
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Waits until `n` answers came in all; panics after a minute.
    pub fn wait_for(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.seen.lock().unwrap().len() < n {
            assert!(Instant::now() < deadline, "the clients got no answers");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the clients; what they saw, and the requests that got no whole answer.
    pub fn stop(self) -> (Vec<Seen>, Vec<String>) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        for t in self.threads {
            t.join().unwrap();
        }
        let errors = self.errors.lock().unwrap().clone();
        (self.seen.lock().unwrap().clone(), errors)
    }
}

async fn one_stream(client: &reqwest::Client, url: &str, body: &Value) -> Result<Seen, String> {
    let r = client
        .post(url)
        .json(body)
        .send()
        .await
        .map_err(|e| format!("{e:?}"))?;
    let status = r.status().as_u16();
    let upstream = r
        .headers()
        .get("x-sparkctl-upstream")
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let text = r.text().await.map_err(|e| format!("cut: {e:?}"))?;
    let content: String = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| content_of(&v).map(str::to_string))
        .collect();
    Ok(Seen {
        at: Instant::now(),
        status,
        upstream,
        content,
        done: text.contains("[DONE]"),
    })
}

/// `sparkctl start NAME` timed from outside: from the command's spawn until a one-token
/// completion sent to `port` (every 20 ms) first answers 200. Returns those seconds and the
/// start's steps as sparkctl kept them (`history starts NAME --json`, the latest).
pub fn start_timed_from_outside(deck: &Deck, name: &str, port: u16) -> (f64, Value) {
    use std::io::{Read, Write};
    let body = r#"{"max_tokens":1,"messages":[{"role":"user","content":"hi"}]}"#;
    let answers = || -> bool {
        let Ok(mut c) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
            return false;
        };
        let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
        let sent = write!(
            c,
            "POST /v1/chat/completions HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let mut head = [0u8; 12];
        sent.is_ok() && c.read_exact(&mut head).is_ok() && &head[9..12] == b"200"
    };
    let began = Instant::now();
    let mut start = Ran::spawn(&mut deck.cmd(&["start", name]));
    let outside = loop {
        if answers() {
            break began.elapsed();
        }
        if start.child.try_wait().unwrap().is_some() && !answers() {
            start.wait().succeeds();
            panic!("{name} started and answered no completion");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    start.wait().succeeds();
    let kept: Value =
        serde_json::from_str(&deck.ok(&["--json", "history", "starts", name])).unwrap();
    let last = kept[name].as_array().and_then(|a| a.last()).cloned();
    (
        outside.as_secs_f64(),
        last.unwrap_or_else(|| panic!("no start kept: {kept}"))["phases"].clone(),
    )
}

/// A start's steps are in order, each after the one before; returns its total in seconds.
pub fn phases_in_order(phases: &Value) -> f64 {
    let steps: Vec<f64> = [
        "launched_ms",
        "port_open_ms",
        "http_ms",
        "loaded_ms",
        "first_token_ms",
    ]
    .iter()
    .map(|k| {
        phases[k]
            .as_f64()
            .unwrap_or_else(|| panic!("no {k} in {phases}"))
    })
    .collect();
    assert!(steps[0] > 0.0, "{phases}");
    assert!(
        steps.windows(2).all(|w| w[0] <= w[1]),
        "out of order: {phases}"
    );
    steps[4] / 1e3
}

/// A benchmark's setting from the environment (`MODELS_SIM_SECS`, say), else `default`.
pub fn secs(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The `p`th percentile of values already sorted, by nearest rank (0 for none).
pub fn nearest_rank(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank]
}

/// Chromium, headless: the page's DOM after scripts ran, and its console as logged.
pub fn chromium_file(page: &Path, screenshot: &Path) -> (String, String) {
    let url = format!("file://{}", page.display());
    let common = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--window-size=1280,2400",
    ];
    let dom = Command::new("chromium")
        .args(common)
        .arg("--dump-dom")
        .arg(&url)
        .output()
        .expect("chromium runs (Debian package `chromium`)");
    let shot = Command::new("chromium")
        .args(common)
        .args(["--enable-logging=stderr", "--v=0"])
        .arg(format!("--screenshot={}", screenshot.display()))
        .arg(&url)
        .output()
        .expect("chromium runs");
    (text(&dom.stdout), text(&shot.stderr))
}

/// Console messages that are errors: uncaught exceptions and console.error.
pub fn script_errors(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| {
            l.contains("CONSOLE") && (l.contains("Uncaught") || l.contains("ERROR:CONSOLE"))
        })
        .collect()
}
