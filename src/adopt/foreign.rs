//! The server sparkctl did not start and is asked to take over: found again from what
//! `import` recorded, checked to be the very same (a pid's start time, a container's id),
//! stopped only when the user said yes, and put back as it was when the adoption fails.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::host::ProcessId;
use crate::import::Origin;

/// A foreign server as it runs now.
pub(crate) enum Foreign {
    Process {
        id: ProcessId,
        /// What starts it again (held in memory only, for the way back; never written).
        argv: Vec<String>,
        cwd: Option<PathBuf>,
        env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
    },
    Container {
        id: String,
        name: String,
    },
}

impl Foreign {
    /// The server `origin` names, if it still runs as it did.
    pub(crate) async fn find(origin: &Origin, docker: Option<&bollard::Docker>) -> Result<Foreign> {
        match origin {
            Origin::Process { process, .. } => {
                if !process.alive() {
                    return Err(Error::Stopped(crate::error::Gone::ImportedPid {
                        pid: process.pid,
                    }));
                }
                same_user(process.pid)?;
                let (argv, cwd, env) = relaunch_of(process.pid);
                Ok(Foreign::Process {
                    id: *process,
                    argv,
                    cwd,
                    env,
                })
            }
            Origin::Container { id, name, .. } => {
                let docker = docker.ok_or_else(|| unreachable("find", name))?;
                let running = docker
                    .inspect_container(id, None)
                    .await
                    .ok()
                    .and_then(|i| i.state)
                    .and_then(|s| s.running)
                    .unwrap_or(false);
                if !running {
                    return Err(Error::Stopped(crate::error::Gone::ImportedContainer {
                        name: name.clone(),
                    }));
                }
                Ok(Foreign::Container {
                    id: id.clone(),
                    name: name.clone(),
                })
            }
        }
    }

    pub(crate) fn describe(&self) -> String {
        match self {
            Foreign::Process { id, argv, .. } => format!(
                "pid {} ({})",
                id.pid,
                argv.first()
                    .map_or("?", |a| a.rsplit('/').next().unwrap_or(a))
            ),
            Foreign::Container { name, .. } => format!("container {name}"),
        }
    }

