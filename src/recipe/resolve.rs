//! A recipe with engine defaults filled in, and the exact launch it describes.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{Gpus, Ipc, Recipe, Runtime};
use crate::engine::{Engine, Flag, Profile};
use crate::units::{ByteSize, HumanDuration};

/// Everything a runtime needs to start a recipe, decided before anything runs.
#[derive(Debug, Clone, Serialize)]
pub struct Resolved {
    pub(crate) name: String,
    pub(crate) engine: Engine,
    pub(crate) runtime: Runtime,
    pub(crate) port: u16,
    pub(crate) host: String,
    pub(crate) health_path: String,
    pub(crate) health_timeout: HumanDuration,
    /// How long readiness's one-token completion may take once health says ok.
    pub(crate) completion_timeout: HumanDuration,
    pub(crate) memory_gb: Option<f64>,
    pub(crate) launch: Launch,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "runtime", rename_all = "lowercase")]
pub(crate) enum Launch {
    Docker(ContainerLaunch),
    Process {
        program: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        env_from_host: Vec<String>,
    },
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct ContainerLaunch {
    /// As written in the recipe; the digest from images.lock replaces the tag at start.
    pub(crate) image: String,
    /// Replaces the image's entrypoint when the engine's image has no server entrypoint
    /// (empty: keep the image's).
    pub(crate) entrypoint: Vec<String>,
    pub(crate) cmd: Vec<String>,
    pub(crate) mounts: Vec<Mount>,
    pub(crate) host_ip: String,
    pub(crate) host_port: u16,
    pub(crate) container_port: u16,
    pub(crate) env: BTreeMap<String, String>,
    /// Names only: values are read from the host when the container starts.
    pub(crate) env_from_host: Vec<String>,
    #[serde(flatten)]
    pub(crate) resources: Resources,
    pub(crate) user: Option<String>,
}

/// What a container asks of the engine beside its command — GPUs, IPC, shared memory,
/// ulimits — read alike from a recipe's `server:` and from a job recipe.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Resources {
    /// `all` or a count, as `docker run --gpus` takes it; none asked: `None`.
    pub(crate) gpus: Option<String>,
    pub(crate) ipc: Option<String>,
    pub(crate) shm_size: Option<ByteSize>,
    pub(crate) ulimits: BTreeMap<String, i64>,
}

impl Resources {
    pub(crate) fn of(
        gpus: Option<&Gpus>,
        ipc: Option<Ipc>,
        shm_size: Option<ByteSize>,
        ulimits: &BTreeMap<String, i64>,
    ) -> Resources {
        Resources {
            gpus: gpus.and_then(|g| match g {
                Gpus::All => Some("all".into()),
                Gpus::Count(n) => Some(n.to_string()),
                Gpus::None => None,
            }),
            ipc: ipc.map(|i| i.as_str().to_string()),
            shm_size,
            ulimits: ulimits.clone(),
        }
    }

    /// The `docker run` flags that ask for the same, for review.
    pub(crate) fn run_flags(&self) -> Vec<String> {
        let mut v = Vec::new();
        if let Some(g) = &self.gpus {
            v.extend(["--gpus".into(), g.clone()]);
        }
        if let Some(i) = &self.ipc {
            v.push(format!("--ipc={i}"));
        }
        if let Some(s) = self.shm_size {
            v.push(format!("--shm-size={s}"));
        }
        for (name, value) in &self.ulimits {
            v.extend(["--ulimit".into(), format!("{name}={value}")]);
        }
        v
    }
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Mount {
    pub(crate) host: String,
    pub(crate) container: String,
    pub(crate) read_only: bool,
}

/// `~/x` → `$HOME/x`; other paths unchanged.
pub(crate) fn expand_home(path: &str) -> String {
    crate::settings::environment().expand_home(path)
}

fn push_flag(argv: &mut Vec<String>, flag: Flag, value: &str) {
    if let Flag::Named(name) = flag {
        argv.push(name.to_string());
        argv.push(value.to_string());
    }
}

impl Recipe {
    pub(crate) fn runtime(&self) -> Runtime {
        self.runtime.unwrap_or(self.engine.profile().runtimes[0])
    }

