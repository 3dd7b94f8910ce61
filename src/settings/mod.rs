//! Every variable sparkctl reads from its environment is read here, and nowhere else, once.
//!
//! Two kinds. `Settings` are the knobs a user turns (`SPARKCTL_MEMORY_GB`, the front door's
//! timings, ...): parsed into typed values with an error that names the variable, once per
//! command, and carried by the context. `Environment` is what the process finds around it
//! (HOME, the XDG dirs, NO_COLOR, DOCKER_HOST, the test hooks): nothing in it can be
//! wrong, and it is needed before any context exists (logging, colour, where recipes are),
//! so it is read on first use and kept for the process. A variable a recipe names
//! (`env_from_host`, a notification's `${NAME}`) is read when it is used and never kept:
//! its value is a secret.
//!
//! `VARS` is the table docs/GUIDE.md prints under "Environment variables"; a test keeps the
//! two the same, and keeps `env::var` out of every other file.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::LazyLock;
use std::time::Duration;

use serde::Serialize;

use crate::error::{Error, Result, Want};

mod vars;
pub(crate) use vars::*;

/// The one read of a variable: None when unset, empty or not Unicode.
fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// A path's variable, as the OS gives it (a path need not be Unicode).
fn var_os(name: &str) -> Option<OsString> {
    std::env::var_os(name).filter(|v| !v.is_empty())
}

/// A variable a recipe names (`env_from_host`, a notification's `${NAME}`): read when it is
/// used and never kept, as it holds a secret. Set but empty is set.
pub(crate) fn host_var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Whether a variable a recipe names is set at all (a child process inherits it as it is).
pub(crate) fn host_var_is_set(name: &str) -> bool {
    std::env::var_os(name).is_some()
}

/// The front door's API key: `SPARKCTL_FRONTDOOR_API_KEY` itself (the file is read by the
/// front door). Read when needed and never kept in `Settings`, which are printed.
pub(crate) fn api_key_value() -> Option<String> {
    var(FRONTDOOR_API_KEY)
}

/// A value of `name` that cannot be used: what can, and how to give it.
fn bad(name: &'static str, value: String, want: Want) -> Error {
    Error::Setting { name, value, want }
}

fn number<T: std::str::FromStr>(name: &'static str) -> Result<Option<T>> {
    var(name)
        .map(|v| v.trim().parse().map_err(|_| bad(name, v, Want::Number)))
        .transpose()
}

fn count(name: &'static str, default: usize) -> Result<usize> {
    var(name).map_or(Ok(default), |v| {
        v.trim()
            .parse()
            .map_err(|_| bad(name, v, Want::Count { default }))
    })
}

/// A count that must be positive (`what` it counts, for the message).
fn positive(name: &'static str, what: &'static str) -> Result<Option<usize>> {
    var(name)
        .map(|v| match v.trim().parse() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(bad(name, v, Want::Positive { what })),
        })
        .transpose()
}

fn duration(name: &'static str, default: Duration) -> Result<Duration> {
    var(name).map_or(Ok(default), |v| {
        crate::units::parse_duration(v.trim())
            .map_err(|e| bad(name, v, Want::Duration { why: e.to_string() }))
    })
}

/// A switch that is on unless set to `off`, `0` or `false`.
fn on_unless_off(name: &str) -> bool {
    !var(name).is_some_and(|v| matches!(v.trim(), "off" | "0" | "false"))
}

/// Left to the OS, desktop and page cache when the budget comes from MemTotal.
const DEFAULT_RESERVE_GB: f64 = 8.0;
/// Exited containers kept per recipe.
pub(crate) const DEFAULT_KEEP_EXITED: usize = 5;
/// Digests kept per recipe beyond the others retained.
pub(crate) const DEFAULT_KEEP_IMAGES: usize = 3;

