//! What `import` remembers of a running server it read, for `adopt`:
//! `STATE/imports/NAME.json`. Identities, the port, and the names of the secret flags import
//! left out (so `adopt` knows the server asked for a key) — no command line, no value, no
//! environment (`adopt` reads those again from the running process when it needs them).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::host::ProcessId;
use crate::state::StateDir;

/// The running server a recipe was imported from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub(crate) enum Origin {
    /// A host process: pid and start time (a reused pid is another process).
    Process {
        process: ProcessId,
        port: Option<u16>,
    },
    Container {
        id: String,
        name: String,
        port: Option<u16>,
    },
}

impl Origin {
    /// The port it serves on the host.
    pub(crate) fn port(&self) -> Option<u16> {
        match self {
            Origin::Process { port, .. } | Origin::Container { port, .. } => *port,
        }
    }

    pub(crate) fn describe(&self) -> String {
        match self {
            Origin::Process { process, .. } => format!(
                "pid {} ({})",
                process.pid,
                crate::host::command_name(process.pid).unwrap_or_else(|| "gone".into())
            ),
            Origin::Container { id, name, .. } => {
                format!("container {name} ({})", crate::units::short_id(id))
            }
        }
    }
}

/// One import of a running server.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Imported {
    recipe: String,
    origin: Origin,
    imported_at: String,
    /// The flags (or variables) whose secret values import left out, names only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    secrets_left_out: Vec<String>,
}

impl Imported {
    pub(crate) fn origin(&self) -> &Origin {
        &self.origin
    }

    /// The flag that made the server ask its callers for a key, when one did.
    pub(crate) fn access_key(&self) -> Option<&str> {
        self.secrets_left_out
            .iter()
            .map(String::as_str)
            .find(|f| super::secrets::access_key(f))
    }
}

fn path(state: &StateDir, recipe: &str) -> PathBuf {
    state.root().join("imports").join(format!("{recipe}.json"))
}

pub(crate) fn save(
    state: &StateDir,
    recipe: &str,
    origin: &Origin,
    secrets_left_out: &[String],
) -> Result<()> {
    let p = path(state, recipe);
    if let Some(dir) = p.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
    }
    crate::state::write_json(
        &p,
        &Imported {
            recipe: recipe.to_string(),
            origin: origin.clone(),
            imported_at: crate::units::now_utc(),
            secrets_left_out: secrets_left_out.to_vec(),
        },
    )
}

/// The import of `recipe`, if it was imported from a running server.
pub(crate) fn load(state: &StateDir, recipe: &str) -> Result<Option<Imported>> {
    let p = path(state, recipe);
    if !p.exists() {
        return Ok(None);
    }
    crate::state::read_json(&p).map(Some)
}

/// Forgets it once adopted: the server it names is gone.
pub(crate) fn remove(state: &StateDir, recipe: &str) {
    let _ = std::fs::remove_file(path(state, recipe));
}
