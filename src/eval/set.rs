//! Evaluation sets: prompts with checkable answers, as YAML. The shipped ones
//! (`recipes/evals/`) are built in, like the suites; a file of the same name in the recipes
//! dir's `evals/` wins, and a path names any other. Every problem names the file, the item
//! and the key.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::check::Check;
use crate::error::{Diagnostic, Error, Result};

/// The sets shipped in `recipes/evals/`, built in so that `eval URL --set NAME` works
/// wherever sparkctl runs, and so that the simulated engine knows their answers.
const BUILT_IN: [(&str, &str); 5] = [
    (
        "arithmetic",
        include_str!("../../recipes/evals/arithmetic.yaml"),
    ),
    (
        "json-shape",
        include_str!("../../recipes/evals/json-shape.yaml"),
    ),
    (
        "tool-calls",
        include_str!("../../recipes/evals/tool-calls.yaml"),
    ),
    (
        "instructions",
        include_str!("../../recipes/evals/instructions.yaml"),
    ),
    ("facts", include_str!("../../recipes/evals/facts.yaml")),
];

/// The names of the built-in sets.
pub(crate) fn built_in_names() -> Vec<&'static str> {
    BUILT_IN.iter().map(|(n, _)| *n).collect()
}

/// A set's answers are bounded: an evaluation must fit in the time a nightly run affords.
const MAX_TOKENS_LIMIT: u32 = 4096;

