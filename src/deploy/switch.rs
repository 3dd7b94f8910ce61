//! What `up` and `rollback` share: the context, the signals that interrupt them, and the one
//! way back when they fail — never stop what the front door routes to; if production was
//! stopped to make room, start it again and switch the front door back to it.

use std::time::Instant;

use super::{plan_start, start, Settings, StartOptions, STOP_GRACE};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::frontdoor::{self, Launch, Remote};
use crate::history::{Phase, PhaseName, RunRecord};
use crate::lock::Lock;
use crate::production::{Production, Upstream};
use crate::recipe::RecipeSet;
use crate::runtime::{Deployment, Runtimes};
use crate::state::StateDir;

/// What the flows need: the commands' shared context, the recipes, the lock as it was when
/// the flow began (every start in it runs the same digests) and the front door.
pub(crate) struct Ctx<'a> {
    pub(crate) shared: &'a Context,
    pub(crate) recipes: &'a RecipeSet,
    pub(crate) lock: Lock,
    pub(crate) door: Remote,
    pub(crate) door_config: frontdoor::Config,
    /// A dry run: the front door is asked, never started.
    dry_run: bool,
}

impl<'a> Ctx<'a> {
    /// Reaches the front door, starting it when it is not running (a dry run only asks it,
    /// so it starts nothing and plans even while another server holds the production
    /// port), and reads the lock.
    pub(crate) async fn open(
        shared: &'a Context,
        recipes: &'a RecipeSet,
        dry_run: bool,
    ) -> Result<Ctx<'a>> {
        let door_config = frontdoor::Config::from_env(shared.settings.production_port)?;
        let door = if dry_run {
            frontdoor::answering(&shared.state, &door_config)
                .await?
                .unwrap_or_else(|| Remote::new(frontdoor::control_socket(&shared.state)))
        } else {
            let launch = Launch::new(&shared.self_exe, &recipes.dir, &shared.lock_path);
            frontdoor::ensure(&shared.state, &door_config, &launch).await?
        };
        Ok(Ctx {
            shared,
            recipes,
            lock: Lock::load(&shared.lock_path)?,
            door,
            door_config,
            dry_run,
        })
    }

    /// Production as the front door holds it; for a dry run with no front door running,
    /// as the front door would start with it (production.json).
    pub(crate) async fn production(&self) -> Result<Production> {
        match self.door.status().await {
            Ok(s) => Ok(s.production),
            Err(_) if self.dry_run && frontdoor::supervisor::running(self.state()).is_none() => {
                Production::load(self.state())
            }
            Err(e) => Err(e),
        }
    }

    pub(crate) fn rt(&self) -> &'a Runtimes {
        &self.shared.runtimes
    }

    pub(crate) fn state(&self) -> &'a StateDir {
        &self.shared.state
    }

    pub(crate) fn settings(&self) -> &'a Settings {
        &self.shared.settings
    }

    pub(super) fn start_options(&self, allow_unpinned: bool) -> StartOptions<'_> {
        StartOptions {
            lock: &self.lock,
            allow_unpinned,
            replacing: None,
        }
    }
}

/// Resolves on Ctrl-C, SIGTERM or SIGHUP (a closed SSH session): all three stop a flow
/// the same way, through its restore path.
pub(crate) async fn interrupted() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).ok();
    let mut hup = signal(SignalKind::hangup()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        Some(_) = async { term.as_mut()?.recv().await } => {}
        Some(_) = async { hup.as_mut()?.recv().await } => {}
    }
}

/// The front door's address for a running deployment.
pub(crate) fn upstream_of(d: &Deployment) -> Upstream {
    Upstream {
        recipe: d.name.clone(),
        deployment: d.id.clone(),
        url: d.url(),
    }
}

/// What the front door routes to, for records and messages.
pub(crate) async fn serving_now(ctx: &Ctx<'_>) -> Option<String> {
    let s = ctx.door.status().await.ok()?;
    s.upstream.map(|u| {
        format!(
            "{} ({}, {})",
            u.recipe,
            crate::units::short_id(&u.deployment),
            u.url
        )
    })
}

/// Room a run's files take at most (its record, benchmark results, report, candidate log).
const RUN_FILES_ROOM: u64 = 16 << 20;

