//! Facts about this machine: memory, who listens on a port, which process a pid is, the GPU.
//! Linux only (read from /proc), as a DGX Spark is.

use std::fs;
use std::path::Path;

/// This machine's name, for benchmark results.
pub fn hostname() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// Bytes of RAM the kernel reports (on a Spark: the unified memory CPU and GPU share).
pub fn mem_total_bytes() -> Option<u64> {
    let text = fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Something listening on a TCP port.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Listener {
    pub address: String,
    pub port: u16,
    pub pid: Option<u32>,
    pub command: Option<String>,
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
pub fn listener_on(port: u16) -> Option<Listener> {
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

pub fn command_name(pid: u32) -> Option<String> {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim().to_string())
}

/// What identifies one process for its whole life: its pid and its start time (clock ticks
/// after boot). A pid the kernel hands out again has a different start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProcessId {
    pub pid: u32,
    pub start_ticks: u64,
}

/// A process's state letter and start time, from /proc/PID/stat.
fn stat(pid: u32) -> Option<(char, u64)> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: parse after the last ')'.
    let rest = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    // Field 22 overall is starttime; `rest` starts at field 3.
    let start = fields.get(19)?.parse().ok()?;
    Some((state, start))
}

impl ProcessId {
    pub fn of(pid: u32) -> Option<ProcessId> {
        stat(pid).map(|(_, start_ticks)| ProcessId { pid, start_ticks })
    }

    /// Running (not gone, not a zombie waiting to be reaped, not a different process).
    pub fn alive(&self) -> bool {
        matches!(stat(self.pid), Some((state, start)) if start == self.start_ticks && state != 'Z' && state != 'X')
    }
}

/// The GPU as nvidia-smi reports it, where there is one.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Gpu {
    pub name: String,
    pub memory: String,
    pub compute_capability: String,
}

/// Runs `nvidia-smi` (a fixed argv, no shell) when it is on PATH.
pub fn gpus() -> Result<Vec<Gpu>, String> {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("nvidia-smi").is_file()))
        .unwrap_or(false);
    if !found {
        return Err("nvidia-smi is not on PATH (no NVIDIA driver on this machine?)".into());
    }
    let out = std::process::Command::new("nvidia-smi")
        .args([
            "--query-gpu=name,memory.total,compute_cap",
            "--format=csv,noheader",
        ])
        .output()
        .map_err(|e| format!("nvidia-smi did not run: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "nvidia-smi failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(parse_gpus(&String::from_utf8_lossy(&out.stdout)))
}

fn parse_gpus(csv: &str) -> Vec<Gpu> {
    csv.lines()
        .filter_map(|line| {
            let mut parts = line.split(',').map(str::trim);
            Some(Gpu {
                name: parts.next()?.to_string(),
                memory: parts.next()?.to_string(),
                compute_capability: parts.next()?.to_string(),
            })
        })
        .collect()
}

/// True when `path` is a file this user may execute.
pub fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
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
        assert_eq!(listener_on(port), None);
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
    fn nvidia_smi_csv_parses() {
        let gpus = parse_gpus("NVIDIA GB10, 122880 MiB, 12.1\n");
        assert_eq!(gpus[0].name, "NVIDIA GB10");
        assert_eq!(gpus[0].compute_capability, "12.1");
    }

    #[test]
    fn proc_addresses_decode() {
        assert_eq!(decode_address("0100007F"), "127.0.0.1");
        assert_eq!(decode_address("00000000"), "0.0.0.0");
        assert_eq!(decode_address("00000000000000000000000000000000"), "::");
    }
}
