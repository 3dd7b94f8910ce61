//! docs/RECIPES.md against `sparkctl recipes schema` (and `--job`): every key the schema knows
//! is documented in a key table, and every key a table documents is one the schema knows, so
//! the reference cannot drift from the types that parse recipes.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::support::{in_repo, repo};

/// The schema node `node` stands for, following `$ref`s into the schema's definitions.
fn resolve<'a>(root: &'a Value, node: &'a Value) -> &'a Value {
    match node.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let target = r
                .strip_prefix('#')
                .and_then(|pointer| root.pointer(pointer))
                .unwrap_or_else(|| panic!("{r} does not resolve in the schema"));
            resolve(root, target)
        }
        None => node,
    }
}

/// Every key path under `node`: `server.port`, `nodes.members[].name`, a patch step's
/// `model.patches[].copy-from.donor`. Maps with free keys (`server.env`, `bench.gates`) are
/// leaves.
fn keys(root: &Value, node: &Value, prefix: &str, out: &mut BTreeSet<String>) {
    let node = resolve(root, node);
    if let Some(props) = node.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            let path = format!("{prefix}{k}");
            out.insert(path.clone());
            keys(root, v, &format!("{path}."), out);
        }
    }
    if let Some(items) = node.get("items") {
        let list = prefix.trim_end_matches('.');
        keys(root, items, &format!("{list}[]."), out);
    }
    for alt in ["anyOf", "oneOf", "allOf"] {
        for v in node
            .get(alt)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            keys(root, v, prefix, out);
        }
    }
}

/// The first column of every table of docs/RECIPES.md whose header's first cell is `header`.
fn documented(doc: &str, header: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut in_table = false;
    for line in doc.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if !line.starts_with('|') {
            in_table = false;
        } else if cells.get(1) == Some(&header) {
            in_table = true;
        } else if in_table && !cells[1].starts_with("---") {
            out.insert(cells[1].trim_matches('`').to_string());
        }
    }
    out
}

/// Every key path of `sparkctl recipes schema ARGS`.
fn schema_keys_of(args: &[&str]) -> BTreeSet<String> {
    let mut argv = vec!["recipes", "schema"];
    argv.extend_from_slice(args);
    let schema = in_repo(&argv).succeeds().json();
    let mut known = BTreeSet::new();
    keys(&schema, &schema, "", &mut known);
    known
}

fn schema_keys() -> BTreeSet<String> {
    schema_keys_of(&[])
}

const STEP: &str = "model.patches[].";

fn doc() -> String {
    std::fs::read_to_string(repo().join("docs/RECIPES.md")).expect("docs/RECIPES.md")
}

#[test]
fn every_recipe_key_is_documented_and_every_documented_key_exists() {
    // Patch steps have a table of their own (below).
    let known: BTreeSet<String> = schema_keys()
        .into_iter()
        .filter(|k| !k.starts_with(STEP))
        .collect();
    for key in [
        "name",
        "server.port",
        "bench.load.depth",
        "nodes.members[].address",
    ] {
        assert!(
            known.contains(key),
            "{key} not found in the schema: {known:?}"
        );
    }
    let doc = documented(&doc(), "key");
    let undocumented: Vec<_> = known.difference(&doc).collect();
    let unknown: Vec<_> = doc.difference(&known).collect();
    assert!(
        undocumented.is_empty(),
        "keys of `recipes schema` missing from docs/RECIPES.md's key tables: {undocumented:?}"
    );
    assert!(
        unknown.is_empty(),
        "keys in docs/RECIPES.md that `recipes schema` does not know: {unknown:?}"
    );
}

#[test]
fn every_patch_step_is_documented_and_every_documented_step_exists() {
    // Each step is a one-key map: `model.patches[].copy-from`, then its fields.
    let known: BTreeSet<String> = schema_keys()
        .iter()
        .filter_map(|k| k.strip_prefix(STEP))
        .filter(|step| !step.contains('.'))
        .map(str::to_string)
        .collect();
    assert!(known.contains("copy-from"), "{known:?}");
    assert_eq!(
        documented(&doc(), "step"),
        known,
        "docs/RECIPES.md's patch step table against `recipes schema`"
    );
}

#[test]
fn every_job_recipe_key_is_documented_and_every_documented_key_exists() {
    // An output's expectations are patch steps: the step table documents them.
    let known: BTreeSet<String> = schema_keys_of(&["--job"])
        .into_iter()
        .filter(|k| !k.starts_with("outputs[].expect[]."))
        .collect();
    assert!(known.contains("outputs[].size"), "{known:?}");
    let doc = documented(&doc(), "job key");
    let undocumented: Vec<_> = known.difference(&doc).collect();
    let unknown: Vec<_> = doc.difference(&known).collect();
    assert!(
        undocumented.is_empty(),
        "keys of `recipes schema --job` missing from docs/RECIPES.md's job key table: {undocumented:?}"
    );
    assert!(
        unknown.is_empty(),
        "job keys in docs/RECIPES.md that `recipes schema --job` does not know: {unknown:?}"
    );
}
