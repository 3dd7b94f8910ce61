//! Starting one recipe: first the plan — every check that can fail cheaply, nothing
//! changed — then the start and the wait until it serves.

use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use super::{port_owner, PortOwner, STOP_GRACE};
use crate::context::Context;
use crate::error::{Error, Interruption, Result, Unfit};
use crate::memory::{self, MemoryPlan};
use crate::recipe::{LoadedRecipe, Recipe, Resolved, Runtime};
use crate::runtime::ready::{self, Fault, Ready, Waiting};
use crate::runtime::{Deployment, Runtimes, StartSpec, Started};

/// Everything decided before a start, shown by `--dry-run`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct StartPlan {
    pub(crate) name: String,
    pub(crate) runtime: Runtime,
    pub(crate) recipe_hash: String,
    /// sha256 over the model's files (cached by size, mtime and inode).
    pub(crate) model_fingerprint: Option<String>,
    /// The job that made the model (`model.produced_by`), checked before the start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::deploy) produced_by: Option<crate::job::lineage::Lineage>,
    /// A container image run without a pin (`--allow-unpinned`).
    pub(in crate::deploy) unpinned: bool,
    /// The image as the recipe names it; `command` runs it by digest.
    pub(in crate::deploy) image_ref: Option<String>,
    /// The pin that digest comes from (without its history): what production's entry keeps,
    /// so that a rollback or a restart starts this very digest again.
    #[serde(skip)]
    pub(crate) pin: Option<crate::lock::Pin>,
    /// Image id the container will run, or the binary.
    pub(crate) artifact: String,
    pub(crate) url: String,
    pub(crate) command: Vec<String>,
    pub(crate) memory: MemoryPlan,
    pub(crate) health_timeout: Duration,
    /// This recipe's exited containers beyond the newest `SPARKCTL_KEEP_EXITED`, removed
    /// just before the start.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    old_containers: Vec<crate::prune::Old>,
    /// A multi-node recipe's group: what runs on each node, the image on each.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) group: Option<crate::node::start::GroupStart>,
    /// The run id the instance carries (its container label, its pid record): a flow sets
    /// its own, so that its way back stops only what this very run started.
    pub(crate) run_id: String,
    /// What to know before it starts (a vLLM venv on SM 12.1); repeated if the start fails.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) warnings: Vec<String>,
    #[serde(skip)]
    resolved: Resolved,
    /// The model's files on this host, to read into the page cache before it starts.
    #[serde(skip)]
    pub(crate) model_files: crate::pagecache::ModelFiles,
}

/// How a start may go: the lock it runs images from, and whether an unpinned one may run.
pub(crate) struct StartOptions<'a> {
    pub(crate) lock: &'a crate::lock::Lock,
    pub(crate) allow_unpinned: bool,
    /// The running instance this start replaces (an upgrade of production's own recipe):
    /// neither its name nor its port is in the way, and the plan stops it (a swap).
    pub(crate) replacing: Option<&'a Deployment>,
}

