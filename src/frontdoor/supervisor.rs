//! Keeping the front door up: `frontdoor run` (the supervisor) holds the production port's
//! socket and runs the server (`frontdoor serve`) with it, restarting it with back-off when
//! it dies; meanwhile new connections wait in the kernel's backlog instead of being
//! refused. SIGTERM stops it gracefully: the port closes, the streams in flight finish
//! (within the drain time). SIGHUP (`frontdoor restart`) restarts it, onto a new binary if
//! one was installed: the supervisor execs it in place (same pid, same socket), the new
//! server starts, then the old one stops taking connections and drains — nginx's and
//! HAProxy's reload. A server whose supervisor died starts a new one that adopts it.
//! `ensure` starts the supervisor, detached, when nothing answers the control socket.

use std::os::unix::io::{AsRawFd, FromRawFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{control_socket, dir, handover, Config, Remote};
use crate::error::{Error, Result};
use crate::host::ProcessId;
use crate::state::{self, StateDir};

/// How to run sparkctl again as the front door: its own binary with the CLI's paths.
#[derive(Debug, Clone)]
pub(crate) struct Launch {
    pub(crate) self_exe: String,
    pub(crate) recipes: PathBuf,
    pub(crate) lock: PathBuf,
}

impl Launch {
    /// The front door runs from wherever the service manager starts it: its paths are
    /// absolute.
    pub(crate) fn new(self_exe: &str, recipes: &std::path::Path, lock: &std::path::Path) -> Launch {
        Launch {
            self_exe: self_exe.to_string(),
            recipes: std::path::absolute(recipes).unwrap_or_else(|_| recipes.to_path_buf()),
            lock: std::path::absolute(lock).unwrap_or_else(|_| lock.to_path_buf()),
        }
    }

    pub(crate) fn command(&self, state: &StateDir, sub: &[&str]) -> std::process::Command {
        self.command_of(&self.self_exe, state, sub)
    }

    /// `command`, run by the binary at `exe` (a restart onto an upgrade).
    fn command_of(&self, exe: &str, state: &StateDir, sub: &[&str]) -> std::process::Command {
        let mut cmd = std::process::Command::new(exe);
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
pub(crate) struct Record {
    pub(crate) pid: u32,
    pub(crate) start_ticks: u64,
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) started_at: u64,
    pub(crate) log_file: PathBuf,
    /// The process group holding the supervisor and its server (a supervisor that adopted
    /// a server joins the server's group).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) pgid: Option<i32>,
}

pub(crate) fn record_path(state: &StateDir) -> PathBuf {
    dir(state).join("supervisor.json")
}

/// The supervisor's record, when its process still runs.
pub(crate) fn running(state: &StateDir) -> Option<Record> {
    let r: Record = state::read_json(&record_path(state)).ok()?;
    let id = crate::host::ProcessId {
        pid: r.pid,
        start_ticks: r.start_ticks,
    };
    id.alive().then_some(r)
}

/// The front door's control socket when the front door answers on it (and serves the
/// production port); None when nothing answers.
pub(crate) async fn answering(state: &StateDir, config: &Config) -> Result<Option<Remote>> {
    let remote = Remote::new(control_socket(state));
    let Ok(s) = remote.status().await else {
        return Ok(None);
    };
    if s.port != config.port {
        return Err(Error::AlreadyRunning {
            what: "the front door of this state dir".into(),
            detail: format!(
                "pid {}, on port {}, not the production port {}",
                s.pid, s.port, config.port
            ),
            fix: format!(
                "`sparkctl frontdoor stop` first, or set SPARKCTL_PRODUCTION_PORT={}",
                s.port
            ),
        });
    }
    Ok(Some(remote))
}

/// The front door's control socket, starting the front door first when nothing answers.
pub(crate) async fn ensure(state: &StateDir, config: &Config, launch: &Launch) -> Result<Remote> {
    if let Some(remote) = answering(state, config).await? {
        return Ok(remote);
    }
    config.refuse_open()?;
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
    let child = cmd
        .spawn()
        .map_err(|e| Error::io(format!("cannot start {} frontdoor run", launch.self_exe), e))?;
    until_answering(&remote, child, &log_file).await?;
    Ok(remote)
}

/// Waits (15 s at most) until a front door just spawned as `child` answers on its control
/// socket; an exit or silence is an error quoting its log.
pub(crate) async fn until_answering(
    remote: &Remote,
    mut child: std::process::Child,
    log_file: &std::path::Path,
) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if remote.status().await.is_ok() {
            // Reaped by init once this command exits; not waited for here.
            std::mem::forget(child);
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(Error::DoorFailed {
                what: format!(
                    "exited at once ({status}); its log {} says:\n{}",
                    log_file.display(),
                    tail(log_file)
                ),
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(Error::DoorFailed {
        what: format!(
            "did not answer within 15 s; its log {} says:\n{}",
            log_file.display(),
            tail(log_file)
        ),
    })
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

/// How `frontdoor run` comes by its socket and its server: it binds the port and starts a
/// server (the default); or it inherits both (`--listen-fd`, `--server`: it was exec'd in
/// place for a restart, or started by a server whose supervisor died).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Takeover {
    pub(crate) listen_fd: Option<i32>,
    /// A server already serving on that socket.
    pub(crate) server: Option<u32>,
    /// Start a new server, then drain `server` (a restart); otherwise keep `server`.
    pub(crate) upgrade: bool,
}

/// What asked for a restart, and onto which binary (`STATE/frontdoor/restart.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct RestartRequest {
    exe: String,
}

fn restart_request_path(state: &StateDir) -> PathBuf {
    dir(state).join("restart.json")
}

/// The server the supervisor keeps running: its own child, or one it inherited (after
/// an exec in place it is still a child, but not one the runtime knows; after an adoption
/// it is not a child at all).
enum Server {
    Child(tokio::process::Child),
    Other(ProcessId),
}

impl Server {
    fn pid(&self) -> Option<u32> {
        match self {
            Server::Child(c) => c.id(),
            Server::Other(p) => Some(p.pid),
        }
    }

    fn signal(&self, signal: i32) {
        if let Some(pid) = self.pid() {
            // SAFETY: a signal to the server this supervisor keeps.
            unsafe { libc::kill(pid as i32, signal) };
        }
    }

    /// Waits until it ended; how it ended.
    async fn wait(&mut self) -> String {
        match self {
            Server::Child(c) => c
                .wait()
                .await
                .map_or_else(|e| e.to_string(), |s| s.to_string()),
            Server::Other(p) => {
                gone(*p).await;
                "exited".into()
            }
        }
    }
}

/// Waits until `p` ended, and reaps it when it is this process's child.
async fn gone(p: ProcessId) {
    p.ended().await;
    // SAFETY: waitpid on one pid, not blocking; ECHILD when it is not ours.
    unsafe { libc::waitpid(p.pid as i32, std::ptr::null_mut(), libc::WNOHANG) };
}

fn spawn_server(state: &StateDir, launch: &Launch, fd: i32) -> Result<Server> {
    let mut cmd = launch.command(state, &["serve", "--listen-fd", &fd.to_string()]);
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: `inherit` only calls fcntl, which is async-signal-safe.
        unsafe { cmd.pre_exec(handover::inherit(fd)) };
    }
    let child = tokio::process::Command::from(cmd)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| Error::io("cannot start the front door server", e))?;
    Ok(Server::Child(child))
}

/// The socket to serve: inherited, or bound now.
fn socket(config: &Config, takeover: &Takeover) -> Result<std::net::TcpListener> {
    match takeover.listen_fd {
        Some(fd) if handover::is_listening_socket(fd) => {
            handover::set_cloexec(fd, true);
            // SAFETY: a listening socket this process inherited to serve.
            Ok(unsafe { std::net::TcpListener::from_raw_fd(fd) })
        }
        Some(fd) => Err(not_listening(fd)),
        None => handover::bind(&config.host, config.port),
    }
}

/// `sparkctl frontdoor run`: hold the socket, record, keep a server running; stop
/// gracefully on SIGTERM/SIGINT, restart in place on SIGHUP.
pub(crate) async fn run(
    state: &StateDir,
    config: &Config,
    launch: &Launch,
    takeover: Takeover,
) -> Result<()> {
    handover::raise_fd_limit();
    if let Some(r) = running(state) {
        if r.pid != std::process::id() {
            return Err(already_running(&r, ""));
        }
    }
    // A socket of its own to bind: not on an open address without a key. One inherited is
    // already served (a restart, an adoption that checked): its server refuses instead,
    // and the one serving now keeps serving.
    if takeover.listen_fd.is_none() {
        config.refuse_open()?;
    }
    let listener = socket(config, &takeover)?;
    let fd = listener.as_raw_fd();
    write_record(state, config)?;
    let mut server = match (takeover.server, takeover.upgrade) {
        (Some(old), true) => upgrade_from(state, launch, fd, old).await,
        (Some(pid), false) => {
            super::say!("supervising the front door server pid {pid}, whose supervisor is gone");
            let p = ProcessId::of(pid).ok_or_else(|| Error::Stopped {
                what: format!("pid {pid}"),
                fix: String::new(),
            })?;
            Server::Other(p)
        }
        (None, _) => spawn_server(state, launch, fd)?,
    };
    let mut backoff = Duration::from_millis(100);
    let mut terminate = signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut hangup = signal(tokio::signal::unix::SignalKind::hangup())?;
    let mut began = Instant::now();
    loop {
        let status = tokio::select! {
            status = server.wait() => status,
            _ = tokio::signal::ctrl_c() => break,
            _ = terminate.recv() => break,
            _ = hangup.recv() => {
                if let Some(pid) = server.pid() {
                    let e = exec_restart(state, launch, fd, pid);
                    super::say!("restart failed, the server keeps running: {e}");
                }
                continue;
            }
        };
        if began.elapsed() > Duration::from_secs(30) {
            backoff = Duration::from_millis(100);
        }
        super::say!(
            "front door server exited ({status}); restarting in {} ms",
            backoff.as_millis()
        );
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
        began = Instant::now();
        server = spawn_server(state, launch, fd)?;
    }
    // The port closes here and in the server: new connections are refused from now on;
    // the server's answers in flight finish.
    drop(listener);
    super::say!(
        "front door stopping: finishing the answers in flight (at most {} s)",
        config.drain.as_secs()
    );
    server.signal(libc::SIGTERM);
    let bound = config.drain + Duration::from_secs(10);
    if tokio::time::timeout(bound, server.wait()).await.is_err() {
        server.signal(libc::SIGKILL);
        let _ = tokio::time::timeout(Duration::from_secs(5), server.wait()).await;
    }
    // Another supervisor may have taken over meanwhile: its files stay.
    if running(state).is_none_or(|r| r.pid == std::process::id()) {
        let _ = std::fs::remove_file(record_path(state));
        let _ = std::fs::remove_file(control_socket(state));
    }
    super::say!("front door stopped");
    Ok(())
}

fn write_record(state: &StateDir, config: &Config) -> Result<()> {
    let me = ProcessId::of(std::process::id())
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
            // SAFETY: getpgrp cannot fail.
            pgid: Some(unsafe { libc::getpgrp() }),
        },
    )?;
    super::say!(
        "sparkctl front door on {}:{} (supervisor pid {})",
        config.host,
        config.port,
        me.pid
    );
    Ok(())
}

