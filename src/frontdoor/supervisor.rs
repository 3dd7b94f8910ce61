//! Keeping the front door up: `frontdoor run` binds the production port once and runs the
//! server (`frontdoor serve`) as its child with that socket, restarting it with back-off when
//! it dies; while it restarts, new connections wait in the kernel's backlog instead of being
//! refused. `ensure` starts the supervisor, detached, when nothing answers the control socket.

use std::os::unix::io::AsRawFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{control_socket, dir, Config, Remote};
use crate::error::{Error, Result};
use crate::state::{self, StateDir};

/// How to run sparkctl again as the front door: its own binary with the CLI's paths.
#[derive(Debug, Clone)]
pub struct Launch {
    pub self_exe: String,
    pub recipes: PathBuf,
    pub lock: PathBuf,
}

impl Launch {
    /// The front door runs from wherever the service manager starts it: its paths are
    /// absolute.
    pub fn new(self_exe: &str, recipes: &std::path::Path, lock: &std::path::Path) -> Launch {
        Launch {
            self_exe: self_exe.to_string(),
            recipes: std::path::absolute(recipes).unwrap_or_else(|_| recipes.to_path_buf()),
            lock: std::path::absolute(lock).unwrap_or_else(|_| lock.to_path_buf()),
        }
    }

    fn command(&self, state: &StateDir, sub: &[&str]) -> std::process::Command {
        let mut cmd = std::process::Command::new(&self.self_exe);
        cmd.arg("--state-dir")
            .arg(state.root())
            .arg("--recipes")
            .arg(&self.recipes)
            .arg("--lock")
            .arg(&self.lock)
            .arg("frontdoor")
            .args(sub);
        cmd
    }
}

/// `STATE/frontdoor/supervisor.json`: who holds the production port.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    pub pid: u32,
    pub start_ticks: u64,
    pub host: String,
    pub port: u16,
    pub started_at: u64,
    pub log_file: PathBuf,
}

pub fn record_path(state: &StateDir) -> PathBuf {
    dir(state).join("supervisor.json")
}

/// The supervisor's record, when its process still runs.
pub fn running(state: &StateDir) -> Option<Record> {
    let r: Record = state::read_json(&record_path(state)).ok()?;
    let id = crate::host::ProcessId {
        pid: r.pid,
        start_ticks: r.start_ticks,
    };
    id.alive().then_some(r)
}

/// The front door's control socket when the front door answers on it (and serves the
/// production port); None when nothing answers.
pub async fn answering(state: &StateDir, config: &Config) -> Result<Option<Remote>> {
    let remote = Remote::new(control_socket(state));
    let Ok(s) = remote.status().await else {
        return Ok(None);
    };
    if s.port != config.port {
        return Err(Error::Usage(format!(
            "the front door of this state dir serves port {}, not the production port {}; \
             `sparkctl frontdoor stop` first, or set SPARKCTL_PRODUCTION_PORT={}",
            s.port, config.port, s.port
        )));
    }
    Ok(Some(remote))
}

