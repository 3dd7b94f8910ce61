//! One answer judged as it streams through the front door: the same checks as the
//! benchmark's (`bench::quality`: empty, markdown, thinking leak, tool calls left as
//! `<tool_call>` text, `finish_reason: length`, a repetition loop or garbled text), run on
//! the deltas the metering already parsed, over a bounded window of the text: no body is
//! copied whole, and the cost per token is a few small searches.

use std::time::Instant;

use crate::bench::degenerate::{Degeneracy, Scanner};
use crate::bench::quality::{markdown_line, MARKDOWN_MARKS, THINKING_MARKS, TOOL_CALL_MARK};
use crate::bench::suite::Check;

/// Text kept from the answer's start, for the evidence.
const HEAD: usize = 160;
/// The recent text kept: trimmed back to `KEEP` bytes once over `RECENT`.
const RECENT: usize = 512;
const KEEP: usize = 192;
/// The longest mark looked for, less one: how far back a search starts to find a mark
/// split across two deltas.
const MARK_REACH: usize = 17;
/// A line is judged on its first bytes (after its indent): this many, or all of it once
/// it ends.
const LINE_DECIDES: usize = 24;

/// What the request asked that its answer is judged against.
#[derive(Debug, Clone, Copy, Default)]
pub struct Asked {
    /// Tools were offered: a tool call left in the content is a fault.
    pub(in crate::server) tools: bool,
    /// Sampled greedily (temperature 0): two servers of one model should answer alike, so
    /// a rollout compares the candidate's words with production's.
    pub(in crate::server) deterministic: bool,
    /// Whose API: chat, Anthropic Messages, OpenAI Responses (`agents`).
    pub(in crate::server) api: crate::agents::Api,
}

/// The most of an answer's text a rollout keeps to compare two answers: the start of an
/// answer decides whether they agree, and memory stays bounded per pair.
pub(crate) const KEPT_TEXT: usize = 4096;

/// The text-side state: marks found, the current line, the degenerate-output scanner.
#[derive(Default)]
struct Text {
    head: String,
    recent: String,
    /// Whether text before `recent` was dropped.
    trimmed: bool,
    chars: usize,
    /// Where the current line starts in `recent`, until it is judged.
    line: Option<usize>,
    markdown: bool,
    thinking: bool,
    tool_text: bool,
    scan: Scanner,
}

fn floor_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

impl Text {
    fn push(&mut self, piece: &str) {
        if piece.is_empty() {
            return;
        }
        if self.chars == 0 {
            self.line = Some(0);
        }
        self.chars += piece.chars().count();
        if self.head.len() < HEAD {
            let take = floor_boundary(piece, (HEAD - self.head.len()).min(piece.len()));
            self.head.push_str(&piece[..take]);
        }
        let from = self.recent.len();
        self.recent.push_str(piece);
        let region = &self.recent[floor_boundary(&self.recent, from.saturating_sub(MARK_REACH))..];
        self.markdown |= MARKDOWN_MARKS.iter().any(|m| region.contains(m));
        self.thinking |= THINKING_MARKS.iter().any(|m| region.contains(m));
        self.tool_text |= region.contains(TOOL_CALL_MARK);
        self.lines(from);
        self.scan.feed(piece);
        if self.recent.len() > RECENT {
            if let Some(start) = self.line {
                // A line this long was judged at its first bytes already.
                self.judge_line(start, self.recent.len());
            }
            let cut = floor_boundary(&self.recent, self.recent.len() - KEEP);
            self.recent.drain(..cut);
            self.trimmed = true;
        }
    }

    /// Judges the lines that ended in the new text, and the open one once long enough.
    fn lines(&mut self, from: usize) {
        let mut at = from;
        while let Some(nl) = self.recent[at..].find('\n') {
            let end = at + nl;
            if let Some(start) = self.line {
                self.judge_line(start, end);
            }
            self.line = Some(end + 1);
            at = end + 1;
        }
        if let Some(start) = self.line {
            let open = self.recent[start..].trim_start_matches([' ', '\t']);
            if open.len() >= LINE_DECIDES {
                self.judge_line(start, self.recent.len());
            }
        }
    }

