//! What makes an answer right: one typed check per item. Pure, so every rule is
//! unit-tested, and each check can also write a right and a wrong answer of its own (what
//! the simulated engine says, and what holds each shipped item to its check).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// An item's check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum Check {
    /// The last number in the answer is this one (thousands separators allowed).
    Number(f64),
    /// The answer is one JSON object (a ```json fence around it allowed) of this shape.
    Json(JsonShape),
    /// The answer calls this function (in `tool_calls`) with these arguments among its own.
    ToolCall(ToolCall),
    /// The answer is this one word (case and trailing punctuation aside).
    OneWord(String),
    /// The answer's letters are all capitals, and it holds this text.
    Capitals(String),
    /// The answer holds this text as whole words (case aside).
    Contains(String),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct JsonShape {
    /// Each field the object must hold, and its type.
    fields: BTreeMap<String, JsonType>,
    /// Values some of them must have.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    equals: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum JsonType {
    String,
    Number,
    Boolean,
    Array,
    Object,
}

impl JsonType {
    fn holds(self, v: &Value) -> bool {
        match self {
            JsonType::String => v.is_string(),
            JsonType::Number => v.is_number(),
            JsonType::Boolean => v.is_boolean(),
            JsonType::Array => v.is_array(),
            JsonType::Object => v.is_object(),
        }
    }

    fn name(self) -> &'static str {
        match self {
            JsonType::String => "a string",
            JsonType::Number => "a number",
            JsonType::Boolean => "true or false",
            JsonType::Array => "a list",
            JsonType::Object => "an object",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ToolCall {
    pub(crate) name: String,
    #[serde(default)]
    pub(in crate::eval) arguments: BTreeMap<String, Value>,
}

/// What a server answered to one item.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Answer {
    pub(crate) content: String,
    /// The first tool call: its function's name and its arguments as sent (JSON text).
    pub(crate) tool_call: Option<(String, String)>,
}

/// Text compared as people read it: trimmed, without case, without closing punctuation.
fn plain(text: &str) -> String {
    text.trim()
        .trim_matches(|c: char| c.is_ascii_punctuation() || c.is_whitespace())
        .to_lowercase()
}

/// Two JSON values equal as an answer means them: strings as `plain` text, numbers by
/// value, lists element by element.
fn same(want: &Value, got: &Value) -> bool {
    match (want, got) {
        (Value::String(a), Value::String(b)) => plain(a) == plain(b),
        (Value::Number(a), Value::Number(b)) => {
            let (a, b) = (a.as_f64().unwrap_or(f64::NAN), b.as_f64().unwrap_or(0.0));
            (a - b).abs() <= 1e-9 * a.abs().max(1.0)
        }
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same(x, y))
        }
        _ => want == got,
    }
}

/// The last number written in `text` (`1,250` is 1250; `3.5` is 3.5).
fn last_number(text: &str) -> Option<f64> {
    let bytes = text.as_bytes();
    let mut found = None;
    let mut i = 0;
    while i < bytes.len() {
        if !bytes[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len()
            && (bytes[i].is_ascii_digit()
                || (matches!(bytes[i], b',' | b'.')
                    && bytes.get(i + 1).is_some_and(u8::is_ascii_digit)))
        {
            i += 1;
        }
        let negative = start > 0 && bytes[start - 1] == b'-';
        let digits: String = text[start..i].chars().filter(|c| *c != ',').collect();
        if let Ok(v) = digits.parse::<f64>() {
            found = Some(if negative { -v } else { v });
        }
    }
    found
}

/// Whether `text` holds `want` as whole words (case aside): `Au` is not in "because".
fn has_words(text: &str, want: &str) -> bool {
    let (text, want) = (text.to_lowercase(), want.trim().to_lowercase());
    let edge = |c: Option<char>| c.is_none_or(|c| !c.is_alphanumeric());
    text.match_indices(&want).any(|(i, m)| {
        edge(text[..i].chars().next_back()) && edge(text[i + m.len()..].chars().next())
    })
}

/// The JSON object an answer is: all of it, or the first ```json block in it.
fn json_object(text: &str) -> Result<Map<String, Value>, String> {
    let t = text.trim();
    let t = match t.split_once("```json") {
        Some((_, rest)) => rest.split("```").next().unwrap_or(rest),
        None => t,
    }
    .trim();
    match serde_json::from_str::<Value>(t) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err("JSON, but not an object".into()),
        Err(e) => Err(format!("not JSON ({e})")),
    }
}

/// `text`, shortened for a one-line reason.
fn short(text: &str) -> String {
    let t = text.trim();
    match t.char_indices().nth(60) {
        Some((i, _)) => format!("{}…", &t[..i]),
        None => t.to_string(),
    }
}

