//! Facts about this machine: memory, who listens on a port, which process a pid is and what
//! it holds. (The GPU's view is `nvidia.rs`.)
//! Linux only (read from /proc), as a DGX Spark is.

use std::fs;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// This machine's name, for benchmark results.
pub(crate) fn hostname() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// The figures of /proc/meminfo sparkctl uses, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub(crate) struct MemInfo {
    /// RAM the kernel manages (on a Spark: the unified memory CPU and GPU share).
    pub(crate) total: u64,
    /// The kernel's estimate of what can be allocated without swapping (free memory plus
    /// reclaimable page cache). Every process on the machine moves it.
    pub(crate) available: u64,
}

pub(crate) fn meminfo() -> Option<MemInfo> {
    parse_meminfo(&fs::read_to_string("/proc/meminfo").ok()?)
}

fn parse_meminfo(text: &str) -> Option<MemInfo> {
    Some(MemInfo {
        total: kb_field(text, "MemTotal:")?,
        available: kb_field(text, "MemAvailable:")?,
    })
}

/// A `Key:   123 kB` line of /proc/meminfo or /proc/PID/status, in bytes.
fn kb_field(text: &str, key: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(key))?;
    let kb: u64 = line[key.len()..].split_whitespace().next()?.parse().ok()?;
    Some(kb * 1024)
}

/// Bytes of RAM the kernel reports (on a Spark: the unified memory CPU and GPU share).
pub(crate) fn mem_total_bytes() -> Option<u64> {
    meminfo().map(|m| m.total)
}

/// Resident memory of a process (VmRSS of /proc/PID/status: anonymous, file-backed and
/// shared pages it has mapped), in bytes. None when it is gone, unreadable, or a kernel
/// thread (which has no VmRSS line).
pub(crate) fn rss_bytes(pid: u32) -> Option<u64> {
    kb_field(
        &fs::read_to_string(format!("/proc/{pid}/status")).ok()?,
        "VmRSS:",
    )
}

/// What a process holds that the page cache does not: its anonymous and shared-memory pages
/// (RssAnon + RssShmem of /proc/PID/status; a mapped model file's pages are page cache, which
/// the kernel gives back, and are left out). None when it is gone or unreadable.
pub(crate) fn own_rss_bytes(pid: u32) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let anon = kb_field(&status, "RssAnon:")?;
    Some(anon + kb_field(&status, "RssShmem:").unwrap_or(0))
}

/// Something listening on a TCP port.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Listener {
    pub(crate) address: String,
    port: u16,
    pub(crate) pid: Option<u32>,
    pub(crate) command: Option<String>,
}

impl std::fmt::Display for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.pid, &self.command) {
            (Some(pid), Some(cmd)) => write!(f, "pid {pid} ({cmd})"),
            (Some(pid), None) => write!(f, "pid {pid}"),
            _ => write!(
                f,
                "a process sparkctl cannot see (no permission to read its /proc entry)"
            ),
        }
    }
}

/// Who listens on `port`, on any address. None when nothing does.
pub(crate) fn listener_on(port: u16) -> Option<Listener> {
    let (address, inode) = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .find_map(|table| listening_socket(table, port))?;
    let pid = socket_owner(inode);
    Some(Listener {
        address,
        port,
        pid,
        command: pid.and_then(command_name),
    })
}

/// Parses one /proc/net/tcp table: the local address and inode of a LISTEN socket on `port`.
fn listening_socket(table: &str, port: u16) -> Option<(String, u64)> {
    const LISTEN: &str = "0A";
    let text = fs::read_to_string(table).ok()?;
    text.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (local, state, inode) = (fields.get(1)?, fields.get(3)?, fields.get(9)?);
        let (addr_hex, port_hex) = local.split_once(':')?;
        if *state != LISTEN || u16::from_str_radix(port_hex, 16).ok()? != port {
            return None;
        }
        Some((decode_address(addr_hex), inode.parse().ok()?))
    })
}

/// /proc/net/tcp addresses are the in-memory words in hex: little-endian per 32 bits.
fn decode_address(hex: &str) -> String {
    let bytes: Vec<u8> = (0..hex.len() / 2)
        .filter_map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok())
        .collect();
    let words: Vec<u8> = bytes
        .chunks(4)
        .flat_map(|w| w.iter().rev().copied())
        .collect();
    match words.len() {
        4 => std::net::Ipv4Addr::new(words[0], words[1], words[2], words[3]).to_string(),
        16 => {
            let arr: [u8; 16] = words.try_into().expect("16 bytes");
            std::net::Ipv6Addr::from(arr).to_string()
        }
        _ => hex.to_string(),
    }
}

fn socket_owner(inode: u64) -> Option<u32> {
    let wanted = format!("socket:[{inode}]");
    fs::read_dir("/proc").ok()?.find_map(|entry| {
        let entry = entry.ok()?;
        let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
        fs::read_dir(entry.path().join("fd"))
            .ok()?
            .filter_map(|fd| fd.ok())
            .any(|fd| fs::read_link(fd.path()).is_ok_and(|t| t.as_os_str() == wanted.as_str()))
            .then_some(pid)
    })
}