/// The front door's control socket, starting the front door first when nothing answers.
pub async fn ensure(state: &StateDir, config: &Config, launch: &Launch) -> Result<Remote> {
    if let Some(remote) = answering(state, config).await? {
        return Ok(remote);
    }
    let remote = Remote::new(control_socket(state));
    let log_file = state.log_file("frontdoor", &state::new_run_id())?;
    let log = std::fs::File::create(&log_file)
        .map_err(|e| Error::io(format!("cannot create {}", log_file.display()), e))?;
    let mut cmd = launch.command(state, &["run"]);
    cmd.stdin(std::process::Stdio::null())
        .stdout(log.try_clone().map_err(|e| Error::io("log file", e))?)
        .stderr(log);
    {
        use std::os::unix::process::CommandExt;
        // Its own session: it outlives this command and its terminal.
        // SAFETY: new_session only calls setsid, which is async-signal-safe.
        unsafe {
            cmd.pre_exec(crate::host::new_session);
        }
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| Error::io(format!("cannot start {} frontdoor run", launch.self_exe), e))?;
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if remote.status().await.is_ok() {
            // Reaped by init once this command exits; not waited for here.
            std::mem::forget(child);
            return Ok(remote);
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(Error::Failed(format!(
                "the front door exited at once ({status}); its log {} says:\n{}",
                log_file.display(),
                tail(&log_file)
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(Error::Failed(format!(
        "the front door did not answer within 15 s; its log {} says:\n{}",
        log_file.display(),
        tail(&log_file)
    )))
}

fn tail(path: &std::path::Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(12)..]
        .iter()
        .map(|l| format!("  | {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `sparkctl frontdoor run`: bind, record, run the server, restart it when it dies; on
/// SIGTERM/SIGINT/SIGHUP stop it and leave.
pub async fn run(state: &StateDir, config: &Config, launch: &Launch) -> Result<()> {
    if let Some(r) = running(state) {
        if r.pid != std::process::id() {
            return Err(Error::Usage(format!(
                "a front door already runs for this state dir (pid {}, port {})",
                r.pid, r.port
            )));
        }
    }
    let listener =
        std::net::TcpListener::bind((config.host.as_str(), config.port)).map_err(|e| {
            let who = crate::host::listener_on(config.port)
                .and_then(|l| l.pid)
                .map_or(String::new(), |pid| format!(" (pid {pid} holds it)"));
            Error::io(
                format!(
                    "cannot bind the production port {}:{}{who}; stop what serves there, or set \
                 SPARKCTL_PRODUCTION_PORT",
                    config.host, config.port
                ),
                e,
            )
        })?;
    // The child inherits the socket: no close-on-exec on it.
    let fd = listener.as_raw_fd();
    // SAFETY: fcntl on a descriptor this process owns.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC);
    }
    let me = crate::host::ProcessId::of(std::process::id())
        .ok_or_else(|| Error::Failed("cannot read this process's start time".into()))?;
    let log_file = std::fs::read_link("/proc/self/fd/1").unwrap_or_default();
    std::fs::create_dir_all(dir(state))
        .map_err(|e| Error::io(format!("cannot create {}", dir(state).display()), e))?;
    state::write_json(
        &record_path(state),
        &Record {
            pid: me.pid,
            start_ticks: me.start_ticks,
            host: config.host.clone(),
            port: config.port,
            started_at: crate::units::unix_now().as_secs(),
            log_file,
        },
    )?;
    super::say!(
        "sparkctl front door on {}:{} (supervisor pid {})",
        config.host,
        config.port,
        me.pid
    );
    let mut backoff = Duration::from_millis(100);
    let mut terminate = signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut hangup = signal(tokio::signal::unix::SignalKind::hangup())?;
    loop {
        let began = Instant::now();
        let mut child = tokio::process::Command::from(
            launch.command(state, &["serve", "--listen-fd", &fd.to_string()]),
        )
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| Error::io("cannot start the front door server", e))?;
        let ended = tokio::select! {
            status = child.wait() => Some(status),
            _ = tokio::signal::ctrl_c() => None,
            _ = terminate.recv() => None,
            _ = hangup.recv() => None,
        };
        match ended {
            None => {
                if let Some(pid) = child.id() {
                    // SAFETY: a signal to our own child.
                    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
                }
                let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
                let _ = std::fs::remove_file(record_path(state));
                let _ = std::fs::remove_file(control_socket(state));
                super::say!("front door stopped");
                return Ok(());
            }
            Some(status) => {
                if began.elapsed() > Duration::from_secs(30) {
                    backoff = Duration::from_millis(100);
                }
                super::say!(
                    "front door server exited ({}); restarting in {} ms",
                    status.map_or_else(|e| e.to_string(), |s| s.to_string()),
                    backoff.as_millis()
                );
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
}

fn signal(kind: tokio::signal::unix::SignalKind) -> Result<tokio::signal::unix::Signal> {
    tokio::signal::unix::signal(kind).map_err(|e| Error::io("cannot watch signals", e))
}

/// `sparkctl frontdoor stop`: SIGTERM to the supervisor, which stops its server.
pub async fn stop(state: &StateDir) -> Result<Option<u32>> {
    let Some(r) = running(state) else {
        return Ok(None);
    };
    // SAFETY: a signal to a process whose identity (pid + start time) was just checked.
    unsafe { libc::kill(r.pid as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if running(state).is_none() {
            return Ok(Some(r.pid));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(Error::Failed(format!(
        "the front door (pid {}) did not stop within 15 s",
        r.pid
    )))
}
