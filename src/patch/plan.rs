//! Planning: every step runs against an overlay of the model dir (pending contents over
//! the files on disk), so the whole result (diffs, copies, owner changes, checks) is
//! known, and every input problem found, before one byte is written.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Map, Value};

use super::owner::{self, Owner};
use super::safetensors;
use crate::error::{Error, Result};
use crate::recipe::{expand_home, JsonOp, LoadedRecipe, PatchStep};

/// New content for one file.
#[derive(Debug, Clone)]
pub enum Content {
    Bytes(Vec<u8>),
    /// A donor file, copied as is (may be large: never read into memory).
    CopyOf(PathBuf),
}

#[derive(Debug, Clone, Serialize)]
pub struct FileChange {
    /// Path relative to the model dir.
    pub rel: String,
    /// Steps (0-based) that changed it.
    pub steps: Vec<usize>,
    pub existed: bool,
    #[serde(skip)]
    pub before: Option<Vec<u8>>,
    #[serde(skip)]
    pub after: Content,
    /// For copies: where from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<PathBuf>,
}

#[derive(Debug, Clone, Serialize)]
pub struct OwnerChange {
    pub step: usize,
    pub owner: Owner,
    /// Relative paths ("." for the model dir itself) not owned by `owner` now.
    pub paths: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub step: usize,
    pub what: String,
    pub ok: bool,
    pub detail: String,
}

/// One line per step for people.
#[derive(Debug, Clone, Serialize)]
pub struct StepSummary {
    pub step: usize,
    pub kind: &'static str,
    pub summary: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub recipe: String,
    pub model_dir: PathBuf,
    pub steps: Vec<StepSummary>,
    pub files: Vec<FileChange>,
    pub owners: Vec<OwnerChange>,
    pub checks: Vec<Check>,
}

impl Plan {
    /// Nothing to write and nobody's files to give back.
    pub fn changes_nothing(&self) -> bool {
        self.files.is_empty() && self.owners.iter().all(|o| o.paths.is_empty())
    }

    pub fn failed_checks(&self) -> Vec<&Check> {
        self.checks.iter().filter(|c| !c.ok).collect()
    }

