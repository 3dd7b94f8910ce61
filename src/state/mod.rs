//! The state dir: what sparkctl remembers between commands (process deployments, their
//! logs). Every file in it is written whole or not at all (temp file + rename).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{Error, Result};

mod lock;
pub(crate) use lock::StateLock;

/// `--state-dir` / `SPARKCTL_STATE_DIR`, else `$XDG_STATE_HOME/sparkctl`, else
/// `~/.local/state/sparkctl`.
pub(crate) fn default_root() -> PathBuf {
    let env = crate::settings::environment();
    match &env.xdg_state_home {
        Some(xdg) => xdg.join("sparkctl"),
        None => env.home_or_tmp().join(".local/state/sparkctl"),
    }
}

#[derive(Debug, Clone)]
pub(crate) struct StateDir {
    root: PathBuf,
}

impl StateDir {
    /// Opens (creating if needed) the state dir at `root`: its owner's alone (700), from
    /// the moment it exists, as it holds run records with answers, logs and the front
    /// door's control socket.
    pub(crate) fn open(root: &Path) -> Result<StateDir> {
        private_dir(root)?;
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

    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// What marks this state dir's containers (`io.sparkctl.state` label).
    pub(crate) fn id(&self) -> String {
        self.root.display().to_string()
    }

    pub(crate) fn deployment_record(&self, name: &str) -> PathBuf {
        self.root.join("deployments").join(format!("{name}.json"))
    }

    pub(crate) fn deployment_records(&self) -> Result<Vec<PathBuf>> {
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
    pub(crate) fn log_file(&self, name: &str, run_id: &str) -> Result<PathBuf> {
        let dir = self.root.join("logs").join(name);
        fs::create_dir_all(&dir)
            .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
        Ok(dir.join(format!("{run_id}.log")))
    }

    /// The newest log file of a recipe's process runs (run ids sort by time).
    pub(crate) fn latest_log(&self, name: &str) -> Option<PathBuf> {
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
    pub(crate) fn check_writable(&self) -> Result<()> {
        let probe = self.root.join(format!(".probe-{}", std::process::id()));
        write_atomic(&probe, b"ok")?;
        fs::remove_file(&probe)
            .map_err(|e| Error::io(format!("cannot remove {}", probe.display()), e))
    }
}

/// Makes `root` (its parents as usual) with mode 700, or narrows it to 700 when it exists
/// wider (made by an older sparkctl, or by hand).
fn private_dir(root: &Path) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let failed = |e| {
        let what = format!(
            "cannot create the state dir {} (set --state-dir or SPARKCTL_STATE_DIR to a writable place)",
            root.display()
        );
        Error::io(what, e)
    };
    if let Some(parent) = root.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent).map_err(failed)?;
    }
    match fs::DirBuilder::new().mode(0o700).create(root) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        made => return made.map_err(failed),
    }
    let mode = fs::metadata(root).map_err(failed)?.permissions().mode();
    if mode & 0o077 == 0 {
        return Ok(());
    }
    fs::set_permissions(root, fs::Permissions::from_mode(mode & 0o7700)).map_err(|e| {
        let what = format!(
            "cannot make the state dir {} private; `chmod 700` it",
            root.display()
        );
        Error::io(what, e)
    })
}

/// What a run keeps beside its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunFile {
    /// The candidate's benchmark result.
    Bench,
    /// Production's, when the run measured it.
    ProductionBench,
    /// The candidate's output, copied before anything could stop it.
    CandidateLog,
    /// The benchmark's HTML report: the candidate beside production.
    Report,
}

impl RunFile {
    fn file_name(self) -> &'static str {
        match self {
            RunFile::Bench => "bench.json",
            RunFile::ProductionBench => "production-bench.json",
            RunFile::CandidateLog => "candidate.log",
            RunFile::Report => "report.html",
        }
    }
}

impl StateDir {
    pub(crate) fn production_file(&self) -> PathBuf {
        self.root.join("production.json")
    }

