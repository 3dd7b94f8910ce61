//! Planning: every step runs against an overlay of the model dir (pending contents over
//! the files on disk), so the whole result (diffs, copies, owner changes, checks) is
//! known, and every input problem found, before one byte is written.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::expect;
pub(crate) use super::expect::Check;
use super::overlay::Overlay;
pub(crate) use super::overlay::{Content, FileChange};
use super::owner::{self, Owner};
use crate::error::{Error, Result};
use crate::recipe::{expand_home, JsonOp, LoadedRecipe, PatchStep};

pub(crate) use super::json_edit::{apply_op, wrap_vl};

#[derive(Debug, Clone, Serialize)]
pub(crate) struct OwnerChange {
    pub(in crate::patch) step: usize,
    pub(in crate::patch) owner: Owner,
    /// Relative paths ("." for the model dir itself) not owned by `owner` now.
    pub(crate) paths: Vec<String>,
}

/// One line per step for people.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct StepSummary {
    pub(crate) step: usize,
    pub(crate) kind: &'static str,
    pub(crate) summary: String,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Plan {
    pub(crate) recipe: String,
    pub(crate) model_dir: PathBuf,
    pub(crate) steps: Vec<StepSummary>,
    pub(in crate::patch) files: Vec<FileChange>,
    pub(crate) owners: Vec<OwnerChange>,
    pub(crate) checks: Vec<Check>,
}

impl Plan {
    /// Nothing to write and nobody's files to give back.
    pub(crate) fn changes_nothing(&self) -> bool {
        self.files.is_empty() && self.owners.iter().all(|o| o.paths.is_empty())
    }

    pub(crate) fn failed_checks(&self) -> Vec<&Check> {
        self.checks.iter().filter(|c| !c.ok).collect()
    }

    /// Unified diffs of the text files that change; one line for each copy.
    pub(crate) fn diff(&self) -> String {
        let mut out = String::new();
        for f in &self.files {
            match &f.after {
                Content::CopyOf(from) => out.push_str(&format!(
                    "copy {} -> {} ({})\n",
                    from.display(),
                    f.rel,
                    if f.existed {
                        "replaces the current file"
                    } else {
                        "new file"
                    }
                )),
                Content::Bytes(after) => {
                    let before = f.before.as_deref().unwrap_or_default();
                    match (std::str::from_utf8(before), std::str::from_utf8(after)) {
                        (Ok(a), Ok(b)) => {
                            let old = if f.existed {
                                format!("a/{}", f.rel)
                            } else {
                                "/dev/null".into()
                            };
                            let diff = similar::TextDiff::from_lines(a, b);
                            out.push_str(
                                &diff
                                    .unified_diff()
                                    .context_radius(3)
                                    .header(&old, &format!("b/{}", f.rel))
                                    .to_string(),
                            );
                        }
                        _ => out.push_str(&format!(
                            "binary {} changes ({} bytes)\n",
                            f.rel,
                            after.len()
                        )),
                    }
                }
            }
        }
        out
    }
}

/// The model dir a recipe's patches apply to.
pub(crate) fn model_dir(loaded: &LoadedRecipe) -> Result<PathBuf> {
    let model = loaded.recipe.model.as_ref().ok_or_else(|| {
        Error::Invalid(vec![loaded.diagnostic(
            "model",
            "the recipe has no model, so nothing to patch".into(),
            Some("add `model: {path: ~/models/NAME, patches: [...]}`".into()),
        )])
    })?;
    let dir = PathBuf::from(expand_home(&model.path));
    if !dir.is_dir() {
        return Err(Error::Invalid(vec![loaded.diagnostic(
            "model.path",
            format!("{} is not a directory", dir.display()),
            Some("download the model there, or fix model.path".into()),
        )]));
    }
    Ok(dir)
}

