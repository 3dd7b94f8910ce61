//! `upgrade NAME --schedule daily|HH:MM`: a systemd user timer and the service it starts,
//! `sparkctl upgrade NAME` as this very binary's argv with the same state dir, recipes and
//! lock (never a shell string), a missed night caught up at the next boot (`Persistent`).
//! Written whole (temp file and rename), then enabled through `systemctl --user` when a
//! user manager answers; else the output says how. `--unschedule` takes both away.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Serialize;

use crate::context::Context;
use crate::error::{Error, Result};
use crate::frontdoor::unit::{quoted, user_dir};

/// When the upgrade runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum When {
    /// Every day at midnight (systemd's `daily`).
    Daily,
    /// Every day at this hour and minute, local time.
    At(u8, u8),
}

impl std::str::FromStr for When {
    type Err = String;
    fn from_str(text: &str) -> std::result::Result<When, String> {
        let bad = || format!("`{text}` is not a time to run at: give `daily` or HH:MM (03:30)");
        if text == "daily" {
            return Ok(When::Daily);
        }
        let (h, m) = text.split_once(':').ok_or_else(bad)?;
        let (h, m): (u8, u8) = (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
        if h > 23 || m > 59 || text.len() != 5 {
            return Err(bad());
        }
        Ok(When::At(h, m))
    }
}

impl When {
    /// The timer's `OnCalendar=`.
    fn calendar(self) -> String {
        match self {
            When::Daily => "daily".into(),
            When::At(h, m) => format!("*-*-* {h:02}:{m:02}:00"),
        }
    }
}

/// The two unit files of `name`'s schedule.
fn units(name: &str) -> Result<(PathBuf, PathBuf)> {
    let dir = user_dir()?;
    let unit = format!("sparkctl-upgrade-{name}");
    Ok((
        dir.join(format!("{unit}.service")),
        dir.join(format!("{unit}.timer")),
    ))
}

/// What was installed or taken away, and whether systemd took it in.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Scheduled {
    service: PathBuf,
    timer: PathBuf,
    /// `OnCalendar=` (none when unscheduled).
    #[serde(skip_serializing_if = "Option::is_none")]
    on_calendar: Option<String>,
    /// `systemctl --user` took it in.
    enabled: bool,
    /// What systemd did, or what to run by hand and why.
    systemd: String,
}

impl Scheduled {
    pub(crate) fn service(&self) -> &Path {
        &self.service
    }

    pub(crate) fn timer(&self) -> &Path {
        &self.timer
    }

    pub(crate) fn on_calendar(&self) -> Option<&str> {
        self.on_calendar.as_deref()
    }

    pub(crate) fn systemd(&self) -> &str {
        &self.systemd
    }
}

/// An absolute path, as a unit file needs it (a relative `--recipes` was given).
fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// The service: one run of this binary's `upgrade NAME`, with this state dir, recipes and
/// lock, the machine settings given to this command, and the secrets `notify` references
/// from `~/.config/sparkctl/upgrade.env` (the user's file; sparkctl never writes a secret).
/// `KillMode=process`: what the run leaves serving (the front door it may have started, a
/// promoted host process) outlives it; systemd would otherwise end its whole cgroup.
fn service_text(ctx: &Context, recipes_dir: &Path, name: &str) -> String {
    let argv = [
        ctx.self_exe.clone(),
        "--state-dir".into(),
        absolute(ctx.state.root()).display().to_string(),
        "--recipes".into(),
        absolute(recipes_dir).display().to_string(),
        "--lock".into(),
        absolute(&ctx.lock_path).display().to_string(),
        "upgrade".into(),
        name.to_string(),
    ];
    let command: Vec<String> = argv.iter().map(|w| quoted(w, true)).collect();
    let mut env = vec![format!(
        "SPARKCTL_PRODUCTION_PORT={}",
        ctx.settings.production_port
    )];
    use crate::settings::{KEEP_IMAGES, MEMORY_GB, MEMORY_RESERVE_GB};
    env.extend(
        ctx.settings
            .as_set(&[MEMORY_GB, MEMORY_RESERVE_GB, KEEP_IMAGES]),
    );
    let env: Vec<String> = env
        .iter()
        .map(|e| format!("Environment={}", quoted(e, false)))
        .collect();
    format!(
        "# Written by `sparkctl upgrade {name} --schedule`; `--unschedule` removes it.\n\
         [Unit]\nDescription=sparkctl upgrade {name}: follow its image tag\n\
         After=network-online.target docker.service\n\n\
         [Service]\nType=oneshot\nKillMode=process\nExecStart={}\n{}\n\
         EnvironmentFile=-%h/.config/sparkctl/upgrade.env\n",
        command.join(" "),
        env.join("\n")
    )
}

