//! The house rules, read from the source itself: no file over 600 lines, no function over
//! 120, and no two sibling modules that use each other (directly or round a circle), at
//! any level from the crate's top modules down.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const MAX_FILE_LINES: usize = 600;
const MAX_FN_LINES: usize = 120;

type ModPath = Vec<String>;

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn read_sources() -> BTreeMap<ModPath, (PathBuf, String)> {
    let root = src_dir();
    let mut files = Vec::new();
    sources(&root, &mut files);
    files
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(&root).unwrap().with_extension("");
            let mut m: ModPath = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(m.last().map(String::as_str), Some("mod" | "lib" | "main")) {
                m.pop();
            }
            let text = std::fs::read_to_string(&p).unwrap();
            (m, (p, text))
        })
        .collect()
}

/// The code a module's imports are read from: no unit tests, no line comments.
fn code_of(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    text.lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The leading `a::b::c` of a use-tree item, as segments.
fn segments(item: &str) -> Vec<String> {
    item.trim()
        .trim_start_matches("::")
        .split("::")
        .map(str::trim)
        .take_while(|s| !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_'))
        .map(String::from)
        .collect()
}

/// The items of a `{…}` group, split at its top-level commas.
fn group_items(group: &str) -> Vec<&str> {
    let (mut depth, mut start, mut out) = (0, 0, Vec::new());
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&group[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&group[start..]);
    out
}

/// Every module `code` (in module `me`) names through `crate::` or `super::`.
fn references(me: &ModPath, code: &str, modules: &BTreeSet<ModPath>) -> BTreeSet<ModPath> {
    let path = regex::Regex::new(r"\b(crate|super)((?:::\w+)+)(::\{)?").unwrap();
    let mut out = BTreeSet::new();
    for m in path.captures_iter(code) {
        let mut base: ModPath = match &m[1] {
            "crate" => Vec::new(),
            _ => me[..me.len().saturating_sub(1)].to_vec(),
        };
        base.extend(segments(&m[2]));
        let mut named = vec![base.clone()];
        if m.get(3).is_some() {
            let open = m.get(0).unwrap().end();
            let mut depth = 1;
            let close = code[open..]
                .char_indices()
                .find(|&(_, c)| {
                    depth += match c {
                        '{' => 1,
                        '}' => -1,
                        _ => 0,
                    };
                    depth == 0
                })
                .map_or(code.len(), |(i, _)| open + i);
            for item in group_items(&code[open..close]) {
                let mut p = base.clone();
                p.extend(segments(item));
                named.push(p);
            }
        }
        for p in named {
            if let Some(k) = (1..=p.len()).rev().find(|&k| modules.contains(&p[..k])) {
                out.insert(p[..k].to_vec());
            }
        }
    }
    out
}

/// Strongly connected components of more than one node (Tarjan).
fn circles(
    nodes: &BTreeSet<String>,
    edges: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<Vec<String>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<String, usize>,
        low: BTreeMap<String, usize>,
        stack: Vec<String>,
        found: Vec<Vec<String>>,
    }
    fn visit(w: &mut Walk, v: &str) {
        let i = w.index.len();
        w.index.insert(v.into(), i);
        w.low.insert(v.into(), i);
        w.stack.push(v.into());
        for u in w.edges.get(v).into_iter().flatten() {
            if !w.index.contains_key(u) {
                visit(w, u);
                let l = w.low[v].min(w.low[u]);
                w.low.insert(v.into(), l);
            } else if w.stack.contains(u) {
                let l = w.low[v].min(w.index[u]);
                w.low.insert(v.into(), l);
            }
        }
        if w.low[v] == w.index[v] {
            let at = w.stack.iter().position(|x| x == v).unwrap();
            let comp: Vec<String> = w.stack.split_off(at);
            if comp.len() > 1 {
                w.found.push(comp);
            }
        }
    }
    let mut w = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for n in nodes {
        if !w.index.contains_key(n) {
            visit(&mut w, n);
        }
    }
    w.found
}

#[test]
fn no_source_file_is_over_600_lines() {
    let long: Vec<String> = read_sources()
        .values()
        .filter(|(_, text)| text.lines().count() > MAX_FILE_LINES)
        .map(|(p, text)| format!("{} ({} lines)", p.display(), text.lines().count()))
        .collect();
    assert!(long.is_empty(), "split these files: {long:?}");
}

#[test]
fn no_function_is_over_120_lines() {
    let start =
        regex::Regex::new(r"^(\s*)(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?fn\s+(\w+)").unwrap();
    let mut long = Vec::new();
    for (path, text) in read_sources().values() {
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let Some(m) = start.captures(line) else {
                continue;
            };
            // The body ends at the first `}` back at the signature's indentation.
            let Some(open) = (i..lines.len()).find(|&j| {
                let l = lines[j].trim_end();
                l.ends_with('{') || l.ends_with(';')
            }) else {
                continue;
            };
            if lines[open].trim_end().ends_with(';') {
                continue;
            }
            let close = format!("{}}}", &m[1]);
            let end = (open + 1..lines.len())
                .find(|&j| lines[j] == close)
                .unwrap_or(lines.len() - 1);
            if end - i + 1 > MAX_FN_LINES {
                long.push(format!(
                    "{}:{} {} ({} lines)",
                    path.display(),
                    i + 1,
                    &m[6],
                    end - i + 1
                ));
            }
        }
    }
    assert!(long.is_empty(), "split these functions: {long:?}");
}

