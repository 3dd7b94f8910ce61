//! Reading recipe files, and every check that can be made without touching the machine.
//! Each problem becomes a `Diagnostic` naming file, line, column and key.

use std::path::{Path, PathBuf};

use super::check::check;
use super::locate::{key_of, locate};
use super::Recipe;
use crate::error::{Diagnostic, Error, Result};

/// A parsed, checked recipe and where it came from.
#[derive(Debug, Clone)]
pub struct LoadedRecipe {
    pub recipe: Recipe,
    pub path: PathBuf,
    pub source: String,
}

impl LoadedRecipe {
    /// A problem found later (at plan time) at `key` of this recipe, with its line.
    pub fn diagnostic(&self, key: &str, message: String, help: Option<String>) -> Diagnostic {
        diag_at(&self.path, &self.source, key, message, help)
    }
}

/// Every recipe of one directory, sorted by name, and the files that did not load.
///
/// A broken file is kept as its diagnostics and fails only the commands that need it:
/// `rollback --to demo-production` must not depend on an unrelated `qat-v2b.yaml` being
/// well-formed (the emergency exit works with the recipes it needs).
#[derive(Debug, Clone)]
pub struct RecipeSet {
    pub dir: PathBuf,
    pub recipes: Vec<LoadedRecipe>,
    pub broken: Vec<BrokenRecipe>,
}