fn timer_text(name: &str, when: When) -> String {
    format!(
        "# Written by `sparkctl upgrade {name} --schedule`; `--unschedule` removes it.\n\
         [Unit]\nDescription=sparkctl upgrade {name}, {}\n\n\
         [Timer]\nOnCalendar={}\nPersistent=true\nUnit=sparkctl-upgrade-{name}.service\n\n\
         [Install]\nWantedBy=timers.target\n",
        match when {
            When::Daily => "daily".to_string(),
            When::At(h, m) => format!("daily at {h:02}:{m:02}"),
        },
        when.calendar()
    )
}

/// `systemctl --user ARGS`: Ok, or its first line of complaint.
fn systemctl(args: &[&str]) -> std::result::Result<(), String> {
    let out = Command::new("systemctl")
        .arg("--user")
        .args(args)
        .output()
        .map_err(|e| format!("systemctl cannot run ({e})"))?;
    if out.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&out.stderr);
    Err(said.lines().next().unwrap_or("it failed").to_string())
}

/// Writes `name`'s service and timer and enables the timer.
pub(crate) fn schedule(
    ctx: &Context,
    recipes_dir: &Path,
    name: &str,
    when: When,
) -> Result<Scheduled> {
    let (service, timer) = units(name)?;
    if let Some(dir) = service.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
    }
    crate::state::write_atomic(&service, service_text(ctx, recipes_dir, name).as_bytes())?;
    crate::state::write_atomic(&timer, timer_text(name, when).as_bytes())?;
    let unit = format!("sparkctl-upgrade-{name}.timer");
    let systemd = systemctl(&["daemon-reload"])
        .and_then(|()| systemctl(&["enable", "--now", &unit]))
        .map(|()| format!("enabled: `systemctl --user list-timers {unit}` shows the next run"))
        .map_err(|why| {
            format!(
                "not enabled ({why}); where a user manager runs: `systemctl --user daemon-reload \
                 && systemctl --user enable --now {unit}` (and `loginctl enable-linger $USER` \
                 so it runs without a login)"
            )
        });
    Ok(Scheduled {
        service,
        timer,
        on_calendar: Some(when.calendar()),
        enabled: systemd.is_ok(),
        systemd: systemd.unwrap_or_else(|e| e),
    })
}

/// Disables `name`'s timer and removes both units; None when none was installed.
pub(crate) fn unschedule(name: &str) -> Result<Option<Scheduled>> {
    let (service, timer) = units(name)?;
    if !service.exists() && !timer.exists() {
        return Ok(None);
    }
    let unit = format!("sparkctl-upgrade-{name}.timer");
    let disabled = systemctl(&["disable", "--now", &unit]);
    for f in [&timer, &service] {
        match std::fs::remove_file(f) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(Error::io(format!("cannot remove {}", f.display()), e))
            }
            _ => {}
        }
    }
    let systemd = disabled
        .and_then(|()| systemctl(&["daemon-reload"]))
        .map(|()| "disabled and removed".to_string())
        .map_err(|why| {
            format!(
                "removed; systemctl --user did not answer ({why}): where a user manager runs, \
                 `systemctl --user daemon-reload`"
            )
        });
    Ok(Some(Scheduled {
        service,
        timer,
        on_calendar: None,
        enabled: false,
        systemd: systemd.unwrap_or_else(|e| e),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_systemd_calendars() {
        assert_eq!("daily".parse::<When>().unwrap().calendar(), "daily");
        assert_eq!(
            "03:30".parse::<When>().unwrap().calendar(),
            "*-*-* 03:30:00"
        );
        for bad in ["24:00", "3:30", "03:60", "nightly", "03-30"] {
            assert!(bad.parse::<When>().is_err(), "{bad}");
        }
        let t = timer_text("nightly", When::At(4, 5));
        assert!(
            t.contains("OnCalendar=*-*-* 04:05:00\nPersistent=true\n"),
            "{t}"
        );
    }
}
