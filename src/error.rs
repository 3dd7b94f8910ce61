//! One error type for the library, and the exit code each kind maps to.
//!
//! Exit codes are part of the interface (scripts and cron jobs read them):
//! 0 success, 1 an operation failed, 2 bad input (nothing was changed),
//! 130 interrupted by Ctrl-C. So are the kinds (`ErrorKind`) `--json` prints: each failure
//! users meet is a variant with its message written once, in its `Display`, where the
//! variant is declared.

use std::fmt;
use std::path::PathBuf;

/// Where in a file a problem is, and which key it concerns.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Location {
    pub(crate) file: PathBuf,
    pub(crate) line: Option<usize>,
    pub(crate) column: Option<usize>,
    /// Dotted key path such as `server.port` or `server.args[3]`.
    pub(crate) key: Option<String>,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(col) = self.column {
                write!(f, ":{col}")?;
            }
        }
        Ok(())
    }
}

/// A problem in user input, precise enough to fix without reading the source.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Diagnostic {
    pub(crate) location: Location,
    pub(crate) message: String,
    /// What to do about it.
    pub(crate) help: Option<String>,
}

impl Diagnostic {
    /// A problem at `at` (line, column) of `file`, about `key`.
    pub(crate) fn at(
        file: &std::path::Path,
        at: Option<(usize, usize)>,
        key: Option<String>,
        message: String,
        help: Option<String>,
    ) -> Diagnostic {
        Diagnostic {
            location: Location {
                file: file.to_path_buf(),
                line: at.map(|a| a.0),
                column: at.map(|a| a.1),
                key,
            },
            message,
            help,
        }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.location)?;
        if let Some(key) = &self.location.key {
            write!(f, "{key}: ")?;
        }
        write!(f, "{}", self.message)?;
        if let Some(help) = &self.help {
            write!(f, "\n  help: {help}")?;
        }
        Ok(())
    }
}

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
    Reported(String),
    /// Ctrl-C: what was running has been stopped or left as the message says.
    #[error("{0}")]
    Interrupted(String),
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
    EngineUnreachable { cause: String },
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
    /// Another sparkctl holds the state dir's lock; `holder` is what it wrote there.
    #[error("another sparkctl is changing state ({holder}); wait for it to finish, then retry")]
    LockHeld { holder: String },
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
        "{name} was not promoted and not rejected: the benchmark was inconclusive ({reason}); \
         production keeps serving; run `sparkctl up {name}` again"
    )]
    Inconclusive { name: String, reason: String },
    /// `up` or `rollback` failed and took the way back: the cause (whose kind it keeps), then
    /// what was restored and what serves now.
    #[error("{0}")]
    RunFailed(Box<RunFailure>),
}

/// A failed `up` or `rollback`, after the way back.
#[derive(Debug, thiserror::Error)]
#[error(
    "{what} {outcome}: {cause}\n  {notes}\n  serving on port {port}: {serving}\n  run record: {record}"
)]
pub struct RunFailure {
    pub(crate) what: String,
    pub(crate) outcome: String,
    pub(crate) cause: Error,
    pub(crate) notes: String,
    pub(crate) port: u16,
    pub(crate) serving: String,
    pub(crate) record: String,
}

/// Why a memory plan cannot be met, and so what to do about it.
#[derive(Debug, Clone, PartialEq)]
pub enum Unfit {
    /// Not even with every other server stopped.
    Alone,
    /// Only while these jobs (`NAME N GB`) hold their memory.
    BesideJobs(Vec<String>),
    /// These deployments must stop first (`start` never stops anything itself).
    MustStop(Vec<String>),
    /// A job: not even with every server stopped; the running jobs (`NAME N GB`) that hold
    /// the rest.
    JobAlone(Vec<String>),
    /// It fits the budget, but would leave less available than `SPARKCTL_MEMORY_RESERVE_GB`.
    UnderFloor,
}

impl Unfit {
    fn when(&self) -> String {
        match self {
            Unfit::Alone => " even alone".into(),
            Unfit::BesideJobs(jobs) => format!(" while job(s) {} run", jobs.join(", ")),
            Unfit::MustStop(_) => String::new(),
            Unfit::JobAlone(_) => " even with every server stopped".into(),
            Unfit::UnderFloor => " above the reserve".into(),
        }
    }