/// Every LISTEN socket of the TCP tables: (inode, port).
fn listening_sockets() -> Vec<(u64, u16)> {
    const LISTEN: &str = "0A";
    let mut out = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state), Some(inode)) =
                (fields.get(1), fields.get(3), fields.get(9))
            else {
                continue;
            };
            let port = local
                .split_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            if let (true, Some(port), Ok(inode)) = (*state == LISTEN, port, inode.parse()) {
                out.push((inode, port));
            }
        }
    }
    out
}

/// The listening descriptors of `pid`: (fd number, port), lowest port first.
pub(crate) fn listening_fds(pid: u32) -> Vec<(i32, u16)> {
    let sockets = listening_sockets();
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    let mut out: Vec<(i32, u16)> = fds
        .filter_map(|fd| fd.ok())
        .filter_map(|fd| {
            let n: i32 = fd.file_name().to_str()?.parse().ok()?;
            let target = fs::read_link(fd.path()).ok()?;
            let inode: u64 = target
                .to_str()?
                .strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()?;
            let port = sockets.iter().find(|(i, _)| *i == inode)?.1;
            Some((n, port))
        })
        .collect();
    out.sort_by_key(|(_, port)| *port);
    out
}

/// Connections `pid` holds open that were accepted on `port` (ESTABLISHED, local port):
/// the requests it is still answering there.
pub(crate) fn connections_of(pid: u32, port: u16) -> usize {
    const ESTABLISHED: &str = "01";
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let local_port = f
                .get(1)
                .and_then(|l| l.split_once(':'))
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            if f.get(3) == Some(&ESTABLISHED) && local_port == Some(port) {
                if let Some(Ok(inode)) = f.get(9).map(|i| i.parse::<u64>()) {
                    inodes.push(format!("socket:[{inode}]"));
                }
            }
        }
    }
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    fds.filter_map(|fd| fs::read_link(fd.ok()?.path()).ok())
        .filter(|t| inodes.iter().any(|i| t.as_os_str() == i.as_str()))
        .count()
}

/// The ports `pid` listens on, lowest first.
pub(crate) fn ports_of(pid: u32) -> Vec<u16> {
    let mut ports: Vec<u16> = listening_fds(pid).into_iter().map(|(_, p)| p).collect();
    ports.dedup();
    ports
}

/// A process's state letter (`R`, `S`, `D`, `T`, `Z`…).
pub(crate) fn process_state(pid: u32) -> Option<char> {
    stat(pid).map(|s| s.state)
}

/// The user a process runs as (its real uid).
pub(crate) fn process_uid(pid: u32) -> Option<u32> {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// `name (uid N)` for a uid, the name from /etc/passwd when it is there.
pub(crate) fn user(uid: u32) -> String {
    let name = fs::read_to_string("/etc/passwd").ok().and_then(|text| {
        text.lines().find_map(|l| {
            let mut fields = l.split(':');
            let name = fields.next()?;
            (fields.nth(1)? == uid.to_string()).then(|| name.to_string())
        })
    });
    match name {
        Some(n) => format!("{n} (uid {uid})"),
        None => format!("uid {uid}"),
    }
}

pub(crate) fn command_name(pid: u32) -> Option<String> {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim().to_string())
}

/// What identifies one process for its whole life: its pid and its start time (clock ticks
/// after boot). A pid the kernel hands out again has a different start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct ProcessId {
    pub(crate) pid: u32,
    pub(crate) start_ticks: u64,
}

/// What sparkctl reads from /proc/PID/stat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    state: char,
    ppid: u32,
    session: u32,
    /// Clock ticks after boot.
    start: u64,
}

fn stat(pid: u32) -> Option<Stat> {
    parse_stat(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

fn parse_stat(text: &str) -> Option<Stat> {
    // The command name (field 2) may hold spaces and parentheses: parse after the last ')'.
    let rest = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): ppid is field 4, session 6, starttime 22.
    Some(Stat {
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        session: fields.get(3)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
    })
}

/// The live processes of the session `leader` leads, and their descendants that left it
/// (a worker that called setsid itself), leader first. A process deployment leads its own
/// session, so this is the server with every worker it started.
pub(crate) fn session_processes(leader: u32) -> Vec<u32> {
    let all: Vec<(u32, Stat)> = fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
            Some((pid, stat(pid)?))
        })
        .filter(|(_, s)| s.state != 'Z' && s.state != 'X')
        .collect();
    let mut found: Vec<u32> = Vec::new();
    if all.iter().any(|(pid, _)| *pid == leader) {
        found.push(leader);
    }
    found.extend(
        all.iter()
            .filter(|(pid, s)| s.session == leader && *pid != leader)
            .map(|(pid, _)| *pid),
    );
    // Descendants outside the session, to a fixed point (a tree is at most as deep as it is big).
    loop {
        let more: Vec<u32> = all
            .iter()
            .filter(|(pid, s)| found.contains(&s.ppid) && !found.contains(pid))
            .map(|(pid, _)| *pid)
            .collect();
        if more.is_empty() {
            return found;
        }
        found.extend(more);
    }
}

