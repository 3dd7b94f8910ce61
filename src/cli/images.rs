//! `sparkctl images pin|audit|pull|diff`: rendering over `images` and `lock`.

use std::path::Path;
use std::time::Duration;

use super::{ImagesCommand, Output};
use crate::error::{Error, Result};
use crate::images::{self, Finding};
use crate::lock::Lock;
use crate::recipe::RecipeSet;
use crate::units::short_digest;

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
            with_image(loaded).map(|t| vec![t]).ok_or_else(|| {
                Error::Usage(format!(
                    "{n} runs no container image (runtime process); nothing to pin"
                ))
            })
        }
        (None, false) => Err(Error::Usage(
            "name a recipe, or pass --all for every recipe with an image".into(),
        )),
    }
}

pub async fn run(
    recipes: &RecipeSet,
    lock_path: &Path,
    docker: &bollard::Docker,
    command: ImagesCommand,
    out: &Output,
) -> Result<()> {
    match command {
        ImagesCommand::Pin { name, all, offline } => {
            let targets = targets(recipes, name.as_deref(), all)?;
            let changes = images::pin(docker, lock_path, &targets, offline).await?;
            print_pins(&changes, lock_path, out);
            Ok(())
        }
        ImagesCommand::Audit => {
            let lock = Lock::load(lock_path)?.intact()?;
            let all = targets(recipes, None, true)?;
            let mut audit = images::audit(docker, &all, &lock).await?;
            // A pin whose recipe file is broken (skipped, with a warning) is not stale.
            audit.stale.retain(|name| !recipes.knows(name));
            print_audit(&audit, out);
            if audit.ok {
                Ok(())
            } else {
                Err(Error::Reported(
                    "images audit found drift, missing pins or local images that differ (see above)"
                        .into(),
                ))
            }
        }
        ImagesCommand::Pull { name, all } => {
            let lock = Lock::load(lock_path)?.intact()?;
            for (recipe, _) in targets(recipes, name.as_deref(), all)? {
                pull(docker, &lock, &recipe).await?;
            }
            Ok(())
        }
        ImagesCommand::Diff { name, old, new } => {
            let lock = Lock::load(lock_path)?.intact()?;
            let pin = lock.images.get(&name).ok_or_else(|| {
                Error::Usage(format!("{name} has no pin in {}", lock_path.display()))
            })?;
            let (old, new) = pin.diff_references(&name, old, new)?;
            let d = images::diff(docker, &old, &new).await?;
            if out.json {
                out.print_json(&d);
            } else {
                println!("{name}: {old}\n  -> {new}");
                print_diff(&d, out);
            }
            Ok(())
        }
    }
}

fn print_pins(changes: &[images::PinChange], lock_path: &Path, out: &Output) {
    if out.json {
        out.print_json(&changes);
        return;
    }
    for c in changes {
        let new = short_digest(&c.new);
        match &c.old {
            Some(d) if *d == c.new => println!("{}: {new} unchanged", c.recipe),
            Some(d) => println!("{}: {} -> {new}", c.recipe, short_digest(d)),
            None => println!(
                "{}: (none) -> {new} ({})",
                c.recipe,
                format!("{:?}", c.source).to_lowercase()
            ),
        }
    }
    println!("wrote {}", lock_path.display());
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
    let dated = |d: &Option<String>, c: &Option<String>| match (d, c) {
        (Some(d), Some(c)) => format!("{} ({})", short_digest(d), &c[..c.len().min(19)]),
        (Some(d), None) => short_digest(d),
        (None, _) => "-".into(),
    };
    for r in &audit.rows {
        let findings: Vec<String> = r
            .findings
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
            r.recipe.clone(),
            r.reference.clone(),
            dated(&r.pinned, &r.pinned_created),
            if r.present { "yes".into() } else { "no".into() },
            dated(&r.registry, &r.registry_created),
            if findings.is_empty() {
                "ok".into()
            } else {
                findings.join(", ")
            },
        ]);
    }
    out.print_table(&t);
    for r in &audit.rows {
        if r.findings.contains(&Finding::Drift) {
            println!(
                "drift: {} now points to {} in the registry; {} runs the pinned {} (`sparkctl images pin {}` moves it, `images diff {}` after a pull shows what changed)",
                r.reference,
                r.registry.as_deref().map(short_digest).unwrap_or_default(),
                r.recipe,
                r.pinned.as_deref().map(short_digest).unwrap_or_default(),
                r.recipe,
                r.recipe
            );
        }
        if let Some(e) = &r.registry_error {
            println!("warning: {e}");
        }
    }
    for s in &audit.stale {
        println!("stale: images.lock pins {s}, which is no longer a recipe; `sparkctl images pin --all` keeps it, delete the entry by hand to drop it");
    }
}

/// Pulls one recipe's pinned digest with a spinner; a local pin has nothing to pull.
async fn pull(docker: &bollard::Docker, lock: &Lock, recipe: &str) -> Result<()> {
    let pin = lock.images.get(recipe).ok_or_else(|| {
        Error::Usage(format!(
            "{recipe} has no pin; `sparkctl images pin {recipe}` first"
        ))
    })?;
    if pin.source == crate::lock::Source::Local {
        println!("{recipe}: pinned to a local image id (never pushed); nothing to pull");
        return Ok(());
    }
    let reference = pin.run_reference();
    let bar = indicatif::ProgressBar::new_spinner();
    bar.enable_steady_tick(Duration::from_millis(100));
    images::pull(docker, &reference, |done, layers, cur, total| {
        bar.set_message(format!(
            "{recipe}: {done}/{layers} layers, {:.1}/{:.1} MB",
            cur as f64 / 1e6,
            total as f64 / 1e6
        ));
    })
    .await?;
    bar.finish_and_clear();
    println!("{recipe}: pulled {reference}");
    Ok(())
}

fn print_diff(d: &images::ImageDiff, out: &Output) {
    let mut t = out.table();
    t.set_header(vec!["", "OLD", "NEW"]);
    let rows = [
        (
            "created",
            d.old.created.clone().unwrap_or_default(),
            d.new.created.clone().unwrap_or_default(),
        ),
        ("image id", short_digest(&d.old.id), short_digest(&d.new.id)),
        ("platform", d.old.platform.clone(), d.new.platform.clone()),
        ("layers", d.old.layers.to_string(), d.new.layers.to_string()),
        (
            "size",
            format!("{:.1} MB", d.old.size as f64 / 1e6),
            format!("{:.1} MB", d.new.size as f64 / 1e6),
        ),
    ];
    for (what, old, new) in rows {
        t.add_row(vec![what.to_string(), old, new]);
    }
    let changed = [("label", &d.labels), ("env", &d.env)];
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
