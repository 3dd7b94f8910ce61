//! Reading recipe files, and every check that can be made without touching the machine.
//! Each problem becomes a `Diagnostic` naming file, line, column and key.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Component, Path, PathBuf};

use super::locate::{key_of, locate};
use super::{Model, PatchStep, Recipe, Runtime};
use crate::engine::{Engine, Flag};
use crate::error::{Diagnostic, Error, Location, Result};

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

/// Every recipe of one directory, sorted by name.
#[derive(Debug, Clone)]
pub struct RecipeSet {
    pub dir: PathBuf,
    pub recipes: Vec<LoadedRecipe>,
}

impl RecipeSet {
    pub fn get(&self, name: &str) -> Result<&LoadedRecipe> {
        self.recipes
            .iter()
            .find(|r| r.recipe.name == name)
            .ok_or_else(|| {
                let names: Vec<&str> = self
                    .recipes
                    .iter()
                    .map(|r| r.recipe.name.as_str())
                    .collect();
                let hint = suggest(name, &names, "known recipes");
                Error::Usage(format!(
                    "no recipe named `{name}` in {}; {hint}",
                    self.dir.display()
                ))
            })
    }
}

fn is_recipe_file(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml")
    )
}

/// Loads every `*.yaml`/`*.yml` directly in `dir`; all problems of all files are reported together.
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
    let mut diags = Vec::new();
    for path in paths {
        match load_file(&path) {
            Ok(loaded) => {
                if let Some(first) = recipes.iter().find(|r| r.recipe.name == loaded.recipe.name) {
                    diags.push(diag_at(
                        &loaded.path,
                        &loaded.source,
                        "name",
                        format!(
                            "duplicate recipe name `{}`: {} defines it too",
                            loaded.recipe.name,
                            first.path.display()
                        ),
                        Some("keep one file per recipe name".into()),
                    ));
                } else {
                    recipes.push(loaded);
                }
            }
            Err(Error::Invalid(mut d)) => diags.append(&mut d),
            Err(other) => return Err(other),
        }
    }
    if !diags.is_empty() {
        return Err(Error::Invalid(diags));
    }
    recipes.sort_by(|a, b| a.recipe.name.cmp(&b.recipe.name));
    Ok(RecipeSet {
        dir: dir.to_path_buf(),
        recipes,
    })
}

/// Parses and checks one recipe file.
pub fn load_file(path: &Path) -> Result<LoadedRecipe> {
    let source = std::fs::read_to_string(path)
        .map_err(|e| Error::io(format!("cannot read recipe {}", path.display()), e))?;
    let recipe: Recipe = serde_yaml_ng::from_str(&source)
        .map_err(|e| Error::Invalid(vec![from_yaml_error(path, &source, &e)]))?;
    let diags = check(path, &source, &recipe);
    if !diags.is_empty() {
        return Err(Error::Invalid(diags));
    }
    Ok(LoadedRecipe {
        recipe,
        path: path.to_path_buf(),
        source,
    })
}

