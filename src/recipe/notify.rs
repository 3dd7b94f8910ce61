//! A recipe's `notify` section: who is told when an upgrade of it ends — a webhook POSTed
//! the outcome as JSON, and/or a command (argv, never a shell string) given the same JSON on
//! its stdin — and its validation. Secrets come from the environment (`${NAME}`), resolved
//! when sending: never written in the recipe, never printed, never recorded.

use std::collections::BTreeMap;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::diag::{suggest, Report};
use super::env_name_ok;
use super::Recipe;
use crate::units::HumanDuration;

/// The outcomes an upgrade ends with, in history's words: what `notify.on` may name (an
/// interrupted one tells nobody: whoever interrupted it knows).
pub(crate) const OUTCOMES: [&str; 6] = [
    "promoted",
    "rejected",
    "inconclusive",
    "failed",
    "skipped",
    "unchanged",
];

/// How long a webhook or a command may take, by default.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Notify {
    /// An `http://` URL the outcome is POSTed to as JSON; `${NAME}` in it takes the value of
    /// the environment variable NAME when sending (a token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) webhook: Option<String>,
    /// Headers sent with the webhook (`Authorization: "Bearer ${HOOK_TOKEN}"`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) headers: BTreeMap<String, String>,
    /// A program run with the same JSON on its stdin: argv, one word each, never a shell
    /// string; `${NAME}` as in the webhook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) command: Option<Vec<String>>,
    /// The outcomes that are told, in history's words (default: every one but `unchanged`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) on: Option<Vec<String>>,
    /// How long the webhook or the command may take (default 10s); past it the upgrade's
    /// outcome stands and the failure to tell is recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) timeout: Option<HumanDuration>,
}

impl Notify {
    /// Whether `outcome` (history's word) is told.
    pub(crate) fn tells(&self, outcome: &str) -> bool {
        match &self.on {
            Some(on) => on.iter().any(|o| o == outcome),
            None => outcome != "unchanged",
        }
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.timeout.map_or(DEFAULT_TIMEOUT, |t| t.0)
    }
}

/// The names of the `${NAME}` references in `text`, or the first malformed one (`Err`).
pub(crate) fn references(text: &str) -> Result<Vec<&str>, String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("${") {
        let after = &rest[at + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("`${{` without its `}}` in `{}`", &rest[at..]))?;
        let name = &after[..end];
        if !env_name_ok(name) {
            return Err(format!(
                "`${{{name}}}` is not an environment variable's name"
            ));
        }
        out.push(name);
        rest = &after[end + 1..];
    }
    Ok(out)
}

/// The problems of `r`'s notify section, at their lines of `src`.
pub(super) fn problems(
    path: &std::path::Path,
    src: &str,
    r: &Recipe,
) -> Vec<crate::error::Diagnostic> {
    let mut out = Report::new(path, src);
    if let Some(n) = &r.notify {
        check(&mut out, n);
    }
    out.diags
}

fn check(out: &mut Report, n: &Notify) {
    let refs = "write `${NAME}` for the value of the environment variable NAME";
    if n.webhook.is_none() && n.command.is_none() {
        out.bad(
            "notify",
            "notify names neither a webhook nor a command".into(),
            "give `webhook: http://…` and/or `command: [program, args…]`",
        );
    }
    if let Some(url) = &n.webhook {
        if url.starts_with("https://") {
            out.bad(
                "notify.webhook",
                "https:// webhooks are not sent by this build: it links no TLS stack (so the \
                 binary stays static)"
                    .into(),
                "post through a local relay on http://, or with a command: `command: [curl, \
                 -sS, --data-binary, \"@-\", -H, \"Content-Type: application/json\", URL]`",
            );
        } else if !url.starts_with("http://") {
            out.bad(
                "notify.webhook",
                format!("`{url}` is not an http:// URL"),
                "e.g. http://127.0.0.1:9000/hooks/spark",
            );
        }
        if let Err(e) = references(url) {
            out.bad("notify.webhook", e, refs);
        }
    }
    for (name, value) in &n.headers {
        let key = format!("notify.headers.{name}");
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
            out.bad(
                &key,
                format!("`{name}` is not a header name"),
                "e.g. Authorization",
            );
        }
        if let Err(e) = references(value) {
            out.bad(&key, e, refs);
        }
    }
    match &n.command {
        Some(argv) if argv.first().is_none_or(|p| p.trim().is_empty()) => out.bad(
            "notify.command",
            "the command names no program".into(),
            "an argv list: `[program, args…]` (never a shell string)",
        ),
        Some(argv) => {
            for (i, word) in argv.iter().enumerate() {
                if let Err(e) = references(word) {
                    out.bad(&format!("notify.command[{i}]"), e, refs);
                }
            }
        }
        None => {}
    }
    for (i, o) in n.on.iter().flatten().enumerate() {
        if !OUTCOMES.contains(&o.as_str()) {
            out.bad(
                &format!("notify.on[{i}]"),
                format!("`{o}` is not an outcome an upgrade ends with"),
                &suggest(o, &OUTCOMES, "outcomes"),
            );
        }
    }
    if n.timeout
        .is_some_and(|t| t.0 < Duration::from_secs(1) || t.0 > Duration::from_secs(600))
    {
        out.bad(
            "notify.timeout",
            "a notification may take from 1s to 10m".into(),
            "e.g. 10s",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_name_environment_variables() {
        assert_eq!(
            references("http://h/x?t=${TOKEN}&u=${USER_2}"),
            Ok(vec!["TOKEN", "USER_2"])
        );
        assert!(references("Bearer ${TOKEN").is_err());
        assert!(references("${1X}").is_err());
        let n = Notify::default();
        assert!(n.tells("rejected") && !n.tells("unchanged"));
        let n = Notify {
            on: Some(vec!["rejected".into()]),
            ..Default::default()
        };
        assert!(!n.tells("promoted") && n.tells("rejected"));
    }
}
