//! One error type for the library, and the exit code each kind maps to.
//!
//! Exit codes are part of the interface (scripts and cron jobs read them):
//! 0 success, 1 an operation failed, 2 bad input (nothing was changed),
//! 130 interrupted by Ctrl-C. So are the kinds (`ErrorKind`) `--json` prints: a failure
//! that recurs (an image not on this machine, an engine that does not answer, a setting or a
//! flag with a bad value, ...) is a variant with its message written once, in its `Display`
//! where the variant is declared, and one kind wherever it is met: callers pass facts (the
//! typed detail in this module's files), the variant's `Display` words them. `Usage` and
//! `Failed` carry the one-offs, each said where it happens; a test keeps the call sites
//! that word an error themselves few (at most 40, `tests.rs`).

mod detail;
mod diagnostic;
mod door;
mod engine;
mod flag;
mod model;
mod partway;
mod recipe;
mod report;
mod running;
mod setting;
mod trial;
mod unfit;

use std::path::PathBuf;

pub(crate) use detail::{EndProblem, Hint, ImageNeed, RegistryProblem, ServerProblem, Thing};
use diagnostic::render_diagnostics;
pub(crate) use diagnostic::Diagnostic;
pub(crate) use diagnostic::Location;
pub(crate) use door::{DoorProblem, Task};
pub(crate) use engine::{EngineNeed, NodeProblem, Reach};
pub(crate) use flag::FlagProblem;
pub(crate) use model::{ModelProblem, Unfresh};
pub(crate) use partway::{BisectStopped, Interruption, Undoing};
pub(crate) use recipe::RecipeProblem;
pub(crate) use report::Summary;
pub(crate) use running::{Gone, Refusal, Running, Stuck, Taken, Unconfirmed};
pub(crate) use setting::{Exposure, Want};
pub(crate) use trial::TryProblem;
pub(crate) use unfit::{RunFailure, Unfit};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// One or more problems in files the user wrote (recipes, suites, lock).
    #[error("{}", render_diagnostics(.0))]
    Invalid(Vec<Diagnostic>),
    /// Bad input that is not tied to a file position (an unknown recipe name, say).
    #[error("{0}")]
    Usage(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// An operation that was attempted and failed (server, engine, network).
    #[error("{0}")]
    Failed(String),
    /// A failure whose details the command already printed (e.g. `images audit --json`):
    /// exit 1, and only this summary on stderr, so stdout stays one document.
    #[error("{0}")]
    Reported(Summary),
    /// Ctrl-C: what was running has been stopped or left as the message says.
    #[error("{0}")]
    Interrupted(Interruption),
    /// A name that no recipe in `dir` has; `hint` is the did-you-mean over those that are.
    #[error("no recipe named `{name}` in {}; {hint}", dir.display())]
    UnknownRecipe {
        name: String,
        dir: PathBuf,
        hint: String,
    },
    /// A recipe name where sparkctl found no recipes directory at all.
    #[error(
        "no recipe named `{name}`: there is no recipes directory here (./recipes) nor at {0}; \
         run sparkctl inside a checkout, pass --recipes DIR (or set SPARKCTL_RECIPES), or put \
         recipes at {0}",
        dir.display()
    )]
    NoRecipesDir { name: String, dir: PathBuf },
    /// A name that is neither a recipe here nor a deployment that ran (`down NAME`).
    #[error("no recipe or deployment named `{name}`; {hint}")]
    UnknownName { name: String, hint: String },
    /// A command that needs the recipe's server running (`bench NAME`), and it is not.
    #[error("{name} is not running; `sparkctl start {name}` first (or give a URL)")]
    NotRunning { name: String },
    /// Nothing of `name` ever ran under this state dir (`logs NAME`).
    #[error(
        "no deployment of {name} has run under the state dir {}; `sparkctl status` lists what has",
        state_dir.display()
    )]
    NeverRan { name: String, state_dir: PathBuf },
    /// This machine's Docker Engine does not answer; `cause` is the client's own words.
    #[error(
        "cannot reach the Docker Engine ({cause}); is dockerd running and may this user use its \
         socket? `sparkctl doctor` checks the machine"
    )]
    EngineUnreachable { cause: Reach },
    /// A node's Docker Engine (a `nodes:` recipe) does not answer: `cause` is the client's
    /// words, or None when it did not answer in time.
    #[error(
        "node {node}: {}; is {} and the address right? `sparkctl doctor RECIPE` checks each of \
         its nodes",
        match cause {
            Some(cause) => format!("cannot reach its Docker Engine at {endpoint} ({cause})"),
            None => format!("its Docker Engine at {endpoint} did not answer within 5 s"),
        },
        if cause.is_some() { "dockerd running there," } else { "the node up" }
    )]
    NodeUnreachable {
        node: String,
        endpoint: String,
        cause: Option<String>,
    },
    /// Some nodes' engines do not answer (each named): nothing starts on the others either.
    #[error("not every node's engine answers; nothing was started:\n  {}", nodes.join("\n  "))]
    NodesUnreachable { nodes: Vec<String> },
    /// Another sparkctl holds the state lock (`StateLock`); `holder` is what it wrote there
    /// (its kind stays `lock_held`).
    #[error(
        "another sparkctl is changing state ({}); wait for it to finish, then retry",
        holder.as_deref().unwrap_or("holder unknown")
    )]
    StateLockHeld { holder: Option<String> },
    /// A rollout judges the model a flow would change: its `up` lent the state lock for the
    /// window, and the model stays its own (kind `lock_held`).
    #[error(
        "{candidate} is meeting model {model}'s traffic in a {mode} (its `up` waits for the \
         decision); wait for that `up` to end, or stop it (Ctrl-C), then retry"
    )]
    ModelInRollout {
        model: String,
        mode: &'static str,
        candidate: String,
    },
    /// The memory plan cannot be met; `plan` names the pool and what runs in it.
    #[error("{name} does not fit in memory{}: {plan}{}", unfit.when(), unfit.fix())]
    DoesNotFit {
        name: String,
        plan: String,
        unfit: Unfit,
    },
    /// The recipe's port answers for something else; `down` names the deployment to stop
    /// when it is one of sparkctl's.
    #[error("{recipe}: port {port} is taken by {owner}; {}", match down {
        Some(name) => format!("`sparkctl down {name}`"),
        None => "stop it, or give the recipe another server.port".to_string(),
    })]
    PortTaken {
        recipe: String,
        port: u16,
        owner: String,
        down: Option<String>,
    },
    /// The candidate's benchmark failed gates (or the server failed requests).
    #[error("{name} did not pass: {}", failed.join("; "))]
    RejectedByGates { name: String, failed: Vec<String> },
    /// The benchmark could not decide: neither promoted nor rejected.
    #[error(
        "{name} was not promoted and not rejected: {what} was inconclusive ({reason}); \
         production keeps serving; run `sparkctl up {name}` again"
    )]
    Inconclusive {
        name: String,
        what: &'static str,
        reason: String,
    },
    /// A variable of sparkctl's environment whose value it cannot use (`want`: what it
    /// can, and how to give it).
    #[error("{name}={value} {}", want.words(name))]
    Setting {
        name: &'static str,
        value: String,
        want: Want,
    },
    /// A flag (or flag-like argument) whose value cannot be used: why, and the fix.
    #[error("{}: {}", .0.flag(), .0)]
    BadFlag(FlagProblem),
    /// What a `try` cannot do, and the fix.
    #[error("{0}")]
    Try(TryProblem),
    /// A variable a recipe names for its server or job (`key`: where) that is not set here.
    #[error(
        "{recipe}: {key} names {name}, which is not set in your environment; export it (its \
         value is never printed) or remove it from the recipe; nothing was started"
    )]
    HostVarUnset {
        recipe: String,
        key: &'static str,
        name: String,
    },
    /// A step that stops what serves, not confirmed on a terminal nor allowed by `--yes`.
    #[error("{0}; confirm, or pass --yes (nothing was changed)")]
    NotConfirmed(Unconfirmed),
    /// A recipe that cannot do what was asked of it (a multi-node recipe bisected, a process
    /// recipe pinned, a model path that is not there): `why`, and the fix.
    #[error("{recipe}: {}", why.words(recipe))]
    RecipeCannot { recipe: String, why: RecipeProblem },
    /// A name that names nothing of its kind here (a job recipe, a suite, a run, a
    /// container, a process); `hint` says where to look or what is near.
    #[error("{}{}", what.none(name), hint_of(&hint.to_string()))]
    NoSuch {
        what: Thing,
        name: String,
        hint: Hint,
    },
    /// What the command works on is not running (a server to adopt, a job to stop).
    #[error("{0}")]
    Stopped(Gone),
    /// What was asked to start already runs (which instance); it is left as it is.
    #[error("{0}")]
    AlreadyRunning(Running),
    /// An image this machine does not have: sparkctl pulls only when asked to.
    #[error("image {image}{} is not on this machine{}", needed.whose(), needed.fix())]
    ImageMissing { image: String, needed: ImageNeed },
    /// A recipe asks for GPUs (`gpus`: as its server says, where it says) of an engine
    /// that cannot give containers any.
    #[error(
        "{recipe}{} asks for GPUs but this Docker Engine has no `nvidia` runtime; install the \
         NVIDIA Container Toolkit (nvidia-ctk runtime configure --runtime=docker) and restart \
         dockerd",
        gpus.as_ref().map_or(String::new(), |g| format!(" (server.gpus: {g})"))
    )]
    NoNvidiaRuntime {
        recipe: String,
        gpus: Option<String>,
    },
    /// A Docker Engine answered a call with an error (`doing`: the call, in words).
    #[error("{doing}: {cause}")]
    EngineCall { doing: String, cause: String },
    /// A registry said no, or did not answer (`reference`: what was asked of it).
    #[error("{reference}: {problem}")]
    Registry {
        reference: String,
        problem: RegistryProblem,
    },
    /// The front door does not answer on its control socket.
    #[error(
        "the front door does not answer on {} ({cause}); `sparkctl frontdoor start` starts it",
        socket.display()
    )]
    DoorUnreachable { socket: PathBuf, cause: String },
    /// The front door answered, but not as asked, or its process did not do what it should.
    #[error("the front door {0}")]
    DoorFailed(DoorProblem),
    /// The front door refused a request: the error it met, carried over its control socket
    /// with its kind (a full disk in the door is `io` to a script, not `failed`).
    #[error("the front door refused {route}: {message}")]
    DoorRefused {
        route: &'static str,
        kind: ErrorKind,
        message: String,
    },
    /// The front door running speaks another control protocol (`speaks`; None: one from
    /// before versions): an older sparkctl's, which outlived an upgrade of the binary.
    #[error(
        "the front door running is from another sparkctl (control protocol {}, this one speaks \
         {wants}); restart it onto this binary: `sparkctl frontdoor restart`",
        speaks.map_or("1".to_string(), |v| v.to_string())
    )]
    DoorTooOld { speaks: Option<u32>, wants: u32 },
    /// The front door would face the network without an API key (what it would do, and
    /// the other way out).
    #[error(
        "{} without an API key: anyone who reaches this machine could use the API, the live \
         page and /metrics. Put a key in a file only you can read and name it: \
         `(umask 077; mkdir -p ~/.config/sparkctl; head -c 32 /dev/urandom | base64 > \
         ~/.config/sparkctl/frontdoor.key)` (mode 600), then \
         SPARKCTL_FRONTDOOR_API_KEY_FILE=~/.config/sparkctl/frontdoor.key; clients send \
         `Authorization: Bearer <the key>`; {}",
        .0.what(),
        .0.then()
    )]
    OpenWithoutKey(Exposure),
    /// A member node of a `nodes:` recipe: what failed there.
    #[error("node {node}: {what}")]
    OnNode { node: String, what: NodeProblem },
    /// A model sparkctl will not serve: its producing job did not leave it whole or fresh.
    #[error("refusing the model {}: {why}", model.display())]
    ModelRefused { model: PathBuf, why: Unfresh },
    /// Something sparkctl refused to change or start, before anything was.
    #[error("{0}")]
    Refused(Refusal),
    /// A patch's expectations that do not hold for the model dir (one line each).
    #[error(
        "{} expectation(s) do not hold for {recipe}; nothing was changed:\n{}",
        failed.len(),
        failed.join("\n")
    )]
    ExpectationsFail { recipe: String, failed: Vec<String> },
    /// A server, by its URL, that does not answer its model listing as it should.
    #[error("the server at {url} {problem}")]
    Server { url: String, problem: ServerProblem },
    /// A process sparkctl stopped that did not end, even after SIGKILL.
    #[error("{0}")]
    NotEnded(Stuck),
    /// A path where sparkctl would write, taken by something else (`why`: what it is).
    #[error("{} {why}", path.display())]
    PathTaken { path: PathBuf, why: Taken },
    /// An end of a bisect that cannot serve as one (`role`: good or bad).
    #[error("the {role} end {digest} {problem}")]
    BadEnd {
        role: &'static str,
        digest: String,
        problem: EndProblem,
    },
    /// A state file that does not parse: never silently reset (`cause`: the parser's words).
    #[error(
        "state file {} is damaged ({cause}); move it aside and run `sparkctl status`",
        path.display()
    )]
    DamagedState { path: PathBuf, cause: String },
    /// The HTTP client could not be built (TLS roots, the resolver).
    #[error("cannot build the HTTP client: {cause}")]
    HttpClient { cause: String },
    /// A model asked for, or claimed, that the front door cannot serve as asked.
    #[error("{0}")]
    Model(ModelProblem),
    /// Work handed to another thread that never came back (it panicked or was cancelled).
    #[error("{what} was interrupted: {cause}")]
    TaskLost { what: Task, cause: String },
    /// A flow that failed after it began (`adopt`), and what was put back: its cause's kind.
    #[error("{} failed: {cause}\n  put back: {}", what.what(), what.put_back())]
    Undone { what: Undoing, cause: Box<Error> },
    /// `up` or `rollback` failed and took the way back: the cause (whose kind it keeps), then
    /// what was restored and what serves now.
    #[error("{0}")]
    RunFailed(Box<RunFailure>),
    /// A bisect stopped by an error or an interrupt (whose kind it keeps; any other cause
    /// is `failed`), its steps put back, kept for `--resume`.
    #[error("{0}")]
    BisectStopped(Box<BisectStopped>),
}

