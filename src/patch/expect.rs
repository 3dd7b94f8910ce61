//! Expectations: what must hold in a model dir before it is used (a JSON value, files
//! present, safetensors headers that parse). Patch plans check them against their overlay
//! (pending contents over the disk); jobs check a finished job's output dir with the same
//! code, so "outputs verified" means exactly what `sparkctl patch` means by it.

use std::path::Path;

use serde::Serialize;

use super::overlay::{Content, Overlay};
use super::safetensors;
use crate::recipe::PatchStep;

#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub(crate) struct Check {
    pub(crate) step: usize,
    pub(crate) what: String,
    pub(crate) ok: bool,
    pub(crate) detail: String,
}

/// The expectation steps of `steps` checked against `dir` as it is on disk. Other kinds
/// of step are skipped (a job recipe's check refuses them at load).
pub(crate) fn verify(dir: &Path, steps: &[PatchStep]) -> Vec<Check> {
    let root = match std::fs::canonicalize(dir) {
        Ok(r) => r,
        Err(e) => {
            return vec![Check {
                step: 0,
                what: dir.display().to_string(),
                ok: false,
                detail: format!("cannot read the directory: {e}"),
            }]
        }
    };
    let overlay = Overlay::new(&root);
    let mut checks = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        match step {
            PatchStep::Expect {
                file,
                pointer,
                equals,
            } => checks.push(json_value(&overlay, i, file, pointer, equals)),
            PatchStep::ExpectFiles { files } => {
                checks.extend(files_present(&overlay, i, files));
            }
            PatchStep::ExpectSafetensors {} => checks.extend(safetensors_parse(i, &overlay)),
            _ => {}
        }
    }
    checks
}

/// `file`'s value at `pointer` equals `equals`.
pub(super) fn json_value(
    overlay: &Overlay,
    step: usize,
    file: &str,
    pointer: &str,
    equals: &serde_json::Value,
) -> Check {
    let what = format!("{file} {pointer} == {equals}");
    let (ok, detail) = match overlay.json(file) {
        Err(m) => (false, m),
        Ok(None) => (false, format!("{file} does not exist")),
        Ok(Some(v)) => match v.pointer(pointer) {
            Some(found) if found == equals => (true, "holds".into()),
            Some(found) => (false, format!("is {found}, expected {equals}")),
            None => (false, format!("{pointer} is not in {file}")),
        },
    };
    Check {
        step,
        what,
        ok,
        detail,
    }
}

/// Each of `files` exists (a path that escapes the dir counts as missing, with why).
pub(super) fn files_present(overlay: &Overlay, step: usize, files: &[String]) -> Vec<Check> {
    files
        .iter()
        .map(|f| {
            let (ok, detail) = match overlay.exists(f) {
                Ok(true) => (true, "present".to_string()),
                Ok(false) => (false, "missing".to_string()),
                Err(m) => (false, m),
            };
            Check {
                step,
                what: format!("{f} exists"),
                ok,
                detail,
            }
        })
        .collect()
}

/// Every safetensors file's header parses with tensors inside its data; every shard an
/// index lists is there.
pub(super) fn safetensors_parse(step: usize, overlay: &Overlay) -> Vec<Check> {
    let root = overlay.root;
    let mut names: Vec<String> = std::fs::read_dir(root)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".safetensors"))
                .collect()
        })
        .unwrap_or_default();
    for (rel, content) in &overlay.pending {
        if rel.ends_with(".safetensors")
            && !names.contains(rel)
            && matches!(content, Content::CopyOf(_))
        {
            names.push(rel.clone());
        }
    }
    names.sort();
    if names.is_empty() {
        return vec![Check {
            step,
            what: "*.safetensors".into(),
            ok: false,
            detail: "no safetensors file in the model dir".into(),
        }];
    }
    let mut checks: Vec<Check> = names
        .iter()
        .map(|name| {
            let path = match overlay.pending.get(name) {
                Some(Content::CopyOf(from)) => from.clone(),
                _ => root.join(name),
            };
            let (ok, detail) = match safetensors::tensor_count(&path) {
                Ok(n) => (true, format!("{n} tensors")),
                Err(why) => (false, why),
            };
            Check {
                step,
                what: name.clone(),
                ok,
                detail,
            }
        })
        .collect();
    checks.extend(missing_shards(step, overlay, &names));
    checks
}

/// A sharded export lists its shards in an index: each must be there.
fn missing_shards(step: usize, overlay: &Overlay, names: &[String]) -> Vec<Check> {
    let Ok(Some(index)) = overlay.json("model.safetensors.index.json") else {
        return Vec::new();
    };
    let Some(map) = index
        .get("weight_map")
        .and_then(serde_json::Value::as_object)
    else {
        return Vec::new();
    };
    let mut shards: Vec<&str> = map.values().filter_map(serde_json::Value::as_str).collect();
    shards.sort();
    shards.dedup();
    shards
        .into_iter()
        .filter(|shard| !names.iter().any(|n| n == shard))
        .map(|shard| Check {
            step,
            what: shard.to_string(),
            ok: false,
            detail: "listed in model.safetensors.index.json but missing".into(),
        })
        .collect()
}