    pub(crate) fn runs_dir(&self) -> Result<PathBuf> {
        let dir = self.root.join("runs");
        fs::create_dir_all(&dir)
            .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
        Ok(dir)
    }

    /// `runs/RUN.json`: one run's record.
    pub(crate) fn run_record_file(&self, run_id: &str) -> Result<PathBuf> {
        Ok(self.runs_dir()?.join(format!("{run_id}.json")))
    }

    /// Whether `path` is a run record. Records are the only JSON files of `runs/` (what a run
    /// keeps sits in `runs/RUN/`); state dirs written before that kept benchmark results
    /// beside them as `RUN-bench.json`, which are not records.
    pub(crate) fn is_run_record(&self, path: &Path) -> bool {
        path.parent() == Some(self.root.join("runs").as_path())
            && !path.to_string_lossy().ends_with("-bench.json")
    }

    /// `runs/RUN/NAME`: what a run keeps beside its record (its benchmark results, the
    /// candidate's output), in a directory of its own, so records are the only files of
    /// `runs/`.
    pub(crate) fn run_file(&self, run_id: &str, name: RunFile) -> Result<PathBuf> {
        let dir = self.runs_dir()?.join(run_id);
        fs::create_dir_all(&dir)
            .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
        Ok(dir.join(name.file_name()))
    }

    /// `runs/RUN/nodes/NODE-ROLE.log`: a node group member's output, kept when its run ends.
    pub(crate) fn node_log_file(&self, run_id: &str, node: &str, role: &str) -> Result<PathBuf> {
        let dir = self.runs_dir()?.join(run_id).join("nodes");
        fs::create_dir_all(&dir)
            .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
        Ok(dir.join(format!("{node}-{role}.log")))
    }

    /// `jobs/`: one record per job run (`jobs/RUN.json`), what it keeps in `jobs/RUN/`.
    pub(crate) fn jobs_dir(&self) -> Result<PathBuf> {
        let dir = self.root.join("jobs");
        fs::create_dir_all(&dir)
            .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
        Ok(dir)
    }

    pub(crate) fn job_record_file(&self, run_id: &str) -> Result<PathBuf> {
        Ok(self.jobs_dir()?.join(format!("{run_id}.json")))
    }

    /// `jobs/RUN/job.log`: the job container's output, copied when it ended.
    pub(crate) fn job_log_file(&self, run_id: &str) -> Result<PathBuf> {
        let dir = self.jobs_dir()?.join(run_id);
        fs::create_dir_all(&dir)
            .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
        Ok(dir.join("job.log"))
    }

    /// `images/RECIPE/`: what happened to a recipe's image digests on this machine
    /// (pulled, kept), one file per event.
    pub(crate) fn image_events_dir(&self, recipe: &str) -> Result<PathBuf> {
        let dir = self.root.join("images").join(recipe);
        fs::create_dir_all(&dir)
            .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
        Ok(dir)
    }

    /// `bisect/`: one file per bisect (`bisect/ID.json`), its benchmark rounds in `bisect/ID/`.
    pub(crate) fn bisect_dir(&self) -> Result<PathBuf> {
        let dir = self.root.join("bisect");
        fs::create_dir_all(&dir)
            .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
        Ok(dir)
    }

    /// `bench/RUN-NAME.json`: where `sparkctl bench` keeps a result by default.
    pub(crate) fn bench_result_file(&self, name: &str) -> Result<PathBuf> {
        let dir = self.root.join("bench");
        fs::create_dir_all(&dir)
            .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
        Ok(dir.join(format!("{}-{name}.json", new_run_id())))
    }
}

/// Writes `bytes` to `path` through a temp file in the same directory and a rename, so a
/// reader (or a crash) sees the old file or the new one, never half of one.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    // A bare file name has the empty path as its parent: that is the current directory.
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // Per process and per write: two threads of one process (the front door's blocking
    // pool) may write one file at once, and must not share a temporary file.
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.tmp-{}-{n}", std::process::id()));
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

pub(crate) fn write_json(path: &Path, value: &impl Serialize) -> Result<()> {
    let mut text = serde_json::to_vec_pretty(value).expect("state types serialize");
    text.push(b'\n');
    write_atomic(path, &text)
}

