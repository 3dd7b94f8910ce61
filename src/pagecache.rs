//! A model's files in the kernel's page cache. A start reads its weights (llama-server maps
//! them, vLLM reads them): from the disk a 9 GB GGUF took 7.4 s to start, from the page cache
//! 1.9 s. So the next model's files are read in while the model before it drains and stops,
//! where the memory allows; and on memory the GPU shares with the host (a Spark's, or a
//! host without a GPU), the pages of a model stopped for room are dropped, since cached
//! pages there stand between the next model and its allocations. Only that model's files,
//! never the whole cache (`drop_caches`): other files keep theirs.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::recipe::Recipe;

/// How deep a model directory is walked for its files.
const DEPTH: usize = 4;
/// One read while pre-reading: large enough that the disk streams.
const CHUNK: usize = 8 << 20;

/// A model's files and their size.
#[derive(Debug, Clone, Default)]
pub(crate) struct ModelFiles {
    files: Vec<PathBuf>,
    bytes: u64,
}

impl ModelFiles {
    /// The files of `recipe`'s model: its path when it is a file, else the regular files
    /// under it. None: it names no model on this host.
    pub(crate) fn of(recipe: &Recipe) -> ModelFiles {
        let Some(m) = &recipe.model else {
            return ModelFiles::default();
        };
        ModelFiles::at(Path::new(&crate::recipe::expand_home(&m.path)))
    }

    /// The regular files at or under `path`.
    pub(crate) fn at(path: &Path) -> ModelFiles {
        let mut out = ModelFiles::default();
        out.walk(path, 0);
        out
    }

    fn walk(&mut self, path: &Path, depth: usize) {
        let Ok(meta) = std::fs::metadata(path) else {
            return;
        };
        if meta.is_file() {
            // By its real path: two recipes may reach one file through links.
            self.bytes += meta.len();
            self.files
                .push(std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()));
        } else if meta.is_dir() && depth < DEPTH {
            for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
                self.walk(&entry.path(), depth + 1);
            }
        }
    }

    /// These files but those `other` has too.
    pub(crate) fn without(self, other: &ModelFiles) -> ModelFiles {
        let mut out = ModelFiles::default();
        for f in self.files.into_iter().filter(|f| !other.files.contains(f)) {
            out.bytes += std::fs::metadata(&f).map_or(0, |m| m.len());
            out.files.push(f);
        }
        out
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// How many of its bytes are in the page cache now (`mincore`, as `fincore` counts).
    pub(crate) fn cached(&self) -> u64 {
        self.files.iter().map(|f| cached(f).unwrap_or(0)).sum()
    }

    /// Reads every file through once, so its pages are cached; blocking. What it read, and
    /// how long it took.
    pub(crate) fn read_in(&self) -> (u64, Duration) {
        let began = Instant::now();
        let mut buf = vec![0u8; CHUNK];
        let mut read = 0u64;
        for f in &self.files {
            let Ok(mut file) = std::fs::File::open(f) else {
                continue;
            };
            // Sequential: the kernel reads ahead in large pieces.
            fadvise(&file, libc::POSIX_FADV_SEQUENTIAL);
            loop {
                match std::io::Read::read(&mut file, &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => read += n as u64,
                }
            }
        }
        (read, began.elapsed())
    }

    /// Drops its clean pages from the page cache (`POSIX_FADV_DONTNEED`), its files only.
    pub(crate) fn drop_pages(&self) {
        for f in &self.files {
            if let Ok(file) = std::fs::File::open(f) {
                fadvise(&file, libc::POSIX_FADV_DONTNEED);
            }
        }
    }
}

fn fadvise(file: &std::fs::File, advice: libc::c_int) {
    // SAFETY: a valid open descriptor, the whole file (len 0), an advice the kernel knows.
    unsafe {
        libc::posix_fadvise(file.as_raw_fd(), 0, 0, advice);
    }
}

/// Bytes of `path` resident in the page cache: its pages as `mincore` sees them.
fn cached(path: &Path) -> Option<u64> {
    let file = std::fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len() as usize;
    if len == 0 {
        return Some(0);
    }
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    // SAFETY: a shared read-only mapping of an open file of `len` bytes, unmapped below;
    // nothing reads through it (mincore only asks which of its pages are resident).
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if map == libc::MAP_FAILED {
        return None;
    }
    let mut vec = vec![0u8; len.div_ceil(page)];
    // SAFETY: `map` spans `len` bytes; `vec` has a byte per page of it.
    let ok = unsafe { libc::mincore(map, len, vec.as_mut_ptr()) } == 0;
    // SAFETY: the mapping made above, of `len` bytes.
    unsafe { libc::munmap(map, len) };
    ok.then(|| vec.iter().filter(|b| *b & 1 == 1).count() as u64 * page as u64)
}

/// `files` read in on the blocking pool, when less than nine tenths of them is cached and
/// the host has room for the rest above `reserve_gb`; None otherwise. What it read and how
/// long it took, once it has.
pub(crate) fn read_in_beside(
    files: &ModelFiles,
    reserve_gb: f64,
) -> Option<tokio::task::JoinHandle<(u64, Duration)>> {
    let missing = files.bytes().saturating_sub(files.cached());
    if missing == 0 || missing * 10 < files.bytes() || !room_for(missing, reserve_gb) {
        return None;
    }
    let files = files.clone();
    Some(tokio::task::spawn_blocking(move || files.read_in()))
}

/// Whether memory here is the GPU's too (a Spark's unified memory, or a host with no GPU,
/// where weights live in host RAM): a stopped model's cached pages then stand in the way of
/// the next one's allocations.
pub(crate) async fn shared_with_the_gpu() -> bool {
    use crate::nvidia::device::{Devices, Kind};
    Devices::probe().await.kind() != Kind::Discrete
}

/// Whether `bytes` more in the page cache leave the host at least `reserve_gb` available
/// (MemAvailable counts reclaimable cache as available, so this asks of what is free of
/// it). Unknown memory: no.
pub(crate) fn room_for(bytes: u64, reserve_gb: f64) -> bool {
    crate::host::meminfo().is_some_and(|m| m.available as f64 - bytes as f64 >= reserve_gb * 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_s_pages_are_read_in_and_dropped_and_only_its_own() {
        let dir = std::env::temp_dir().join(format!("sparkctl-pagecache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("model/sub")).unwrap();
        let bytes: Vec<u8> = (0..(4 << 20)).map(|i| (i % 251) as u8).collect();
        std::fs::write(dir.join("model/a.safetensors"), &bytes).unwrap();
        std::fs::write(dir.join("model/sub/b.json"), b"{}").unwrap();
        std::fs::write(dir.join("other.bin"), &bytes).unwrap();
        // Written back first: the kernel drops clean pages only.
        for f in ["model/a.safetensors", "model/sub/b.json", "other.bin"] {
            std::fs::File::open(dir.join(f))
                .unwrap()
                .sync_all()
                .unwrap();
        }
        let model = ModelFiles::at(&dir.join("model"));
        let other = ModelFiles::at(&dir.join("other.bin"));
        assert_eq!(model.bytes(), (4 << 20) + 2);
        assert_eq!(model.files.len(), 2);
        // Written just now, so cached; the read makes sure.
        let (read, _) = model.read_in();
        other.read_in();
        assert_eq!(read, model.bytes());
        assert!(model.cached() >= 4 << 20, "{}", model.cached());
        model.drop_pages();
        assert!(model.cached() < 1 << 20, "{} left", model.cached());
        assert!(other.cached() >= 4 << 20, "another file's pages went too");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
