//! A model's fingerprint: sha256 over its files (each file's own sha256, size and path),
//! so run records say exactly which weights served. A cache keyed by size, mtime and inode
//! makes re-verifying an unchanged 19 GB directory a matter of a few `stat` calls.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::state;
use crate::units::hex;

/// Files a fingerprint leaves out: sparkctl's own bookkeeping in the model dir.
pub(crate) fn is_bookkeeping(rel: &str) -> bool {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    name == super::MANIFEST
        || name.ends_with(super::BACKUP_SUFFIX)
        || name.starts_with(".sparkctl-tmp")
        // A job's "not a result yet" marker (job::finalize) says nothing about the weights.
        || name == ".sparkctl-incomplete.json"
}

#[derive(Debug, Clone, Serialize)]
pub struct Fingerprint {
    /// `sha256:` + hex over the sorted `hash  size  path` lines.
    pub digest: String,
    pub files: usize,
    pub bytes: u64,
    /// Bytes read and hashed this time (0 when every file came from the cache).
    pub hashed_bytes: u64,
    #[serde(serialize_with = "millis")]
    pub took: Duration,
}

fn millis<S: serde::Serializer>(d: &Duration, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1e3)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Stamp {
    size: u64,
    mtime_ns: i128,
    inode: u64,
    sha256: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Cache {
    dir: PathBuf,
    files: BTreeMap<String, Stamp>,
}

/// Every regular file under `root` (or `root` itself when it is a file), as sorted
/// relative paths with their metadata. Symlinks are followed only inside the tree.
fn walk(root: &Path) -> Result<Vec<(String, PathBuf, std::fs::Metadata)>> {
    let meta = std::fs::metadata(root)
        .map_err(|e| Error::io(format!("cannot read the model at {}", root.display()), e))?;
    if meta.is_file() {
        let name = root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        return Ok(vec![(name, root.to_path_buf(), meta)]);
    }
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = std::fs::read_dir(&dir)
            .map_err(|e| Error::io(format!("cannot list {}", dir.display()), e))?;
        for entry in entries {
            let entry =
                entry.map_err(|e| Error::io(format!("cannot list {}", dir.display()), e))?;
            let path = entry.path();
            let meta = std::fs::metadata(&path)
                .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
            let rel = path
                .strip_prefix(root)
                .expect("walked paths are under the root")
                .to_string_lossy()
                .into_owned();
            if meta.is_dir() {
                stack.push(path);
            } else if meta.is_file() && !is_bookkeeping(&rel) {
                out.push((rel, path, meta));
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// sha256 of one file, read in large blocks.
pub(crate) fn sha256_file(path: &Path) -> Result<String> {
    let mut file = std::fs::File::open(path)
        .map_err(|e| Error::io(format!("cannot open {}", path.display()), e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 4 << 20];
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

fn stamp_of(meta: &std::fs::Metadata) -> (u64, i128, u64) {
    let mtime_ns = i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec());
    (meta.len(), mtime_ns, meta.ino())
}

/// Where the cache for `model` lives in the state dir.
fn cache_path(cache_dir: &Path, model: &Path) -> PathBuf {
    let key = hex(&Sha256::digest(model.to_string_lossy().as_bytes()));
    cache_dir.join(format!("{}.json", &key[..16]))
}

/// Fingerprints `model` (a directory or one file), reusing hashes of files whose size,
/// mtime and inode are unchanged since the last time. `threads` files hash at once.
pub fn fingerprint(model: &Path, cache_dir: &Path, threads: usize) -> Result<Fingerprint> {
    let began = Instant::now();
    let model = std::fs::canonicalize(model)
        .map_err(|e| Error::io(format!("cannot read the model at {}", model.display()), e))?;
    std::fs::create_dir_all(cache_dir)
        .map_err(|e| Error::io(format!("cannot create {}", cache_dir.display()), e))?;
    let cache_file = cache_path(cache_dir, &model);
    // A damaged cache only costs a re-hash: it holds nothing that cannot be recomputed.
    let cache: Cache = state::read_json(&cache_file).unwrap_or_default();
    let files = walk(&model)?;

    let mut stamps: Vec<Option<Stamp>> = files
        .iter()
        .map(|(rel, _, meta)| {
            let (size, mtime_ns, inode) = stamp_of(meta);
            cache
                .files
                .get(rel)
                .filter(|s| s.size == size && s.mtime_ns == mtime_ns && s.inode == inode)
                .cloned()
        })
        .collect();
    let todo: Vec<usize> = (0..files.len()).filter(|&i| stamps[i].is_none()).collect();
    let hashed_bytes: u64 = todo.iter().map(|&i| files[i].2.len()).sum();
    let results = hash_parallel(&files, &todo, threads.max(1))?;
    for (i, sha) in results {
        let (size, mtime_ns, inode) = stamp_of(&files[i].2);
        stamps[i] = Some(Stamp {
            size,
            mtime_ns,
            inode,
            sha256: sha,
        });
    }

    let mut total = Sha256::new();
    let mut fresh = Cache {
        dir: model.clone(),
        files: BTreeMap::new(),
    };
    let mut bytes = 0;
    for ((rel, _, _), stamp) in files.iter().zip(stamps) {
        let stamp = stamp.expect("every file hashed or cached");
        total.update(format!("{}  {}  {rel}\n", stamp.sha256, stamp.size).as_bytes());
        bytes += stamp.size;
        fresh.files.insert(rel.clone(), stamp);
    }
    if hashed_bytes > 0 || fresh.files.len() != cache.files.len() {
        state::write_json(&cache_file, &fresh)?;
    }
    Ok(Fingerprint {
        digest: format!("sha256:{}", hex(&total.finalize())),
        files: files.len(),
        bytes,
        hashed_bytes,
        took: began.elapsed(),
    })
}

/// Hashes the listed files on `threads` threads, biggest first so one large file does not
/// start last.
fn hash_parallel(
    files: &[(String, PathBuf, std::fs::Metadata)],
    todo: &[usize],
    threads: usize,
) -> Result<Vec<(usize, String)>> {
    let mut queue: Vec<usize> = todo.to_vec();
    queue.sort_by_key(|&i| std::cmp::Reverse(files[i].2.len()));
    let queue = std::sync::Mutex::new(queue.into_iter());
    let results = std::sync::Mutex::new(Vec::new());
    let failure = std::sync::Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..threads.min(todo.len().max(1)) {
            s.spawn(|| loop {
                let next = queue.lock().expect("queue lock").next();
                let Some(i) = next else { break };
                match sha256_file(&files[i].1) {
                    Ok(sha) => results.lock().expect("results lock").push((i, sha)),
                    Err(e) => {
                        *failure.lock().expect("failure lock") = Some(e);
                        break;
                    }
                }
            });
        }
    });
    if let Some(e) = failure.into_inner().expect("failure lock") {
        return Err(e);
    }
    Ok(results.into_inner().expect("results lock"))
}

/// Each file's sha256 by its path relative to the model (a one-file model: its name), from
/// a fingerprint taken now (cheap when the cache holds them): what another node's copy is
/// compared with, file by file.
pub(crate) fn file_hashes(
    model: &Path,
    cache_dir: &Path,
    threads: usize,
) -> Result<BTreeMap<String, String>> {
    fingerprint(model, cache_dir, threads)?;
    let model = std::fs::canonicalize(model)
        .map_err(|e| Error::io(format!("cannot read the model at {}", model.display()), e))?;
    let cache: Cache = state::read_json(&cache_path(cache_dir, &model))?;
    Ok(cache
        .files
        .into_iter()
        .map(|(rel, stamp)| (rel, stamp.sha256))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_is_used_until_a_file_changes() {
        let dir = std::env::temp_dir().join(format!("sparkctl-fp-{}", std::process::id()));
        let model = dir.join("model");
        std::fs::create_dir_all(model.join("sub")).unwrap();
        std::fs::write(model.join("a.json"), b"{}").unwrap();
        std::fs::write(model.join("sub/b.bin"), vec![7u8; 100_000]).unwrap();
        std::fs::write(model.join(super::super::MANIFEST), b"ignored").unwrap();
        let cache = dir.join("cache");
        let cold = fingerprint(&model, &cache, 2).unwrap();
        assert_eq!(cold.files, 2);
        assert_eq!(cold.hashed_bytes, 100_002);
        let warm = fingerprint(&model, &cache, 2).unwrap();
        assert_eq!(warm.digest, cold.digest);
        assert_eq!(warm.hashed_bytes, 0);
        std::fs::write(model.join("a.json"), b"{\"x\":1}").unwrap();
        let changed = fingerprint(&model, &cache, 2).unwrap();
        assert_ne!(changed.digest, cold.digest);
        assert_eq!(changed.hashed_bytes, 7);
        // The same bytes give the same digest whatever the cache holds.
        std::fs::remove_dir_all(&cache).unwrap();
        assert_eq!(
            fingerprint(&model, &cache, 1).unwrap().digest,
            changed.digest
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