    /// Fills engine defaults. `self_exe` is what runs `sparkctl sim` for sim recipes on the host.
    pub fn resolve(&self, self_exe: &str) -> Resolved {
        let profile = self.engine.profile();
        let runtime = self.runtime();
        let server = &self.server;
        let timeout = self
            .health
            .timeout
            .map(|d| d.0)
            .unwrap_or(std::time::Duration::from_secs(profile.health_timeout_secs));
        let served = self.model.as_ref().and_then(|m| m.served_name.clone());

        let launch = match runtime {
            Runtime::Docker => self.container_launch(&profile, served.as_deref()),
            Runtime::Process => self.process_launch(&profile, served.as_deref(), self_exe),
        };
        Resolved {
            name: self.name.clone(),
            engine: self.engine,
            runtime,
            port: server.port,
            host: server.host.clone(),
            health_path: self
                .health
                .path
                .clone()
                .unwrap_or_else(|| profile.health_path.to_string()),
            health_timeout: HumanDuration(timeout),
            completion_timeout: HumanDuration(
                self.health
                    .completion_timeout
                    .map_or_else(|| profile.completion_timeout(timeout), |d| d.0),
            ),
            memory_gb: server.memory_gb,
            launch,
        }
    }

    /// The container a docker recipe runs: the engine's entrypoint, the recipe's args, then
    /// the flags sparkctl owns (model, served name, listen address and port).
    fn container_launch(&self, profile: &Profile, served: Option<&str>) -> Launch {
        let server = &self.server;
        let container_port = server.container_port.unwrap_or(profile.container_port);
        let mut mounts = Vec::new();
        let mut cmd: Vec<String> = Vec::new();
        let entrypoint: Vec<String> = profile
            .docker_command
            .iter()
            .map(|s| s.to_string())
            .collect();
        // Recipe args first: some launchers need theirs in front (`-m module`).
        cmd.extend(server.args.iter().cloned());
        let (sleep_args, sleep_env) = super::serve::sleep_launch(self);
        cmd.extend(sleep_args);
        if let Some(model) = &self.model {
            let mount = model.mount.clone().unwrap_or_else(|| "/model".into());
            // Patch steps run before start; the server itself only reads the model.
            mounts.push(Mount {
                host: expand_home(&model.path),
                container: mount.clone(),
                read_only: true,
            });
            push_flag(&mut cmd, profile.model_flag, &mount);
        }
        mounts.extend(server.mounts.iter().map(|m| Mount {
            host: expand_home(&m.host),
            container: m.container.clone(),
            read_only: m.read_only,
        }));
        if let Some(name) = &served {
            push_flag(&mut cmd, profile.served_name_flag, name);
        }
        // Inside the container the server listens everywhere; the host binding limits reach.
        push_flag(&mut cmd, profile.host_flag, "0.0.0.0");
        push_flag(&mut cmd, profile.port_flag, &container_port.to_string());
        Launch::Docker(ContainerLaunch {
            image: self.image.clone().unwrap_or_default(),
            entrypoint,
            cmd,
            mounts,
            host_ip: server.host.clone(),
            host_port: server.port,
            container_port,
            env: server.env.clone().into_iter().chain(sleep_env).collect(),
            env_from_host: server.env_from_host.clone(),
            resources: Resources::of(
                server.gpus.as_ref(),
                server.ipc,
                server.shm_size,
                &server.ulimits,
            ),
            user: server.user.clone(),
        })
    }

    /// The program a process recipe runs, as the recipe writes it: `binary`, the engine's
    /// server module under `python`, or `sparkctl sim` for a sim recipe with neither.
    pub(crate) fn program(&self) -> Program<'_> {
        match (
            &self.binary,
            &self.python,
            self.engine.profile().python_module,
        ) {
            (Some(b), _, _) => Program::Binary(b),
            (None, Some(python), Some(module)) => Program::Python { python, module },
            // Only sim recipes may leave both out, and only engines with a server module
            // take `python` (checked at load).
            _ => Program::Sim,
        }
    }