    /// The very socket it listens on `port`, shared with this process (pidfd_getfd): the
    /// front door then accepts from the same queue, so no connection finds the port closed.
    /// None when the kernel or its permissions do not allow it (another user's process, a
    /// container behind docker-proxy).
    pub(crate) fn share_socket(&self, port: u16) -> Option<OwnedFd> {
        let Foreign::Process { id, .. } = self else {
            return None;
        };
        let (fd, _) = crate::host::listening_fds(id.pid)
            .into_iter()
            .find(|(_, p)| *p == port)?;
        // SAFETY: pidfd_open takes a pid and flags; the result is a new descriptor or -1.
        let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, id.pid as libc::pid_t, 0) };
        if pidfd < 0 {
            return None;
        }
        // SAFETY: a descriptor the kernel just gave this process.
        let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as i32) };
        // SAFETY: pidfd_getfd duplicates descriptor `fd` of the process into this one
        // (close-on-exec), or fails with -1.
        let shared = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
        if shared < 0 || !id.alive() {
            return None;
        }
        // SAFETY: as above.
        Some(unsafe { OwnedFd::from_raw_fd(shared as i32) })
    }

    /// Ends a process whose listening socket the front door shares, without closing that
    /// socket for the door: a server's own shutdown would `shutdown()` the socket, which
    /// every holder shares, so it is frozen (SIGSTOP: it accepts nothing more), and killed
    /// only at a moment it holds no accepted connection; while it does, it runs a little
    /// longer to finish them. Past `within` it is killed anyway. Returns the connections it
    /// still held then.
    pub(crate) async fn retire_shared(&self, port: u16, within: Duration) -> usize {
        let Foreign::Process { id, .. } = self else {
            return 0;
        };
        let deadline = Instant::now() + within;
        loop {
            if !id.alive() {
                return 0;
            }
            // SAFETY: signals to the process whose identity (pid + start time) was checked.
            unsafe { libc::kill(id.pid as i32, libc::SIGSTOP) };
            // SIGSTOP only asks: every thread must have stopped before the count means
            // anything (one still running could accept right after it).
            let frozen_by = Instant::now() + Duration::from_millis(200);
            while !all_stopped(id.pid) && Instant::now() < frozen_by {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let held = crate::host::connections_of(id.pid, port);
            tracing::debug!(
                "retiring pid {}: {held} connection(s) on port {port}",
                id.pid
            );
            if held == 0 || Instant::now() >= deadline {
                // SAFETY: as above.
                unsafe { libc::kill(id.pid as i32, libc::SIGKILL) };
                if !ended_within(id, AFTER_KILL).await {
                    // Frozen, it takes no connection: the door serves the port meanwhile.
                    tracing::warn!(
                        "pid {} did not end within {} s of SIGKILL",
                        id.pid,
                        AFTER_KILL.as_secs()
                    );
                }
                return held;
            }
            // SAFETY: as above.
            unsafe { libc::kill(id.pid as i32, libc::SIGCONT) };
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Stops it: SIGTERM, then SIGKILL after `grace` (a process); `docker stop` (a container).
    /// A process that cannot be signalled, or outlives SIGKILL (stuck in the kernel), is an
    /// error after a bounded wait: adopt never waits for ever holding the state lock.
    pub(crate) async fn stop(
        &self,
        docker: Option<&bollard::Docker>,
        grace: Duration,
    ) -> Result<()> {
        match self {
            Foreign::Process { id, .. } => {
                if !id.alive() {
                    return Ok(());
                }
                signal(id, libc::SIGTERM)?;
                if ended_within(id, grace).await {
                    return Ok(());
                }
                signal(id, libc::SIGKILL)?;
                if ended_within(id, AFTER_KILL).await {
                    return Ok(());
                }
                Err(Error::NotEnded(crate::error::Stuck::Adopted {
                    pid: id.pid,
                    secs: AFTER_KILL.as_secs(),
                    state: crate::host::process_state(id.pid).unwrap_or('?'),
                }))
            }
            Foreign::Container { id, name } => {
                let docker = docker.ok_or_else(|| unreachable("stop", name))?;
                let opts = bollard::query_parameters::StopContainerOptionsBuilder::new()
                    .t(grace.as_secs() as i32)
                    .build();
                docker.stop_container(id, Some(opts)).await.map_err(|e| {
                    crate::runtime::docker::engine_error(&format!("stopping {name}"), e)
                })
            }
        }
    }

    /// Starts it again as it was (after a failed adoption): the same argv, working dir and
    /// environment for a process (its output goes to `log`), `docker start` for a container.
    pub(crate) async fn restore(
        &self,
        docker: Option<&bollard::Docker>,
        log: &std::path::Path,
    ) -> Result<String> {
        match self {
            Foreign::Process { id, .. } if id.alive() => Ok(format!("pid {} kept running", id.pid)),
            Foreign::Process { argv, cwd, env, .. } => {
                let (program, args) = argv
                    .split_first()
                    .ok_or_else(|| Error::Failed("its command line was not read".into()))?;
                let out = std::fs::File::create(log)
                    .map_err(|e| Error::io(format!("cannot create {}", log.display()), e))?;
                let err = out.try_clone().map_err(|e| Error::io("log file", e))?;
                let mut cmd = std::process::Command::new(program);
                cmd.args(args)
                    .env_clear()
                    .envs(env.iter().map(|(k, v)| (k, v)))
                    .stdin(std::process::Stdio::null())
                    .stdout(out)
                    .stderr(err);
                if let Some(dir) = cwd {
                    cmd.current_dir(dir);
                }
                {
                    use std::os::unix::process::CommandExt;
                    // SAFETY: new_session only calls setsid, which is async-signal-safe.
                    unsafe { cmd.pre_exec(crate::host::new_session) };
                }
                let child = cmd
                    .spawn()
                    .map_err(|e| Error::io(format!("cannot start {program} again"), e))?;
                let pid = child.id();
                // It runs on its own, as it did before; init reaps it.
                std::mem::forget(child);
                Ok(format!(
                    "started {program} again (pid {pid}, output in {})",
                    log.display()
                ))
            }
            Foreign::Container { id, name } => {
                let docker = docker.ok_or_else(|| unreachable("start", name))?;
                docker.start_container(id, None).await.map_err(|e| {
                    crate::runtime::docker::engine_error(&format!("starting {name}"), e)
                })?;
                Ok(format!("started container {name} again"))
            }
        }
    }
}

/// How long a process may take to end once SIGKILL was sent.
const AFTER_KILL: Duration = Duration::from_secs(10);

/// Sends `sig` to the process; one already gone is no error, one that may not be signalled
/// is.
fn signal(id: &ProcessId, sig: i32) -> Result<()> {
    // SAFETY: a signal to the process whose identity (pid + start time) was checked.
    if unsafe { libc::kill(id.pid as i32, sig) } == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::ESRCH) {
        return Ok(());
    }
    Err(Error::io(format!("cannot signal pid {}", id.pid), e))
}

/// Whether the process ended within `within`.
async fn ended_within(id: &ProcessId, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while id.alive() {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    true
}

/// Refuses a process of another user's: adopt stops it and, when the adoption fails, starts
/// it again as it was — which only its own user may (or should: root would start it again
/// as root).
fn same_user(pid: u32) -> Result<()> {
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    match crate::host::process_uid(pid) {
        Some(uid) if uid == me => Ok(()),
        Some(uid) => Err(Error::Refused(crate::error::Refusal::OtherUser {
            pid,
            owner: crate::host::user(uid),
            me: crate::host::user(me),
        })),
        None => Err(Error::Refused(crate::error::Refusal::UnreadableUser {
            pid,
        })),
    }
}

/// Whether every thread of `pid` is stopped (state T), as SIGSTOP leaves them.
fn all_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.filter_map(|t| t.ok()).all(|t| {
        std::fs::read_to_string(t.path().join("stat"))
            .ok()
            .and_then(|s| {
                s.rfind(')')
                    .and_then(|i| s[i + 1..].trim_start().chars().next())
            })
            .is_some_and(|state| state == 'T' || state == 't')
    })
}

/// What starts the process again: argv, working dir, environment (values included, held in
/// memory only for the way back).
type Relaunch = (
    Vec<String>,
    Option<PathBuf>,
    Vec<(std::ffi::OsString, std::ffi::OsString)>,
);

fn relaunch_of(pid: u32) -> Relaunch {
    use std::os::unix::ffi::OsStrExt;
    let dir = PathBuf::from(format!("/proc/{pid}"));
    let argv = std::fs::read(dir.join("cmdline"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect();
    let cwd = std::fs::read_link(dir.join("cwd")).ok();
    let env = std::fs::read(dir.join("environ"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .filter_map(|kv| {
            let at = kv.iter().position(|b| *b == b'=')?;
            Some((
                std::ffi::OsStr::from_bytes(&kv[..at]).to_os_string(),
                std::ffi::OsStr::from_bytes(&kv[at + 1..]).to_os_string(),
            ))
        })
        .collect();
    (argv, cwd, env)
}

/// No engine to `doing` the container `name` with (it did not answer when adopt began).
fn unreachable(doing: &'static str, name: &str) -> Error {
    Error::EngineUnreachable {
        cause: crate::error::Reach::Needed(crate::error::EngineNeed::Container {
            doing,
            name: name.to_string(),
        }),
    }
}