/// Writes handed to the blocking pool that nothing waits for where they are made (what a
/// start measured: a start on demand's waiting requests go on without its fsyncs). A
/// command waits for them before it exits (`settled`); the front door lives on.
static LATER: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>> =
    std::sync::Mutex::new(Vec::new());

/// Runs `write` on the blocking pool, not waited for here.
pub(crate) fn later(write: impl FnOnce() + Send + 'static) {
    let handle = tokio::task::spawn_blocking(write);
    let mut pending = LATER.lock().expect("later");
    pending.retain(|h| !h.is_finished());
    pending.push(handle);
}

/// Waits for every write `later` took: a command calls it before it exits.
pub(crate) async fn settled() {
    let pending = std::mem::take(&mut *LATER.lock().expect("later"));
    for h in pending {
        let _ = h.await;
    }
}

/// `write_json` on the blocking pool: its fsync must not stall an async worker that is
/// also carrying live traffic (the front door).
pub(crate) async fn write_json_off_thread<T: Serialize + Send + 'static>(
    path: PathBuf,
    value: T,
) -> Result<()> {
    tokio::task::spawn_blocking(move || write_json(&path, &value))
        .await
        .map_err(|e| Error::TaskLost {
            what: crate::error::Task::WritingState,
            cause: e.to_string(),
        })?
}

/// Whether a failed write failed for want of space (the disk, or the user's quota).
pub(crate) fn is_disk_full(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. }
        if matches!(source.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT)))
}

/// State writes that found the disk full, kept in memory (the newest per file) and
/// written when there is room again: a long-lived process (the front door) keeps serving
/// on a full disk instead of failing every change it must record.
#[derive(Clone, Default)]
pub(crate) struct Deferred {
    pending: std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<PathBuf, Vec<u8>>>>,
}

impl Deferred {
    fn files(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<PathBuf, Vec<u8>>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `write_json`; on a full disk the file is kept for later and Ok(false) says so.
    pub(crate) fn write_json(&self, path: &Path, value: &impl Serialize) -> Result<bool> {
        let mut text = serde_json::to_vec_pretty(value).expect("state types serialize");
        text.push(b'\n');
        match write_atomic(path, &text) {
            Ok(()) => {
                // What was pending for it is older than what was just written.
                self.files().remove(path);
                Ok(true)
            }
            Err(e) if is_disk_full(&e) => {
                tracing::warn!("{e}; kept in memory until there is room");
                self.files().insert(path.to_path_buf(), text);
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// A file as it will be once written: the pending copy when there is one.
    pub(crate) fn read_json<T: DeserializeOwned>(&self, path: &Path) -> Result<T> {
        if let Some(text) = self.files().get(path) {
            if let Ok(v) = serde_json::from_slice(text) {
                return Ok(v);
            }
        }
        read_json(path)
    }

    /// How many files wait for room.
    pub(crate) fn pending(&self) -> usize {
        self.files().len()
    }

    /// Files pending under `dir`.
    pub(crate) fn pending_in(&self, dir: &Path) -> Vec<PathBuf> {
        self.files()
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .cloned()
            .collect()
    }

    /// Writes what is pending; returns how many files are still waiting for room.
    pub(crate) fn flush(&self) -> usize {
        let files: Vec<(PathBuf, Vec<u8>)> = self
            .files()
            .iter()
            .map(|(p, t)| (p.clone(), t.clone()))
            .collect();
        for (path, text) in files {
            if write_atomic(&path, &text).is_ok() {
                let mut pending = self.files();
                // Unless a newer copy came meanwhile.
                if pending.get(&path) == Some(&text) {
                    pending.remove(&path);
                }
            }
        }
        self.files().len()
    }
}

/// Reads a JSON state file; a damaged one is reported with its path, never silently reset.
pub(crate) fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T> {
    let text =
        fs::read(path).map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
    serde_json::from_slice(&text).map_err(|e| Error::DamagedState {
        path: path.to_path_buf(),
        cause: e.to_string(),
    })
}

/// A state file that could not be read, kept apart so the rest can still be shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Damaged {
    path: PathBuf,
    problem: String,
}

impl std::fmt::Display for Damaged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "state file {} is damaged ({}) and was left out; move it aside (it is not \
             changed or removed)",
            self.path.display(),
            self.problem
        )
    }
}

