//! The production port's socket across processes. Bound once, with a deep backlog; held
//! close-on-exec everywhere, and made inheritable only in the child that must get it (a
//! server, a supervisor taking over) between its fork and its exec — so a production
//! process the watch starts never holds the port. The descriptor budget is raised at start.

use std::os::unix::io::{AsRawFd, RawFd};

use crate::error::{Error, Result};

/// Connections the kernel keeps for us while the cap is reached or a server restarts
/// (clamped by `net.core.somaxconn`).
const BACKLOG: i32 = 4096;

/// Binds `host:port` for the front door, close-on-exec.
pub(crate) fn bind(host: &str, port: u16) -> Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind((host, port)).map_err(|e| {
        let who = crate::host::listener_on(port)
            .and_then(|l| l.pid)
            .map_or(String::new(), |pid| format!(" (pid {pid} holds it)"));
        Error::io(
            format!(
                "cannot bind the production port {host}:{port}{who}; stop what serves there, or \
                 set SPARKCTL_PRODUCTION_PORT"
            ),
            e,
        )
    })?;
    // A second listen() only deepens the backlog std chose.
    // SAFETY: listen on a socket this function owns.
    unsafe { libc::listen(listener.as_raw_fd(), BACKLOG) };
    set_cloexec(listener.as_raw_fd(), true);
    Ok(listener)
}

/// Sets or clears close-on-exec on `fd`.
pub(crate) fn set_cloexec(fd: RawFd, on: bool) {
    // SAFETY: fcntl on a descriptor number; an invalid one fails harmlessly.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags >= 0 {
            let flags = if on {
                flags | libc::FD_CLOEXEC
            } else {
                flags & !libc::FD_CLOEXEC
            };
            libc::fcntl(fd, libc::F_SETFD, flags);
        }
    }
}

/// For `pre_exec`: the child keeps `fd` across its exec (the parent's stays close-on-exec).
pub(crate) fn inherit(fd: RawFd) -> impl FnMut() -> std::io::Result<()> + Send + Sync + 'static {
    move || {
        // SAFETY: fcntl is async-signal-safe; it changes only the child's descriptor.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// Whether `fd` is open, and a listening TCP socket.
pub(crate) fn is_listening_socket(fd: RawFd) -> bool {
    let mut accepting: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `accepting`.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ACCEPTCONN,
            (&mut accepting as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    r == 0 && accepting == 1
}

/// Raises the soft limit on open descriptors to the hard one (systemd's default soft limit
/// is 1,024: a few hundred clients); returns the soft limit in force.
pub(crate) fn raise_fd_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on this process with a valid struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 1024;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim.rlim_cur = lim.rlim_max;
            }
        }
    }
    lim.rlim_cur
}

/// How many client connections the production port may hold with `fd_limit` descriptors:
/// each may need two (the client's and the upstream's), beside a reserve for the control
/// socket, logs, the Docker Engine and children's pipes.
pub(crate) fn connection_cap(fd_limit: u64) -> usize {
    const RESERVE: u64 = 96;
    (fd_limit.saturating_sub(RESERVE) / 2).clamp(16, 1 << 20) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_room_for_upstreams_and_the_rest() {
        assert_eq!(connection_cap(1024), 464);
        assert_eq!(connection_cap(10), 16);
    }

    #[test]
    fn a_bound_socket_is_close_on_exec_and_listening() {
        let l = bind("127.0.0.1", 0).unwrap();
        let fd = l.as_raw_fd();
        // SAFETY: reading the flags of our own descriptor.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        assert_ne!(flags & libc::FD_CLOEXEC, 0);
        assert!(is_listening_socket(fd));
    }
}
