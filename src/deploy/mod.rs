//! Deployments: starting a recipe (checks first, then start, then ready), stopping one,
//! and who holds a port. The gated `up`/`rollback` flow builds on these.

pub mod plan;
pub mod rollback;
pub mod switch;
pub mod up;
pub mod watch;

use std::path::Path;
use std::time::Duration;

use serde::Serialize;

pub use crate::context::{Context, Settings};
use crate::error::{Error, Result};
use crate::memory;
pub use crate::memory::MemoryPlan;
use crate::recipe::{LoadedRecipe, Resolved, Runtime};
use crate::runtime::ready::{self, Ready, Waiting};
pub use crate::runtime::STOP_GRACE;
use crate::runtime::{Deployment, Runtimes, StartSpec};
pub use plan::PortOwner;

/// What a deployment is to the front door.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// The front door routes production to it.
    Production,
    /// A replaced production kept running for an instant rollback.
    Warm,
    Candidate,
    None,
}

impl Role {
    /// `d`'s role, as the front door (when it runs) says.
    pub fn of(d: &Deployment, door: Option<&crate::frontdoor::DoorStatus>) -> Role {
        let routed = door
            .and_then(|s| s.upstream.as_ref())
            .is_some_and(|u| u.deployment == d.id);
        let warm = door.is_some_and(|s| {
            s.production
                .warm
                .iter()
                .any(|w| w.upstream.deployment == d.id)
        });
        match (routed, d.running(), warm) {
            (true, _, _) => Role::Production,
            (false, true, true) => Role::Warm,
            (false, true, false) => Role::Candidate,
            (false, false, _) => Role::None,
        }
    }
}

/// Everything decided before a start, shown by `--dry-run`.
#[derive(Debug, Clone, Serialize)]
pub struct StartPlan {
    pub name: String,
    pub runtime: Runtime,
    pub recipe_hash: String,
    /// sha256 over the model's files (cached by size, mtime and inode).
    pub model_fingerprint: Option<String>,
    /// The job that made the model (`model.produced_by`), checked before the start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub produced_by: Option<crate::job::lineage::Lineage>,
    /// A container image run without a pin (`--allow-unpinned`).
    pub unpinned: bool,
    /// The image as the recipe names it; `command` runs it by digest.
    pub image_ref: Option<String>,
    /// Image id the container will run, or the binary.
    pub artifact: String,
    pub url: String,
    pub command: Vec<String>,
    pub memory: MemoryPlan,
    pub health_timeout: Duration,
    /// This recipe's exited containers beyond the newest `SPARKCTL_KEEP_EXITED`, removed
    /// just before the start.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub old_containers: Vec<crate::prune::Old>,
    #[serde(skip)]
    resolved: Resolved,
}

/// Who listens on `port` now, if anyone.
pub async fn port_owner(rt: &Runtimes, port: u16, known: &[Deployment]) -> Option<PortOwner> {
    if let Some(d) = known.iter().find(|d| d.running() && d.port == port) {
        return Some(PortOwner::Deployment {
            name: d.name.clone(),
        });
    }
    let listener = crate::host::listener_on(port)?;
    // A published container port is held by docker-proxy: name the container instead.
    if let Ok(docker) = rt.docker() {
        if let Ok(Some((container, _))) = docker.publisher_of(port).await {
            return Some(PortOwner::Container { name: container });
        }
    }
    Some(PortOwner::Process { listener })
}

/// Checks everything that can fail cheaply; changes nothing.
/// How a start may go: the lock it runs images from, and whether an unpinned one may run.
pub struct StartOptions<'a> {
    pub lock: &'a crate::lock::Lock,
    pub allow_unpinned: bool,
    pub self_exe: &'a str,
}

