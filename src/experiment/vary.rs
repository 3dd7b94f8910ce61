//! What a try changes: `--with KEY=VALUE` (every variant), `--vary KEY=V1|V2|…` (one axis
//! of variants) and `--request KEY=V1|V2|…` (a field of every suite request), parsed into
//! typed changes, and the variants they make — the base recipe first (variant 0, as it
//! is), then every combination of the axes. `~` stands for "unchanged", `\|` for a bar.

use serde::Serialize;
use serde_json::Value;

use crate::recipe::Recipe;

/// The recipe paths a try may change.
pub(crate) const KEYS: &str = "image, server.args (KEY=--flag=value replaces a flag's value, \
     KEY+=--flag [value] adds one, KEY-=--flag removes one), server.env.NAME, model.path, \
     server.memory_gb";

/// One change to a recipe.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "key", content = "value", rename_all = "snake_case")]
pub(crate) enum Change {
    /// `~`: this axis leaves the variant as it is.
    Unchanged,
    Image(String),
    /// The flag's words appended (`--flag` or `--flag value`).
    AddArgs(Vec<String>),
    /// The flag, and its value where one follows it, removed.
    RemoveArg(String),
    /// The flag's value replaced (the flag added with it when it is not there).
    SetArg(String, String),
    Env(String, String),
    ModelPath(String),
    MemoryGb(f64),
    /// A field of every suite request, by its dotted path.
    Request(String, Value),
}

impl Change {
    /// The change in words, as a variant's label shows it.
    pub(crate) fn label(&self) -> String {
        match self {
            Change::Unchanged => "~".into(),
            Change::Image(i) => format!("image={i}"),
            Change::AddArgs(w) => format!("server.args+={}", w.join(" ")),
            Change::RemoveArg(f) => format!("server.args-={f}"),
            Change::SetArg(f, v) => format!("server.args {f}={v}"),
            Change::Env(n, v) => format!("server.env.{n}={v}"),
            Change::ModelPath(p) => format!("model.path={p}"),
            Change::MemoryGb(g) => format!("server.memory_gb={g}"),
            Change::Request(k, v) => format!("request.{k}={v}"),
        }
    }
}

/// Why a flag's value cannot be read; the message names the flag, the key and the fix.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BadSpec(pub(crate) String);

/// Splits `v1|v2|…` at bars that are not escaped (`\|` is a bar inside a value).
fn values(s: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                chars.next();
                out.last_mut().expect("one").push('|');
            }
            '|' => out.push(String::new()),
            c => out.last_mut().expect("one").push(c),
        }
    }
    out
}

/// `--with`/`--vary` (`flag`) `spec`: one change per value.
pub(crate) fn recipe_axis(flag: &str, spec: &str) -> Result<Vec<Change>, BadSpec> {
    let (key, rest) = spec.split_once('=').ok_or_else(|| {
        BadSpec(format!(
            "{flag} {spec}: no `=`; write KEY=VALUE{}, KEY one of {KEYS}",
            if flag == "--vary" { "|VALUE…" } else { "" }
        ))
    })?;
    // `server.args+=` and `server.args-=`: the operator written with the key.
    let (key, op) = match key.strip_suffix('+').or(key.strip_suffix('-')) {
        Some(k) => (k, &key[k.len()..]),
        None => (key, ""),
    };
    let vs = if flag == "--with" {
        vec![rest.replace("\\|", "|")]
    } else {
        values(rest)
    };
    vs.iter().map(|v| change(flag, key, op, v.trim())).collect()
}

fn change(flag: &str, key: &str, op: &str, v: &str) -> Result<Change, BadSpec> {
    if v == "~" {
        return Ok(Change::Unchanged);
    }
    let bad = |why: String| Err(BadSpec(format!("{flag} {key}{op}={v}: {why}")));
    if v.is_empty() {
        return bad("an empty value; `~` leaves it unchanged".into());
    }
    match (key, op) {
        ("image", "") => Ok(Change::Image(v.into())),
        ("model.path", "") => Ok(Change::ModelPath(v.into())),
        ("server.memory_gb", "") => match v.parse::<f64>() {
            Ok(g) if g.is_finite() && g > 0.0 => Ok(Change::MemoryGb(g)),
            _ => bad("not a number of GB above 0 (e.g. 24)".into()),
        },
        ("server.args", _) => arg_change(op, v).or_else(bad),
        (k, "") if k.starts_with("server.env.") => {
            let name = &k["server.env.".len()..];
            match crate::recipe::env_name_ok(name) {
                true => Ok(Change::Env(name.into(), v.into())),
                false => bad(format!(
                    "`{name}` is no environment variable's name (letters, digits, _)"
                )),
            }
        }
        (k, "+" | "-") if k != "server.args" => bad(format!(
            "`{op}=` is for server.args only; `{k}=VALUE` sets it"
        )),
        _ => bad(format!("unknown key `{key}`; a try changes {KEYS}")),
    }
}