/// A recipe file that did not load, with every problem found in it.
#[derive(Debug, Clone)]
pub struct BrokenRecipe {
    pub path: PathBuf,
    /// The names it may stand for: its file name, and the `name:` it declares if that parsed.
    pub names: Vec<String>,
    pub diagnostics: Vec<Diagnostic>,
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
    pub fn names(&self) -> Vec<&str> {
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
    pub fn knows(&self, name: &str) -> bool {
        self.names().contains(&name)
    }

    /// "no recipe named `x`": with the did-you-mean over every known name.
    pub fn unknown(&self, name: &str) -> Error {
        let hint = suggest(name, &self.names(), "known recipes");
        Error::Usage(format!(
            "no recipe named `{name}` in {}; {hint}",
            self.dir.display()
        ))
    }

    /// For commands that read every recipe (`recipes validate`): all problems of all files.
    pub fn require_all(&self) -> Result<()> {
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
pub fn load_file(path: &Path) -> Result<LoadedRecipe> {
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
    let diags = check(path, &source, &recipe, &prepared.loose);
    if !diags.is_empty() {
        return Err((Some(recipe.name), diags));
    }
    Ok(LoadedRecipe {
        recipe,
        path: path.to_path_buf(),
        source,
    })
}

pub(crate) fn diag_at(
    path: &Path,
    src: &str,
    key: &str,
    message: String,
    help: Option<String>,
) -> Diagnostic {
    // A key that is absent is reported where it belongs: under its parent, or for a
    // missing top-level key at the line that makes it needed.
    let parent = key.rsplit_once('.').map(|x| x.0);
    let found = locate(src, key)
        .or_else(|| parent.and_then(|p| locate(src, p)))
        .or_else(|| locate(src, "runtime"))
        .or_else(|| locate(src, "engine"));
    Diagnostic::at(path, found, Some(key.to_string()), message, help)
}

/// The closest candidate to `word`, if any is close enough to be a typo of it.
fn nearest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (strsim::damerau_levenshtein(word, c), c))
        .filter(|(d, c)| *d <= (word.len().max(c.len()) / 3).max(2))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// "did you mean `x`? LABEL: a, b" — or just the list when nothing is close.
pub fn suggest(word: &str, candidates: &[&str], label: &str) -> String {
    let list = format!("{label}: {}", candidates.join(", "));
    match nearest(word, candidates.iter().copied()) {
        Some(best) => format!("did you mean `{best}`? {list}"),
        None => list,
    }
}

/// The first `key: value` entry at or after `from` (1-based line) whose value is `value`
/// (quoted or not), as its (line, column) and key.
fn entry_with_value<'a>(
    src: &'a str,
    from: usize,
    value: &str,
) -> Option<((usize, usize), &'a str)> {
    src.lines()
        .enumerate()
        .skip(from.saturating_sub(1))
        .find_map(|(i, l)| {
            let t = l.trim_start();
            let (k, v) = t.split_once(':')?;
            let v = v.trim().trim_matches(|c| c == '"' || c == '\'');
            (v == value && !k.contains(' ')).then(|| ((i + 1, l.len() - t.len() + 1), k))
        })
}

/// Names between backticks in a serde message: "expected one of `a`, `b`".
fn backticked(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// Turns a serde_yaml_ng error into a diagnostic with the key path split out and a hint.
pub(crate) fn from_yaml_error(path: &Path, src: &str, err: &serde_yaml_ng::Error) -> Diagnostic {
    let full = err.to_string();
    // serde_yaml_ng appends " at line L column C"; the location is reported separately.
    // Other positions in the text (a syntax error's "while parsing … at line 8") stay.
    let suffix = err
        .location()
        .map(|l| format!(" at line {} column {}", l.line(), l.column()))
        .unwrap_or_default();
    let text = full.strip_suffix(suffix.as_str()).unwrap_or(&full);
    // A leading "server.args[1]: " is the key path.
    let (mut key, message) = match text.split_once(": ") {
        Some((k, m)) if !k.contains(' ') && !k.is_empty() => (Some(k.to_string()), m.to_string()),
        _ => (None, text.to_string()),
    };
    let join = |parent: &Option<String>, child: &str| match parent {
        Some(p) => format!("{p}.{child}"),
        None => child.to_string(),
    };
    let names = backticked(&message);
    let mut help = None;
    let mut line_col = err.location().map(|l| (l.line(), l.column()));
    if let Some(rest) = message.strip_prefix("unknown field ") {
        let wrong = names.first().copied().unwrap_or_default();
        let valid = backticked(rest.split_once("expected").map_or("", |x| x.1));
        key = Some(join(&key, wrong));
        help = Some(suggest(wrong, &valid, "valid keys here"));
    } else if message.starts_with("unknown variant ") {
        let wrong = names.first().copied().unwrap_or_default();
        let valid: Vec<&str> = names.iter().skip(1).copied().collect();
        help = Some(suggest(wrong, &valid, "choose one of"));
    } else if message.starts_with("missing field ") {
        let field = names.first().copied().unwrap_or_default();
        key = Some(join(&key, field));
        help = Some(format!("add `{field}:`; it is required here"));
        // serde points at the start of the enclosing mapping; name that key's line instead.
        if let Some(parent) = key.as_deref().and_then(|k| k.rsplit_once('.')).map(|x| x.0) {
            line_col = locate(src, parent).or(line_col);
        }
    } else if err.location().is_none() || key.is_none() && names.is_empty() {
        help = Some("check brackets, quotes and indentation at and just before this line".into());
    } else if message.contains("expected a string") {
        // The argv help fits list entries only (`server.args[1]`); `name:` and the like
        // take one text value.
        let in_list = key.as_deref().is_some_and(|k| k.ends_with(']'));
        help = Some(if in_list {
            "each entry is one argv string; quote it, e.g. \"0.85\"".into()
        } else {
            "write one text value here, e.g. `name: demo`; quote it if it holds ':' or '#'".into()
        });
    } else if key.as_deref().is_some_and(|k| k.ends_with("port")) {
        help = Some("ports are whole numbers from 1 to 65535".into());
    }
    if message.contains("longer than the most sparkctl accepts") {
        help = Some("write the time it needs, e.g. 90s or 10m".into());
    } else if message.contains("larger than the most sparkctl accepts") {
        help = Some("write the size with its unit, e.g. 16g or 512m".into());
    }
    // Errors raised inside a value's own parser (durations, sizes) carry the parent's path
    // and the position where the parent mapping starts: find the entry that holds the
    // value the message quotes, from there on.
    // (Their messages start with the quoted value: "`16777215t` is larger than …".)
    let own_parser = message.starts_with('`');
    if let (Some((line, _)), Some(value), true) = (line_col, names.first(), own_parser) {
        if let Some((at, name)) = entry_with_value(src, line, value) {
            line_col = Some(at);
            if let Some(k) = key.as_mut() {
                if !k.ends_with(name) {
                    *k = format!("{k}.{name}");
                }
            }
        }
    }
    // Otherwise the line names the key itself (`timeout:` under `health`).
    if let (Some((line, _)), Some(k)) = (line_col, key.as_mut()) {
        let own = src.lines().nth(line.saturating_sub(1)).and_then(|l| {
            let t = l.trim_start();
            key_of(t).filter(|name| !t.starts_with('-') && !name.contains(' '))
        });
        if let Some(name) = own {
            if !k.ends_with(name) && !message.starts_with("missing field") {
                *k = format!("{k}.{name}");
            }
        }
    }
    Diagnostic::at(path, line_col, key, message, help)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_suggests_typos_only() {
        assert_eq!(nearest("prot", ["port", "host", "args"]), Some("port"));
        assert_eq!(nearest("shm_sise", ["shm_size", "ipc"]), Some("shm_size"));
        assert_eq!(nearest("zzzzzz", ["port", "host"]), None);
    }
}