fn diag_at(path: &Path, src: &str, key: &str, message: String, help: Option<String>) -> Diagnostic {
    // A key that is absent is reported where it belongs: under its parent, or for a
    // missing top-level key at the line that makes it needed.
    let parent = key.rsplit_once('.').map(|x| x.0);
    let found = locate(src, key)
        .or_else(|| parent.and_then(|p| locate(src, p)))
        .or_else(|| locate(src, "runtime"))
        .or_else(|| locate(src, "engine"));
    let (line, column) = match found {
        Some((l, c)) => (Some(l), Some(c)),
        None => (None, None),
    };
    Diagnostic {
        location: Location {
            file: path.to_path_buf(),
            line,
            column,
            key: Some(key.to_string()),
        },
        message,
        help,
    }
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
fn suggest(word: &str, candidates: &[&str], label: &str) -> String {
    let list = format!("{label}: {}", candidates.join(", "));
    match nearest(word, candidates.iter().copied()) {
        Some(best) => format!("did you mean `{best}`? {list}"),
        None => list,
    }
}

/// Names between backticks in a serde message: "expected one of `a`, `b`".
fn backticked(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// Turns a serde_yaml_ng error into a diagnostic with the key path split out and a hint.
fn from_yaml_error(path: &Path, src: &str, err: &serde_yaml_ng::Error) -> Diagnostic {
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
        help = Some("each entry is one argv string; quote it, e.g. \"0.85\"".into());
    } else if key.as_deref().is_some_and(|k| k.ends_with("port")) {
        help = Some("ports are whole numbers from 1 to 65535".into());
    }
    // Errors raised inside a value's own parser carry the parent's path; the line names
    // the key itself (`timeout:` under `health`).
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
    Diagnostic {
        location: Location {
            file: path.to_path_buf(),
            line: line_col.map(|x| x.0),
            column: line_col.map(|x| x.1),
            key,
        },
        message,
        help,
    }
}

/// Gates the benchmark knows; a rule is `OP NUMBER[%|ms]`.
pub const GATES: &[&str] = &[
    "non_empty",
    "expected_answer",
    "no_markdown",
    "thinking_leak",
    "tool_calls",
    "ttft_p50_ms",
    "ttfo_p50_ms",
    "decode_tps_p50",
    "vs_production_ttft",
    "vs_production_decode",
];

fn gate_rule_ok(rule: &str) -> bool {
    let rule = rule.trim();
    let Some(op) = ["==", ">=", "<=", "<", ">"]
        .into_iter()
        .find(|op| rule.starts_with(op))
    else {
        return false;
    };
    let number = rule[op.len()..].trim();
    let number = number
        .strip_suffix('%')
        .or_else(|| number.strip_suffix("ms"))
        .unwrap_or(number)
        .trim();
    number.parse::<f64>().is_ok_and(f64::is_finite)
}

fn env_name_ok(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A path inside the model dir: relative, no `..`.
fn inside(path: &str) -> bool {
    let p = Path::new(path);
    !path.is_empty()
        && p.components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

const ULIMITS: &[&str] = &[
    "core",
    "cpu",
    "data",
    "fsize",
    "locks",
    "memlock",
    "msgqueue",
    "nice",
    "nofile",
    "nproc",
    "rss",
    "rtprio",
    "rttime",
    "sigpending",
    "stack",
];

/// Checks serde cannot make: cross-field rules and the values' meaning.
fn check(path: &Path, src: &str, r: &Recipe) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let mut bad = |key: &str, message: String, help: &str| {
        out.push(diag_at(
            path,
            src,
            key,
            message,
            (!help.is_empty()).then(|| help.to_string()),
        ));
    };

    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    if r.name != stem {
        bad(
            "name",
            format!(
                "recipe name `{}` does not match its file name `{stem}`",
                r.name
            ),
            &format!("rename the file to {}.yaml or set `name: {stem}`", r.name),
        );
    }
    let name_ok = r
        .name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && r.name.chars().all(|c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.' || c == '_'
        });
    if !name_ok {
        bad(
            "name",
            format!("`{}` is not a recipe name", r.name),
            "use lowercase letters, digits, '-', '_' and '.', starting with a letter or digit",
        );
    }

    let profile = r.engine.profile();
    let runtime = r.runtime.unwrap_or(profile.runtimes[0]);
    if !profile.runtimes.contains(&runtime) {
        bad(
            "runtime",
            format!("engine {} cannot run under runtime {}", r.engine, runtime.as_str()),
            &format!(
                "use `runtime: {}`: {}; to run another OpenAI-compatible server on the host, use `engine: openai`",
                profile.runtimes[0].as_str(),
                profile.runtime_note
            ),
        );
    }
    match runtime {
        Runtime::Docker => {
            if r.image.as_deref().is_none_or(str::is_empty) {
                bad(
                    "image",
                    "runtime docker needs an image".into(),
                    "add `image: REPO:TAG`; `sparkctl images pin` then locks its digest",
                );
            }
            if r.binary.is_some() {
                bad(
                    "binary",
                    "`binary` is for runtime process; this recipe runs in docker".into(),
                    "remove it, or set `runtime: process`",
                );
            }
        }
        Runtime::Process => {
            if r.image.is_some() {
                bad(
                    "image",
                    "`image` is for runtime docker; this recipe runs a host process".into(),
                    "remove it, or set `runtime: docker`",
                );
            }
            if r.binary.is_none() && r.engine != Engine::Sim {
                bad(
                    "binary",
                    "runtime process needs `binary`, the server executable on the host".into(),
                    "e.g. `binary: ~/llama.cpp/build/bin/llama-server`",
                );
            }
            let s = &r.server;
            let docker_only = [
                ("server.gpus", s.gpus.is_some()),
                ("server.ipc", s.ipc.is_some()),
                ("server.shm_size", s.shm_size.is_some()),
                ("server.ulimits", !s.ulimits.is_empty()),
                ("server.user", s.user.is_some()),
                ("server.container_port", s.container_port.is_some()),
                (
                    "model.mount",
                    r.model.as_ref().is_some_and(|m| m.mount.is_some()),
                ),
            ];
            for (key, set) in docker_only {
                if set {
                    bad(
                        key,
                        "only applies to runtime docker".into(),
                        "remove it; a host process gets the host's GPU, IPC and limits",
                    );
                }
            }
        }
    }

    let needs_model = !matches!(r.engine, Engine::Openai | Engine::Sim);
    if needs_model && r.model.is_none() {
        bad(
            "engine",
            format!("engine {} needs `model.path`", r.engine),
            "add `model: {path: ~/models/NAME}`",
        );
    }

    let s = &r.server;
    for (key, port) in [
        ("server.port", Some(s.port)),
        ("server.container_port", s.container_port),
    ] {
        if port == Some(0) {
            bad(
                key,
                "port 0 is not a port".into(),
                "ports are whole numbers from 1 to 65535",
            );
        }
    }
    if s.host.parse::<IpAddr>().is_err() {
        bad(
            "server.host",
            format!("`{}` is not an IP address to bind", s.host),
            "use 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)",
        );
    }
    for (i, arg) in s.args.iter().enumerate() {
        let flag = arg.split('=').next().unwrap_or(arg);
        let owned = [
            (profile.port_flag, "server.port"),
            (profile.host_flag, "server.host"),
            (profile.model_flag, "model.path"),
            (profile.served_name_flag, "model.served_name"),
        ];
        for (f, from) in owned {
            if matches!(f, Flag::Named(n) if n == flag) {
                bad(
                    &format!("server.args[{i}]"),
                    format!("`{flag}` is set by sparkctl from `{from}`"),
                    &format!("remove it from args and set `{from}` instead"),
                );
            }
        }
        if arg.contains('\n') {
            bad(
                &format!("server.args[{i}]"),
                "an argument may not span lines".into(),
                "split it into one entry per argv word",
            );
        }
    }
    for name in s.env.keys() {
        if !env_name_ok(name) {
            bad(
                &format!("server.env.{name}"),
                format!("`{name}` is not an environment variable name"),
                "use letters, digits and '_', not starting with a digit",
            );
        }
    }
    for (i, name) in s.env_from_host.iter().enumerate() {
        if !env_name_ok(name) {
            bad(
                &format!("server.env_from_host[{i}]"),
                format!("`{name}` is not an environment variable name"),
                "list variable names only; values are read from the host at start",
            );
        }
        if s.env.contains_key(name) {
            bad(
                &format!("server.env_from_host[{i}]"),
                format!("`{name}` is also set in server.env"),
                "keep it in one place",
            );
        }
    }
    for name in s.ulimits.keys() {
        if !ULIMITS.contains(&name.as_str()) {
            let help = suggest(name, ULIMITS, "known ulimits");
            bad(
                &format!("server.ulimits.{name}"),
                format!("unknown ulimit `{name}`"),
                &help,
            );
        }
    }
    if let Some(gb) = s.memory_gb {
        if !(gb > 0.0 && gb <= 128.0) {
            bad(
                "server.memory_gb",
                format!("{gb} GB is not a memory budget on a 128 GB machine"),
                "give the GB the deployment needs, e.g. 12",
            );
        }
    }
    if let Some(user) = &s.user {
        let ok = user.split(':').count() <= 2 && user.split(':').all(|p| !p.is_empty());
        if !ok {
            bad(
                "server.user",
                format!("`{user}` is not a user"),
                "write UID, UID:GID or a user name",
            );
        }
    }
    if let Some(p) = &r.health.path {
        if !p.starts_with('/') {
            bad(
                "health.path",
                format!("`{p}` is not an HTTP path"),
                "start it with '/', e.g. /health",
            );
        }
    }
    if let Some(within) = r.health.completion_timeout {
        let timeout = r.health.timeout.map_or(
            std::time::Duration::from_secs(profile.health_timeout_secs),
            |t| t.0,
        );
        if within.0.is_zero() {
            bad(
                "health.completion_timeout",
                "0s leaves the check completion no time to answer".into(),
                "give it the seconds a one-token answer may take once loaded, e.g. 20s",
            );
        } else if within.0 >= timeout {
            bad(
                "health.completion_timeout",
                format!(
                    "{within} is not shorter than health.timeout ({})",
                    crate::units::format_duration(timeout)
                ),
                "the completion runs inside health.timeout; make it shorter (left out, it is \
                 20s, at most half of health.timeout) or raise health.timeout",
            );
        }
    }
    if let Some(bench) = &r.bench {
        for (gate, rule) in &bench.gates {
            let key = format!("bench.gates.{gate}");
            if !GATES.contains(&gate.as_str()) {
                let help = suggest(gate, GATES, "gates");
                bad(&key, format!("unknown gate `{gate}`"), &help);
            } else if !gate_rule_ok(rule) {
                bad(
                    &key,
                    format!("`{rule}` is not a gate rule"),
                    "write an operator and a number, e.g. \"== 0%\", \">= 60%\" or \"<= 1500ms\"",
                );
            }
        }
    }
    if let Some(model) = &r.model {
        check_patches(path, src, model, &mut out);
    }
    out
}

fn check_patches(path: &Path, src: &str, model: &Model, out: &mut Vec<Diagnostic>) {
    // patches/ lives beside recipes/ in the repository.
    let repo = path
        .parent()
        .and_then(Path::parent)
        .unwrap_or(Path::new("."));
    for (i, step) in model.patches.iter().enumerate() {
        let base = format!("model.patches[{i}].{}", step.kind());
        let mut rel: BTreeMap<String, &str> = BTreeMap::new();
        match step {
            PatchStep::JsonEdit { file, ops } => {
                rel.insert(format!("{base}.file"), file);
                for (j, op) in ops.iter().enumerate() {
                    let pointer = match op {
                        super::JsonOp::Set { pointer, .. }
                        | super::JsonOp::Rename { pointer, .. }
                        | super::JsonOp::Delete { pointer } => pointer,
                    };
                    if !pointer.starts_with('/') {
                        out.push(diag_at(
                            path,
                            src,
                            &format!("{base}.ops[{j}]"),
                            format!("`{pointer}` is not a JSON pointer"),
                            Some("JSON pointers start with '/', e.g. /model_type".into()),
                        ));
                    }
                }
            }
            PatchStep::CopyFrom { donor, files } => {
                if donor.is_empty() {
                    out.push(diag_at(
                        path,
                        src,
                        &format!("{base}.donor"),
                        "the donor model dir is empty".into(),
                        None,
                    ));
                }
                for (j, f) in files.iter().enumerate() {
                    rel.insert(format!("{base}.files[{j}]"), f);
                }
            }
            PatchStep::WriteFile { path: p, from, .. } => {
                rel.insert(format!("{base}.path"), p);
                let shipped = repo.join(from);
                if !from.starts_with("patches/") || !inside(from) {
                    out.push(diag_at(
                        path,
                        src,
                        &format!("{base}.from"),
                        format!("`{from}` is not under patches/"),
                        Some("ship the file in the repository's patches/ directory".into()),
                    ));
                } else if !shipped.is_file() {
                    out.push(diag_at(
                        path,
                        src,
                        &format!("{base}.from"),
                        format!("{} does not exist", shipped.display()),
                        Some("add the file to patches/ or fix the path".into()),
                    ));
                }
            }
            PatchStep::Chown { to } => {
                let ok = to == "invoking-user"
                    || to
                        .split_once(':')
                        .is_some_and(|(u, g)| u.parse::<u32>().is_ok() && g.parse::<u32>().is_ok());
                if !ok {
                    out.push(diag_at(
                        path,
                        src,
                        &format!("{base}.to"),
                        format!("`{to}` is not an owner"),
                        Some("write `invoking-user` or UID:GID".into()),
                    ));
                }
            }
            PatchStep::Expect { file, pointer, .. } => {
                rel.insert(format!("{base}.file"), file);
                if !pointer.starts_with('/') {
                    out.push(diag_at(
                        path,
                        src,
                        &format!("{base}.pointer"),
                        format!("`{pointer}` is not a JSON pointer"),
                        Some("JSON pointers start with '/'".into()),
                    ));
                }
            }
            PatchStep::ExpectFiles { files } => {
                for (j, f) in files.iter().enumerate() {
                    rel.insert(format!("{base}.files[{j}]"), f);
                }
            }
            PatchStep::WrapVlConfig { .. } | PatchStep::ExpectSafetensors {} => {}
        }
        for (key, p) in rel {
            if !inside(p) {
                out.push(diag_at(
                    path,
                    src,
                    &key,
                    format!("`{p}` leaves the model directory"),
                    Some("use a path relative to model.path, without '..'".into()),
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate_rules() {
        for ok in ["== 0%", ">= 60%", "<= 1500ms", "> 25", "<=1.5"] {
            assert!(gate_rule_ok(ok), "{ok}");
        }
        for bad in ["0%", "== lots", "=> 3", ""] {
            assert!(!gate_rule_ok(bad), "{bad}");
        }
    }

    #[test]
    fn nearest_suggests_typos_only() {
        assert_eq!(nearest("prot", ["port", "host", "args"]), Some("port"));
        assert_eq!(nearest("shm_sise", ["shm_size", "ipc"]), Some("shm_size"));
        assert_eq!(nearest("zzzzzz", ["port", "host"]), None);
    }

    #[test]
    fn paths_inside_the_model_dir() {
        assert!(inside("config.json"));
        assert!(inside("sub/x.json"));
        assert!(!inside("../x"));
        assert!(!inside("/etc/passwd"));
        assert!(!inside("a/../../x"));
    }
}