#[test]
fn no_sibling_modules_use_each_other() {
    let sources = read_sources();
    let modules: BTreeSet<ModPath> = sources.keys().cloned().collect();
    let uses: BTreeMap<&ModPath, BTreeSet<ModPath>> = sources
        .iter()
        .map(|(m, (_, text))| (m, references(m, &code_of(text), &modules)))
        .collect();
    // The checker sees a known circle, so a regression in it cannot pass unnoticed.
    let probe = references(
        &vec!["a".into(), "b".into()],
        "use super::c::{self, d::E};\nuse crate::x::{y, z::W};",
        &[
            vec!["a"],
            vec!["a", "c"],
            vec!["a", "c", "d"],
            vec!["x", "z"],
        ]
        .iter()
        .map(|v| v.iter().map(|s| s.to_string()).collect())
        .collect(),
    );
    assert!(
        probe.contains(&vec!["a".to_string(), "c".into(), "d".into()]),
        "{probe:?}"
    );
    assert!(
        probe.contains(&vec!["x".to_string(), "z".into()]),
        "{probe:?}"
    );
    let ring: BTreeMap<String, BTreeSet<String>> = [("p", "q"), ("q", "r"), ("r", "p")]
        .into_iter()
        .map(|(a, b)| (a.to_string(), BTreeSet::from([b.to_string()])))
        .collect();
    let nodes = ["p", "q", "r", "s"].map(String::from).into();
    assert_eq!(circles(&nodes, &ring).len(), 1);

    let parents: BTreeSet<ModPath> = modules
        .iter()
        .filter(|m| !m.is_empty())
        .map(|m| m[..m.len() - 1].to_vec())
        .collect();
    let mut found = Vec::new();
    for parent in &parents {
        let depth = parent.len();
        let under = |m: &ModPath| m.len() > depth && m[..depth] == parent[..];
        let kids: BTreeSet<String> = modules
            .iter()
            .filter(|m| under(m))
            .map(|m| m[depth].clone())
            .collect();
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (from, to) in &uses {
            for t in to
                .iter()
                .filter(|t| under(from) && under(t) && from[depth] != t[depth])
            {
                edges
                    .entry(from[depth].clone())
                    .or_default()
                    .insert(t[depth].clone());
            }
        }
        for c in circles(&kids, &edges) {
            let at = if parent.is_empty() {
                "crate".to_string()
            } else {
                parent.join("::")
            };
            found.push(format!("in {at}: {}", c.join(" <-> ")));
        }
    }
    assert!(found.is_empty(), "modules that use each other: {found:?}");
}
