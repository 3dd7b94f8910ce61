//! Coming back after a reboot: a systemd user unit that runs `frontdoor run` (which brings
//! production back through the watch), restarted always.

use std::path::PathBuf;

use super::{Config, Launch};
use crate::error::{Error, Result};
use crate::state::StateDir;

pub(crate) fn path() -> Result<PathBuf> {
    Ok(user_dir()?.join("sparkctl-frontdoor.service"))
}

/// Where systemd looks for this user's units (`systemctl --user`).
pub(crate) fn user_dir() -> Result<PathBuf> {
    let env = crate::settings::environment();
    if env.xdg_config_home.is_none() && env.home.is_none() {
        return Err(Error::Usage(
            "neither XDG_CONFIG_HOME nor HOME is set".into(),
        ));
    }
    Ok(env.config_home().join("systemd/user"))
}

/// One word of a unit file's command line or assignment as systemd reads it: `%`
/// (specifiers) doubled, `$` doubled where variables would be expanded (`ExecStart=`), and
/// in double quotes, with `\\` and `"` escaped, when it holds a space, a quote, a
/// backslash or a `;` (which would end the command).
pub(crate) fn quoted(word: &str, in_command: bool) -> String {
    let plain = !word.is_empty()
        && !word
            .chars()
            .any(|c| c.is_whitespace() || matches!(c, '"' | '\'' | '\\' | ';'));
    if plain {
        return word
            .replace('%', "%%")
            .replace('$', if in_command { "$$" } else { "$" });
    }
    let mut out = String::with_capacity(word.len() + 2);
    out.push('"');
    for c in word.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '%' => out.push_str("%%"),
            '$' if in_command => out.push_str("$$"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The unit for this state dir, recipes and lock. The API key is never written into it:
/// only the key file's path, when one is used. `systemctl --user stop` ends only the
/// supervisor (`KillMode=process`), which drains its server and leaves production running;
/// `systemctl --user reload` restarts it in place (`frontdoor restart`'s SIGHUP).
pub(crate) fn text(state: &StateDir, config: &Config, launch: &Launch) -> String {
    let mut env = vec![
        format!("SPARKCTL_PRODUCTION_PORT={}", config.port),
        format!("SPARKCTL_FRONTDOOR_HOST={}", config.host),
    ];
    if !config.names_set.is_empty() {
        env.push(format!(
            "SPARKCTL_FRONTDOOR_NAMES={}",
            config.names_set.join(",")
        ));
    }
    let origins = config.origins.listed();
    if !origins.is_empty() {
        env.push(format!("SPARKCTL_FRONTDOOR_ORIGINS={}", origins.join(",")));
    }
    if let Some(f) = &config.api_key_file {
        env.push(format!("SPARKCTL_FRONTDOOR_API_KEY_FILE={}", f.display()));
    }
    let command = [
        launch.self_exe.clone(),
        "--state-dir".into(),
        state.root().display().to_string(),
        "--recipes".into(),
        launch.recipes.display().to_string(),
        "--lock".into(),
        launch.lock.display().to_string(),
        "frontdoor".into(),
        "run".into(),
    ]
    .iter()
    .map(|w| quoted(w, true))
    .collect::<Vec<_>>()
    .join(" ");
    format!(
        "# Written by `sparkctl frontdoor install`.\n[Unit]\nDescription=sparkctl front door (production port {port})\nAfter=network-online.target docker.service\n\n[Service]\nExecStart={command}\nExecReload=/bin/kill -HUP $MAINPID\nRestart=always\nRestartSec=2\nKillMode=process\nTimeoutStopSec={stop}\nLimitNOFILE={NOFILE}\n{env}\n\n[Install]\nWantedBy=default.target\n",
        port = config.port,
        stop = config.drain.as_secs() + 30,
        env = env
            .iter()
            .map(|e| format!("Environment={}", quoted(e, false)))
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

/// Open files the unit allows: a connection can take two (client and upstream).
const NOFILE: u32 = 65536;

/// Writes the unit (atomically); returns its path.
pub(crate) fn install(state: &StateDir, config: &Config, launch: &Launch) -> Result<PathBuf> {
    config.refuse_open()?;
    if config.api_key_required && config.api_key_file.is_none() {
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
pub(crate) fn installed() -> Option<PathBuf> {
    path().ok().filter(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_with_spaces_quotes_and_specifiers_survive_the_unit_file() {
        let dir = std::env::temp_dir().join(format!(
            "sparkctl unit %h \"q\" $HOME {}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let state = StateDir::open(&dir).unwrap();
        let settings = crate::settings::Settings::with_pool(100.0, false);
        let config = Config::new(&settings, 8003).unwrap();
        let launch = Launch::new(
            "/opt/spark ctl/sparkctl",
            &dir.join("recipes"),
            &dir.join("images.lock"),
        );
        let unit = text(&state, &config, &launch);
        let exec = unit.lines().find(|l| l.starts_with("ExecStart=")).unwrap();
        assert!(
            exec.starts_with("ExecStart=\"/opt/spark ctl/sparkctl\" --state-dir ")
                && exec.ends_with(" frontdoor run"),
            "{exec}"
        );
        let root = state.root().display().to_string();
        let want = root
            .replace('%', "%%")
            .replace('"', "\\\"")
            .replace('$', "$$");
        assert!(exec.contains(&format!("\"{want}\"")), "{exec}");
        assert!(unit.contains("LimitNOFILE=65536"), "{unit}");
        assert!(unit.contains("KillMode=process"), "{unit}");
        assert!(
            unit.contains("Environment=SPARKCTL_PRODUCTION_PORT=8003"),
            "{unit}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
