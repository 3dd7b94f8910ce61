//! Images by digest: resolving a tag to what it points to now (registry, through the
//! Engine API's distribution inspect), what this machine has, drift between the two and
//! the lock, pulling by digest, and what changed between two digests. `history` is every
//! digest a recipe's image had; `retain` which of them stay on this machine.

mod audit;
pub(crate) mod history;
pub(crate) mod retain;

pub(crate) use audit::{audit, Audit, Finding};

use std::collections::BTreeMap;

use bollard::query_parameters::CreateImageOptionsBuilder;
use bollard::Docker;
use futures_util::StreamExt;
use serde::Serialize;

use crate::error::{Error, ImageNeed, RegistryProblem, Result, Thing};
use crate::lock::{repository, Lock, Pin, Source};
use crate::runtime::docker::{engine_error, is_not_found};

/// What this machine knows about one image.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LocalImage {
    id: String,
    repo_digests: Vec<String>,
    created: Option<String>,
    platform: String,
    labels: BTreeMap<String, String>,
    env: Vec<String>,
    layers: usize,
    /// The layers' content digests, bottom first.
    layer_ids: Vec<String>,
    size: i64,
}

impl LocalImage {
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    pub(crate) fn created(&self) -> Option<&str> {
        self.created.as_deref()
    }

    pub(crate) fn platform(&self) -> &str {
        &self.platform
    }

    pub(crate) fn layers(&self) -> usize {
        self.layers
    }

    pub(crate) fn size(&self) -> i64 {
        self.size
    }

    /// Its registry digest for `repo`, if it came from (or went to) that repository.
    pub(crate) fn digest_in(&self, repo: &str) -> Option<String> {
        self.repo_digests.iter().find_map(|rd| {
            rd.split_once('@')
                .filter(|(r, _)| *r == repo)
                .map(|(_, d)| d.to_string())
        })
    }
}

/// The engine's platform (`linux/arm64` on a Spark).
pub(crate) async fn platform(docker: &Docker) -> Result<String> {
    let v = docker
        .version()
        .await
        .map_err(|e| engine_error("docker version", e))?;
    Ok(format!(
        "{}/{}",
        v.os.unwrap_or_default(),
        v.arch.unwrap_or_default()
    ))
}

/// The local image `reference` names (a tag, `repo@digest` or an id), if present.
pub(crate) async fn local(docker: &Docker, reference: &str) -> Result<Option<LocalImage>> {
    match docker.inspect_image(reference).await {
        Ok(i) => {
            let config = i.config.unwrap_or_default();
            let layer_ids = i.root_fs.and_then(|r| r.layers).unwrap_or_default();
            Ok(Some(LocalImage {
                id: i.id.unwrap_or_default(),
                repo_digests: i.repo_digests.unwrap_or_default(),
                created: i.created.map(|c| c.to_string()),
                platform: format!(
                    "{}/{}",
                    i.os.unwrap_or_default(),
                    i.architecture.unwrap_or_default()
                ),
                labels: config.labels.unwrap_or_default().into_iter().collect(),
                env: config.env.unwrap_or_default(),
                layers: layer_ids.len(),
                layer_ids,
                size: i.size.unwrap_or(0),
            }))
        }
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(engine_error(&format!("inspecting image {reference}"), e)),
    }
}

/// What the registry says `reference` points to now: (digest, media type).
pub(crate) async fn registry_digest(
    docker: &Docker,
    reference: &str,
) -> Result<(String, Option<String>)> {
    match docker.inspect_registry_image(reference, None).await {
        Ok(d) => Ok((
            d.descriptor.digest.unwrap_or_default(),
            d.descriptor.media_type,
        )),
        Err(e) => {
            let text = e.to_string();
            if text.contains("manifest unknown") || text.contains("not found") || is_not_found(&e) {
                Err(Error::Registry {
                    reference: reference.to_string(),
                    problem: RegistryProblem::NoSuchTag(text),
                })
            } else {
                Err(Error::Registry {
                    reference: reference.to_string(),
                    problem: RegistryProblem::Unreachable(text),
                })
            }
        }
    }
}

/// A pin for `reference` as it stands now. Images built here and never pushed are
/// pinned by image id; `offline` takes the registry digest this machine recorded at pull.
pub(crate) async fn resolve(
    docker: &Docker,
    reference: &str,
    offline: bool,
    at: &str,
) -> Result<Pin> {
    let here = local(docker, reference).await?;
    let platform = platform(docker).await?;
    let repo = repository(reference);
    let pin = |digest: String, source, media_type, image: Option<&LocalImage>| Pin {
        reference: reference.to_string(),
        digest,
        source,
        media_type,
        platform: Some(platform.clone()),
        image_id: image.map(|i| i.id.clone()),
        created: image.and_then(|i| i.created.clone()),
        pinned_at: at.to_string(),
        history: Vec::new(),
    };
    // Built here (or only tagged here) under this name: no registry knows it by this name.
    if let Some(img) = here
        .as_ref()
        .filter(|i| i.digest_in(repo).is_none() && !offline)
    {
        return Ok(pin(img.id.clone(), Source::Local, None, Some(img)));
    }
    if offline {
        let img = here.as_ref().ok_or_else(|| Error::ImageMissing {
            image: reference.to_string(),
            needed: ImageNeed::OfflinePin,
        })?;
        let digest = img.digest_in(repo).ok_or_else(|| {
            Error::Failed(format!(
                "{reference} on this machine has no digest from {repo}; pin it online"
            ))
        })?;
        return Ok(pin(digest, Source::Registry, None, Some(img)));
    }
    let (digest, media_type) = registry_digest(docker, reference).await?;
    let matching = here.filter(|i| i.digest_in(repo).as_deref() == Some(digest.as_str()));
    Ok(pin(digest, Source::Registry, media_type, matching.as_ref()))
}

