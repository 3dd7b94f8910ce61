//! Reading recipe files, and every check that can be made without touching the machine.
//! Each problem becomes a `Diagnostic` naming file, line, column and key.

use std::path::{Path, PathBuf};

use super::check::check;
use super::diag::{diag_at, from_yaml_error, suggest};
use super::Recipe;
use crate::error::{Diagnostic, Error, Result};

/// A parsed, checked recipe file (a deployment recipe or a job recipe) and where it came
/// from: the text is kept so a problem found later can still name its line.
#[derive(Debug, Clone)]
pub struct Loaded<R> {
    pub recipe: R,
    pub(crate) path: PathBuf,
    pub(crate) source: String,
}

/// A deployment recipe, loaded.
pub(crate) type LoadedRecipe = Loaded<Recipe>;

impl<R> Loaded<R> {
    /// A problem found later (at plan time) at `key` of this recipe, with its line.
    pub(crate) fn diagnostic(
        &self,
        key: &str,
        message: String,
        help: Option<String>,
    ) -> Diagnostic {
        diag_at(&self.path, &self.source, key, message, help)
    }
}

impl LoadedRecipe {
    /// The problems of the evaluation sets `bench.eval` names, each at its own file, item and
    /// key (loading checks only that they exist: a broken set fails the runs that ask it,
    /// and `recipes validate`).
    pub(crate) fn eval_set_problems(&self) -> Vec<Diagnostic> {
        let names = self.recipe.bench.as_ref().map_or(&[][..], |b| &b.eval[..]);
        let dir = self.path.parent().unwrap_or(Path::new("."));
        match crate::eval::plan(names, dir) {
            Ok(_) => Vec::new(),
            Err(Error::Invalid(d)) => d,
            Err(e) => vec![self.diagnostic("bench.eval", e.to_string(), None)],
        }
    }
}

/// Every recipe of one directory, sorted by name, and the files that did not load.
///
/// A broken file is kept as its diagnostics and fails only the commands that need it:
/// `rollback --to demo-production` must not depend on an unrelated `qat-v2b.yaml` being
/// well-formed (the emergency exit works with the recipes it needs).
#[derive(Debug, Clone)]
pub struct RecipeSet {
    pub(crate) dir: PathBuf,
    pub(crate) recipes: Vec<LoadedRecipe>,
    pub(crate) broken: Vec<BrokenRecipe>,
}

/// A recipe file that did not load, with every problem found in it.
#[derive(Debug, Clone)]
pub(crate) struct BrokenRecipe {
    pub(crate) path: PathBuf,
    /// The names it may stand for: its file name, and the `name:` it declares if that parsed.
    names: Vec<String>,
    diagnostics: Vec<Diagnostic>,
}

impl std::fmt::Display for BrokenRecipe {
    /// One line for a warning: the first problem, how many more, and how to see them all.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let first = self
            .diagnostics
            .first()
            .map(|d| d.to_string())
            .unwrap_or_default();
        write!(
            f,
            "{} is skipped: {}",
            self.path.display(),
            first.lines().next().unwrap_or_default()
        )?;
        if self.diagnostics.len() > 1 {
            write!(f, " (and {} more)", self.diagnostics.len() - 1)?;
        }
        write!(
            f,
            "; `sparkctl recipes validate {}` shows every problem",
            self.path.display()
        )
    }
}

impl RecipeSet {
    /// The recipe called `name`. A broken file that may define it fails with its own
    /// diagnostics (exit 2), even when another file defines the name too: which one was
    /// meant cannot be known.
    pub fn get(&self, name: &str) -> Result<&LoadedRecipe> {
        if let Some(b) = self
            .broken
            .iter()
            .find(|b| b.names.iter().any(|n| n == name))
        {
            return Err(Error::Invalid(b.diagnostics.clone()));
        }
        self.recipes
            .iter()
            .find(|r| r.recipe.name == name)
            .ok_or_else(|| self.unknown(name))
    }

    /// Every name a user may type here: loaded recipes and broken files.
    pub(crate) fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .recipes
            .iter()
            .map(|r| r.recipe.name.as_str())
            .chain(
                self.broken
                    .iter()
                    .flat_map(|b| b.names.iter().map(String::as_str)),
            )
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    /// Whether `name` is a recipe here, loaded or broken.
    pub(crate) fn knows(&self, name: &str) -> bool {
        self.names().contains(&name)
    }

    /// "no recipe named `x`": with the did-you-mean over every known name.
    /// No recipes: where sparkctl looked holds no recipes directory.
    pub(crate) fn empty(dir: PathBuf) -> RecipeSet {
        RecipeSet {
            dir,
            recipes: Vec::new(),
            broken: Vec::new(),
        }
    }

    pub(crate) fn unknown(&self, name: &str) -> Error {
        if !self.dir.is_dir() {
            return Error::NoRecipesDir {
                name: name.into(),
                dir: self.dir.clone(),
            };
        }
        Error::UnknownRecipe {
            name: name.into(),
            dir: self.dir.clone(),
            hint: suggest(name, &self.names(), "known recipes"),
        }
    }

