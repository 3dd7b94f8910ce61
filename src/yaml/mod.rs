//! Every YAML file sparkctl reads (recipes, suites, images.lock) passes here before serde
//! sees it. serde_yaml_ng accepts things a reviewed data file must not hold, and libyaml
//! under it spends time growing with the square of the nesting depth before any limit of
//! serde's applies. So, in order, each cheap and each naming the line and column:
//!
//! 1. size: at most `MAX_BYTES`;
//! 2. UTF-8, with the position of the first bad byte;
//! 3. one pass over the YAML events (yaml-rust2, a pull parser, so it stops at the first
//!    problem): nesting at most `MAX_DEPTH`, no tags, no key twice in one mapping (serde
//!    would keep the last one silently), and the plain scalars that YAML reads as null or
//!    a boolean, which serde turns into the strings "null" and "true" where a string is
//!    expected (a recipe decides where that is wrong: `server.args`).
//!
//! A syntax error in step 3 is left to serde_yaml_ng, whose messages the diagnostics (and
//! `tests/bad-recipes/`) are written against; the depth was bounded up to that point and a
//! cruder bracket count bounds what follows it.

pub(crate) mod locate;

use std::collections::HashMap;
use std::path::Path;

use serde::de::DeserializeOwned;
use yaml_rust2::parser::{Event, Parser, Tag};
use yaml_rust2::scanner::{Marker, TScalarStyle};

use crate::error::{Diagnostic, Error, Result};

/// A recipe is a page; the built-in suite is 6 KB. A megabyte is far beyond any real file
/// and keeps the worst case of every later step well under a second.
pub(crate) const MAX_BYTES: usize = 1 << 20;
/// Recipes nest about 6 deep; JSON values in patch steps a few more.
pub(crate) const MAX_DEPTH: usize = 64;

/// A plain scalar YAML resolves to null (`null`, `~`, empty) or a boolean (`true`, `false`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Loose {
    /// Key path: `server.args[1]`.
    pub(crate) path: String,
    /// As written.
    pub(crate) text: String,
    pub(crate) line: usize,
    pub(crate) column: usize,
}

/// Text that passed the checks, and what serde will not say about it.
#[derive(Debug)]
pub(crate) struct Prepared<'a> {
    pub(crate) text: &'a str,
    pub(crate) loose: Vec<Loose>,
}

fn diag(
    file: &Path,
    at: Option<(usize, usize)>,
    key: Option<String>,
    message: String,
    help: &str,
) -> Box<Diagnostic> {
    Box::new(Diagnostic::at(
        file,
        at,
        key,
        message,
        Some(help.to_string()),
    ))
}

/// 1-based line and column (in characters) of byte `offset` of `bytes`.
fn position(bytes: &[u8], offset: usize) -> (usize, usize) {
    let before = &bytes[..offset.min(bytes.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    // Only the valid prefix is counted, so this never splits a character.
    let column = String::from_utf8_lossy(&before[start..]).chars().count() + 1;
    (line, column)
}

/// Steps 1–3 above. The `Diagnostic` names the file, line and column and what to do.
pub(crate) fn prepare<'a>(file: &Path, bytes: &'a [u8]) -> Result<Prepared<'a>, Box<Diagnostic>> {
    if bytes.len() > MAX_BYTES {
        return Err(diag(
            file,
            None,
            None,
            format!(
                "{} bytes is too large for a sparkctl file (at most {MAX_BYTES})",
                bytes.len()
            ),
            "recipes, suites and images.lock are short YAML files; is this the right file?",
        ));
    }
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let at = e.valid_up_to();
        diag(
            file,
            Some(position(bytes, at)),
            None,
            format!(
                "not UTF-8 text: byte 0x{:02x} at offset {at} is not part of a UTF-8 character",
                bytes[at]
            ),
            "save the file as UTF-8 (e.g. `iconv -f LATIN1 -t UTF-8`)",
        )
    })?;
    let loose = Walk::new(file, text).run()?;
    Ok(Prepared { text, loose })
}

