//! The front door on a socket `adopt` hands it: the foreign server's own listening socket
//! (shared, so the port never closes), or one bound the moment the port is free. The
//! supervisor inherits it (`frontdoor run --listen-fd`) as it does across its own restarts.

use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use crate::error::{Error, Exposure, Result};
use crate::frontdoor::{handover, Config, Launch, Remote};
use crate::import::record::Imported;
use crate::state::StateDir;

/// Refuses to hand the port to a front door without a key when the server guarded it with
/// one (import left its `--api-key` out: it is in the record) or when others could reach
/// it (it listened beyond loopback, and the door takes the same address): the door would
/// serve, open, what the server served. Before anything is touched.
pub(crate) fn refuse_open(
    config: &Config,
    imported: &Imported,
    foreign: &str,
    host: &str,
) -> Result<()> {
    if config.api_key_required {
        return Ok(());
    }
    let port = config.port;
    let foreign = foreign.to_string();
    Err(Error::OpenWithoutKey(
        match (imported.access_key(), crate::frontdoor::loopback_only(host)) {
            (Some(flag), _) => Exposure::AdoptKeyed {
                foreign,
                flag: flag.to_string(),
                port,
            },
            (None, false) => Exposure::AdoptOpen {
                foreign,
                host: host.to_string(),
                port,
            },
            (None, true) => return Ok(()),
        },
    ))
}

/// Connections the kernel keeps while the front door starts (as the front door binds).
const BACKLOG: i32 = 4096;

/// Binds `host:port` as soon as nothing holds it, trying every few milliseconds for up to
/// `within`.
pub(crate) async fn bind_when_free(host: &str, port: u16, within: Duration) -> Result<OwnedFd> {
    let deadline = Instant::now() + within;
    loop {
        match std::net::TcpListener::bind((host, port)) {
            Ok(l) => {
                // SAFETY: listen on a socket this function owns, to deepen its backlog.
                unsafe { libc::listen(l.as_raw_fd(), BACKLOG) };
                return Ok(OwnedFd::from(l));
            }
            Err(e) if Instant::now() >= deadline => {
                return Err(Error::io(
                    format!("port {port} was not free within {} s", within.as_secs()),
                    e,
                ))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(2)).await,
        }
    }
}

/// Starts the front door's supervisor on `socket` (detached, in its own session), and
/// waits until it answers on its control socket.
pub(crate) async fn start_on(
    state: &StateDir,
    config: &Config,
    launch: &Launch,
    socket: OwnedFd,
    host: &str,
) -> Result<Remote> {
    let fd = socket.as_raw_fd();
    // A shared socket keeps the backlog its first owner chose: deepen it as the door does.
    // SAFETY: listen on a listening socket this process holds.
    unsafe { libc::listen(fd, BACKLOG) };
    if !handover::is_listening_socket(fd) {
        return Err(Error::Failed(
            "the production port's socket is not listening".into(),
        ));
    }
    let remote = Remote::new(crate::frontdoor::control_socket(state));
    let log_file = state.log_file("frontdoor", &crate::state::new_run_id())?;
    let log = std::fs::File::create(&log_file)
        .map_err(|e| Error::io(format!("cannot create {}", log_file.display()), e))?;
    let fd_arg = fd.to_string();
    let mut cmd = launch.command(state, &["run", "--listen-fd", &fd_arg]);
    cmd.env("SPARKCTL_FRONTDOOR_HOST", host)
        .env("SPARKCTL_PRODUCTION_PORT", config.port.to_string())
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().map_err(|e| Error::io("log file", e))?)
        .stderr(log);
    {
        use std::os::unix::process::CommandExt;
        let mut inherit = handover::inherit(fd);
        // SAFETY: setsid and fcntl only, both async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                crate::host::new_session()?;
                inherit()
            });
        }
    }
    let child = cmd
        .spawn()
        .map_err(|e| Error::io(format!("cannot start {} frontdoor run", launch.self_exe), e))?;
    // The supervisor holds it now; this process lets go.
    drop(socket);
    crate::frontdoor::launch::until_answering(&remote, child, &log_file).await?;
    Ok(remote)
}