/// Checks everything that can fail cheaply; changes nothing.
pub(crate) async fn plan_start(
    ctx: &Context,
    loaded: &LoadedRecipe,
    opts: &StartOptions<'_>,
) -> Result<StartPlan> {
    let recipe = &loaded.recipe;
    let mut resolved = recipe.resolve(&ctx.self_exe);
    let (image_ref, pin) = pin_image(ctx, recipe, &mut resolved, opts).await?;
    let unpinned = image_ref.is_some() && pin.is_none();
    let (all, _) = ctx.runtimes.list().await?;
    let deployments: Vec<Deployment> = (all.iter())
        .filter(|d| opts.replacing.is_none_or(|r| r.id != d.id))
        .cloned()
        .collect();
    refuse_running(&deployments, &recipe.name)?;
    let (model_fingerprint, produced_by) = check_model(ctx, loaded).await?;
    let artifact = ctx.runtimes.preflight(&resolved).await?;
    // Every node's engine answers and can get the image, before anything changes.
    let group = match &recipe.nodes {
        Some(_) => Some(crate::node::start::prepare(recipe, &artifact, &ctx.settings).await?),
        None => None,
    };
    if opts.replacing.is_none_or(|r| r.port != resolved.port) {
        refuse_taken_port(&ctx.runtimes, recipe, resolved.port, &deployments).await?;
    }
    let command = match &group {
        Some(g) => g.plan.command_lines(&artifact),
        None => resolved.launch.equivalent_command(),
    };
    let memory = memory_plan(ctx, recipe, &all, opts.replacing).await?;
    let warnings = match crate::nvidia::gpus().await {
        Ok(gpus) => recipe.engine.host_warning(resolved.runtime, &gpus),
        Err(_) => None,
    };
    let old_containers = match ctx.runtimes.docker() {
        Ok(docker) if resolved.runtime == Runtime::Docker => {
            crate::prune::before_start(ctx, docker, &loaded.path, &recipe.name).await
        }
        _ => Vec::new(),
    };
    Ok(StartPlan {
        name: recipe.name.clone(),
        runtime: resolved.runtime,
        recipe_hash: recipe.hash(),
        model_fingerprint,
        produced_by,
        unpinned,
        image_ref,
        pin,
        artifact,
        url: crate::runtime::client_url(&resolved.host, resolved.port),
        command,
        memory,
        health_timeout: resolved.health_timeout.0,
        old_containers,
        group,
        run_id: crate::state::new_run_id(),
        warnings: warnings.into_iter().collect(),
        resolved,
        model_files: crate::pagecache::ModelFiles::of(recipe),
    })
}

impl StartPlan {
    /// The model's fingerprint taken again: a patch changed the model since the plan.
    pub(crate) async fn refingerprint(
        &mut self,
        ctx: &Context,
        loaded: &LoadedRecipe,
    ) -> Result<()> {
        if let Some(model) = &loaded.recipe.model {
            let path = crate::recipe::expand_home(&model.path);
            let print =
                crate::patch::fingerprint_in_background(Path::new(&path), &ctx.state).await?;
            self.model_fingerprint = Some(print.digest);
        }
        Ok(())
    }
}

/// Containers run the digest images.lock holds, never whatever the tag is today: the
/// launch's image becomes that digest. Returns the image as named and the pin it runs
/// (None: unpinned, as `--allow-unpinned` lets it).
async fn pin_image(
    ctx: &Context,
    recipe: &Recipe,
    resolved: &mut Resolved,
    opts: &StartOptions<'_>,
) -> Result<(Option<String>, Option<crate::lock::Pin>)> {
    let crate::recipe::Launch::Docker(c) = &mut resolved.launch else {
        return Ok((None, None));
    };
    let named = c.image.clone();
    let docker = ctx.runtimes.docker()?.client();
    let (run, pinned) = crate::images::run_reference(
        docker,
        &recipe.name,
        &c.image,
        opts.lock,
        opts.allow_unpinned,
    )
    .await?;
    c.image = run;
    let pin = match pinned {
        true => opts.lock.pin(&recipe.name)?.cloned().map(|mut p| {
            p.history.clear();
            p
        }),
        false => None,
    };
    Ok((Some(named), pin))
}

/// One instance per recipe. An instance already running (started by hand, say) is left
/// alone: a flow benchmarks and promotes only an instance it started itself.
fn refuse_running(deployments: &[Deployment], name: &str) -> Result<()> {
    match deployments.iter().find(|d| d.name == name && d.running()) {
        Some(d) => Err(Error::AlreadyRunning(crate::error::Running::Deployment {
            name: d.name.clone(),
            runtime: d.runtime.as_str(),
            id: d.id.clone(),
            url: d.url(),
            run: d.run_id.clone(),
        })),
        None => Ok(()),
    }
}

