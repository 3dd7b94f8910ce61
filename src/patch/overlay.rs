//! The model dir as the steps see it while planning: pending contents over the files on
//! disk, so each step reads what the previous ones would have written, and nothing is written.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use super::json_edit::json_bytes;
use crate::error::{Error, Result};

/// New content for one file.
#[derive(Debug, Clone)]
pub(crate) enum Content {
    Bytes(Vec<u8>),
    /// A donor file, copied as is (may be large: never read into memory).
    CopyOf(PathBuf),
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct FileChange {
    /// Path relative to the model dir.
    pub(in crate::patch) rel: String,
    /// Steps (0-based) that changed it.
    pub(in crate::patch) steps: Vec<usize>,
    pub(in crate::patch) existed: bool,
    #[serde(skip)]
    pub(in crate::patch) before: Option<Vec<u8>>,
    #[serde(skip)]
    pub(in crate::patch) after: Content,
    /// For copies: where from.
    #[serde(skip_serializing_if = "Option::is_none")]
    from: Option<PathBuf>,
}

/// Pending contents over the model dir.
pub(super) struct Overlay<'a> {
    pub(super) root: &'a Path,
    pub(super) pending: BTreeMap<String, Content>,
    steps: BTreeMap<String, Vec<usize>>,
}

impl<'a> Overlay<'a> {
    pub(super) fn new(root: &'a Path) -> Overlay<'a> {
        Overlay {
            root,
            pending: BTreeMap::new(),
            steps: BTreeMap::new(),
        }
    }

    /// The file's path on disk, refusing one that resolves outside the model dir.
    fn path(&self, rel: &str) -> std::result::Result<PathBuf, String> {
        let path = self.root.join(rel);
        // The deepest part that exists must resolve inside: catches symlinks out.
        let mut probe = path.clone();
        while !probe.exists() {
            if !probe.pop() {
                break;
            }
        }
        let real = std::fs::canonicalize(&probe).map_err(|e| format!("{rel}: {e}"))?;
        if !real.starts_with(self.root) {
            return Err(format!(
                "{rel} resolves to {}, outside the model dir (a symlink?); patch steps only write inside it",
                real.display()
            ));
        }
        Ok(path)
    }

    pub(super) fn exists(&self, rel: &str) -> std::result::Result<bool, String> {
        Ok(self.pending.contains_key(rel) || self.path(rel)?.is_file())
    }

    fn disk(&self, rel: &str) -> std::result::Result<Option<Vec<u8>>, String> {
        let path = self.path(rel)?;
        match std::fs::read(&path) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("cannot read {}: {e}", path.display())),
        }
    }

    fn bytes(&self, rel: &str) -> std::result::Result<Option<Vec<u8>>, String> {
        match self.pending.get(rel) {
            Some(Content::Bytes(b)) => Ok(Some(b.clone())),
            Some(Content::CopyOf(from)) => std::fs::read(from)
                .map(Some)
                .map_err(|e| format!("cannot read {}: {e}", from.display())),
            None => self.disk(rel),
        }
    }

    pub(super) fn json(&self, rel: &str) -> std::result::Result<Option<Value>, String> {
        let Some(bytes) = self.bytes(rel)? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            format!("{rel} in the model dir is not valid JSON ({e}); fix or replace the file")
        })
    }

    pub(super) fn put_json(
        &mut self,
        step: usize,
        rel: &str,
        value: &Value,
    ) -> std::result::Result<bool, String> {
        let original = self.disk(rel)?;
        self.put_bytes(step, rel, json_bytes(value, original.as_deref()))
    }

    /// Records new content; false when the file already holds exactly that.
    pub(super) fn put_bytes(
        &mut self,
        step: usize,
        rel: &str,
        bytes: Vec<u8>,
    ) -> std::result::Result<bool, String> {
        if self.disk(rel)?.as_deref() == Some(bytes.as_slice()) {
            self.pending.remove(rel);
            return Ok(false);
        }
        self.pending.insert(rel.to_string(), Content::Bytes(bytes));
        self.steps.entry(rel.to_string()).or_default().push(step);
        Ok(true)
    }

    pub(super) fn put_copy(
        &mut self,
        step: usize,
        rel: &str,
        from: &Path,
    ) -> std::result::Result<bool, String> {
        let dest = self.path(rel)?;
        if same_content(&dest, from)
            .map_err(|e| format!("comparing {rel} with {}: {e}", from.display()))?
        {
            self.pending.remove(rel);
            return Ok(false);
        }
        self.pending
            .insert(rel.to_string(), Content::CopyOf(from.to_path_buf()));
        self.steps.entry(rel.to_string()).or_default().push(step);
        Ok(true)
    }

    pub(super) fn changes(self) -> Result<Vec<FileChange>> {
        let mut out = Vec::new();
        for (rel, after) in self.pending {
            let path = self.root.join(&rel);
            let existed = path.is_file();
            // Only text that will be diffed is read; copies may be gigabytes.
            let before = match (&after, existed) {
                (Content::Bytes(_), true) => Some(
                    std::fs::read(&path)
                        .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?,
                ),
                _ => None,
            };
            let from = match &after {
                Content::CopyOf(f) => Some(f.clone()),
                Content::Bytes(_) => None,
            };
            out.push(FileChange {
                steps: self.steps.get(&rel).cloned().unwrap_or_default(),
                rel,
                existed,
                before,
                after,
                from,
            });
        }
        Ok(out)
    }
}

/// Whether two files hold the same bytes (sizes first; then streamed).
fn same_content(a: &Path, b: &Path) -> std::io::Result<bool> {
    use std::io::Read;
    let (ma, mb) = match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(ma), Ok(mb)) => (ma, mb),
        (Err(e), _) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        (Err(e), _) | (_, Err(e)) => return Err(e),
    };
    if ma.len() != mb.len() {
        return Ok(false);
    }
    let (mut fa, mut fb) = (std::fs::File::open(a)?, std::fs::File::open(b)?);
    let (mut ba, mut bb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    loop {
        let n = fa.read(&mut ba)?;
        if n == 0 {
            return Ok(true);
        }
        fb.read_exact(&mut bb[..n])?;
        if ba[..n] != bb[..n] {
            return Ok(false);
        }
    }
}