/// Before a flow changes anything: its record is written now (as interrupted, until it says
/// otherwise: a run killed outright still shows in `history`) and the room its files will
/// take is free. A full disk then fails the flow at once, with nothing started.
pub(crate) fn reserve_records(state: &StateDir, record: &RunRecord) -> Result<()> {
    let cannot = |why: String| {
        Error::Failed(format!(
            "the state dir {} cannot take this run's records ({why}); nothing was changed: free \
             some space there and run it again",
            state.root().display()
        ))
    };
    let mut first = record.clone();
    first.outcome = crate::history::Outcome::Interrupted;
    first.error = Some(format!(
        "in progress (pid {}); a run that stays so ended without recording its outcome",
        std::process::id()
    ));
    let path = first.save(state).map_err(|e| cannot(e.to_string()))?;
    match path.parent().and_then(free_bytes) {
        Some(free) if free < RUN_FILES_ROOM => Err(cannot(format!(
            "{} MB free, {} MB needed",
            free >> 20,
            RUN_FILES_ROOM >> 20
        ))),
        _ => Ok(()),
    }
}

/// Bytes an unprivileged writer may still use on the filesystem of `dir`.
fn free_bytes(dir: &std::path::Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs writes into the zeroed struct it is given.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        (libc::statvfs(path.as_ptr(), &mut st) == 0)
            .then(|| st.f_bavail as u64 * st.f_frsize as u64)
    }
}

/// Runs one named phase and records it.
pub(crate) async fn timed<T>(
    record: &mut RunRecord,
    name: PhaseName,
    f: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    let began = Instant::now();
    let r = f.await;
    record.phases.push(Phase {
        name,
        ms: began.elapsed().as_secs_f64() * 1e3,
        ok: r.is_ok(),
        detail: r.as_ref().err().map(|e| e.to_string()).unwrap_or_default(),
    });
    r
}

/// Starts `name` on its own port and waits until it serves; the front door's upstream for it.
pub(crate) async fn start_instance(
    ctx: &Ctx<'_>,
    name: &str,
    allow_unpinned: bool,
) -> Result<Deployment> {
    let loaded = ctx.recipes.get(name)?;
    refuse_production_port(ctx.settings(), name, loaded.recipe.server.port)?;
    let plan = plan_start(ctx.shared, loaded, &ctx.start_options(allow_unpinned)).await?;
    Ok(start(ctx.rt(), &plan, None, |_| {}).await?.deployment)
}

/// The front door owns the production port: a backend needs its own.
pub(crate) fn refuse_production_port(settings: &Settings, name: &str, port: u16) -> Result<()> {
    if port == settings.production_port {
        return Err(Error::Usage(format!(
            "{name}: server.port is the production port {port}, which the front door owns; give \
             the recipe its own port (the front door sends production's requests there)"
        )));
    }
    Ok(())
}

/// Stops the very instance `u` names, if it still runs.
pub(crate) async fn stop_instance(ctx: &Ctx<'_>, u: &Upstream) -> Result<()> {
    if let Some(d) = ctx.rt().find(&u.recipe).await? {
        if d.running() && d.id == u.deployment {
            ctx.rt().stop(&d, STOP_GRACE).await?;
        }
    }
    Ok(())
}

/// Records a flow that failed or was interrupted (the outcome it reached — rejected,
/// inconclusive — is kept) and says in one message what failed, what was put back and
/// what serves now. A record that cannot be written is said, not hidden.
pub(crate) async fn failed(
    ctx: &Ctx<'_>,
    record: &mut RunRecord,
    e: Error,
    notes: &[String],
    what: &str,
) -> Error {
    use crate::history::Outcome;
    let interrupted = matches!(e, Error::Interrupted(_));
    record.outcome = match record.outcome {
        _ if interrupted => Outcome::Interrupted,
        o @ (Outcome::Rejected | Outcome::Inconclusive) => o,
        _ => Outcome::Failed,
    };
    record.error = Some(e.to_string());
    record.serving = serving_now(ctx).await;
    record.finished_at = crate::units::now_utc();
    let saved = record.save(ctx.state());
    let failed = Error::RunFailed(Box::new(crate::error::RunFailure {
        what: what.to_string(),
        outcome: record.outcome.to_string(),
        cause: e,
        notes: notes.join("; "),
        port: ctx.settings().production_port,
        serving: record.serving.clone().unwrap_or_else(|| "nothing".into()),
        record: match &saved {
            Ok(p) => p.display().to_string(),
            Err(e) => format!("not written ({e})"),
        },
    }));
    if interrupted {
        Error::Interrupted(failed.to_string())
    } else {
        failed
    }
}