/// What `start` runs for a recipe image: the locked digest (present here), or with
/// `allow_unpinned` the tag as it is. Returns the reference and whether it was pinned.
pub(crate) async fn run_reference(
    docker: &Docker,
    recipe: &str,
    reference: &str,
    lock: &Lock,
    allow_unpinned: bool,
) -> Result<(String, bool)> {
    let Some(pin) = lock.pin(recipe)? else {
        if allow_unpinned {
            return Ok((reference.to_string(), false));
        }
        return Err(Error::NoSuch {
            what: Thing::Pin,
            name: recipe.to_string(),
            hint: crate::error::Hint::PinOrAllow {
                recipe: recipe.to_string(),
                reference: reference.to_string(),
            },
        });
    };
    if pin.reference != reference {
        return Err(Error::RecipeCannot {
            recipe: recipe.to_string(),
            why: crate::error::RecipeProblem::PinOfAnother {
                reference: reference.to_string(),
                pinned: pin.reference.clone(),
            },
        });
    }
    let run = pin.run_reference();
    if local(docker, &run).await?.is_some() {
        return Ok((run, true));
    }
    let differs = match local(docker, reference).await? {
        Some(img) => format!(
            " (this machine's {reference} is {}, not the pinned {})",
            crate::units::short_digest(&img.digest_in(repository(reference)).unwrap_or(img.id)),
            crate::units::short_digest(&pin.digest)
        ),
        None => String::new(),
    };
    Err(Error::ImageMissing {
        image: run.to_string(),
        needed: ImageNeed::Pinned {
            recipe: recipe.to_string(),
            differs,
        },
    })
}

/// One recipe's new pin, and the digest it replaced.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PinChange {
    recipe: String,
    old: Option<String>,
    new: String,
    /// Shown to people; `--json` keeps the three fields it always had.
    #[serde(skip)]
    source: crate::lock::Source,
}

impl PinChange {
    pub(crate) fn recipe(&self) -> &str {
        &self.recipe
    }

    pub(crate) fn old_digest(&self) -> Option<&str> {
        self.old.as_deref()
    }

    pub(crate) fn new_digest(&self) -> &str {
        &self.new
    }

    pub(crate) fn source(&self) -> crate::lock::Source {
        self.source
    }
}

/// Resolves every target's digest, then writes them into the lock at `lock_path` at once:
/// a registry that is down or a tag that does not exist changes nothing.
pub(crate) async fn pin(
    docker: &bollard::Docker,
    lock_path: &std::path::Path,
    targets: &[(String, String)],
    offline: bool,
    state: &crate::state::StateDir,
) -> Result<Vec<PinChange>> {
    let mut lock = Lock::load(lock_path)?.intact()?;
    let at = crate::units::now_utc();
    let mut resolved = Vec::new();
    for (recipe, reference) in targets {
        resolved.push((recipe, resolve(docker, reference, offline, &at).await?));
    }
    let mut changes = Vec::new();
    let mut events = Vec::new();
    for (recipe, new) in resolved {
        let (digest, source) = (new.digest.clone(), new.source);
        let mut event = history::Event::now(history::EventKind::Pinned, &digest, None);
        event.image_id = new.image_id.clone();
        event.created = new.created.clone();
        events.push((recipe, event));
        let old = lock.set(recipe, new);
        changes.push(PinChange {
            recipe: recipe.clone(),
            old,
            new: digest,
            source,
        });
    }
    lock.save(lock_path)?;
    // The lock may be rewritten by hand or by version control: the state dir remembers
    // what was pinned on this machine. A pin stands without this record.
    for (recipe, event) in events {
        if let Err(e) = history::record(state, recipe, &event) {
            tracing::warn!("the pin of {recipe} is not in its image history: {e}");
        }
    }
    Ok(changes)
}

