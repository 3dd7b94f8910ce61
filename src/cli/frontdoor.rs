//! `sparkctl frontdoor start|stop|status|run|install` and the front door's part of `status`
//! and `logs`: rendering over `crate::frontdoor`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};

use super::{context, executor, server_executor, Globals, Output};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::frontdoor::{self, Config, DoorStatus, Launch};

/// `sparkctl frontdoor`'s subcommand.
#[derive(Debug, Args)]
pub(crate) struct FrontdoorArgs {
    #[command(subcommand)]
    command: FrontdoorCommand,
}

impl FrontdoorArgs {
    pub(super) fn exec(self, g: &Globals, out: &Output) -> Result<()> {
        let executor = if matches!(self.command, FrontdoorCommand::Serve { .. }) {
            server_executor()?
        } else {
            executor()?
        };
        executor.block_on(async {
            run(context(g).await?, g.recipes_dir().path, self.command, out).await
        })
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum FrontdoorCommand {
    /// Start the front door in the background (`up` and `rollback` do when it is not running).
    Start,
    /// Stop it: the port closes, the answers in flight finish (within
    /// SPARKCTL_FRONTDOOR_DRAIN); the production deployment keeps running on its own port.
    Stop,
    /// Restart it onto this binary (after an upgrade) without refusing a connection or
    /// cutting a stream: the new server takes the port's socket, the old one drains.
    Restart,
    /// Where it routes, what is in flight, what waits.
    Status,
    /// Run it in the foreground: what `start` and the systemd unit run.
    Run {
        /// A listening socket inherited from the process that held the port (internal).
        #[arg(long, hide = true)]
        listen_fd: Option<i32>,
        /// A server already serving on that socket (internal).
        #[arg(long, hide = true, requires = "listen_fd")]
        server: Option<u32>,
        /// Start a new server, then let `--server` drain (internal: a restart).
        #[arg(long, hide = true, requires = "server")]
        upgrade: bool,
    },
    /// The server process `run` supervises (internal).
    #[command(hide = true)]
    Serve {
        #[arg(long)]
        listen_fd: i32,
    },
    /// Write a systemd user unit that starts the front door at boot (and restarts it).
    Install,
    /// Keep production's chat requests with their timing, for `bench NAME --replay
    /// captured`: local (STATE/frontdoor/capture, mode 600), bounded, and never a header, an
    /// API key or a secret-looking value.
    Capture {
        #[command(subcommand)]
        what: CaptureCommand,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum CaptureCommand {
    /// Start capturing (kept across restarts of the front door).
    On {
        /// The most the capture keeps on disk; the oldest half goes as it fills.
        #[arg(long, value_name = "SIZE", default_value = "64m", value_parser = max_size)]
        max_size: crate::units::ByteSize,
    },
    /// Stop capturing (what was captured stays).
    Off,
    /// Whether it captures, where, and how much it holds.
    Status,
}

fn max_size(text: &str) -> std::result::Result<crate::units::ByteSize, String> {
    let size = crate::units::parse_size(text)?;
    if size < 64 << 10 {
        return Err(format!(
            "{text} is too small to hold requests; give 64k or more"
        ));
    }
    Ok(crate::units::ByteSize(size))
}

async fn run(
    ctx: Context,
    recipes: PathBuf,
    command: FrontdoorCommand,
    out: &Output,
) -> Result<()> {
    let config = Config::new(&ctx.settings, ctx.settings.production_port)?;
    let launch = Launch::new(&ctx.self_exe, &recipes, &ctx.lock_path);
    match command {
        FrontdoorCommand::Start => {
            let remote = frontdoor::ensure(&ctx.state, &config, &launch).await?;
            print_status(&remote.status().await?, out);
            Ok(())
        }
        FrontdoorCommand::Stop => {
            match frontdoor::launch::stop(&ctx.state, config.drain).await? {
                Some(pid) => out.say(format_args!(
                    "front door stopped (pid {pid}); production keeps running on its own port"
                )),
                None => out.say(format_args!(
                    "no front door runs for {}",
                    ctx.state.root().display()
                )),
            }
            Ok(())
        }
        FrontdoorCommand::Restart => {
            let (old, now) = frontdoor::launch::restart(&ctx.state, &config, &launch).await?;
            match old {
                Some(old) => out.say(format_args!(
                    "front door restarted onto {}: server pid {} serves; pid {old} finishes the \
                     answers it had in flight",
                    launch.self_exe, now.pid
                )),
                None => out.say("no front door was running; started one"),
            }
            print_status(&now, out);
            Ok(())
        }
        FrontdoorCommand::Status => {
            let remote = frontdoor::Remote::new(frontdoor::control_socket(&ctx.state));
            print_status(&remote.status().await?, out);
            Ok(())
        }
        FrontdoorCommand::Run {
            listen_fd,
            server,
            upgrade,
        } => {
            let takeover = frontdoor::Takeover {
                listen_fd,
                server,
                upgrade,
            };
            crate::server::supervisor::run(&ctx.state, &config, &launch, takeover).await
        }
        FrontdoorCommand::Serve { listen_fd } => {
            let ctx = Context {
                lock_path: launch.lock,
                ..ctx
            };
            crate::server::models::serve_frontdoor(ctx, launch.recipes, config, listen_fd).await
        }
        FrontdoorCommand::Install => install(&config, &launch, &ctx.state, out),
        FrontdoorCommand::Capture { what } => capture(&ctx, what, out).await,
    }
}

async fn capture(ctx: &Context, what: CaptureCommand, out: &Output) -> Result<()> {
    use frontdoor::capture::{self, CaptureConfig};
    let now = capture::read_config(&ctx.state);
    let set = match what {
        CaptureCommand::On { max_size } => Some(CaptureConfig {
            on: true,
            max_bytes: max_size.0,
        }),
        CaptureCommand::Off => Some(CaptureConfig { on: false, ..now }),
        CaptureCommand::Status => None,
    };
    let remote = frontdoor::Remote::new(frontdoor::control_socket(&ctx.state));
    let status = match remote.capture(set).await {
        Ok(s) => s,
        // No front door: the setting waits in its file for the next start.
        Err(_) if remote.status().await.is_err() => {
            if let Some(s) = set {
                let file = capture::config_file(&ctx.state);
                if let Some(dir) = file.parent() {
                    std::fs::create_dir_all(dir)
                        .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
                }
                crate::state::write_json(&file, &s)?;
            }
            let dir = capture::dir(&ctx.state);
            let bytes = capture::files(&dir)
                .iter()
                .filter_map(|f| std::fs::metadata(f).ok())
                .map(|m| m.len())
                .sum();
            if !out.json {
                out.say("the front door is not running: this applies when it starts");
            }
            capture::CaptureStatus {
                config: set.unwrap_or(now),
                dir,
                bytes,
                written: 0,
                dropped: 0,
            }
        }
        Err(e) => return Err(e),
    };
    if out.json {
        out.print_json(&status);
        return Ok(());
    }
    out.say(format_args!(
        "capture {} · at most {} in {} · {} held now · {} written, {} dropped since the front door started",
        if status.config.on { "on" } else { "off" },
        crate::units::ByteSize(status.config.max_bytes),
        status.dir.display(),
        crate::units::ByteSize(status.bytes),
        status.written,
        status.dropped
    ));
    Ok(())
}

fn print_status(s: &DoorStatus, out: &Output) {
    if out.json {
        out.print_json(s);
        return;
    }
    out.say(line(s));
    for l in model_lines(s) {
        out.say(l);
    }
    for l in live_lines(s) {
        out.say(l);
    }
    for l in rollout_lines(s) {
        out.say(l);
    }
    for w in &s.production.warm {
        out.say(format_args!(
            "  warm: {} ({}) until {}",
            w.upstream.recipe,
            crate::units::short_id(&w.upstream.deployment),
            crate::units::utc_stamp(w.until)
        ));
    }
}

/// One line: port, upstream, in flight, waiting.
pub(crate) fn line(s: &DoorStatus) -> String {
    let in_flight: usize = s.in_flight.values().sum();
    format!(
        "front door {}:{} (pid {}) → {} · {in_flight} in flight · {} waiting",
        s.host,
        s.port,
        s.pid,
        match &s.upstream {
            Some(u) => format!(
                "{} ({}, {})",
                u.recipe,
                crate::units::short_id(&u.deployment),
                u.url
            ),
            None if s.holding => "nothing yet: holding requests until production is back".into(),
            None => "nothing: there is no production (requests get 503)".into(),
        },
        s.waiting
    )
}

/// With several models behind the front door, where each one's requests go; with any, a
/// start on demand that failed.
pub(crate) fn model_lines(s: &DoorStatus) -> Vec<String> {
    if s.models.len() < 2 {
        return (s.models.iter()).filter_map(failure_line).collect();
    }
    use crate::frontdoor::status::ModelState;
    (s.models.iter())
        .flat_map(|m| {
            let recipe = m.production.current.as_ref().map(|e| e.recipe.as_str());
            let last = match m.idle_s {
                Some(t) => format!(
                    "idle {}",
                    crate::units::format_uptime(Duration::from_secs_f64(t))
                ),
                None if m.in_flight > 0 => "busy".into(),
                None => "waited on".into(),
            };
            format!(
                "  model {}{} → {} · {} · {} in flight · {} waiting · {last} · {} on demand",
                m.name.as_deref().unwrap_or("(none)"),
                if m.default { " (default)" } else { "" },
                match (&m.upstream, m.state) {
                    (Some(u), _) =>
                        format!("{} ({})", u.recipe, crate::units::short_id(&u.deployment)),
                    (None, ModelState::Offline) => "nothing (its requests get 503)".into(),
                    (None, ModelState::Holding) => "nothing yet: holding its requests".into(),
                    (None, _) => recipe.unwrap_or("-").to_string(),
                },
                m.state.as_str(),
                m.in_flight,
                m.waiting,
                match m.loads {
                    1 => "1 start".to_string(),
                    n => format!("{n} starts"),
                }
            )
            .lines()
            .map(String::from)
            .chain(m.turn.as_ref().map(|t| {
                format!(
                    "    turn: {} while another model waits (4 × its last start {}, 10 s to 120 s){}",
                    crate::units::format_duration(Duration::from_secs_f64(t.length_s)),
                    t.last_start_s
                        .map_or("unmeasured".into(), |s| format!("{s:.1} s")),
                    t.waiting_s
                        .map_or(String::new(), |w| format!("; its requests wait {w:.1} s"))
                )
            }))
            .chain(failure_line(m))
            .collect::<Vec<_>>()
        })
        .collect()
}

/// A model whose last start on demand failed: why, and when the next is tried.
fn failure_line(m: &crate::frontdoor::status::ModelStatus) -> Option<String> {
    let f = m.start_failed.as_ref()?;
    Some(format!(
        "    start failed ({} in a row, {}; the next in {:.0} s): {}",
        f.attempts,
        serde_json::to_value(f.kind)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default(),
        f.retry_in_s,
        f.reason.lines().next().unwrap_or_default()
    ))
}

/// Production's live quality: the checks over its recent answers, its live gates, its
/// last golden round.
pub(crate) fn live_lines(s: &DoorStatus) -> Vec<String> {
    use crate::bench::gates::GateOutcome;
    let Some(l) = &s.live else { return Vec::new() };
    let rates: Vec<String> = l
        .rates
        .iter()
        .map(|(check, v)| format!("{check} {v:.0}%"))
        .collect();
    let mut out = vec![format!(
        "  live quality of {} ({} recent answers): {}",
        l.recipe,
        l.answers,
        if rates.is_empty() {
            "-".into()
        } else {
            rates.join(", ")
        }
    )];
    if !l.gates.is_empty() {
        let gates: Vec<String> = l
            .gates
            .iter()
            .map(|g| {
                let outcome = match g.outcome {
                    GateOutcome::Pass => "pass",
                    GateOutcome::Fail => "FAIL",
                    GateOutcome::Inconclusive => "inconclusive",
                    GateOutcome::NotApplied => "not applied",
                };
                match g.value {
                    Some(v) => format!("{} {outcome} ({v:.1}, rule {})", g.gate, g.rule),
                    None => format!("{} {outcome}", g.gate),
                }
            })
            .collect();
        let since = l
            .failing_for_s
            .map_or(String::new(), |t| format!(" · failing for {t:.0} s"));
        out.push(format!("  live gates: {}{since}", gates.join(", ")));
    }
    if let Some(g) = &l.golden {
        out.push(format!(
            "  golden prompts at {}: {} asked, {}",
            g.at,
            g.cases,
            match g.failed.len() {
                0 => "all passed".to_string(),
                n => format!("{n} failed: {}", g.failed.join("; ")),
            }
        ));
    }
    out
}

/// A candidate meeting production's traffic: share, requests each way, the comparison so
/// far, and the decision it points to.
pub(crate) fn rollout_lines(s: &DoorStatus) -> Vec<String> {
    let Some(r) = &s.rollout else {
        return Vec::new();
    };
    let (t, j) = (&r.tally, &r.judgement);
    let mut out = vec![format!(
        "  rollout: {} ({}) in a {} for {:.0} s · {} of {} requests to it, {} compared, {} \
         dropped, {} retried on production · {}: {}",
        r.candidate.recipe,
        crate::units::short_id(&r.candidate.deployment),
        r.spec.describe(),
        r.elapsed_s,
        t.to_candidate,
        t.offered,
        j.compared,
        t.dropped,
        t.retried,
        j.decision.as_str(),
        j.reason
    )];
    out.extend(j.comparisons.iter().map(|c| format!("    {}", c.detail)));
    out
}

/// `logs frontdoor`: the supervisor's and server's output, newest run.
pub(crate) async fn logs(ctx: &Context, view: crate::runtime::LogView, out: &Output) -> Result<()> {
    let crate::runtime::LogView { tail, follow } = view;
    let Some(path) = ctx.state.latest_log("frontdoor") else {
        return Err(Error::Stopped(crate::error::Gone::DoorNeverRan));
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
    let lines: Vec<&str> = text.lines().collect();
    let from = tail.map_or(0, |n| lines.len().saturating_sub(n));
    for l in &lines[from..] {
        out.say(l);
    }
    if follow {
        use std::io::{Read, Seek, SeekFrom};
        let mut f = std::fs::File::open(&path)
            .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
        let mut at = f.seek(SeekFrom::End(0)).unwrap_or(0);
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let mut more = String::new();
            if f.seek(SeekFrom::Start(at)).is_ok() && f.read_to_string(&mut more).is_ok() {
                at += more.len() as u64;
                out.text(more);
            }
        }
    }
    Ok(())
}

fn install(
    config: &Config,
    launch: &Launch,
    state: &crate::state::StateDir,
    out: &Output,
) -> Result<()> {
    let path = frontdoor::unit::install(state, config, launch)?;
    out.say(format_args!("wrote {}", path.display()));
    out.say("enable it (and keep it running without a login session):");
    out.say("  systemctl --user daemon-reload && systemctl --user enable --now sparkctl-frontdoor");
    out.say("  loginctl enable-linger \"$USER\"");
    Ok(())
}