impl ProcessId {
    pub(crate) fn of(pid: u32) -> Option<ProcessId> {
        stat(pid).map(|s| ProcessId {
            pid,
            start_ticks: s.start,
        })
    }

    /// Running (not gone, not a zombie waiting to be reaped, not a different process).
    pub(crate) fn alive(&self) -> bool {
        matches!(stat(self.pid), Some(s) if s.start == self.start_ticks && s.state != 'Z' && s.state != 'X')
    }

    /// Resolves once the process has ended. The kernel says when (a pidfd turns readable at
    /// exit): a watcher of a long-lived process costs nothing while it lives, where polling
    /// /proc woke its runtime several times a second for as long as it ran.
    pub(crate) async fn ended(&self) {
        if let Some(fd) = self.pidfd() {
            // SAFETY: the AsyncFd owns the OwnedFd, which stays open and the same until
            // both are dropped together.
            if let Ok(fd) = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) } {
                let _ = fd.readable().await;
                return;
            }
        }
        // Kernels before 5.3 have no pidfd.
        while self.alive() {
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        }
    }

    fn pidfd(&self) -> Option<OwnedFd> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor (close-on-exec)
        // or -1; nothing else is touched.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, self.pid as libc::pid_t, 0) };
        if fd < 0 {
            return None;
        }
        // SAFETY: `fd` was just opened here and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        // The pid may have gone to another process before it was opened.
        self.alive().then_some(fd)
    }
}

/// True when `path` is a file this user may execute.
pub(crate) fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Run in a child between fork and exec (`pre_exec`): it becomes the leader of a session of
/// its own, so a Ctrl-C or a closed terminal of sparkctl's does not reach it, and signalling
/// its process group reaches everything it forks.
pub(crate) fn new_session() -> std::io::Result<()> {
    // SAFETY: setsid is async-signal-safe and touches nothing of the parent.
    if unsafe { libc::setsid() } == -1 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_of_this_process_is_found_with_its_pid() {
        let socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = socket.local_addr().unwrap().port();
        let found = listener_on(port).expect("listening socket found");
        assert_eq!(found.address, "127.0.0.1");
        assert_eq!(found.pid, Some(std::process::id()));
        drop(socket);
        // Another process may take the freed port at once on a busy machine: only ours
        // must be gone.
        assert_ne!(
            listener_on(port).and_then(|l| l.pid),
            Some(std::process::id())
        );
    }

    #[test]
    fn this_process_is_alive_and_a_changed_start_time_is_not() {
        let me = ProcessId::of(std::process::id()).unwrap();
        assert!(me.alive());
        let reused = ProcessId {
            start_ticks: me.start_ticks + 1,
            ..me
        };
        assert!(!reused.alive());
    }

    #[test]
    fn meminfo_gives_total_and_available_in_bytes() {
        let text = "MemTotal:       127535320 kB\nMemFree:         1000 kB\nMemAvailable:   120000000 kB\n";
        assert_eq!(
            parse_meminfo(text),
            Some(MemInfo {
                total: 127535320 * 1024,
                available: 120000000 * 1024
            })
        );
        // A kernel without MemAvailable (before 3.14) gives no figure rather than a wrong one.
        assert_eq!(parse_meminfo("MemTotal: 1 kB\n"), None);
        let here = meminfo().expect("this machine has /proc/meminfo");
        assert!(here.available > 0 && here.available <= here.total);
    }

    #[test]
    fn stat_fields_are_read_after_a_command_name_with_spaces_and_parens() {
        let line = "4242 (my (odd) cmd) S 1 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                state: 'S',
                ppid: 1,
                session: 4242,
                start: 987654
            })
        );
    }

    #[test]
    fn a_session_is_found_with_its_children_and_their_rss() {
        use std::os::unix::process::CommandExt;
        // A leader of its own session with one child, as a process deployment runs.
        let mut leader = std::process::Command::new("sh");
        leader.args(["-c", "sleep 30 & wait"]);
        unsafe {
            leader.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        let mut leader = leader.spawn().unwrap();
        let pid = leader.id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut members = session_processes(pid);
        while members.len() < 2 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
            members = session_processes(pid);
        }
        let child_parent = members.get(1).and_then(|c| stat(*c)).map(|s| s.ppid);
        unsafe {
            libc::kill(-(pid as i32), libc::SIGKILL);
        }
        let _ = leader.wait();
        assert_eq!(members.len(), 2, "{members:?}");
        assert_eq!(members[0], pid);
        assert_eq!(child_parent, Some(pid));
        // This test process is not in that session.
        assert!(!members.contains(&std::process::id()));
        assert!(rss_bytes(std::process::id()).unwrap() > 1 << 20);
        assert_eq!(rss_bytes(u32::MAX), None);
    }

    #[test]
    fn proc_addresses_decode() {
        assert_eq!(decode_address("0100007F"), "127.0.0.1");
        assert_eq!(decode_address("00000000"), "0.0.0.0");
        assert_eq!(decode_address("00000000000000000000000000000000"), "::");
    }
}
