//! Starting, stopping and restarting the front door from a command: `ensure` starts the
//! supervisor (`frontdoor run`, `crate::server::supervisor`), detached, when nothing answers
//! the control socket; `stop` sends it SIGTERM and waits; `restart` asks it (SIGHUP) to
//! restart in place onto this binary. `STATE/frontdoor/supervisor.json` says who holds the
//! production port.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{control_socket, dir, Config, Remote};
use crate::error::{DoorProblem, Error, Result};
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
    pub(crate) fn command_of(
        &self,
        exe: &str,
        state: &StateDir,
        sub: &[&str],
    ) -> std::process::Command {
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
        return Err(Error::AlreadyRunning(
            crate::error::Running::DoorElsewhere {
                pid: s.pid,
                port: s.port,
                production_port: config.port,
            },
        ));
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

/// How long a front door just spawned has to answer.
const ANSWER_S: u64 = 15;
/// How long a restarted front door has to answer again.
const RESTART_S: u64 = 45;

/// Waits (15 s at most) until a front door just spawned as `child` answers on its control
/// socket; an exit or silence is an error quoting its log.
pub(crate) async fn until_answering(
    remote: &Remote,
    mut child: std::process::Child,
    log_file: &std::path::Path,
) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(ANSWER_S);
    while Instant::now() < deadline {
        if remote.status().await.is_ok() {
            // Reaped by init once this command exits; not waited for here.
            std::mem::forget(child);
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(Error::DoorFailed(DoorProblem::ExitedAtOnce {
                status: status.to_string(),
                log: log_file.to_path_buf(),
                tail: tail(log_file),
            }));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(Error::DoorFailed(DoorProblem::Silent {
        secs: ANSWER_S,
        log: log_file.to_path_buf(),
        tail: tail(log_file),
    }))
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
pub(crate) struct RestartRequest {
    pub(crate) exe: String,
}

pub(crate) fn restart_request_path(state: &StateDir) -> PathBuf {
    dir(state).join("restart.json")
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
    Err(Error::DoorFailed(DoorProblem::NotStopped {
        pid: target.pid,
        secs: stop_bound(drain).as_secs(),
    }))
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
    let deadline = Instant::now() + Duration::from_secs(RESTART_S);
    while Instant::now() < deadline {
        if let Ok(s) = remote.status().await {
            if Some(s.pid) != before {
                return Ok((before, s));
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(Error::DoorFailed(DoorProblem::NotRestarted {
        secs: RESTART_S,
        log: r.log_file.clone(),
    }))
}

/// A front door runs for this state dir already (`r`); `for_adopt`: in adopt's way.
pub(crate) fn already_running(r: &Record, for_adopt: bool) -> Error {
    Error::AlreadyRunning(crate::error::Running::Door {
        pid: r.pid,
        port: r.port,
        for_adopt,
    })
}
