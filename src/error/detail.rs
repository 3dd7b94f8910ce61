//! The typed detail some variants carry: what a name was looked for as, why an image was
//! wanted, what a registry, a server or a bisect's end said. Each says its part of the
//! message once.

use std::path::PathBuf;

use super::ErrorKind;

/// What a name was looked for as (`NoSuch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Thing {
    JobRecipe,
    Suite,
    EvalSet,
    /// A run id (`history show`, a bisect's end).
    Run,
    Container,
    Pid,
    /// A port nothing listens on.
    Listener,
    /// A job that never ran under this state dir.
    JobRun,
    /// A recipe with no pin in images.lock.
    Pin,
    /// A digest an image history does not hold.
    Digest,
    /// Captured traffic (`frontdoor capture on`) at a path.
    Capture,
}

impl Thing {
    pub(super) fn none(self, name: &str) -> String {
        match self {
            Thing::JobRecipe => format!("no job recipe named `{name}`"),
            Thing::Suite => format!("no suite `{name}`"),
            Thing::EvalSet => format!("no evaluation set `{name}`"),
            Thing::Run => format!("no run {name}"),
            Thing::Container => format!("no container {name}"),
            Thing::Pid => format!("no process with pid {name}"),
            Thing::Listener => format!("nothing listens on port {name}"),
            Thing::JobRun => format!("job {name} has not run here"),
            Thing::Pin => format!("{name} has no pin in images.lock"),
            Thing::Digest => format!("no digest matches {name}"),
            Thing::Capture => format!("nothing captured at {name}"),
        }
    }

    /// A recipe's name that is not one is the same fact as a server recipe's.
    pub(super) fn kind(self) -> ErrorKind {
        match self {
            Thing::JobRecipe => ErrorKind::UnknownRecipe,
            Thing::JobRun => ErrorKind::NotRunning,
            _ => ErrorKind::Usage,
        }
    }
}

/// Where to look for what `NoSuch` did not find, or what is near it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hint {
    None,
    /// Runs: `sparkctl history` lists them.
    History,
    /// A bisect's date from before `recipe`'s oldest digest (`oldest`: when it was first
    /// seen; None: never).
    BeforeOldest {
        recipe: String,
        oldest: Option<String>,
    },
    /// A run id of no run of `recipe` with an image.
    NoRunWithImage {
        recipe: String,
    },
    /// A digest: `recipe`'s image history lists them.
    ImageHistory {
        recipe: String,
    },
    /// A recipe with no pin (`reference`: its image): pin it, or allow it unpinned.
    PinOrAllow {
        recipe: String,
        reference: String,
    },
    /// A recipe with no pin, for a command that needs one.
    PinFirst {
        recipe: String,
    },
    /// A job that has not run here.
    RunJob {
        job: String,
    },
    /// A name not in `dir`; `near`: the did-you-mean over the names that are.
    NotIn {
        dir: PathBuf,
        near: String,
    },
    /// Neither a file (`file`: where it was looked for; `yaml`: as NAME.yaml) nor one of
    /// the `built_in`.
    NotFileNorBuiltIn {
        yaml: bool,
        file: PathBuf,
        built_in: Vec<String>,
    },
    /// A container: `docker ps` lists them.
    DockerPs,
    /// Captured traffic: capture it first.
    CaptureOn,
    /// A capture that holds no chat request.
    NoChatRequest,
}

impl std::fmt::Display for Hint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Hint::None => Ok(()),
            Hint::History => f.write_str("`sparkctl history` lists them"),
            Hint::BeforeOldest { recipe, oldest } => write!(
                f,
                "{recipe}'s image history has no digest from before then (its oldest was first \
                 seen {})",
                oldest.as_deref().unwrap_or("never")
            ),
            Hint::NoRunWithImage { recipe } => write!(
                f,
                "there is no run of {recipe} with an image by this id; `sparkctl history` lists \
                 runs"
            ),
            Hint::ImageHistory { recipe } => write!(
                f,
                "in {recipe}'s image history; `sparkctl images history {recipe}` lists them"
            ),
            Hint::PinOrAllow { recipe, reference } => write!(
                f,
                "run `sparkctl images pin {recipe}` (its image is {reference}; or pass \
                 --allow-unpinned, recorded with the run)"
            ),
            Hint::PinFirst { recipe } => write!(f, "`sparkctl images pin {recipe}` first"),
            Hint::RunJob { job } => {
                write!(
                    f,
                    "`sparkctl run {job}` starts it, `sparkctl jobs` lists runs"
                )
            }
            Hint::NotIn { dir, near } => write!(f, "not in {}; {near}", dir.display()),
            Hint::NotFileNorBuiltIn {
                yaml,
                file,
                built_in,
            } => write!(
                f,
                "not a {}file, not {}; built in: {}",
                if *yaml { ".yaml " } else { "" },
                file.display(),
                built_in.join(", ")
            ),
            Hint::DockerPs => f.write_str("`docker ps` lists the running ones"),
            Hint::CaptureOn => {
                f.write_str("`sparkctl frontdoor capture on`, then let production serve")
            }
            Hint::NoChatRequest => f.write_str(
                "no chat request: let production serve with `sparkctl frontdoor capture on`",
            ),
        }
    }
}

