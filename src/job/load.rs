//! Finding and loading job recipes: `recipes/jobs/*.yaml`, each parsed and checked.

use std::path::{Path, PathBuf};

use super::recipe::{JobRecipe, LoadedJob};
use crate::error::{Diagnostic, Error, Result};

/// `recipes/jobs/`, beside the serving recipes.
pub(crate) fn jobs_dir(recipes: &Path) -> PathBuf {
    recipes.join("jobs")
}

/// Every job recipe of `dir`, and the diagnostics of those that did not load. A missing
/// directory has none.
pub(crate) fn load_jobs(dir: &Path) -> Result<(Vec<LoadedJob>, Vec<Diagnostic>)> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), Vec::new())),
        Err(e) => return Err(Error::io(format!("cannot read {}", dir.display()), e)),
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file() && matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"))
        })
        .collect();
    paths.sort();
    let (mut good, mut bad) = (Vec::new(), Vec::new());
    for p in paths {
        match load_job(&p) {
            Ok(j) => good.push(j),
            Err(Error::Invalid(mut d)) => bad.append(&mut d),
            Err(e) => return Err(e),
        }
    }
    Ok((good, bad))
}

/// The job recipe called `name` in `dir`; an unknown name suggests the nearest.
pub(crate) fn find_job(dir: &Path, name: &str) -> Result<LoadedJob> {
    let path = dir.join(format!("{name}.yaml"));
    if path.is_file() {
        return load_job(&path);
    }
    let (jobs, _) = load_jobs(dir)?;
    if let Some(j) = jobs.into_iter().find(|j| j.recipe.name == name) {
        return Ok(j);
    }
    let names: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| {
                    let p = e.path();
                    (p.extension()? == "yaml").then(|| p.file_stem()?.to_str().map(String::from))?
                })
                .collect()
        })
        .unwrap_or_default();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    Err(Error::NoSuch {
        what: crate::error::Thing::JobRecipe,
        name: name.to_string(),
        hint: crate::error::Hint::NotIn {
            dir: dir.to_path_buf(),
            near: crate::recipe::did_you_mean(name, &names, "known jobs"),
        },
    })
}

/// Parses and checks one job recipe file.
pub(crate) fn load_job(path: &Path) -> Result<LoadedJob> {
    let bytes = std::fs::read(path).map_err(|e| {
        Error::Invalid(vec![Diagnostic::at(
            path,
            None,
            None,
            format!("cannot read this job recipe: {e}"),
            Some("check that the file exists and that you may read it".into()),
        )])
    })?;
    let prepared = crate::yaml::prepare(path, &bytes).map_err(|d| Error::Invalid(vec![*d]))?;
    let source = prepared.text.to_string();
    let recipe: JobRecipe = serde_yaml_ng::from_str(&source)
        .map_err(|e| Error::Invalid(vec![crate::recipe::from_yaml_error(path, &source, &e)]))?;
    let loaded = LoadedJob {
        recipe,
        path: path.to_path_buf(),
        source,
    };
    let diags = super::check::check(&loaded, &prepared.loose);
    if diags.is_empty() {
        Ok(loaded)
    } else {
        Err(Error::Invalid(diags))
    }
}
