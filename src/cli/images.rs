//! `sparkctl images pin|audit|pull|diff|history|keep`: rendering over `images` and `lock`.

use std::path::Path;

use clap::{Args, Subcommand};

use super::{executor, load_recipes, lock_path, state_root, Globals, Output};
use crate::error::{Error, Result};
use crate::images::history::{self as image_history, EventKind, History};
use crate::images::{self, Finding};
use crate::lock::Lock;
use crate::recipe::RecipeSet;
use crate::state::StateDir;
use crate::units::short_digest;

/// `sparkctl images`'s subcommand.
#[derive(Debug, Args)]
pub(crate) struct ImagesArgs {
    #[command(subcommand)]
    command: ImagesCommand,
}

impl ImagesArgs {
    pub(super) fn exec(self, g: &Globals, out: &Output) -> Result<()> {
        executor()?.block_on(async {
            let recipes = load_recipes(g, out)?;
            let docker = crate::runtime::docker::connect().await?;
            let state = StateDir::open(&state_root(g))?;
            let at = At {
                recipes: &recipes,
                lock_path: &lock_path(g),
                docker: &docker,
                state: &state,
                settings: &crate::settings::Settings::from_env()?,
            };
            run(&at, self.command, out).await
        })
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum ImagesCommand {
    /// Resolve tags to digests and write images.lock.
    Pin {
        name: Option<String>,
        #[arg(long, conflicts_with = "name")]
        all: bool,
        /// Pin the registry digest this machine recorded when it pulled, without asking the registry.
        #[arg(long)]
        offline: bool,
    },
    /// Report drift, missing pins and local images that differ from the lock.
    Audit,
    /// Pull images by their locked digest, or NAME@DIGEST: an older digest of its image.
    Pull {
        #[arg(value_name = "NAME[@DIGEST]")]
        name: Option<String>,
        #[arg(long, conflicts_with = "name")]
        all: bool,
    },
    /// What changed between two digests of an image (created, labels, env, layers).
    Diff {
        name: String,
        old: Option<String>,
        new: Option<String>,
    },
    /// Every digest a recipe's image was pinned to, pulled or ran, with the runs that used
    /// each, and which stay on this machine.
    History { name: String },
    /// Keep NAME@DIGEST on this machine for good (`prune` never removes it).
    Keep {
        #[arg(value_name = "NAME@DIGEST")]
        target: String,
        /// Why (shown by `images history`).
        #[arg(long, value_name = "TEXT")]
        note: Option<String>,
        /// Take a keep back: the digest is retained only as the other rules say.
        #[arg(long)]
        release: bool,
    },
}

/// What every `images` subcommand works on.
struct At<'a> {
    recipes: &'a RecipeSet,
    lock_path: &'a Path,
    docker: &'a bollard::Docker,
    state: &'a StateDir,
    settings: &'a crate::settings::Settings,
}

impl At<'_> {
    /// `NAME`'s image history (a recipe that runs a container image).
    async fn history(&self, name: &str) -> Result<History> {
        let (recipe, reference) = targets(self.recipes, Some(name), false)?
            .pop()
            .expect("one target for one name");
        let lock = Lock::load(self.lock_path)?.intact()?;
        let runs = crate::history::image_uses(self.state)?;
        image_history::of(self.docker, self.state, &lock, (&recipe, &reference), &runs).await
    }
}

/// `NAME@DIGEST` → (NAME, DIGEST).
fn name_at_digest(text: &str) -> Result<(&str, &str)> {
    text.split_once('@')
        .filter(|(n, d)| !n.is_empty() && !d.is_empty())
        .ok_or_else(|| {
            Error::BadFlag(crate::error::FlagProblem::NotNameAtDigest {
                given: text.to_string(),
            })
        })
}

/// `recipe` has no pin where a command needs one.
fn no_pin(recipe: &str) -> Error {
    Error::NoSuch {
        what: crate::error::Thing::Pin,
        name: recipe.to_string(),
        hint: crate::error::Hint::PinFirst {
            recipe: recipe.to_string(),
        },
    }
}