    /// For commands that read every recipe (`recipes validate`): all problems of all files.
    pub(crate) fn require_all(&self) -> Result<()> {
        let diags: Vec<Diagnostic> = self
            .broken
            .iter()
            .flat_map(|b| b.diagnostics.iter().cloned())
            .collect();
        if diags.is_empty() {
            Ok(())
        } else {
            Err(Error::Invalid(diags))
        }
    }
}

fn is_recipe_file(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml")
    )
}

/// Loads every `*.yaml`/`*.yml` directly in `dir`. Only an unreadable directory fails;
/// a file that does not load is kept in `broken`.
pub fn load_dir(dir: &Path) -> Result<RecipeSet> {
    let entries = std::fs::read_dir(dir).map_err(|e| {
        Error::Usage(format!(
            "cannot read the recipes directory {}: {e}; pass --recipes DIR or set SPARKCTL_RECIPES",
            dir.display()
        ))
    })?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && is_recipe_file(p))
        .collect();
    paths.sort();

    let mut recipes: Vec<LoadedRecipe> = Vec::new();
    let mut broken = Vec::new();
    for path in paths {
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        match load_one(&path) {
            Ok(loaded) => {
                if let Some(first) = recipes.iter().find(|r| r.recipe.name == loaded.recipe.name) {
                    let diagnostic = diag_at(
                        &loaded.path,
                        &loaded.source,
                        "name",
                        format!(
                            "duplicate recipe name `{}`: {} defines it too",
                            loaded.recipe.name,
                            first.path.display()
                        ),
                        Some("keep one file per recipe name".into()),
                    );
                    broken.push(BrokenRecipe {
                        path,
                        names: vec![stem, loaded.recipe.name],
                        diagnostics: vec![diagnostic],
                    });
                } else {
                    recipes.push(loaded);
                }
            }
            Err((declared, diagnostics)) => broken.push(BrokenRecipe {
                path,
                names: std::iter::once(stem).chain(declared).collect(),
                diagnostics,
            }),
        }
    }
    recipes.sort_by(|a, b| a.recipe.name.cmp(&b.recipe.name));
    // A fallback is switched to when production cannot be brought back: it must exist.
    let names: Vec<String> = recipes
        .iter()
        .map(|r| r.recipe.name.clone())
        .chain(broken.iter().flat_map(|b| b.names.clone()))
        .collect();
    let (recipes, bad): (Vec<LoadedRecipe>, Vec<LoadedRecipe>) =
        recipes.into_iter().partition(|r| match &r.recipe.fallback {
            Some(f) => f != &r.recipe.name && names.contains(f),
            None => true,
        });
    for r in bad {
        let f = r.recipe.fallback.clone().unwrap_or_default();
        let (message, help) = if f == r.recipe.name {
            (
                format!("`{f}` is this recipe: a fallback must be another one"),
                "name the recipe that serves when this one cannot, e.g. llama-server".to_string(),
            )
        } else {
            let known: Vec<&str> = names.iter().map(String::as_str).collect();
            (
                format!("fallback `{f}` is not a recipe in {}", dir.display()),
                suggest(&f, &known, "recipes"),
            )
        };
        broken.push(BrokenRecipe {
            names: vec![r.recipe.name.clone()],
            diagnostics: vec![diag_at(&r.path, &r.source, "fallback", message, Some(help))],
            path: r.path,
        });
    }
    Ok(RecipeSet {
        dir: dir.to_path_buf(),
        recipes,
        broken,
    })
}

/// Parses and checks one recipe file.
pub(crate) fn load_file(path: &Path) -> Result<LoadedRecipe> {
    load_one(path).map_err(|(_, diagnostics)| Error::Invalid(diagnostics))
}

/// What a file that did not load leaves: the name it declares (if it parsed that far)
/// and its problems.
type Failure = (Option<String>, Vec<Diagnostic>);

/// A recipe from the bytes of the file at `path` (which names it in diagnostics and must
/// match its `name`); the same checks as `load_file`. For tests and the fuzz target.
pub fn parse_recipe(path: &Path, bytes: &[u8]) -> Result<LoadedRecipe> {
    parse_one(path, bytes).map_err(|(_, diagnostics)| Error::Invalid(diagnostics))
}

/// One file: the recipe, or its problems.
fn load_one(path: &Path) -> std::result::Result<LoadedRecipe, Failure> {
    let bytes = std::fs::read(path).map_err(|e| {
        let d = Diagnostic::at(
            path,
            None,
            None,
            format!("cannot read this recipe: {e}"),
            Some("check that the file exists and that you may read it".into()),
        );
        (None, vec![d])
    })?;
    parse_one(path, &bytes)
}

fn parse_one(path: &Path, bytes: &[u8]) -> std::result::Result<LoadedRecipe, Failure> {
    let prepared = crate::yaml::prepare(path, bytes).map_err(|d| (None, vec![*d]))?;
    let source = prepared.text.to_string();
    let recipe: Recipe = serde_yaml_ng::from_str(&source)
        .map_err(|e| (None, vec![from_yaml_error(path, &source, &e)]))?;
    let mut diags = check(path, &source, &recipe, &prepared.loose);
    diags.extend(super::notify::problems(path, &source, &recipe));
    if !diags.is_empty() {
        return Err((Some(recipe.name), diags));
    }
    Ok(LoadedRecipe {
        recipe,
        path: path.to_path_buf(),
        source,
    })
}