/// The knobs, resolved once per command into typed values (see the module's comment).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Settings {
    /// GB the servers may use together (unified memory on a Spark, minus a reserve).
    pub(crate) memory_budget_gb: f64,
    /// Where the production backend answers (8003 in the seeds).
    pub(crate) production_port: u16,
    /// `SPARKCTL_MEMORY_RESERVE_GB`: what no start may push available memory under.
    pub(crate) memory_reserve_gb: f64,
    /// `SPARKCTL_MEMORY_GB`, a size declared, not the machine's MemTotal: what is available
    /// in the pool is then that pool less what runs, not MemAvailable.
    pub(crate) memory_declared_gb: Option<f64>,
    /// `SPARKCTL_KEEP_EXITED`.
    pub(crate) keep_exited: usize,
    /// `SPARKCTL_KEEP_IMAGES`.
    pub(crate) keep_images: usize,
    /// `SPARKCTL_BANDWIDTH_GBPS`, when set: positive and finite.
    pub(crate) bandwidth_gbps: Option<f64>,
    pub(crate) door: DoorSettings,
    /// The knobs that were set, as set (never the API key): what a unit file passes on.
    #[serde(skip)]
    set: Vec<(&'static str, String)>,
}

/// The front door's knobs (`frontdoor::Config` adds the port and whether a key is set).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct DoorSettings {
    pub(crate) host: String,
    pub(crate) hold: Duration,
    pub(crate) queue: usize,
    pub(crate) drain: Duration,
    pub(crate) warm_grace: Duration,
    pub(crate) max_connections: Option<usize>,
    /// `SPARKCTL_FRONTDOOR_NAMES`, split at commas.
    pub(crate) names: Vec<String>,
    /// `SPARKCTL_FRONTDOOR_ORIGINS`, split at commas.
    pub(crate) origins: Vec<String>,
    pub(crate) send_timeout: Duration,
    /// `SPARKCTL_FRONTDOOR_API_KEY_FILE`.
    pub(crate) api_key_file: Option<PathBuf>,
    /// Whether the key is given in the environment itself (its value is not kept here).
    api_key_in_env: bool,
    pub(crate) page: bool,
    pub(crate) quality: bool,
}

impl Settings {
    pub(crate) fn from_env() -> Result<Settings> {
        // The pool is MemTotal, not nvidia-smi's memory.total: a GB10's GPU has no memory
        // of its own (nvidia-smi says [N/A]) and allocates from the memory MemTotal counts.
        let declared = number::<f64>(MEMORY_GB)?;
        let total = match declared {
            Some(gb) => gb,
            None => {
                crate::host::mem_total_bytes().ok_or_else(|| {
                    Error::Failed(
                        "cannot read MemTotal from /proc/meminfo, so the memory plan has no \
                         pool; set SPARKCTL_MEMORY_GB to the machine's memory (128 on a Spark)"
                            .into(),
                    )
                })? as f64
                    / 1e9
            }
        };
        let reserve = number::<f64>(MEMORY_RESERVE_GB)?.unwrap_or(DEFAULT_RESERVE_GB);
        let bandwidth_gbps = var(BANDWIDTH_GBPS)
            .map(|v| match v.trim().parse::<f64>() {
                Ok(g) if g.is_finite() && g > 0.0 => Ok(g),
                _ => Err(bad(BANDWIDTH_GBPS, v, Want::Bandwidth)),
            })
            .transpose()?;
        Ok(Settings {
            memory_budget_gb: (total - reserve).max(0.0),
            production_port: number(PRODUCTION_PORT)?.unwrap_or(8003),
            memory_reserve_gb: reserve.max(0.0),
            memory_declared_gb: declared,
            keep_exited: count(KEEP_EXITED, DEFAULT_KEEP_EXITED)?,
            keep_images: count(KEEP_IMAGES, DEFAULT_KEEP_IMAGES)?,
            bandwidth_gbps,
            door: DoorSettings::from_env()?,
            set: VARS
                .iter()
                .filter(|v| v.name != FRONTDOOR_API_KEY)
                .filter_map(|v| Some((v.name, var(v.name)?)))
                .collect(),
        })
    }

    /// `NAME=value` for each of `names` that was set, as it was set.
    pub(crate) fn as_set(&self, names: &[&str]) -> Vec<String> {
        self.set
            .iter()
            .filter(|(name, _)| names.contains(name))
            .map(|(name, value)| format!("{name}={value}"))
            .collect()
    }