pub async fn plan_start(
    rt: &Runtimes,
    state: &crate::state::StateDir,
    loaded: &LoadedRecipe,
    settings: &Settings,
    opts: &StartOptions<'_>,
) -> Result<StartPlan> {
    let recipe = &loaded.recipe;
    let mut resolved = recipe.resolve(opts.self_exe);
    // Containers run the digest images.lock holds, never whatever the tag is today.
    let mut unpinned = false;
    let mut image_ref = None;
    if let crate::recipe::Launch::Docker { image, .. } = &mut resolved.launch {
        image_ref = Some(image.clone());
        let docker = rt.docker()?.client();
        let (run, pinned) = crate::images::run_reference(
            docker,
            &recipe.name,
            image,
            opts.lock,
            opts.allow_unpinned,
        )
        .await?;
        *image = run;
        unpinned = !pinned;
    }
    let (deployments, _) = rt.list().await?;
    if let Some(d) = deployments
        .iter()
        .find(|d| d.name == recipe.name && d.running())
    {
        return Err(Error::Usage(format!(
            "{} is already running ({} {}, {}); `sparkctl down {}` first",
            d.name,
            d.runtime.as_str(),
            crate::units::short_id(&d.id),
            d.url(),
            d.name
        )));
    }
    let mut model_fingerprint = None;
    let mut produced_by = None;
    if let Some(model) = &recipe.model {
        let path = crate::recipe::expand_home(&model.path);
        if !Path::new(&path).exists() {
            return Err(Error::Usage(format!(
                "{}: model.path {path} does not exist ({}); download the model or fix the path",
                recipe.name,
                loaded.path.display()
            )));
        }
        if let Some(job) = &model.produced_by {
            // A failed or stale job's outputs never serve (before any fingerprinting).
            let docker = rt.docker()?.client();
            produced_by =
                Some(crate::job::lineage::check(docker, state, job, Path::new(&path)).await?);
        }
        model_fingerprint = Some(
            crate::patch::fingerprint_in_background(Path::new(&path), state)
                .await?
                .digest,
        );
    }
    let artifact = rt.preflight(&resolved).await?;
    if let Some(owner) = port_owner(rt, resolved.port, &deployments).await {
        let fix = match &owner {
            PortOwner::Deployment { name } => format!("`sparkctl down {name}`"),
            _ => "stop it, or give the recipe another server.port".to_string(),
        };
        return Err(Error::Failed(format!(
            "{}: port {} is taken by {owner}; {fix}",
            recipe.name, resolved.port
        )));
    }
    // Running jobs hold their declared memory until they end: servers get what is left.
    let jobs = match rt.docker() {
        Ok(docker) => crate::job::running_memory(docker.client(), state).await,
        Err(_) => Vec::new(),
    };
    let jobs_gb: f64 = jobs.iter().map(|(_, gb)| gb).sum();
    let memory = MemoryPlan::new(
        settings.memory_budget_gb - jobs_gb,
        resolved.memory_gb,
        &deployments,
        settings.production_port,
    );
    if !memory.fits && !jobs.is_empty() {
        let held: Vec<String> = jobs.iter().map(|(j, gb)| format!("{j} {gb} GB")).collect();
        return Err(Error::Failed(format!(
            "{} does not fit in memory while job(s) {} run: {}; wait for them (`sparkctl jobs`) \
             or `sparkctl stop JOB`",
            recipe.name,
            held.join(", "),
            memory.describe()
        )));
    }
    let old_containers = match rt.docker() {
        Ok(docker) if resolved.runtime == Runtime::Docker => {
            crate::prune::before_start(docker, state, &loaded.path, &recipe.name).await
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
        artifact,
        url: crate::runtime::client_url(&resolved.host, resolved.port),
        command: resolved.launch.equivalent_command(),
        memory,
        health_timeout: resolved.health_timeout.0,
        old_containers,
        resolved,
    })
}

/// A started, ready deployment.
#[derive(Debug, Clone, Serialize)]
pub struct StartReport {
    pub deployment: Deployment,
    pub ready_after_ms: f64,
    /// Unix time in microseconds when readiness was noticed.
    pub ready_noticed_at_us: u128,
    pub model: String,
    /// What it holds once ready, measured, against its declared `memory_gb`.
    pub memory_observed: memory::MemoryObserved,
    /// What the caller should tell the user (e.g. it holds more than it declared).
    pub warnings: Vec<String>,
}

