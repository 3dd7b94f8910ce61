//! How results reach the terminal: plain text or JSON, colour only where it helps.

use std::io::{IsTerminal, Write};

use serde::Serialize;

use crate::error::Error;

/// Colour on a terminal unless NO_COLOR is set to anything non-empty (no-color.org).
pub(crate) fn color_for(stream: &impl IsTerminal) -> bool {
    stream.is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

pub(crate) struct Output {
    pub(crate) json: bool,
    pub(crate) color: bool,
}

impl Output {
    pub(crate) fn new(json: bool) -> Self {
        Output {
            json,
            color: color_for(&std::io::stdout()),
        }
    }

    pub(crate) fn print_json(&self, value: &impl Serialize) {
        let text = serde_json::to_string_pretty(value).expect("output types serialize");
        println!("{text}");
    }

    /// The start of every list of records: a warning per damaged record, then the records
    /// as JSON, or `none` when there are none. True when that said it all and no table is
    /// left to print.
    pub(crate) fn list_said_all<T: Serialize>(
        &self,
        rows: &[T],
        damaged: &[impl std::fmt::Display],
        none: impl FnOnce() -> String,
    ) -> bool {
        for d in damaged {
            eprintln!("warning: {d}");
        }
        if self.json {
            self.print_json(&rows);
        } else if rows.is_empty() {
            println!("{}", none());
        }
        self.json || rows.is_empty()
    }

    /// Bold when colour is on.
    pub(crate) fn bold(&self, text: &str) -> String {
        if self.color {
            format!("\x1b[1m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    /// Prints a table without the padding comfy-table leaves at line ends.
    pub(crate) fn print_table(&self, table: &comfy_table::Table) {
        println!("{}", table.trim_fmt());
    }

    pub(crate) fn table(&self) -> comfy_table::Table {
        let mut t = comfy_table::Table::new();
        t.load_style(comfy_table::presets::NOTHING);
        if !self.color {
            t.force_no_tty();
        }
        t
    }
}

/// Text that came from a file (a description, a name, a value quoted in a message) as a
/// terminal should get it: control characters (ESC and the rest of C0 and C1) and the
/// bidirectional overrides escaped as `\u{1b}`, so a recipe cannot recolour the terminal,
/// move its cursor or hide text. Newlines and tabs stay.
pub(crate) fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    let bad = |c: char| {
        (c.is_control() && c != '\n' && c != '\t')
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !text.contains(bad) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if bad(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// `sparkctl recipes list | head -1`: once `head` has its line, the next write to stdout
/// fails with EPIPE, and `println!` (and comfy-table, clap_complete) panic on it. That is
/// the reader's choice, not a fault: exit at once, silently, as a command ended by SIGPIPE
/// would. SIGPIPE itself stays ignored (Rust's default): restoring it would also kill
/// sparkctl mid-`up` when the Docker Engine's socket closes under a write.
pub(crate) fn exit_quietly_on_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let text = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if text.contains("Broken pipe") || text.contains("os error 32") {
            std::process::exit(super::BROKEN_PIPE_EXIT);
        }
        default(info);
    }));
}

/// Prints an error to stderr (as JSON on stdout when `--json`, so scripts get one document).
pub(crate) fn print_error(err: &Error, json: bool) {
    if json && !matches!(err, Error::Reported(_)) {
        let diagnostics = match err {
            Error::Invalid(d) => d.clone(),
            _ => Vec::new(),
        };
        let doc = serde_json::json!({
            "error": err.to_string(),
            "kind": err.kind(),
            "exit_code": err.exit_code(),
            "diagnostics": diagnostics,
        });
        println!("{}", serde_json::to_string_pretty(&doc).expect("json"));
        return;
    }
    let prefix = if color_for(&std::io::stderr()) {
        "\x1b[1;31merror\x1b[0m"
    } else {
        "error"
    };
    let mut stderr = std::io::stderr().lock();
    for line in printable(&err.to_string()).lines() {
        let _ = if line.starts_with("  ") {
            writeln!(stderr, "{line}")
        } else {
            writeln!(stderr, "{prefix}: {line}")
        };
    }
}
