//! Old containers: sparkctl never auto-removes a container (its logs outlive it), so every
//! failed candidate stays. Their logs are copied into the run records, so only the newest
//! few per recipe are worth keeping: `SPARKCTL_KEEP_EXITED` (default 5) at each start, and
//! `sparkctl prune` on demand. Old image digests of the recipes go with `prune` too, all
//! but those `images::retain` keeps (pinned, newest, production's, kept for good).
//!
//! Only containers labelled as this state dir's are considered, never a running one, and
//! never one of production's recipe or of a recipe some recipe names as its `fallback`
//! (read from `STATE/production.json` and the recipe files: when either cannot be read,
//! nothing is removed). Removal is never forced: the engine refuses a container that
//! started running meanwhile.

use std::collections::BTreeSet;

use bollard::query_parameters::RemoveContainerOptionsBuilder;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::recipe::RecipeSet;
use crate::runtime::{DockerRuntime, Supervisor};
use crate::state::StateDir;

/// One container that would go.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct Old {
    pub(crate) recipe: String,
    pub(crate) id: String,
    pub(crate) run_id: String,
    /// Unix seconds.
    pub(crate) created: u64,
}

/// What `prune` decided; nothing has been removed yet.
#[derive(Debug, Clone, Serialize, Default)]
pub(crate) struct Plan {
    keep_per_recipe: usize,
    remove: Vec<Old>,
    /// Recipes whose containers are all kept: production's, and fallbacks.
    protected: Vec<String>,
}

/// The recipes whose containers are never removed: production's (`production.json`) and
/// every recipe named as a `fallback`. An unreadable `production.json`, or a recipe file
/// whose `fallback` cannot be read, is an error: what is protected would be a guess.
pub(crate) fn protected(state: &StateDir, recipes: &RecipeSet) -> Result<BTreeSet<String>> {
    let mut names = BTreeSet::new();
    let path = state.production_file();
    if path.exists() {
        let production: crate::production::Production = crate::state::read_json(&path)?;
        names.extend(production.current.map(|e| e.recipe));
    }
    names.extend(
        recipes
            .recipes
            .iter()
            .filter_map(|l| l.recipe.fallback.clone()),
    );
    // A broken file still may name a fallback: read what parses of it.
    for b in &recipes.broken {
        let fallbacks = std::fs::read_to_string(&b.path)
            .ok()
            .and_then(|s| serde_yaml_ng::from_str::<serde_yaml_ng::Value>(&s).ok())
            .map(|v| fallbacks_of(&v))
            .ok_or_else(|| {
                Error::Failed(format!(
                    "cannot tell whether {} names a fallback (it does not parse); fix it or move \
                     it aside before pruning, so no fallback's container is removed",
                    b.path.display()
                ))
            })?;
        names.extend(fallbacks);
    }
    Ok(names)
}

/// `fallback: NAME` or `fallback: [A, B]` at the top of a recipe.
fn fallbacks_of(recipe: &serde_yaml_ng::Value) -> Vec<String> {
    match recipe.get("fallback") {
        Some(serde_yaml_ng::Value::String(s)) => vec![s.clone()],
        Some(serde_yaml_ng::Value::Sequence(list)) => list
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    }
}

/// Which exited containers go: per recipe (or only `recipe`), all but the newest `keep`.
pub(crate) async fn plan(
    docker: &DockerRuntime,
    protected: BTreeSet<String>,
    keep: usize,
    recipe: Option<&str>,
) -> Result<Plan> {
    // This state dir's containers, newest first, exited ones included.
    let all = docker.list().await?;
    let mut remove = Vec::new();
    let mut seen: Vec<(&str, usize)> = Vec::new();
    for d in &all {
        if d.running() || protected.contains(&d.name) || recipe.is_some_and(|r| r != d.name) {
            continue;
        }
        let count = match seen.iter_mut().find(|(n, _)| *n == d.name) {
            Some((_, c)) => c,
            None => {
                seen.push((&d.name, 0));
                &mut seen.last_mut().expect("just pushed").1
            }
        };
        *count += 1;
        if *count > keep {
            remove.push(Old {
                recipe: d.name.clone(),
                id: d.id.clone(),
                run_id: d.run_id.clone(),
                created: d.started_at,
            });
        }
    }
    Ok(Plan {
        keep_per_recipe: keep,
        remove,
        protected: protected.into_iter().collect(),
    })
}

