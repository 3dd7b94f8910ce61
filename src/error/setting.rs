//! A setting sparkctl cannot use, and a front door that would face the network without a
//! key: the facts, worded here.

use std::fmt;
use std::path::PathBuf;

/// What a variable's value is not, and how to give one sparkctl can use
/// (`Error::Setting`, after `NAME=VALUE `).
#[derive(Debug)]
pub enum Want {
    /// A number.
    Number,
    /// A whole number; `default` when unset.
    Count { default: usize },
    /// A positive number of `what`.
    Positive { what: &'static str },
    /// A duration (`why`: the parser's words).
    Duration { why: String },
    /// A bandwidth in GB/s.
    Bandwidth,
    /// A key file with no key in it.
    EmptyKeyFile,
    /// A key file other users may read (`mode`), at `path`.
    KeyFileOpen { mode: u32, path: PathBuf },
}

impl Want {
    /// What `name`'s value is not, and the fix.
    pub(super) fn words(&self, name: &str) -> String {
        match self {
            Want::Number => format!("is not a number; unset it or give e.g. {name}=128"),
            Want::Count { default } => {
                format!("is not a count; give a whole number such as {default} (0 keeps none)")
            }
            Want::Positive { what } => {
                format!("is not a number of {what}; unset it or give e.g. {name}=256")
            }
            Want::Duration { why } => format!("is not a duration: {why}"),
            Want::Bandwidth => {
                format!("is not a bandwidth; give GB/s, e.g. {name}=3350, or unset it")
            }
            Want::EmptyKeyFile => "is empty; put the key on its first line".into(),
            Want::KeyFileOpen { mode, path } => format!(
                "is a file other users may read (mode {mode:o}); `chmod 600 {}`",
                path.display()
            ),
        }
    }
}

/// What would face the network without an API key (`Error::OpenWithoutKey`).
#[derive(Debug)]
pub enum Exposure {
    /// The front door, on `host:port`.
    Door { host: String, port: u16 },
    /// `adopt` of a server (`foreign`) that asked for a key (`flag`) import left out.
    AdoptKeyed {
        foreign: String,
        flag: String,
        port: u16,
    },
    /// `adopt` of a server (`foreign`) that listened beyond this machine.
    AdoptOpen {
        foreign: String,
        host: String,
        port: u16,
    },
}

impl Exposure {
    /// What would face the network.
    pub(super) fn what(&self) -> String {
        match self {
            Exposure::Door { host, port } => {
                format!("the front door would serve {host}:{port} to the network")
            }
            Exposure::AdoptKeyed {
                foreign,
                flag,
                port,
            } => format!(
                "{foreign} asked its callers for a key ({flag}, which import left out of the \
                 recipe), and the front door would serve port {port} in its place"
            ),
            Exposure::AdoptOpen {
                foreign,
                host,
                port,
            } => format!(
                "{foreign} listened on {host}:{port}, beyond this machine, and the front door \
                 would serve that address in its place"
            ),
        }
    }

    /// The other way out.
    pub(super) fn then(&self) -> &'static str {
        match self {
            Exposure::Door { .. } => {
                "or serve this machine only: SPARKCTL_FRONTDOOR_HOST=127.0.0.1"
            }
            Exposure::AdoptKeyed { .. } | Exposure::AdoptOpen { .. } => {
                "then `sparkctl adopt` again (nothing was changed)"
            }
        }
    }
}

impl fmt::Display for Exposure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.what())
    }
}
