//! The front door as the commands see it: its settings (`Config`), where it keeps its
//! files, its control protocol and the client that speaks it (`Remote`), what it says about
//! itself (`status`), and starting it when it is not running (`launch`). What the front
//! door's own process runs — the proxy, the lanes, the watch — is `crate::server`'s; nothing
//! here imports it, so `deploy`, `job`, `adopt` and `history` know the door only by this face.

pub(crate) mod capture;
pub(crate) mod client;
pub(crate) mod handover;
pub(crate) mod launch;
pub(crate) mod protocol;
pub(crate) mod status;
pub(crate) mod unit;

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::production::Upstream;
use crate::state::StateDir;

pub(crate) use client::Remote;
pub(crate) use launch::{answering, ensure, Launch, Takeover};
pub(crate) use status::DoorStatus;

/// How the front door behaves: its settings (see `settings::DoorSettings`, which says the
/// variable and default of each) and the port.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Config {
    /// 127.0.0.1 unless set (0.0.0.0 to serve the LAN).
    pub(crate) host: String,
    pub(crate) port: u16,
    /// How long a request may wait for a backend: longer than the simulated and
    /// llama-server loads, shorter than most clients' timeouts.
    pub(crate) hold: Duration,
    /// Requests that may wait at once.
    pub(crate) queue: usize,
    /// How long a switch lets the old upstream's streams finish.
    pub(crate) drain: Duration,
    /// How long a replaced production stays warm for an instant rollback, when memory
    /// allows (0s stops it at once).
    pub(crate) warm_grace: Duration,
    /// Whether an API key is required (the key itself is never kept here, nor printed).
    pub(crate) api_key_required: bool,
    /// The file the key is read from, when it comes from one.
    api_key_file: Option<PathBuf>,
    /// Client connections at once (default: what the open-file limit allows); beyond it
    /// they wait in the kernel's backlog.
    pub(crate) max_connections: Option<usize>,
    /// The names it answers to beside its addresses and `localhost` (the machine's own
    /// name always).
    pub(crate) names: Vec<String>,
    /// The names as `SPARKCTL_FRONTDOOR_NAMES` gives them: what a unit file passes on.
    #[serde(skip)]
    names_set: Vec<String>,
    /// The web pages that may call the API beside the door's own (`origin`).
    pub(crate) origins: Origins,
    /// How long a client may leave an answer unread before its connection is closed: a
    /// client that stops reading would otherwise hold its connection, its upstream stream
    /// and their buffers for ever.
    pub(crate) send_timeout: Duration,
    /// The live page: off, it neither samples nor serves (to measure its cost).
    pub(crate) page: bool,
    /// The live quality classifier: off to measure its cost.
    pub(crate) quality: bool,
}

/// The API key: `SPARKCTL_FRONTDOOR_API_KEY`, or the first line of the file
/// `SPARKCTL_FRONTDOOR_API_KEY_FILE` names.
fn api_key(file: Option<&std::path::Path>) -> Result<Option<String>> {
    if let Some(k) = crate::settings::api_key_value() {
        return Ok(Some(k));
    }
    match file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                Error::io(
                    format!(
                        "SPARKCTL_FRONTDOOR_API_KEY_FILE: cannot read {}",
                        path.display()
                    ),
                    e,
                )
            })?;
            let key = text.lines().next().unwrap_or_default().trim().to_string();
            if key.is_empty() {
                return Err(Error::Setting {
                    name: crate::settings::FRONTDOOR_API_KEY_FILE,
                    value: path.display().to_string(),
                    want: crate::error::Want::EmptyKeyFile,
                });
            }
            private_key_file(path)?;
            Ok(Some(key))
        }
        None => Ok(None),
    }
}