    /// Unified diffs of the text files that change; one line for each copy.
    pub fn diff(&self) -> String {
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
pub fn model_dir(loaded: &LoadedRecipe) -> Result<PathBuf> {
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
pub fn plan(loaded: &LoadedRecipe, repo_dir: &Path) -> Result<Plan> {
    let dir = model_dir(loaded)?;
    let root = std::fs::canonicalize(&dir)
        .map_err(|e| Error::io(format!("cannot resolve {}", dir.display()), e))?;
    let steps = &loaded
        .recipe
        .model
        .as_ref()
        .expect("model_dir checked")
        .patches;
    let mut overlay = Overlay {
        root: &root,
        pending: BTreeMap::new(),
        steps: BTreeMap::new(),
    };
    let mut summaries = Vec::new();
    let mut owners = Vec::new();
    let mut checks = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        let key = format!("model.patches[{i}].{}", step.kind());
        let bad = |message: String, help: Option<String>| -> Error {
            Error::Invalid(vec![loaded.diagnostic(&key, message, help)])
        };
        let summary = match step {
            PatchStep::WrapVlConfig {
                model_type,
                architecture,
            } => {
                let cfg = overlay
                    .json("config.json")
                    .map_err(|m| bad(m, None))?
                    .ok_or_else(|| {
                        bad("config.json does not exist in the model dir".into(), None)
                    })?;
                match wrap_vl(&cfg, model_type.as_deref(), architecture.as_deref())
                    .map_err(|m| bad(m, None))?
                {
                    Some(wrapped) => {
                        overlay
                            .put_json(i, "config.json", &wrapped)
                            .map_err(|m| bad(m, None))?;
                        "config.json: wrap the text-only config into the VL form".to_string()
                    }
                    None => "config.json is already in the VL form".to_string(),
                }
            }
            PatchStep::JsonEdit { file, ops } => {
                let mut value = overlay
                    .json(file)
                    .map_err(|m| bad(m, None))?
                    .ok_or_else(|| bad(format!("{file} does not exist in the model dir"), None))?;
                let before = value.clone();
                for (j, op) in ops.iter().enumerate() {
                    apply_op(&mut value, op).map_err(|m| {
                        Error::Invalid(vec![loaded.diagnostic(
                            &format!("{key}.ops[{j}]"),
                            format!("{file}: {m}"),
                            None,
                        )])
                    })?;
                }
                if value == before {
                    format!("{file}: already edited")
                } else {
                    overlay
                        .put_json(i, file, &value)
                        .map_err(|m| bad(m, None))?;
                    format!("{file}: {} edit(s)", ops.len())
                }
            }
            PatchStep::CopyFrom { donor, files } => {
                let donor_dir = PathBuf::from(expand_home(donor));
                if !donor_dir.is_dir() {
                    return Err(Error::Invalid(vec![loaded.diagnostic(
                        &format!("{key}.donor"),
                        format!("donor model dir {} does not exist", donor_dir.display()),
                        Some("download the donor model or fix the path".into()),
                    )]));
                }
                let missing: Vec<&str> = files
                    .iter()
                    .filter(|f| !donor_dir.join(f).is_file())
                    .map(String::as_str)
                    .collect();
                if !missing.is_empty() {
                    return Err(Error::Invalid(vec![loaded.diagnostic(
                        &format!("{key}.files"),
                        format!(
                            "the donor {} lacks {}",
                            donor_dir.display(),
                            missing.join(", ")
                        ),
                        Some("pick a donor that has them, or drop them from the list".into()),
                    )]));
                }
                let mut copied = Vec::new();
                for f in files {
                    if overlay
                        .put_copy(i, f, &donor_dir.join(f))
                        .map_err(|m| bad(m, None))?
                    {
                        copied.push(f.as_str());
                    }
                }
                if copied.is_empty() {
                    format!("already copied from {}", donor_dir.display())
                } else {
                    format!("copy {} from {}", copied.join(", "), donor_dir.display())
                }
            }
            PatchStep::WriteFile {
                path,
                from,
                if_missing,
            } => {
                let shipped = repo_dir.join(from);
                let bytes = std::fs::read(&shipped).map_err(|e| {
                    Error::Invalid(vec![loaded.diagnostic(
                        &format!("{key}.from"),
                        format!("cannot read {}: {e}", shipped.display()),
                        None,
                    )])
                })?;
                if *if_missing && overlay.exists(path).map_err(|m| bad(m, None))? {
                    format!("{path} exists; left as is (if-missing)")
                } else if overlay
                    .put_bytes(i, path, bytes)
                    .map_err(|m| bad(m, None))?
                {
                    format!("write {path} from {from}")
                } else {
                    format!("{path} already matches {from}")
                }
            }
            PatchStep::Chown { to } => {
                let owner = owner::resolve(to).map_err(|m| bad(m, None))?;
                let paths = owner::not_owned_by(&root, owner).map_err(|m| bad(m, None))?;
                let summary = if paths.is_empty() {
                    format!("every file is owned by {owner}")
                } else {
                    format!(
                        "give {} path(s) to {owner}: {}",
                        paths.len(),
                        preview(&paths)
                    )
                };
                owners.push(OwnerChange {
                    step: i,
                    owner,
                    paths,
                });
                summary
            }
            PatchStep::Expect {
                file,
                pointer,
                equals,
            } => {
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
                checks.push(Check {
                    step: i,
                    what: what.clone(),
                    ok,
                    detail,
                });
                format!("expect {what}")
            }
            PatchStep::ExpectFiles { files } => {
                for f in files {
                    let ok = overlay.exists(f).map_err(|m| bad(m, None))?;
                    let detail = if ok { "present" } else { "missing" };
                    checks.push(Check {
                        step: i,
                        what: format!("{f} exists"),
                        ok,
                        detail: detail.into(),
                    });
                }
                format!("expect {} file(s)", files.len())
            }
            PatchStep::ExpectSafetensors {} => {
                checks.extend(check_safetensors(i, &root, &overlay));
                "expect readable safetensors".to_string()
            }
        };
        summaries.push(StepSummary {
            step: i,
            kind: step.kind(),
            summary,
        });
    }
    let files = overlay.changes()?;
    Ok(Plan {
        recipe: loaded.recipe.name.clone(),
        model_dir: dir,
        steps: summaries,
        files,
        owners,
        checks,
    })
}

fn preview(paths: &[String]) -> String {
    let shown: Vec<&str> = paths.iter().take(4).map(String::as_str).collect();
    if paths.len() > shown.len() {
        format!("{}, …", shown.join(", "))
    } else {
        shown.join(", ")
    }
}

fn check_safetensors(step: usize, root: &Path, overlay: &Overlay) -> Vec<Check> {
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
            match safetensors::tensor_count(&path) {
                Ok(n) => Check {
                    step,
                    what: name.clone(),
                    ok: true,
                    detail: format!("{n} tensors"),
                },
                Err(why) => Check {
                    step,
                    what: name.clone(),
                    ok: false,
                    detail: why,
                },
            }
        })
        .collect();
    // A sharded export lists its shards in an index: each must be there.
    if let Ok(Some(index)) = overlay.json("model.safetensors.index.json") {
        if let Some(map) = index.get("weight_map").and_then(Value::as_object) {
            let mut shards: Vec<&str> = map.values().filter_map(Value::as_str).collect();
            shards.sort();
            shards.dedup();
            for shard in shards {
                if !names.iter().any(|n| n == shard) {
                    checks.push(Check {
                        step,
                        what: shard.to_string(),
                        ok: false,
                        detail: "listed in model.safetensors.index.json but missing".into(),
                    });
                }
            }
        }
    }
    checks
}