fn default_max_tokens() -> u32 {
    64
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EvalSet {
    pub(in crate::eval) name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    /// The system prompt of every item that gives none of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) system: Option<String>,
    /// The answer's bound, per item unless the item sets its own.
    #[serde(default = "default_max_tokens")]
    pub(in crate::eval) max_tokens: u32,
    /// Tool definitions (OpenAI format) by name: every item is offered all of them unless
    /// it names its own.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(in crate::eval) tools: BTreeMap<String, Value>,
    pub(crate) items: Vec<Item>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Item {
    pub(crate) prompt: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    system: Option<String>,
    /// The tools offered (names under the set's `tools`); unset: all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tools: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::eval) max_tokens: Option<u32>,
    /// One key: the check's kind (`number: 7`, `one_word: Paris`).
    #[serde(with = "serde_yaml_ng::with::singleton_map")]
    pub(crate) check: Check,
}

impl EvalSet {
    /// `name` (built in), a name in `dir` (the recipes dir's `evals/`), or a path.
    pub(crate) fn load(spec: &str, dir: &Path) -> Result<EvalSet> {
        let as_path = spec.ends_with(".yaml");
        let Some((file, text)) = crate::yaml::named(spec, dir, &BUILT_IN, as_path)? else {
            return Err(Error::NoSuch {
                what: crate::error::Thing::EvalSet,
                name: spec.to_string(),
                hint: crate::error::Hint::NotFileNorBuiltIn {
                    yaml: true,
                    file: dir.join(spec.to_string() + ".yaml"),
                    built_in: built_in_names().iter().map(|n| n.to_string()).collect(),
                },
            });
        };
        Self::parse(&file, &text)
    }

    /// The set in `text`, read from `file` (named in diagnostics).
    pub(crate) fn parse(file: &Path, text: &str) -> Result<EvalSet> {
        let set: EvalSet = crate::yaml::from_slice(
            file,
            text.as_bytes(),
            "see recipes/evals/arithmetic.yaml for the format",
        )?;
        let problems = set.problems();
        if problems.is_empty() {
            return Ok(set);
        }
        Err(Error::Invalid(
            problems
                .into_iter()
                .map(|(key, message)| {
                    let at = crate::yaml::locate::locate(text, &key);
                    Diagnostic::at(
                        file,
                        at,
                        Some(key),
                        message,
                        Some("see recipes/evals/arithmetic.yaml for the format".into()),
                    )
                })
                .collect(),
        ))
    }

    /// What serde cannot see: each problem's key (`items[3].check`) and message.
    fn problems(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if self.items.is_empty() {
            out.push(("items".into(), "the set has no items".into()));
        }
        if !(1..=MAX_TOKENS_LIMIT).contains(&self.max_tokens) {
            out.push((
                "max_tokens".into(),
                format!("{} is not from 1 to {MAX_TOKENS_LIMIT}", self.max_tokens),
            ));
        }
        for (name, def) in &self.tools {
            if def.pointer("/function/name").and_then(Value::as_str) != Some(name) {
                out.push((
                    format!("tools.{name}"),
                    format!("the definition's function.name must be `{name}`"),
                ));
            }
        }
        for (i, item) in self.items.iter().enumerate() {
            let key = |k: &str| format!("items[{i}].{k}");
            if item.prompt.trim().is_empty() {
                out.push((key("prompt"), "the prompt is empty".into()));
            }
            if item
                .max_tokens
                .is_some_and(|n| !(1..=MAX_TOKENS_LIMIT).contains(&n))
            {
                out.push((
                    key("max_tokens"),
                    format!("not from 1 to {MAX_TOKENS_LIMIT}"),
                ));
            }
            for t in item.tools.iter().flatten() {
                if !self.tools.contains_key(t) {
                    out.push((
                        key("tools"),
                        format!("tool `{t}` is not defined under the set's `tools`"),
                    ));
                }
            }
            if let Some(why) = item.check.problem() {
                out.push((key("check"), why));
            }
            if let Check::ToolCall(call) = &item.check {
                if !self.offered(item).any(|t| t == call.name) {
                    out.push((
                        key("check"),
                        format!(
                            "the item expects a call of `{}`, which it does not offer; define it \
                             under the set's `tools`",
                            call.name
                        ),
                    ));
                }
            }
        }
        out
    }

    /// The names of the tools `item` is offered.
    pub(crate) fn offered<'a>(&'a self, item: &'a Item) -> Box<dyn Iterator<Item = &'a str> + 'a> {
        match &item.tools {
            Some(names) => Box::new(names.iter().map(String::as_str)),
            None => Box::new(self.tools.keys().map(String::as_str)),
        }
    }

    /// The system prompt of `item`.
    pub(crate) fn system_of<'a>(&'a self, item: &'a Item) -> Option<&'a str> {
        item.system.as_deref().or(self.system.as_deref())
    }

    /// A stable key of item `i`: the set, its place and a digest of what it asks and
    /// expects, so that results are paired only with the same item, never an edited one.
    pub(crate) fn key(&self, i: usize) -> String {
        use sha2::Digest;
        let item = &self.items[i];
        let text = serde_json::to_string(&(
            &item.prompt,
            self.system_of(item),
            &item.check,
            self.offered(item).collect::<Vec<_>>(),
        ))
        .expect("an item serializes");
        let digest = sha2::Sha256::digest(text.as_bytes());
        let hex: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
        format!("{}#{i}@{hex}", self.name)
    }
}

/// Every built-in set, parsed (the simulated engine looks answers up in them).
pub(crate) fn built_in() -> Vec<EvalSet> {
    BUILT_IN
        .iter()
        .map(|(name, text)| {
            EvalSet::parse(Path::new(&format!("<built-in {name}>")), text)
                .expect("the shipped sets parse (a unit test holds them to it)")
        })
        .collect()
}

/// The sets `names` from `dir` (or built in); every set that does not load is named.
pub(crate) fn load_all(names: &[String], dir: &Path) -> Result<Vec<EvalSet>> {
    let mut sets = Vec::new();
    let mut problems = Vec::new();
    for name in names {
        match EvalSet::load(name, dir) {
            Ok(s) => sets.push(s),
            Err(Error::Invalid(mut d)) => problems.append(&mut d),
            Err(e) => return Err(e),
        }
    }
    if problems.is_empty() {
        Ok(sets)
    } else {
        Err(Error::Invalid(problems))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_sets_parse_and_each_item_has_a_unique_key() {
        let sets = built_in();
        assert_eq!(sets.len(), 5);
        let mut keys = std::collections::BTreeSet::new();
        for s in &sets {
            assert!(s.items.len() >= 20, "{}: {}", s.name, s.items.len());
            for i in 0..s.items.len() {
                assert!(keys.insert(s.key(i)), "{}", s.key(i));
            }
        }
        assert!(sets[0].key(3).starts_with("arithmetic#3@"));
    }

    #[test]
    fn a_malformed_item_is_named_by_file_index_and_key() {
        let f = Path::new("evals/bad.yaml");
        let bad = "name: bad\nitems:\n  - prompt: one\n    check: {number: 1}\n  - prompt: two\n    check: {numbr: 2}\n";
        let err = EvalSet::parse(f, bad).unwrap_err().to_string();
        assert!(
            err.contains("evals/bad.yaml:6:") && err.contains("numbr"),
            "{err}"
        );
        let bad = "name: bad\nitems:\n  - prompt: one\n    check: {number: 1}\n  - prompt: \"\"\n    check: {one_word: two words}\n";
        let err = EvalSet::parse(f, bad).unwrap_err().to_string();
        assert!(
            err.contains("evals/bad.yaml:5:")
                && err.contains("items[1].prompt: the prompt is empty"),
            "{err}"
        );
        assert!(
            err.contains("items[1].check: ") && err.contains("one word"),
            "{err}"
        );
        let bad = "name: bad\nitems:\n  - prompt: call it\n    check: {tool_call: {name: f, arguments: {}}}\n";
        let err = EvalSet::parse(f, bad).unwrap_err().to_string();
        assert!(
            err.contains("items[0].check: the item expects a call of `f`"),
            "{err}"
        );
        let err = EvalSet::load("nosuch", Path::new("/nonexistent"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("built in: arithmetic"), "{err}");
    }
}
