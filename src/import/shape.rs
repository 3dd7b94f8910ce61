//! What was seen, as a recipe: the engine guessed, the flags sparkctl owns (model, served
//! name, host, port) taken out of the arguments into their keys, the port moved off the
//! production port (the front door owns it), secrets left out (`secrets`) before anything
//! reads the command line, the model dir's patches suggested.

use super::secrets::{self, LeftOut};
use super::{guess, model_dir, ContainerSeen, Draft, Machine, Observed, Seen};
use crate::engine::{Engine, Flag, Profile};
use crate::error::Result;
use crate::recipe::{expand_home, Health, Model, Recipe, Runtime, Server};

/// How each engine spells the settings sparkctl owns, beyond the profile's own flag.
fn aliases(engine: Engine, flag: Flag, what: &str) -> Vec<&'static str> {
    let mut names: Vec<&'static str> = match flag {
        Flag::Named(n) => vec![n],
        Flag::Omitted => vec![],
    };
    let more: &[&'static str] = match (engine, what) {
        (Engine::LlamaServer, "model") => &["--model"],
        (Engine::LlamaServer, "served") => &["-a"],
        (Engine::Sglang, "model") => &["--model"],
        _ => &[],
    };
    names.extend(more);
    names
}

/// Removes `--flag VALUE` / `--flag=VALUE` (any of `names`) from `args`; the last value wins.
fn take(args: &mut Vec<String>, names: &[&str]) -> Option<String> {
    let mut found = None;
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if let Some((n, v)) = a.split_once('=').filter(|(n, _)| names.contains(n)) {
            let _ = n;
            found = Some(v.to_string());
            args.remove(i);
        } else if names.contains(&a.as_str()) && i + 1 < args.len() {
            found = Some(args.remove(i + 1));
            args.remove(i);
        } else {
            i += 1;
        }
    }
    found
}

/// A port for the recipe: the one seen, unless the front door owns it; then the engine's
/// usual port, or the next free one.
fn backend_port(seen: u16, profile: &Profile, machine: &Machine) -> u16 {
    if seen != machine.production_port {
        return seen;
    }
    let mut p = profile.container_port;
    while p == machine.production_port || crate::host::listener_on(p).is_some() {
        p = p.wrapping_add(1).max(1024);
    }
    p
}

pub(crate) fn shape(name: &str, mut observed: Observed, machine: &Machine) -> Result<Draft> {
    let left_out = leave_out_secrets(&mut observed.launch);
    let mut unknown = left_out.notes();
    let mut notes = Vec::new();
    let (image, argv) = match &observed.launch {
        Seen::Process { program, args, .. } => {
            (None, [vec![program.clone()], args.clone()].concat())
        }
        Seen::Container(c) => (
            Some(c.image.as_str()),
            [c.entrypoint.clone().unwrap_or_default(), c.cmd.clone()].concat(),
        ),
    };
    let (engine, why) = guess::engine(image, &argv);
    notes.push(format!("engine {engine}: {why}"));
    let profile = engine.profile();
    let mut recipe = Recipe {
        name: name.to_string(),
        description: Some(format!("Imported from {}", observed.from)),
        engine,
        runtime: None,
        image: None,
        binary: None,
        python: None,
        model: None,
        server: empty_server(),
        health: Health::default(),
        bench: None,
        nodes: None,
        fallback: None,
        live: None,
        notify: None,
        serve: None,
        rollout: None,
    };
    let (mut args, cwd, model_mount) = match &observed.launch {
        Seen::Process { program, args, cwd } => {
            recipe.runtime = Some(Runtime::Process);
            let args = launcher(&mut recipe, &profile, program, args);
            (args, cwd.clone(), None)
        }
        Seen::Container(c) => {
            recipe.runtime = Some(Runtime::Docker);
            recipe.image = Some(c.image.clone());
            let args = container_args(c, &profile, &mut notes, &mut unknown);
            container_settings(&mut recipe.server, c);
            (args, None, Some(c))
        }
    };
    let model = take(&mut args, &aliases(engine, profile.model_flag, "model"))
        .or_else(|| positional_model(engine, &mut args));
    let served = take(
        &mut args,
        &aliases(engine, profile.served_name_flag, "served"),
    );
    let port_arg = take_owned(&mut args, profile.port_flag);
    let host_arg = take_owned(&mut args, profile.host_flag);
    // Where it was reached on the host, and where it listened.
    let (seen_port, container_port) = ports(&observed, model_mount, port_arg.as_deref(), &profile);
    let port = backend_port(seen_port, &profile, machine);
    if port != seen_port {
        notes.push(format!(
            "it served on port {seen_port}, the production port, which the front door owns: \
             this recipe serves on {port} behind it"
        ));
    }
    if let Flag::Omitted = profile.port_flag {
        // sparkctl passes no port: the server's own flag must say the recipe's port.
        rewrite_port(&mut args, seen_port, port);
    }
    notes.extend(wide_note(host_arg.as_deref(), model_mount));
    recipe.server.port = port;
    recipe.server.container_port = container_port.filter(|p| *p != profile.container_port);
    recipe.server.args = args;
    let mut names = observed.env_names.clone();
    names.dedup();
    recipe.server.env_from_host = names;
    if !recipe.server.env_from_host.is_empty() {
        notes.push(
            "environment: names only (its values were not read); they are taken from your \
             environment at start, or write them under server.env"
                .into(),
        );
    }
    let suggested = set_model(&mut recipe, model, served, cwd.as_deref(), &mut unknown);
    memory(&mut recipe, observed.rss, &mut notes, &mut unknown);
    if recipe.runtime == Some(Runtime::Docker) && observed.origin.is_none() {
        unknown.push(format!(
            "image digest: not pinned (no container ran it); `sparkctl images pin {name}` pins it"
        ));
    }
    unknown.extend(
        observed
            .dropped
            .iter()
            .map(|d| format!("not carried over: {d}")),
    );
    // What the comments quote of the command line (`it ran …`, a docker option's value)
    // has no secret left in it either.
    let scrub = |items: Vec<String>| items.iter().map(|i| left_out.scrub(i)).collect();
    Ok(Draft {
        recipe,
        unknown: scrub(unknown),
        notes: scrub(notes),
        suggested_patches: suggested,
        origin: observed.origin,
        seen_port: Some(seen_port),
        left_out,
    })
}