/// Wraps a text-only config (`qwen3_5_text`, `…ForCausalLM`) into the VL form older
/// transformers load: `{architectures, model_type, quantization_config, text_config}`.
/// None when it is wrapped already.
pub fn wrap_vl(
    cfg: &Value,
    model_type: Option<&str>,
    architecture: Option<&str>,
) -> std::result::Result<Option<Value>, String> {
    let obj = cfg.as_object().ok_or("config.json is not a JSON object")?;
    if obj.contains_key("text_config") {
        return Ok(None);
    }
    let current = obj.get("model_type").and_then(Value::as_str).unwrap_or("");
    let target_type = match model_type {
        Some(t) => t.to_string(),
        None => current
            .strip_suffix("_text")
            .ok_or_else(|| {
                format!(
                    "config.json's model_type `{current}` is not a text-only type (`…_text`); \
                     set model_type in the step to wrap it anyway"
                )
            })?
            .to_string(),
    };
    let arch = obj
        .get("architectures")
        .and_then(|a| a.get(0))
        .and_then(Value::as_str)
        .unwrap_or("");
    let target_arch = match architecture {
        Some(a) => a.to_string(),
        None if arch.ends_with("ForCausalLM") => arch.replace("ForCausalLM", "ForConditionalGeneration"),
        None => {
            return Err(format!(
                "config.json's architecture `{arch}` is not a `…ForCausalLM`; set architecture in the step"
            ))
        }
    };
    let mut out = Map::new();
    out.insert(
        "architectures".into(),
        Value::Array(vec![Value::String(target_arch)]),
    );
    out.insert("model_type".into(), Value::String(target_type));
    // Servers read these at the top level of the VL form; the original keeps its copy.
    for key in [
        "quantization_config",
        "torch_dtype",
        "dtype",
        "tie_word_embeddings",
        "transformers_version",
    ] {
        if let Some(v) = obj.get(key) {
            out.insert(key.into(), v.clone());
        }
    }
    out.insert("text_config".into(), cfg.clone());
    Ok(Some(Value::Object(out)))
}

/// One JSON edit; an edit already made is not an error (idempotence).
pub fn apply_op(value: &mut Value, op: &JsonOp) -> std::result::Result<(), String> {
    match op {
        JsonOp::Set {
            pointer,
            value: new,
        } => {
            let (parent, key) = split_pointer(pointer)?;
            let mut node = value;
            for part in parent {
                node = node
                    .as_object_mut()
                    .ok_or_else(|| format!("{pointer}: a parent is not an object"))?
                    .entry(part)
                    .or_insert_with(|| Value::Object(Map::new()));
            }
            node.as_object_mut()
                .ok_or_else(|| format!("{pointer}: the parent is not an object"))?
                .insert(key, new.clone());
            Ok(())
        }
        JsonOp::Rename { pointer, from, to } => match value.pointer_mut(pointer) {
            Some(Value::String(s)) if s == to => Ok(()),
            Some(Value::String(s)) if s == from => {
                *s = to.clone();
                Ok(())
            }
            Some(other) => Err(format!(
                "{pointer} is {other}, neither `{from}` nor `{to}`: not the file this step expects"
            )),
            None => Err(format!("{pointer} is not there (expected `{from}`)")),
        },
        JsonOp::Delete { pointer } => {
            let (parent, key) = split_pointer(pointer)?;
            let parent_ptr: String = parent.iter().map(|p| format!("/{}", escape(p))).collect();
            if let Some(Value::Object(map)) = value.pointer_mut(&parent_ptr) {
                map.shift_remove(&key);
            }
            Ok(())
        }
    }
}

