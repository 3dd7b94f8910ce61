//! Keeping the front door up: `frontdoor run` (the supervisor) holds the production port's
//! socket and runs the server (`frontdoor serve`) with it, restarting it with back-off when
//! it dies; meanwhile new connections wait in the kernel's backlog instead of being
//! refused. SIGTERM stops it gracefully: the port closes, the streams in flight finish
//! (within the drain time). SIGHUP (`frontdoor restart`) restarts it, onto a new binary if
//! one was installed: the supervisor execs it in place (same pid, same socket), the new
//! server starts, then the old one stops taking connections and drains — nginx's and
//! HAProxy's reload. A server whose supervisor died starts a new one that adopts it.

use std::os::unix::io::{AsRawFd, FromRawFd};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::frontdoor::launch::{
    already_running, record_path, restart_request_path, running, Record, RestartRequest,
};
use crate::frontdoor::{control_socket, dir, handover, Config, Launch, Remote, Takeover};
use crate::host::ProcessId;
use crate::state::{self, StateDir};

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
            return Err(already_running(&r, false));
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
            let p = ProcessId::of(pid).ok_or(Error::Stopped(crate::error::Gone::Pid { pid }))?;
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

/// `--listen-fd FD` that is no listening socket (the supervisor's and the server's flag).
pub(crate) fn not_listening(fd: i32) -> Error {
    Error::BadFlag(crate::error::FlagProblem::NotListening { fd })
}