    /// The host process a process recipe runs (`program`), then the same owned flags.
    fn process_launch(&self, profile: &Profile, served: Option<&str>, self_exe: &str) -> Launch {
        let server = &self.server;
        let mut args = Vec::new();
        let program = match self.program() {
            Program::Binary(b) => expand_home(b),
            Program::Python { python, module } => {
                args.extend(["-m".to_string(), module.to_string()]);
                python_interpreter(&expand_home(python))
            }
            Program::Sim => {
                args.push("sim".to_string());
                self_exe.to_string()
            }
        };
        args.extend(server.args.iter().cloned());
        let (sleep_args, sleep_env) = super::serve::sleep_launch(self);
        args.extend(sleep_args);
        if let Some(model) = &self.model {
            push_flag(&mut args, profile.model_flag, &expand_home(&model.path));
        }
        if let Some(name) = &served {
            push_flag(&mut args, profile.served_name_flag, name);
        }
        push_flag(&mut args, profile.host_flag, &server.host);
        push_flag(&mut args, profile.port_flag, &server.port.to_string());
        Launch::Process {
            program,
            args,
            env: server.env.clone().into_iter().chain(sleep_env).collect(),
            env_from_host: server.env_from_host.clone(),
        }
    }
}

/// What a process recipe runs before its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Program<'a> {
    /// `binary:`, as written.
    Binary(&'a str),
    /// `python:` (a venv or an interpreter, as written) running the engine's server module.
    Python {
        python: &'a str,
        module: &'static str,
    },
    /// The simulated engine of this very binary.
    Sim,
}

impl std::fmt::Display for Program<'_> {
    /// The command as people read it: `~/env/bin/python -m sglang.launch_server`, the
    /// home not expanded (as `binary:` is shown).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Program::Binary(b) => f.write_str(b),
            Program::Python { python, module } => {
                let expanded = expand_home(python);
                let interpreter = python_interpreter(&expanded);
                match interpreter == expanded {
                    true => write!(f, "{python} -m {module}"),
                    false => write!(f, "{}/bin/python -m {module}", python.trim_end_matches('/')),
                }
            }
            Program::Sim => f.write_str("sparkctl sim"),
        }
    }
}

/// `python:` names a venv (its `bin/python` runs) or an interpreter itself (`python`,
/// `python3.12`, …); a path that is neither yet is taken for a venv, which `start` then
/// finds missing.
fn python_interpreter(path: &str) -> String {
    let p = std::path::Path::new(path);
    let interpreter = !p.is_dir()
        && p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("python"));
    if interpreter {
        path.to_string()
    } else {
        p.join("bin").join("python").display().to_string()
    }
}

/// Quotes one word for a POSIX shell, for display only: sparkctl never runs a shell.
pub(crate) fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@,+%".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// The end of a `docker run` line, for servers and jobs alike: the environment (host
/// variables by name only: their values are secrets), then the image and its command.
pub(crate) fn run_tail(
    env: &BTreeMap<String, String>,
    env_from_host: &[String],
    entrypoint: &[String],
    image: &str,
    cmd: &[String],
) -> Vec<String> {
    let mut v = Vec::new();
    for (k, val) in env {
        v.extend(["-e".into(), format!("{k}={val}")]);
    }
    for k in env_from_host {
        v.extend(["-e".into(), k.clone()]);
    }
    // `--entrypoint` takes one word; the rest of it goes before the command.
    if let [first, rest @ ..] = entrypoint {
        v.extend(["--entrypoint".into(), first.clone()]);
        v.push(image.to_string());
        v.extend(rest.iter().cloned());
    } else {
        v.push(image.to_string());
    }
    v.extend(cmd.iter().cloned());
    v
}

impl Launch {
    /// The equivalent command line a person could type, for review. Secrets appear by name only.
    pub(crate) fn equivalent_command(&self) -> Vec<String> {
        match self {
            Launch::Docker(c) => {
                let mut v: Vec<String> = vec!["docker".into(), "run".into(), "-d".into()];
                v.extend(c.resources.run_flags());
                if let Some(u) = &c.user {
                    v.extend(["--user".into(), u.clone()]);
                }
                for m in &c.mounts {
                    let ro = if m.read_only { ":ro" } else { "" };
                    v.extend(["-v".into(), format!("{}:{}{ro}", m.host, m.container)]);
                }
                v.extend([
                    "-p".into(),
                    format!("{}:{}:{}", c.host_ip, c.host_port, c.container_port),
                ]);
                v.extend(run_tail(
                    &c.env,
                    &c.env_from_host,
                    &c.entrypoint,
                    &c.image,
                    &c.cmd,
                ));
                v
            }
            Launch::Process {
                program, args, env, ..
            } => {
                let mut v: Vec<String> = env.iter().map(|(k, val)| format!("{k}={val}")).collect();
                v.push(program.clone());
                v.extend(args.iter().cloned());
                v
            }
        }
    }
}