    fn judge_line(&mut self, start: usize, end: usize) {
        self.markdown |= markdown_line(&self.recent[start..end]);
        self.line = None;
    }

    fn finish(&mut self) {
        if let Some(start) = self.line {
            self.judge_line(start, self.recent.len());
        }
        self.scan.finish();
    }

    /// The answer's start and end, control characters escaped, at most ~400 characters.
    fn evidence(&self) -> String {
        let whole = !self.trimmed && self.recent.len() <= 2 * HEAD;
        let text = if whole {
            self.recent.clone()
        } else {
            let tail = &self.recent
                [floor_boundary(&self.recent, self.recent.len().saturating_sub(HEAD))..];
            let tail = &tail[tail.char_indices().nth(1).map_or(0, |(i, _)| i)..];
            format!("{} … {}", self.head, tail)
        };
        escape(&text)
    }
}

/// Control characters (an ANSI escape in a model's answer, say) shown as escapes, never
/// sent to a terminal as they are.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            c if c.is_control() => out.extend(c.escape_default()),
            c => out.push(c),
        }
    }
    out
}

/// How one answer went, as the live window keeps it.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// The server failed it (an error status, a stream cut or ended by an error event).
    pub(in crate::server) error: Option<String>,
    /// Each check that applied, and whether it passed (for thinking_leak: whether it
    /// leaked, as the benchmark counts it).
    pub(in crate::server) checks: Vec<(Check, bool)>,
    pub(in crate::server) degenerate: Option<Degeneracy>,
    pub(in crate::server) ttft_ms: Option<f64>,
    pub(in crate::server) ttfo_ms: Option<f64>,
    pub(in crate::server) e2el_ms: f64,
    pub(in crate::server) tpot_ms: Option<f64>,
    pub(in crate::server) decode_tps: Option<f64>,
    /// The answer's text (start and end, escaped), kept when a check failed.
    pub(in crate::server) evidence: Option<String>,
    /// Its first `KEPT_TEXT` bytes, kept when asked (a rollout's pair).
    pub(in crate::server) text: Option<String>,
}

impl Verdict {
    /// A request the server failed.
    pub(crate) fn failed(arrived: Instant, why: String) -> Verdict {
        Verdict {
            error: Some(why),
            checks: Vec::new(),
            degenerate: None,
            ttft_ms: None,
            ttfo_ms: None,
            e2el_ms: arrived.elapsed().as_secs_f64() * 1e3,
            tpot_ms: None,
            decode_tps: None,
            evidence: None,
            text: None,
        }
    }

    /// Whether `check` applied and failed.
    pub(crate) fn fails(&self, check: Check) -> bool {
        self.checks
            .iter()
            .any(|(c, passed)| *c == check && (*passed == (check == Check::ThinkingLeak)))
    }
}

/// One streamed answer being read.
pub struct Answer {
    asked: Asked,
    arrived: Instant,
    first_token: Option<Instant>,
    first_output: Option<Instant>,
    last_token: Option<Instant>,
    /// Tokens after the first (decode speed).
    later_tokens: u64,
    text: Text,
    tool_calls: bool,
    finish: Option<String>,
    /// The text so far, up to `KEPT_TEXT` bytes, when it is kept.
    kept: Option<String>,
    /// Read whole at its end (not streamed): it has no first-token time of its own.
    whole: bool,
}

impl Answer {
    pub fn new(asked: Asked, arrived: Instant) -> Answer {
        Answer {
            asked,
            arrived,
            first_token: None,
            first_output: None,
            last_token: None,
            later_tokens: 0,
            text: Text::default(),
            tool_calls: false,
            finish: None,
            kept: None,
            whole: false,
        }
    }

    /// Marks it read whole: its times are the whole answer's, not its first token's.
    pub(crate) fn whole(&mut self) {
        self.whole = true;
    }

    /// Keeps the answer's first `KEPT_TEXT` bytes for its verdict (a rollout compares them).
    pub(crate) fn keeping_text(mut self) -> Answer {
        self.kept = Some(String::new());
        self
    }