/// Why an image missing here was wanted, and so what gets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageNeed {
    /// A server or a job of this recipe starts from it: sparkctl never pulls then.
    Start { recipe: String },
    /// It is the recipe's pin; `differs` says what this machine has instead, if anything.
    Pinned { recipe: String, differs: String },
    /// `images pin --offline` pins what is here.
    OfflinePin,
    /// A command compares or reads it (`images diff`, an import).
    Read,
    /// It was pulled a moment ago, and the engine does not have it now.
    AfterPull,
    /// The chown step's helper container runs it.
    ChownHelper { owner: String, root: PathBuf },
}

impl ImageNeed {
    pub(super) fn whose(&self) -> String {
        match self {
            ImageNeed::Start { recipe } => format!(" (recipe {recipe})"),
            ImageNeed::Pinned { recipe, .. } => format!(" (the pin of {recipe})"),
            _ => String::new(),
        }
    }

    pub(super) fn fix(&self) -> String {
        match self {
            ImageNeed::Start { recipe } => format!(
                "; `sparkctl images pull {recipe}` gets it (sparkctl never pulls while it starts \
                 a server or a job)"
            ),
            ImageNeed::Pinned { recipe, differs } => format!(
                "{differs}; `sparkctl images pull {recipe}` gets it, or `sparkctl images pin \
                 {recipe}` accepts what is here"
            ),
            ImageNeed::OfflinePin => "; --offline pins only what is here: pin it online".into(),
            ImageNeed::Read => "; `sparkctl images pull` it first".into(),
            ImageNeed::AfterPull => {
                " after its pull: the engine did not keep it; pull it again, and check the \
                 engine's disk"
                    .into()
            }
            ImageNeed::ChownHelper { owner, root } => format!(
                "; giving the model files to {owner} needs a helper container of it: pull it, \
                 or run `sudo chown -R {owner} {}`",
                root.display()
            ),
        }
    }
}

/// What a server said, or did not, when asked which models it serves.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServerProblem {
    #[error("does not answer ({0}); start it first (`sparkctl start NAME`)")]
    Unreachable(String),
    #[error("answers GET /v1/models with {0}; is it still loading?")]
    Status(String),
    #[error("answers GET /v1/models with what is not a model list ({0})")]
    Unreadable(String),
    #[error("lists no model")]
    NoModel,
}

/// Why an end of a bisect cannot serve as one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndProblem {
    #[error("could not be measured ({0}); choose another end")]
    NotMeasured(String),
    #[error(
        "could not be told apart after {rounds} round(s): {detail}; nothing to bisect on this \
         figure (`--resume` measures it again; a larger --repeat or another --metric may tell \
         them apart)"
    )]
    Undecided { rounds: usize, detail: String },
    #[error("is not {role} by this measure: {detail}; nothing to bisect")]
    NotSo { role: &'static str, detail: String },
}

/// What a registry said about a reference.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryProblem {
    #[error("the registry has no such tag ({0}); check the image name in the recipe")]
    NoSuchTag(String),
    #[error(
        "cannot reach its registry ({0}); nothing was changed (`--offline` pins the digest this \
         machine already has)"
    )]
    Unreachable(String),
    #[error("the pull failed: {0}")]
    PullFailed(String),
    #[error(
        "was built on this machine and never pushed under that name: no registry moves its \
         tag, so there is nothing to follow; push it, or name the registry's tag in the recipe"
    )]
    NeverPushed,
    #[error(
        "the registry no longer holds this digest ({0}); it cannot be pulled back (a machine \
         that still has it can `docker save` it; `sparkctl images keep` keeps a digest here for good)"
    )]
    DigestGone(String),
}
