//! The house rules, read from the source itself: no file over 600 lines, no function over
//! 120, no two sibling modules that use each other (directly or round a circle), at any
//! level from the crate's top modules down, one way out to the terminal, and a library that
//! exports only what the binary, the tests and the benches use (so rustc reports the rest
//! when it goes unused).

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

/// A `use` tree as its paths, each with the name it brings in: `a::{b as x, c::{self, d}}`
/// is a::b (x), a::c (c) and a::c::d (d); a glob names its parent.
fn expand(tree: &str) -> Vec<(Vec<String>, String)> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let (path, alias) = match tree.split_once(" as ") {
            Some((p, a)) => (p, Some(a.trim().to_string())),
            None => (tree, None),
        };
        let segs: Vec<String> = path
            .split("::")
            .map(str::trim)
            .filter(|s| !s.is_empty() && *s != "*")
            .map(String::from)
            .collect();
        let name = alias.or_else(|| segs.last().cloned()).unwrap_or_default();
        return vec![(segs, name)];
    };
    let close = tree.rfind('}').filter(|&c| c > open).unwrap_or(tree.len());
    let base = expand(tree[..open].trim_end_matches(':')).remove(0).0;
    let mut out = Vec::new();
    for item in group_items(&tree[open + 1..close]) {
        if item.trim().is_empty() {
            continue;
        }
        for (tail, name) in expand(item) {
            let mut p = base.clone();
            if tail != ["self"] {
                p.extend(tail);
            }
            let name = if name == "self" {
                p.last().cloned().unwrap_or_default()
            } else {
                name
            };
            out.push((p, name));
        }
    }
    out
}

