//! The one way out to the terminal, as cargo's `Shell` is: lines, warnings, notes, tables,
//! JSON, progress, questions and streamed logs. Whatever passes through here is escaped on
//! the way (see `printable`), so a recipe's value, a container's log line or a server's
//! answer cannot recolour the terminal, move its cursor or hide text, and no call site can
//! forget to escape: only the bold sparkctl adds itself is written as it is. Call sites
//! format (`out.say(format_args!(…))`); the writing happens here. tests/it/layout.rs keeps
//! `println!`, `stdout()` and `stderr()` out of every other file.

use std::borrow::Cow;
use std::fmt::Display;
use std::io::{IsTerminal, Write};
use std::time::Duration;

use serde::Serialize;

use crate::error::Error;

/// Colour on a terminal unless NO_COLOR is set to anything non-empty (no-color.org).
fn color_for(stream: &impl IsTerminal) -> bool {
    stream.is_terminal() && !crate::settings::environment().no_color
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Stream {
    Out,
    Err,
}

pub(crate) struct Output {
    pub(in crate::cli) json: bool,
    color: bool,
    /// `--quiet`: no progress (steps, notes, spinners, bars); results and warnings stay.
    quiet: bool,
    /// What unit tests read back instead of the terminal.
    #[cfg(test)]
    said: std::sync::Mutex<Vec<(Stream, String)>>,
}

impl Output {
    pub(crate) fn new(json: bool, quiet: bool) -> Self {
        Output {
            json,
            quiet,
            color: color_for(&std::io::stdout()),
            #[cfg(test)]
            said: Default::default(),
        }
    }

    /// `text` as it is, already escaped. println!/eprintln! (not write!): a closed pipe
    /// panics, and `exit_quietly_on_broken_pipe` turns that into the exit a shell expects.
    #[cfg(not(test))]
    fn put(&self, to: Stream, text: &str) {
        match to {
            Stream::Out => print!("{text}"),
            Stream::Err => eprint!("{text}"),
        }
    }

    #[cfg(test)]
    fn put(&self, to: Stream, text: &str) {
        self.said.lock().unwrap().push((to, text.to_string()));
    }

    /// A line on stdout.
    pub(crate) fn say(&self, line: impl Display) {
        self.put(Stream::Out, &format!("{}\n", printable(&line.to_string())));
    }

    /// Text on stdout as it is laid out (a YAML document, a diff, a log's tail): no
    /// newline is added.
    pub(crate) fn text(&self, text: impl Display) {
        self.put(Stream::Out, &printable(&text.to_string()));
    }

    /// A line on stdout in bold (a section's title).
    pub(crate) fn title(&self, title: impl Display) {
        let title = self.bold(&printable(&title.to_string()));
        self.put(Stream::Out, &format!("{title}\n"));
    }

    /// A line on stdout whose first words are bold: `plan for NAME`, `# recipe FILE`.
    pub(crate) fn titled(&self, head: impl Display, rest: impl Display) {
        let head = self.bold(&printable(&head.to_string()));
        let rest = printable(&rest.to_string()).into_owned();
        self.put(Stream::Out, &format!("{head} {rest}\n"));
    }

    /// `warning: …` on stderr.
    pub(crate) fn warn(&self, what: impl Display) {
        self.put(
            Stream::Err,
            &format!("warning: {}\n", printable(&what.to_string())),
        );
    }

    /// A line on stderr: how a long command is getting on, kept apart from its result on
    /// stdout; none with `--quiet`.
    pub(crate) fn note(&self, line: impl Display) {
        if !self.quiet {
            self.put(Stream::Err, &format!("{}\n", printable(&line.to_string())));
        }
    }

    pub(crate) fn print_json(&self, value: &impl Serialize) {
        let text = serde_json::to_string_pretty(value).expect("output types serialize");
        self.put(Stream::Out, &format!("{}\n", json_safe(&text)));
    }

    /// The start of every list of records: a warning per damaged record, then the records
    /// as JSON, or `none` when there are none. True when that said it all and no table is
    /// left to print.
    pub(crate) fn list_said_all<T: Serialize>(
        &self,
        rows: &[T],
        damaged: &[impl Display],
        none: impl FnOnce() -> String,
    ) -> bool {
        for d in damaged {
            self.warn(d);
        }
        if self.json {
            self.print_json(&rows);
        } else if rows.is_empty() {
            self.say(none());
        }
        self.json || rows.is_empty()
    }

    /// Bold when colour is on; only for text that is escaped already.
    fn bold(&self, text: &str) -> String {
        if self.color {
            format!("\x1b[1m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    /// Prints a table without the padding comfy-table leaves at line ends. Its cells are
    /// escaped as laid out (the library fills some tables); a cell that needed it is wider.
    pub(crate) fn print_table(&self, table: &comfy_table::Table) {
        self.say(table.trim_fmt());
    }

    pub(crate) fn table(&self) -> comfy_table::Table {
        let mut t = comfy_table::Table::new();
        t.load_style(comfy_table::presets::NOTHING);
        if !self.color {
            t.force_no_tty();
        }
        t
    }

    /// Asks `question` on a terminal (default no); anywhere else (a script, CI) the answer
    /// is no, and the flag that says yes (`--yes`) is the way.
    pub(crate) fn confirm(&self, question: &str) -> bool {
        std::io::stdin().is_terminal()
            && dialoguer::Confirm::new()
                .with_prompt(printable(question))
                .default(false)
                .interact()
                .unwrap_or(false)
    }

    /// A spinner on stderr (none when stderr is not a terminal, or `--quiet`) until `finish`.
    pub(crate) fn spinner(&self) -> Bar {
        if self.quiet {
            return self.hidden_bar();
        }
        let bar = indicatif::ProgressBar::new_spinner();
        bar.enable_steady_tick(Duration::from_millis(100));
        Bar(bar)
    }

    /// A bar on stderr drawn by `template` (indicatif's), set with `Bar::at`.
    pub(crate) fn bar(&self, template: &str) -> Bar {
        if self.quiet {
            return self.hidden_bar();
        }
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(indicatif::ProgressStyle::with_template(template).expect("a valid template"));
        bar.enable_steady_tick(Duration::from_millis(200));
        Bar(bar)
    }

    /// A bar drawn nowhere until `Bar::draw`: for output that may never have any.
    pub(crate) fn hidden_bar(&self) -> Bar {
        Bar(indicatif::ProgressBar::hidden())
    }

    /// Whether a bar would be seen (stderr is a terminal, and no `--quiet`); elsewhere
    /// progress is better told in lines (`note`).
    pub(crate) fn draws_progress(&self) -> bool {
        !self.quiet && std::io::stderr().is_terminal()
    }

    /// Where a container's or a process's output is copied to (`logs`): stdout, escaped.
    pub(crate) fn log_sink(&self) -> Escaping<std::io::Stdout> {
        Escaping::new(std::io::stdout(), false)
    }

    /// Bytes sparkctl generates from its own definitions (shell completions, the man
    /// page), written as they are: nothing in them came from outside.
    pub(crate) fn generated(&self) -> std::io::Stdout {
        std::io::stdout()
    }
}

/// A spinner or a progress bar on stderr; its messages are escaped.
pub(crate) struct Bar(indicatif::ProgressBar);

impl Bar {
    /// The words beside the bar (a container's last log line, a case's name).
    pub(crate) fn message(&self, message: impl Display) {
        self.0
            .set_message(printable(&message.to_string()).into_owned());
    }

    pub(crate) fn at(&self, done: u64, total: u64) {
        self.0.set_length(total);
        self.0.set_position(done);
    }

    /// Draws a hidden bar on stderr from now on, by `template`.
    pub(crate) fn draw(&self, template: &str) {
        self.0
            .set_draw_target(indicatif::ProgressDrawTarget::stderr());
        self.0.set_style(
            indicatif::ProgressStyle::with_template(template).expect("a valid template"),
        );
    }

    /// Steps done before sparkctl looked took no time of its clock.
    pub(crate) fn reset_eta(&self) {
        self.0.reset_eta();
    }

    /// Runs `f` (which prints) with the bar cleared, then draws it again.
    pub(crate) fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        self.0.suspend(f)
    }

    /// Clears it off the terminal.
    pub(crate) fn finish(&self) {
        self.0.finish_and_clear();
    }
}

/// A flow's steps: `==> ` lines on stderr, so that stdout holds the result alone.
impl crate::progress::Progress for Output {
    fn step(&self, line: &str) {
        self.note(format_args!("==> {line}"));
    }
}

/// A stream of bytes from elsewhere (a container's output), escaped as `printable` does
/// on its way to `inner`. Bytes that are not UTF-8 become U+FFFD; a character split
/// between two writes waits for its rest. `keep_esc` lets ESC through for a writer whose
/// every ESC is its own (see `log_records`).
pub(crate) struct Escaping<W: Write> {
    inner: W,
    pending: Vec<u8>,
    keep_esc: bool,
}

impl<W: Write> Escaping<W> {
    fn new(inner: W, keep_esc: bool) -> Self {
        Escaping {
            inner,
            pending: Vec::new(),
            keep_esc,
        }
    }

    fn escape(&self, text: &str, out: &mut String) {
        if self.keep_esc {
            escape_into(text, |c| c != '\x1b' && hostile(c), out);
        } else {
            escape_into(text, hostile, out);
        }
    }
}

impl<W: Write> Write for Escaping<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.pending.extend_from_slice(buf);
        let pending = std::mem::take(&mut self.pending);
        let mut out = String::with_capacity(pending.len());
        let mut rest = pending.as_slice();
        while !rest.is_empty() {
            match std::str::from_utf8(rest) {
                Ok(text) => {
                    self.escape(text, &mut out);
                    rest = &[];
                }
                Err(e) => {
                    let (good, bad) = rest.split_at(e.valid_up_to());
                    self.escape(std::str::from_utf8(good).expect("valid"), &mut out);
                    match e.error_len() {
                        Some(n) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &bad[n..];
                        }
                        // Cut short at the end: the rest of it comes with the next write.
                        None => {
                            rest = bad;
                            break;
                        }
                    }
                }
            }
        }
        self.pending = rest.to_vec();
        self.inner.write_all(out.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

impl<W: Write> Drop for Escaping<W> {
    fn drop(&mut self) {
        if !self.pending.is_empty() {
            let _ = self
                .inner
                .write_all(String::from_utf8_lossy(&self.pending).as_bytes());
        }
    }
}

/// Where tracing's records go (`-v`, warnings from the library): stderr, in colour on a
/// terminal (the bool). tracing-subscriber escapes ESC, BEL, BS, FF, DEL and C1 in the
/// records' values itself, so every ESC left is its own colour; the rest that `printable`
/// escapes (CR, the other C0 controls, the bidirectional overrides) is escaped here.
pub(crate) fn log_records() -> (bool, impl Fn() -> Escaping<std::io::Stderr> + Send + Sync) {
    let color = color_for(&std::io::stderr());
    (color, move || Escaping::new(std::io::stderr(), color))
}

/// What a terminal would act on rather than show: control characters (ESC and the rest
/// of C0 and C1, DEL) but newlines and tabs, and the bidirectional overrides and isolates.
fn hostile(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn escape_into(text: &str, bad: impl Fn(char) -> bool, out: &mut String) {
    for c in text.chars() {
        if bad(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
}

/// Text that came from elsewhere (a description, a name, a value quoted in a message) as
/// a terminal should get it: what it would act on escaped as `\u{1b}`, so a recipe cannot
/// recolour the terminal, move its cursor or hide text. Newlines and tabs stay.
fn printable(text: &str) -> Cow<'_, str> {
    if !text.contains(hostile) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    escape_into(text, hostile, &mut out);
    Cow::Owned(out)
}

/// A JSON document with what `printable` escapes written as `\uXXXX` escapes: the same
/// document to a parser (serde_json leaves C1 and the bidirectional overrides raw inside
/// strings; outside strings there are only ASCII and whitespace).
fn json_safe(text: &str) -> Cow<'_, str> {
    if !text.contains(hostile) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if hostile(c) {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
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

/// The one document `--json` prints for an error: stable words (`kind`) for scripts.
#[derive(Serialize)]
struct ErrorDoc {
    error: String,
    kind: crate::error::ErrorKind,
    exit_code: i32,
    diagnostics: Vec<crate::error::Diagnostic>,
}

/// Prints an error to stderr (as JSON on stdout when `--json`, so scripts get one document).
pub(crate) fn print_error(err: &Error, json: bool) {
    if json && !matches!(err, Error::Reported(_)) {
        let diagnostics = match err {
            Error::Invalid(d) => d.clone(),
            _ => Vec::new(),
        };
        let doc = ErrorDoc {
            error: err.to_string(),
            kind: err.kind(),
            exit_code: err.exit_code(),
            diagnostics,
        };
        let text = serde_json::to_string_pretty(&doc).expect("json");
        println!("{}", json_safe(&text));
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

#[cfg(test)]
mod tests {
    use super::*;

    const NASTY: &str = "qwen \x1b[31mred\x1b[0m \u{202e}gnp.exe\r\u{9b}2J";
    const SHOWN: &str = "qwen \\u{1b}[31mred\\u{1b}[0m \\u{202e}gnp.exe\\u{d}\\u{9b}2J";

    fn said(out: &Output) -> Vec<(Stream, String)> {
        std::mem::take(&mut out.said.lock().unwrap())
    }

    #[test]
    fn every_line_out_is_escaped_and_only_the_bold_is_raw() {
        let mut out = Output::new(false, false);
        out.color = true;
        out.say(format_args!("description: {NASTY}"));
        out.warn(NASTY);
        out.note(format_args!("==> {NASTY}"));
        out.titled("plan for", NASTY);
        out.text(format_args!("a: {NASTY}\n\tb\n"));
        assert_eq!(
            said(&out),
            [
                (Stream::Out, format!("description: {SHOWN}\n")),
                (Stream::Err, format!("warning: {SHOWN}\n")),
                (Stream::Err, format!("==> {SHOWN}\n")),
                (Stream::Out, format!("\x1b[1mplan for\x1b[0m {SHOWN}\n")),
                (Stream::Out, format!("a: {SHOWN}\n\tb\n")),
            ]
        );
    }

    /// A flow's steps go to stderr, whatever `--json` says; `--quiet` silences them but
    /// not the result nor a warning.
    #[test]
    fn steps_go_to_stderr_and_quiet_silences_only_them() {
        use crate::progress::Progress;
        for json in [false, true] {
            let out = Output::new(json, false);
            out.step("starting qwen");
            assert_eq!(said(&out), [(Stream::Err, "==> starting qwen\n".into())]);
        }
        let out = Output::new(false, true);
        out.step("starting qwen");
        out.note("following its output");
        out.say("served");
        out.warn("slow");
        assert_eq!(
            said(&out),
            [
                (Stream::Out, "served\n".into()),
                (Stream::Err, "warning: slow\n".into())
            ]
        );
        assert!(!out.draws_progress());
    }

    #[test]
    fn a_table_cell_from_a_recipe_is_escaped() {
        let out = Output::new(false, false);
        let mut t = out.table();
        t.add_row(vec!["qwen", NASTY]);
        out.print_table(&t);
        let lines = said(&out);
        assert!(lines[0].1.contains(SHOWN), "{lines:?}");
        assert!(!lines[0].1.contains('\x1b'), "{lines:?}");
    }

    #[test]
    fn json_stays_the_same_document_with_nothing_raw() {
        let out = Output::new(true, false);
        out.print_json(&std::collections::BTreeMap::from([("description", NASTY)]));
        let (to, text) = said(&out).remove(0);
        assert_eq!(to, Stream::Out);
        assert!(!text.contains(hostile), "{text:?}");
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back["description"], NASTY);
    }

    /// `sparkctl start` shows the container's last log line beside its spinner.
    #[test]
    fn the_spinner_shows_a_container_line_escaped() {
        let out = Output::new(false, false);
        let spinner = out.hidden_bar();
        spinner.message(format_args!("qwen: starting · 1.0 s · {NASTY}"));
        assert_eq!(
            spinner.0.message(),
            format!("qwen: starting · 1.0 s · {SHOWN}")
        );
    }

    #[test]
    fn logs_are_escaped_across_writes_even_inside_a_character() {
        let mut sink = Escaping::new(Vec::new(), false);
        let bytes = format!("{NASTY} é\n").into_bytes();
        let cut = bytes.len() - 2; // inside the two bytes of é
        sink.write_all(&bytes[..cut]).unwrap();
        sink.write_all(&bytes[cut..]).unwrap();
        sink.write_all(b"bad \xff byte\n").unwrap();
        let text = String::from_utf8(std::mem::take(&mut sink.inner)).unwrap();
        assert_eq!(text, format!("{SHOWN} é\nbad \u{fffd} byte\n"));
    }

    #[test]
    fn log_records_keep_their_own_colour_but_not_a_carriage_return() {
        let mut sink = Escaping::new(Vec::new(), true);
        sink.write_all(b"\x1b[33m WARN\x1b[0m gone\rx\n").unwrap();
        let text = String::from_utf8(std::mem::take(&mut sink.inner)).unwrap();
        assert_eq!(text, "\x1b[33m WARN\x1b[0m gone\\u{d}x\n");
    }
}
