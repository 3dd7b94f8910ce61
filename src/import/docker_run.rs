//! A pasted `docker run …` line, read as Docker's CLI reads it: words split by the shell's
//! rules (`words`), then options (pflag style: `--name value`, `--name=value`, `-p8000:8000`,
//! grouped booleans `-it`) up to the image, then the command. Nothing is run.

use std::collections::BTreeMap;

use super::{words, ContainerSeen, Observed, Published, Seen};
use crate::error::{Error, Result};
use crate::recipe::{ExtraMount, Gpus, Ipc};
use crate::units::{parse_size, ByteSize};

/// Options of `docker run` that take no value (everything else takes one).
const BOOLEAN: &[&str] = &[
    "--detach",
    "--rm",
    "--interactive",
    "--tty",
    "--init",
    "--privileged",
    "--publish-all",
    "--read-only",
    "--sig-proxy",
    "--no-healthcheck",
    "--oom-kill-disable",
    "--disable-content-trust",
    "--quiet",
    "--help",
    "--use-api-socket",
];
const SHORT_BOOLEAN: &str = "ditPq";

/// Options that change nothing a recipe describes: dropped without a word.
const IRRELEVANT: &[&str] = &[
    "--detach",
    "--rm",
    "--interactive",
    "--tty",
    "--name",
    "--init",
    "--quiet",
    "--sig-proxy",
    "--pull",
    "--restart",
    "--hostname",
];

pub(crate) async fn observe(line: &str, docker: Option<&bollard::Docker>) -> Result<Observed> {
    let words = words::split(line).map_err(|e| bad(format!("{e}")))?;
    let (mut seen, env_names, dropped) = parse(&words)?;
    // The image's entrypoint, when the image is here: what the command is appended to.
    if let (None, Some(docker)) = (&seen.entrypoint, docker) {
        if let Ok(i) = docker.inspect_image(&seen.image).await {
            seen.entrypoint = i.config.and_then(|c| c.entrypoint);
        }
    }
    Ok(Observed {
        from: "a pasted docker run line".into(),
        launch: Seen::Container(seen),
        env_names,
        dropped,
        origin: None,
        rss: None,
    })
}

type Parsed = (ContainerSeen, Vec<String>, Vec<String>);

/// The container, the environment's names, and what a recipe cannot carry.
pub(crate) fn parse(words: &[String]) -> Result<Parsed> {
    let rest = after_run(words)?;
    let mut seen = ContainerSeen::default();
    let (mut env, mut dropped) = (Vec::new(), Vec::new());
    let mut i = 0;
    while i < rest.len() {
        let w = &rest[i];
        if w == "--" {
            i += 1;
            break;
        }
        if !w.starts_with('-') || w == "-" {
            break;
        }
        let (flag, value, used) = option_at(rest, i)?;
        i += used;
        apply(&mut seen, &mut env, &mut dropped, &flag, value)?;
    }
    let image = rest
        .get(i)
        .ok_or_else(|| bad("no image after the options; paste the whole line"))?;
    seen.image = image.clone();
    seen.cmd = rest[i + 1..].to_vec();
    Ok((seen, env, dropped))
}

/// The words after `docker run` (or `docker container run`, `sudo docker run`, `podman run`).
fn after_run(words: &[String]) -> Result<&[String]> {
    let mut i = 0;
    if words.first().map(String::as_str) == Some("sudo") {
        i += 1;
    }
    let tool = words.get(i).map(|w| w.rsplit('/').next().unwrap_or(w));
    if !matches!(tool, Some("docker" | "podman" | "nvidia-docker")) {
        return Err(bad(
            "the line must start with `docker run`; for a host command use --command",
        ));
    }
    i += 1;
    if words.get(i).map(String::as_str) == Some("container") {
        i += 1;
    }
    if words.get(i).map(String::as_str) != Some("run") {
        return Err(bad("only `docker run` lines can be imported"));
    }
    Ok(&words[i + 1..])
}

