//! The tag an upgrade follows: which one (a recipe's container image, by tag), where it
//! points today, the new digest fetched and kept before anything else (so that a registry
//! purging its old nightlies cannot lose it); the pin moves once it was promoted
//! (`deploy::pin`).

use bollard::Docker;

use crate::error::{Error, Result};
use crate::images::history::{self, Event, EventKind};
use crate::lock::{repository, Lock, Pin};
use crate::progress::Progress;
use crate::recipe::{LoadedRecipe, Runtime};
use crate::state::StateDir;

/// The note an upgrade's keep carries: its keeps are released once an upgrade judged them.
const KEPT_BY: &str = "upgrade";

/// The image reference `loaded` follows: a container image named by a tag (Docker's
/// `latest` when it names none). A host binary or an image named by digest has no tag to
/// follow: an error at the recipe's key.
pub(crate) fn tag_of(loaded: &LoadedRecipe) -> Result<String> {
    let r = &loaded.recipe;
    let refuse = |key: &str, message: String, help: &str| {
        Error::Invalid(vec![loaded.diagnostic(key, message, Some(help.into()))])
    };
    let image = match (r.runtime(), &r.image) {
        (Runtime::Docker, Some(image)) => image,
        (Runtime::Docker, None) => return Err(refuse(
            "image",
            format!("{} names no image, so there is no tag to follow", r.name),
            "an upgrade follows a container image's tag: `image: vllm/vllm-openai:cu130-nightly`",
        )),
        (Runtime::Process, _) => {
            return Err(refuse(
                "runtime",
                format!("{} runs a host process, which has no tag to follow", r.name),
                "an upgrade follows a container image's tag (`runtime: docker`, `image: \
                 repo:tag`); for a hand-built binary, `sparkctl bisect NAME --builds DIR` \
                 walks its builds",
            ))
        }
    };
    if image.contains('@') {
        return Err(refuse(
            "image",
            format!("`{image}` names a digest, not a tag: there is nothing to follow"),
            "name the tag the digests come from (`repo:cu130-nightly`); images.lock pins the \
             digest that runs",
        ));
    }
    Ok(image.clone())
}

/// What the tag points to in the registry now (never an image built here: no registry
/// moves it).
pub(crate) async fn today(docker: &Docker, reference: &str) -> Result<Pin> {
    let pin = crate::images::resolve(docker, reference, false, &crate::units::now_utc()).await?;
    if pin.source != crate::lock::Source::Registry {
        return Err(Error::Registry {
            reference: reference.to_string(),
            problem: crate::error::RegistryProblem::NeverPushed,
        });
    }
    Ok(pin)
}

/// Pulls `pin`'s digest (unless it is here already) and keeps it: image history events
/// `pulled` and `kept`, so `prune` leaves it until an upgrade has judged it. Returns the pin
/// with this machine's image id and build date filled in.
pub(crate) async fn fetch_and_keep(
    docker: &Docker,
    state: &StateDir,
    recipe: &str,
    mut pin: Pin,
    run_id: &str,
    progress: &dyn Progress,
) -> Result<Pin> {
    let reference = format!("{}@{}", repository(&pin.reference), pin.digest);
    if crate::images::local(docker, &reference).await?.is_none() {
        progress.step(&format!("pulling {reference}"));
        crate::images::pull(docker, &reference, |_, _, _, _| {}).await?;
    }
    let img = crate::images::local(docker, &reference)
        .await?
        .ok_or_else(|| Error::ImageMissing {
            image: reference.clone(),
            needed: crate::error::ImageNeed::AfterPull,
        })?;
    pin.image_id = Some(img.id().to_string());
    pin.created = img.created().map(str::to_string);
    for (kind, note) in [
        (EventKind::Pulled, None),
        (
            EventKind::Kept,
            Some(format!(
                "{KEPT_BY} {run_id} fetched it; kept until an upgrade judges it"
            )),
        ),
    ] {
        let mut event = Event::now(kind, &pin.digest, note);
        event.image_id = pin.image_id.clone();
        event.created = pin.created.clone();
        history::record(state, recipe, &event)?;
    }
    Ok(pin)
}

/// Takes back the keeps earlier upgrades put on `recipe`'s digests (now judged: promoted,
/// rejected, or named by a bisect, which keeps its own pair); what else retains a digest
/// (the pin, production, the newest few) still does.
pub(crate) fn release_keeps(h: &history::History, state: &StateDir) -> Result<()> {
    for e in &h.entries {
        if e.kept.as_deref().is_some_and(|k| k.starts_with(KEPT_BY)) {
            let mut event = Event::now(EventKind::Released, &e.digest, None);
            event.image_id = e.image_id.clone();
            history::record(state, &h.recipe, &event)?;
        }
    }
    Ok(())
}

/// The lock a candidate runs the new digest from: images.lock as it is, `recipe` pinned to
/// `new` (in memory only; images.lock is not touched).
pub(crate) fn candidate_lock(lock: &Lock, recipe: &str, new: &Pin) -> Lock {
    lock.with_image(recipe, Some(new))
}