/// (recipe, image) of the recipes that run containers, all or the one named.
fn targets(recipes: &RecipeSet, name: Option<&str>, all: bool) -> Result<Vec<(String, String)>> {
    let with_image = |r: &crate::recipe::LoadedRecipe| {
        (r.recipe.runtime() == crate::recipe::Runtime::Docker)
            .then(|| r.recipe.image.clone())
            .flatten()
            .map(|i| (r.recipe.name.clone(), i))
    };
    // Job recipes (recipes/jobs/) pin their images in the same lock, under their names.
    let jobs_dir = crate::job::load::jobs_dir(&recipes.dir);
    match (name, all) {
        (Some(n), _) if !recipes.knows(n) && jobs_dir.join(format!("{n}.yaml")).is_file() => {
            let job = crate::job::load::find_job(&jobs_dir, n)?;
            Ok(vec![(job.recipe.name, job.recipe.image)])
        }
        (None, true) => {
            let (jobs, _) = crate::job::load::load_jobs(&jobs_dir)?;
            Ok(recipes
                .recipes
                .iter()
                .filter_map(with_image)
                .chain(jobs.into_iter().map(|j| (j.recipe.name, j.recipe.image)))
                .collect())
        }
        (Some(n), _) => {
            let loaded = recipes.get(n)?;
            with_image(loaded)
                .map(|t| vec![t])
                .ok_or_else(|| Error::RecipeCannot {
                    recipe: n.to_string(),
                    why: crate::error::RecipeProblem::NoImage,
                })
        }
        (None, false) => Err(Error::BadFlag(crate::error::FlagProblem::NoRecipeNamed)),
    }
}

async fn run(at: &At<'_>, command: ImagesCommand, out: &Output) -> Result<()> {
    let (recipes, lock_path, docker) = (at.recipes, at.lock_path, at.docker);
    match command {
        ImagesCommand::Pin { name, all, offline } => {
            let targets = targets(recipes, name.as_deref(), all)?;
            let changes = images::pin(docker, lock_path, &targets, offline, at.state).await?;
            print_pins(&changes, lock_path, out);
            Ok(())
        }
        ImagesCommand::Audit => {
            let lock = Lock::load(lock_path)?.intact()?;
            let all = targets(recipes, None, true)?;
            let mut audit = images::audit(docker, &all, &lock).await?;
            // A pin whose recipe file is broken (skipped, with a warning) is not stale.
            audit.retain_stale(|name| !recipes.knows(name));
            print_audit(&audit, out);
            if audit.ok() {
                Ok(())
            } else {
                Err(Error::Reported(crate::error::Summary::AuditDrift))
            }
        }
        ImagesCommand::Pull {
            name: Some(target),
            all: false,
        } if target.contains('@') => pull_older(at, &target, out).await,
        ImagesCommand::Pull { name, all } => {
            let lock = Lock::load(lock_path)?.intact()?;
            for (recipe, _) in targets(recipes, name.as_deref(), all)? {
                pull(docker, &lock, &recipe, out).await?;
            }
            Ok(())
        }
        ImagesCommand::Diff { name, old, new } => diff(at, &name, old, new, out).await,
        ImagesCommand::History { name } => {
            let h = at.history(&name).await?;
            print_history(&h, at.settings.keep_images, out);
            Ok(())
        }
        ImagesCommand::Keep {
            target,
            note,
            release,
        } => keep(at, &target, note, release, out).await,
    }
}

async fn diff(
    at: &At<'_>,
    name: &str,
    old: Option<String>,
    new: Option<String>,
    out: &Output,
) -> Result<()> {
    let lock = Lock::load(at.lock_path)?.intact()?;
    let pin = lock.images.get(name).ok_or_else(|| no_pin(name))?;
    // A short digest (as `images history` shows them) names one in the history.
    let full = |d: &str| d.len() == 71 && d.starts_with("sha256:");
    let (old, new) = if old.iter().chain(new.iter()).all(|d| full(d)) {
        (old, new)
    } else {
        let h = at.history(name).await?;
        let find = |d: Option<String>| -> Result<Option<String>> {
            d.map(|d| h.lookup(&d).map(|e| e.digest.clone()))
                .transpose()
        };
        (find(old)?, find(new)?)
    };
    let (old, new) = pin.diff_references(name, old, new)?;
    let d = images::diff(at.docker, &old, &new).await?;
    if out.json {
        out.print_json(&d);
    } else {
        out.say(format_args!("{name}: {old}\n  -> {new}"));
        print_diff(&d, out);
    }
    Ok(())
}

/// `images pull NAME@DIGEST`: an older digest of the recipe's image, back from its registry.
async fn pull_older(at: &At<'_>, target: &str, out: &Output) -> Result<()> {
    let (name, digest) = name_at_digest(target)?;
    let h = at.history(name).await?;
    let digest = match h.lookup(digest) {
        Ok(e) => e.digest.clone(),
        // A digest this machine never saw (from a release note, another machine) joins the
        // history once pulled.
        Err(_) if digest.len() == 71 && digest.starts_with("sha256:") => digest.to_string(),
        Err(e) => return Err(e),
    };
    let reference = h.run_reference(&digest);
    let bar = out.spinner();
    let pulled = images::pull_digest(at.docker, at.state, &h, &digest, |done, n, cur, total| {
        bar.message(format_args!(
            "{name}: {done}/{n} layers, {:.1}/{:.1} MB",
            cur as f64 / 1e6,
            total as f64 / 1e6
        ));
    })
    .await;
    bar.finish();
    pulled?;
    out.say(format_args!(
        "{name}: pulled {reference}; it is in the image history (`sparkctl images history {name}`)"
    ));
    Ok(())
}