fn escape(part: &str) -> String {
    part.replace('~', "~0").replace('/', "~1")
}

fn split_pointer(pointer: &str) -> std::result::Result<(Vec<String>, String), String> {
    let parts: Vec<String> = pointer
        .strip_prefix('/')
        .ok_or_else(|| format!("`{pointer}` is not a JSON pointer"))?
        .split('/')
        .map(|p| p.replace("~1", "/").replace("~0", "~"))
        .collect();
    let (last, parent) = parts.split_last().expect("split yields one part at least");
    Ok((parent.to_vec(), last.clone()))
}

/// JSON as the file will hold it: 2-space indent, a final newline unless the original had none.
fn json_bytes(value: &Value, original: Option<&[u8]>) -> Vec<u8> {
    let mut out = serde_json::to_vec_pretty(value).expect("values serialize");
    if original.is_none_or(|o| o.ends_with(b"\n")) {
        out.push(b'\n');
    }
    out
}

/// Pending contents over the model dir.
struct Overlay<'a> {
    root: &'a Path,
    pending: BTreeMap<String, Content>,
    steps: BTreeMap<String, Vec<usize>>,
}

impl Overlay<'_> {
    /// The file's path on disk, refusing one that resolves outside the model dir.
    fn path(&self, rel: &str) -> std::result::Result<PathBuf, String> {
        let path = self.root.join(rel);
        // The deepest part that exists must resolve inside: catches symlinks out.
        let mut probe = path.clone();
        while !probe.exists() {
            if !probe.pop() {
                break;
            }
        }
        let real = std::fs::canonicalize(&probe).map_err(|e| format!("{rel}: {e}"))?;
        if !real.starts_with(self.root) {
            return Err(format!(
                "{rel} resolves to {}, outside the model dir (a symlink?); patch steps only write inside it",
                real.display()
            ));
        }
        Ok(path)
    }

    fn exists(&self, rel: &str) -> std::result::Result<bool, String> {
        Ok(self.pending.contains_key(rel) || self.path(rel)?.is_file())
    }

    fn disk(&self, rel: &str) -> std::result::Result<Option<Vec<u8>>, String> {
        let path = self.path(rel)?;
        match std::fs::read(&path) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("cannot read {}: {e}", path.display())),
        }
    }

    fn bytes(&self, rel: &str) -> std::result::Result<Option<Vec<u8>>, String> {
        match self.pending.get(rel) {
            Some(Content::Bytes(b)) => Ok(Some(b.clone())),
            Some(Content::CopyOf(from)) => std::fs::read(from)
                .map(Some)
                .map_err(|e| format!("cannot read {}: {e}", from.display())),
            None => self.disk(rel),
        }
    }

    fn json(&self, rel: &str) -> std::result::Result<Option<Value>, String> {
        let Some(bytes) = self.bytes(rel)? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            format!("{rel} in the model dir is not valid JSON ({e}); fix or replace the file")
        })
    }

    fn put_json(
        &mut self,
        step: usize,
        rel: &str,
        value: &Value,
    ) -> std::result::Result<bool, String> {
        let original = self.disk(rel)?;
        self.put_bytes(step, rel, json_bytes(value, original.as_deref()))
    }

    /// Records new content; false when the file already holds exactly that.
    fn put_bytes(
        &mut self,
        step: usize,
        rel: &str,
        bytes: Vec<u8>,
    ) -> std::result::Result<bool, String> {
        if self.disk(rel)?.as_deref() == Some(bytes.as_slice()) {
            self.pending.remove(rel);
            return Ok(false);
        }
        self.pending.insert(rel.to_string(), Content::Bytes(bytes));
        self.steps.entry(rel.to_string()).or_default().push(step);
        Ok(true)
    }

    fn put_copy(
        &mut self,
        step: usize,
        rel: &str,
        from: &Path,
    ) -> std::result::Result<bool, String> {
        let dest = self.path(rel)?;
        if same_content(&dest, from)
            .map_err(|e| format!("comparing {rel} with {}: {e}", from.display()))?
        {
            self.pending.remove(rel);
            return Ok(false);
        }
        self.pending
            .insert(rel.to_string(), Content::CopyOf(from.to_path_buf()));
        self.steps.entry(rel.to_string()).or_default().push(step);
        Ok(true)
    }

    fn changes(self) -> Result<Vec<FileChange>> {
        let mut out = Vec::new();
        for (rel, after) in self.pending {
            let path = self.root.join(&rel);
            let existed = path.is_file();
            // Only text that will be diffed is read; copies may be gigabytes.
            let before = match (&after, existed) {
                (Content::Bytes(_), true) => Some(
                    std::fs::read(&path)
                        .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?,
                ),
                _ => None,
            };
            let from = match &after {
                Content::CopyOf(f) => Some(f.clone()),
                Content::Bytes(_) => None,
            };
            out.push(FileChange {
                steps: self.steps.get(&rel).cloned().unwrap_or_default(),
                rel,
                existed,
                before,
                after,
                from,
            });
        }
        Ok(out)
    }
}