/// The option at `i`: its long name, its value, and how many words it took.
fn option_at(rest: &[String], i: usize) -> Result<(String, Option<String>, usize)> {
    let w = &rest[i];
    let needs_value = |long: &str| !BOOLEAN.contains(&long);
    if let Some(long) = w.strip_prefix("--") {
        if let Some((name, value)) = long.split_once('=') {
            return Ok((format!("--{name}"), Some(value.to_string()), 1));
        }
        let name = format!("--{long}");
        if !needs_value(&name) {
            return Ok((name, None, 1));
        }
        let value = rest
            .get(i + 1)
            .ok_or_else(|| bad(format!("{name} needs a value")))?;
        return Ok((name, Some(value.clone()), 2));
    }
    // Short options: booleans may be grouped (`-it`); the first that takes a value takes
    // the rest of the word, or the next word.
    let short = &w[1..];
    for (at, c) in short.char_indices() {
        if SHORT_BOOLEAN.contains(c) {
            continue;
        }
        let name = long_of(c)?;
        let attached = &short[at + c.len_utf8()..];
        let attached = attached.strip_prefix('=').unwrap_or(attached);
        if !attached.is_empty() {
            return Ok((name, Some(attached.to_string()), 1));
        }
        let value = rest
            .get(i + 1)
            .ok_or_else(|| bad(format!("-{c} needs a value")))?;
        return Ok((name, Some(value.clone()), 2));
    }
    // Only booleans: none of them matter to a recipe.
    Ok(("--detach".into(), None, 1))
}

fn long_of(c: char) -> Result<String> {
    Ok(match c {
        'e' => "--env",
        'v' => "--volume",
        'p' => "--publish",
        'u' => "--user",
        'w' => "--workdir",
        'h' => "--hostname",
        'l' => "--label",
        'm' => "--memory",
        'a' => "--attach",
        'c' => "--cpu-shares",
        other => return Err(bad(format!("`-{other}` is not a docker run option"))),
    }
    .to_string())
}

fn apply(
    seen: &mut ContainerSeen,
    env: &mut Vec<String>,
    dropped: &mut Vec<String>,
    flag: &str,
    value: Option<String>,
) -> Result<()> {
    let value = value.unwrap_or_default();
    // What it quotes of the line has no secret in it (a value such as `token=…`).
    let bad = |what: &str| {
        bad(crate::secrets::scrub(
            &format!("{flag} {value}: {what}"),
            None,
        ))
    };
    match flag {
        "--env" => {
            let name = value.split('=').next().unwrap_or_default().to_string();
            if !crate::recipe::env_name_ok(&name) {
                // Not quoted: a value that is no NAME=VALUE may be the secret itself.
                return Err(bad(
                    "an --env value is not NAME or NAME=VALUE (not repeated \
                     here: it may hold a secret)",
                ));
            }
            env.push(name);
        }
        "--volume" => seen
            .mounts
            .push(volume(&value).ok_or_else(|| {
                bad("not HOST:CONTAINER[:ro] (named volumes cannot be imported)")
            })?),
        "--mount" => seen
            .mounts
            .push(mount(&value).ok_or_else(|| bad("only type=bind mounts can be imported"))?),
        "--publish" => seen
            .ports
            .push(publish(&value).ok_or_else(|| bad("not [IP:]HOST:CONTAINER"))?),
        "--gpus" => seen.gpus = Some(gpus(&value).ok_or_else(|| bad("not all or a count"))?),
        "--ipc" => {
            seen.ipc = Some(match value.as_str() {
                "host" => Ipc::Host,
                "private" => Ipc::Private,
                "shareable" => Ipc::Shareable,
                _ => return Err(bad("not host, private or shareable")),
            })
        }
        "--shm-size" => seen.shm_size = Some(ByteSize(parse_size(&value).map_err(|e| bad(&e))?)),
        "--ulimit" => {
            let (name, v) = ulimit(&value).ok_or_else(|| bad("not NAME=SOFT[:HARD]"))?;
            seen.ulimits.insert(name, v);
        }
        "--user" => seen.user = Some(value),
        "--entrypoint" => {
            seen.entrypoint = Some(vec![value]);
            seen.entrypoint_given = true;
        }
        "--network" | "--net" if value == "host" => seen.network_host = true,
        "--runtime" if value == "nvidia" => {
            seen.gpus.get_or_insert(Gpus::All);
        }
        f if IRRELEVANT.contains(&f) => {}
        f => dropped.push(format!("docker run option {f} {value}").trim().to_string()),
    }
    Ok(())
}