/// `images keep NAME@DIGEST [--release]`.
async fn keep(
    at: &At<'_>,
    target: &str,
    note: Option<String>,
    release: bool,
    out: &Output,
) -> Result<()> {
    let (name, digest) = name_at_digest(target)?;
    let h = at.history(name).await?;
    let e = h.lookup(digest)?;
    let kind = if release {
        EventKind::Released
    } else {
        EventKind::Kept
    };
    let note = note.or_else(|| Some(format!("by hand, {}", crate::units::now_utc())));
    let mut event = image_history::Event::now(kind, &e.digest, note.filter(|_| !release));
    event.image_id = e.image_id.clone();
    event.created = e.created.clone();
    image_history::record(at.state, name, &event)?;
    let here = if e.present {
        "on this machine"
    } else {
        "not on this machine now; `sparkctl images pull` it while its registry holds it"
    };
    if release {
        out.say(format_args!(
            "{name}: {} is no longer kept for good; `prune` retains it only as the other rules say",
            short_digest(&e.digest)
        ));
    } else {
        out.say(format_args!(
            "{name}: {} is kept for good ({here}); `prune` never removes it",
            short_digest(&e.digest)
        ));
    }
    Ok(())
}

fn print_pins(changes: &[images::PinChange], lock_path: &Path, out: &Output) {
    if out.json {
        out.print_json(&changes);
        return;
    }
    for c in changes {
        let new = short_digest(c.new_digest());
        match c.old_digest() {
            Some(d) if d == c.new_digest() => {
                out.say(format_args!("{}: {new} unchanged", c.recipe()))
            }
            Some(d) => out.say(format_args!("{}: {} -> {new}", c.recipe(), short_digest(d))),
            None => out.say(format_args!(
                "{}: (none) -> {new} ({})",
                c.recipe(),
                format!("{:?}", c.source()).to_lowercase()
            )),
        }
    }
    out.say(format_args!("wrote {}", lock_path.display()));
}