/// Replaces this process with the binary the restart names (this one's path otherwise),
/// keeping the socket and the running server; returns only when that failed.
fn exec_restart(state: &StateDir, launch: &Launch, fd: i32, server: u32) -> Error {
    use std::os::unix::process::CommandExt;
    let path = restart_request_path(state);
    let exe = state::read_json::<RestartRequest>(&path)
        .map(|r| r.exe)
        .unwrap_or_else(|_| launch.self_exe.clone());
    let _ = std::fs::remove_file(&path);
    super::say!("front door restarting onto {exe}");
    let (fd_arg, server_arg) = (fd.to_string(), server.to_string());
    let sub = [
        "run",
        "--listen-fd",
        &fd_arg,
        "--server",
        &server_arg,
        "--upgrade",
    ];
    let mut cmd = launch.command_of(&exe, state, &sub);
    handover::set_cloexec(fd, false);
    let e = cmd.exec();
    handover::set_cloexec(fd, true);
    Error::io(format!("cannot run {exe}"), e)
}

/// After an exec in place: a new server starts on the socket; once it answers, the old
/// one stops taking connections and finishes its answers. If the new one does not come
/// up, the old one keeps serving.
async fn upgrade_from(state: &StateDir, launch: &Launch, fd: i32, old: u32) -> Server {
    let Some(old) = ProcessId::of(old).filter(ProcessId::alive) else {
        return match spawn_server(state, launch, fd) {
            Ok(s) => s,
            Err(e) => {
                super::say!("{e}");
                Server::Other(ProcessId {
                    pid: old,
                    start_ticks: 0,
                })
            }
        };
    };
    let mut new = match spawn_server(state, launch, fd) {
        Ok(s) => s,
        Err(e) => {
            super::say!("restart: {e}; the server pid {} keeps serving", old.pid);
            return Server::Other(old);
        }
    };
    let remote = Remote::new(control_socket(state));
    let deadline = Instant::now() + Duration::from_secs(30);
    let answered = loop {
        if let Ok(s) = remote.status().await {
            if Some(s.pid) == new.pid() {
                break true;
            }
        }
        let exited = match &mut new {
            Server::Child(c) => matches!(c.try_wait(), Ok(Some(_))),
            Server::Other(p) => !p.alive(),
        };
        if exited || Instant::now() > deadline {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    if !answered {
        new.signal(libc::SIGKILL);
        super::say!(
            "restart: the new server did not answer; the server pid {} keeps serving",
            old.pid
        );
        return Server::Other(old);
    }
    super::say!(
        "restart: server pid {} serves; pid {} finishes its answers in flight",
        new.pid().unwrap_or_default(),
        old.pid
    );
    // SAFETY: a signal to the server this supervisor kept until now.
    unsafe { libc::kill(old.pid as i32, libc::SIGTERM) };
    tokio::spawn(gone(old));
    new
}

fn signal(kind: tokio::signal::unix::SignalKind) -> Result<tokio::signal::unix::Signal> {
    tokio::signal::unix::signal(kind).map_err(|e| Error::io("cannot watch signals", e))
}

/// How long `stop` waits: the drain, and the time to start and end processes.
fn stop_bound(drain: Duration) -> Duration {
    drain + Duration::from_secs(20)
}

/// `sparkctl frontdoor stop`: SIGTERM to the supervisor, which closes the port and lets
/// its server finish the answers in flight; a server left without a supervisor is asked
/// directly. Returns the pid it stopped.
pub(crate) async fn stop(state: &StateDir, drain: Duration) -> Result<Option<u32>> {
    let target = match running(state) {
        Some(r) => ProcessId {
            pid: r.pid,
            start_ticks: r.start_ticks,
        },
        None => match Remote::new(control_socket(state)).status().await {
            Ok(s) => match ProcessId::of(s.pid) {
                Some(p) => p,
                None => return Ok(None),
            },
            Err(_) => return Ok(None),
        },
    };
    // SAFETY: a signal to a process whose identity (pid + start time) was just checked.
    unsafe { libc::kill(target.pid as i32, libc::SIGTERM) };
    let deadline = Instant::now() + stop_bound(drain);
    while Instant::now() < deadline {
        if !target.alive() {
            // A supervisor that adopted the server meanwhile is stopped too.
            if let Some(r) = running(state) {
                // SAFETY: as above, for the record just read.
                unsafe { libc::kill(r.pid as i32, libc::SIGTERM) };
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            return Ok(Some(target.pid));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(Error::DoorFailed {
        what: format!(
            "(pid {}) did not stop within {} s",
            target.pid,
            stop_bound(drain).as_secs()
        ),
    })
}

/// `sparkctl frontdoor restart`: the running front door restarts in place onto this
/// binary, handing its socket over (no connection refused, no stream cut); one is started
/// when none runs. Returns the old server's pid and the new status.
pub(crate) async fn restart(
    state: &StateDir,
    config: &Config,
    launch: &Launch,
) -> Result<(Option<u32>, super::DoorStatus)> {
    let remote = Remote::new(control_socket(state));
    let Some(r) = running(state) else {
        let remote = ensure(state, config, launch).await?;
        return Ok((None, remote.status().await?));
    };
    let before = remote.status().await.ok().map(|s| s.pid);
    state::write_json(
        &restart_request_path(state),
        &RestartRequest {
            exe: launch.self_exe.clone(),
        },
    )?;
    // SAFETY: a signal to the supervisor whose identity was just checked.
    unsafe { libc::kill(r.pid as i32, libc::SIGHUP) };
    let deadline = Instant::now() + Duration::from_secs(45);
    while Instant::now() < deadline {
        if let Ok(s) = remote.status().await {
            if Some(s.pid) != before {
                return Ok((before, s));
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(Error::DoorFailed {
        what: format!(
            "did not restart within 45 s; its log: {}",
            r.log_file.display()
        ),
    })
}

/// `--listen-fd FD` that is no listening socket (the supervisor's and the server's flag).
pub(crate) fn not_listening(fd: i32) -> Error {
    Error::BadFlag {
        flag: "--listen-fd".into(),
        why: format!("{fd} is not a listening socket"),
    }
}

/// A front door runs for this state dir already (`r`); `fix` what to do, if anything.
pub(crate) fn already_running(r: &Record, fix: &str) -> Error {
    Error::AlreadyRunning {
        what: "a front door of this state dir".into(),
        detail: format!("pid {}, port {}", r.pid, r.port),
        fix: fix.into(),
    }
}
