//! One error type for the library, and the exit code each kind maps to.
//!
//! Exit codes are part of the interface (scripts and cron jobs read them):
//! 0 success, 1 an operation failed, 2 bad input (nothing was changed),
//! 130 interrupted by Ctrl-C.

use std::fmt;
use std::path::PathBuf;

/// Where in a file a problem is, and which key it concerns.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Location {
    pub file: PathBuf,
    pub line: Option<usize>,
    pub column: Option<usize>,
    /// Dotted key path such as `server.port` or `server.args[3]`.
    pub key: Option<String>,
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
    pub location: Location,
    pub message: String,
    /// What to do about it.
    pub help: Option<String>,
}

impl Diagnostic {
    /// A problem at `at` (line, column) of `file`, about `key`.
    pub fn at(
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
}

fn render_diagnostics(diags: &[Diagnostic]) -> String {
    diags
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

impl Error {
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Invalid(_) | Error::Usage(_) => 2,
            Error::Io { .. } | Error::Failed(_) | Error::Reported(_) => 1,
            // What shells report for a SIGINT'd command.
            Error::Interrupted(_) => 130,
        }
    }

    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A YAML file sparkctl reads (suite, lock) that does not parse: file, line, column, fix.
    pub fn yaml(file: &std::path::Path, e: &serde_yaml_ng::Error, help: &str) -> Error {
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
pub fn chain(e: &dyn std::error::Error) -> String {
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
