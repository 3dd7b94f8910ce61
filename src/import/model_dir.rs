//! Patch steps a model dir looks like it needs, from its files: a text-only config written
//! by transformers 5 (`…_text`), a tokenizer class older transformers lack, a missing
//! preprocessor config, files a root container left behind. Suggested, never applied: the
//! recipe carries them as comments to uncomment (`sparkctl patch NAME --dry-run` shows
//! the diff first).

use std::path::Path;

use serde_json::Value;

/// One suggested step: why, and the YAML list item that does it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Suggestion {
    pub(in crate::import) why: String,
    pub(in crate::import) step: String,
}

fn read_json(path: &Path) -> Option<Value> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// What the model dir at `dir` (already `~`-expanded) suggests.
pub(crate) fn suggest(dir: &Path) -> Vec<Suggestion> {
    let mut out = Vec::new();
    let Some(config) = read_json(&dir.join("config.json")) else {
        return out;
    };
    let model_type = config["model_type"].as_str().unwrap_or_default();
    let text_only = model_type.ends_with("_text") && config.get("text_config").is_none();
    if root_owned(dir) {
        out.push(Suggestion {
            why: "its files belong to root (written from a container); sparkctl's patches and \
                  your tools need them back"
                .into(),
            step: "- chown: {to: invoking-user}".into(),
        });
    }
    if text_only {
        out.push(Suggestion {
            why: format!(
                "config.json's model_type is `{model_type}` (transformers 5); images with \
                 transformers 4.x load only the VL form"
            ),
            step: "- wrap-vl-config: {}".into(),
        });
    }
    let tokenizer = read_json(&dir.join("tokenizer_config.json"));
    if let Some(class) = tokenizer
        .as_ref()
        .and_then(|t| t["tokenizer_class"].as_str())
        .filter(|c| *c == "TokenizersBackend")
    {
        out.push(Suggestion {
            why: format!(
                "tokenizer_config.json names `{class}`, which transformers 4.x lacks: copy the \
                 tokenizer of a model of the same family (set the donor)"
            ),
            step: "- copy-from: {donor: ~/models/DONOR, files: [tokenizer.json, tokenizer_config.json]}"
                .into(),
        });
    }
    let vl_family = text_only || model_type.starts_with("qwen3_5");
    if vl_family && !dir.join("preprocessor_config.json").exists() {
        out.push(Suggestion {
            why: "there is no preprocessor_config.json, which the VL form loads".into(),
            step: "- write-file: {path: preprocessor_config.json, from: qwen3_5/preprocessor_config.json, if-missing: true}"
                .into(),
        });
    }
    out
}

/// Whether config.json belongs to root while this user is not root.
fn root_owned(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    me != 0 && std::fs::metadata(dir.join("config.json")).is_ok_and(|m| m.uid() == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transformers_5_export_gets_the_wrap_tokenizer_and_preprocessor_steps() {
        let dir = std::env::temp_dir().join(format!("sparkctl-suggest-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("config.json"),
            r#"{"model_type":"qwen3_5_text","architectures":["Qwen3_5ForCausalLM"]}"#,
        )
        .unwrap();
        std::fs::write(
            dir.join("tokenizer_config.json"),
            r#"{"tokenizer_class":"TokenizersBackend"}"#,
        )
        .unwrap();
        let steps: Vec<String> = suggest(&dir).into_iter().map(|s| s.step).collect();
        assert!(
            steps.iter().any(|s| s.contains("wrap-vl-config")),
            "{steps:?}"
        );
        assert!(steps.iter().any(|s| s.contains("copy-from")), "{steps:?}");
        assert!(steps.iter().any(|s| s.contains("write-file")), "{steps:?}");
        std::fs::write(
            dir.join("config.json"),
            r#"{"model_type":"llama","architectures":["LlamaForCausalLM"]}"#,
        )
        .unwrap();
        std::fs::remove_file(dir.join("tokenizer_config.json")).unwrap();
        assert!(suggest(&dir).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