/// A key file others may read is no secret: refused, saying how to make it its owner's.
fn private_key_file(path: &std::path::Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)
        .map_err(|e| {
            Error::io(
                format!("SPARKCTL_FRONTDOOR_API_KEY_FILE: {}", path.display()),
                e,
            )
        })?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(Error::Setting {
            name: crate::settings::FRONTDOOR_API_KEY_FILE,
            value: path.display().to_string(),
            want: crate::error::Want::KeyFileOpen {
                mode: mode & 0o777,
                path: path.to_path_buf(),
            },
        });
    }
    Ok(())
}

/// Whether `host` (an address to listen on) is reachable from this machine only.
pub(crate) fn loopback_only(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .trim_matches(['[', ']'])
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

impl Config {
    /// Refuses to serve an address others can reach without a key.
    pub(crate) fn refuse_open(&self) -> Result<()> {
        if self.api_key_required || loopback_only(&self.host) {
            return Ok(());
        }
        Err(Error::OpenWithoutKey(crate::error::Exposure::Door {
            host: self.host.clone(),
            port: self.port,
        }))
    }

    pub(crate) fn new(settings: &crate::settings::Settings, port: u16) -> Result<Config> {
        let door = &settings.door;
        Ok(Config {
            names: configured_names(&door.names, &door.host),
            names_set: door.names.clone(),
            origins: Origins::new(&door.origins),
            host: door.host.clone(),
            port,
            hold: door.hold,
            queue: door.queue,
            drain: door.drain,
            warm_grace: door.warm_grace,
            api_key_required: api_key(door.api_key_file.as_deref())?.is_some(),
            api_key_file: door.api_key_file.clone(),
            max_connections: door.max_connections,
            send_timeout: door.send_timeout,
            page: door.page,
            quality: door.quality,
        })
    }

    /// The key clients must send, when one is set.
    pub(crate) fn api_key(&self) -> Result<Option<String>> {
        api_key(self.api_key_file.as_deref())
    }
}

/// Whether `u`'s very instance still runs.
pub(crate) async fn alive(rt: &crate::runtime::Runtimes, u: &Upstream) -> bool {
    matches!(rt.instance(&u.recipe, &u.deployment).await, Ok(Some(d)) if d.running())
}

/// Where the front door keeps its files.
pub(crate) fn dir(state: &StateDir) -> PathBuf {
    state.root().join("frontdoor")
}

pub(crate) fn control_socket(state: &StateDir) -> PathBuf {
    dir(state).join("control.sock")
}

/// The names the door goes by beside its addresses: `SPARKCTL_FRONTDOOR_NAMES`, the
/// machine's own name (and `NAME.local`), and the listening host when it is a name.
pub(crate) fn configured_names(set: &[String], host: &str) -> Vec<String> {
    let machine = crate::host::hostname();
    let mut names: Vec<String> = set
        .iter()
        .map(String::as_str)
        .chain([host, machine.as_str(), &format!("{machine}.local")])
        .map(normal_name)
        .filter(|n| !n.is_empty() && n.parse::<std::net::IpAddr>().is_err())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// A name as compared: lowercase, without the root's dot.
pub(crate) fn normal_name(name: &str) -> String {
    name.trim().trim_end_matches('.').to_ascii_lowercase()
}

/// The origins allowed beside the door's own, as configured (`scheme://host[:port]`,
/// compared without case and without a trailing slash).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub(crate) struct Origins(Vec<String>);

impl Origins {
    pub(crate) fn new(listed: &[String]) -> Origins {
        Origins(
            (listed.iter())
                .map(|o| normal(o))
                .filter(|o| !o.is_empty())
                .collect(),
        )
    }

    pub(crate) fn allows(&self, origin: &str) -> bool {
        self.0.iter().any(|o| o == "*" || *o == normal(origin))
    }

    /// As `SPARKCTL_FRONTDOOR_ORIGINS` writes them: what a unit file passes on.
    pub(crate) fn listed(&self) -> Vec<String> {
        self.0.clone()
    }
}

fn normal(origin: &str) -> String {
    origin.trim().trim_end_matches('/').to_ascii_lowercase()
}
