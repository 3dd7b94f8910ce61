//! `doctor` for one recipe: could it start here now? Its engine or binary, image, GPUs,
//! model dir and donors, port, memory and nodes. Every problem found is a failure: the
//! recipe was named, or something in use depends on it. A deployment of it that runs now
//! turns what only a new start needs (port, memory, an unpinned image) into a note.

use std::path::Path;

use super::{check, Check, Verdict};
use crate::context::Context;
use crate::deploy::{self, PortOwner};
use crate::lock::Lock;
use crate::recipe::{Launch, LoadedRecipe, PatchStep, Resolved};
use crate::runtime::Deployment;

/// A recipe to check deeply, and why it is checked.
pub(super) struct Subject<'a> {
    pub(in crate::doctor) loaded: &'a LoadedRecipe,
    /// Its running deployment, if one serves now.
    pub(in crate::doctor) running: Option<&'a Deployment>,
}

pub(super) async fn checks(
    ctx: &Context,
    lock: &crate::error::Result<Lock>,
    subject: &Subject<'_>,
    deployments: &[Deployment],
) -> Vec<Check> {
    let recipe = &subject.loaded.recipe;
    let resolved = recipe.resolve(&ctx.self_exe);
    let label = |what: &str| format!("{} {what}", recipe.name);
    let mut out = vec![artifact(ctx, lock, subject, &resolved).await];
    // A group's nodes are checked for their runtime and GPU one by one, below.
    if recipe.nodes.is_none() {
        if let Some((verdict, detail)) = gpus(ctx, &resolved).await {
            out.push(check(label("gpus"), verdict, detail));
        }
    }
    if let Some((verdict, detail)) = model(subject.loaded) {
        out.push(check(label("model"), verdict, detail));
    }
    out.push(port(ctx, subject, &resolved, deployments).await);
    if subject.running.is_none() {
        out.push(memory(ctx, subject, deployments).await);
    }
    if let Some(nodes) = &recipe.nodes {
        out.extend(super::nodes::group(nodes, recipe.server.gpus.is_some()).await);
    }
    out
}

fn artifact_word(resolved: &Resolved) -> &'static str {
    match resolved.launch {
        Launch::Docker(_) => "image",
        Launch::Process { .. } => "binary",
    }
}

/// The image it would run (pinned, on this machine) or the binary it would execute.
async fn artifact(
    ctx: &Context,
    lock: &crate::error::Result<Lock>,
    subject: &Subject<'_>,
    resolved: &Resolved,
) -> Check {
    let name = &subject.loaded.recipe.name;
    let label = format!("{name} {}", artifact_word(resolved));
    // It serves now: what a restart of that very instance needs is already there.
    let problem = match subject.running {
        Some(_) => Verdict::Warn,
        None => Verdict::Fail,
    };
    let Launch::Docker(c) = &resolved.launch else {
        return match ctx.runtimes.preflight(resolved).await {
            Ok(binary) => check(label, Verdict::Ok, format!("{binary} is executable")),
            Err(e) => check(label, problem, e.to_string()),
        };
    };
    let docker = match ctx.runtimes.docker() {
        Ok(d) => d,
        Err(e) => return check(label, Verdict::Fail, e.to_string()),
    };
    let lock = match lock {
        Ok(lock) => lock,
        Err(e) => return check(label, problem, e.to_string()),
    };
    match crate::images::run_reference(docker.client(), name, &c.image, lock, false).await {
        Ok((run, _)) => check(label, Verdict::Ok, format!("{run} is on this machine")),
        Err(e) => check(label, problem, e.to_string()),
    }
}

/// A recipe that asks for GPUs needs the engine's `nvidia` runtime and a GPU nvidia-smi
/// lists; `None` when it asks for none.
async fn gpus(ctx: &Context, resolved: &Resolved) -> Option<(Verdict, String)> {
    let Launch::Docker(c) = &resolved.launch else {
        return None;
    };
    let asked = c.resources.gpus.as_ref()?;
    if let Ok(docker) = ctx.runtimes.docker() {
        match docker.has_nvidia_runtime().await {
            Ok(true) => {}
            Ok(false) => {
                return Some((
                    Verdict::Fail,
                    format!(
                        "asks for GPUs (server.gpus: {asked}) but the Docker Engine has no \
                         `nvidia` runtime; install the NVIDIA Container Toolkit (nvidia-ctk \
                         runtime configure --runtime=docker) and restart dockerd"
                    ),
                ))
            }
            Err(e) => return Some((Verdict::Fail, e.to_string())),
        }
    }
    Some(match crate::nvidia::gpus().await {
        Ok(g) if g.is_empty() => (
            Verdict::Fail,
            format!("asks for GPUs (server.gpus: {asked}) but nvidia-smi lists none"),
        ),
        Ok(g) => (
            Verdict::Ok,
            format!("asks for {asked}; {} GPU(s) here", g.len()),
        ),
        Err(e) => (
            Verdict::Fail,
            format!("asks for GPUs (server.gpus: {asked}): {e}"),
        ),
    })
}