    /// Settings with every knob at its default but the memory pool: for tests.
    #[cfg(test)]
    pub(crate) fn with_pool(budget_gb: f64, declared: bool) -> Settings {
        Settings {
            memory_budget_gb: budget_gb,
            production_port: 8003,
            memory_reserve_gb: DEFAULT_RESERVE_GB,
            memory_declared_gb: declared.then_some(budget_gb + DEFAULT_RESERVE_GB),
            keep_exited: DEFAULT_KEEP_EXITED,
            keep_images: DEFAULT_KEEP_IMAGES,
            bandwidth_gbps: None,
            door: DoorSettings::from_env().expect("the defaults"),
            set: Vec::new(),
        }
    }
}

impl DoorSettings {
    fn from_env() -> Result<DoorSettings> {
        Ok(DoorSettings {
            host: var(FRONTDOOR_HOST).map_or_else(|| "127.0.0.1".into(), |h| h.trim().to_string()),
            hold: duration(FRONTDOOR_HOLD, Duration::from_secs(120))?,
            queue: positive(FRONTDOOR_QUEUE, "requests")?.unwrap_or(256),
            drain: duration(FRONTDOOR_DRAIN, Duration::from_secs(120))?,
            warm_grace: duration(WARM_GRACE, Duration::from_secs(600))?,
            max_connections: positive(FRONTDOOR_CONNECTIONS, "connections")?,
            names: var(FRONTDOOR_NAMES)
                .map(|n| n.split(',').map(str::to_string).collect())
                .unwrap_or_default(),
            origins: var(FRONTDOOR_ORIGINS)
                .map(|n| n.split(',').map(str::to_string).collect())
                .unwrap_or_default(),
            send_timeout: duration(FRONTDOOR_SEND_TIMEOUT, Duration::from_secs(60))?,
            api_key_file: var_os(FRONTDOOR_API_KEY_FILE).map(PathBuf::from),
            api_key_in_env: var(FRONTDOOR_API_KEY).is_some(),
            page: on_unless_off(FRONTDOOR_PAGE),
            quality: on_unless_off(FRONTDOOR_QUALITY),
        })
    }
}

/// What the process finds around it (see the module's comment).
#[derive(Debug)]
pub(crate) struct Environment {
    pub(crate) home: Option<PathBuf>,
    pub(crate) xdg_config_home: Option<PathBuf>,
    pub(crate) xdg_state_home: Option<PathBuf>,
    /// NO_COLOR set to anything non-empty (no-color.org).
    pub(crate) no_color: bool,
    /// `SPARKCTL_LOG`: a tracing filter.
    pub(crate) log: Option<String>,
    /// DOCKER_HOST, when it names an engine on another machine (tcp://, ssh://).
    pub(crate) remote_docker_host: Option<String>,
    /// SUDO_UID and SUDO_GID: the user behind sudo.
    pub(crate) sudo_user: Option<(u32, u32)>,
    /// `SPARKCTL_NVIDIA_SMI`, else `nvidia-smi`.
    pub(crate) nvidia_smi: OsString,
    /// `SPARKCTL_CHOWN_HELPER=always`.
    pub(crate) chown_helper_always: bool,
}

static ENVIRONMENT: LazyLock<Environment> = LazyLock::new(|| {
    let id = |name: &str| var(name).and_then(|v| v.trim().parse().ok());
    Environment {
        home: var_os("HOME").map(PathBuf::from),
        xdg_config_home: var_os("XDG_CONFIG_HOME").map(PathBuf::from),
        xdg_state_home: var_os("XDG_STATE_HOME").map(PathBuf::from),
        no_color: var_os("NO_COLOR").is_some(),
        log: var(LOG),
        remote_docker_host: var("DOCKER_HOST").filter(|h| !h.starts_with("unix://")),
        sudo_user: id("SUDO_UID").zip(id("SUDO_GID")),
        nvidia_smi: var_os(NVIDIA_SMI).unwrap_or_else(|| "nvidia-smi".into()),
        chown_helper_always: var(CHOWN_HELPER).as_deref() == Some("always"),
    }
});

/// The environment, read the first time it is asked for.
pub(crate) fn environment() -> &'static Environment {
    &ENVIRONMENT
}

impl Environment {
    /// HOME, else `/tmp` (a service with no home still gets a place).
    pub(crate) fn home_or_tmp(&self) -> PathBuf {
        self.home.clone().unwrap_or_else(|| "/tmp".into())
    }