/// Starts a planned recipe and waits until it serves. On failure the server is stopped
/// (container and logs kept) and the error explains what happened.
pub async fn start(
    rt: &Runtimes,
    plan: &StartPlan,
    timeout: Option<Duration>,
    progress: impl FnMut(&Waiting),
) -> Result<StartReport> {
    if !plan.memory.fits || !plan.memory.must_stop.is_empty() {
        let stop: Vec<String> = plan
            .memory
            .must_stop
            .iter()
            .map(|n| format!("`sparkctl down {n}`"))
            .collect();
        let fix = if plan.memory.fits {
            format!("stop {} first", stop.join(", "))
        } else {
            "it does not fit even alone; lower its memory_gb (gpu-memory-utilization) or raise \
             SPARKCTL_MEMORY_GB if the machine has more"
                .to_string()
        };
        return Err(Error::Failed(format!(
            "{} does not fit in memory: {}; {fix}",
            plan.name,
            plan.memory.describe()
        )));
    }
    let spec = StartSpec {
        resolved: plan.resolved.clone(),
        recipe_hash: plan.recipe_hash.clone(),
        run_id: crate::state::new_run_id(),
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
    let mut started = rt.start(&spec, &plan.artifact).await?;
    let engine = spec.resolved.engine;
    let timeout = timeout.unwrap_or(plan.health_timeout);
    let outcome = tokio::select! {
        r = ready::wait_ready(&mut started, engine, timeout, progress) => Some(r),
        _ = tokio::signal::ctrl_c() => None,
    };
    let deployment = started.deployment;
    match outcome {
        Some(Ok(Ready {
            after,
            noticed_at,
            model,
        })) => {
            // Measured after readiness is noticed, so the readiness figures above are unchanged.
            let measuring = std::time::Instant::now();
            let memory_observed = memory::observe(rt, &deployment, before).await;
            tracing::debug!("memory observed in {:?}", measuring.elapsed());
            let warnings = memory_observed.warnings(&plan.name);
            Ok(StartReport {
                deployment,
                ready_after_ms: after.as_secs_f64() * 1e3,
                ready_noticed_at_us: noticed_at.as_micros(),
                model,
                memory_observed,
                warnings,
            })
        }
        Some(Err(fault)) => {
            // A fatal line or a timeout leaves it running but useless: stop it, keep its logs.
            let _ = rt.stop(&deployment, STOP_GRACE).await;
            Err(Error::Failed(format!(
                "{}\n  help: full output: `sparkctl logs {}`",
                fault.explain(&plan.name),
                plan.name
            )))
        }
        None => {
            let stopped = rt.stop(&deployment, STOP_GRACE).await;
            Err(Error::Interrupted(match stopped {
                Ok(()) => format!(
                    "interrupted: stopped {} before it was ready; its logs are kept (`sparkctl logs {}`)",
                    plan.name, plan.name
                ),
                Err(e) => format!(
                    "interrupted, and stopping {} failed ({e}); `sparkctl status` shows what runs",
                    plan.name
                ),
            }))
        }
    }
}

/// Refuses to change what a running server reads (its model dir) underneath it.
pub async fn ensure_not_running(rt: &Runtimes, name: &str, doing: &str) -> Result<()> {
    match rt.find(name).await? {
        Some(d) if d.running() => Err(Error::Usage(format!(
            "{name} is running ({} {}) and reads this model dir; `sparkctl down {name}` before you {doing}",
            d.runtime.as_str(),
            crate::units::short_id(&d.id)
        ))),
        _ => Ok(()),
    }
}

/// What `bench NAME|URL` measures: a URL as is, or a recipe's running deployment with its
/// context (recipe hash, image, model fingerprint, size). Also the recipe's gates and suite.
pub async fn bench_target(
    rt: &Runtimes,
    recipes: &crate::recipe::RecipeSet,
    target: &str,
) -> Result<(
    crate::bench::result::Target,
    std::collections::BTreeMap<String, String>,
    String,
)> {
    use crate::bench::result::Target;
    if target.starts_with("http://") || target.starts_with("https://") {
        let t = Target {
            url: target.trim_end_matches('/').to_string(),
            ..Default::default()
        };
        return Ok((
            t,
            Default::default(),
            crate::bench::suite::DEFAULT_SUITE.into(),
        ));
    }
    let loaded = recipes.get(target)?;
    let recipe = &loaded.recipe;
    let d = rt
        .find(target)
        .await?
        .filter(Deployment::running)
        .ok_or_else(|| {
            Error::Usage(format!(
                "{target} is not running; `sparkctl start {target}` first (or give a URL)"
            ))
        })?;
    let (gates, suite) = match &recipe.bench {
        Some(b) => (b.gates.clone(), b.suite.clone()),
        None => (
            Default::default(),
            crate::bench::suite::DEFAULT_SUITE.to_string(),
        ),
    };
    let t = Target {
        url: d.url(),
        recipe: Some(recipe.name.clone()),
        deployment: Some(d.id.clone()),
        recipe_hash: Some(d.recipe_hash.clone()),
        image: d.image_ref.clone(),
        image_digest: (d.runtime == Runtime::Docker).then(|| d.artifact.clone()),
        model_fingerprint: d.model_fingerprint.clone(),
        weights_bytes: recipe.model.as_ref().and_then(|m| m.weights).map(|w| w.0),
        active_weights_bytes: recipe
            .model
            .as_ref()
            .and_then(|m| m.active_weights)
            .map(|w| w.0),
        kv_bytes_per_token: recipe
            .model
            .as_ref()
            .and_then(|m| m.kv_bytes_per_token)
            .map(|w| w.0),
        engine: Some(recipe.engine),
        ..Default::default()
    };
    Ok((t, gates, suite))
}

/// The recipe's goodput objectives, when `target` names a recipe that sets them.
pub fn recipe_slo(
    recipes: &crate::recipe::RecipeSet,
    target: &str,
) -> Option<crate::bench::slo::Slo> {
    recipes.get(target).ok()?.recipe.bench.as_ref()?.slo
}

/// The recipe's load phases (`bench.load`), when `target` names a recipe that sets them.
pub fn recipe_load(
    recipes: &crate::recipe::RecipeSet,
    target: &str,
) -> Option<crate::bench::load::LoadSpec> {
    recipes
        .get(target)
        .ok()?
        .recipe
        .bench
        .as_ref()?
        .load
        .clone()
}

/// State files a read command should mention although it does not need them:
/// `production.json`, which `up` and `rollback` read, and which `up` tells users to check
/// with `status`.
pub fn state_warnings(state: &crate::state::StateDir) -> Vec<String> {
    crate::state::damage_of::<crate::production::Production>(&state.production_file())
        .map(|d| {
            format!(
                "{d}; `up` and `rollback` need it: which recipe is production is unknown until \
                 it is fixed or moved aside"
            )
        })
        .into_iter()
        .collect()
}

/// A name `down` may act on: a recipe here (loaded or broken), or one that has run under
/// this state dir (its recipe file may be gone). Anything else is a typo: exit 2 with the
/// nearest name, instead of "not running; nothing to stop".
pub async fn ensure_known(
    rt: &Runtimes,
    recipes: &crate::recipe::RecipeSet,
    name: &str,
) -> Result<()> {
    if recipes.knows(name) {
        return Ok(());
    }
    let (deployments, _) = rt.list().await?;
    if deployments.iter().any(|d| d.name == name) {
        return Ok(());
    }
    let mut names: Vec<&str> = recipes.names();
    names.extend(deployments.iter().map(|d| d.name.as_str()));
    names.sort_unstable();
    names.dedup();
    Err(Error::Usage(format!(
        "no recipe or deployment named `{name}`; {}",
        crate::recipe::did_you_mean(name, &names, "known names")
    )))
}

/// Stops the running deployment of `name`; its logs are kept. None when nothing ran.
/// Production behind the front door is stopped only with `force`: the production port then
/// answers 503 until a `rollback` or `up` (the watch does not bring it back: it is no
/// longer production, but the top of the rollback stack).
pub async fn down(
    rt: &Runtimes,
    name: &str,
    dry_run: bool,
    door: Option<&crate::frontdoor::Remote>,
    force: bool,
) -> Result<Option<Deployment>> {
    let Some(d) = rt.find(name).await? else {
        return Ok(None);
    };
    if !d.running() {
        return Ok(None);
    }
    let door_state = match door {
        Some(r) => r.status().await.ok(),
        None => None,
    };
    let is_production = door_state
        .as_ref()
        .and_then(|s| s.upstream.as_ref())
        .is_some_and(|u| u.deployment == d.id);
    if is_production && !force {
        return Err(Error::Usage(format!(
            "{name} serves production behind the front door; stopping it leaves the production \
             port answering 503. `sparkctl rollback --to OTHER` switches first; `--force` stops it \
             anyway"
        )));
    }
    if dry_run {
        return Ok(Some(d));
    }
    if let (true, Some(s), Some(remote)) = (is_production, door_state, door) {
        let mut next = s.production.clone();
        if let Some(mut old) = next.current.take() {
            old.upstream = None;
            next.previous.push(old);
        }
        remote.switch(&next, Duration::from_secs(30)).await?;
    }
    rt.stop(&d, STOP_GRACE).await?;
    Ok(Some(d))
}