/// What the steps would do now. Errors are bad input (missing donor, malformed JSON,
/// a path leaving the model dir) and name the step; nothing is changed either way.
pub(crate) fn plan(loaded: &LoadedRecipe, repo_dir: &Path) -> Result<Plan> {
    let dir = model_dir(loaded)?;
    let root = std::fs::canonicalize(&dir)
        .map_err(|e| Error::io(format!("cannot resolve {}", dir.display()), e))?;
    let steps = &loaded
        .recipe
        .model
        .as_ref()
        .expect("model_dir checked")
        .patches;
    let mut p = Planner {
        loaded,
        repo_dir,
        overlay: Overlay::new(&root),
        owners: Vec::new(),
        checks: Vec::new(),
    };
    let mut summaries = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        summaries.push(StepSummary {
            step: i,
            kind: step.kind(),
            summary: p.step(i, step)?,
        });
    }
    Ok(Plan {
        recipe: loaded.recipe.name.clone(),
        model_dir: dir,
        steps: summaries,
        files: p.overlay.changes()?,
        owners: p.owners,
        checks: p.checks,
    })
}

/// The steps' work so far: the overlay they read and write, the owner changes and checks.
struct Planner<'a> {
    loaded: &'a LoadedRecipe,
    repo_dir: &'a Path,
    overlay: Overlay<'a>,
    owners: Vec<OwnerChange>,
    checks: Vec<Check>,
}

type StepResult = Result<String>;

