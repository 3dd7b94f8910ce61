//! Problems in files the user wrote: where (file, line, column, key), what, and the fix.

use std::fmt;
use std::path::PathBuf;

use super::Error;

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

pub(super) fn render_diagnostics(diags: &[Diagnostic]) -> String {
    diags
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

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