/// Pulls `reference` (a `repo@digest`), reporting (layers done, layers, bytes done, bytes).
pub(crate) async fn pull(
    docker: &Docker,
    reference: &str,
    mut progress: impl FnMut(usize, usize, u64, u64),
) -> Result<()> {
    let opts = CreateImageOptionsBuilder::new()
        .from_image(reference)
        .build();
    let mut stream = docker.create_image(Some(opts), None, None);
    let mut layers: BTreeMap<String, (u64, u64, bool)> = BTreeMap::new();
    while let Some(item) = stream.next().await {
        let info = item.map_err(|e| engine_error(&format!("pulling {reference}"), e))?;
        if let Some(err) = info.error_detail.and_then(|d| d.message) {
            return Err(Error::Registry {
                reference: reference.to_string(),
                problem: RegistryProblem::PullFailed(err),
            });
        }
        let (Some(id), Some(status)) = (info.id, info.status) else {
            continue;
        };
        let entry = layers.entry(id).or_insert((0, 0, false));
        if let Some(d) = info.progress_detail {
            if status.starts_with("Downloading") {
                entry.0 = d.current.unwrap_or(0).max(0) as u64;
                entry.1 = d.total.unwrap_or(0).max(0) as u64;
            }
        }
        if status.starts_with("Pull complete") || status.starts_with("Already exists") {
            entry.2 = true;
            entry.0 = entry.1;
        }
        let done = layers.values().filter(|l| l.2).count();
        let (cur, total) = layers.values().fold((0, 0), |(c, t), l| (c + l.0, t + l.1));
        progress(done, layers.len(), cur, total);
    }
    Ok(())
}

/// Pulls `digest` of `recipe`'s image and remembers it. A registry that no longer holds
/// the digest is said plainly: nothing can bring it back from there.
pub(crate) async fn pull_digest(
    docker: &Docker,
    state: &crate::state::StateDir,
    h: &history::History,
    digest: &str,
    progress: impl FnMut(usize, usize, u64, u64),
) -> Result<()> {
    if !h.is_registry_digest(digest) {
        return Err(Error::Usage(format!(
            "{digest} of {} is an image id, not a registry digest (an image built here, or one \
             whose registry digest is unknown): no registry can give it back",
            h.recipe
        )));
    }
    let reference = h.run_reference(digest);
    if let Err(e) = pull(docker, &reference, progress).await {
        let text = e.to_string();
        if text.contains("manifest unknown") || text.contains("not found") {
            return Err(Error::Registry {
                reference,
                problem: RegistryProblem::DigestGone(text),
            });
        }
        return Err(e);
    }
    let img = local(docker, &reference).await?;
    let mut event = history::Event::now(history::EventKind::Pulled, digest, None);
    event.image_id = img.as_ref().map(|i| i.id.clone());
    event.created = img.and_then(|i| i.created);
    history::record(state, &h.recipe, &event)
}

/// What changed between two local images.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ImageDiff {
    old: LocalImage,
    new: LocalImage,
    /// label → (old, new); None where absent.
    labels: BTreeMap<String, (Option<String>, Option<String>)>,
    env: BTreeMap<String, (Option<String>, Option<String>)>,
    /// Layers only the old image has, and only the new one.
    layers_only_old: Vec<String>,
    layers_only_new: Vec<String>,
}

impl ImageDiff {
    pub(crate) fn old_image(&self) -> &LocalImage {
        &self.old
    }

    pub(crate) fn new_image(&self) -> &LocalImage {
        &self.new
    }

    pub(crate) fn labels(&self) -> &BTreeMap<String, (Option<String>, Option<String>)> {
        &self.labels
    }

    pub(crate) fn env(&self) -> &BTreeMap<String, (Option<String>, Option<String>)> {
        &self.env
    }

    pub(crate) fn layers_only_old(&self) -> &[String] {
        &self.layers_only_old
    }

    pub(crate) fn layers_only_new(&self) -> &[String] {
        &self.layers_only_new
    }
}

fn changed(
    old: &BTreeMap<String, String>,
    new: &BTreeMap<String, String>,
) -> BTreeMap<String, (Option<String>, Option<String>)> {
    old.keys()
        .chain(new.keys())
        .filter(|k| old.get(*k) != new.get(*k))
        .map(|k| (k.clone(), (old.get(k).cloned(), new.get(k).cloned())))
        .collect()
}

fn env_map(env: &[String]) -> BTreeMap<String, String> {
    env.iter()
        .map(|e| {
            e.split_once('=')
                .map_or((e.clone(), String::new()), |(k, v)| (k.into(), v.into()))
        })
        .collect()
}

pub(crate) async fn diff(docker: &Docker, old_ref: &str, new_ref: &str) -> Result<ImageDiff> {
    let get = |r: String| async move {
        local(docker, &r).await?.ok_or(Error::ImageMissing {
            image: r,
            needed: ImageNeed::Read,
        })
    };
    let (old, new) = (
        get(old_ref.to_string()).await?,
        get(new_ref.to_string()).await?,
    );
    let only = |a: &LocalImage, b: &LocalImage| -> Vec<String> {
        a.layer_ids
            .iter()
            .filter(|l| !b.layer_ids.contains(l))
            .cloned()
            .collect()
    };
    Ok(ImageDiff {
        layers_only_old: only(&old, &new),
        layers_only_new: only(&new, &old),
        labels: changed(&old.labels, &new.labels),
        env: changed(&env_map(&old.env), &env_map(&new.env)),
        old,
        new,
    })
}
