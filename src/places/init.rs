//! `sparkctl init`: a directory laid out as the checkout is — `recipes/` with `suites/` and
//! `jobs/`, `patches/`, `images.lock` — holding the shipped examples, built into the binary
//! so that an installed sparkctl needs no checkout. A file already there is never
//! overwritten: it is the user's (an edited recipe, a lock with pins).

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{Error, Result};

/// The shipped files under `recipes/` and `patches/`, by their path in the checkout.
/// The suites come from `bench::suite`, which builds them in for `bench --suite` already.
const FILES: &[(&str, &str)] = &[
    (
        "recipes/demo-candidate.yaml",
        include_str!("../../recipes/demo-candidate.yaml"),
    ),
    (
        "recipes/demo-crash.yaml",
        include_str!("../../recipes/demo-crash.yaml"),
    ),
    (
        "recipes/demo-from-job.yaml",
        include_str!("../../recipes/demo-from-job.yaml"),
    ),
    (
        "recipes/demo-leaky.yaml",
        include_str!("../../recipes/demo-leaky.yaml"),
    ),
    (
        "recipes/demo-production.yaml",
        include_str!("../../recipes/demo-production.yaml"),
    ),
    (
        "recipes/llama-server.yaml",
        include_str!("../../recipes/llama-server.yaml"),
    ),
    (
        "recipes/llama-tiny.yaml",
        include_str!("../../recipes/llama-tiny.yaml"),
    ),
    (
        "recipes/nvfp4-27b-tp2.yaml",
        include_str!("../../recipes/nvfp4-27b-tp2.yaml"),
    ),
    (
        "recipes/nvfp4-27b.yaml",
        include_str!("../../recipes/nvfp4-27b.yaml"),
    ),
    (
        "recipes/ptq-9b.yaml",
        include_str!("../../recipes/ptq-9b.yaml"),
    ),
    (
        "recipes/qat-v2b.yaml",
        include_str!("../../recipes/qat-v2b.yaml"),
    ),
    (
        "recipes/sglang-9b.yaml",
        include_str!("../../recipes/sglang-9b.yaml"),
    ),
    (
        "recipes/jobs/demo-quantize.yaml",
        include_str!("../../recipes/jobs/demo-quantize.yaml"),
    ),
    (
        "recipes/jobs/gguf-q4km-qat-9b.yaml",
        include_str!("../../recipes/jobs/gguf-q4km-qat-9b.yaml"),
    ),
    (
        "recipes/jobs/nvfp4-ptq-9b.yaml",
        include_str!("../../recipes/jobs/nvfp4-ptq-9b.yaml"),
    ),
    (
        "recipes/jobs/qat-export-9b.yaml",
        include_str!("../../recipes/jobs/qat-export-9b.yaml"),
    ),
    (
        "recipes/jobs/qat-train-9b.yaml",
        include_str!("../../recipes/jobs/qat-train-9b.yaml"),
    ),
    (
        "patches/qwen3_5/preprocessor_config.json",
        include_str!("../../patches/qwen3_5/preprocessor_config.json"),
    ),
    ("images.lock", include_str!("../../images.lock")),
];

/// Every shipped file: its path relative to the layout's root, and its text.
pub(crate) fn shipped() -> Vec<(String, &'static str)> {
    let mut all: Vec<(String, &'static str)> = FILES
        .iter()
        .map(|(path, text)| (path.to_string(), *text))
        .collect();
    all.extend(
        crate::bench::suite::built_in()
            .map(|(name, text)| (format!("recipes/suites/{name}.yaml"), text)),
    );
    all.sort();
    all
}

/// What `init` did with one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum FileOutcome {
    Written,
    /// There already, as shipped.
    Kept,
    /// There already and different (edited, or from another version): left as it is.
    KeptDiffers,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct InitReport {
    root: PathBuf,
    pub(crate) files: Vec<(String, FileOutcome)>,
}

impl InitReport {
    pub(crate) fn count(&self, outcome: FileOutcome) -> usize {
        self.files.iter().filter(|(_, o)| *o == outcome).count()
    }
}

/// Writes the shipped files under `root` that are not there yet (each whole: temp file and
/// rename), creating the directories. Checks first that every file can go where it must,
/// so a root that is a file, or a path taken by a directory, changes nothing.
pub(crate) fn init(root: &Path) -> Result<InitReport> {
    if root.exists() && !root.is_dir() {
        return Err(Error::PathTaken {
            path: root.to_path_buf(),
            why: crate::error::Taken::NotADir,
        });
    }
    let files = shipped();
    for (rel, _) in &files {
        let path = root.join(rel);
        if path.is_dir() {
            return Err(Error::PathTaken {
                path,
                why: crate::error::Taken::DirWhereFile {
                    rel: rel.to_string(),
                },
            });
        }
    }
    let mut report = InitReport {
        root: root.to_path_buf(),
        files: Vec::new(),
    };
    for (rel, text) in files {
        let path = root.join(&rel);
        let outcome = match std::fs::read(&path) {
            Ok(there) if there == text.as_bytes() => FileOutcome::Kept,
            Ok(_) => FileOutcome::KeptDiffers,
            Err(_) if path.exists() => FileOutcome::KeptDiffers,
            Err(_) => {
                let dir = path.parent().unwrap_or(root);
                std::fs::create_dir_all(dir)
                    .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
                crate::state::write_atomic(&path, text.as_bytes())?;
                FileOutcome::Written
            }
        };
        report.files.push((rel, outcome));
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file of the checkout's recipes/, recipes/suites/, recipes/jobs/ and patches/
    /// is shipped: one added to the checkout and forgotten here fails.
    #[test]
    fn the_checkout_s_examples_are_all_shipped() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut in_checkout = vec!["images.lock".to_string()];
        for dir in [
            "recipes",
            "recipes/suites",
            "recipes/jobs",
            "patches/qwen3_5",
        ] {
            for e in std::fs::read_dir(repo.join(dir)).unwrap() {
                let path = e.unwrap().path();
                if path.is_file() {
                    in_checkout.push(format!(
                        "{dir}/{}",
                        path.file_name().unwrap().to_string_lossy()
                    ));
                }
            }
        }
        in_checkout.sort();
        let shipped: Vec<String> = shipped().into_iter().map(|(p, _)| p).collect();
        assert_eq!(shipped, in_checkout);
        for (rel, text) in super::shipped() {
            assert_eq!(
                std::fs::read_to_string(repo.join(&rel)).unwrap(),
                text,
                "{rel}"
            );
        }
    }

    #[test]
    fn init_writes_what_is_missing_and_keeps_what_is_there() {
        let root = std::env::temp_dir().join(format!("sparkctl-init-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let first = init(&root).unwrap();
        assert_eq!(first.count(FileOutcome::Written), shipped().len());
        let edited = root.join("recipes/llama-server.yaml");
        std::fs::write(&edited, "name: llama-server\n# mine\n").unwrap();
        let again = init(&root).unwrap();
        assert_eq!(again.count(FileOutcome::Written), 0);
        assert_eq!(again.count(FileOutcome::KeptDiffers), 1);
        assert_eq!(
            std::fs::read_to_string(&edited).unwrap(),
            "name: llama-server\n# mine\n"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_root_that_is_a_file_changes_nothing() {
        let file = std::env::temp_dir().join(format!("sparkctl-init-file-{}", std::process::id()));
        std::fs::write(&file, "x").unwrap();
        let e = init(&file).unwrap_err().to_string();
        assert!(e.contains("not a directory"), "{e}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
        std::fs::remove_file(&file).unwrap();
    }
}
