//! `sparkctl adopt NAME`: the production port passes from a server sparkctl did not start
//! (the one `import` read NAME from) to the front door, serving NAME, with the shortest gap.
//!
//! Blue/green when memory allows both: NAME starts on its own port and serves first; then
//! the front door takes the port and the foreign server stops. Otherwise a swap: the front
//! door takes the port holding requests, the foreign server stops, NAME starts, the door
//! sends the held requests to it. The port itself never closes when the foreign server is a
//! process this user may inspect: the front door shares its very listening socket
//! (pidfd_getfd), so connections queue instead of being refused; else the door binds the
//! moment the port is free. The foreign server is touched only after a yes, and is started
//! again as it was when anything fails.

mod door;
mod foreign;

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::context::Context;
pub(crate) use crate::deploy::switch::Mode as Way;
use crate::deploy::switch::{make_room, Hold, Plan};
use crate::deploy::{start, StartOptions, StartPlan, STOP_GRACE};
use crate::error::{Error, Result, Undoing};
use crate::frontdoor::{self, Launch, Remote};
use crate::history::{Command, Outcome, RunRecord};
use crate::import::record;
use crate::production::{Entry, Production, Upstream};
use crate::progress::Progress;
use crate::recipe::RecipeSet;
use crate::runtime::Deployment;
pub(crate) use foreign::Foreign;

pub(crate) struct Options<'a> {
    pub(crate) dry_run: bool,
    pub(crate) allow_unpinned: bool,
    /// Asked before the foreign server is stopped; false refuses.
    pub(crate) confirm: &'a dyn Fn(&str) -> bool,
    pub(crate) progress: &'a dyn Progress,
}

/// Whether the port closed at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub(crate) enum Handover {
    /// The door shared the foreign server's socket: the port never closed.
    SharedSocket,
    /// The door bound the port once free, this long after the foreign server was told to stop.
    Rebound { after_ms: u64 },
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Report {
    pub(crate) recipe: String,
    pub(crate) port: u16,
    pub(crate) way: Way,
    pub(crate) handover: Handover,
    pub(crate) deployment: String,
    pub(crate) foreign: String,
    /// Planned only (`--dry-run`).
    pub(crate) planned: bool,
}

/// What the way back must undo.
#[derive(Default)]
struct Touched {
    started: Option<Deployment>,
    door: bool,
    foreign_stopped: bool,
    production_before: Option<crate::production::Book>,
}

struct Flow<'a> {
    ctx: &'a Context,
    launch: Launch,
    config: frontdoor::Config,
    foreign: Foreign,
    docker: Option<bollard::Docker>,
    name: String,
    port: u16,
    /// The address the foreign server listened on: the door serves the same.
    host: String,
    touched: Touched,
}

pub(crate) async fn adopt(
    ctx: &Context,
    recipes: &RecipeSet,
    name: &str,
    opts: &Options<'_>,
) -> Result<Report> {
    let _state_lock = ctx.state.lock(&format!("adopt {name}"))?;
    let loaded = recipes.get(name)?;
    let imported = record::load(&ctx.state, name)?.ok_or_else(|| Error::RecipeCannot {
        recipe: name.to_string(),
        why: crate::error::RecipeProblem::NotImported,
    })?;
    let port = imported
        .origin()
        .port()
        .ok_or_else(|| Error::RecipeCannot {
            recipe: name.to_string(),
            why: crate::error::RecipeProblem::NoImportedPort,
        })?;
    if port != ctx.settings.production_port {
        return Err(Error::RecipeCannot {
            recipe: name.to_string(),
            why: crate::error::RecipeProblem::NotOnProductionPort {
                origin: imported.origin().describe(),
                port,
                production_port: ctx.settings.production_port,
            },
        });
    }
    crate::deploy::switch::refuse_production_port(&ctx.settings, name, loaded.recipe.server.port)?;
    if let Some(r) = frontdoor::launch::running(&ctx.state) {
        return Err(frontdoor::launch::already_running(&r, true));
    }
    let docker = ctx.runtimes.docker().ok().map(|d| d.client().clone());
    let foreign = Foreign::find(imported.origin(), docker.as_ref()).await?;
    let lock = crate::lock::Lock::load(&ctx.lock_path)?;
    let start_opts = StartOptions {
        lock: &lock,
        allow_unpinned: opts.allow_unpinned,
        replacing: None,
    };
    // The one switch plan, with the foreign server as production: it is the same server, so
    // it counts what its recipe declares. Blue/green: NAME serves before the foreign server
    // stops; swap: the foreign server stops first and the door holds requests until NAME
    // serves.
    let mut plan = Plan::new(ctx, loaded, &start_opts).await?;
    plan.beside_foreign(name, loaded.recipe.server.memory_gb);
    let way = plan.mode;
    let host = crate::host::listener_on(port).map_or_else(|| "127.0.0.1".into(), |l| l.address);
    let config = frontdoor::Config::new(&ctx.settings, port)?;
    door::refuse_open(&config, &imported, &foreign.describe(), &host)?;
    opts.progress
        .step(&describe(name, &foreign, port, way, &plan.start));
    let mut report = Report {
        recipe: name.to_string(),
        port,
        way,
        handover: Handover::SharedSocket,
        deployment: String::new(),
        foreign: foreign.describe(),
        planned: true,
    };
    if opts.dry_run {
        return Ok(report);
    }
    if !(opts.confirm)(&format!(
        "stop {} and serve port {port} with {name}?",
        foreign.describe()
    )) {
        return Err(Error::NotConfirmed(crate::error::Unconfirmed::Adopt {
            foreign: foreign.describe(),
        }));
    }
    let mut flow = Flow {
        ctx,
        launch: Launch::new(&ctx.self_exe, &recipes.dir, &ctx.lock_path),
        config,
        foreign,
        docker,
        name: name.to_string(),
        port,
        host,
        touched: Touched::default(),
    };
    let mut run = RunRecord::new(Command::Adopt, name);
    run.plan = serde_json::to_value(&plan.start).ok();
    // Other servers the plan names stop first (the foreign one is not sparkctl's: its
    // port's hand-over stops it).
    let outcome = match make_room(&ctx.runtimes, &mut plan, Hold::Held, None, opts.progress).await {
        Err(e) => Err(e),
        Ok(()) if way == Way::BlueGreen => flow.blue_green(&plan.start, opts.progress).await,
        Ok(()) => flow.swap(&plan.start, opts.progress).await,
    };
    let (handover, d) = flow.finish(outcome, &mut run).await?;
    report.handover = handover;
    report.deployment = d.id;
    report.planned = false;
    Ok(report)
}