/// What to say of a server that listened beyond loopback.
fn wide_note(host_arg: Option<&str>, container: Option<&ContainerSeen>) -> Option<String> {
    let wide = host_arg.is_some_and(|h| h != "127.0.0.1" && h != "localhost")
        || container.is_some_and(|c| {
            c.ports
                .iter()
                .any(|p| p.host_ip.is_empty() || p.host_ip == "0.0.0.0")
        });
    wide.then(|| {
        "it listened on every interface; the recipe binds loopback and the front door faces \
         the LAN (SPARKCTL_FRONTDOOR_HOST=0.0.0.0, with a key: SPARKCTL_FRONTDOOR_API_KEY_FILE)"
            .into()
    })
}

/// The secrets of the command line that was seen, taken out of it.
fn leave_out_secrets(launch: &mut Seen) -> LeftOut {
    let mut left = LeftOut::default();
    match launch {
        Seen::Process { args, .. } => secrets::drop_from(args, &mut left),
        Seen::Container(c) => {
            secrets::drop_from(&mut c.cmd, &mut left);
            if let Some(entry) = c.entrypoint.as_mut() {
                secrets::drop_from(entry, &mut left);
            }
        }
    }
    left
}

fn empty_server() -> Server {
    serde_yaml_ng::from_str("port: 1").expect("a minimal server parses")
}

fn take_owned(args: &mut Vec<String>, flag: Flag) -> Option<String> {
    match flag {
        Flag::Named(n) => take(args, &[n]),
        Flag::Omitted => None,
    }
}

/// `vllm serve MODEL` and the vllm-openai image's `serve` entrypoint take the model first.
fn positional_model(engine: Engine, args: &mut Vec<String>) -> Option<String> {
    if engine != Engine::Vllm {
        return None;
    }
    let at = usize::from(args.first().is_some_and(|a| a == "serve"));
    match args.get(at) {
        Some(m) if !m.starts_with('-') => Some(args.remove(at)),
        _ => None,
    }
}

fn rewrite_port(args: &mut [String], from: u16, to: u16) {
    for i in 0..args.len() {
        if args[i] == "--port" && args.get(i + 1) == Some(&from.to_string()) {
            args[i + 1] = to.to_string();
        }
    }
}

/// A process's launcher: `binary`, or `python` for an engine's server module, or nothing for
/// `sparkctl sim`. Returns the arguments that follow it.
fn launcher(recipe: &mut Recipe, profile: &Profile, program: &str, args: &[String]) -> Vec<String> {
    let base = program.rsplit('/').next().unwrap_or(program);
    if recipe.engine == Engine::Sim
        && base == "sparkctl"
        && args.first().is_some_and(|a| a == "sim")
    {
        return args[1..].to_vec();
    }
    if let (true, Some(module)) = (base.starts_with("python"), profile.python_module) {
        if args.len() >= 2 && args[0] == "-m" && args[1] == module {
            recipe.python = Some(program.to_string());
            return args[2..].to_vec();
        }
    }
    recipe.binary = Some(program.to_string());
    args.to_vec()
}

/// The container's arguments after the engine's own command (which the recipe supplies).
fn container_args(
    c: &ContainerSeen,
    profile: &Profile,
    notes: &mut Vec<String>,
    unknown: &mut Vec<String>,
) -> Vec<String> {
    let owned: Vec<String> = profile
        .docker_command
        .iter()
        .map(|s| s.to_string())
        .collect();
    let entry = c.entrypoint.clone().unwrap_or_default();
    if owned.is_empty() {
        if c.entrypoint_given {
            unknown.push(format!(
                "--entrypoint {}: the recipe runs the image's entrypoint",
                entry.join(" ")
            ));
        }
        return c.cmd.clone();
    }
    // The engine's command may be split between the entrypoint and the command.
    for k in 0..=owned.len() {
        let (in_entry, in_cmd) = owned.split_at(k);
        if entry.ends_with(in_entry)
            && c.cmd.starts_with(in_cmd)
            && (k > 0 || entry.is_empty() || entry == owned)
        {
            return c.cmd[in_cmd.len()..].to_vec();
        }
    }
    let full = [entry, c.cmd.clone()].concat();
    if full.starts_with(&owned) {
        return full[owned.len()..].to_vec();
    }
    notes.push(format!(
        "it ran `{}`; the recipe runs the engine's usual `{}` with the same arguments",
        full.join(" "),
        owned.join(" ")
    ));
    c.cmd.clone()
}

