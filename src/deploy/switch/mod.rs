//! What every change of production shares: its context (`SwitchContext`), the signals that interrupt it, the
//! one plan and execution of a switch (`plan`: blue/green or swap), and the one way back
//! when it fails (`restore`).

mod plan;
mod restore;

use std::time::Instant;

pub(crate) use plan::{make_room, retire, Hold, Mode, Plan};
pub(crate) use restore::restore;

use super::Settings;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::frontdoor::{self, Launch, Remote};
use crate::history::{Phase, PhaseName, RunRecord};
use crate::lock::Lock;
use crate::production::{Production, Upstream};
use crate::recipe::RecipeSet;
use crate::runtime::{Deployment, Runtimes};
use crate::state::StateDir;

/// What a flow that switches production needs (`up`, `rollback`, bisect, upgrade):
/// the commands' shared context, the recipes, the image lock as it was when the flow began
/// (every start in it runs the same digests) and the front door.
pub(crate) struct SwitchContext<'a> {
    pub(crate) shared: &'a Context,
    pub(crate) recipes: &'a RecipeSet,
    pub(crate) lock: Lock,
    /// The front door, about the model the flow changes (`crate::models`).
    pub(crate) door: Remote,
    /// That model (`""`: the unnamed one).
    model: String,
    pub(crate) door_config: frontdoor::Config,
    /// A dry run: the front door is asked, never started.
    dry_run: bool,
}

impl<'a> SwitchContext<'a> {
    /// Reaches the front door, starting it when it is not running (a dry run only asks it,
    /// so it starts nothing and plans even while another server holds the production
    /// port), and reads the lock. `needs` are the recipes the flow names: each must load
    /// first, so a name that is no recipe (or a broken one) starts nothing, not even the
    /// front door. The flow is about the model of the first (the only one, or the one
    /// `for_model` names, when none): it must not make two productions answer to one name.
    /// With one model served, the first takes its place whatever model it serves, unless
    /// `add` (or a `serve` section) asks for another model beside it (`models::landing`).
    pub(crate) async fn open(
        shared: &'a Context,
        recipes: &'a RecipeSet,
        needs: &[&str],
        dry_run: bool,
        add: bool,
    ) -> Result<SwitchContext<'a>> {
        for name in needs {
            recipes.get(name)?;
        }
        let book = crate::models::book(&shared.state, recipes);
        let model = match needs.first() {
            Some(name) => {
                let loaded = recipes.get(name)?;
                let lane = crate::models::landing(&book, recipes, loaded, add);
                let serves = crate::models::of(&loaded.recipe);
                let next = crate::models::with_production(&book, &lane, &serves, name);
                crate::models::check(&next, recipes)?;
                lane
            }
            None => book.model_id().to_string(),
        };
        let door_config =
            frontdoor::Config::new(&shared.settings, shared.settings.production_port)?;
        let door = if dry_run {
            frontdoor::answering(&shared.state, &door_config)
                .await?
                .unwrap_or_else(|| Remote::new(frontdoor::control_socket(&shared.state)))
        } else {
            let launch = Launch::new(&shared.self_exe, &recipes.dir, &shared.lock_path);
            frontdoor::ensure(&shared.state, &door_config, &launch).await?
        };
        Ok(SwitchContext {
            shared,
            recipes,
            lock: Lock::load(&shared.lock_path)?,
            door: door.for_model(&model),
            model,
            door_config,
            dry_run,
        })
    }

    /// The same flow about `model`'s production (`rollback --model`).
    pub(crate) fn for_model(mut self, model: &str) -> SwitchContext<'a> {
        self.door = self.door.for_model(model);
        self.model = model.to_string();
        self
    }

    /// The model's production as the front door holds it; for a dry run with no front door
    /// running, as the front door would start with it (production.json).
    pub(crate) async fn production(&self) -> Result<Production> {
        match self.door.status().await {
            Ok(s) => Ok(s.production),
            Err(_) if self.dry_run && frontdoor::launch::running(self.state()).is_none() => {
                self.production_file()
            }
            Err(e) => Err(e),
        }
    }

    /// The model's production as production.json holds it.
    pub(crate) fn production_file(&self) -> Result<Production> {
        let mut file = crate::production::Book::load(self.state())?;
        crate::models::settle(&mut file, self.recipes);
        Ok(file.lane(&self.model))
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
}

/// While a rollout judges the flow's model (its `up` lent the state lock for the window),
/// no other flow changes that model's production.
pub(crate) async fn refuse_during_rollout(ctx: &SwitchContext<'_>) -> Result<()> {
    let Ok(Some(r)) = ctx.door.rollout().await else {
        return Ok(());
    };
    let model = ctx.door.status().await.ok();
    let name = model
        .and_then(|s| crate::models::answers_to(&ctx.model, &s.production))
        .unwrap_or_else(|| ctx.model.clone());
    Err(Error::ModelInRollout {
        model: name,
        mode: r.spec.mode.as_str(),
        candidate: r.candidate.recipe,
    })
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
pub(crate) async fn serving_now(ctx: &SwitchContext<'_>) -> Option<String> {
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
        Error::Refused(crate::error::Refusal::RecordsUnwritable {
            root: state.root().to_path_buf(),
            why,
        })
    };
    let mut first = record.clone();
    first.outcome = crate::history::Outcome::Interrupted;
    first.error = Some(format!(
        "in progress (pid {}); a run that stays so ended without recording its outcome",
        std::process::id()
    ));
    let path = first.save(state).map_err(|e| cannot(e.to_string()))?;
    match path.parent().and_then(free_bytes) {
        Some(free) if free < RUN_FILES_ROOM => {
            Err(Error::Refused(crate::error::Refusal::NoRoomForRecords {
                root: state.root().to_path_buf(),
                free: free >> 20,
                need: RUN_FILES_ROOM >> 20,
            }))
        }
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

/// The front door owns the production port: a backend needs its own.
pub(crate) fn refuse_production_port(settings: &Settings, name: &str, port: u16) -> Result<()> {
    if port == settings.production_port {
        return Err(Error::RecipeCannot {
            recipe: name.to_string(),
            why: crate::error::RecipeProblem::ProductionPort { port },
        });
    }
    Ok(())
}

/// Records a flow that failed or was interrupted (the outcome it reached — rejected,
/// inconclusive — is kept) and says in one message what failed, what was put back and
/// what serves now. A record that cannot be written is said, not hidden.
pub(crate) async fn failed(
    ctx: &SwitchContext<'_>,
    record: &mut RunRecord,
    e: Error,
    notes: &[String],
    what: &str,
) -> Error {
    use crate::history::Outcome;
    let interrupted = e.is_interrupted();
    record.outcome = match record.outcome {
        _ if interrupted => Outcome::Interrupted,
        o @ (Outcome::Rejected | Outcome::Inconclusive) => o,
        _ => Outcome::Failed,
    };
    record.error = Some(e.to_string());
    record.serving = serving_now(ctx).await;
    record.finished_at = crate::units::now_utc();
    let saved = record.save(ctx.state());
    Error::RunFailed(Box::new(crate::error::RunFailure {
        what: what.to_string(),
        outcome: record.outcome.to_string(),
        cause: e,
        notes: notes.join("; "),
        port: ctx.settings().production_port,
        serving: record.serving.clone().unwrap_or_else(|| "nothing".into()),
        record: saved.map_err(|e| e.to_string()),
    }))
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
    /// Production put to sleep to make room instead (`serve.sleep: auto`), at this level:
    /// what served, to be woken again.
    pub(crate) production_asleep: Option<(Upstream, u8)>,
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