/// A server.args value: `+=` and `-=` written with the key (`op`) or opening the value.
fn arg_change(op: &str, v: &str) -> Result<Change, String> {
    let (op, v) = match (op, v.strip_prefix("+="), v.strip_prefix("-=")) {
        ("", Some(rest), _) => ("+", rest),
        ("", _, Some(rest)) => ("-", rest),
        _ => (op, v),
    };
    let words: Vec<String> = v.split_whitespace().map(str::to_string).collect();
    let Some(flag) = words.first().filter(|w| w.starts_with('-')) else {
        return Err("not a flag: server.args changes start with `-` (`--enforce-eager`)".into());
    };
    match op {
        "+" => Ok(Change::AddArgs(words.clone())),
        "-" if words.len() == 1 => Ok(Change::RemoveArg(flag.clone())),
        "-" => Err("`-=` takes the flag alone; its value goes with it".into()),
        _ => match flag.split_once('=') {
            Some((f, value)) if words.len() == 1 => Ok(Change::SetArg(f.into(), value.into())),
            _ => Err(
                "write `--flag=value` to replace a flag's value, `+=--flag` to add one, \
                 `-=--flag` to remove one"
                    .into(),
            ),
        },
    }
}

/// `--request KEY=V1|V2|…`: each value as JSON where it reads as JSON (`true`, `0.6`),
/// else as a string.
pub(crate) fn request_axis(spec: &str) -> Result<Vec<Change>, BadSpec> {
    let Some((key, rest)) = spec.split_once('=').filter(|(k, _)| !k.is_empty()) else {
        return Err(BadSpec(format!(
            "--request {spec}: write FIELD=V1|V2 (a field of every suite request, e.g. \
             chat_template_kwargs.enable_thinking=true|false)"
        )));
    };
    if ["model", "messages", "stream"].contains(&key) {
        return Err(BadSpec(format!(
            "--request {spec}: `{key}` is the benchmark's own; vary another field"
        )));
    }
    Ok(values(rest)
        .into_iter()
        .map(|v| match v.trim() {
            "~" => Change::Unchanged,
            v => Change::Request(
                key.into(),
                serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.into())),
            ),
        })
        .collect())
}

/// Every combination of `axes` (one value of each), in order: the first axis changes
/// slowest. No axis: one empty combination.
pub(crate) fn combinations(axes: &[Vec<Change>]) -> Vec<Vec<Change>> {
    axes.iter().fold(vec![Vec::new()], |acc, axis| {
        acc.iter()
            .flat_map(|prefix| {
                axis.iter().map(move |c| {
                    let mut next = prefix.clone();
                    next.push(c.clone());
                    next
                })
            })
            .collect()
    })
}

/// `changes` applied to `recipe`; an error names what cannot be applied.
pub(crate) fn apply(recipe: &mut Recipe, changes: &[Change]) -> Result<(), String> {
    for c in changes {
        match c {
            Change::Unchanged | Change::Request(..) => {}
            Change::Image(i) => recipe.image = Some(i.clone()),
            Change::AddArgs(words) => recipe.server.args.extend(words.iter().cloned()),
            Change::RemoveArg(flag) => remove_arg(&mut recipe.server.args, flag)?,
            Change::SetArg(flag, value) => set_arg(&mut recipe.server.args, flag, value),
            Change::Env(n, v) => {
                recipe.server.env.insert(n.clone(), v.clone());
            }
            Change::ModelPath(p) => match recipe.model.as_mut() {
                Some(m) => m.path = p.clone(),
                None => return Err("model.path: the recipe has no `model` section".into()),
            },
            Change::MemoryGb(g) => recipe.server.memory_gb = Some(*g),
        }
    }
    Ok(())
}

/// Where `flag` is in `args` (`--flag` or `--flag=…`).
fn find(args: &[String], flag: &str) -> Option<usize> {
    args.iter()
        .position(|a| a == flag || a.strip_prefix(flag).is_some_and(|r| r.starts_with('=')))
}