/// The model dir exists, the job that made it (if any) succeeded and is not stale, and its
/// fingerprint.
async fn check_model(
    ctx: &Context,
    loaded: &LoadedRecipe,
) -> Result<(Option<String>, Option<crate::job::lineage::Lineage>)> {
    let recipe = &loaded.recipe;
    let Some(model) = &recipe.model else {
        return Ok((None, None));
    };
    let path = crate::recipe::expand_home(&model.path);
    if !Path::new(&path).exists() {
        return Err(Error::RecipeCannot {
            recipe: recipe.name.clone(),
            why: crate::error::RecipeProblem::NoModel {
                path,
                file: loaded.path.clone(),
            },
        });
    }
    let mut produced_by = None;
    if let Some(job) = &model.produced_by {
        // A failed or stale job's outputs never serve (before any fingerprinting).
        let docker = ctx.runtimes.docker()?.client();
        produced_by =
            Some(crate::job::lineage::check(docker, &ctx.state, job, Path::new(&path)).await?);
    }
    let fingerprint = crate::patch::fingerprint_in_background(Path::new(&path), &ctx.state)
        .await?
        .digest;
    Ok((Some(fingerprint), produced_by))
}

async fn refuse_taken_port(
    rt: &Runtimes,
    recipe: &Recipe,
    port: u16,
    deployments: &[Deployment],
) -> Result<()> {
    let Some(owner) = port_owner(rt, port, deployments).await else {
        return Ok(());
    };
    Err(Error::PortTaken {
        recipe: recipe.name.clone(),
        port,
        owner: owner.to_string(),
        down: match &owner {
            PortOwner::Deployment { name } => Some(name.clone()),
            _ => None,
        },
    })
}

/// Running jobs hold their declared memory until they end: servers get what is left. A
/// server that does not fit even with every other server stopped is refused here, before
/// anything starts (`--dry-run` too), naming the pool it was planned in and the jobs.
async fn memory_plan(
    ctx: &Context,
    recipe: &Recipe,
    deployments: &[Deployment],
    replacing: Option<&Deployment>,
) -> Result<MemoryPlan> {
    let (memory, jobs) = memory_beside(ctx, recipe, deployments, replacing).await?;
    if memory.fits && !memory.above_floor() {
        return Err(Error::DoesNotFit {
            name: recipe.name.clone(),
            plan: memory.describe(),
            unfit: Unfit::UnderFloor,
        });
    }
    if memory.fits {
        return Ok(memory);
    }
    let held: Vec<String> = jobs.iter().map(|(j, gb)| format!("{j} {gb} GB")).collect();
    let unfit = if jobs.is_empty() || memory.pool != memory::pools::Pool::Unified {
        Unfit::Alone
    } else {
        Unfit::BesideJobs(held)
    };
    Err(Error::DoesNotFit {
        name: recipe.name.clone(),
        plan: memory.describe(),
        unfit,
    })
}

/// The memory plan for `recipe` beside what runs, and the running jobs it was planned
/// beside, before it is judged: whether it fits, and above the floor, is the caller's.
pub(crate) async fn memory_beside(
    ctx: &Context,
    recipe: &Recipe,
    deployments: &[Deployment],
    replacing: Option<&Deployment>,
) -> Result<(MemoryPlan, Vec<(String, f64)>)> {
    let jobs = match crate::job::Runs::of(ctx) {
        Ok(runs) => runs.running_memory().await,
        Err(_) => Vec::new(),
    };
    let jobs_gb: f64 = jobs.iter().map(|(_, gb)| gb).sum();
    let production = crate::production::Book::current_recipes(&ctx.state);
    let mut memory = memory::for_server(
        &ctx.runtimes,
        recipe,
        &ctx.settings,
        jobs_gb,
        deployments,
        &production,
        learned_gb(ctx, recipe),
    )
    .await
    .map_err(|why| Error::RecipeCannot {
        recipe: recipe.name.clone(),
        why: crate::error::RecipeProblem::Gpus {
            why: why.to_string(),
        },
    })?;
    if let Some(r) = replacing {
        memory.stop_also(&r.name);
    }
    Ok((memory, jobs))
}

