//! The per-answer quality checks: what a voice assistant's answer must and must not be.

use std::collections::BTreeMap;

use super::sample::Sample;
use super::suite::{Case, Check};

/// Markdown anywhere in a line: bold, code fences, underscores.
pub(crate) const MARKDOWN_MARKS: [&str; 3] = ["**", "```", "__"];

/// Headers, bold, lists, code fences: what a voice reads out as symbols.
pub(crate) fn has_markdown(text: &str) -> bool {
    MARKDOWN_MARKS.iter().any(|m| text.contains(m)) || text.lines().any(markdown_line)
}

/// Whether a line opens as markdown does: a header, a bullet, a numbered item (its
/// first 16 characters after the indent decide).
pub(crate) fn markdown_line(line: &str) -> bool {
    let t = line.trim_start();
    let numbered = t
        .split_once(". ")
        .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
    t.starts_with('#') && t.trim_start_matches('#').starts_with(' ')
        || t.starts_with("- ")
        || t.starts_with("* ")
        || numbered
}

/// What reasoning that reached the content looks like (the seeds' v1 mistake).
pub(crate) const THINKING_MARKS: [&str; 3] = ["<think>", "</think>", "Thinking Process:"];

/// Reasoning that reached the content.
pub(crate) fn leaks_thinking(text: &str) -> bool {
    THINKING_MARKS.iter().any(|m| text.contains(m))
}

/// A tool call the server's parser left in the content (seed 004: `<tool_call>` text and
/// no `tool_calls`).
pub(crate) const TOOL_CALL_MARK: &str = "<tool_call>";

/// The per-answer checks that apply to this case: (check, passed).
pub(crate) fn checks(sample: &Sample, case: &Case) -> Vec<(Check, bool)> {
    let mut all = every_check(sample, case);
    if let Some(only) = &case.checks {
        all.retain(|(check, _)| only.contains(check));
    }
    all
}

fn every_check(sample: &Sample, case: &Case) -> Vec<(Check, bool)> {
    let mut out = vec![
        (
            Check::NonEmpty,
            !sample.content.trim().is_empty() || !sample.tool_calls.is_empty(),
        ),
        (Check::NoMarkdown, !has_markdown(&sample.content)),
        (Check::ThinkingLeak, leaks_thinking(&sample.content)),
        (
            Check::NoLoop,
            super::degenerate::degenerate(&sample.content).is_none(),
        ),
        (
            Check::Finished,
            sample.finish_reason.as_deref() != Some("length"),
        ),
    ];
    if let Some(expect) = &case.expect {
        out.push((
            Check::ExpectedAnswer,
            sample
                .content
                .to_lowercase()
                .contains(&expect.to_lowercase()),
        ));
    }
    if let Some(tool) = &case.expect_tool {
        let called = sample.tool_calls.first().is_some_and(|t| {
            &t.name == tool
                && serde_json::from_str::<serde_json::Value>(&t.arguments)
                    .is_ok_and(|v| v.is_object())
        });
        out.push((Check::ToolCalls, called));
    }
    out
}

/// Check name → % of the answers it applies to (leaking for thinking_leak, passing otherwise).
pub(crate) fn rates<'a>(
    samples: impl Iterator<Item = (&'a Sample, &'a Case)>,
) -> BTreeMap<String, f64> {
    let mut counts: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for (s, case) in samples {
        for (check, passed) in checks(s, case) {
            let e = counts.entry(check.to_string()).or_default();
            e.0 += usize::from(passed);
            e.1 += 1;
        }
    }
    counts
        .into_iter()
        .map(|(k, (p, n))| (k, 100.0 * p as f64 / n.max(1) as f64))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn markdown_and_leaks_are_recognised() {
        assert!(has_markdown("## Tokyo\nIt is big."));
        assert!(has_markdown("It is **big**."));
        assert!(has_markdown("Options:\n- one\n- two"));
        assert!(has_markdown("1. first\n2. second"));
        assert!(has_markdown("```\ncode\n```"));
        assert!(!has_markdown(
            "Tokyo is the capital of Japan. It has 14 million people."
        ));
        assert!(!has_markdown("I paid $5 - no, $6."));
        assert!(leaks_thinking("<think>hmm</think>Tokyo"));
        assert!(leaks_thinking("Thinking Process: first"));
        assert!(!leaks_thinking("I think it is Tokyo."));
    }
}
