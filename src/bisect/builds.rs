//! Builds of a host binary as a bisect's candidates (`--builds DIR`, for a `runtime:
//! process` recipe such as a hand-built `llama-server`): every executable file in DIR, or in
//! a directory right below it, with the file name of the recipe's `binary`, known by its
//! sha256 and ordered by modification time (when it was built). Each step runs the recipe
//! with `binary` set to that build.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::images::history::{Entry, History, Order};
use crate::lock::Source;
use crate::recipe::LoadedRecipe;

/// The builds as a history (digest: the sha256), and where each is.
pub(crate) fn history(
    loaded: &LoadedRecipe,
    dir: &Path,
) -> Result<(History, BTreeMap<String, PathBuf>)> {
    let r = &loaded.recipe;
    let binary = match (&r.binary, r.runtime()) {
        (Some(b), crate::recipe::Runtime::Process) => PathBuf::from(crate::recipe::expand_home(b)),
        _ => {
            return Err(Error::RecipeCannot {
                recipe: r.name.clone(),
                why: crate::error::RecipeProblem::NoBinaryToBuild {
                    file: loaded.path.clone(),
                },
            })
        }
    };
    let name = binary.file_name().unwrap_or_default();
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = Vec::new();
    let read = |d: &Path| {
        std::fs::read_dir(d).map_err(|e| Error::io(format!("cannot read {}", d.display()), e))
    };
    for e in read(dir)?.flatten() {
        let p = e.path();
        let candidate = if p.is_dir() { p.join(name) } else { p };
        let is_build =
            candidate.file_name() == Some(name) && crate::host::is_executable(&candidate);
        if let (true, Ok(meta)) = (is_build, std::fs::metadata(&candidate)) {
            found.push((meta.modified().unwrap_or(std::time::UNIX_EPOCH), candidate));
        }
    }
    found.sort();
    let mut paths: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut entries = Vec::new();
    for (modified, path) in found {
        let sha = sha256_of(&path)?;
        // The same bytes twice (a copy) are one build: the oldest.
        if paths.contains_key(&sha) {
            continue;
        }
        let secs = modified
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let at = crate::units::utc_stamp(secs);
        entries.push(Entry {
            digest: sha.clone(),
            registry: false,
            image_id: None,
            created: Some(at.clone()),
            first_seen: at.clone(),
            last_seen: at,
            seen: Vec::new(),
            pinned: false,
            runs: Vec::new(),
            kept: None,
            present: true,
        });
        paths.insert(sha, path);
    }
    if entries.len() < 2 {
        return Err(Error::BadFlag(crate::error::FlagProblem::TooFewBuilds {
            dir: dir.to_path_buf(),
            builds: entries.len(),
            name: name.to_string_lossy().into_owned(),
        }));
    }
    let h = History {
        recipe: r.name.clone(),
        reference: dir.display().to_string(),
        source: Source::Local,
        order: Order::Created,
        entries,
        damaged: Vec::new(),
    };
    Ok((h, paths))
}

/// A REF that names a build by its path stands for its sha256; others are left as they are.
pub(crate) fn ref_of(paths: &BTreeMap<String, PathBuf>, text: &str) -> String {
    let given = std::fs::canonicalize(text).ok();
    paths
        .iter()
        .find(|(_, p)| given.is_some() && std::fs::canonicalize(p).ok() == given)
        .map_or(text.to_string(), |(sha, _)| sha.clone())
}

fn sha256_of(path: &Path) -> Result<String> {
    use sha2::{Digest, Sha256};
    let mut f = std::fs::File::open(path)
        .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(format!("sha256:{}", crate::units::hex(&hasher.finalize())))
}