    /// One chunk's delta: its content, whether it carried reasoning or a tool call, its
    /// finish reason, and how many tokens it carried (0: none).
    pub fn delta(&mut self, d: Delta<'_>, now: Instant) {
        if let Some(text) = d.content {
            self.text.push(text);
            if let Some(k) = self.kept.as_mut().filter(|k| k.len() < KEPT_TEXT) {
                k.push_str(&text[..floor_boundary(text, (KEPT_TEXT - k.len()).min(text.len()))]);
            }
        }
        self.tool_calls |= d.tool_call;
        if let Some(f) = d.finish {
            self.finish = Some(f.to_string());
        }
        if d.tokens == 0 {
            return;
        }
        if self.first_token.is_none() {
            self.first_token = Some(now);
            self.later_tokens += d.tokens.saturating_sub(1);
        } else {
            self.later_tokens += d.tokens;
        }
        let output = d.content.is_some_and(|t| !t.is_empty()) || d.tool_call;
        if output && self.first_output.is_none() {
            self.first_output = Some(now);
        }
        self.last_token = Some(now);
    }

    /// The answer ended as the server meant it to: its verdict.
    pub fn end(mut self) -> Verdict {
        self.text.finish();
        let t = &self.text;
        // Cut by max_tokens after some tokens (a reasoning model still thinking): the
        // `finished` check says so; it is not an empty answer.
        let cut_thinking = self.finish.as_deref() == Some("length") && self.first_token.is_some();
        let empty = t.head.trim().is_empty()
            && t.recent.trim().is_empty()
            && !self.tool_calls
            && !cut_thinking;
        let degenerate = t.scan.verdict();
        let mut checks = vec![
            (Check::NonEmpty, !empty),
            (Check::NoMarkdown, !t.markdown),
            (Check::ThinkingLeak, t.thinking),
            (Check::NoLoop, degenerate.is_none()),
            (Check::Finished, self.finish.as_deref() != Some("length")),
        ];
        // Offered tools, it called one or wrote one out: extracted, or left as text.
        if self.asked.tools && (self.tool_calls || t.tool_text) {
            checks.push((Check::ToolCalls, self.tool_calls && !t.tool_text));
        }
        let ms = |a: Instant, b: Instant| b.saturating_duration_since(a).as_secs_f64() * 1e3;
        let decoding = match (self.first_token, self.last_token) {
            (Some(a), Some(b)) if self.later_tokens > 0 && b > a => {
                Some((ms(a, b), self.later_tokens as f64))
            }
            _ => None,
        };
        let mut v = Verdict {
            error: None,
            degenerate,
            ttft_ms: (self.first_token.filter(|_| !self.whole)).map(|t| ms(self.arrived, t)),
            ttfo_ms: (self.first_output.filter(|_| !self.whole)).map(|t| ms(self.arrived, t)),
            e2el_ms: ms(self.arrived, Instant::now()),
            tpot_ms: decoding.map(|(span, n)| span / n),
            decode_tps: decoding.map(|(span, n)| n / (span / 1e3)),
            evidence: None,
            text: self.kept.take(),
            checks,
        };
        if v.checks.iter().any(|(c, _)| v.fails(*c)) {
            v.evidence = Some(t.evidence());
        }
        v
    }
}

