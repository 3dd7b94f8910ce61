//! Production's captured requests on disk, as the front door writes them and a replay
//! reads them: one JSON line per request in two rotated files. Its own module so the
//! writer (the front door) and the reader (the benchmark) share the format without
//! depending on each other.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};

/// One captured request: when it arrived (Unix ms), its path, its body (redacted).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct CapturedRequest {
    pub(crate) unix_ms: u64,
    pub(crate) path: String,
    pub(crate) body: Value,
}

pub(crate) fn dir(state: &crate::state::StateDir) -> PathBuf {
    state.root().join("frontdoor").join("capture")
}

/// The capture files, oldest first (the rotated one, then the current one).
pub(crate) fn files(dir: &Path) -> [PathBuf; 2] {
    [dir.join("requests.1.jsonl"), dir.join("requests.jsonl")]
}

/// The captured requests in `dir` (or one capture file), oldest first; lines that do not
/// parse are skipped and counted.
pub(crate) fn read(path: &Path) -> Result<(Vec<CapturedRequest>, usize)> {
    let sources: Vec<PathBuf> = match path.is_dir() {
        true => files(path).into_iter().filter(|p| p.exists()).collect(),
        false => vec![path.to_path_buf()],
    };
    let (mut out, mut bad) = (Vec::new(), 0);
    for f in sources {
        let text = std::fs::read_to_string(&f)
            .map_err(|e| Error::io(format!("cannot read {}", f.display()), e))?;
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            match serde_json::from_str::<CapturedRequest>(line) {
                Ok(c) => out.push(c),
                Err(_) => bad += 1,
            }
        }
    }
    out.sort_by_key(|c| c.unix_ms);
    Ok((out, bad))
}
