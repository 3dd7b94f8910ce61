//! Deployments: starting a recipe (`start`: checks first, then start, then ready),
//! stopping one, and who holds a port. The gated `up`/`rollback` flow builds on these.

mod evaluate;
mod evict;
pub(crate) mod pin;
pub(crate) mod plan;
mod replace;
pub(crate) mod rollback;
mod rollout;
mod start;
pub(crate) mod status;
pub(crate) mod switch;
pub(crate) mod up;

use std::time::Duration;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::recipe::Runtime;
pub(crate) use crate::runtime::STOP_GRACE;
use crate::runtime::{Deployment, Runtimes};
use crate::settings::Settings;
pub(crate) use plan::PortOwner;
pub(crate) use start::{learned_gb, memory_beside, plan_start, start, StartOptions, StartPlan};

/// What a deployment is to the front door.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Role {
    /// The front door routes production to it.
    Production,
    /// A replaced production kept running for an instant rollback.
    Warm,
    Candidate,
    None,
}

impl Role {
    /// `d`'s role, as the front door (when it runs) says, for whichever model.
    pub(crate) fn of(d: &Deployment, door: Option<&crate::frontdoor::DoorStatus>) -> Role {
        let is_d = |u: &crate::production::Upstream| u.deployment == d.id;
        let routed = door.is_some_and(|s| {
            s.upstream
                .iter()
                .chain(s.models.iter().flat_map(|m| &m.upstream))
                .any(is_d)
        });
        let warm = door.is_some_and(|s| {
            (s.production.warm.iter())
                .chain(s.models.iter().flat_map(|m| &m.production.warm))
                .any(|w| is_d(&w.upstream))
        });
        match (routed, d.running(), warm) {
            (true, _, _) => Role::Production,
            (false, true, true) => Role::Warm,
            (false, true, false) => Role::Candidate,
            (false, false, _) => Role::None,
        }
    }
}

/// Who listens on `port` now, if anyone.
pub(crate) async fn port_owner(
    rt: &Runtimes,
    port: u16,
    known: &[Deployment],
) -> Option<PortOwner> {
    if let Some(d) = known.iter().find(|d| d.running() && d.port == port) {
        return Some(PortOwner::Deployment {
            name: d.name.clone(),
        });
    }
    let listener = crate::host::listener_on(port)?;
    // Started since `known` was read (another starter of the same recipe): its record
    // names it by now, as it is written before the process can bind.
    if let Ok((now, _)) = rt.process.list_records() {
        if let Some(d) = now.iter().find(|d| d.running() && d.port == port) {
            return Some(PortOwner::Deployment {
                name: d.name.clone(),
            });
        }
    }
    // A published container port is held by docker-proxy: name the container instead.
    if let Ok(docker) = rt.docker() {
        if let Ok(Some((container, _))) = docker.publisher_of(port).await {
            return Some(PortOwner::Container { name: container });
        }
    }
    Some(PortOwner::Process { listener })
}

/// Refuses to change what a running server reads (its model dir) underneath it.
pub(crate) async fn ensure_not_running(rt: &Runtimes, name: &str, doing: &str) -> Result<()> {
    match rt.find(name).await? {
        Some(d) if d.running() => Err(Error::AlreadyRunning(crate::error::Running::ReadsModel {
            name: name.to_string(),
            runtime: d.runtime.as_str(),
            id: d.id.clone(),
            doing: doing.to_string(),
        })),
        _ => Ok(()),
    }
}

/// The benchmark of `target`, a URL as is or a recipe's running deployment with its
/// context (recipe hash, image, model fingerprint, size), with `over` over the recipe's
/// bench section (its suite, gates, objectives and load): `bench NAME|URL` and `up`'s.
pub(crate) async fn bench_plan(
    ctx: &crate::context::Context,
    recipes: &crate::recipe::RecipeSet,
    target: &str,
    over: crate::bench::Overrides,
) -> Result<crate::bench::Plan> {
    use crate::bench::{bound, result::Target, RecipeBench};
    let (rt, state) = (&ctx.runtimes, &ctx.state);
    let suites = recipes.dir.join("suites");
    if target.starts_with("http://") || target.starts_with("https://") {
        let mut t = Target {
            url: target.trim_end_matches('/').to_string(),
            ..Default::default()
        };
        t.set_bound(bound::for_url(&t.url, ctx.settings.bandwidth_gbps).await);
        return crate::bench::Plan::new(t, RecipeBench::default(), over, &suites, state);
    }
    let loaded = recipes.get(target)?;
    let recipe = &loaded.recipe;
    let d = rt
        .find(target)
        .await?
        .filter(Deployment::running)
        .ok_or_else(|| Error::NotRunning {
            name: target.into(),
        })?;
    let section = recipe_bench(loaded, &recipes.dir)?;
    let t = target_of(recipe, &d, ctx.settings.bandwidth_gbps).await;
    crate::bench::Plan::new(t, section, over, &suites, state)
}

