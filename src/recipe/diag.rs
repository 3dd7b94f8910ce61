//! Diagnostics that point at a recipe's line: a key's position in the source, the nearest
//! valid word to a typo, and serde's errors rewritten with the key path split out and a hint.

use std::path::Path;

use crate::error::Diagnostic;
use crate::yaml::locate::{key_of, locate};

/// The problems found in one file, each at its key's line.
pub(crate) struct Report<'a> {
    pub(crate) path: &'a Path,
    pub(in crate::recipe) src: &'a str,
    pub(crate) diags: Vec<Diagnostic>,
}

impl<'a> Report<'a> {
    pub(crate) fn new(path: &'a Path, src: &'a str) -> Report<'a> {
        Report {
            path,
            src,
            diags: Vec::new(),
        }
    }

    /// A problem at `key`; an empty `help` is none.
    pub(crate) fn bad(&mut self, key: &str, message: String, help: &str) {
        let help = (!help.is_empty()).then(|| help.to_string());
        self.diags
            .push(diag_at(self.path, self.src, key, message, help));
    }
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
pub(crate) fn suggest(word: &str, candidates: &[&str], label: &str) -> String {
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
