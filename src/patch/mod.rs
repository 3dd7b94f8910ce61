//! Model-dir patching: plan every step first (`plan`), then apply file by file with
//! write-to-temp + rename, keeping each original once as `FILE.orig` (a hard link: no
//! copy of gigabytes, same bytes, owner and mode). A manifest in the model dir lists
//! what was backed up or created, written before each change, so `--revert` restores
//! the originals byte for byte even after an interrupted run.

pub(crate) mod expect;
pub(crate) mod fingerprint;
mod json_edit;
mod overlay;
pub(crate) mod owner;
pub(crate) mod plan;
pub(crate) mod safetensors;

use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::recipe::LoadedRecipe;
use crate::state::{self, StateDir};
pub(crate) use fingerprint::Fingerprint;
pub(crate) use plan::{Content, Plan};

/// sparkctl's record in a patched model dir.
pub(crate) const MANIFEST: &str = ".sparkctl-patch.json";
pub(crate) const BACKUP_SUFFIX: &str = ".orig";

#[derive(Debug, Default, Serialize, Deserialize)]
struct Manifest {
    recipe: String,
    /// Files whose original is kept as `FILE.orig`.
    backups: Vec<String>,
    /// Files that did not exist before sparkctl wrote them.
    created: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fingerprint: Option<String>,
}

fn manifest_path(root: &Path) -> PathBuf {
    root.join(MANIFEST)
}

fn read_manifest(root: &Path) -> Result<Option<Manifest>> {
    let path = manifest_path(root);
    if !path.exists() {
        return Ok(None);
    }
    state::read_json(&path).map(Some)
}

/// Where `patches/` lives: beside the recipes dir (the checkout, or the config dir).
pub(crate) fn repo_dir(loaded: &LoadedRecipe) -> PathBuf {
    crate::places::patches_root(&loaded.path)
}

/// How owner changes will be made (for the plan's display).
pub(crate) fn chown_method(loaded: &LoadedRecipe) -> String {
    if owner::can_chown_directly() {
        "directly (sparkctl runs as root)".into()
    } else {
        match &loaded.recipe.image {
            Some(image) => format!("through a helper container of {image}"),
            None => {
                "impossible without root (the recipe has no image for a helper container)".into()
            }
        }
    }
}

#[derive(Debug, Serialize)]
pub(crate) struct Applied {
    pub(crate) plan: Plan,
    pub(crate) written: Vec<String>,
    pub(crate) backed_up: Vec<String>,
    pub(crate) owners_changed: usize,
    pub(crate) fingerprint: Fingerprint,
}

fn cache_dir(state: &StateDir) -> PathBuf {
    state.root().join("fingerprints")
}

fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The model's fingerprint (cached by size, mtime and inode in the state dir), on the
/// blocking pool: hashing a multi-GB model must not stop the async side (a Ctrl-C, a
/// spinner, the front door's control socket) while it runs.
pub(crate) async fn fingerprint_in_background(
    model: &Path,
    state: &StateDir,
) -> Result<Fingerprint> {
    let (model, cache) = (model.to_path_buf(), cache_dir(state));
    tokio::task::spawn_blocking(move || fingerprint::fingerprint(&model, &cache, threads()))
        .await
        .map_err(|e| Error::TaskLost {
            what: crate::error::Task::Fingerprinting,
            cause: e.to_string(),
        })?
}

/// Each model file's sha256 (see `fingerprint::file_hashes`), off the async threads.
pub(crate) async fn file_hashes_in_background(
    model: &Path,
    state: &StateDir,
) -> Result<std::collections::BTreeMap<String, String>> {
    let (model, cache) = (model.to_path_buf(), cache_dir(state));
    tokio::task::spawn_blocking(move || fingerprint::file_hashes(&model, &cache, threads()))
        .await
        .map_err(|e| Error::TaskLost {
            what: crate::error::Task::Fingerprinting,
            cause: e.to_string(),
        })?
}

/// Refuses, before anything changes, what would fail halfway: read-only files.
fn preflight(plan: &Plan) -> Result<()> {
    for f in plan.files.iter().filter(|f| f.existed) {
        let path = plan.model_dir.join(&f.rel);
        let mode = std::fs::metadata(&path)
            .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?
            .permissions()
            .mode();
        if mode & 0o222 == 0 {
            return Err(Error::Refused(crate::error::Refusal::ReadOnly {
                path: path.clone(),
                mode: mode & 0o777,
            }));
        }
    }
    Ok(())
}