/// What kind of failure an error is: stable words for scripts (`--json` prints it as
/// `kind`), whatever its message says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    Usage,
    Invalid,
    UnknownRecipe,
    NotRunning,
    EngineUnreachable,
    LockHeld,
    DoesNotFit,
    PortTaken,
    RejectedByGates,
    Inconclusive,
    ImageMissing,
    AlreadyRunning,
    FrontdoorUnreachable,
    Interrupted,
    Io,
    Failed,
}

impl Error {
    pub(crate) fn exit_code(&self) -> i32 {
        // A run that failed after it began (its record says so) is an operation that
        // failed, whatever its cause; one that was interrupted exits as interrupted.
        match self {
            Error::RunFailed(run) if run.cause.is_interrupted() => return 130,
            Error::RunFailed(_) | Error::Undone { .. } => return 1,
            _ => {}
        }
        match self.kind() {
            // Bad input: nothing was changed.
            ErrorKind::Usage
            | ErrorKind::Invalid
            | ErrorKind::UnknownRecipe
            | ErrorKind::NotRunning
            | ErrorKind::AlreadyRunning => 2,
            // What shells report for a SIGINT'd command.
            ErrorKind::Interrupted => 130,
            _ => 1,
        }
    }

    pub(crate) fn kind(&self) -> ErrorKind {
        match self {
            Error::Usage(_)
            | Error::Setting { .. }
            | Error::BadFlag(_)
            | Error::HostVarUnset { .. }
            | Error::NotConfirmed(_)
            | Error::RecipeCannot { .. }
            | Error::OpenWithoutKey(_)
            | Error::Model(_) => ErrorKind::Usage,
            Error::NoSuch { what, .. } => what.kind(),
            Error::Stopped(_) => ErrorKind::NotRunning,
            Error::Server {
                problem: ServerProblem::Unreachable(_),
                ..
            } => ErrorKind::NotRunning,
            Error::PathTaken { .. } => ErrorKind::Usage,
            Error::AlreadyRunning(_) => ErrorKind::AlreadyRunning,
            Error::ImageMissing { .. } => ErrorKind::ImageMissing,
            Error::DoorUnreachable { .. } | Error::DoorTooOld { .. } => {
                ErrorKind::FrontdoorUnreachable
            }
            Error::DoorRefused { kind, .. } => *kind,
            Error::EngineCall { .. }
            | Error::Registry { .. }
            | Error::DoorFailed(_)
            | Error::OnNode { .. }
            | Error::NoNvidiaRuntime { .. }
            | Error::ModelRefused { .. }
            | Error::TaskLost { .. }
            | Error::Refused(_)
            | Error::HttpClient { .. }
            | Error::DamagedState { .. }
            | Error::Server { .. }
            | Error::NotEnded(_)
            | Error::BadEnd { .. }
            | Error::ExpectationsFail { .. } => ErrorKind::Failed,
            Error::Invalid(_) => ErrorKind::Invalid,
            Error::UnknownRecipe { .. }
            | Error::NoRecipesDir { .. }
            | Error::UnknownName { .. } => ErrorKind::UnknownRecipe,
            Error::NotRunning { .. } | Error::NeverRan { .. } => ErrorKind::NotRunning,
            Error::EngineUnreachable { .. }
            | Error::NodeUnreachable { .. }
            | Error::NodesUnreachable { .. } => ErrorKind::EngineUnreachable,
            Error::StateLockHeld { .. } | Error::ModelInRollout { .. } => ErrorKind::LockHeld,
            Error::DoesNotFit { .. } => ErrorKind::DoesNotFit,
            Error::PortTaken { .. } => ErrorKind::PortTaken,
            Error::RejectedByGates { .. } => ErrorKind::RejectedByGates,
            Error::Inconclusive { .. } => ErrorKind::Inconclusive,
            Error::Interrupted(_) => ErrorKind::Interrupted,
            Error::Io { .. } => ErrorKind::Io,
            Error::Failed(_) | Error::Reported(_) => ErrorKind::Failed,
            Error::Try(p) if p.is_usage() => ErrorKind::Usage,
            Error::Try(_) => ErrorKind::Failed,
            Error::RunFailed(run) => run.cause.kind(),
            Error::Undone { cause, .. } => cause.kind(),
            Error::BisectStopped(b) if b.cause.is_interrupted() => ErrorKind::Interrupted,
            Error::BisectStopped(_) => ErrorKind::Failed,
        }
    }

    /// Whether an interrupt is what this error says, however it was carried (a run that
    /// took the way back keeps it as its cause).
    pub(crate) fn is_interrupted(&self) -> bool {
        self.kind() == ErrorKind::Interrupted
    }

    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;

/// `; hint` when there is one.
fn hint_of(hint: &str) -> String {
    match hint.is_empty() {
        true => String::new(),
        false => format!("; {hint}"),
    }
}

/// An error with its causes: reqwest's own text ("error sending request") hides them.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests;