impl Recipe {
    /// The recipe as it will be used: every default the engine supplies written out.
    pub(crate) fn with_defaults(&self) -> Recipe {
        let profile = self.engine.profile();
        let mut r = self.clone();
        let runtime = self.runtime();
        r.runtime = Some(runtime);
        r.health
            .path
            .get_or_insert_with(|| profile.health_path.to_string());
        let timeout = *r.health.timeout.get_or_insert(crate::units::HumanDuration(
            std::time::Duration::from_secs(profile.health_timeout_secs),
        ));
        r.health
            .completion_timeout
            .get_or_insert(crate::units::HumanDuration(
                profile.completion_timeout(timeout.0),
            ));
        if runtime == Runtime::Docker {
            r.server
                .container_port
                .get_or_insert(profile.container_port);
            if let Some(m) = r.model.as_mut() {
                m.mount.get_or_insert_with(|| "/model".into());
            }
        }
        r
    }
}

impl Recipe {
    /// sha256 of the recipe with its defaults written out: two files that would run the
    /// same server hash the same, and any change to what runs changes the hash.
    pub fn hash(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut r = self.with_defaults();
        // How the front door serves it beside other models changes nothing that runs.
        r.serve = None;
        let canonical = serde_json::to_vec(&r).expect("recipes serialize");
        let digest = Sha256::digest(&canonical);
        let hex = crate::units::hex(&digest);
        format!("sha256:{hex}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_names_a_venv_or_an_interpreter() {
        let dir = std::env::temp_dir().join(format!("sparkctl-venv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let venv = dir.display().to_string();
        assert_eq!(python_interpreter(&venv), format!("{venv}/bin/python"));
        assert_eq!(
            python_interpreter("/opt/envs/sglang/bin/python3.12"),
            "/opt/envs/sglang/bin/python3.12"
        );
        assert_eq!(
            python_interpreter("/no/such/env"),
            "/no/such/env/bin/python"
        );
        std::fs::remove_dir_all(&dir).unwrap();
        let module = "sglang.launch_server";
        for (python, shown) in [
            ("~/env/", "~/env/bin/python -m sglang.launch_server"),
            (
                "/usr/bin/python3.12",
                "/usr/bin/python3.12 -m sglang.launch_server",
            ),
        ] {
            assert_eq!(Program::Python { python, module }.to_string(), shown);
        }
    }

    /// `start --dry-run --json` and run records show the launch: its JSON is a contract.
    #[test]
    fn a_container_launch_serializes_flat_in_its_field_order() {
        let launch = Launch::Docker(ContainerLaunch {
            image: "img:1".into(),
            entrypoint: vec![],
            cmd: vec!["serve".into()],
            mounts: vec![],
            host_ip: "127.0.0.1".into(),
            host_port: 8000,
            container_port: 8000,
            env: BTreeMap::new(),
            env_from_host: vec!["HF_TOKEN".into()],
            resources: Resources::of(
                Some(&Gpus::All),
                Some(Ipc::Host),
                None,
                &BTreeMap::from([("memlock".to_string(), -1)]),
            ),
            user: None,
        });
        assert_eq!(
            serde_json::to_string(&launch).unwrap(),
            r#"{"runtime":"docker","image":"img:1","entrypoint":[],"cmd":["serve"],"mounts":[],"host_ip":"127.0.0.1","host_port":8000,"container_port":8000,"env":{},"env_from_host":["HF_TOKEN"],"gpus":"all","ipc":"host","shm_size":null,"ulimits":{"memlock":-1},"user":null}"#
        );
        assert_eq!(
            launch.equivalent_command().join(" "),
            "docker run -d --gpus all --ipc=host --ulimit memlock=-1 -p 127.0.0.1:8000:8000 \
             -e HF_TOKEN img:1 serve"
        );
    }
}