/// A YAML file by name, as suites and evaluation sets are found: `spec` itself when
/// `as_path` says it names a file, else `dir/SPEC.yaml`, else the built-in text of that
/// name. The file (or `<built-in NAME>`) and its text; None when none of them is there.
pub(crate) fn named(
    spec: &str,
    dir: &Path,
    built_in: &[(&str, &str)],
    as_path: bool,
) -> Result<Option<(std::path::PathBuf, String)>> {
    let read = |p: &Path| {
        std::fs::read_to_string(p).map_err(|e| Error::io(format!("cannot read {}", p.display()), e))
    };
    let in_dir = dir.join(format!("{spec}.yaml"));
    if as_path && Path::new(spec).is_file() {
        return Ok(Some((
            Path::new(spec).to_path_buf(),
            read(Path::new(spec))?,
        )));
    }
    if in_dir.is_file() {
        return Ok(Some((in_dir.clone(), read(&in_dir)?)));
    }
    Ok(built_in
        .iter()
        .find(|(name, _)| *name == spec)
        .map(|(_, text)| {
            (
                std::path::PathBuf::from(format!("<built-in {spec}>")),
                text.to_string(),
            )
        }))
}

/// `prepare`, then serde: for files whose serde errors need no more than file:line:column
/// and one fix (suites, images.lock).
pub fn from_slice<T: DeserializeOwned>(file: &Path, bytes: &[u8], help: &str) -> Result<T> {
    let prepared = prepare(file, bytes).map_err(|d| Error::Invalid(vec![*d]))?;
    serde_yaml_ng::from_str(prepared.text).map_err(|e| Error::yaml(file, &e, help))
}

enum Frame {
    Sequence {
        index: usize,
    },
    Mapping {
        /// Each key seen, where it was.
        keys: HashMap<String, (usize, usize)>,
        /// The key whose value comes next; None while a key is expected.
        key: Option<String>,
    },
}

struct Walk<'f> {
    file: &'f Path,
    text: &'f str,
    stack: Vec<Frame>,
    loose: Vec<Loose>,
}

/// YAML 1.2 core schema: what a plain scalar means when it is not text.
fn null_or_bool(text: &str) -> bool {
    matches!(
        text,
        "" | "~"
            | "null"
            | "Null"
            | "NULL"
            | "true"
            | "True"
            | "TRUE"
            | "false"
            | "False"
            | "FALSE"
    )
}

impl<'f> Walk<'f> {
    fn new(file: &'f Path, text: &'f str) -> Self {
        Walk {
            file,
            text,
            stack: Vec::new(),
            loose: Vec::new(),
        }
    }

