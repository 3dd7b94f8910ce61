//! `images.lock`: which image digest each recipe runs, committed like Cargo.lock. YAML,
//! sorted by recipe, written whole (temp + rename); the digests a pin replaced stay in
//! its history for rollback and for `images diff`.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Diagnostic, Error, Result};

pub(crate) const LOCK_FILE: &str = "images.lock";

const HEADER: &str = "# images.lock: the image digest each recipe runs. Written by `sparkctl images pin`;\n\
                      # commit it. `sparkctl images audit` compares it with the registry and this machine.\n";

/// Where a digest came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Source {
    /// The registry's manifest (or index) digest for the tag: `repo@digest` pulls it.
    Registry,
    /// An image built on this machine and never pushed: its image id is its digest.
    Local,
}

/// One recipe's pin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pin {
    /// The image as the recipe wrote it when pinned.
    pub reference: String,
    /// What runs: the registry digest (an index for multi-platform images), or a local image id.
    pub digest: String,
    pub(crate) source: Source,
    /// Manifest media type: tells an index (several platforms) from a single manifest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) media_type: Option<String>,
    /// The platform this machine runs (os/arch), whose image the engine takes from an index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
    /// That platform's image id (config digest) once the image is on this machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    /// When the image was built, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
    pub(crate) pinned_at: String,
    /// Digests this pin replaced, newest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Replaced>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Replaced {
    pub digest: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) image_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) created: Option<String>,
    pub(crate) pinned_at: String,
    pub(crate) replaced_at: String,
}

impl Pin {
    /// The reference that runs exactly this pin: `repo@digest`, or the local image id.
    pub(crate) fn run_reference(&self) -> String {
        match self.source {
            Source::Registry => format!("{}@{}", repository(&self.reference), self.digest),
            Source::Local => self.digest.clone(),
        }
    }

    /// The two image references `images diff NAME [OLD NEW]` compares: the digests given
    /// (in this pin's repository), or the pin's previous digest and the current one.
    pub(crate) fn diff_references(
        &self,
        name: &str,
        old: Option<String>,
        new: Option<String>,
    ) -> Result<(String, String)> {
        let repo = repository(&self.reference);
        let as_ref = |d: &str| {
            if self.source == Source::Local || !d.starts_with("sha256:") {
                d.to_string()
            } else {
                format!("{repo}@{d}")
            }
        };
        match (old, new) {
            (Some(o), Some(n)) => Ok((as_ref(&o), as_ref(&n))),
            (None, None) => {
                let prev = self.history.first().ok_or_else(|| {
                    Error::BadFlag(crate::error::FlagProblem::PinnedOnce {
                        name: name.to_string(),
                    })
                })?;
                Ok((as_ref(&prev.digest), self.run_reference()))
            }
            _ => Err(Error::BadFlag(crate::error::FlagProblem::OneDigest)),
        }
    }

    /// Moves to a new digest, keeping the old one in the history (unless it is the same).
    pub(crate) fn replace_with(&mut self, new: Pin) {
        if new.digest == self.digest {
            let history = std::mem::take(&mut self.history);
            *self = Pin { history, ..new };
            return;
        }
        let mut history = std::mem::take(&mut self.history);
        history.insert(
            0,
            Replaced {
                digest: self.digest.clone(),
                image_id: self.image_id.clone(),
                created: self.created.clone(),
                pinned_at: self.pinned_at.clone(),
                replaced_at: new.pinned_at.clone(),
            },
        );
        *self = Pin { history, ..new };
    }
}

