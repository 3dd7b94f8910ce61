//! What a recipe cannot do of what was asked of it (`Error::RecipeCannot`): the facts, and
//! the fix, worded here.

use std::path::PathBuf;

/// Why the recipe cannot, after `RECIPE: `.
#[derive(Debug)]
pub enum RecipeProblem {
    /// A docker recipe's operation asked of another runtime's.
    NotDocker,
    /// A process recipe's operation asked of another runtime's.
    NotProcess,
    /// A process recipe's binary that does not exist, or is not executable.
    Binary { path: PathBuf, exists: bool },
    /// A rollout (`mode`) with no production serving to compare with.
    RolloutWithoutProduction { mode: &'static str },
    /// A rollout (`mode`) whose candidate does not fit beside `production` (`memory`: the
    /// plan, described).
    RolloutDoesNotFit {
        mode: &'static str,
        production: String,
        memory: String,
    },
    /// A server recipe on the production port, which the front door owns.
    ProductionPort { port: u16 },
    /// A `model.path` (as written, expanded) that does not exist (`file`: the recipe).
    NoModel { path: String, file: PathBuf },
    /// The GPUs it asks for cannot be planned (`why`: the memory plan's words).
    Gpus { why: String },
    /// `bisect --builds` of a recipe without a `binary:` (`file`: the recipe).
    NoBinaryToBuild { file: PathBuf },
    /// A bisect of a multi-node recipe.
    MultiNodeBisect,
    /// A bisect of digests for a recipe that runs a host process (`file`: the recipe).
    HostProcessBisect { file: PathBuf },
    /// The recipe's image is not the one images.lock pinned for it.
    PinOfAnother { reference: String, pinned: String },
    /// `down` of a job recipe.
    IsAJob,
    /// `images pin` of a recipe that runs no container image.
    NoImage,
    /// `adopt` of a recipe not imported from a running server.
    NotImported,
    /// `adopt` of an import that found no port.
    NoImportedPort,
    /// `adopt` of a server (`origin`, described) on another port than production's.
    NotOnProductionPort {
        origin: String,
        port: u16,
        production_port: u16,
    },
    /// Model files not owned by `owner`, and no image for a helper container.
    NotOwned {
        paths: usize,
        root: PathBuf,
        owner: String,
    },
    /// A node group asked of a recipe without `nodes:`.
    NoNodes,
    /// A node group of an engine that does not run across nodes.
    NotAcrossNodes { engine: String },
    /// `nodes.members` with no member.
    NoMembers,
}

impl RecipeProblem {
    /// Why `recipe` cannot, and the fix.
    pub(super) fn words(&self, recipe: &str) -> String {
        match self {
            RecipeProblem::NotDocker => "it is not a docker recipe".into(),
            RecipeProblem::NotProcess => "it is not a process recipe".into(),
            RecipeProblem::Binary { path, exists } => format!(
                "binary {} {}; build it or fix `binary:` (or `python:`) in the recipe",
                path.display(),
                if *exists {
                    "is not executable"
                } else {
                    "does not exist"
                }
            ),
            RecipeProblem::RolloutWithoutProduction { mode } => format!(
                "a {mode} compares the candidate with production's answers, and no production \
                 serves; `sparkctl up {recipe} --no-rollout` makes it production; nothing was \
                 changed"
            ),
            RecipeProblem::RolloutDoesNotFit {
                mode,
                production,
                memory,
            } => format!(
                "a {mode} needs production and the candidate running side by side, and it does \
                 not fit beside production {production} ({memory}); with --no-rollout it is \
                 swapped in; nothing was changed"
            ),
            RecipeProblem::ProductionPort { port } => format!(
                "server.port is the production port {port}, which the front door owns; give the \
                 recipe its own port (the front door sends production's requests there)"
            ),
            RecipeProblem::NoModel { path, file } => format!(
                "model.path {path} does not exist ({}); download the model or fix the path",
                file.display()
            ),
            RecipeProblem::Gpus { why } => {
                format!("{why}; fix server.gpus or CUDA_VISIBLE_DEVICES")
            }
            RecipeProblem::NoBinaryToBuild { file } => format!(
                "--builds walks builds of a host binary; this recipe has no `binary:` of a \
                 process runtime ({})",
                file.display()
            ),
            RecipeProblem::MultiNodeBisect => {
                "a bisect starts one server per step; a multi-node recipe is not bisected".into()
            }
            RecipeProblem::HostProcessBisect { file } => format!(
                "a bisect walks the digests of a container image, or with --builds DIR the \
                 builds of a host binary; this recipe runs a host process ({})",
                file.display()
            ),
            RecipeProblem::PinOfAnother { reference, pinned } => format!(
                "the recipe names {reference} but images.lock pinned {pinned}; run `sparkctl \
                 images pin {recipe}`"
            ),
            RecipeProblem::IsAJob => {
                format!("it is a job: `sparkctl stop {recipe}` stops it (`down` is for servers)")
            }
            RecipeProblem::NoImage => {
                "it runs no container image (runtime process); nothing to pin".into()
            }
            RecipeProblem::NotImported => format!(
                "it was not imported from a running server; `sparkctl import {recipe} --port \
                 PORT` (or --pid, --container) reads the one to adopt"
            ),
            RecipeProblem::NoImportedPort => "its import found no port the server serves".into(),
            RecipeProblem::NotOnProductionPort {
                origin,
                port,
                production_port,
            } => format!(
                "{origin} serves port {port}, not the production port {production_port}; set \
                 SPARKCTL_PRODUCTION_PORT={port} to make it the production port, then adopt"
            ),
            RecipeProblem::NotOwned { paths, root, owner } => format!(
                "{paths} path(s) in {} are not owned by {owner}; without root that needs a \
                 helper container, and this recipe has no image: run `sudo chown -R {owner} {}`",
                root.display(),
                root.display()
            ),
            RecipeProblem::NoNodes => "it has no nodes: it runs on one engine".into(),
            RecipeProblem::NotAcrossNodes { engine } => format!(
                "engine {engine} does not run across nodes here; multi-node recipes use vllm"
            ),
            RecipeProblem::NoMembers => "nodes.members is empty".into(),
        }
    }
}