/// What `sparkctl prune` is asked: how many to keep, and whether to remove (else list).
pub(crate) struct Options {
    /// Exited containers per recipe; None: `SPARKCTL_KEEP_EXITED`.
    pub(crate) keep: Option<usize>,
    /// Newest image digests per recipe; None: `SPARKCTL_KEEP_IMAGES`.
    pub(crate) keep_images: Option<usize>,
    pub(crate) yes: bool,
}

/// What a prune found, and with `--yes` did: its `--json` document.
#[derive(Debug, Serialize)]
pub(crate) struct Pruned {
    dry_run: bool,
    keep_per_recipe: usize,
    protected: Vec<String>,
    remove: Vec<Old>,
    failed: Vec<NotRemoved>,
    images: PrunedImages,
}

/// The image half of `Pruned`.
#[derive(Debug, Serialize)]
pub(crate) struct PrunedImages {
    keep_newest: usize,
    remove: Vec<crate::images::retain::OldImage>,
    kept: Vec<crate::images::retain::KeptImage>,
    removed: Vec<crate::images::retain::Removed>,
    failed: Vec<NotRemoved>,
}

impl PrunedImages {
    pub(crate) fn keep_newest(&self) -> usize {
        self.keep_newest
    }

    pub(crate) fn remove(&self) -> &[crate::images::retain::OldImage] {
        &self.remove
    }

    pub(crate) fn kept(&self) -> &[crate::images::retain::KeptImage] {
        &self.kept
    }

    pub(crate) fn removed(&self) -> &[crate::images::retain::Removed] {
        &self.removed
    }
}

/// A container (`id`) or an image (`reference`) the engine would not remove, and why.
#[derive(Debug, Serialize)]
pub(crate) struct NotRemoved {
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reference: Option<String>,
    error: String,
}

/// `sparkctl prune`: under the state lock (a start in progress may be about to use these),
/// the old containers (servers' and ended jobs') and image digests, removed with `yes`.
pub(crate) async fn run(
    ctx: &crate::context::Context,
    recipes: &RecipeSet,
    opts: Options,
) -> Result<Pruned> {
    let state = &ctx.state;
    let _state_lock = state.lock("prune")?;
    let docker = ctx.runtimes.docker()?;
    let keep = opts.keep.unwrap_or(ctx.settings.keep_exited);
    let mut plan = plan(docker, protected(state, recipes)?, keep, None).await?;
    // Ended jobs' containers too: each run's output is already copied into its record.
    plan.remove.extend(
        crate::job::ended_beyond(docker.client(), state, keep)
            .await?
            .into_iter()
            .map(|r| Old {
                recipe: format!("job {}", r.job()),
                id: r.container().to_string(),
                run_id: r.run_id().to_string(),
                created: r.started_unix(),
            }),
    );
    let newest = opts.keep_images.unwrap_or(ctx.settings.keep_images);
    let lock = crate::lock::Lock::load(&ctx.lock_path)?.intact()?;
    let runs = crate::history::image_uses(state)?;
    let going = (newest, plan.remove.as_slice());
    let images = image_plan(docker.client(), state, &lock, recipes, &runs, going).await?;
    let failed = match opts.yes {
        true => apply(docker, &plan.remove).await,
        false => Vec::new(),
    };
    // Images after containers: an old container no longer holds its image.
    let (removed, image_failed) = match opts.yes {
        true => crate::images::retain::apply(docker.client(), images.remove()).await,
        false => (Vec::new(), Vec::new()),
    };
    Ok(Pruned {
        dry_run: !opts.yes,
        keep_per_recipe: plan.keep_per_recipe,
        protected: plan.protected,
        remove: plan.remove,
        failed: failed
            .into_iter()
            .map(|(o, error)| NotRemoved {
                id: Some(o.id),
                reference: None,
                error,
            })
            .collect(),
        images: PrunedImages {
            keep_newest: images.keep_newest(),
            remove: images.remove().to_vec(),
            kept: images.kept().to_vec(),
            removed,
            failed: image_failed
                .into_iter()
                .map(|(o, error)| NotRemoved {
                    id: None,
                    reference: Some(o.reference().to_string()),
                    error,
                })
                .collect(),
        },
    })
}

impl Pruned {
    pub(crate) fn dry_run(&self) -> bool {
        self.dry_run
    }

    pub(crate) fn keep_per_recipe(&self) -> usize {
        self.keep_per_recipe
    }

    pub(crate) fn protected(&self) -> &[String] {
        &self.protected
    }

    pub(crate) fn remove(&self) -> &[Old] {
        &self.remove
    }