/// The model dir exists, and every donor its patch steps copy from holds its files.
fn model(loaded: &LoadedRecipe) -> Option<(Verdict, String)> {
    let model = loaded.recipe.model.as_ref()?;
    let path = crate::recipe::expand_home(&model.path);
    if !Path::new(&path).exists() {
        return Some((
            Verdict::Fail,
            format!(
                "model.path {path} does not exist ({}); download the model or fix the path",
                loaded.path.display()
            ),
        ));
    }
    let mut missing = Vec::new();
    for step in &model.patches {
        if let PatchStep::CopyFrom { donor, files } = step {
            let donor = crate::recipe::expand_home(donor);
            for f in files {
                if !Path::new(&donor).join(f).is_file() {
                    missing.push(format!("{donor}/{f}"));
                }
            }
        }
    }
    Some(match missing.as_slice() {
        [] => (Verdict::Ok, format!("{path} is there")),
        _ => (
            Verdict::Fail,
            format!(
                "its patch steps copy from donor files that do not exist: {}; fix \
                 model.patches[].copy-from in {}",
                missing.join(", "),
                loaded.path.display()
            ),
        ),
    })
}

async fn port(
    ctx: &Context,
    subject: &Subject<'_>,
    resolved: &Resolved,
    deployments: &[Deployment],
) -> Check {
    let name = &subject.loaded.recipe.name;
    let port = resolved.port;
    let label = format!("{name} port");
    if let Some(d) = subject.running {
        return check(
            label,
            Verdict::Ok,
            format!("{port}: served by its deployment ({})", d.url()),
        );
    }
    match deploy::port_owner(&ctx.runtimes, port, deployments).await {
        None => check(label, Verdict::Ok, format!("{port} is free")),
        Some(owner) => {
            let fix = match &owner {
                PortOwner::Deployment { name } => format!("`sparkctl down {name}`"),
                _ => "stop it, or give the recipe another server.port".to_string(),
            };
            check(
                label,
                Verdict::Fail,
                format!("{port} is taken by {owner}; {fix}"),
            )
        }
    }
}

/// The plan `start` would make: in the pool the recipe's memory comes from (the unified
/// pool, or the GPUs it is given where they have memory of their own).
async fn memory(ctx: &Context, subject: &Subject<'_>, deployments: &[Deployment]) -> Check {
    let recipe = &subject.loaded.recipe;
    let label = format!("{} memory", recipe.name);
    let production = crate::production::Book::current_recipes(&ctx.state);
    let plan = match crate::memory::for_server(
        &ctx.runtimes,
        recipe,
        &ctx.settings,
        0.0,
        deployments,
        &production,
        crate::deploy::learned_gb(ctx, recipe),
    )
    .await
    {
        Ok(plan) => plan,
        Err(why) => return check(label, Verdict::Fail, why),
    };
    let over = plan.over_declared();
    // Holding more than declared is a plan that undercounts: said with both figures.
    let fine = match over.is_empty() {
        true => Verdict::Ok,
        false => Verdict::Warn,
    };
    let over = match over.is_empty() {
        true => String::new(),
        false => format!(
            "; {} (the plan counts what it holds: raise memory_gb in its recipe)",
            over.join(", ")
        ),
    };
    match (plan.fits, plan.above_floor(), plan.must_stop.is_empty()) {
        (true, true, true) => check(label, fine, format!("{}{over}", plan.describe())),
        (true, true, false) => check(
            label,
            fine,
            format!(
                "{}{over}; `up` stops {} first (held through the front door)",
                plan.describe(),
                plan.must_stop.join(", ")
            ),
        ),
        (true, false, _) => check(
            label,
            Verdict::Fail,
            format!(
                "{}{over}; it would leave less than SPARKCTL_MEMORY_RESERVE_GB available: a \
                 start is refused",
                plan.describe()
            ),
        ),
        (false, _, _) => check(
            label,
            Verdict::Fail,
            format!(
                "{}{over}; it does not fit even alone: lower its memory_gb, give it more GPUs, \
                 or raise SPARKCTL_MEMORY_GB if the machine has more",
                plan.describe()
            ),
        ),
    }
}