/// What a flow changed, for the way back.
#[derive(Default)]
pub(crate) struct Touched {
    /// The flow's run id: what it starts carries it (label, pid record), and the way back
    /// stops nothing else.
    pub(crate) run_id: String,
    /// Started by this flow (never production before it).
    pub(crate) started: Option<Deployment>,
    /// Production stopped to make room (swap): what served, to be started again.
    pub(crate) production_stopped: Option<Upstream>,
    /// The front door was told to hold.
    pub(crate) held: bool,
}

impl Touched {
    pub(crate) fn of_run(run_id: &str) -> Touched {
        Touched {
            run_id: run_id.to_string(),
            ..Touched::default()
        }
    }
}

/// Puts things back after a failure or an interrupt: whatever the front door routes to
/// keeps running; what the flow started otherwise stops (logs kept); production stopped to
/// make room starts again and the front door is switched back to it. Returns what was done.
pub(crate) async fn restore(
    ctx: &Ctx<'_>,
    mut t: Touched,
    recipe: &str,
    say: &dyn Fn(&str),
) -> Vec<String> {
    let mut notes = Vec::new();
    let door = ctx.door.status().await.ok();
    let routed = door.as_ref().and_then(|s| s.upstream.clone());
    // Interrupted before the start was recorded: an instance of this recipe carrying this
    // run's id is this flow's (any other was started by someone else, and stays). A
    // container only created may have its start request still on the way to the engine:
    // watched a moment for that.
    if t.started.is_none() && !t.run_id.is_empty() {
        let deadline = Instant::now() + std::time::Duration::from_secs(2);
        loop {
            let not_routed = |d: &Deployment| routed.as_ref().is_none_or(|u| u.deployment != d.id);
            let ours = ctx.rt().find(recipe).await.ok().flatten();
            match ours.filter(|d| d.run_id == t.run_id) {
                Some(d) if d.running() && not_routed(&d) => {
                    t.started = Some(d);
                    break;
                }
                Some(d)
                    if d.state == crate::runtime::RunState::Created
                        && Instant::now() < deadline =>
                {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                _ => break,
            }
        }
    }
    let serves = |c: &Deployment| routed.as_ref().is_some_and(|u| u.deployment == c.id);
    if !t.started.as_ref().is_some_and(serves) {
        // A multi-node start cut short leaves Ray's containers on other nodes.
        if let Ok(loaded) = ctx.recipes.get(recipe) {
            let leftovers =
                crate::runtime::group::stop_group_leftovers(ctx.rt(), &loaded.recipe, &t.run_id);
            for note in leftovers.await {
                notes.push(format!("stopped {note}"));
            }
        }
    }
    if let Some(c) = &t.started {
        if serves(c) {
            notes.push(format!("{} serves production already; kept", c.name));
        } else {
            let _ = ctx.rt().stop(c, STOP_GRACE).await;
            notes.push(format!(
                "stopped {} (its logs: `sparkctl logs {}`)",
                c.name, c.name
            ));
        }
    }
    let production = match &door {
        Some(s) => s.production.clone(),
        None => Production::load(ctx.state()).unwrap_or_default(),
    };
    let serving_alive = match &routed {
        Some(u) => crate::frontdoor::alive(ctx.rt(), u).await,
        None => false,
    };
    if serving_alive {
        return notes;
    }
    // Nothing answers behind the front door: production back, as it was.
    if let Some(prod) = t.production_stopped.as_ref().or(production.serving()) {
        say(&format!("restoring production {}", prod.recipe));
        match start_instance(ctx, &prod.recipe, true).await {
            Ok(d) => {
                let mut next = production.clone();
                match next.current.as_mut() {
                    Some(e) if e.recipe == prod.recipe => e.upstream = Some(upstream_of(&d)),
                    _ => {}
                }
                match ctx.door.switch(&next, ctx.door_config.drain).await {
                    Ok(_) => notes.push(format!("{} serves production again", prod.recipe)),
                    Err(e) => notes.push(format!("switching back to {} failed: {e}", prod.recipe)),
                }
            }
            // The front door's watch may have brought it back meanwhile (its port taken).
            Err(e) => match ctx.door.status().await.ok().and_then(|s| s.upstream) {
                Some(u) if crate::frontdoor::alive(ctx.rt(), &u).await => {
                    notes.push(format!("the front door's watch brought {} back", u.recipe))
                }
                _ => notes.push(format!("restoring {} failed too: {e}", prod.recipe)),
            },
        }
    } else if t.held {
        // Held with nothing to go back to: let the front door answer 503 rather than wait.
        let _ = ctx.door.switch(&production, ctx.door_config.drain).await;
    }
    notes
}