    fn fix(&self) -> String {
        match self {
            Unfit::Alone => "; lower its server.memory_gb (and what the server takes: \
                             --gpu-memory-utilization, -ngl, context size), give it more GPUs, \
                             or raise SPARKCTL_MEMORY_GB if the machine has more"
                .into(),
            Unfit::BesideJobs(_) => {
                "; wait for them (`sparkctl jobs`) or `sparkctl stop JOB`".into()
            }
            Unfit::MustStop(names) => {
                let stop: Vec<String> = names
                    .iter()
                    .map(|n| format!("`sparkctl down {n}`"))
                    .collect();
                format!("; stop {} first", stop.join(", "))
            }
            Unfit::JobAlone(held) if held.is_empty() => String::new(),
            Unfit::JobAlone(held) => format!("; running jobs hold {}", held.join(", ")),
            Unfit::UnderFloor => "; nothing was stopped or started. Free memory held outside \
                                  sparkctl's servers, lower its server.memory_gb, or lower \
                                  SPARKCTL_MEMORY_RESERVE_GB if the machine can spare it"
                .into(),
        }
    }
}

/// What kind of failure an error is: stable words for scripts (`--json` prints it as
/// `kind`), whatever its message says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ErrorKind {
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
    Interrupted,
    Io,
    Failed,
}

fn render_diagnostics(diags: &[Diagnostic]) -> String {
    diags
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

impl Error {
    pub(crate) fn exit_code(&self) -> i32 {
        // A run that failed after it began (its record says so) is an operation that
        // failed, whatever its cause.
        if let Error::RunFailed(_) = self {
            return 1;
        }
        match self.kind() {
            // Bad input: nothing was changed.
            ErrorKind::Usage
            | ErrorKind::Invalid
            | ErrorKind::UnknownRecipe
            | ErrorKind::NotRunning => 2,
            // What shells report for a SIGINT'd command.
            ErrorKind::Interrupted => 130,
            _ => 1,
        }
    }

    pub(crate) fn kind(&self) -> ErrorKind {
        match self {
            Error::Usage(_) => ErrorKind::Usage,
            Error::Invalid(_) => ErrorKind::Invalid,
            Error::UnknownRecipe { .. }
            | Error::NoRecipesDir { .. }
            | Error::UnknownName { .. } => ErrorKind::UnknownRecipe,
            Error::NotRunning { .. } | Error::NeverRan { .. } => ErrorKind::NotRunning,
            Error::EngineUnreachable { .. }
            | Error::NodeUnreachable { .. }
            | Error::NodesUnreachable { .. } => ErrorKind::EngineUnreachable,
            Error::LockHeld { .. } => ErrorKind::LockHeld,
            Error::DoesNotFit { .. } => ErrorKind::DoesNotFit,
            Error::PortTaken { .. } => ErrorKind::PortTaken,
            Error::RejectedByGates { .. } => ErrorKind::RejectedByGates,
            Error::Inconclusive { .. } => ErrorKind::Inconclusive,
            Error::Interrupted(_) => ErrorKind::Interrupted,
            Error::Io { .. } => ErrorKind::Io,
            Error::Failed(_) | Error::Reported(_) => ErrorKind::Failed,
            Error::RunFailed(run) => run.cause.kind(),
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A YAML file sparkctl reads (suite, lock) that does not parse: file, line, column, fix.
    pub(crate) fn yaml(file: &std::path::Path, e: &serde_yaml_ng::Error, help: &str) -> Error {
        let at = e.location();
        let text = e.to_string();
        Error::Invalid(vec![Diagnostic {
            location: Location {
                file: file.to_path_buf(),
                line: at.as_ref().map(|l| l.line()),
                column: at.as_ref().map(|l| l.column()),
                key: None,
            },
            // The position is in the location already.
            message: text
                .split(" at line ")
                .next()
                .unwrap_or_default()
                .to_string(),
            help: Some(help.to_string()),
        }])
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
