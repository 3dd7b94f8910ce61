//! Other names for a model at the door (`serve.aliases`) and names that set request fields
//! (`serve.presets`): each resolved to its model's lane, the request's body rewritten to
//! name the model's own served name with the preset's fields set over the client's, and
//! both listed in `GET /v1/models`. A name that clashes with a served model's or another
//! model's is left out (and said); `recipes validate` refuses it within one recipe.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use serde_json::{json, Map, Value};

/// What a name stands for.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Named {
    /// The lane's key (`crate::models`).
    pub(crate) lane: String,
    /// The name the model's server answers to.
    pub(crate) served: String,
    /// A preset's fields; None: an alias.
    pub(crate) preset: Option<BTreeMap<String, Value>>,
}

/// One production's model and what its recipe names.
pub(crate) struct Given<'a> {
    pub(crate) lane: &'a str,
    pub(crate) served: &'a str,
    pub(crate) serve: &'a crate::recipe::serve::Serve,
}

/// Every alias and preset of `given`, by name; a name taken by a served model, or by two
/// models, is left out with a warning.
pub(crate) fn of(given: &[Given<'_>]) -> HashMap<String, Named> {
    let served: Vec<&str> = given.iter().map(|g| g.served).collect();
    let mut out: HashMap<String, Named> = HashMap::new();
    let mut clashed = Vec::new();
    for g in given {
        let aliases = g.serve.aliases.iter().map(|a| (a, None));
        let presets = (g.serve.presets.iter()).map(|(p, f)| (p, Some(f.clone())));
        for (name, preset) in aliases.chain(presets) {
            let named = Named {
                lane: g.lane.to_string(),
                served: g.served.to_string(),
                preset,
            };
            let taken = served.contains(&name.as_str())
                || out.get(name).is_some_and(|n| n.lane != named.lane);
            if taken {
                clashed.push(name.clone());
                continue;
            }
            out.insert(name.clone(), named);
        }
    }
    for name in clashed {
        out.remove(&name);
        tracing::warn!(
            "`{name}` is a served model's name or given by two models: no request goes by it \
             (rename it in serve.aliases or serve.presets)"
        );
    }
    out
}

/// `body` naming `named`'s model, its preset's fields set over the client's (objects merged
/// key by key). None: the body is no JSON object.
pub(crate) fn rewrite(body: &[u8], named: &Named) -> Option<Bytes> {
    let Ok(Value::Object(mut v)) = serde_json::from_slice::<Value>(body) else {
        return None;
    };
    for (k, f) in named.preset.iter().flatten() {
        merge(v.entry(k.clone()).or_insert(Value::Null), f);
    }
    v.insert("model".into(), Value::String(named.served.clone()));
    serde_json::to_vec(&v).ok().map(Bytes::from)
}

fn merge(into: &mut Value, from: &Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (slot, v) => *slot = v.clone(),
    }
}

/// `/v1/models` entries for the names, each saying what it stands for.
pub(crate) fn listed(names: &HashMap<String, Named>) -> Vec<Value> {
    let mut sorted: Vec<_> = names.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    (sorted.into_iter())
        .map(|(name, n)| {
            let mut about = Map::new();
            about.insert("model".into(), json!(n.served));
            match &n.preset {
                None => about.insert("alias_of".into(), json!(n.served)),
                Some(fields) => about.insert("preset_of".into(), json!({"model": n.served, "sets": fields})),
            };
            json!({"id": name, "object": "model", "created": 0, "owned_by": "sparkctl", "sparkctl": about})
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_preset_sets_its_fields_over_the_clients_and_names_the_model() {
        let named = Named {
            lane: "qwen".into(),
            served: "qwen3.5-9b".into(),
            preset: Some(BTreeMap::from([
                ("temperature".into(), json!(0.6)),
                (
                    "chat_template_kwargs".into(),
                    json!({"enable_thinking": false}),
                ),
            ])),
        };
        let body = json!({"model": "qwen-fast", "temperature": 1.0, "max_tokens": 5,
            "chat_template_kwargs": {"other": 1}});
        let out: Value =
            serde_json::from_slice(&rewrite(body.to_string().as_bytes(), &named).unwrap()).unwrap();
        assert_eq!(
            out,
            json!({"model": "qwen3.5-9b", "temperature": 0.6, "max_tokens": 5,
                "chat_template_kwargs": {"other": 1, "enable_thinking": false}})
        );
        assert!(rewrite(b"[1]", &named).is_none());
    }
}