/// What `recipe` held at its last starts with its image pinned as images.lock says now, if
/// it was measured (`memory::learned`; the newest figure, whatever the model's fingerprint,
/// as a plan does not fingerprint the model).
pub(crate) fn learned_gb(ctx: &Context, recipe: &Recipe) -> Option<f64> {
    let digest = crate::lock::Lock::load(&ctx.lock_path)
        .ok()
        .and_then(|l| l.pin(&recipe.name).ok().flatten().map(|p| p.digest.clone()));
    let key = memory::learned::Key {
        recipe: recipe.name.clone(),
        recipe_hash: recipe.hash(),
        digest,
        fingerprint: None,
    };
    memory::learned::of(&ctx.state, &key).map(|f| f.gb)
}

/// What the start of `plan` took and held once ready, kept for the next plans and starts
/// (`memory::learned`, `starts`). Written `later`: a start on demand's waiting requests go
/// to the server without these fsyncs first.
fn keep(
    rt: &Runtimes,
    plan: &StartPlan,
    deployment: &Deployment,
    ready: &Ready,
    observed: &memory::MemoryObserved,
) {
    let state = rt.process.state().clone();
    let (name, id, phases) = (plan.name.clone(), deployment.id.clone(), ready.phases);
    let held = observed.best.as_ref().map(|best| {
        let key = memory::learned::Key {
            recipe: plan.name.clone(),
            recipe_hash: plan.recipe_hash.clone(),
            digest: plan.pin.as_ref().map(|p| p.digest.clone()),
            fingerprint: plan.model_fingerprint.clone(),
        };
        (key, best.bytes as f64 / 1e9, best.what.clone())
    });
    crate::state::later(move || {
        if let Some((key, gb, what)) = held {
            if let Err(e) = memory::learned::record(&state, key, gb, &what) {
                tracing::warn!("{name}: what it holds was not kept: {e}");
            }
        }
        if let Err(e) = crate::starts::record(&state, &name, &id, phases) {
            tracing::warn!("{name}: what its start took was not kept: {e}");
        }
    });
}

/// A started, ready deployment.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct StartReport {
    pub(crate) deployment: Deployment,
    pub(crate) ready_after_ms: f64,
    /// Each step of the start, from the start asked to the first token.
    pub(crate) phases: crate::runtime::ready::Phases,
    /// Unix time in microseconds when readiness was noticed.
    ready_noticed_at_us: u128,
    pub(crate) model: String,
    /// What it holds once ready, measured, against its declared `memory_gb`.
    pub(crate) memory_observed: memory::MemoryObserved,
    /// What the caller should tell the user (e.g. it holds more than it declared).
    pub(crate) warnings: Vec<String>,
}