fn print_audit(audit: &images::Audit, out: &Output) {
    if out.json {
        out.print_json(audit);
        return;
    }
    let mut t = out.table();
    t.set_header(vec![
        "RECIPE",
        "IMAGE",
        "PINNED",
        "HERE",
        "REGISTRY NOW",
        "FINDINGS",
    ]);
    let dated = |d: Option<&str>, c: Option<&str>| match (d, c) {
        (Some(d), Some(c)) => format!("{} ({})", short_digest(d), &c[..c.len().min(19)]),
        (Some(d), None) => short_digest(d),
        (None, _) => "-".into(),
    };
    for r in audit.rows() {
        let findings: Vec<String> = r
            .findings()
            .iter()
            .map(|f| {
                serde_json::to_value(f)
                    .unwrap()
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect();
        t.add_row(vec![
            r.recipe().to_string(),
            r.reference().to_string(),
            dated(r.pinned(), r.pinned_created()),
            if r.present() {
                "yes".into()
            } else {
                "no".into()
            },
            dated(r.registry(), r.registry_created()),
            if findings.is_empty() {
                "ok".into()
            } else {
                findings.join(", ")
            },
        ]);
    }
    out.print_table(&t);
    for r in audit.rows() {
        if r.findings().contains(&Finding::Drift) {
            out.say(format_args!(
                "drift: {} now points to {} in the registry; {} runs the pinned {} (`sparkctl images pin {}` moves it, `images diff {}` after a pull shows what changed)",
                r.reference(),
                r.registry().map(short_digest).unwrap_or_default(),
                r.recipe(),
                r.pinned().map(short_digest).unwrap_or_default(),
                r.recipe(),
                r.recipe()
            ));
        }
        if let Some(e) = r.registry_error() {
            out.say(format_args!("warning: {e}"));
        }
    }
    for s in audit.stale() {
        out.say(format_args!("stale: images.lock pins {s}, which is no longer a recipe; `sparkctl images pin --all` keeps it, delete the entry by hand to drop it"));
    }
}

/// Pulls one recipe's pinned digest with a spinner; a local pin has nothing to pull.
async fn pull(docker: &bollard::Docker, lock: &Lock, recipe: &str, out: &Output) -> Result<()> {
    let pin = lock.images.get(recipe).ok_or_else(|| no_pin(recipe))?;
    if pin.source == crate::lock::Source::Local {
        out.say(format_args!(
            "{recipe}: pinned to a local image id (never pushed); nothing to pull"
        ));
        return Ok(());
    }
    let reference = pin.run_reference();
    let bar = out.spinner();
    let pulled = images::pull(docker, &reference, |done, layers, cur, total| {
        bar.message(format_args!(
            "{recipe}: {done}/{layers} layers, {:.1}/{:.1} MB",
            cur as f64 / 1e6,
            total as f64 / 1e6
        ));
    })
    .await;
    bar.finish();
    pulled?;
    out.say(format_args!("{recipe}: pulled {reference}"));
    Ok(())
}

pub(super) fn print_diff(d: &images::ImageDiff, out: &Output) {
    let mut t = out.table();
    t.set_header(vec!["", "OLD", "NEW"]);
    let rows = [
        (
            "created",
            d.old_image().created().unwrap_or_default().to_string(),
            d.new_image().created().unwrap_or_default().to_string(),
        ),
        (
            "image id",
            short_digest(d.old_image().id()),
            short_digest(d.new_image().id()),
        ),
        (
            "platform",
            d.old_image().platform().to_string(),
            d.new_image().platform().to_string(),
        ),
        (
            "layers",
            d.old_image().layers().to_string(),
            d.new_image().layers().to_string(),
        ),
        (
            "size",
            format!("{:.1} MB", d.old_image().size() as f64 / 1e6),
            format!("{:.1} MB", d.new_image().size() as f64 / 1e6),
        ),
    ];
    for (what, old, new) in rows {
        t.add_row(vec![what.to_string(), old, new]);
    }
    let layers = [("-", d.layers_only_old()), ("+", d.layers_only_new())];
    for (sign, list) in layers {
        for l in list {
            let (old, new) = if sign == "-" {
                (short_digest(l), "-".into())
            } else {
                ("-".into(), short_digest(l))
            };
            t.add_row(vec![format!("layer {sign}"), old, new]);
        }
    }
    let changed = [("label", d.labels()), ("env", d.env())];
    for (what, pairs) in changed {
        for (k, (o, n)) in pairs {
            t.add_row(vec![
                format!("{what} {k}"),
                o.clone().unwrap_or("-".into()),
                n.clone().unwrap_or("-".into()),
            ]);
        }
    }
    out.print_table(&t);
}

/// `images history NAME`: one row per digest, oldest first, and what keeps it here.
fn print_history(h: &History, newest: usize, out: &Output) {
    let stays = images::retain::retained(h, newest);
    if out.json {
        out.print_json(&HistoryDoc {
            history: h,
            keep_newest: newest,
            retained: &stays,
        });
        return;
    }
    let order = match h.order {
        image_history::Order::Created => "oldest build first",
        image_history::Order::FirstSeen => {
            "in the order this machine first saw them (some build times are unknown)"
        }
    };
    out.say(format_args!(
        "{}: {} — {} digest(s), {order}",
        h.recipe,
        h.reference,
        h.entries.len()
    ));
    let mut t = out.table();
    t.set_header(vec![
        "DIGEST",
        "CREATED",
        "FIRST SEEN",
        "HOW",
        "RUNS",
        "HERE",
        "STAYS",
    ]);
    for e in &h.entries {
        let how: Vec<&str> = e.seen.iter().map(|s| s.as_str()).collect();
        let runs = match e.runs.last() {
            Some(last) => format!("{} (last {} {})", e.runs.len(), last.run_id, last.outcome),
            None => "-".into(),
        };
        let why = stays
            .get(&e.digest)
            .map_or("no (prune removes it)".into(), |w| {
                w.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            });
        t.add_row(vec![
            short_digest(&e.digest),
            e.created
                .as_deref()
                .map_or("-".into(), |c| c.chars().take(19).collect()),
            e.first_seen.clone(),
            how.join(", "),
            runs,
            if e.present { "yes".into() } else { "no".into() },
            why,
        ]);
    }
    out.print_table(&t);
    for d in &h.damaged {
        out.warn(d);
    }
}

/// `images history --json`: the history and which digests stay here, and why.
#[derive(serde::Serialize)]
struct HistoryDoc<'a> {
    history: &'a History,
    keep_newest: usize,
    retained: &'a std::collections::BTreeMap<String, Vec<images::retain::Why>>,
}