    /// `server.args[1]`, or `server` while its key is being read.
    fn path(&self) -> String {
        let mut out = String::new();
        for frame in &self.stack {
            match frame {
                Frame::Sequence { index } => out.push_str(&format!("[{index}]")),
                Frame::Mapping { key: Some(k), .. } => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(k);
                }
                Frame::Mapping { key: None, .. } => {}
            }
        }
        out
    }

    fn at(m: &Marker) -> (usize, usize) {
        (m.line(), m.col() + 1)
    }

    fn run(mut self) -> Result<Vec<Loose>, Box<Diagnostic>> {
        let text = self.text;
        let mut parser = Parser::new_from_str(text);
        loop {
            let (event, mark) = match parser.next_token() {
                Ok(e) => e,
                // serde_yaml_ng reports syntax errors in the words users know; bound
                // what libyaml will walk after this point first.
                Err(e) => {
                    return self
                        .bound_rest(text, e.marker().index())
                        .map(|()| self.loose)
                }
            };
            match event {
                Event::StreamEnd => return Ok(self.loose),
                Event::Scalar(value, style, _, tag) => {
                    self.refuse_tag(tag.as_ref(), &mark)?;
                    if self.is_key() {
                        self.key(value, &mark)?;
                        continue;
                    }
                    if style == TScalarStyle::Plain && null_or_bool(&value) {
                        let (line, column) = Self::at(&mark);
                        self.loose.push(Loose {
                            path: self.path(),
                            text: value,
                            line,
                            column,
                        });
                    }
                    self.value_done();
                }
                Event::Alias(_) => {
                    if self.is_key() {
                        self.key("*alias".into(), &mark)?;
                    } else {
                        self.value_done();
                    }
                }
                Event::SequenceStart(_, ref tag) | Event::MappingStart(_, ref tag) => {
                    self.refuse_tag(tag.as_ref(), &mark)?;
                    if self.is_key() {
                        // A mapping or sequence as a key: no schema of sparkctl's has one,
                        // and serde says so; it only needs a name here.
                        self.key_complex();
                    }
                    if self.stack.len() >= MAX_DEPTH {
                        return Err(self.too_deep(&mark));
                    }
                    self.stack
                        .push(if matches!(event, Event::SequenceStart(..)) {
                            Frame::Sequence { index: 0 }
                        } else {
                            Frame::Mapping {
                                keys: HashMap::new(),
                                key: None,
                            }
                        });
                }
                Event::SequenceEnd | Event::MappingEnd => {
                    self.stack.pop();
                    self.value_done();
                }
                Event::Nothing | Event::StreamStart | Event::DocumentStart | Event::DocumentEnd => {
                }
            }
        }
    }

    fn is_key(&self) -> bool {
        matches!(self.stack.last(), Some(Frame::Mapping { key: None, .. }))
    }

    fn key(&mut self, name: String, mark: &Marker) -> Result<(), Box<Diagnostic>> {
        let here = Self::at(mark);
        let parent = self.path();
        let Some(Frame::Mapping { keys, key }) = self.stack.last_mut() else {
            return Ok(());
        };
        if let Some(&(line, column)) = keys.get(&name) {
            let path = if parent.is_empty() {
                name.clone()
            } else {
                format!("{parent}.{name}")
            };
            return Err(diag(
                self.file,
                Some(here),
                Some(path),
                format!(
                    "duplicate key `{name}`: line {} sets it, and line {line} (column {column}) \
                     set it before",
                    here.0
                ),
                "keep one of the two lines; YAML would silently use the last one",
            ));
        }
        keys.insert(name.clone(), here);
        *key = Some(name);
        Ok(())
    }

    fn key_complex(&mut self) {
        if let Some(Frame::Mapping { key, .. }) = self.stack.last_mut() {
            *key = Some("?".into());
        }
    }

    /// A node ended: the next one in its parent is the next key, or the next item.
    fn value_done(&mut self) {
        match self.stack.last_mut() {
            Some(Frame::Sequence { index }) => *index += 1,
            Some(Frame::Mapping { key, .. }) => *key = None,
            None => {}
        }
    }

    fn refuse_tag(&self, tag: Option<&Tag>, mark: &Marker) -> Result<(), Box<Diagnostic>> {
        let Some(tag) = tag else { return Ok(()) };
        // As written: the parser expands `!!` to the YAML namespace.
        let tag = match tag.handle.as_str() {
            "tag:yaml.org,2002:" => format!("!!{}", tag.suffix),
            handle => format!("{handle}{}", tag.suffix),
        };
        // The event stands at its value; point at the tag before it on the same line.
        let (line, column) = Self::at(mark);
        let column = self
            .text
            .lines()
            .nth(line - 1)
            .and_then(|l| {
                let before: String = l.chars().take(column - 1).collect();
                before.rfind(&tag).map(|i| before[..i].chars().count() + 1)
            })
            .unwrap_or(column);
        let path = self.path();
        Err(diag(
            self.file,
            Some((line, column)),
            (!path.is_empty()).then_some(path),
            format!("YAML tag `{tag}` is not allowed: sparkctl files are plain data"),
            "remove the tag; quote the value if it is meant as text",
        ))
    }

    fn too_deep(&self, mark: &Marker) -> Box<Diagnostic> {
        diag(
            self.file,
            Some(Self::at(mark)),
            None,
            format!("nesting deeper than {MAX_DEPTH} levels"),
            "sparkctl files nest a few levels; look for runaway brackets or indentation",
        )
    }

    /// After a syntax error at byte `from`, libyaml (through serde) still reads on to
    /// its own error, which may come later: refuse before it if brackets opened after
    /// this point could nest past the limit. Counting every bracket over-counts (quoted
    /// ones too), which only matters in a file that is broken anyway.
    fn bound_rest(&self, text: &str, from: usize) -> Result<(), Box<Diagnostic>> {
        let mut depth = self.stack.len();
        for (i, b) in text.as_bytes().iter().enumerate().skip(from) {
            match b {
                b'[' | b'{' => depth += 1,
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            }
            if depth > MAX_DEPTH {
                let (line, column) = position(text.as_bytes(), i);
                return Err(diag(
                    self.file,
                    Some((line, column)),
                    None,
                    format!("nesting deeper than {MAX_DEPTH} levels"),
                    "sparkctl files nest a few levels; look for runaway brackets",
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str) -> Result<Vec<Loose>, String> {
        prepare(Path::new("f.yaml"), text.as_bytes())
            .map(|p| p.loose)
            .map_err(|d| d.to_string())
    }

    #[test]
    fn duplicate_keys_name_both_lines() {
        let err = check("bench:\n  gates:\n    a: x\n    b: y\n    a: z\n").unwrap_err();
        assert!(
            err.starts_with("f.yaml:5:5: bench.gates.a: duplicate key `a`"),
            "{err}"
        );
        assert!(err.contains("line 3 (column 5)"), "{err}");
        let err = check("x: {a: 1, a: 2}\n").unwrap_err();
        assert!(err.starts_with("f.yaml:1:11: x.a: duplicate key"), "{err}");
        // The same key in two mappings is fine, and so are list items.
        check("a: {k: 1}\nb: {k: 1}\nc: [1, 1]\n").unwrap();
    }

    #[test]
    fn tags_are_refused_where_they_stand() {
        let err = check("name: x\nimage: !!python/name:os.system y\n").unwrap_err();
        assert!(
            err.starts_with("f.yaml:2:8: image: YAML tag `!!python/name:os.system`"),
            "{err}"
        );
        assert!(err.contains("python/name:os.system"), "{err}");
        assert!(check("a: !local {b: 1}\n").is_err());
    }

    #[test]
    fn deep_nesting_is_refused_fast() {
        for deep in [
            "[".repeat(100_000),
            format!("a: {}", "[".repeat(100_000)),
            "- ".repeat(100_000),
            format!("{}x{}", "{a: ".repeat(50_000), "}".repeat(50_000)),
        ] {
            let started = std::time::Instant::now();
            let err = check(&deep).unwrap_err();
            assert!(err.contains("nesting deeper than 64"), "{err}");
            assert!(
                started.elapsed().as_millis() < 200,
                "{:?}",
                started.elapsed()
            );
        }
        check(&format!("{}1{}", "[".repeat(60), "]".repeat(60))).unwrap();
    }

    #[test]
    fn size_and_encoding_come_first() {
        let err = check(&"a".repeat(MAX_BYTES + 1)).unwrap_err();
        assert!(err.contains("too large"), "{err}");
        let err = prepare(Path::new("f.yaml"), b"name: x\nd: caf\xe9 ok\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("f.yaml:2:7: not UTF-8 text: byte 0xe9 at offset 14"),
            "{err}"
        );
    }

    #[test]
    fn null_and_bool_plain_scalars_are_reported_with_their_path() {
        let loose = check("server:\n  args: [--a, null, \"true\", true, ~, 3]\n").unwrap();
        let found: Vec<(&str, &str)> = loose
            .iter()
            .map(|l| (l.path.as_str(), l.text.as_str()))
            .collect();
        assert_eq!(
            found,
            [
                ("server.args[1]", "null"),
                ("server.args[3]", "true"),
                ("server.args[4]", "~")
            ]
        );
        assert_eq!((loose[0].line, loose[0].column), (2, 15));
    }
}