impl Check {
    /// What is wrong with the check itself, if anything.
    pub(crate) fn problem(&self) -> Option<String> {
        match self {
            Check::Number(n) if !n.is_finite() => Some("the number is not finite".into()),
            Check::Json(shape) if shape.fields.is_empty() => {
                Some("json.fields: name at least one field and its type".into())
            }
            Check::Json(shape) => {
                shape
                    .equals
                    .iter()
                    .find_map(|(k, v)| match shape.fields.get(k) {
                        None => Some(format!("json.equals.{k}: not one of json.fields")),
                        Some(t) if !t.holds(v) => Some(format!(
                            "json.equals.{k}: not {} as json.fields says",
                            t.name()
                        )),
                        Some(_) => None,
                    })
            }
            Check::OneWord(w) if w.split_whitespace().count() != 1 => {
                Some(format!("one_word: `{w}` is not one word"))
            }
            Check::Capitals(t) | Check::Contains(t) if t.trim().is_empty() => {
                Some("the text to look for is empty".into())
            }
            _ => None,
        }
    }

    /// None when `a` is right; else why not, in a few words.
    pub(crate) fn wrong(&self, a: &Answer) -> Option<String> {
        let content = a.content.as_str();
        match self {
            Check::Number(want) => match last_number(content) {
                Some(got) if (got - want).abs() <= 1e-9 * want.abs().max(1.0) => None,
                Some(got) => Some(format!("the last number is {got}, not {want}")),
                None => Some(format!("no number in \"{}\"", short(content))),
            },
            Check::Json(shape) => {
                let obj = match json_object(content) {
                    Ok(o) => o,
                    Err(e) => return Some(e),
                };
                shape.fields.iter().find_map(|(k, t)| match obj.get(k) {
                    None => Some(format!("no field `{k}`")),
                    Some(v) if !t.holds(v) => Some(format!("`{k}` is not {}", t.name())),
                    Some(v) => match shape.equals.get(k) {
                        Some(want) if !same(want, v) => Some(format!("`{k}` is {v}, not {want}")),
                        _ => None,
                    },
                })
            }
            Check::ToolCall(call) => {
                let Some((name, args)) = &a.tool_call else {
                    return Some(format!("no tool call; it said \"{}\"", short(content)));
                };
                if name != &call.name {
                    return Some(format!("called `{name}`, not `{}`", call.name));
                }
                let args: Map<String, Value> = match serde_json::from_str(args) {
                    Ok(Value::Object(m)) => m,
                    _ => return Some(format!("its arguments are not a JSON object: {args}")),
                };
                call.arguments
                    .iter()
                    .find_map(|(k, want)| match args.get(k) {
                        None => Some(format!("no argument `{k}`")),
                        Some(v) if !same(want, v) => Some(format!("`{k}` is {v}, not {want}")),
                        Some(_) => None,
                    })
            }
            Check::OneWord(want) => {
                let words: Vec<&str> = content.split_whitespace().collect();
                match words.as_slice() {
                    [w] if plain(w) == plain(want) => None,
                    [w] => Some(format!("\"{}\", not {want}", short(w))),
                    _ => Some(format!(
                        "{} words, not one: \"{}\"",
                        words.len(),
                        short(content)
                    )),
                }
            }
            Check::Capitals(want) => {
                if content.chars().any(char::is_lowercase) {
                    Some(format!("not all capitals: \"{}\"", short(content)))
                } else if !plain(content).contains(&plain(want)) {
                    Some(format!("no {want} in \"{}\"", short(content)))
                } else {
                    None
                }
            }
            Check::Contains(want) => {
                (!has_words(content, want)).then(|| format!("no {want} in \"{}\"", short(content)))
            }
        }
    }

    /// An answer this check takes as right.
    pub(crate) fn right_answer(&self) -> Answer {
        let text = |t: String| Answer {
            content: t,
            tool_call: None,
        };
        match self {
            Check::Number(n) => text(format!("The answer is {n}.")),
            Check::Json(shape) => {
                let obj: Map<String, Value> = shape
                    .fields
                    .iter()
                    .map(|(k, t)| {
                        let v = shape.equals.get(k).cloned().unwrap_or(match t {
                            JsonType::String => json!("text"),
                            JsonType::Number => json!(1),
                            JsonType::Boolean => json!(true),
                            JsonType::Array => json!([]),
                            JsonType::Object => json!({}),
                        });
                        (k.clone(), v)
                    })
                    .collect();
                text(Value::Object(obj).to_string())
            }
            Check::ToolCall(call) => Answer {
                content: String::new(),
                tool_call: Some((
                    call.name.clone(),
                    serde_json::to_string(&call.arguments).expect("arguments serialize"),
                )),
            },
            Check::OneWord(w) => text(w.clone()),
            Check::Capitals(t) => text(t.to_uppercase()),
            Check::Contains(t) => text(t.clone()),
        }
    }

