//! The state dir: what sparkctl remembers between commands (process deployments, their
//! logs). Every file in it is written whole or not at all (temp file + rename).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{Error, Result};

/// `--state-dir` / `SPARKCTL_STATE_DIR`, else `$XDG_STATE_HOME/sparkctl`, else
/// `~/.local/state/sparkctl`.
pub fn default_root() -> PathBuf {
    if let Some(xdg) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(xdg).join("sparkctl");
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/tmp".into());
    PathBuf::from(home).join(".local/state/sparkctl")
}

#[derive(Debug, Clone)]
pub struct StateDir {
    root: PathBuf,
}

impl StateDir {
    /// Opens (creating if needed) the state dir at `root`.
    pub fn open(root: &Path) -> Result<StateDir> {
        for sub in ["deployments", "logs"] {
            let dir = root.join(sub);
            fs::create_dir_all(&dir).map_err(|e| {
                Error::io(
                    format!(
                        "cannot create the state dir {} (set --state-dir or SPARKCTL_STATE_DIR to a writable place)",
                        dir.display()
                    ),
                    e,
                )
            })?;
        }
        // Labels carry this path, so an absolute one: two state dirs never see each other's containers.
        let root = fs::canonicalize(root)
            .map_err(|e| Error::io(format!("cannot resolve {}", root.display()), e))?;
        Ok(StateDir { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// What marks this state dir's containers (`io.sparkctl.state` label).
    pub fn id(&self) -> String {
        self.root.display().to_string()
    }

    pub fn deployment_record(&self, name: &str) -> PathBuf {
        self.root.join("deployments").join(format!("{name}.json"))
    }

    pub fn deployment_records(&self) -> Result<Vec<PathBuf>> {
        let dir = self.root.join("deployments");
        let entries = fs::read_dir(&dir)
            .map_err(|e| Error::io(format!("cannot read {}", dir.display()), e))?;
        let mut paths: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        paths.sort();
        Ok(paths)
    }

    /// Where a process deployment's output goes: `logs/NAME/RUN.log`.
    pub fn log_file(&self, name: &str, run_id: &str) -> Result<PathBuf> {
        let dir = self.root.join("logs").join(name);
        fs::create_dir_all(&dir)
            .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
        Ok(dir.join(format!("{run_id}.log")))
    }

    /// The newest log file of a recipe's process runs (run ids sort by time).
    pub fn latest_log(&self, name: &str) -> Option<PathBuf> {
        let dir = self.root.join("logs").join(name);
        let mut logs: Vec<PathBuf> = fs::read_dir(dir)
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "log"))
            .collect();
        logs.sort();
        logs.pop()
    }

    /// Checks that files can be created here (for `doctor`).
    pub fn check_writable(&self) -> Result<()> {
        let probe = self.root.join(format!(".probe-{}", std::process::id()));
        write_atomic(&probe, b"ok")?;
        fs::remove_file(&probe)
            .map_err(|e| Error::io(format!("cannot remove {}", probe.display()), e))
    }
}

/// One writer at a time: an exclusive `flock` on `STATE/lock`, released when the holder
/// exits however it exits. The file names the holder's pid for the next caller's message.
pub struct StateLock {
    _file: std::fs::File,
}

impl StateDir {
    pub fn lock(&self, what: &str) -> Result<StateLock> {
        use std::io::{Read, Seek};
        use std::os::unix::io::AsRawFd;
        let path = self.root.join("lock");
        let mut file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io(format!("cannot open {}", path.display()), e))?;
        // SAFETY: flock on a descriptor this function owns.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            return Err(Error::Failed(format!(
                "another sparkctl is changing state ({}); wait for it to finish, then retry",
                if holder.trim().is_empty() {
                    "holder unknown".to_string()
                } else {
                    holder.trim().to_string()
                }
            )));
        }
        let _ = file.set_len(0);
        let _ = file.rewind();
        let _ = writeln!(file, "pid {} running `sparkctl {what}`", std::process::id());
        Ok(StateLock { _file: file })
    }

    pub fn production_file(&self) -> PathBuf {
        self.root.join("production.json")
    }

    pub fn runs_dir(&self) -> Result<PathBuf> {
        let dir = self.root.join("runs");
        fs::create_dir_all(&dir)
            .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
        Ok(dir)
    }
}

/// Writes `bytes` to `path` through a temp file in the same directory and a rename, so a
/// reader (or a crash) sees the old file or the new one, never half of one.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut file = fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&tmp, path)?;
        // The rename itself is durable only once the directory is synced.
        fs::File::open(dir)?.sync_all()
    })();
    result.map_err(|e| {
        let _ = fs::remove_file(&tmp);
        Error::io(format!("cannot write {}", path.display()), e)
    })
}

pub fn write_json(path: &Path, value: &impl Serialize) -> Result<()> {
    let mut text = serde_json::to_vec_pretty(value).expect("state types serialize");
    text.push(b'\n');
    write_atomic(path, &text)
}

/// Reads a JSON state file; a damaged one is reported with its path, never silently reset.
pub fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T> {
    let text =
        fs::read(path).map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
    serde_json::from_slice(&text).map_err(|e| {
        Error::Failed(format!(
            "state file {} is damaged ({e}); move it aside and run `sparkctl status`",
            path.display()
        ))
    })
}

/// A run id that sorts by time to the millisecond: `20261123-015007123-3f2a`.
pub fn new_run_id() -> String {
    let now = crate::units::unix_now();
    let stamp = crate::units::utc_stamp(now.as_secs())
        .replace(['-', ':'], "")
        .replace('T', "-")
        .trim_end_matches('Z')
        .to_string();
    // Sub-second nanos and pid tell apart two runs started in the same second.
    let salt = (now.subsec_nanos() ^ std::process::id().rotate_left(16)) & 0xffff;
    format!("{stamp}{:03}-{salt:04x}", now.subsec_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_writes_replace_whole_files_and_leave_no_temp() {
        let dir = std::env::temp_dir().join(format!("sparkctl-state-test-{}", std::process::id()));
        let state = StateDir::open(&dir).unwrap();
        let path = state.deployment_record("x");
        write_json(&path, &serde_json::json!({"a": 1})).unwrap();
        write_json(&path, &serde_json::json!({"a": 2})).unwrap();
        let v: serde_json::Value = read_json(&path).unwrap();
        assert_eq!(v["a"], 2);
        let names: Vec<_> = fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("x.json")]);
        fs::write(&path, "{broken").unwrap();
        let err = read_json::<serde_json::Value>(&path)
            .unwrap_err()
            .to_string();
        assert!(err.contains("x.json") && err.contains("damaged"), "{err}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn run_ids_sort_by_time() {
        let id = new_run_id();
        assert_eq!(id.len(), "20261123-015007123-3f2a".len(), "{id}");
        assert!(id.starts_with("20"), "{id}");
    }
}
