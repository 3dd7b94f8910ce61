//! The state dir on a 4 MB tmpfs of its own (its files copied over), filled on demand: a
//! full state disk, for real. CI runs as root and mounts it. The front door must be
//! restarted onto it. On drop, what runs from it (the front door, process deployments) is
//! stopped and it is unmounted.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::{kill_frontdoor, text, Deck};

pub struct StateDisk {
    pub state: PathBuf,
    /// `runs/` kept on the machine's disk (bind-mounted back): records still fit.
    runs: Option<PathBuf>,
}

fn sh(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {} (CI runs as root and must mount a tmpfs)",
        text(&out.stderr)
    );
}

impl StateDisk {
    /// Mounts it; with `runs_elsewhere`, `runs/` stays on the machine's disk.
    pub fn mount(deck: &Deck, runs_elsewhere: bool) -> StateDisk {
        let state = deck.dir.join("state");
        let copy = deck.dir.join("state-copy");
        sh(&["cp", "-a", state.to_str().unwrap(), copy.to_str().unwrap()]);
        sh(&[
            "mount",
            "-t",
            "tmpfs",
            "-o",
            "size=4m",
            "tmpfs",
            state.to_str().unwrap(),
        ]);
        sh(&[
            "cp",
            "-a",
            &format!("{}/.", copy.display()),
            state.to_str().unwrap(),
        ]);
        let runs = runs_elsewhere.then(|| {
            let runs = deck.dir.join("runs-disk");
            std::fs::create_dir_all(&runs).unwrap();
            std::fs::create_dir_all(state.join("runs")).unwrap();
            sh(&[
                "mount",
                "--bind",
                runs.to_str().unwrap(),
                state.join("runs").to_str().unwrap(),
            ]);
            runs
        });
        StateDisk { state, runs }
    }

    /// No byte left.
    pub fn fill(&self) {
        let _ = Command::new("dd")
            .args([
                "if=/dev/zero",
                &format!("of={}/filler", self.state.display()),
                "bs=16k",
            ])
            .stderr(Stdio::null())
            .status();
    }

    /// Room again.
    pub fn free(&self) {
        std::fs::remove_file(self.state.join("filler")).unwrap();
    }
}

/// SIGKILL to the process group of every process deployment recorded under `state`.
fn kill_recorded(state: &Path) {
    let Ok(entries) = std::fs::read_dir(state.join("deployments")) else {
        return;
    };
    for e in entries.flatten() {
        let pid = std::fs::read(e.path())
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| {
                v.pointer("/process/pid")
                    .and_then(serde_json::Value::as_i64)
            });
        if let Some(pid) = pid {
            // SAFETY: a signal to a process group this test's deck started.
            unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
        }
    }
}

impl Drop for StateDisk {
    fn drop(&mut self) {
        // Their records are on this tmpfs: once it is unmounted, the deck's own clean-up
        // cannot find them.
        kill_frontdoor(&self.state);
        kill_recorded(&self.state);
        if self.runs.is_some() {
            let _ = Command::new("umount").arg(self.state.join("runs")).status();
        }
        let _ = Command::new("umount")
            .args(["-l", self.state.to_str().unwrap()])
            .status();
        if let Some(runs) = &self.runs {
            let _ = std::fs::remove_dir_all(runs);
        }
    }
}
