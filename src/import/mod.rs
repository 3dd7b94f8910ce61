//! `sparkctl import`: a recipe from what a user already runs — a host process (by pid or by
//! the port it listens on), a container, or a pasted `docker run …` or server command line.
//! What is seen is gathered first (`Observed`), then shaped into a recipe the loader checks,
//! then written beside the others (temp + rename). Environment values are never read into
//! it: names only. What cannot be inferred is said in the file's comments.

mod container;
mod docker_run;
mod guess;
mod model_dir;
mod process;
pub(crate) mod record;
mod render;
pub(crate) mod secrets;
mod shape;
pub(crate) mod words;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::recipe::{ExtraMount, Gpus, Ipc, LoadedRecipe, Recipe};
use crate::units::ByteSize;

pub(crate) use record::Origin;

/// Where the recipe comes from, as the user named it.
#[derive(Debug, Clone)]
pub(crate) enum Source {
    Pid(u32),
    Port(u16),
    Container(String),
    /// A pasted `docker run …` line.
    DockerRun(String),
    /// A pasted host command line (`~/llama.cpp/build/bin/llama-server -m … --port 8003`).
    Command(String),
}

/// What was seen of a server, before it is a recipe.
#[derive(Debug, Clone)]
pub(crate) struct Observed {
    /// Said in the recipe's first comment: where it came from.
    from: String,
    launch: Seen,
    /// Variable names the server had set (values are never read).
    env_names: Vec<String>,
    /// Things seen that a recipe cannot carry, said in its comments.
    dropped: Vec<String>,
    /// The running server, for `adopt`; None for a pasted line.
    origin: Option<Origin>,
    /// Resident memory of the process (bytes), where it could be read.
    rss: Option<u64>,
}

impl Observed {
    pub(crate) fn launch(&self) -> &Seen {
        &self.launch
    }
}

#[derive(Debug, Clone)]
pub(crate) enum Seen {
    Process {
        /// argv[0] as a path (`~/` for the home dir).
        program: String,
        args: Vec<String>,
        cwd: Option<PathBuf>,
    },
    Container(ContainerSeen),
}

/// A container as `docker run` would create it.
#[derive(Debug, Clone, Default)]
pub(crate) struct ContainerSeen {
    /// The image as the user named it (a tag).
    image: String,
    /// The image id the container runs (running containers only).
    image_id: Option<String>,
    /// `--entrypoint`, or the image's; None: not known (a pasted line, image absent).
    entrypoint: Option<Vec<String>>,
    /// Whether `entrypoint` was set by the user rather than the image.
    entrypoint_given: bool,
    cmd: Vec<String>,
    mounts: Vec<ExtraMount>,
    ports: Vec<Published>,
    network_host: bool,
    gpus: Option<Gpus>,
    ipc: Option<Ipc>,
    shm_size: Option<ByteSize>,
    ulimits: BTreeMap<String, i64>,
    user: Option<String>,
}

/// One `-p [IP:]HOST:CONTAINER`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Published {
    host_ip: String,
    host_port: u16,
    container_port: u16,
}

/// A recipe made from what was seen, with what the file says around it.
#[derive(Debug, Clone)]
pub(crate) struct Draft {
    recipe: Recipe,
    /// What could not be inferred or carried: comments at the top of the file.
    unknown: Vec<String>,
    /// How what was seen became this recipe (port moved, host narrowed, …).
    notes: Vec<String>,
    /// Patch steps the model dir looks like it needs, as YAML lines to uncomment.
    suggested_patches: Vec<model_dir::Suggestion>,
    origin: Option<Origin>,
    /// The port the server was seen on: the production port `adopt` hands over.
    seen_port: Option<u16>,
    /// The secrets left out of the recipe (their values never written).
    left_out: secrets::LeftOut,
}

impl Draft {
    pub(crate) fn recipe(&self) -> &Recipe {
        &self.recipe
    }

    pub(crate) fn unknown(&self) -> &[String] {
        &self.unknown
    }

    pub(crate) fn origin(&self) -> Option<&Origin> {
        self.origin.as_ref()
    }

    pub(crate) fn seen_port(&self) -> Option<u16> {
        self.seen_port
    }

    pub(crate) fn left_out(&self) -> &secrets::LeftOut {
        &self.left_out
    }
}

/// What sparkctl knows about the machine while shaping a recipe.
pub(crate) struct Machine {
    pub(crate) production_port: u16,
}

/// Reads what `source` names. Containers go through the Docker Engine API; a pasted line is
/// only split into words, never run.
pub(crate) async fn observe(source: &Source, docker: Option<&bollard::Docker>) -> Result<Observed> {
    match source {
        Source::Pid(pid) => process::observe_pid(*pid),
        Source::Port(port) => process::observe_port(*port),
        Source::Container(id) => {
            let docker = docker.ok_or_else(|| Error::EngineUnreachable {
                cause: crate::error::Reach::Needed(crate::error::EngineNeed::Container {
                    doing: "inspect",
                    name: id.to_string(),
                }),
            })?;
            container::observe(docker, id).await
        }
        Source::DockerRun(line) => docker_run::observe(line, docker).await,
        Source::Command(line) => process::observe_line(line),
    }
}

/// The recipe `observed` describes, named `name`.
pub(crate) fn draft(name: &str, observed: Observed, machine: &Machine) -> Result<Draft> {
    shape::shape(name, observed, machine)
}

/// The file text: comments, then the recipe; checked with the recipe loader as if it were
/// already `path` (a recipe that does not load is a bug here, reported in full).
pub(crate) fn render(draft: &Draft, path: &Path) -> Result<(String, LoadedRecipe)> {
    let text = render::file(draft)?;
    let loaded = crate::recipe::parse_recipe(path, text.as_bytes())?;
    Ok((text, loaded))
}

/// Writes the recipe file (temp + rename); an existing file is kept unless `force`.
pub(crate) fn write(path: &Path, text: &str, force: bool) -> Result<()> {
    if path.exists() && !force {
        return Err(Error::PathTaken {
            path: path.to_path_buf(),
            why: crate::error::Taken::Exists,
        });
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
    }
    crate::state::write_atomic(path, text.as_bytes())
}

/// Pins the image a running container runs into the lock, under the recipe's name: its
/// registry digest when it came from one, else its image id. Returns the digest.
pub(crate) async fn pin_image(
    docker: &bollard::Docker,
    lock_path: &Path,
    recipe: &str,
    seen: &ContainerSeen,
    state: &crate::state::StateDir,
) -> Result<Option<String>> {
    let Some(id) = seen.image_id.as_deref() else {
        return Ok(None);
    };
    container::pin(docker, lock_path, recipe, &seen.image, id, state)
        .await
        .map(Some)
}

/// `~/…` for paths under the home dir, as recipes are written.
pub(crate) fn tilde(path: &str) -> String {
    crate::settings::environment().tilde(std::path::Path::new(path))
}

/// A recipe name when none is given: the served name, else the model's file or dir name,
/// else the engine's, in the characters recipe names allow.
pub(crate) fn default_name(recipe: &Recipe) -> String {
    let model = recipe.model.as_ref();
    let raw = model
        .and_then(|m| m.served_name.clone())
        .or_else(|| {
            let path = model?.path.trim_end_matches('/');
            let last = path.rsplit('/').next()?;
            Some(last.strip_suffix(".gguf").unwrap_or(last).to_string())
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| recipe.engine.as_str().to_string());
    let mut name: String = raw
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-._".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect();
    name = name.trim_start_matches(['-', '.', '_']).to_string();
    if name.is_empty() {
        name = recipe.engine.as_str().to_string();
    }
    name
}
