//! Checks serde cannot make on a job recipe: names, argv, mounts, expectations, the
//! progress pattern. Each problem is a diagnostic at its key's line.

use super::recipe::{JobRecipe, LoadedJob};
use crate::error::Diagnostic;
use crate::recipe::{env_name_ok, inside, PatchStep, Report, ULIMITS};
use crate::yaml::Loose;

pub(super) fn check(job: &LoadedJob, loose: &[Loose]) -> Vec<Diagnostic> {
    let mut out = Report::new(&job.path, &job.source);
    let r = &job.recipe;
    check_name(&mut out, r);
    check_command(&mut out, r, loose);
    check_mounts(&mut out, r);
    check_limits(&mut out, r);
    for (i, o) in r.outputs.iter().enumerate() {
        check_expect(&mut out, &format!("outputs[{i}].expect"), &o.expect);
    }
    if let Some(p) = &r.progress {
        check_progress(&mut out, p);
    }
    out.diags
}

fn check_name(out: &mut Report, r: &JobRecipe) {
    crate::recipe::check_name(out, &r.name, "job");
    if let Some(p) = crate::recipe::image_problem(&r.image) {
        out.bad("image", p.message, &p.help);
    }
}

fn check_command(out: &mut Report, r: &JobRecipe, loose: &[Loose]) {
    if r.argv.is_empty() {
        out.bad(
            "argv",
            "argv is empty: the job would run nothing".into(),
            "list the command word by word, e.g. [python3, /scripts/quantize.py]",
        );
    }
    for l in loose {
        if l.path.starts_with("argv[") || l.path.starts_with("entrypoint[") {
            out.diags.push(Diagnostic::at(
                out.path,
                Some((l.line, l.column)),
                Some(l.path.clone()),
                format!("{} is YAML's null or a boolean, not a string", l.text),
                Some(format!(
                    "each entry is one argv string: quote it (\"{}\") if you mean the text",
                    l.text
                )),
            ));
        }
    }
    if let Some(w) = &r.workdir {
        if !w.starts_with('/') {
            out.bad(
                "workdir",
                format!("`{w}` is not an absolute path in the container"),
                "start it with '/', e.g. /workspace",
            );
        }
    }
    for name in r.env.keys() {
        if !env_name_ok(name) {
            out.bad(
                &format!("env.{name}"),
                format!("`{name}` is not an environment variable name"),
                "use letters, digits and '_', not starting with a digit",
            );
        }
    }
    for (i, name) in r.env_from_host.iter().enumerate() {
        if !env_name_ok(name) || r.env.contains_key(name) {
            out.bad(
                &format!("env_from_host[{i}]"),
                format!("`{name}` is not a variable name, or is also set in env"),
                "list variable names only, once; values are read from the host at start",
            );
        }
    }
}

fn check_mounts(out: &mut Report, r: &JobRecipe) {
    if r.outputs.is_empty() {
        out.bad(
            "outputs",
            "a job needs at least one output directory".into(),
            "add `outputs: [{path: ~/models/NAME, mount: /out}]`",
        );
    }
    let groups = [
        (
            "inputs",
            r.inputs
                .iter()
                .map(|i| (&i.path, &i.mount))
                .collect::<Vec<_>>(),
        ),
        (
            "outputs",
            r.outputs.iter().map(|o| (&o.path, &o.mount)).collect(),
        ),
        (
            "caches",
            r.caches.iter().map(|c| (&c.path, &c.mount)).collect(),
        ),
    ];
    let mut seen: Vec<&str> = Vec::new();
    for (group, mounts) in groups {
        for (i, (path, mount)) in mounts.into_iter().enumerate() {
            if path.is_empty() {
                out.bad(
                    &format!("{group}[{i}].path"),
                    "the path is empty".into(),
                    "",
                );
            }
            if !mount.starts_with('/') || mount == "/" {
                out.bad(
                    &format!("{group}[{i}].mount"),
                    format!("`{mount}` is not a directory inside the container"),
                    "use an absolute path such as /models/out",
                );
            } else if seen.contains(&mount.as_str()) {
                out.bad(
                    &format!("{group}[{i}].mount"),
                    format!("`{mount}` is mounted twice"),
                    "give each input, output and cache its own mount point",
                );
            }
            seen.push(mount);
        }
    }
}

fn check_limits(out: &mut Report, r: &JobRecipe) {
    for (name, &v) in &r.ulimits {
        if !ULIMITS.contains(&name.as_str()) {
            let help = crate::recipe::did_you_mean(name, ULIMITS, "known ulimits");
            out.bad(
                &format!("ulimits.{name}"),
                format!("unknown ulimit `{name}`"),
                &help,
            );
        } else if v < -1 {
            out.bad(
                &format!("ulimits.{name}"),
                format!("{v} is not a limit"),
                "write a number from 0 up, or -1 for unlimited",
            );
        }
    }
    if let Some(gb) = r.memory_gb {
        if !(gb > 0.0 && gb <= 128.0) {
            out.bad(
                "memory_gb",
                format!("{gb} GB is not a memory budget on a 128 GB machine"),
                "give the GB the job needs, e.g. 20",
            );
        }
    }
    if let Some(u) = &r.user {
        let id = |s: &str| s.parse::<u32>().is_ok();
        let ok = matches!(u.as_str(), "invoking-user" | "root")
            || u.split_once(':').map_or(id(u), |(a, b)| id(a) && id(b));
        if !ok {
            out.bad(
                "user",
                format!("`{u}` is not a user for a job"),
                "write invoking-user (the default), root (outputs are given back afterwards) \
                 or UID:GID",
            );
        }
    }
}

fn check_expect(out: &mut Report, base: &str, steps: &[PatchStep]) {
    for (i, step) in steps.iter().enumerate() {
        let key = format!("{base}[{i}].{}", step.kind());
        let mut paths: Vec<&String> = Vec::new();
        match step {
            PatchStep::Expect { file, pointer, .. } => {
                paths.push(file);
                if !pointer.starts_with('/') {
                    out.bad(
                        &format!("{key}.pointer"),
                        format!("`{pointer}` is not a JSON pointer"),
                        "JSON pointers start with '/'",
                    );
                }
            }
            PatchStep::ExpectFiles { files } => paths.extend(files),
            PatchStep::ExpectSafetensors {} => {}
            other => out.bad(
                &key,
                format!(
                    "`{}` changes files; a job's outputs are only checked",
                    other.kind()
                ),
                "use expect, expect-files or expect-safetensors here; patch steps belong to \
                 the serving recipe that uses the outputs",
            ),
        }
        for p in paths {
            if !inside(p) {
                out.bad(
                    &key,
                    format!("`{p}` leaves the output directory"),
                    "use a path relative to the output's path, without '..'",
                );
            }
        }
    }
}

fn check_progress(out: &mut Report, pattern: &str) {
    match regex::Regex::new(pattern) {
        Err(e) => out.bad(
            "progress",
            format!(
                "not a regular expression: {}",
                e.to_string().replace('\n', " ")
            ),
            "e.g. 'step (\\d+)/(\\d+)' (single quotes keep the backslashes)",
        ),
        Ok(re) if re.captures_len() != 3 => out.bad(
            "progress",
            format!(
                "the pattern has {} group(s); it needs two: done and total",
                re.captures_len() - 1
            ),
            "e.g. 'step (\\d+)/(\\d+)'",
        ),
        Ok(_) => {}
    }
}
