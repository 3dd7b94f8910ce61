//! The standard output and error of sparkctl's own server processes: the front door and
//! the simulated engine (with the tools it stands in for, `ray status` and `sha256sum`).
//! They run detached and their supervisor points both streams at a log file, so what they
//! write here is their log, not a terminal's text; `sparkctl logs` shows it escaped,
//! through the CLI's output. A full disk must not stop a server, so a failed write is
//! dropped (println! would panic). Nothing else in the library writes to either stream.

use std::fmt::Arguments;
use std::io::Write;

/// A line on stdout.
pub(crate) fn out(line: Arguments) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Text on stdout as it came (another process's answer, lines and all).
pub(crate) fn text(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// A line on stderr: where an engine says why it stops.
pub(crate) fn err(line: Arguments) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}