fn remove_arg(args: &mut Vec<String>, flag: &str) -> Result<(), String> {
    let Some(i) = find(args, flag) else {
        return Err(format!(
            "server.args-={flag}: the recipe has no {flag} (its args: {})",
            args.join(" ")
        ));
    };
    // Its value goes with it: the word after a bare flag that is no flag itself.
    let with_value = args[i] == flag && args.get(i + 1).is_some_and(|n| !n.starts_with('-'));
    args.drain(i..i + 1 + usize::from(with_value));
    Ok(())
}

fn set_arg(args: &mut Vec<String>, flag: &str, value: &str) {
    match find(args, flag) {
        Some(i) if args[i] == flag && args.get(i + 1).is_some_and(|n| !n.starts_with('-')) => {
            args[i + 1] = value.into()
        }
        Some(i) if args[i] == flag => args.insert(i + 1, value.into()),
        Some(i) => args[i] = format!("{flag}={value}"),
        None => args.extend([flag.to_string(), value.to_string()]),
    }
}

/// The request fields among `changes`, by dotted path.
pub(crate) fn request_fields(changes: &[Change]) -> Vec<(String, Value)> {
    changes
        .iter()
        .filter_map(|c| match c {
            Change::Request(k, v) => Some((k.clone(), v.clone())),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn each_form_of_a_change_reads_and_applies() {
        let axis = recipe_axis("--vary", "server.args+=--enforce-eager|~").unwrap();
        assert_eq!(
            axis,
            [Change::AddArgs(args("--enforce-eager")), Change::Unchanged]
        );
        let axis = recipe_axis("--vary", "server.args=-t=2|-t=4").unwrap();
        assert_eq!(axis[1], Change::SetArg("-t".into(), "4".into()));
        let axis = recipe_axis("--vary", "server.args=+=--jinja|-=--no-mmap").unwrap();
        assert_eq!(axis[1], Change::RemoveArg("--no-mmap".into()));
        let axis = recipe_axis("--vary", r"server.env.SEP=a\|b|c").unwrap();
        assert_eq!(axis[0], Change::Env("SEP".into(), "a|b".into()));
        let axis = request_axis("chat_template_kwargs.enable_thinking=true|false").unwrap();
        assert_eq!(
            axis[0],
            Change::Request(
                "chat_template_kwargs.enable_thinking".into(),
                Value::Bool(true)
            )
        );
        let mut a = args("-t 1 -c 512 --no-mmap --port=9");
        set_arg(&mut a, "-t", "4");
        remove_arg(&mut a, "--no-mmap").unwrap();
        set_arg(&mut a, "--port", "10");
        set_arg(&mut a, "-np", "2");
        assert_eq!(a, args("-t 4 -c 512 --port=10 -np 2"));
        remove_arg(&mut a, "-c").unwrap();
        assert_eq!(a, args("-t 4 --port=10 -np 2"));
        assert!(remove_arg(&mut a, "--enforce-eager")
            .unwrap_err()
            .contains("no --enforce-eager"));
    }

    #[test]
    fn bad_specs_name_the_flag_the_key_and_the_fix() {
        let e = recipe_axis("--vary", "server.cpus=4|8").unwrap_err().0;
        assert!(
            e.contains("unknown key `server.cpus`") && e.contains("server.args"),
            "{e}"
        );
        let e = recipe_axis("--with", "image").unwrap_err().0;
        assert!(e.contains("no `=`"), "{e}");
        let e = recipe_axis("--vary", "server.memory_gb=big").unwrap_err().0;
        assert!(e.contains("not a number"), "{e}");
        let e = recipe_axis("--vary", "server.args=enforce-eager")
            .unwrap_err()
            .0;
        assert!(e.contains("not a flag"), "{e}");
        let e = recipe_axis("--vary", "image+=x").unwrap_err().0;
        assert!(e.contains("server.args only"), "{e}");
        assert!(request_axis("model=a|b").is_err());
    }

    #[test]
    fn combinations_vary_the_last_axis_fastest() {
        let a = vec![Change::MemoryGb(1.0), Change::MemoryGb(2.0)];
        let b = vec![Change::Unchanged, Change::Image("x".into())];
        let all = combinations(&[a, b]);
        assert_eq!(all.len(), 4);
        assert_eq!(all[1], [Change::MemoryGb(1.0), Change::Image("x".into())]);
        assert_eq!(combinations(&[]), vec![Vec::<Change>::new()]);
    }
}
