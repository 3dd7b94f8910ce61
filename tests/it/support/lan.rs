//! This machine as another machine on its LAN sees it: a network namespace of its own (the
//! "Spark", where a server on 0.0.0.0 faces the LAN) joined to the test's by a veth pair
//! (the test's side is the LAN). A server bound to every interface inside it is reachable
//! from the test at `addr`, and from nowhere else: nothing a test opens there reaches the
//! machine's real network.
#![allow(dead_code)]

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

pub struct Lan {
    pub ns: String,
    host_if: String,
    /// The namespace's address, as the LAN reaches it.
    pub addr: String,
}

fn must(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("ip runs (iproute2)");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Lan {
    pub fn new() -> Lan {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let ns = format!("spk-lan-{pid}-{n}");
        // Interface names are 15 bytes at most.
        let host_if = format!("spl{}{n}", pid % 100_000);
        let inner_if = format!("spi{}{n}", pid % 100_000);
        let net = (pid + n * 7) % 200 + 20;
        let (host_addr, addr) = (format!("10.78.{net}.1"), format!("10.78.{net}.2"));
        let _ = Command::new("ip")
            .args(["netns", "del", &ns])
            .stderr(Stdio::null())
            .status();
        must(&["netns", "add", &ns]);
        let lan = Lan {
            ns: ns.clone(),
            host_if: host_if.clone(),
            addr: addr.clone(),
        };
        must(&[
            "link", "add", &host_if, "type", "veth", "peer", "name", &inner_if,
        ]);
        must(&["link", "set", &inner_if, "netns", &ns]);
        must(&["addr", "add", &format!("{host_addr}/24"), "dev", &host_if]);
        must(&["link", "set", &host_if, "up"]);
        let cidr = format!("{addr}/24");
        for args in [
            ["addr", "add", cidr.as_str(), "dev", inner_if.as_str()].as_slice(),
            &["link", "set", inner_if.as_str(), "up"],
            &["link", "set", "lo", "up"],
        ] {
            let mut all = vec!["netns", "exec", ns.as_str(), "ip"];
            all.extend_from_slice(args);
            must(&all);
        }
        lan
    }

    /// `cmd`, run inside the namespace (its network only: files and processes are the
    /// machine's).
    pub fn inside<'a>(&self, cmd: &'a mut Command) -> &'a mut Command {
        let path = std::ffi::CString::new(format!("/run/netns/{}", self.ns)).unwrap();
        // SAFETY: open and setns only, both async-signal-safe; the path was built before
        // the fork.
        unsafe {
            cmd.pre_exec(move || {
                let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
                if fd < 0 || libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::close(fd);
                Ok(())
            })
        }
    }

    /// `http://ADDR:PORT`: the namespace's port as the LAN reaches it.
    pub fn url(&self, port: u16) -> String {
        format!("http://{}:{port}", self.addr)
    }
}

impl Drop for Lan {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.ns])
            .stderr(Stdio::null())
            .status();
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .stderr(Stdio::null())
            .status();
    }
}