    /// A fluent answer this check takes as wrong: what a model that got worse says.
    pub(crate) fn wrong_answer(&self) -> Answer {
        let text = |t: String| Answer {
            content: t,
            tool_call: None,
        };
        match self {
            Check::Number(n) => text(format!("The answer is {}.", n + 1.0)),
            Check::Json(shape) => {
                let first = shape.fields.keys().next().cloned().unwrap_or_default();
                text(format!("Sure! Here is the {first} you asked for."))
            }
            Check::ToolCall(call) => text(format!(
                "I would use {} for that, but I cannot call it.",
                call.name
            )),
            Check::OneWord(w) => text(format!("The answer is {w}.")),
            Check::Capitals(t) => text(t.to_lowercase()),
            Check::Contains(_) => text("I am not sure.".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(yaml: &str) -> Check {
        #[derive(Deserialize)]
        struct One {
            #[serde(with = "serde_yaml_ng::with::singleton_map")]
            check: Check,
        }
        serde_yaml_ng::from_str::<One>(&format!("check: {yaml}"))
            .unwrap()
            .check
    }

    fn said(t: &str) -> Answer {
        Answer {
            content: t.into(),
            tool_call: None,
        }
    }

    #[test]
    fn numbers_are_read_from_the_end_of_a_worked_answer() {
        let c = Check::Number(7.0);
        assert_eq!(c.wrong(&said("3 + 4 = 7 apples.")), None);
        assert_eq!(
            c.wrong(&said("He has 7. Then 3 + 4.")).unwrap(),
            "the last number is 4, not 7"
        );
        assert!(c.wrong(&said("seven")).unwrap().starts_with("no number"));
        assert_eq!(Check::Number(1250.0).wrong(&said("It costs $1,250.")), None);
        assert_eq!(Check::Number(-3.5).wrong(&said("It is -3.5 degrees")), None);
        assert_eq!(last_number("end of sentence 12."), Some(12.0));
    }

    #[test]
    fn json_answers_are_parsed_and_held_to_their_shape() {
        let c =
            check("{json: {fields: {name: string, age: number}, equals: {name: Alice, age: 30}}}");
        assert_eq!(c.wrong(&said("{\"name\": \"alice\", \"age\": 30}")), None);
        assert_eq!(
            c.wrong(&said("```json\n{\"name\": \"Alice\", \"age\": 30.0}\n```")),
            None
        );
        assert_eq!(
            c.wrong(&said(
                "Here it is:\n```json\n{\"name\": \"Alice\", \"age\": 30}\n```\nDone."
            )),
            None
        );
        assert_eq!(
            c.wrong(&said("{\"name\": \"Alice\", \"age\": \"30\"}"))
                .unwrap(),
            "`age` is not a number"
        );
        assert_eq!(
            c.wrong(&said("{\"name\": \"Alice\"}")).unwrap(),
            "no field `age`"
        );
        assert!(c
            .wrong(&said("name: Alice"))
            .unwrap()
            .starts_with("not JSON"));
        assert_eq!(
            c.wrong(&said("{\"name\": \"Bob\", \"age\": 30}")).unwrap(),
            "`name` is \"Bob\", not \"Alice\""
        );
    }

    #[test]
    fn tool_calls_need_the_function_and_its_arguments() {
        let c = check("{tool_call: {name: set_timer, arguments: {minutes: 10}}}");
        let call = |n: &str, a: &str| Answer {
            content: String::new(),
            tool_call: Some((n.into(), a.into())),
        };
        assert_eq!(c.wrong(&call("set_timer", "{\"minutes\": 10}")), None);
        assert!(c
            .wrong(&call("get_weather", "{}"))
            .unwrap()
            .contains("called `get_weather`"));
        assert_eq!(
            c.wrong(&call("set_timer", "{\"minutes\": 5}")).unwrap(),
            "`minutes` is 5, not 10"
        );
        assert!(c
            .wrong(&said("<tool_call>set_timer</tool_call>"))
            .unwrap()
            .starts_with("no tool call"));
    }

    #[test]
    fn instructions_are_held_to_their_form_and_their_answer() {
        let one = Check::OneWord("Paris".into());
        assert_eq!(one.wrong(&said(" paris.")), None);
        assert!(one
            .wrong(&said("The capital is Paris."))
            .unwrap()
            .starts_with("4 words"));
        assert!(one.wrong(&said("Rome")).is_some());
        let caps = Check::Capitals("MADRID".into());
        assert_eq!(caps.wrong(&said("MADRID.")), None);
        assert_eq!(caps.wrong(&said("IT IS MADRID")), None);
        assert!(caps
            .wrong(&said("Madrid"))
            .unwrap()
            .starts_with("not all capitals"));
        assert!(caps.wrong(&said("ROME")).unwrap().starts_with("no MADRID"));
        let fact = Check::Contains("Au".into());
        assert_eq!(fact.wrong(&said("Its symbol is Au.")), None);
        assert!(fact.wrong(&said("because")).is_some());
    }

    #[test]
    fn every_shipped_item_takes_its_right_answer_and_refuses_its_wrong_one() {
        for set in super::super::set::built_in() {
            for (i, item) in set.items.iter().enumerate() {
                let c = &item.check;
                assert_eq!(c.wrong(&c.right_answer()), None, "{}[{i}]", set.name);
                assert!(c.wrong(&c.wrong_answer()).is_some(), "{}[{i}]", set.name);
            }
        }
    }
}