/// `path` as written in module `me`, from the crate root; None for other crates.
fn absolute(me: &ModPath, path: &[String], modules: &BTreeSet<ModPath>) -> Option<ModPath> {
    let (mut base, mut rest) = (me.clone(), path);
    match path.first()?.as_str() {
        "crate" => (base, rest) = (Vec::new(), &path[1..]),
        "self" => rest = &path[1..],
        "super" => {
            while rest.first().is_some_and(|s| s == "super") {
                base.pop()?;
                rest = &rest[1..];
            }
        }
        child => {
            let mut m = me.clone();
            m.push(child.to_string());
            if !modules.contains(&m) {
                return None;
            }
        }
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// The length of the longest prefix of `path` that is a module.
fn module_of(path: &[String], modules: &BTreeSet<ModPath>) -> Option<usize> {
    (1..=path.len())
        .rev()
        .find(|&k| modules.contains(&path[..k]))
}

/// What each module re-exports: name → the module it comes from (`pub use start::plan_start`
/// in deploy makes `super::plan_start` a use of deploy::start).
type Reexports = BTreeMap<ModPath, BTreeMap<String, ModPath>>;

fn reexports(codes: &BTreeMap<ModPath, String>, modules: &BTreeSet<ModPath>) -> Reexports {
    let stmt = regex::Regex::new(r"(?m)^\s*pub(?:\([^)]*\))?\s+use\s+([^;]+);").unwrap();
    let mut out = Reexports::new();
    for (me, code) in codes {
        for m in stmt.captures_iter(code) {
            for (path, name) in expand(&m[1]) {
                let Some(full) = absolute(me, &path, modules) else {
                    continue;
                };
                if let Some(k) = module_of(&full, modules).filter(|&k| full[..k] != me[..]) {
                    out.entry(me.clone())
                        .or_default()
                        .insert(name, full[..k].to_vec());
                }
            }
        }
    }
    out
}

/// Every module `code` (in module `me`) uses: its `use` trees and the paths it writes
/// from `crate`, `self` or `super`, followed through the modules' re-exports.
fn references(
    me: &ModPath,
    code: &str,
    modules: &BTreeSet<ModPath>,
    reexported: &Reexports,
) -> BTreeSet<ModPath> {
    let stmt = regex::Regex::new(r"(?m)^\s*(?:pub(?:\([^)]*\))?\s+)?use\s+([^;]+);").unwrap();
    let inline = regex::Regex::new(r"\b(?:crate|self|super)(?:::\w+)+").unwrap();
    let mut paths: Vec<Vec<String>> = stmt
        .captures_iter(code)
        .flat_map(|m| expand(&m[1]).into_iter().map(|(p, _)| p))
        .collect();
    paths.extend(
        inline
            .find_iter(code)
            .map(|m| m.as_str().split("::").map(String::from).collect()),
    );
    let mut out = BTreeSet::new();
    for path in paths {
        let Some(full) = absolute(me, &path, modules) else {
            continue;
        };
        let Some(k) = module_of(&full, modules) else {
            continue;
        };
        out.insert(full[..k].to_vec());
        if let Some(target) = full.get(k).and_then(|n| reexported.get(&full[..k])?.get(n)) {
            out.insert(target.clone());
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

/// Users have neither the logbook nor the design notes: a message that cites them points
/// at nothing. Comments may (they are for contributors).
#[test]
fn no_message_cites_the_seeds_or_the_design_notes() {
    let cite = regex::Regex::new(r"(?i)seed 0\d\d|the seeds|DESIGN(\.md| §)").unwrap();
    let mut found = Vec::new();
    for (path, text) in read_sources().values() {
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if code.contains('"') && cite.is_match(code) {
                found.push(format!("{}:{}: {}", path.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "say what you mean instead: {found:#?}");
}

/// The files that may write to stdout or stderr themselves. cli/output.rs is the CLI's one
/// gateway to the terminal: it escapes what came from recipes, containers and servers, so
/// a `println!` anywhere else could put such text on the terminal raw. stdio.rs is the
/// stdout and stderr of sparkctl's own server processes (the front door, the simulated
/// engine), which their supervisors point at log files: a server's own log, not a
/// terminal's text (`sparkctl logs` shows it through the gateway).
const WRITE_TO_STDIO: [&str; 2] = ["cli/output.rs", "stdio.rs"];

/// The lines (from 1) of `text` that write to stdout or stderr directly: the print macros,
/// `dbg!`, and `std::io::stdout`/`stderr` called or passed (not a builder's `.stdout(…)`
/// for a child process). Comments are left out.
fn stdio_writes(text: &str) -> Vec<usize> {
    let writes =
        regex::Regex::new(r"\b(e?print(ln)?|dbg)!|(^|[^.\w])std(out|err)\(|\bio::std(out|err)\b")
            .unwrap();
    text.lines()
        .enumerate()
        .filter(|(_, l)| writes.is_match(l.split("//").next().unwrap_or_default()))
        .map(|(i, _)| i + 1)
        .collect()
}

#[test]
fn only_the_output_gateway_writes_to_the_terminal() {
    // The checker sees each way of writing, and not what only looks like one.
    for write in [
        r#"println!("{x}");"#,
        r#"  eprint!("no newline");"#,
        "print!(\"{text}\")",
        "dbg!(value)",
        r#"let _ = writeln!(std::io::stdout(), "x");"#,
        "let mut out = stdout().lock();",
        "    .with_writer(std::io::stderr)",
        "use std::io::stderr;",
    ] {
        assert_eq!(stdio_writes(write), [1], "{write}");
    }
    for not_one in [
        "out.say(format_args!(\"{x}\"));",
        "// println! belongs in the gateway",
        "writeln!(f, \"{x}\")?;",
        "Command::new(p).stdout(log).stderr(err)",
        "LogsOptionsBuilder::new().stdout(true)",
        "let said = String::from_utf8_lossy(&out.stdout);",
    ] {
        assert!(stdio_writes(not_one).is_empty(), "{not_one}");
    }

    let root = src_dir();
    let mut found = Vec::new();
    for (path, text) in read_sources().values() {
        let rel = path
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if WRITE_TO_STDIO.contains(&rel.as_str()) {
            continue;
        }
        let lines: Vec<&str> = text.lines().collect();
        for n in stdio_writes(text) {
            found.push(format!("src/{rel}:{n}: {}", lines[n - 1].trim()));
        }
    }
    assert!(
        found.is_empty(),
        "write through the CLI's output (out.say, out.warn, out.note, …), which escapes \
         what came from elsewhere: {found:#?}"
    );
}

/// The items lib.rs may export: the binary's entry point and the tests' and benches' kit.
const LIB_SURFACE: &[&str] = &["pub use cli::main;", "pub mod testkit {"];

/// What breaks the library's narrow surface, given lib.rs and every source file: an export
/// of lib.rs beyond `LIB_SURFACE` (a `pub mod` hides every unused item under it from
/// rustc's dead-code lint), lib.rs without `unreachable_pub` (which flags a `pub` item
/// nothing outside the crate can reach), or a file that allows either lint away unexplained.
fn surface_problems(lib: &str, files: &[(PathBuf, String)]) -> Vec<String> {
    let mut found: Vec<String> = code_of(lib)
        .lines()
        .filter(|l| l.starts_with("pub ") && !LIB_SURFACE.contains(l))
        .map(|l| {
            format!("lib.rs exports `{l}`: keep it private, or put what a test needs in testkit")
        })
        .collect();
    if !lib.contains("#![warn(unreachable_pub)]") {
        found.push("lib.rs lost `#![warn(unreachable_pub)]`".into());
    }
    for (path, text) in files {
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let why = line.contains("//") || (i > 0 && lines[i - 1].trim_start().starts_with("//"));
            if line.contains("allow(unreachable_pub") || (line.contains("allow(dead_code") && !why)
            {
                let at = format!("{}:{}", path.display(), i + 1);
                found.push(format!(
                    "{at}: {} (delete what is unused, or say why it stays)",
                    line.trim()
                ));
            }
        }
    }
    found
}

#[test]
fn the_library_exports_only_its_entry_point_and_the_testkit() {
    // The checker catches an extra export, a lost lint and an unexplained allow.
    let probe = surface_problems(
        "pub mod adopt;\nmod bench;\npub use cli::main;\n",
        &[("x.rs".into(), "#[allow(dead_code)]\nfn f() {}\n".into())],
    );
    assert_eq!(probe.len(), 3, "{probe:#?}");

    let mut paths = Vec::new();
    sources(&src_dir(), &mut paths);
    let files: Vec<(PathBuf, String)> = paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            (p, text)
        })
        .collect();
    let lib = std::fs::read_to_string(src_dir().join("lib.rs")).unwrap();
    let found = surface_problems(&lib, &files);
    assert!(found.is_empty(), "the library's surface grew: {found:#?}");
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
    let codes: BTreeMap<ModPath, String> = sources
        .iter()
        .map(|(m, (_, text))| (m.clone(), code_of(text)))
        .collect();
    let reexported = reexports(&codes, &modules);
    let uses: BTreeMap<&ModPath, BTreeSet<ModPath>> = codes
        .iter()
        .map(|(m, code)| (m, references(m, code, &modules, &reexported)))
        .collect();

    // The checker reads groups, `super::super`, child paths and re-exports, and finds a
    // ring: a regression in it cannot pass unnoticed.
    let path = |s: &str| -> ModPath { s.split("::").map(String::from).collect() };
    let probe_modules: BTreeSet<ModPath> = [
        "a", "a::b", "a::c", "a::c::d", "a::k", "x", "x::z", "q", "p", "p::s",
    ]
    .into_iter()
    .map(path)
    .collect();
    let probe_reexports = reexports(
        &BTreeMap::from([(path("p"), "pub use s::thing;".to_string())]),
        &probe_modules,
    );
    let probe = references(
        &path("a::b"),
        "use super::{c::{self, d::E}, k as kk};\nuse crate::{x::{y, z::W}};\n\
         fn f() { super::super::q::go(); crate::p::thing(); }",
        &probe_modules,
        &probe_reexports,
    );
    for want in ["a::c", "a::c::d", "a::k", "x", "x::z", "q", "p", "p::s"] {
        assert!(probe.contains(&path(want)), "{want} not in {probe:?}");
    }
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

/// The front door's process is a wing of its own (`server`): the commands know the door by
/// its face (`frontdoor`: settings, protocol, client, status), which imports neither the
/// wing nor the flows; nothing but the CLI's dispatch and the crate root (its testkit)
/// imports the wing.
#[test]
fn only_the_cli_reaches_into_the_door_s_process() {
    let sources = read_sources();
    let modules: BTreeSet<ModPath> = sources.keys().cloned().collect();
    let codes: BTreeMap<ModPath, String> = sources
        .iter()
        .map(|(m, (_, text))| (m.clone(), code_of(text)))
        .collect();
    let reexported = reexports(&codes, &modules);
    let top = |m: &ModPath| m.first().cloned().unwrap_or_default();
    let mut found = Vec::new();
    for (m, code) in &codes {
        let uses = references(m, code, &modules, &reexported);
        let me = top(m);
        for used in uses.iter().map(top) {
            let wall = match me.as_str() {
                "server" | "cli" | "" => false,
                "frontdoor" => used == "server" || used == "deploy",
                _ => used == "server",
            };
            if wall {
                found.push(format!("{} uses {used}", m.join("::")));
            }
        }
    }
    assert!(found.is_empty(), "{found:?}");
}

/// The integration tests are one binary (Cargo.toml: `autotests = false`, one `[[test]]`):
/// a new file straight under tests/ would never be built, and one under tests/it/ that
/// main.rs does not name would never be compiled; either would pass unseen.
#[test]
fn every_test_file_is_a_module_of_the_one_test_binary() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let rs_files = |dir: &Path| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "rs"))
            .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let stray = rs_files(&root.join("tests"));
    assert!(
        stray.is_empty(),
        "move these into tests/it/ and name them in tests/it/main.rs: {stray:?}"
    );
    let main = std::fs::read_to_string(root.join("tests/it/main.rs")).unwrap();
    let unnamed: Vec<String> = rs_files(&root.join("tests/it"))
        .into_iter()
        .filter(|m| m != "main" && !main.lines().any(|l| l == format!("mod {m};")))
        .collect();
    assert!(
        unnamed.is_empty(),
        "name these in tests/it/main.rs: {unnamed:?}"
    );
    let cargo = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    assert!(
        cargo.contains("\nautotests = false\n"),
        "Cargo.toml lost `autotests = false`"
    );
    assert_eq!(
        cargo.matches("[[test]]").count(),
        1,
        "one integration test binary"
    );
}

/// Every file below `dir`, whatever its kind.
fn all_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            all_files(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// ARCHITECTURE.md is the contributors' map of the source: every file under src/ is on it
/// by its path, and every `src/…` path it names exists, so a rename or a new file that
/// forgets the map fails here.
#[test]
fn architecture_names_every_source_file_and_nothing_that_is_gone() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let path = regex::Regex::new(r"src/[A-Za-z0-9_./-]*[A-Za-z0-9_/]").unwrap();
    let named: BTreeSet<&str> = path.find_iter(&doc).map(|m| m.as_str()).collect();
    let mut files = Vec::new();
    sources(&src_dir(), &mut files);
    let unnamed: Vec<String> = files
        .iter()
        .map(|f| f.strip_prefix(root).unwrap().display().to_string())
        .filter(|f| !named.contains(f.as_str()))
        .collect();
    assert!(
        unnamed.is_empty(),
        "ARCHITECTURE.md does not name these files (add each by its path, with what it holds): {unnamed:#?}"
    );
    let gone: Vec<&&str> = named.iter().filter(|p| !root.join(p).exists()).collect();
    assert!(
        gone.is_empty(),
        "ARCHITECTURE.md names paths the repository lacks: {gone:#?}"
    );
}

/// The design notes are not in this repository: a citation of them points at nothing, in
/// code, docs or tests alike (cite ARCHITECTURE.md or docs/GUIDE.md, or say it).
#[test]
fn nothing_cites_the_design_notes_the_repository_lacks() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // Built, so that this file does not cite them itself.
    let citations = [concat!("DESIGN", " §"), concat!("DESIGN", ".md")];
    let mut files = Vec::new();
    for dir in ["src", "docs", "tests"] {
        all_files(&root.join(dir), &mut files);
    }
    let mut found = Vec::new();
    for file in &files {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for (i, line) in text.lines().enumerate() {
            if citations.iter().any(|c| line.contains(c)) {
                found.push(format!("{}:{}: {}", file.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "cite what the repository has: {found:#?}");
}