/// Starts a planned recipe and waits until it serves. On failure the server is stopped
/// (container and logs kept) and the error explains what happened.
pub(crate) async fn start(
    rt: &Runtimes,
    plan: &StartPlan,
    timeout: Option<Duration>,
    progress: impl FnMut(&Waiting),
) -> Result<StartReport> {
    refuse_unfit(plan)?;
    let spec = StartSpec {
        resolved: plan.resolved.clone(),
        recipe_hash: plan.recipe_hash.clone(),
        run_id: plan.run_id.clone(),
        model_fingerprint: plan.model_fingerprint.clone(),
        unpinned: plan.unpinned,
        image_ref: plan.image_ref.clone(),
    };
    if let (Ok(docker), false) = (rt.docker(), plan.old_containers.is_empty()) {
        for (old, why) in crate::prune::apply(docker, &plan.old_containers).await {
            tracing::warn!(
                "old container {} of {} kept: {why}",
                crate::units::short_id(&old.id),
                old.recipe
            );
        }
    }
    let before = memory::before_start();
    let asked = std::time::Instant::now();
    let mut started = launch(rt, plan, &spec).await?;
    let launched = asked.elapsed();
    let engine = spec.resolved.engine;
    let timeout = timeout.unwrap_or(plan.health_timeout);
    let outcome = tokio::select! {
        r = ready::wait_ready(&mut started, engine, timeout, progress) => Some(r),
        _ = tokio::signal::ctrl_c() => None,
    };
    let deployment = started.deployment;
    match outcome {
        Some(Ok(mut ready)) => {
            ready.phases = ready.phases.after_launch(launched);
            Ok(report(rt, plan, deployment, ready, before).await)
        }
        Some(Err(fault)) => {
            // A fatal line or a timeout leaves it running but useless: stop it, keep its logs.
            // A group's API server stops the rest of the group on every node with it.
            let _ = rt.stop(&deployment, STOP_GRACE).await;
            let why = explain(rt, plan, &spec, &fault).await;
            let notes: String = plan
                .warnings
                .iter()
                .map(|w| format!("\n  note: {w}"))
                .collect();
            Err(Error::Failed(format!(
                "{why}{notes}\n  help: full output: `sparkctl logs {}`",
                plan.name
            )))
        }
        None => {
            let stopped = rt.stop(&deployment, STOP_GRACE).await;
            Err(Error::Interrupted(Interruption::BeforeReady {
                name: plan.name.clone(),
                stop_failed: stopped.err().map(|e| e.to_string()),
            }))
        }
    }
}

/// The memory plan said what must stop first; a start never stops anything itself.
fn refuse_unfit(plan: &StartPlan) -> Result<()> {
    if plan.memory.fits && plan.memory.must_stop.is_empty() {
        return Ok(());
    }
    Err(Error::DoesNotFit {
        name: plan.name.clone(),
        plan: plan.memory.describe(),
        unfit: if plan.memory.fits {
            Unfit::MustStop(plan.memory.must_stop.clone())
        } else {
            Unfit::Alone
        },
    })
}

async fn launch(rt: &Runtimes, plan: &StartPlan, spec: &StartSpec) -> Result<Started> {
    match &plan.group {
        Some(g) => {
            let host_env = crate::runtime::docker::host_env(&spec.resolved)?;
            let state = rt.process.state();
            crate::node::start::start(g, spec, &plan.artifact, state, host_env).await
        }
        None => rt.start(spec, &plan.artifact).await,
    }
}

async fn report(
    rt: &Runtimes,
    plan: &StartPlan,
    deployment: Deployment,
    ready: Ready,
    before: memory::Before,
) -> StartReport {
    // Measured after readiness is noticed, so the readiness figures are unchanged by it.
    let measuring = std::time::Instant::now();
    let memory_observed = memory::observe(rt, &deployment, before).await;
    tracing::debug!("memory observed in {:?}", measuring.elapsed());
    keep(rt, plan, &deployment, &ready, &memory_observed);
    let mut warnings = plan.warnings.clone();
    warnings.extend(memory_observed.warnings(&plan.name));
    StartReport {
        deployment,
        ready_after_ms: ready.after.as_secs_f64() * 1e3,
        phases: ready.phases,
        ready_noticed_at_us: ready.noticed_at.as_micros(),
        model: ready.model,
        memory_observed,
        warnings,
    }
}

/// Why the start failed; a group's explanation shows every node's last output.
async fn explain(rt: &Runtimes, plan: &StartPlan, spec: &StartSpec, fault: &Fault) -> String {
    match &plan.group {
        Some(g) => {
            let state_id = rt.process.state().id();
            crate::node::start::explain_fault(g, fault, &plan.name, &state_id, &spec.run_id).await
        }
        None => fault.explain(&plan.name),
    }
}
