//! A second real Docker Engine on this machine standing for a second Spark: its own
//! network namespace joined to the host by a veth pair (host 10.77.0.1 ↔ node 10.77.0.2),
//! its own data root, exec root and socket, answering on unix:// and on tcp://10.77.0.2.
//! Started once per test binary (leftovers of an earlier run cleaned first), torn down
//! when the test binary exits.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub const NETNS: &str = "spk-node1";
pub const HOST_IF: &str = "spkh1";
pub const NODE_IF: &str = "spkn1";
pub const HOST_ADDR: &str = "10.77.0.1";
pub const NODE_ADDR: &str = "10.77.0.2";
pub const TCP: &str = "tcp://10.77.0.2:2375";
const RUN_DIR: &str = "/run/sparkctl-test-node1";
const DATA_ROOT: &str = "/var/lib/sparkctl-test-node1";
/// A model path as the host (node a) sees it ...
pub const MODEL: &str = "/tmp/sparkctl-test-node1-model";
/// ... and what node b's engine sees at that same path (its own mount namespace): two
/// Sparks' copies of one model, which may differ.
pub const MODEL_ON_B: &str = "/var/lib/sparkctl-test-node1/model-on-b";

pub fn socket() -> String {
    format!("unix://{RUN_DIR}/docker.sock")
}

fn run(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn must(program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program} runs (iproute2 and util-linux installed?): {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Alive and not a zombie (a dockerd this process started stays one until reaped).
fn pid_alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .is_some_and(|zombie| !zombie)
}

/// Processes of an earlier run of this harness: those whose command line names its run
/// dir (its dockerd and that dockerd's containerd), however that run ended.
fn leftovers() -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(RUN_DIR))
        })
        .collect()
}

