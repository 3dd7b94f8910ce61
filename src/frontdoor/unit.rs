//! Coming back after a reboot: a systemd user unit that runs `frontdoor run` (which brings
//! production back through the watch), restarted always.

use std::path::PathBuf;

use super::{Config, Launch};
use crate::error::{Error, Result};
use crate::state::StateDir;

pub fn path() -> Result<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .ok_or_else(|| Error::Usage("neither XDG_CONFIG_HOME nor HOME is set".into()))?;
    Ok(base.join("systemd/user/sparkctl-frontdoor.service"))
}

/// The unit for this state dir, recipes and lock. The API key is never written into it:
/// only the key file's path, when one is used.
pub fn text(state: &StateDir, config: &Config, launch: &Launch) -> String {
    let mut env = vec![
        format!("SPARKCTL_PRODUCTION_PORT={}", config.port),
        format!("SPARKCTL_FRONTDOOR_HOST={}", config.host),
    ];
    if let Some(f) = std::env::var_os("SPARKCTL_FRONTDOOR_API_KEY_FILE") {
        env.push(format!(
            "SPARKCTL_FRONTDOOR_API_KEY_FILE={}",
            PathBuf::from(f).display()
        ));
    }
    format!(
        "# Written by `sparkctl frontdoor install`.\n[Unit]\nDescription=sparkctl front door (production port {port})\nAfter=network-online.target docker.service\n\n[Service]\nExecStart={exe} --state-dir {state} --recipes {recipes} --lock {lock} frontdoor run\nRestart=always\nRestartSec=2\n{env}\n\n[Install]\nWantedBy=default.target\n",
        port = config.port,
        exe = launch.self_exe,
        state = state.root().display(),
        recipes = launch.recipes.display(),
        lock = launch.lock.display(),
        env = env
            .iter()
            .map(|e| format!("Environment={e}"))
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

/// Writes the unit (atomically); returns its path.
pub fn install(state: &StateDir, config: &Config, launch: &Launch) -> Result<PathBuf> {
    if config.api_key_required && std::env::var_os("SPARKCTL_FRONTDOOR_API_KEY_FILE").is_none() {
        return Err(Error::Usage(
            "the API key comes from SPARKCTL_FRONTDOOR_API_KEY, which a unit file would have to \
             hold in clear; put it in a file (mode 600) and set SPARKCTL_FRONTDOOR_API_KEY_FILE"
                .into(),
        ));
    }
    let path = path()?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
    }
    crate::state::write_atomic(&path, text(state, config, launch).as_bytes())?;
    Ok(path)
}

/// The unit, when one is installed.
pub fn installed() -> Option<PathBuf> {
    path().ok().filter(|p| p.is_file())
}