/// `HOST:CONTAINER[:OPTS]`, where HOST is a path (a named volume is not a host dir).
pub(super) fn volume(v: &str) -> Option<ExtraMount> {
    let parts: Vec<&str> = v.split(':').collect();
    let (host, container, opts) = match parts.as_slice() {
        [h, c] => (*h, *c, ""),
        [h, c, o] => (*h, *c, *o),
        _ => return None,
    };
    if !(host.starts_with('/') || host.starts_with('~') || host.starts_with('.')) {
        return None;
    }
    Some(ExtraMount {
        host: super::tilde(host),
        container: container.to_string(),
        read_only: opts.split(',').any(|o| o == "ro"),
    })
}

fn mount(v: &str) -> Option<ExtraMount> {
    let fields: BTreeMap<&str, &str> = v
        .split(',')
        .map(|kv| kv.split_once('=').unwrap_or((kv, "true")))
        .collect();
    if fields.get("type").copied().unwrap_or("volume") != "bind" {
        return None;
    }
    let host = fields.get("source").or(fields.get("src"))?;
    let container = fields
        .get("target")
        .or(fields.get("destination"))
        .or(fields.get("dst"))?;
    Some(ExtraMount {
        host: super::tilde(host),
        container: container.to_string(),
        read_only: fields
            .get("readonly")
            .or(fields.get("ro"))
            .is_some_and(|v| *v != "false" && *v != "0"),
    })
}

fn publish(v: &str) -> Option<Published> {
    let v = v.strip_suffix("/tcp").unwrap_or(v);
    let parts: Vec<&str> = v.rsplitn(3, ':').collect();
    let (ip, host, container) = match parts.as_slice() {
        [c, h, ip] => (ip.trim_matches(['[', ']']), *h, *c),
        [c, h] => ("", *h, *c),
        [c] => ("", *c, *c),
        _ => return None,
    };
    Some(Published {
        host_ip: ip.to_string(),
        host_port: host.parse().ok()?,
        container_port: container.parse().ok()?,
    })
}

pub(super) fn gpus(v: &str) -> Option<Gpus> {
    let v = v.trim_matches('"');
    let count = v.strip_prefix("count=").unwrap_or(v);
    match count {
        "all" => Some(Gpus::All),
        n => n.parse().ok().map(Gpus::Count),
    }
}

fn ulimit(v: &str) -> Option<(String, i64)> {
    let (name, limits) = v.split_once('=')?;
    let soft = limits.split(':').next()?;
    Some((name.to_string(), soft.parse().ok()?))
}

/// A pasted line `--docker-run` cannot import: why.
fn bad(why: impl Into<String>) -> Error {
    Error::BadFlag(crate::error::FlagProblem::Said {
        flag: "--docker-run",
        why: why.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(line: &str) -> Parsed {
        parse(&words::split(line).unwrap()).unwrap()
    }

    #[test]
    fn options_are_read_as_dockers_cli_reads_them() {
        let (seen, env, dropped) = parsed(
            "sudo docker run -it --rm --gpus all --ipc=host --shm-size 16g \
             --ulimit memlock=-1 --ulimit stack=67108864:67108864 -eHF_TOKEN -e A=1 \
             -v ~/models/m:/model:ro --mount type=bind,source=/data,target=/data \
             -p 127.0.0.1:8000:8000 --cpus 4 -u 1000:1000 img:1 --flag x",
        );
        assert_eq!(seen.image, "img:1");
        assert_eq!(seen.cmd, ["--flag", "x"]);
        assert_eq!(seen.gpus, Some(Gpus::All));
        assert_eq!(seen.ipc, Some(Ipc::Host));
        assert_eq!(seen.shm_size, Some(ByteSize(16 << 30)));
        assert_eq!(seen.ulimits["memlock"], -1);
        assert_eq!(seen.ulimits["stack"], 67108864);
        assert_eq!(env, ["HF_TOKEN", "A"]);
        assert_eq!(seen.mounts.len(), 2);
        assert!(seen.mounts[0].read_only && !seen.mounts[1].read_only);
        assert_eq!(
            seen.ports,
            [Published {
                host_ip: "127.0.0.1".into(),
                host_port: 8000,
                container_port: 8000
            }]
        );
        assert_eq!(seen.user.as_deref(), Some("1000:1000"));
        assert_eq!(dropped, ["docker run option --cpus 4"]);
    }

    #[test]
    fn lines_that_are_not_docker_run_are_refused() {
        for line in ["llama-server -m x", "docker ps", "docker run --rm"] {
            assert!(parse(&words::split(line).unwrap()).is_err(), "{line}");
        }
        assert!(parse(&words::split("docker run -Z x img").unwrap()).is_err());
    }
}
