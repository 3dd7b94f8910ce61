//! A host process as /proc shows it: argv, working dir, binary, the names of its
//! environment (never the values: /proc/PID/environ is read for the part before each `=`).

use std::path::PathBuf;

use super::{record::Origin, words, Observed, Seen};
use crate::error::{Error, Result, Thing};

/// Names every login shell sets: not the server's configuration.
const SHELL_NAMES: &[&str] = &[
    "PATH",
    "HOME",
    "PWD",
    "OLDPWD",
    "SHELL",
    "SHLVL",
    "USER",
    "LOGNAME",
    "TERM",
    "LANG",
    "LANGUAGE",
    "MAIL",
    "HOSTNAME",
    "_",
    "LS_COLORS",
    "DISPLAY",
    "EDITOR",
    "PAGER",
    "COLORTERM",
    "LESSOPEN",
    "LESSCLOSE",
    "MOTD_SHOWN",
    "DBUS_SESSION_BUS_ADDRESS",
    "TMUX",
    "TMUX_PANE",
    "STY",
    "WINDOW",
    "TERM_PROGRAM",
    "TERM_PROGRAM_VERSION",
    "VIRTUAL_ENV_PROMPT",
    "PS1",
];
const SHELL_PREFIXES: &[&str] = &[
    "LC_", "XDG_", "SSH_", "SUDO_", "GPG_", "WAYLAND_", "VSCODE_",
];

pub(crate) fn observe_port(port: u16) -> Result<Observed> {
    let listener = crate::host::listener_on(port).ok_or_else(|| Error::NoSuch {
        what: Thing::Listener,
        name: port.to_string(),
        hint: crate::error::Hint::None,
    })?;
    let pid = listener.pid.ok_or_else(|| {
        Error::Failed(format!(
            "port {port} is held by a process sparkctl may not read (another user's); run \
             import as that user, or give --pid"
        ))
    })?;
    if let Some(cmd) = listener.command.as_deref() {
        if cmd == "docker-proxy" {
            return Err(Error::BadFlag(crate::error::FlagProblem::PortOfContainer {
                port,
            }));
        }
    }
    observe_pid(pid)
}

pub(crate) fn observe_pid(pid: u32) -> Result<Observed> {
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    let id = crate::host::ProcessId::of(pid).ok_or_else(|| Error::NoSuch {
        what: Thing::Pid,
        name: pid.to_string(),
        hint: crate::error::Hint::None,
    })?;
    let cmdline = std::fs::read(proc_dir.join("cmdline"))
        .map_err(|e| Error::io(format!("cannot read the command line of pid {pid}"), e))?;
    let argv: Vec<String> = cmdline
        .split(|b| *b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect();
    let Some((first, args)) = argv.split_first() else {
        return Err(Error::BadFlag(crate::error::FlagProblem::NoCommandLine {
            pid,
        }));
    };
    let cwd = std::fs::read_link(proc_dir.join("cwd")).ok();
    let exe = std::fs::read_link(proc_dir.join("exe")).ok();
    let program = program_path(first, cwd.as_deref(), exe.as_deref());
    // A host process inherits sparkctl's environment at start: only what that lacks needs
    // naming (and then setting, before the recipe can start).
    let (env_names, inherited): (Vec<String>, Vec<String>) = environ_names(&proc_dir)
        .into_iter()
        .partition(|n| !crate::settings::host_var_is_set(n));
    let mut notes = Vec::new();
    if !inherited.is_empty() {
        notes.push(format!(
            "{} more of its environment variables are set here too and are inherited at start \
             (values may differ: check {})",
            inherited.len(),
            inherited
                .iter()
                .take(6)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let port = listening_port(pid, args);
    Ok(Observed {
        from: format!("process {pid}"),
        launch: Seen::Process {
            program,
            args: args.to_vec(),
            cwd,
        },
        env_names,
        dropped: notes,
        origin: Some(Origin::Process { process: id, port }),
        rss: crate::host::rss_bytes(pid),
    })
}

/// A pasted host command line: `VAR=… ` prefixes give names, the rest is argv.
pub(crate) fn observe_line(line: &str) -> Result<Observed> {
    let words = words::split(line).map_err(bad_command)?;
    let mut env_names = Vec::new();
    let mut rest = words.as_slice();
    while let Some((w, tail)) = rest.split_first() {
        match w.split_once('=') {
            Some((name, _)) if crate::recipe::env_name_ok(name) => {
                env_names.push(name.to_string());
                rest = tail;
            }
            _ => break,
        }
    }
    let Some((first, args)) = rest.split_first() else {
        return Err(bad_command("the line names no program"));
    };
    if matches!(first.as_str(), "docker" | "podman" | "sudo") {
        return Err(bad_command(
            "it is for a host command; a container line goes to --docker-run",
        ));
    }
    Ok(Observed {
        from: "a pasted command line".into(),
        launch: Seen::Process {
            program: super::tilde(first),
            args: args.to_vec(),
            cwd: None,
        },
        env_names,
        dropped: Vec::new(),
        origin: None,
        rss: None,
    })
}

/// argv[0] as an absolute path when it can be made one: relative to the working dir, or
/// found through /proc/PID/exe for a bare name found on PATH.
fn program_path(
    first: &str,
    cwd: Option<&std::path::Path>,
    exe: Option<&std::path::Path>,
) -> String {
    let path = if first.starts_with('/') {
        PathBuf::from(first)
    } else if first.contains('/') {
        match cwd {
            Some(c) => c.join(first),
            None => PathBuf::from(first),
        }
    } else {
        match exe {
            Some(e) => e.to_path_buf(),
            None => PathBuf::from(first),
        }
    };
    let clean: PathBuf = path.components().collect();
    super::tilde(&clean.display().to_string())
}

fn environ_names(proc_dir: &std::path::Path) -> Vec<String> {
    let Ok(bytes) = std::fs::read(proc_dir.join("environ")) else {
        return Vec::new();
    };
    let mut names: Vec<String> = bytes
        .split(|b| *b == 0)
        // Only the name: the value is never kept, not even in memory past this split.
        .filter_map(|kv| kv.split(|b| *b == b'=').next())
        .filter_map(|n| std::str::from_utf8(n).ok())
        .filter(|n| crate::recipe::env_name_ok(n))
        .filter(|n| !SHELL_NAMES.contains(n) && !SHELL_PREFIXES.iter().any(|p| n.starts_with(p)))
        .map(String::from)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The port the process listens on: its `--port`, else the first listening socket it owns.
fn listening_port(pid: u32, args: &[String]) -> Option<u16> {
    let given = args.iter().enumerate().find_map(|(i, a)| {
        if let Some(v) = a.strip_prefix("--port=") {
            return v.parse().ok();
        }
        (a == "--port")
            .then(|| args.get(i + 1)?.parse().ok())
            .flatten()
    });
    given.or_else(|| crate::host::ports_of(pid).into_iter().next())
}

/// A pasted line `--command` cannot import: why.
fn bad_command(why: impl ToString) -> Error {
    Error::BadFlag(crate::error::FlagProblem::Said {
        flag: "--command",
        why: why.to_string(),
    })
}