/// Stops what an earlier run left (dockerd first: it stops its containerd) and removes
/// the namespace and the link.
fn clean() {
    for pass in [libc::SIGTERM, libc::SIGKILL] {
        let pids = leftovers();
        for &pid in &pids {
            unsafe { libc::kill(pid, pass) };
        }
        let deadline = Instant::now() + Duration::from_secs(15);
        while pids.iter().any(|&p| pid_alive(p)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    run("ip", &["netns", "del", NETNS]);
    run("ip", &["link", "del", HOST_IF]);
    let _ = std::fs::remove_file(format!("{RUN_DIR}/dockerd.pid"));
}

fn network() {
    must("ip", &["netns", "add", NETNS]);
    must(
        "ip",
        &[
            "link", "add", HOST_IF, "type", "veth", "peer", "name", NODE_IF,
        ],
    );
    must("ip", &["link", "set", NODE_IF, "netns", NETNS]);
    must(
        "ip",
        &["addr", "add", &format!("{HOST_ADDR}/24"), "dev", HOST_IF],
    );
    must("ip", &["link", "set", HOST_IF, "up"]);
    let inside = |args: &[&str]| {
        let mut all = vec!["netns", "exec", NETNS, "ip"];
        all.extend_from_slice(args);
        must("ip", &all);
    };
    inside(&["addr", "add", &format!("{NODE_ADDR}/24"), "dev", NODE_IF]);
    inside(&["link", "set", NODE_IF, "up"]);
    inside(&["link", "set", "lo", "up"]);
}

/// The storage driver the machine's engine uses (this one must work on the same disk).
fn storage_driver() -> String {
    crate::support::block_on(async {
        crate::support::docker()
            .await
            .info()
            .await
            .ok()
            .and_then(|i| i.driver)
            .unwrap_or_else(|| "overlay2".into())
    })
}

/// The dockerd this test binary started, reaped at teardown.
static DOCKERD: std::sync::Mutex<Option<std::process::Child>> = std::sync::Mutex::new(None);

extern "C" fn teardown() {
    clean();
    if let Some(mut child) = DOCKERD.lock().ok().and_then(|mut d| d.take()) {
        let _ = child.wait();
    }
}

fn start() {
    clean();
    network();
    std::fs::create_dir_all(RUN_DIR).unwrap();
    std::fs::create_dir_all(DATA_ROOT).unwrap();
    // Its own config: the machine's /etc/docker/daemon.json names the first engine's root.
    let config = format!("{RUN_DIR}/daemon.json");
    std::fs::write(
        &config,
        // Plain TCP on a link of its own, said explicitly: dockerd otherwise waits 15 s to
        // warn about it.
        format!(
            "{{\"storage-driver\": \"{}\", \"tls\": false}}",
            storage_driver()
        ),
    )
    .unwrap();
    let log = std::fs::File::create(format!("{RUN_DIR}/dockerd.log")).unwrap();
    for dir in [MODEL, MODEL_ON_B] {
        std::fs::create_dir_all(dir).unwrap();
    }
    // nsenter, not `ip netns exec`: that one remounts /sys and hides the cgroup mounts. Its
    // own mount namespace, where MODEL is MODEL_ON_B (fixed paths; dockerd's argv passes
    // through "$@", never into the script).
    let child = Command::new("nsenter")
        .arg(format!("--net=/run/netns/{NETNS}"))
        .args(["unshare", "--mount", "--propagation", "private", "sh", "-c"])
        .arg(format!(
            "mount --bind {MODEL_ON_B} {MODEL} && exec dockerd \"$@\""
        ))
        .args(["sh", "--config-file", &config, "--data-root", DATA_ROOT])
        .args(["--exec-root", &format!("{RUN_DIR}/exec")])
        .args(["--pidfile", &format!("{RUN_DIR}/dockerd.pid")])
        .args(["-H", &socket(), "-H", &format!("tcp://{NODE_ADDR}:2375")])
        .args([
            "--bridge=none",
            "--iptables=false",
            "--ip-masq=false",
            "--ip6tables=false",
        ])
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("dockerd starts (Debian's docker.io)");
    *DOCKERD.lock().unwrap() = Some(child);
    unsafe { libc::atexit(teardown) };
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let sock = Path::new(RUN_DIR).join("docker.sock");
        // Both ways in: the unix socket comes up before the TCP listener.
        let tcp = std::net::TcpStream::connect((NODE_ADDR, 2375)).is_ok();
        if tcp
            && sock.exists()
            && crate::support::block_on(async { engine().await.ping().await.is_ok() })
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = std::fs::read_to_string(format!("{RUN_DIR}/dockerd.log")).unwrap_or_default();
    panic!("the second dockerd did not answer within 60 s:\n{log}");
}

/// The second engine, started once per test binary.
pub fn second_engine() {
    static STARTED: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    STARTED.get_or_init(|| {
        hold_machine_wide();
        assert!(
            Path::new("/sbin/ip").exists()
                || Path::new("/usr/sbin/ip").exists()
                || Path::new("/bin/ip").exists(),
            "iproute2 is needed (`bash .ci/test` installs it)"
        );
        let began = Instant::now();
        start();
        eprintln!("second engine up in {:?}", began.elapsed());
    });
}

/// One test binary at a time on this machine owns the second engine (its netns, addresses
/// and socket are fixed, and starting it clears an earlier one's leftovers): a second suite
/// run at once (another checkout) waits here instead of tearing the first's engine down.
/// The lock is held until this process exits.
fn hold_machine_wide() {
    use std::os::fd::AsRawFd;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open("/tmp/sparkctl-test-node1.lock")
        .expect("the second engine's lock file");
    // SAFETY: flock on a descriptor this process owns; it blocks until the holder exits.
    let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(locked, 0, "cannot lock /tmp/sparkctl-test-node1.lock");
    std::mem::forget(file);
}

/// A client of the second engine (over its unix socket).
pub async fn engine() -> bollard::Docker {
    bollard::Docker::connect_with_unix(&socket(), 30, bollard::API_DEFAULT_VERSION)
        .expect("the second engine's socket")
}

/// Force-removes every container labelled with this state dir on the second engine.
pub async fn remove_containers_of(state: &str) {
    crate::support::remove_labelled(&engine().await, state).await;
}