    /// `$XDG_CONFIG_HOME`, else `~/.config`.
    pub(crate) fn config_home(&self) -> PathBuf {
        self.xdg_config_home
            .clone()
            .unwrap_or_else(|| self.home_or_tmp().join(".config"))
    }

    /// `~/x` → `$HOME/x`; other paths unchanged.
    pub(crate) fn expand_home(&self, path: &str) -> String {
        match (path.strip_prefix("~/"), &self.home) {
            (Some(rest), Some(home)) => home.join(rest).display().to_string(),
            _ => path.to_string(),
        }
    }

    /// `~/…` for paths under the home dir: what a person reads and types.
    pub(crate) fn tilde(&self, path: &std::path::Path) -> String {
        match &self.home {
            Some(home) if home != std::path::Path::new("/") => match path.strip_prefix(home) {
                Ok(rest) if rest.as_os_str().is_empty() => "~".into(),
                Ok(rest) => format!("~/{}", rest.display()),
                Err(_) => path.display().to_string(),
            },
            _ => path.display().to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::path::Path;

    fn sources(dir: &Path, files: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                sources(&path, files);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }

    fn src_files() -> Vec<PathBuf> {
        let mut files = Vec::new();
        sources(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut files,
        );
        files
    }

    /// The rows of the guide's table: `| `NAME` | default | meaning |`.
    fn guide_table() -> Vec<(String, String, String)> {
        let guide =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/GUIDE.md"))
                .unwrap();
        let section = guide
            .split("\n## Environment variables")
            .nth(1)
            .expect("docs/GUIDE.md has a section `## Environment variables`");
        let section = section.split("\n## ").next().unwrap();
        section
            .lines()
            .filter(|l| l.starts_with("| `"))
            .map(|l| {
                let cells: Vec<&str> = l.trim_matches('|').split(" | ").map(str::trim).collect();
                let [name, default, meaning] = cells[..] else {
                    panic!("a row of three cells: {l}")
                };
                let name = name.trim_matches('`');
                (name.into(), default.into(), meaning.into())
            })
            .collect()
    }

    #[test]
    fn the_guide_lists_every_variable_as_the_code_reads_it() {
        let code: Vec<(String, String, String)> = VARS
            .iter()
            .map(|v| (v.name.into(), v.default.into(), v.meaning.into()))
            .collect();
        assert_eq!(
            guide_table(),
            code,
            "docs/GUIDE.md's table under `## Environment variables` against settings::VARS"
        );
    }

    #[test]
    fn every_variable_the_code_names_is_in_the_table() {
        let known: BTreeSet<&str> = VARS.iter().map(|v| v.name).collect();
        for file in src_files() {
            if file.starts_with(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/settings")) {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap();
            for (at, _) in text.match_indices("SPARKCTL_") {
                // `__SPARKCTL_DATA__` is a mark in the live page, not a variable.
                if text[..at].ends_with('_') {
                    continue;
                }
                let name: String = text[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                let name = name.trim_end_matches('_');
                assert!(
                    known.contains(name),
                    "{} names {name}, which settings::VARS does not list",
                    file.display()
                );
            }
        }
    }

    #[test]
    fn only_this_file_reads_the_environment() {
        for file in src_files() {
            if file.starts_with(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/settings")) {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap();
            for read in ["env::var(", "env::var_os(", "env::vars(", "try_from_env("] {
                assert!(
                    !text.contains(read),
                    "{} reads the environment ({read}); read it in src/settings/",
                    file.display()
                );
            }
        }
    }

    #[test]
    fn home_paths_are_written_with_a_tilde_only_under_home() {
        let env = Environment {
            home: Some("/home/ana".into()),
            xdg_config_home: None,
            xdg_state_home: None,
            no_color: false,
            log: None,
            remote_docker_host: None,
            sudo_user: None,
            nvidia_smi: "nvidia-smi".into(),
            chown_helper_always: false,
        };
        assert_eq!(env.tilde(Path::new("/home/ana/m")), "~/m");
        assert_eq!(env.tilde(Path::new("/home/anabel/m")), "/home/anabel/m");
        assert_eq!(env.expand_home("~/m"), "/home/ana/m");
        assert_eq!(env.config_home(), Path::new("/home/ana/.config"));
    }
}