/// What one chunk carried, as the metering parsed it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Delta<'a> {
    pub content: Option<&'a str>,
    pub tool_call: bool,
    pub finish: Option<&'a str>,
    pub tokens: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::quality::{has_markdown, leaks_thinking};

    fn judge(pieces: &[&str], asked: Asked, tool_call: bool, finish: &str) -> Verdict {
        let mut a = Answer::new(asked, Instant::now());
        for p in pieces {
            a.delta(
                Delta {
                    content: Some(p),
                    tokens: 1,
                    ..Default::default()
                },
                Instant::now(),
            );
        }
        a.delta(
            Delta {
                tool_call,
                finish: Some(finish),
                tokens: u64::from(tool_call),
                ..Default::default()
            },
            Instant::now(),
        );
        a.end()
    }

    fn words(text: &str) -> Vec<String> {
        text.split_inclusive(' ').map(str::to_string).collect()
    }

    /// Every split of these answers gives the benchmark's verdict on the whole text.
    #[test]
    fn streamed_checks_agree_with_the_benchmarks_on_whole_answers() {
        let long_md = format!("{} \n## Later header\nmore", "word ".repeat(150));
        let cases = [
            "Tokyo is the capital of Japan.",
            "## Tokyo\nIt is big.",
            "It is **big**.",
            "Options:\n- one\n- two",
            "1. first\n2. second",
            "I paid $5 - no, $6.",
            "<think>hmm</think>Tokyo",
            "Sure. Thinking Process: first",
            "I think it is Tokyo.",
            "   * indented bullet",
            long_md.as_str(),
        ];
        for text in cases {
            for step in [1usize, 2, 3, 5, 64] {
                let chars: Vec<char> = text.chars().collect();
                let pieces: Vec<String> = chars.chunks(step).map(|c| c.iter().collect()).collect();
                let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
                let v = judge(&refs, Asked::default(), false, "stop");
                assert_eq!(
                    v.fails(Check::NoMarkdown),
                    has_markdown(text),
                    "{text:?} / {step}"
                );
                assert_eq!(
                    v.fails(Check::ThinkingLeak),
                    leaks_thinking(text),
                    "{text:?} / {step}"
                );
            }
        }
    }

    #[test]
    fn loops_empties_truncation_and_tool_text_are_faults_with_evidence() {
        let looping = words(&format!(
            "Sure, here it is. {}",
            "and then it went on ".repeat(8)
        ));
        let refs: Vec<&str> = looping.iter().map(String::as_str).collect();
        let v = judge(&refs, Asked::default(), false, "length");
        assert!(v.fails(Check::NoLoop) && v.fails(Check::Finished), "{v:?}");
        assert!(matches!(v.degenerate, Some(Degeneracy::Loop { .. })));
        assert!(v
            .evidence
            .as_deref()
            .unwrap()
            .starts_with("Sure, here it is."));
        let v = judge(&[], Asked::default(), false, "stop");
        assert!(v.fails(Check::NonEmpty));
        // A tool call extracted passes; left as text it fails; not offered, not judged.
        let tools = Asked {
            tools: true,
            ..Default::default()
        };
        let v = judge(&[], tools, true, "tool_calls");
        assert!(
            !v.fails(Check::ToolCalls) && !v.fails(Check::NonEmpty),
            "{v:?}"
        );
        let text =
            words("<tool_call>\n{\"name\": \"web_search\", \"arguments\": {}}\n</tool_call>");
        let refs: Vec<&str> = text.iter().map(String::as_str).collect();
        let v = judge(&refs, tools, false, "stop");
        assert!(v.fails(Check::ToolCalls), "{v:?}");
        assert!(v.evidence.unwrap().contains("<tool_call>\\n{"));
        let v = judge(&refs, Asked::default(), false, "stop");
        assert!(!v.checks.iter().any(|(c, _)| *c == Check::ToolCalls));
        // A healthy answer keeps no evidence.
        assert!(judge(&["Tokyo."], tools, false, "stop").evidence.is_none());
    }

    #[test]
    fn evidence_is_bounded_and_escaped() {
        let mut a = Answer::new(Asked::default(), Instant::now());
        let chunk = "\u{1b}[31mred\u{1b}[0m ".repeat(4);
        for _ in 0..2000 {
            a.delta(
                Delta {
                    content: Some(&chunk),
                    tokens: 1,
                    ..Default::default()
                },
                Instant::now(),
            );
        }
        let v = a.end();
        let e = v.evidence.expect("a loop keeps its evidence");
        assert!(e.chars().count() < 600, "{}", e.len());
        assert!(!e.contains('\u{1b}') && e.contains("\\u{1b}[31m"), "{e}");
        assert!(e.contains(" … "));
    }
}