impl Planner<'_> {
    /// A problem of step `i` (at its key, or a sub-key of it).
    fn bad(&self, key: &str, message: String, help: Option<String>) -> Error {
        Error::Invalid(vec![self.loaded.diagnostic(key, message, help)])
    }

    /// Plans step `i`; returns its one-line summary.
    fn step(&mut self, i: usize, step: &PatchStep) -> StepResult {
        let key = format!("model.patches[{i}].{}", step.kind());
        match step {
            PatchStep::WrapVlConfig {
                model_type,
                architecture,
            } => self.wrap(i, &key, model_type.as_deref(), architecture.as_deref()),
            PatchStep::JsonEdit { file, ops } => self.edit(i, &key, file, ops),
            PatchStep::CopyFrom { donor, files } => self.copy(i, &key, donor, files),
            PatchStep::WriteFile {
                path,
                from,
                if_missing,
            } => self.write(i, &key, path, from, *if_missing),
            PatchStep::Chown { to } => self.chown(i, &key, to),
            PatchStep::Expect {
                file,
                pointer,
                equals,
            } => Ok(self.expect(i, file, pointer, equals)),
            PatchStep::ExpectFiles { files } => self.expect_files(i, &key, files),
            PatchStep::ExpectSafetensors {} => {
                let found = expect::safetensors_parse(i, &self.overlay);
                self.checks.extend(found);
                Ok("expect readable safetensors".to_string())
            }
        }
    }

    fn wrap(
        &mut self,
        i: usize,
        key: &str,
        model_type: Option<&str>,
        arch: Option<&str>,
    ) -> StepResult {
        let bad = |m: String| self.bad(key, m, None);
        let cfg = self
            .overlay
            .json("config.json")
            .map_err(bad)?
            .ok_or_else(|| bad("config.json does not exist in the model dir".into()))?;
        match wrap_vl(&cfg, model_type, arch).map_err(bad)? {
            Some(wrapped) => {
                self.overlay
                    .put_json(i, "config.json", &wrapped)
                    .map_err(|m| self.bad(key, m, None))?;
                Ok("config.json: wrap the text-only config into the VL form".to_string())
            }
            None => Ok("config.json is already in the VL form".to_string()),
        }
    }

    fn edit(&mut self, i: usize, key: &str, file: &str, ops: &[JsonOp]) -> StepResult {
        let bad = |m: String| self.bad(key, m, None);
        let mut value = self
            .overlay
            .json(file)
            .map_err(bad)?
            .ok_or_else(|| bad(format!("{file} does not exist in the model dir")))?;
        let before = value.clone();
        for (j, op) in ops.iter().enumerate() {
            apply_op(&mut value, op)
                .map_err(|m| self.bad(&format!("{key}.ops[{j}]"), format!("{file}: {m}"), None))?;
        }
        if value == before {
            return Ok(format!("{file}: already edited"));
        }
        self.overlay
            .put_json(i, file, &value)
            .map_err(|m| self.bad(key, m, None))?;
        Ok(format!("{file}: {} edit(s)", ops.len()))
    }

    fn copy(&mut self, i: usize, key: &str, donor: &str, files: &[String]) -> StepResult {
        let donor_dir = PathBuf::from(expand_home(donor));
        if !donor_dir.is_dir() {
            return Err(self.bad(
                &format!("{key}.donor"),
                format!("donor model dir {} does not exist", donor_dir.display()),
                Some("download the donor model or fix the path".into()),
            ));
        }
        let missing: Vec<&str> = files
            .iter()
            .filter(|f| !donor_dir.join(f).is_file())
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            return Err(self.bad(
                &format!("{key}.files"),
                format!(
                    "the donor {} lacks {}",
                    donor_dir.display(),
                    missing.join(", ")
                ),
                Some("pick a donor that has them, or drop them from the list".into()),
            ));
        }
        let mut copied = Vec::new();
        for f in files {
            if self
                .overlay
                .put_copy(i, f, &donor_dir.join(f))
                .map_err(|m| self.bad(key, m, None))?
            {
                copied.push(f.as_str());
            }
        }
        Ok(if copied.is_empty() {
            format!("already copied from {}", donor_dir.display())
        } else {
            format!("copy {} from {}", copied.join(", "), donor_dir.display())
        })
    }

    fn write(
        &mut self,
        i: usize,
        key: &str,
        path: &str,
        from: &str,
        if_missing: bool,
    ) -> StepResult {
        let shipped = self.repo_dir.join(from);
        let bytes = std::fs::read(&shipped).map_err(|e| {
            self.bad(
                &format!("{key}.from"),
                format!("cannot read {}: {e}", shipped.display()),
                None,
            )
        })?;
        let bad = |m: String| self.bad(key, m, None);
        if if_missing && self.overlay.exists(path).map_err(bad)? {
            return Ok(format!("{path} exists; left as is (if-missing)"));
        }
        let changed = self
            .overlay
            .put_bytes(i, path, bytes)
            .map_err(|m| self.bad(key, m, None))?;
        Ok(if changed {
            format!("write {path} from {from}")
        } else {
            format!("{path} already matches {from}")
        })
    }

    fn chown(&mut self, i: usize, key: &str, to: &str) -> StepResult {
        let bad = |m: String| self.bad(key, m, None);
        let owner = owner::resolve(to).map_err(bad)?;
        let paths = owner::not_owned_by(self.overlay.root, owner).map_err(bad)?;
        let summary = if paths.is_empty() {
            format!("every file is owned by {owner}")
        } else {
            format!(
                "give {} path(s) to {owner}: {}",
                paths.len(),
                preview(&paths)
            )
        };
        self.owners.push(OwnerChange {
            step: i,
            owner,
            paths,
        });
        Ok(summary)
    }

    fn expect(
        &mut self,
        i: usize,
        file: &str,
        pointer: &str,
        equals: &serde_json::Value,
    ) -> String {
        let check = expect::json_value(&self.overlay, i, file, pointer, equals);
        let summary = format!("expect {}", check.what);
        self.checks.push(check);
        summary
    }

    fn expect_files(&mut self, i: usize, key: &str, files: &[String]) -> StepResult {
        // A path that escapes the model dir is bad input here, not a failed check.
        for f in files {
            self.overlay.exists(f).map_err(|m| self.bad(key, m, None))?;
        }
        let found = expect::files_present(&self.overlay, i, files);
        self.checks.extend(found);
        Ok(format!("expect {} file(s)", files.len()))
    }
}

fn preview(paths: &[String]) -> String {
    let shown: Vec<&str> = paths.iter().take(4).map(String::as_str).collect();
    if paths.len() > shown.len() {
        format!("{}, …", shown.join(", "))
    } else {
        shown.join(", ")
    }
}