fn container_settings(server: &mut Server, c: &ContainerSeen) {
    server.gpus = c.gpus.clone();
    server.ipc = c.ipc;
    server.shm_size = c.shm_size;
    server.ulimits = c.ulimits.clone();
    server.user = c.user.clone();
    server.mounts = c.mounts.clone();
}

/// The port it was reached on (the host's) and, for a container, the port inside.
fn ports(
    observed: &Observed,
    container: Option<&ContainerSeen>,
    port_arg: Option<&str>,
    profile: &Profile,
) -> (u16, Option<u16>) {
    let arg: Option<u16> = port_arg.and_then(|p| p.parse().ok());
    let origin = observed.origin.as_ref().and_then(|o| o.port());
    match container {
        None => (arg.or(origin).unwrap_or(profile.container_port), None),
        Some(c) => match c.ports.first() {
            Some(p) => (p.host_port, Some(arg.unwrap_or(p.container_port))),
            None => {
                let inside = arg.unwrap_or(profile.container_port);
                (origin.unwrap_or(inside), Some(inside))
            }
        },
    }
}

/// model.path (a host path; for a container, the mount that holds it), the served name,
/// and the patches its dir suggests.
fn set_model(
    recipe: &mut Recipe,
    model: Option<String>,
    served: Option<String>,
    cwd: Option<&std::path::Path>,
    unknown: &mut Vec<String>,
) -> Vec<model_dir::Suggestion> {
    let Some(value) = model else {
        if !matches!(recipe.engine, Engine::Sim | Engine::Openai | Engine::Trtllm) {
            unknown.push("model.path: no model flag was seen; set the model file or dir".into());
        }
        // The served name lives in model.served_name, which needs a model path.
        if let Some(s) = served {
            unknown.push(format!(
                "model.served_name: it answered as `{s}`; set model.path and served_name to keep that name"
            ));
        }
        return Vec::new();
    };
    let (path, mount) = match recipe.runtime {
        Some(Runtime::Docker) => host_of(&mut recipe.server, &value, unknown),
        _ => {
            let p = std::path::Path::new(&value);
            let abs = match cwd {
                Some(c) if p.is_relative() && !value.starts_with('~') => {
                    c.join(p).display().to_string()
                }
                _ => value.clone(),
            };
            (super::tilde(&abs), None)
        }
    };
    let suggested = model_dir::suggest(std::path::Path::new(&expand_home(&path)));
    recipe.model = Some(model_of(path, mount, served));
    suggested
}

fn model_of(path: String, mount: Option<String>, served_name: Option<String>) -> Model {
    let mut m: Model = serde_yaml_ng::from_str("path: x").expect("a minimal model parses");
    m.path = path;
    m.mount = mount.filter(|m| m != "/model");
    m.served_name = served_name;
    m
}

/// The host path behind a container path, through the bind mount that holds it; a mount
/// of exactly the model becomes the recipe's model mount.
fn host_of(
    server: &mut Server,
    value: &str,
    unknown: &mut Vec<String>,
) -> (String, Option<String>) {
    let exact = server.mounts.iter().position(|m| m.container == value);
    if let Some(i) = exact {
        let m = server.mounts.remove(i);
        return (m.host, Some(value.to_string()));
    }
    let parent = server
        .mounts
        .iter()
        .find(|m| value.starts_with(&format!("{}/", m.container.trim_end_matches('/'))));
    if let Some(m) = parent {
        let rest = &value[m.container.trim_end_matches('/').len()..];
        return (
            format!("{}{rest}", m.host.trim_end_matches('/')),
            Some(value.to_string()),
        );
    }
    unknown.push(format!(
        "model.path: the server loaded `{value}`, which no bind mount holds (a Hugging Face id, \
         or a path inside the image); set model.path to the model on this machine"
    ));
    (value.to_string(), None)
}

fn memory(
    recipe: &mut Recipe,
    rss: Option<u64>,
    notes: &mut Vec<String>,
    unknown: &mut Vec<String>,
) {
    match rss {
        Some(bytes) if bytes > 0 => {
            let gb = ((bytes as f64 / 1e9) * 10.0).ceil() / 10.0;
            recipe.server.memory_gb = Some(gb.max(0.1));
            notes.push(format!(
                "server.memory_gb {gb:.1}: the process's resident memory when imported (GPU memory \
                 outside the unified pool is not in it); raise it if the server grows"
            ));
        }
        _ => unknown.push(
            "server.memory_gb: how much of the memory pool it needs is unknown; set it so `up` \
             and `adopt` can plan memory"
                .into(),
        ),
    }
}