/// Whether two files hold the same bytes (sizes first; then streamed).
fn same_content(a: &Path, b: &Path) -> std::io::Result<bool> {
    use std::io::Read;
    let (ma, mb) = match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(ma), Ok(mb)) => (ma, mb),
        (Err(e), _) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        (Err(e), _) | (_, Err(e)) => return Err(e),
    };
    if ma.len() != mb.len() {
        return Ok(false);
    }
    let (mut fa, mut fb) = (std::fs::File::open(a)?, std::fs::File::open(b)?);
    let (mut ba, mut bb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    loop {
        let n = fa.read(&mut ba)?;
        if n == 0 {
            return Ok(true);
        }
        fb.read_exact(&mut bb[..n])?;
        if ba[..n] != bb[..n] {
            return Ok(false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_text_config_is_wrapped_once() {
        let text = json!({
            "architectures": ["Qwen3_5ForCausalLM"],
            "model_type": "qwen3_5_text",
            "hidden_size": 4096,
            "quantization_config": {"quant_method": "modelopt"},
            "torch_dtype": "bfloat16"
        });
        let wrapped = wrap_vl(&text, None, None).unwrap().unwrap();
        assert_eq!(wrapped["model_type"], "qwen3_5");
        assert_eq!(
            wrapped["architectures"],
            json!(["Qwen3_5ForConditionalGeneration"])
        );
        assert_eq!(wrapped["text_config"], text);
        assert_eq!(wrapped["quantization_config"]["quant_method"], "modelopt");
        assert_eq!(wrap_vl(&wrapped, None, None).unwrap(), None, "idempotent");
        let vl = json!({"model_type": "llama", "architectures": ["LlamaForCausalLM"]});
        assert!(wrap_vl(&vl, None, None)
            .unwrap_err()
            .contains("not a text-only type"));
    }

    #[test]
    fn renames_are_idempotent_and_refuse_surprises() {
        let mut v = json!({"tokenizer_class": "TokenizersBackend"});
        let op = JsonOp::Rename {
            pointer: "/tokenizer_class".into(),
            from: "TokenizersBackend".into(),
            to: "Qwen2Tokenizer".into(),
        };
        apply_op(&mut v, &op).unwrap();
        assert_eq!(v["tokenizer_class"], "Qwen2Tokenizer");
        apply_op(&mut v, &op).unwrap();
        assert_eq!(v["tokenizer_class"], "Qwen2Tokenizer");
        let mut other = json!({"tokenizer_class": "LlamaTokenizer"});
        assert!(apply_op(&mut other, &op).unwrap_err().contains("neither"));
    }

    #[test]
    fn set_creates_parents_and_delete_tolerates_absence() {
        let mut v = json!({"a": 1});
        apply_op(
            &mut v,
            &JsonOp::Set {
                pointer: "/b/c".into(),
                value: json!(2),
            },
        )
        .unwrap();
        assert_eq!(v, json!({"a": 1, "b": {"c": 2}}));
        apply_op(
            &mut v,
            &JsonOp::Delete {
                pointer: "/a".into(),
            },
        )
        .unwrap();
        apply_op(
            &mut v,
            &JsonOp::Delete {
                pointer: "/a".into(),
            },
        )
        .unwrap();
        assert_eq!(v, json!({"b": {"c": 2}}));
    }
}
