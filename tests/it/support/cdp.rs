//! A real headless Chromium driven over its DevTools protocol, through the pipe it offers
//! (`--remote-debugging-pipe`: commands in on fd 3, answers out on fd 4, each message a
//! JSON text ended by a NUL): no WebSocket client needed. What a test does with it is what
//! a user does — open a page, click a link — and what it reads is the browser's own view
//! (a document's origin, its address).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub struct Browser {
    child: Child,
    to: std::fs::File,
    from: Receiver<Value>,
    next: u64,
    profile: std::path::PathBuf,
}

/// A pipe: (read end, write end), both close-on-exec.
fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`, which are then owned here.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(rc, 0, "pipe2: {}", std::io::Error::last_os_error());
    // SAFETY: both were just opened, and nothing else owns them.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

impl Browser {
    /// Chromium, headless, with a profile of its own under `dir`.
    pub fn start(dir: &std::path::Path) -> Browser {
        use std::os::fd::AsRawFd;
        let profile = dir.join("chromium-profile");
        let (cmd_read, cmd_write) = pipe();
        let (evt_read, evt_write) = pipe();
        let (theirs_in, theirs_out) = (cmd_read.as_raw_fd(), evt_write.as_raw_fd());
        let mut cmd = Command::new("chromium");
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-popup-blocking",
            "--remote-debugging-pipe",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("about:blank")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        // SAFETY: only async-signal-safe calls (fcntl, dup2) between fork and exec. Moved
        // above 10 first, so that neither lands on the other's place; dup2 clears
        // close-on-exec on 3 and 4.
        unsafe {
            cmd.pre_exec(move || {
                let a = libc::fcntl(theirs_in, libc::F_DUPFD, 10);
                let b = libc::fcntl(theirs_out, libc::F_DUPFD, 10);
                if a < 0 || b < 0 || libc::dup2(a, 3) < 0 || libc::dup2(b, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .expect("chromium runs (Debian package `chromium`)");
        drop((cmd_read, evt_write));
        let (tx, from) = channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(std::fs::File::from(evt_read));
            loop {
                let mut msg = Vec::new();
                match r.read_until(0, &mut msg) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        if msg.last() == Some(&0) {
                            msg.pop();
                        }
                        if let Ok(v) = serde_json::from_slice(&msg) {
                            if tx.send(v).is_err() {
                                return;
                            }
                        }
                    }
                }
            }
        });
        Browser {
            child,
            to: std::fs::File::from(cmd_write),
            from,
            next: 0,
            profile,
        }
    }

    /// Sends `method` (to `session`'s target, or the browser's) and waits for its answer's
    /// `result`; events on the way are dropped.
    pub fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.try_call(session, method, params)
            .unwrap_or_else(|e| panic!("{method}: {e}"))
    }

    /// The same, its error (the protocol's) returned.
    fn try_call(
        &mut self,
        session: Option<&str>,
        method: &str,
        params: Value,
    ) -> Result<Value, Value> {
        self.next += 1;
        let id = self.next;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        let mut bytes = serde_json::to_vec(&msg).unwrap();
        bytes.push(0);
        self.to.write_all(&bytes).expect("chromium reads its pipe");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.from.recv_timeout(left) {
                Ok(v) if v["id"] == id => match v["error"].is_null() {
                    true => return Ok(v["result"].clone()),
                    false => return Err(v["error"].clone()),
                },
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => panic!("chromium did not answer {method}"),
                Err(RecvTimeoutError::Disconnected) => panic!("chromium ended during {method}"),
            }
        }
    }

    /// A new tab at `url`, attached: its session id and target id.
    pub fn open(&mut self, url: &str) -> (String, String) {
        let target = self.call(None, "Target.createTarget", json!({"url": url}))["targetId"]
            .as_str()
            .unwrap()
            .to_string();
        (self.attach(&target), target)
    }

    /// Attaches to a target: its session id.
    pub fn attach(&mut self, target: &str) -> String {
        let r = self.call(
            None,
            "Target.attachToTarget",
            json!({"targetId": target, "flatten": true}),
        );
        r["sessionId"].as_str().unwrap().to_string()
    }

    /// `expression`'s value in `session`'s page, evaluated as a user's gesture (a click it
    /// makes may open a window, as a person's would).
    pub fn eval(&mut self, session: &str, expression: &str) -> Value {
        let r = self.call(
            Some(session),
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "userGesture": true}),
        );
        assert!(
            r["exceptionDetails"].is_null(),
            "{expression}: {}",
            r["exceptionDetails"]
        );
        r["result"]["value"].clone()
    }

    /// Waits until `expression` is true in `session`'s page. While the page loads it may
    /// throw (no body yet) or lose its context (a navigation): not yet, then.
    pub fn wait_for(&mut self, session: &str, expression: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let r = self.try_call(
                Some(session),
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true}),
            );
            if r.is_ok_and(|r| r["result"]["value"] == json!(true)) {
                return;
            }
            assert!(Instant::now() < deadline, "never true: {expression}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The page targets open now: (target id, address).
    pub fn pages(&mut self) -> Vec<(String, String)> {
        let r = self.call(None, "Target.getTargets", json!({}));
        r["targetInfos"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["type"] == "page")
            .map(|t| {
                (
                    t["targetId"].as_str().unwrap().to_string(),
                    t["url"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }
}

impl Drop for Browser {
    /// Closed as asked (its helpers end with it), else killed after a few seconds.
    fn drop(&mut self) {
        let _ = self
            .to
            .write_all(b"{\"id\":0,\"method\":\"Browser.close\",\"params\":{}}\0");
        let deadline = Instant::now() + Duration::from_secs(5);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}