/// `registry:5000/ns/name:tag@sha256:…` → `registry:5000/ns/name` (a port is not a tag).
pub(crate) fn repository(reference: &str) -> &str {
    let no_digest = reference.split('@').next().unwrap_or(reference);
    match no_digest.rfind(':') {
        Some(i) if !no_digest[i..].contains('/') => &no_digest[..i],
        _ => no_digest,
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lock {
    /// Empty when the file is damaged: ask `pin` (or `intact`), which report the damage.
    #[serde(default)]
    pub images: BTreeMap<String, Pin>,
    /// Why the file could not be read. Only a start or pin that needs a digest fails on
    /// it: a process recipe (the emergency exit back to llama-server) needs no lock.
    #[serde(skip)]
    damage: Option<Vec<Diagnostic>>,
}

impl Lock {
    /// Reads the lock; a missing file is an empty lock. A damaged (or unreadable) one
    /// loads as damaged: `pin` and `intact` report it with its line, and it is never
    /// rewritten. Loading itself does not fail, so commands that need no digest work.
    pub fn load(path: &Path) -> Result<Lock> {
        Ok(Self::read(path).unwrap_or_else(|e| Lock {
            damage: Some(match e {
                Error::Invalid(d) => d,
                other => vec![Diagnostic::at(
                    path,
                    None,
                    None,
                    other.to_string(),
                    Some("check that you may read it".into()),
                )],
            }),
            ..Lock::default()
        }))
    }

    fn read(path: &Path) -> Result<Lock> {
        match std::fs::read(path) {
            Ok(text) => Self::parse(path, &text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Lock::default()),
            Err(e) => Err(Error::io(format!("cannot read {}", path.display()), e)),
        }
    }

    /// The lock in `text`, read from `path` (named in diagnostics); a file of comments only
    /// is an empty lock.
    pub fn parse(path: &Path, text: &[u8]) -> Result<Lock> {
        if text
            .split(|&b| b == b'\n')
            .all(|l| l.trim_ascii().is_empty() || l.trim_ascii_start().starts_with(b"#"))
        {
            return Ok(Lock::default());
        }
        crate::yaml::from_slice(
            path,
            text,
            "images.lock is written by `sparkctl images pin`; fix the line or restore it \
             from version control (it was not rewritten)",
        )
    }

    /// The lock itself, or why it cannot be used (for `images pin/audit/pull/diff`).
    pub(crate) fn intact(self) -> Result<Lock> {
        match self.damage {
            Some(d) => Err(Error::Invalid(d)),
            None => Ok(self),
        }
    }

    /// The pin of `recipe`, if any; fails when the lock is damaged.
    pub(crate) fn pin(&self, recipe: &str) -> Result<Option<&Pin>> {
        match &self.damage {
            Some(d) => Err(Error::Invalid(d.clone())),
            None => Ok(self.images.get(recipe)),
        }
    }

    /// Pins `recipe` to `new`, keeping what it replaces in its history; returns the digest it
    /// was pinned to before (None for a first pin).
    pub(crate) fn set(&mut self, recipe: &str, new: Pin) -> Option<String> {
        match self.images.get_mut(recipe) {
            Some(p) => {
                let old = p.digest.clone();
                p.replace_with(new);
                Some(old)
            }
            None => {
                self.images.insert(recipe.to_string(), new);
                None
            }
        }
    }

    /// The lock a start of `recipe` at `image` runs from (a production entry's own digest,
    /// an upgrade's candidate): this one with that pin in place, in memory only; this one as
    /// it is when there is none.
    pub(crate) fn with_image(&self, recipe: &str, image: Option<&Pin>) -> Lock {
        let mut l = self.clone();
        if let Some(pin) = image {
            l.set(recipe, pin.clone());
        }
        l
    }

    pub(crate) fn save(&self, path: &Path) -> Result<()> {
        // A damaged lock loads empty: writing it would drop every pin.
        if let Some(d) = &self.damage {
            return Err(Error::Invalid(d.clone()));
        }
        let body = serde_yaml_ng::to_string(self).expect("lock serializes");
        crate::state::write_atomic(path, format!("{HEADER}{body}").as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pin(digest: &str, at: &str) -> Pin {
        Pin {
            reference: "127.0.0.1:5000/vllm/vllm-openai:cu130-nightly".into(),
            digest: digest.into(),
            source: Source::Registry,
            media_type: None,
            platform: Some("linux/arm64".into()),
            image_id: None,
            created: None,
            pinned_at: at.into(),
            history: vec![],
        }
    }

    #[test]
    fn repositories_drop_tags_and_digests_but_keep_ports() {
        assert_eq!(
            repository("vllm/vllm-openai:cu130-nightly"),
            "vllm/vllm-openai"
        );
        assert_eq!(repository("127.0.0.1:5000/a/b:tag"), "127.0.0.1:5000/a/b");
        assert_eq!(repository("127.0.0.1:5000/a/b"), "127.0.0.1:5000/a/b");
        assert_eq!(repository("a/b@sha256:00"), "a/b");
        assert_eq!(
            pin("sha256:aa", "t").run_reference(),
            "127.0.0.1:5000/vllm/vllm-openai@sha256:aa"
        );
    }

    #[test]
    fn repinning_keeps_history_newest_first_and_round_trips() {
        let mut p = pin("sha256:aa", "t1");
        p.replace_with(pin("sha256:bb", "t2"));
        p.replace_with(pin("sha256:bb", "t3"));
        p.replace_with(pin("sha256:cc", "t4"));
        let digests: Vec<&str> = p.history.iter().map(|h| h.digest.as_str()).collect();
        assert_eq!(digests, ["sha256:bb", "sha256:aa"]);
        assert_eq!(p.history[0].replaced_at, "t4");
        let dir = std::env::temp_dir().join(format!("sparkctl-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(LOCK_FILE);
        let mut lock = Lock::default();
        lock.images.insert("qat-v2b".into(), p);
        lock.save(&path).unwrap();
        assert_eq!(Lock::load(&path).unwrap(), lock);
        std::fs::write(&path, "images:\n  qat-v2b:\n    digest: [\n").unwrap();
        // A damaged lock loads (a process recipe needs none) and fails whoever needs a pin.
        let damaged = Lock::load(&path).unwrap();
        let err = damaged.pin("qat-v2b").unwrap_err().to_string();
        assert!(err.contains("images.lock:3:"), "{err}");
        assert!(
            damaged.save(&path).is_err(),
            "a damaged lock is never rewritten"
        );
        assert!(damaged.intact().is_err());
        std::fs::write(&path, "images:\n  a: {}\n  a: {}\n").unwrap();
        let err = Lock::load(&path).unwrap().intact().unwrap_err().to_string();
        assert!(
            err.contains("images.lock:3:3: images.a: duplicate key"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