/// Applies a plan. `docker` is needed only when owners change and sparkctl is not root.
pub(crate) async fn apply(
    loaded: &LoadedRecipe,
    plan: Plan,
    state: &StateDir,
    docker: Option<&bollard::Docker>,
) -> Result<Applied> {
    refuse_failed_checks(&plan)?;
    preflight(&plan)?;
    let root = std::fs::canonicalize(&plan.model_dir)
        .map_err(|e| Error::io(format!("cannot resolve {}", plan.model_dir.display()), e))?;
    let mut manifest = read_manifest(&root)?.unwrap_or_default();
    manifest.recipe = plan.recipe.clone();

    // In step order: a chown first lets the later writes happen in a dir the user owns.
    enum Action<'a> {
        Owner(&'a plan::OwnerChange),
        File(&'a plan::FileChange),
    }
    let mut actions: Vec<(usize, Action)> = plan
        .owners
        .iter()
        .map(|o| (o.step, Action::Owner(o)))
        .chain(
            plan.files
                .iter()
                .map(|f| (f.steps.first().copied().unwrap_or(0), Action::File(f))),
        )
        .collect();
    actions.sort_by_key(|(step, _)| *step);

    let (mut written, mut backed_up, mut owners_changed) = (Vec::new(), Vec::new(), 0);
    for (_, action) in actions {
        match action {
            Action::Owner(change) if !change.paths.is_empty() => {
                chown(loaded, state, docker, &root, change).await?;
                owners_changed += change.paths.len();
            }
            Action::Owner(_) => {}
            Action::File(change) => {
                let path = root.join(&change.rel);
                let known = manifest.backups.contains(&change.rel)
                    || manifest.created.contains(&change.rel);
                if !known {
                    if change.existed {
                        backup(&path)?;
                        manifest.backups.push(change.rel.clone());
                        backed_up.push(change.rel.clone());
                    } else {
                        manifest.created.push(change.rel.clone());
                    }
                }
                // Recorded before the write: an interrupted run can still be reverted.
                state::write_json(&manifest_path(&root), &manifest)?;
                write_file(&root, &path, &change.after)
                    .map_err(|e| write_failed(e, &change.rel, &written, &plan.recipe))?;
                written.push(change.rel.clone());
            }
        }
    }
    let fingerprint = fingerprint_in_background(&root, state).await?;
    if !written.is_empty() || manifest_path(&root).exists() {
        manifest.fingerprint = Some(fingerprint.digest.clone());
        state::write_json(&manifest_path(&root), &manifest)?;
    }
    Ok(Applied {
        plan,
        written,
        backed_up,
        owners_changed,
        fingerprint,
    })
}

/// Expectations that do not hold refuse the whole patch, before anything is written.
fn refuse_failed_checks(plan: &Plan) -> Result<()> {
    let failed = plan.failed_checks();
    if failed.is_empty() {
        return Ok(());
    }
    let lines: Vec<String> = failed
        .iter()
        .map(|c| format!("  step {}: {}: {}", c.step + 1, c.what, c.detail))
        .collect();
    Err(Error::ExpectationsFail {
        recipe: plan.recipe.clone(),
        failed: lines,
    })
}

/// Gives `change.paths` to their owner: directly as root, otherwise through a helper
/// container of the recipe's own image (the files were written by root in a container).
async fn chown(
    loaded: &LoadedRecipe,
    state: &StateDir,
    docker: Option<&bollard::Docker>,
    root: &Path,
    change: &plan::OwnerChange,
) -> Result<()> {
    if owner::can_chown_directly() {
        return owner::chown_direct(root, &change.paths, change.owner);
    }
    let image = loaded
        .recipe
        .image
        .as_deref()
        .ok_or_else(|| Error::RecipeCannot {
            recipe: loaded.recipe.name.clone(),
            why: crate::error::RecipeProblem::NotOwned {
                paths: change.paths.len(),
                root: root.to_path_buf(),
                owner: change.owner.to_string(),
            },
        })?;
    let docker = docker.ok_or(Error::EngineUnreachable {
        cause: crate::error::Reach::Needed(crate::error::EngineNeed::ChownHelper),
    })?;
    owner::chown_via_container(
        docker,
        image,
        &state.id(),
        root,
        &change.paths,
        change.owner,
    )
    .await
}

/// A write that failed names what is unchanged and how to undo what was already written.
fn write_failed(e: impl std::fmt::Display, rel: &str, written: &[String], recipe: &str) -> Error {
    let done = if written.is_empty() {
        "no file was changed".to_string()
    } else {
        format!(
            "{} earlier file(s) were patched; `sparkctl patch {recipe} --revert` restores them",
            written.len()
        )
    };
    Error::Failed(format!("{e}; {rel} is unchanged and {done}"))
}

/// Keeps the original as `FILE.orig`, once: an existing backup is never overwritten.
fn backup(path: &Path) -> Result<()> {
    let orig = PathBuf::from(format!("{}{BACKUP_SUFFIX}", path.display()));
    if orig.exists() {
        return Ok(());
    }
    // A hard link keeps the very inode: same bytes, owner and mode, no copy of gigabytes.
    if std::fs::hard_link(path, &orig).is_ok() {
        return Ok(());
    }
    let bytes =
        std::fs::read(path).map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
    state::write_atomic(&orig, &bytes)
}

/// Writes new content through a temp file in the same dir and a rename; the temp file is
/// removed on any failure, so the target is either the old file or the whole new one.
fn write_file(root: &Path, path: &Path, content: &Content) -> std::io::Result<()> {
    let tmp = root.join(format!(".sparkctl-tmp-{}", std::process::id()));
    let result = (|| {
        match content {
            Content::Bytes(bytes) => {
                let mut f = std::fs::File::create(&tmp)?;
                f.write_all(bytes)?;
                f.sync_all()?;
            }
            Content::CopyOf(from) => {
                let opts = fs_extra::file::CopyOptions::new().overwrite(true);
                fs_extra::file::copy(from, &tmp, &opts).map_err(|e| match e.kind {
                    // Keep the OS error (ENOSPC, EACCES) rather than fs_extra's summary.
                    fs_extra::error::ErrorKind::Io(io) => io,
                    _ => std::io::Error::other(e.to_string()),
                })?;
                std::fs::File::open(&tmp)?.sync_all()?;
            }
        }
        // The new file keeps the old one's mode and owner (or the dir's, for a new file).
        let like = std::fs::metadata(path).or_else(|_| std::fs::metadata(root))?;
        let mode = if like.is_dir() {
            0o644
        } else {
            like.permissions().mode() & 0o7777
        };
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))?;
        if owner::can_chown_directly() {
            std::os::unix::fs::chown(&tmp, Some(like.uid()), Some(like.gid()))?;
        }
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(root)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot write {}: {e}", path.display())))
}

#[derive(Debug, Serialize)]
pub(crate) struct Reverted {
    pub(crate) restored: Vec<String>,
    pub(crate) removed: Vec<String>,
}

/// Puts every original back (renaming `FILE.orig` over `FILE`) and removes the files the
/// patch created. Without a manifest there is nothing to revert.
pub(crate) fn revert(loaded: &LoadedRecipe) -> Result<Reverted> {
    let dir = plan::model_dir(loaded)?;
    let root = std::fs::canonicalize(&dir)
        .map_err(|e| Error::io(format!("cannot resolve {}", dir.display()), e))?;
    let Some(mut manifest) = read_manifest(&root)? else {
        return Ok(Reverted {
            restored: Vec::new(),
            removed: Vec::new(),
        });
    };
    let missing: Vec<&String> = manifest
        .backups
        .iter()
        .filter(|rel| !root.join(format!("{rel}{BACKUP_SUFFIX}")).exists())
        .collect();
    if !missing.is_empty() {
        return Err(Error::Refused(crate::error::Refusal::BackupsGone {
            missing: missing.iter().map(|m| m.to_string()).collect(),
            suffix: BACKUP_SUFFIX,
            root: root.to_path_buf(),
        }));
    }
    // The manifest shrinks with each file put back, so an interrupted revert can resume.
    let mut restored = Vec::new();
    while let Some(rel) = manifest.backups.first().cloned() {
        let orig = root.join(format!("{rel}{BACKUP_SUFFIX}"));
        std::fs::rename(&orig, root.join(&rel))
            .map_err(|e| Error::io(format!("cannot restore {}", root.join(&rel).display()), e))?;
        manifest.backups.remove(0);
        state::write_json(&manifest_path(&root), &manifest)?;
        restored.push(rel);
    }
    let mut removed = Vec::new();
    while let Some(rel) = manifest.created.first().cloned() {
        match std::fs::remove_file(root.join(&rel)) {
            Ok(()) => removed.push(rel.clone()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(Error::io(
                    format!("cannot remove {}", root.join(&rel).display()),
                    e,
                ))
            }
        }
        manifest.created.remove(0);
        state::write_json(&manifest_path(&root), &manifest)?;
    }
    std::fs::remove_file(manifest_path(&root)).map_err(|e| {
        Error::io(
            format!("cannot remove {}", manifest_path(&root).display()),
            e,
        )
    })?;
    Ok(Reverted { restored, removed })
}