/// A recipe's bench section as the benchmark reads it: its suite, gates, objectives, load
/// and evaluation sets.
pub(crate) fn recipe_bench(
    loaded: &crate::recipe::LoadedRecipe,
    recipes_dir: &std::path::Path,
) -> Result<crate::bench::RecipeBench> {
    use crate::bench::RecipeBench;
    Ok(match &loaded.recipe.bench {
        // Checked when the recipe was loaded.
        Some(b) => RecipeBench {
            suite: b.suite.clone(),
            gates: crate::bench::gates::parse_all(&b.gates).map_err(|e| {
                Error::Invalid(vec![loaded.diagnostic("bench.gates", e.to_string(), None)])
            })?,
            slo: b.slo,
            load: b.load.clone(),
            eval: eval_plan(loaded, recipes_dir)?,
        },
        None => RecipeBench::default(),
    })
}

/// The recipe's evaluation sets (None: it names none); a name that loads no set is a
/// problem of the recipe, said at its `bench.eval`.
pub(crate) fn eval_plan(
    loaded: &crate::recipe::LoadedRecipe,
    recipes_dir: &std::path::Path,
) -> Result<Option<crate::eval::Plan>> {
    let names = loaded
        .recipe
        .bench
        .as_ref()
        .map_or(&[][..], |b| &b.eval[..]);
    crate::eval::plan(names, recipes_dir).map_err(|e| match e.kind() {
        crate::error::ErrorKind::Usage => {
            Error::Invalid(vec![loaded.diagnostic("bench.eval", e.to_string(), None)])
        }
        _ => e,
    })
}

/// What a benchmark of `recipe`'s running deployment `d` records about it, with the
/// roofline's bound: the device that serves it.
pub(crate) async fn target_of(
    recipe: &crate::recipe::Recipe,
    d: &Deployment,
    host_gbps: Option<f64>,
) -> crate::bench::result::Target {
    use crate::bench::bound;
    let model = recipe.model.as_ref();
    let mut t = crate::bench::result::Target {
        url: d.url(),
        recipe: Some(recipe.name.clone()),
        deployment: Some(d.id.clone()),
        recipe_hash: Some(d.recipe_hash.clone()),
        image: d.image_ref.clone(),
        image_digest: (d.runtime == Runtime::Docker).then(|| d.artifact.clone()),
        model_fingerprint: d.model_fingerprint.clone(),
        weights_bytes: model.and_then(|m| m.weights).map(|w| w.0),
        active_weights_bytes: model.and_then(|m| m.active_weights).map(|w| w.0),
        kv_bytes_per_token: model.and_then(|m| m.kv_bytes_per_token).map(|w| w.0),
        engine: Some(recipe.engine),
        ..Default::default()
    };
    let declared = recipe.bench.as_ref().and_then(|b| b.bandwidth_gbps);
    t.set_bound(bound::for_recipe(&recipe.name, declared, host_gbps, &recipe.gpu_use()).await);
    t
}

/// State files a read command should mention although it does not need them:
/// `production.json`, which `up` and `rollback` read, and which `up` tells users to check
/// with `status`.
pub(crate) fn state_warnings(state: &crate::state::StateDir) -> Vec<String> {
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
pub(crate) async fn ensure_known(
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
    Err(Error::UnknownName {
        name: name.into(),
        hint: crate::recipe::did_you_mean(name, &names, "known names"),
    })
}

/// Stops the running deployment of `name`; its logs are kept. None when nothing ran.
/// Production behind the front door is stopped only with `force`: the production port then
/// answers 503 until a `rollback` or `up` (the watch does not bring it back: it is no
/// longer production, but the top of the rollback stack).
pub(crate) async fn down(
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
        // A group whose API server ended may have left Ray's containers on its nodes.
        if let (Ok(docker), false) = (rt.docker(), dry_run) {
            let state = Some(rt.process.state());
            crate::runtime::group::stop_rest(docker.client(), &d.id, state, docker.state_id())
                .await;
        }
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
