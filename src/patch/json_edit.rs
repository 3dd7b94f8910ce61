//! The JSON edits patch steps make: the VL wrap of a text-only config, and set / rename /
//! delete at a JSON pointer. Pure functions over values; idempotent by construction.

use serde_json::{Map, Value};

use crate::recipe::JsonOp;

/// Wraps a text-only config (`qwen3_5_text`, `…ForCausalLM`) into the VL form older
/// transformers load: `{architectures, model_type, quantization_config, text_config}`.
/// None when it is wrapped already.
pub(crate) fn wrap_vl(
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
pub(crate) fn apply_op(value: &mut Value, op: &JsonOp) -> std::result::Result<(), String> {
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
pub(super) fn json_bytes(value: &Value, original: Option<&[u8]>) -> Vec<u8> {
    let mut out = serde_json::to_vec_pretty(value).expect("values serialize");
    if original.is_none_or(|o| o.ends_with(b"\n")) {
        out.push(b'\n');
    }
    out
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
