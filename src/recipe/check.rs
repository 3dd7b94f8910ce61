//! Checks serde cannot make: cross-field rules and what the values mean. Each problem
//! becomes a `Diagnostic` at the key's line (`diag::diag_at`).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Component, Path};

use super::diag::{diag_at, suggest, Report};
use super::{Bench, Model, PatchStep, Recipe, Server};
use crate::bench::gates::{GateError, GateRule, GATE_NAMES};
use crate::engine::{Flag, Profile};
use crate::error::Diagnostic;
use crate::yaml::Loose;

pub(crate) fn env_name_ok(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A path inside the model dir: relative, no `..`.
pub(crate) fn inside(path: &str) -> bool {
    let p = Path::new(path);
    !path.is_empty()
        && p.components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

pub(crate) const ULIMITS: &[&str] = &[
    "core",
    "cpu",
    "data",
    "fsize",
    "locks",
    "memlock",
    "msgqueue",
    "nice",
    "nofile",
    "nproc",
    "rss",
    "rtprio",
    "rttime",
    "sigpending",
    "stack",
];

/// Checks serde cannot make: cross-field rules and the values' meaning, in the order the
/// file reads.
pub(super) fn check(path: &Path, src: &str, r: &Recipe, loose: &[Loose]) -> Vec<Diagnostic> {
    let mut out = Report::new(path, src);
    check_name(&mut out, &r.name, "recipe");
    let profile = r.engine.profile();
    super::launcher::check(&mut out, r, &profile);
    check_server(&mut out, r, &profile);
    check_env_and_limits(&mut out, &r.server);
    check_health(&mut out, r, &profile);
    if let Some(bench) = &r.bench {
        check_bench(&mut out, bench);
    }
    super::live::check(&mut out, r);
    super::serve::check(&mut out, r);
    super::rollout::check(&mut out, r);
    if let Some(model) = &r.model {
        check_patches(&mut out, model);
        check_produced_by(&mut out, model);
    }
    check_values(&mut out, r, loose);
    super::nodes::check(path, src, r, &mut out.diags);
    out.diags
}

/// A recipe's or a job's name: its file's stem, in lowercase letters, digits, '-', '_', '.'.
pub(crate) fn check_name(out: &mut Report, name: &str, what: &str) {
    let stem = out
        .path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    if name != stem {
        out.bad(
            "name",
            format!("{what} name `{name}` does not match its file name `{stem}`"),
            &format!("rename the file to {name}.yaml or set `name: {stem}`"),
        );
    }
    let ok = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-._".contains(c));
    if !ok {
        out.bad(
            "name",
            format!("`{name}` is not a {what} name"),
            "use lowercase letters, digits, '-', '_' and '.', starting with a letter or digit",
        );
    }
}

/// Ports, the bind address, and argv words sparkctl owns or cannot pass.
fn check_server(out: &mut Report, r: &Recipe, profile: &Profile) {
    let s = &r.server;
    for (key, port) in [
        ("server.port", Some(s.port)),
        ("server.container_port", s.container_port),
    ] {
        if port == Some(0) {
            out.bad(
                key,
                "port 0 is not a port".into(),
                "ports are whole numbers from 1 to 65535",
            );
        }
    }
    if s.host.parse::<IpAddr>().is_err() {
        out.bad(
            "server.host",
            format!("`{}` is not an IP address to bind", s.host),
            "use 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)",
        );
    }
    for (i, arg) in s.args.iter().enumerate() {
        let flag = arg.split('=').next().unwrap_or(arg);
        let owned = [
            (profile.port_flag, "server.port"),
            (profile.host_flag, "server.host"),
            (profile.model_flag, "model.path"),
            (profile.served_name_flag, "model.served_name"),
        ];
        for (f, from) in owned {
            if matches!(f, Flag::Named(n) if n == flag) {
                out.bad(
                    &format!("server.args[{i}]"),
                    format!("`{flag}` is set by sparkctl from `{from}`"),
                    &format!("remove it from args and set `{from}` instead"),
                );
            }
        }
        if arg.contains('\n') {
            out.bad(
                &format!("server.args[{i}]"),
                "an argument may not span lines".into(),
                "split it into one entry per argv word",
            );
        }
    }
}

/// Environment names, ulimits, the memory budget and the container user.
fn check_env_and_limits(out: &mut Report, s: &Server) {
    for name in s.env.keys() {
        if !env_name_ok(name) {
            out.bad(
                &format!("server.env.{name}"),
                format!("`{name}` is not an environment variable name"),
                "use letters, digits and '_', not starting with a digit",
            );
        }
    }
    for (i, name) in s.env_from_host.iter().enumerate() {
        if !env_name_ok(name) {
            out.bad(
                &format!("server.env_from_host[{i}]"),
                format!("`{name}` is not an environment variable name"),
                "list variable names only; values are read from the host at start",
            );
        }
        if s.env.contains_key(name) {
            out.bad(
                &format!("server.env_from_host[{i}]"),
                format!("`{name}` is also set in server.env"),
                "keep it in one place",
            );
        }
    }
    for (i, m) in s.mounts.iter().enumerate() {
        let host_ok = m.host.starts_with('/') || m.host.starts_with("~/");
        if !host_ok || !m.container.starts_with('/') {
            out.bad(
                &format!("server.mounts[{i}]"),
                format!(
                    "mount `{}` → `{}` needs absolute paths on both sides",
                    m.host, m.container
                ),
                "write the host path from / or ~/, and the container path from /",
            );
        }
    }
    for name in s.ulimits.keys() {
        if !ULIMITS.contains(&name.as_str()) {
            let help = suggest(name, ULIMITS, "known ulimits");
            out.bad(
                &format!("server.ulimits.{name}"),
                format!("unknown ulimit `{name}`"),
                &help,
            );
        }
    }
    if let Some(gb) = s.memory_gb {
        // Its size against the machine is the memory plan's to judge (a Spark's 128 GB, an
        // H200's 141, eight GPUs' 640): here only whether it is a size at all.
        if !(gb.is_finite() && gb > 0.0) {
            out.bad(
                "server.memory_gb",
                format!("{gb} GB is not a memory budget"),
                "give the GB the deployment needs, e.g. 12",
            );
        }
    }
    if let Some(user) = &s.user {
        let ok = user.split(':').count() <= 2 && user.split(':').all(|p| !p.is_empty());
        if !ok {
            out.bad(
                "server.user",
                format!("`{user}` is not a user"),
                "write UID, UID:GID or a user name",
            );
        }
    }
}

/// The health path and the check completion's time inside health.timeout.
fn check_health(out: &mut Report, r: &Recipe, profile: &Profile) {
    if let Some(p) = &r.health.path {
        if !p.starts_with('/') {
            out.bad(
                "health.path",
                format!("`{p}` is not an HTTP path"),
                "start it with '/', e.g. /health",
            );
        }
    }
    if let Some(within) = r.health.completion_timeout {
        let timeout = r.health.timeout.map_or(
            std::time::Duration::from_secs(profile.health_timeout_secs),
            |t| t.0,
        );
        if within.0.is_zero() {
            out.bad(
                "health.completion_timeout",
                "0s leaves the check completion no time to answer".into(),
                "give it the seconds a one-token answer may take once loaded, e.g. 20s",
            );
        } else if within.0 >= timeout {
            out.bad(
                "health.completion_timeout",
                format!(
                    "{within} is not shorter than health.timeout ({})",
                    crate::units::format_duration(timeout)
                ),
                "the completion runs inside health.timeout; make it shorter (left out, it is \
                 20s, at most half of health.timeout) or raise health.timeout",
            );
        }
    }
}

/// The suite the benchmark runs loads and keeps every suite rule (runs ≥ 5, cases, turns,
/// tools): no model loads for a mistake in it.
fn check_suite(out: &mut Report, spec: &str) {
    let suites = out
        .path
        .parent()
        .map(|p| p.join("suites"))
        .unwrap_or_default();
    if let Err(e) = crate::bench::replay::check_spec(spec, &suites) {
        out.bad(
            "bench.suite",
            format!("the suite `{spec}` does not load: {e}"),
            "fix the suite, or name a built-in suite, one in recipes/suites/, or a file",
        );
    }
}

/// The suite, gate names and rules, and the load settings.
fn check_bench(out: &mut Report, bench: &Bench) {
    check_suite(out, &bench.suite);
    for (gate, rule) in &bench.gates {
        let key = format!("bench.gates.{gate}");
        match GateRule::new(gate, rule) {
            Err(GateError::Gate(..)) => {
                let help = format!(
                    "{}; any of ttft, ttfo, tpot, itl, e2el as METRIC_p50_ms, _p90_ms, _p99_ms \
                     (decode as decode_tps_pNN)",
                    suggest(gate, GATE_NAMES, "gates")
                );
                out.bad(&key, format!("unknown gate `{gate}`"), &help);
            }
            Err(GateError::Rule(..)) if production_rule(rule) => out.bad(
                &key,
                format!("`{rule}`: only eval_accuracy is judged against `production`"),
                "give this gate a number, or compare with production through vs_production_* \
                 (a % change, e.g. vs_production_ttft: \"<= 10%\")",
            ),
            Err(GateError::Rule(..) | GateError::Form(_)) => out.bad(
                &key,
                format!("`{rule}` is not a gate rule"),
                "write an operator and a number, e.g. \"== 0%\", \">= 60%\" or \"<= 1500ms\" \
                 (eval_accuracy also takes \">= production - 3\")",
            ),
            Ok(_) => {}
        }
    }
    check_eval(out, bench);
    for (key, message) in bench.load.iter().flat_map(|l| l.problems()) {
        out.bad(
            &format!("bench.load.{key}"),
            message,
            "see `sparkctl bench --help` for the same settings as flags",
        );
    }
    if bench
        .bandwidth_gbps
        .is_some_and(|g| !(g.is_finite() && g > 0.0))
    {
        out.bad(
            "bench.bandwidth_gbps",
            "the memory bandwidth must be a positive number of GB/s".into(),
            "give the device's peak, e.g. 3350 for an H100 SXM, or leave it out",
        );
    }
}

fn production_rule(rule: &str) -> bool {
    rule.parse::<crate::bench::gates::Rule>()
        .is_ok_and(|r| r.of_production)
}

/// `bench.eval` names sets that exist (their items are checked when they are loaded, by
/// `recipes validate` and before a run starts), and the evaluation gate has sets to judge.
fn check_eval(out: &mut Report, bench: &Bench) {
    let dir = out.path.parent().unwrap_or(Path::new(".")).to_path_buf();
    for (i, name) in bench.eval.iter().enumerate() {
        if let Err(why) = crate::eval::exists(name, &dir) {
            out.bad(
                &format!("bench.eval[{i}]"),
                why,
                "name a built-in set or a file in recipes/evals/ (`sparkctl eval --help`)",
            );
        }
    }
    if bench.gates.contains_key("eval_accuracy") && bench.eval.is_empty() {
        out.bad(
            "bench.gates.eval_accuracy",
            "eval_accuracy judges the evaluation sets' answers, and bench.eval names none".into(),
            &format!(
                "add the sets under bench, e.g. `eval: [arithmetic, instructions]` (built in: {})",
                crate::eval::built_in_names().join(", ")
            ),
        );
    }
}

/// Values serde accepts but that do not mean what they look like.
fn check_values(out: &mut Report, r: &Recipe, loose: &[Loose]) {
    let (path, src) = (out.path, out.src);
    // serde reads YAML's null and booleans as the strings "null" and "true" where a
    // string is expected: as argv words they are almost surely a slip.
    for l in loose {
        let list = ["server.args[", "server.env_from_host["]
            .into_iter()
            .find(|p| l.path.starts_with(p));
        if list.is_some() {
            let what = if matches!(l.text.as_str(), "" | "~" | "null" | "Null" | "NULL") {
                "YAML's null"
            } else {
                "a YAML boolean"
            };
            let shown = if l.text.is_empty() {
                "(empty)"
            } else {
                &l.text
            };
            out.diags.push(Diagnostic {
                location: crate::error::Location {
                    file: path.to_path_buf(),
                    line: Some(l.line),
                    column: Some(l.column),
                    key: Some(l.path.clone()),
                },
                message: format!("{shown} is {what}, not a string"),
                help: Some(format!(
                    "each entry is one argv string: quote it (\"{}\") if you mean the text, \
                     or remove it",
                    l.text
                )),
            });
        }
    }
    if let Some(image) = &r.image {
        if let Some(p) = super::image_ref::problem(image) {
            let mut d = diag_at(path, src, "image", p.message, Some(p.help));
            // Point into the value: the part that is wrong.
            if let (Some(line), Some(_)) = (d.location.line, d.location.column) {
                let text = src.lines().nth(line - 1).unwrap_or_default();
                if let Some(start) = text.find(image.as_str()) {
                    d.location.column = Some(text[..start + p.offset].chars().count() + 1);
                }
            }
            out.diags.push(d);
        }
    }
    if r.health.timeout.is_some_and(|t| t.0.is_zero()) {
        out.bad(
            "health.timeout",
            "0s leaves the server no time to load".into(),
            "give it the time loading takes, e.g. 90s or 10m",
        );
    }
    for (name, &limit) in &r.server.ulimits {
        if limit < -1 {
            out.bad(
                &format!("server.ulimits.{name}"),
                format!("{limit} is not a limit"),
                "write a number from 0 up, or -1 for unlimited",
            );
        }
    }
}

/// `model.produced_by` names a job recipe in `recipes/jobs/`.
fn check_produced_by(out: &mut Report, model: &Model) {
    let Some(job) = &model.produced_by else {
        return;
    };
    let dir = out.path.parent().unwrap_or(Path::new(".")).join("jobs");
    if !dir.join(format!("{job}.yaml")).is_file() {
        let known: Vec<String> = std::fs::read_dir(&dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .filter_map(|e| {
                        let p = e.path();
                        (p.extension()? == "yaml")
                            .then(|| p.file_stem()?.to_str().map(String::from))?
                    })
                    .collect()
            })
            .unwrap_or_default();
        let known: Vec<&str> = known.iter().map(String::as_str).collect();
        out.bad(
            "model.produced_by",
            format!("no job recipe `{job}` in {}", dir.display()),
            &suggest(job, &known, "known jobs"),
        );
    }
}

fn check_patches(out: &mut Report, model: &Model) {
    // patches/ lives beside recipes/ (the checkout, or the config dir).
    let repo = crate::places::patches_root(out.path);
    let repo = repo.as_path();
    for (i, step) in model.patches.iter().enumerate() {
        let base = format!("model.patches[{i}].{}", step.kind());
        let rel = check_step(out, &base, step, repo);
        for (key, p) in rel {
            if !inside(p) {
                out.bad(
                    &key,
                    format!("`{p}` leaves the model directory"),
                    "use a path relative to model.path, without '..'",
                );
            }
        }
    }
}

/// One patch step's own values; returns the paths it names, by key, that must stay inside
/// the model directory.
fn check_step<'s>(
    out: &mut Report,
    base: &str,
    step: &'s PatchStep,
    repo: &Path,
) -> BTreeMap<String, &'s str> {
    let mut rel: BTreeMap<String, &str> = BTreeMap::new();
    match step {
        PatchStep::JsonEdit { file, ops } => {
            rel.insert(format!("{base}.file"), file);
            for (j, op) in ops.iter().enumerate() {
                let pointer = match op {
                    super::JsonOp::Set { pointer, .. }
                    | super::JsonOp::Rename { pointer, .. }
                    | super::JsonOp::Delete { pointer } => pointer,
                };
                if !pointer.starts_with('/') {
                    out.bad(
                        &format!("{base}.ops[{j}]"),
                        format!("`{pointer}` is not a JSON pointer"),
                        "JSON pointers start with '/', e.g. /model_type",
                    );
                }
            }
        }
        PatchStep::CopyFrom { donor, files } => {
            if donor.is_empty() {
                out.bad(
                    &format!("{base}.donor"),
                    "the donor model dir is empty".into(),
                    "",
                );
            }
            for (j, f) in files.iter().enumerate() {
                rel.insert(format!("{base}.files[{j}]"), f);
            }
        }
        PatchStep::WriteFile { path: p, from, .. } => {
            rel.insert(format!("{base}.path"), p);
            let shipped = repo.join(from);
            if !from.starts_with("patches/") || !inside(from) {
                out.bad(
                    &format!("{base}.from"),
                    format!("`{from}` is not under patches/"),
                    "ship the file in the repository's patches/ directory",
                );
            } else if !shipped.is_file() {
                out.bad(
                    &format!("{base}.from"),
                    format!("{} does not exist", shipped.display()),
                    "add the file to patches/ or fix the path",
                );
            }
        }
        PatchStep::Chown { to } => {
            let ok = to == "invoking-user"
                || to
                    .split_once(':')
                    .is_some_and(|(u, g)| u.parse::<u32>().is_ok() && g.parse::<u32>().is_ok());
            if !ok {
                out.bad(
                    &format!("{base}.to"),
                    format!("`{to}` is not an owner"),
                    "write `invoking-user` or UID:GID",
                );
            }
        }
        PatchStep::Expect { file, pointer, .. } => {
            rel.insert(format!("{base}.file"), file);
            if !pointer.starts_with('/') {
                out.bad(
                    &format!("{base}.pointer"),
                    format!("`{pointer}` is not a JSON pointer"),
                    "JSON pointers start with '/'",
                );
            }
        }
        PatchStep::ExpectFiles { files } => {
            for (j, f) in files.iter().enumerate() {
                rel.insert(format!("{base}.files[{j}]"), f);
            }
        }
        PatchStep::WrapVlConfig { .. } | PatchStep::ExpectSafetensors {} => {}
    }
    rel
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate_rules() {
        for ok in ["== 0%", ">= 60%", "<= 1500ms", "> 25", "<=1.5"] {
            assert!(GateRule::new("no_markdown", ok).is_ok(), "{ok}");
        }
        for bad in ["0%", "== lots", "=> 3", ""] {
            assert!(
                matches!(GateRule::new("no_markdown", bad), Err(GateError::Rule(..))),
                "{bad}"
            );
        }
    }

    #[test]
    fn paths_inside_the_model_dir() {
        assert!(inside("config.json"));
        assert!(inside("sub/x.json"));
        assert!(!inside("../x"));
        assert!(!inside("/etc/passwd"));
        assert!(!inside("a/../../x"));
    }
}