fn describe(name: &str, foreign: &Foreign, port: u16, way: Way, plan: &StartPlan) -> String {
    let how = match way {
        Way::BlueGreen => format!(
            "blue/green: {name} starts on {} and serves first, then the front door takes port \
             {port} and {} stops",
            plan.url,
            foreign.describe()
        ),
        Way::Swap => format!(
            "swap ({}): the front door takes port {port} holding requests, {} stops, then {name} \
             starts on {} and the held requests go to it",
            plan.memory.describe(),
            foreign.describe(),
            plan.url
        ),
    };
    format!("adopt: {how}")
}

impl Flow<'_> {
    /// The run record of the hand-over, written whatever came of it; after a failure,
    /// everything put back and said.
    async fn finish(
        &mut self,
        outcome: Result<(Handover, Deployment)>,
        run: &mut RunRecord,
    ) -> Result<(Handover, Deployment)> {
        let (state, name) = (&self.ctx.state, self.name.clone());
        run.finished_at = crate::units::now_utc();
        match outcome {
            Ok((handover, d)) => {
                record::remove(state, &name);
                run.outcome = Outcome::Promoted;
                run.deployment = Some(d.id.clone());
                run.serving = Some(format!("{name} ({}, {})", d.id, d.url()));
                run.save(state)?;
                Ok((handover, d))
            }
            Err(e) => {
                let put_back = self.put_back().await;
                let mut e = Error::Undone {
                    what: Undoing::Adopt {
                        name: name.to_string(),
                        put_back,
                        unrecorded: None,
                    },
                    cause: Box::new(e),
                };
                run.error = Some(e.to_string());
                // The failure is what the user must hear; a record that cannot be written
                // is a note on it.
                if let (
                    Err(w),
                    Error::Undone {
                        what: Undoing::Adopt { unrecorded, .. },
                        ..
                    },
                ) = (run.save(state), &mut e)
                {
                    *unrecorded = Some(w.to_string());
                }
                Err(e)
            }
        }
    }

    async fn start_instance(&mut self, plan: &StartPlan) -> Result<Deployment> {
        let d = start(&self.ctx.runtimes, plan, None, |_| {})
            .await?
            .deployment;
        self.touched.started = Some(d.clone());
        Ok(d)
    }

    /// production.json before the door starts: NAME is production, at `upstream`.
    fn write_production(&mut self, upstream: Upstream) -> Result<Production> {
        let before = crate::production::Book::load(&self.ctx.state).unwrap_or_default();
        self.touched.production_before = Some(before.clone());
        let mut next = before.top();
        next.promote(Entry {
            recipe: self.name.clone(),
            since: crate::units::now_utc(),
            run_id: None,
            bench: None,
            upstream: Some(upstream),
            // A server sparkctl did not start: no pin of its image is known.
            image: None,
            pin_move: None,
        });
        let book = before.with_lane(before.model_id(), next.clone());
        crate::state::write_json(&self.ctx.state.production_file(), &book)?;
        Ok(book.lane(book.model_id()))
    }

    /// The door on the port: sharing the foreign socket (then the foreign server stops once
    /// it has answered what it took), or bound the moment the stopped server frees it.
    /// `hold`: this command holds the door's requests from its first moment (a swap), so
    /// the door's watch leaves production's start to it.
    async fn take_port(
        &mut self,
        progress: &dyn Progress,
        hold: bool,
    ) -> Result<(Remote, Handover)> {
        if let Some(socket) = self.foreign.share_socket(self.port) {
            let remote = self.open_door(socket, hold).await?;
            progress.step(&format!(
                "the front door shares port {}'s socket; {} finishes what it took, then stops",
                self.port,
                self.foreign.describe()
            ));
            self.touched.foreign_stopped = true;
            let cut = self.foreign.retire_shared(self.port, STOP_GRACE).await;
            if cut > 0 {
                progress.step(&format!(
                    "{} still held {cut} connection(s) after {} s; they were cut",
                    self.foreign.describe(),
                    STOP_GRACE.as_secs()
                ));
            }
            return Ok((remote, Handover::SharedSocket));
        }
        progress.step(&format!(
            "stopping {}; the front door binds port {} the moment it is free",
            self.foreign.describe(),
            self.port
        ));
        let began = Instant::now();
        self.touched.foreign_stopped = true;
        let (stopped, bound) = tokio::join!(
            self.foreign.stop(self.docker.as_ref(), STOP_GRACE),
            door::bind_when_free(&self.host, self.port, STOP_GRACE + Duration::from_secs(20))
        );
        stopped?;
        let socket = bound?;
        let after_ms = began.elapsed().as_millis() as u64;
        let remote = self.open_door(socket, hold).await?;
        Ok((remote, Handover::Rebound { after_ms }))
    }

    /// The front door started on the production port's socket; holding at once for a swap.
    async fn open_door(&mut self, socket: std::os::fd::OwnedFd, hold: bool) -> Result<Remote> {
        let remote = door::start_on(
            &self.ctx.state,
            &self.config,
            &self.launch,
            socket,
            &self.host,
        )
        .await?;
        self.touched.door = true;
        if hold {
            remote.hold(Duration::ZERO).await?;
        }
        Ok(remote)
    }

    async fn blue_green(
        &mut self,
        plan: &StartPlan,
        progress: &dyn Progress,
    ) -> Result<(Handover, Deployment)> {
        progress.step(&format!("starting {}", self.name));
        let d = self.start_instance(plan).await?;
        self.write_production(crate::deploy::switch::upstream_of(&d))?;
        let (remote, handover) = self.take_port(progress, false).await?;
        let serving = remote.status().await?.upstream;
        if serving.as_ref().is_none_or(|u| u.deployment != d.id) {
            return Err(Error::DoorFailed(crate::error::DoorProblem::NotRouting {
                name: self.name.clone(),
                id: d.id.clone(),
            }));
        }
        Ok((handover, d))
    }

    async fn swap(
        &mut self,
        plan: &StartPlan,
        progress: &dyn Progress,
    ) -> Result<(Handover, Deployment)> {
        // Not running yet: the door starts holding, and this command holds it.
        let placeholder = Upstream {
            recipe: self.name.clone(),
            deployment: format!("adopting-{}", std::process::id()),
            url: plan.url.clone(),
        };
        let mut production = self.write_production(placeholder)?;
        let (remote, handover) = self.take_port(progress, true).await?;
        progress.step(&format!(
            "starting {} (requests wait at the front door)",
            self.name
        ));
        let d = self.start_instance(plan).await?;
        if let Some(e) = production.current.as_mut() {
            e.upstream = Some(crate::deploy::switch::upstream_of(&d));
        }
        remote.switch(&production, self.config.drain).await?;
        Ok((handover, d))
    }

    /// After a failure: the door stops, production.json is as it was, what this started
    /// stops, the foreign server runs again.
    async fn put_back(&mut self) -> Vec<String> {
        let mut notes = Vec::new();
        let t = std::mem::take(&mut self.touched);
        if t.door {
            match frontdoor::launch::stop(&self.ctx.state, Duration::from_secs(5)).await {
                Ok(_) => notes.push("stopped the front door".into()),
                Err(e) => notes.push(format!("stopping the front door failed: {e}")),
            }
        }
        if let Some(before) = t.production_before {
            if crate::state::write_json(&self.ctx.state.production_file(), &before).is_ok() {
                notes.push("production.json as it was".into());
            }
        }
        if let Some(d) = t.started {
            let _ = self.ctx.runtimes.stop(&d, STOP_GRACE).await;
            notes.push(format!(
                "stopped {} (its logs: `sparkctl logs {}`)",
                self.name, self.name
            ));
        }
        if t.foreign_stopped {
            let log = self
                .ctx
                .state
                .root()
                .join(format!("adopt-{}-restored.log", self.name));
            match self.foreign.restore(self.docker.as_ref(), &log).await {
                Ok(what) => notes.push(what),
                Err(e) => notes.push(format!(
                    "starting {} again failed: {e}",
                    self.foreign.describe()
                )),
            }
        }
        notes
    }
}