    pub(crate) fn failed(&self) -> &[NotRemoved] {
        &self.failed
    }

    pub(crate) fn images(&self) -> &PrunedImages {
        &self.images
    }

    /// Ok when everything asked for went; else an error naming each that did not.
    pub(crate) fn outcome(&self) -> Result<()> {
        let failed: Vec<String> = self
            .failed
            .iter()
            .chain(&self.images.failed)
            .map(|n| {
                let what =
                    n.id.as_deref()
                        .or(n.reference.as_deref())
                        .unwrap_or_default();
                format!(
                    "could not remove {}: {}",
                    crate::units::short_id(what),
                    n.error
                )
            })
            .collect();
        match failed.is_empty() {
            true => Ok(()),
            false => Err(Error::Failed(failed.join("\n"))),
        }
    }
}

/// Removes `old` containers; returns what could not be removed, and why.
pub(crate) async fn apply(docker: &DockerRuntime, old: &[Old]) -> Vec<(Old, String)> {
    let mut failed = Vec::new();
    for o in old {
        // Not forced: a container that started running since the plan is refused (409).
        let opts = RemoveContainerOptionsBuilder::new().force(false).build();
        if let Err(e) = docker.client().remove_container(&o.id, Some(opts)).await {
            failed.push((o.clone(), e.to_string()));
        }
    }
    failed
}

/// The digests of the recipes' images that no retention rule keeps and no container uses
/// (but those in `going`, which this prune removes first); `runs`: every run that used an
/// image. A lock that cannot be read is an
/// error: what is pinned would be a guess.
pub(crate) async fn image_plan(
    docker: &bollard::Docker,
    state: &StateDir,
    lock: &crate::lock::Lock,
    recipes: &RecipeSet,
    runs: &[crate::images::history::RunUse],
    (newest, going): (usize, &[Old]),
) -> Result<crate::images::retain::ImagePlan> {
    let opts = bollard::query_parameters::ListContainersOptionsBuilder::new()
        .all(true)
        .build();
    let containers = docker
        .list_containers(Some(opts))
        .await
        .map_err(|e| crate::runtime::docker::engine_error("listing containers", e))?;
    let in_use: std::collections::BTreeMap<String, String> = containers
        .into_iter()
        .filter(|c| !going.iter().any(|o| Some(&o.id) == c.id.as_ref()))
        .filter_map(|c| {
            let name = c.names.and_then(|n| n.into_iter().next()).or(c.id)?;
            Some((c.image_id?, name.trim_start_matches('/').to_string()))
        })
        .collect();
    let mut histories = Vec::new();
    for l in &recipes.recipes {
        let r = &l.recipe;
        let (Some(image), crate::recipe::Runtime::Docker) = (&r.image, r.runtime()) else {
            continue;
        };
        let h = crate::images::history::of(docker, state, lock, (&r.name, image), runs).await?;
        histories.push(h);
    }
    Ok(crate::images::retain::plan(&histories, newest, &in_use))
}

/// For a start of `recipe` (file `path`): its exited containers beyond the newest
/// `SPARKCTL_KEEP_EXITED`, removed just before the new one is created. Never fails a
/// start: when what is protected cannot be told, nothing goes (said at -v).
pub(crate) async fn before_start(
    ctx: &crate::context::Context,
    docker: &DockerRuntime,
    path: &std::path::Path,
    recipe: &str,
) -> Vec<Old> {
    let (state, keep) = (&ctx.state, ctx.settings.keep_exited);
    let planned = async {
        let dir = path.parent().unwrap_or(std::path::Path::new("."));
        let recipes = crate::recipe::load_dir(dir)?;
        let plan = plan(docker, protected(state, &recipes)?, keep, Some(recipe)).await?;
        Ok::<_, Error>(plan.remove)
    };
    planned.await.unwrap_or_else(|e| {
        tracing::info!("old containers of {recipe} are kept: {e}");
        Vec::new()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallbacks_are_read_from_the_raw_recipe() {
        let one: serde_yaml_ng::Value = serde_yaml_ng::from_str("fallback: llama-server").unwrap();
        assert_eq!(fallbacks_of(&one), ["llama-server"]);
        let two: serde_yaml_ng::Value = serde_yaml_ng::from_str("fallback: [a, b]").unwrap();
        assert_eq!(fallbacks_of(&two), ["a", "b"]);
        let none: serde_yaml_ng::Value = serde_yaml_ng::from_str("name: x").unwrap();
        assert!(fallbacks_of(&none).is_empty());
    }
}