/// Reads each file as JSON: the ones that parse (with their path), and the damaged ones.
/// One broken record must not hide all the others (`history`, `status`).
pub(crate) fn read_json_files<T: DeserializeOwned>(
    paths: impl IntoIterator<Item = PathBuf>,
) -> (Vec<(PathBuf, T)>, Vec<Damaged>) {
    let mut good = Vec::new();
    let mut damaged = Vec::new();
    for path in paths {
        let parsed = fs::read(&path)
            .map_err(|e| e.to_string())
            .and_then(|bytes| serde_json::from_slice::<T>(&bytes).map_err(|e| e.to_string()));
        match parsed {
            Ok(value) => good.push((path, value)),
            Err(problem) => damaged.push(Damaged { path, problem }),
        }
    }
    (good, damaged)
}

/// The `*.json` files directly in `dir` that `keep` accepts, sorted by name; a missing
/// directory has none.
pub(crate) fn json_files(dir: &Path, keep: impl Fn(&Path) -> bool) -> Result<Vec<PathBuf>> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(format!("cannot read {}", dir.display()), e)),
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json") && keep(p))
        .collect();
    paths.sort();
    Ok(paths)
}

/// Every record in `dir` (see `json_files`) that parses, and the files that did not.
pub(crate) fn read_json_dir<T: DeserializeOwned>(
    dir: &Path,
    keep: impl Fn(&Path) -> bool,
) -> Result<(Vec<T>, Vec<Damaged>)> {
    let (good, damaged) = read_json_files(json_files(dir, keep)?);
    Ok((good.into_iter().map(|(_, v)| v).collect(), damaged))
}

/// Whether the file at `path` is damaged as a `T`; a missing file is not.
pub(crate) fn damage_of<T: DeserializeOwned>(path: &Path) -> Option<Damaged> {
    if !path.exists() {
        return None;
    }
    read_json_files::<T>([path.to_path_buf()]).1.pop()
}

/// A run id that sorts by time to the millisecond: `20261123-015007123-3f2a`.
pub(crate) fn new_run_id() -> String {
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
    fn one_damaged_record_does_not_hide_the_others() {
        let dir = std::env::temp_dir().join(format!("sparkctl-state-dmg-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("a.json"), r#"{"n": 1}"#).unwrap();
        fs::write(dir.join("b.json"), r#"{"n": "#).unwrap();
        fs::write(dir.join("c.json"), r#"{"n": 3}"#).unwrap();
        fs::write(dir.join("c-bench.json"), r#"{"other": true}"#).unwrap();
        #[derive(serde::Deserialize)]
        struct N {
            n: u32,
        }
        let (good, damaged) =
            read_json_dir::<N>(&dir, |p| !p.to_string_lossy().ends_with("-bench.json")).unwrap();
        assert_eq!(good.iter().map(|r| r.n).collect::<Vec<_>>(), [1, 3]);
        assert_eq!(damaged.len(), 1);
        assert_eq!(damaged[0].path, dir.join("b.json"));
        assert!(
            damaged[0].to_string().contains("b.json is damaged (EOF"),
            "{}",
            damaged[0]
        );
        assert!(damage_of::<N>(&dir.join("a.json")).is_none());
        assert!(damage_of::<N>(&dir.join("missing.json")).is_none());
        assert!(damage_of::<N>(&dir.join("b.json")).is_some());
        assert!(read_json_dir::<N>(&dir.join("nothing"), |_| true)
            .unwrap()
            .0
            .is_empty());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn run_ids_sort_by_time() {
        let id = new_run_id();
        assert_eq!(id.len(), "20261123-015007123-3f2a".len(), "{id}");
        assert!(id.starts_with("20"), "{id}");
    }
}
