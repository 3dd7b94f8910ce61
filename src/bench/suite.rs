//! Benchmark suites: the workload as YAML (prompts, tools, turns, expectations). The shipped
//! ones (`voice-assistant`, the default, `quick`, `cache`) are built in; others live in
//! `recipes/suites/` or a path.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::agents::Api;
use crate::error::{Diagnostic, Error, Result};

/// The suites shipped in `recipes/suites/`, built in so that `bench URL --suite NAME` works
/// wherever sparkctl runs; a file of the same name in the suites dir wins.
const BUILT_IN: [(&str, &str); 3] = [
    (
        "voice-assistant",
        include_str!("../../recipes/suites/voice-assistant.yaml"),
    ),
    ("quick", include_str!("../../recipes/suites/quick.yaml")),
    ("cache", include_str!("../../recipes/suites/cache.yaml")),
];

/// The built-in suites: (name, the file's text).
pub(crate) fn built_in() -> impl Iterator<Item = (&'static str, &'static str)> {
    BUILT_IN.iter().copied()
}

/// The suite a recipe gets when it names none (built in): the seeds' voice-assistant workload.
pub(crate) const DEFAULT_SUITE: &str = "voice-assistant";

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Suite {
    pub(in crate::bench) name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bench) description: Option<String>,
    /// Runs per case before measuring; reported as cold start, never in the statistics.
    #[serde(default = "one")]
    pub(in crate::bench) warmup: usize,
    /// Measured runs per case (at least 5).
    #[serde(default = "five")]
    pub(in crate::bench) runs: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bench) system: Option<String>,
    /// Tool definitions (OpenAI format) by name; cases pick them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(in crate::bench) tools: BTreeMap<String, Value>,
    pub(in crate::bench) cases: Vec<Case>,
    /// Captured traffic (where it came from): each case is a captured request, sent once
    /// as it came (`bench::replay`).
    #[serde(skip)]
    pub(in crate::bench) replay: Option<String>,
    /// Fields set in every request, by dotted path (a try's `--request`), over the case's.
    #[serde(skip)]
    pub(in crate::bench) fields: Vec<(String, Value)>,
}

fn one() -> usize {
    1
}
fn five() -> usize {
    5
}
fn default_max_tokens() -> u32 {
    256
}
fn is_chat(api: &Api) -> bool {
    *api == Api::Chat
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Case {
    pub(in crate::bench) name: String,
    /// User messages, one per turn; the server's answers are kept between turns.
    pub(in crate::bench) turns: Vec<String>,
    #[serde(default = "default_max_tokens")]
    pub(in crate::bench) max_tokens: u32,
    /// Sent as `chat_template_kwargs.enable_thinking` (Qwen3 chat templates).
    #[serde(default)]
    pub(in crate::bench) enable_thinking: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(in crate::bench) tools: Vec<String>,
    /// Text the answer must contain (case-insensitive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bench) expect: Option<String>,
    /// The tool the answer must call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bench) expect_tool: Option<String>,
    /// The answer checks that apply (default: all that the case's fields allow:
    /// non_empty, no_markdown, thinking_leak, no_loop, finished, plus expected_answer /
    /// tool_calls).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bench) checks: Option<Vec<Check>>,
    /// Pads the system prompt to about this many tokens (4 characters each).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::bench) system_tokens: Option<usize>,
    /// What the server may take from its prompt cache (see `CacheMode`).
    #[serde(default)]
    pub(in crate::bench) cache: CacheMode,
    /// The API it is asked in: `chat` (the default), `messages` (Anthropic Messages, as
    /// Claude Code asks) or `responses` (OpenAI Responses, as Codex asks).
    #[serde(default, skip_serializing_if = "is_chat")]
    pub(in crate::bench) api: Api,
    /// A captured request, sent as it came (a replay's case).
    #[serde(skip)]
    pub(in crate::bench) body: Option<Value>,
    /// When it arrived, ms after the first captured request.
    #[serde(skip)]
    pub(in crate::bench) at_ms: Option<u64>,
}

impl Case {
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn turns(&self) -> &[String] {
        &self.turns
    }

    pub(crate) fn expect(&self) -> Option<&str> {
        self.expect.as_deref()
    }

    pub(crate) fn expect_tool(&self) -> Option<&str> {
        self.expect_tool.as_deref()
    }
}

/// A per-answer check a case may ask for (suites name them; gates judge their rates).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Check {
    NonEmpty,
    ExpectedAnswer,
    NoMarkdown,
    /// A rate of answers leaking reasoning: the one check where less is better.
    ThinkingLeak,
    ToolCalls,
    /// Neither a repetition loop nor garbled text (`bench::degenerate`).
    NoLoop,
    /// Ended on its own: a `finish_reason` other than `length`.
    Finished,
}

impl Check {
    pub(crate) const ALL: [Check; 7] = [
        Check::NonEmpty,
        Check::ExpectedAnswer,
        Check::NoMarkdown,
        Check::ThinkingLeak,
        Check::ToolCalls,
        Check::NoLoop,
        Check::Finished,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Check::NonEmpty => "non_empty",
            Check::ExpectedAnswer => "expected_answer",
            Check::NoMarkdown => "no_markdown",
            Check::ThinkingLeak => "thinking_leak",
            Check::ToolCalls => "tool_calls",
            Check::NoLoop => "no_loop",
            Check::Finished => "finished",
        }
    }
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Check {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Check, String> {
        Check::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| format!("`{s}` is not a check"))
    }
}

/// What a case lets the server reuse from its prompt cache. Either way no request repeats
/// an identical prompt: servers cache prompts, and a repeated one measures the cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum CacheMode {
    /// The shared system prompt (and earlier turns of the same conversation) may be
    /// cached; the user turn is new on every run. A voice assistant's real case.
    #[default]
    WarmPrefix,
    /// Nothing: a unique marker opens every request's prompt, and llama-server is told
    /// `cache_prompt: false`. What a first question to a fresh conversation costs.
    Cold,
}

/// What the server is, as far as requests are shaped for it and its answers read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum ServerKind {
    LlamaServer,
    Vllm,
    Sglang,
    #[default]
    Other,
}

/// Which request this is: makes its prompt unique (`nonce` is one per benchmark run, so
/// a second benchmark against the same server does not hit the first one's cache).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tag<'a> {
    pub(crate) nonce: &'a str,
    pub(crate) run: usize,
    pub(crate) turn: usize,
}

impl Suite {
    pub(crate) fn cases(&self) -> &[Case] {
        &self.cases
    }

    /// `voice-assistant` (built in), a name in `suites_dir`, or a path to a YAML file.
    pub(crate) fn load(spec: &str, suites_dir: &Path) -> Result<Suite> {
        let Some((file, text)) = crate::yaml::named(spec, suites_dir, &BUILT_IN, true)? else {
            let in_dir = suites_dir.join(format!("{spec}.yaml"));
            let names: Vec<&str> = BUILT_IN.iter().map(|(name, _)| *name).collect();
            return Err(Error::NoSuch {
                what: crate::error::Thing::Suite,
                name: spec.to_string(),
                hint: crate::error::Hint::NotFileNorBuiltIn {
                    yaml: false,
                    file: in_dir,
                    built_in: names.iter().map(|n| n.to_string()).collect(),
                },
            });
        };
        let suite: Suite = crate::yaml::from_slice(
            &file,
            text.as_bytes(),
            "see recipes/suites/voice-assistant.yaml for the format",
        )?;
        suite.check(&file)?;
        Ok(suite)
    }

    fn check(&self, file: &Path) -> Result<()> {
        let bad = |key: String, message: String| {
            Error::Invalid(vec![Diagnostic::at(file, None, Some(key), message, None)])
        };
        if self.runs < 5 {
            return Err(bad(
                "runs".into(),
                format!(
                    "{} measured runs are too few to report p50/p90; use 5 or more",
                    self.runs
                ),
            ));
        }
        if self.cases.is_empty() {
            return Err(bad("cases".into(), "the suite has no cases".into()));
        }
        for (i, c) in self.cases.iter().enumerate() {
            if c.turns.is_empty() {
                return Err(bad(
                    format!("cases[{i}].turns"),
                    format!("case {} has no turns", c.name),
                ));
            }
            for t in &c.tools {
                if !self.tools.contains_key(t) {
                    return Err(bad(
                        format!("cases[{i}].tools"),
                        format!("tool `{t}` is not defined under `tools`"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The system prompt for a case (padded for `system_tokens`).
    pub(crate) fn system_for(&self, case: &Case) -> Option<String> {
        let base = self.system.clone();
        let Some(tokens) = case.system_tokens else {
            return base;
        };
        let mut text = base.unwrap_or_default();
        let mut n = 0;
        while text.len() < tokens * 4 {
            n += 1;
            text.push_str(&format!(
                "\nMemory note {n}: the user mentioned item {n} of their week, which you may recall if asked."
            ));
        }
        Some(text)
    }

    pub(crate) fn tools_for(&self, case: &Case) -> Vec<Value> {
        case.tools
            .iter()
            .filter_map(|t| self.tools.get(t).cloned())
            .collect()
    }

    /// The request body for one turn, given the conversation so far (its user and
    /// assistant messages, as sent and answered).
    pub(crate) fn request(
        &self,
        model: &str,
        case: &Case,
        history: &[Value],
        tag: Tag,
        server: ServerKind,
    ) -> Value {
        if let Some(captured) = &case.body {
            return captured_request(captured, model, server, case.api);
        }
        let mut messages = Vec::new();
        if let Some(system) = self.system_for(case) {
            messages.push(json!({"role": "system", "content": system}));
        }
        messages.extend(history.iter().cloned());
        // Warm prefix: the run's marker opens its first user turn, after the shared
        // system prompt, so later turns of the conversation still share its prefix. Cold:
        // a marker for this very request opens the whole prompt.
        let (at, marker) = match case.cache {
            CacheMode::WarmPrefix => (
                messages.iter().position(|m| m["role"] == "user"),
                format!("[{}-{}]", tag.nonce, tag.run),
            ),
            CacheMode::Cold => (
                (!messages.is_empty()).then_some(0),
                format!("[{}-{}-{}]", tag.nonce, tag.run, tag.turn),
            ),
        };
        if let Some(text) = at.and_then(|i| messages[i]["content"].as_str()) {
            let marked = format!("{marker} {text}");
            messages[at.expect("found above")]["content"] = Value::String(marked);
        }
        let mut body = json!({
            "model": model,
            "messages": messages,
            "max_tokens": case.max_tokens,
            "stream": true,
            "stream_options": {"include_usage": true},
            "chat_template_kwargs": {"enable_thinking": case.enable_thinking},
        });
        // Ask each engine for a running token count in every chunk, so tokens per chunk
        // (and per-token timing) are known rather than guessed.
        match server {
            ServerKind::LlamaServer => {
                body["timings_per_token"] = Value::Bool(true);
                if case.cache == CacheMode::Cold {
                    body["cache_prompt"] = Value::Bool(false);
                }
            }
            ServerKind::Vllm | ServerKind::Sglang => {
                body["stream_options"]["continuous_usage_stats"] = Value::Bool(true);
            }
            ServerKind::Other => {}
        }
        let tools = self.tools_for(case);
        if !tools.is_empty() {
            body["tools"] = Value::Array(tools);
        }
        for (path, value) in &self.fields {
            set_path(&mut body, path, value.clone());
        }
        crate::agents::from_chat(case.api, &body)
    }
}

/// Sets `value` at the dotted `path` of `body`, making the objects on the way.
fn set_path(body: &mut Value, path: &str, value: Value) {
    let mut at = body;
    let mut keys = path.split('.').peekable();
    while let Some(k) = keys.next() {
        if !at.is_object() {
            *at = json!({});
        }
        let slot = at
            .as_object_mut()
            .expect("made an object")
            .entry(k)
            .or_insert(Value::Null);
        if keys.peek().is_none() {
            *slot = value;
            return;
        }
        at = slot;
    }
}

/// A captured body as it is sent again: the target's model, streamed with usage (and the
/// engine's per-chunk counts, in chat); messages, tools and sampling as captured.
pub(crate) fn captured_request(body: &Value, model: &str, server: ServerKind, api: Api) -> Value {
    let mut b = body.clone();
    b["model"] = json!(model);
    b["stream"] = json!(true);
    if api != Api::Chat {
        // The agents' APIs report usage in their last event, unasked.
        return b;
    }
    if !b["stream_options"].is_object() {
        b["stream_options"] = json!({});
    }
    b["stream_options"]["include_usage"] = json!(true);
    match server {
        ServerKind::LlamaServer => b["timings_per_token"] = json!(true),
        ServerKind::Vllm | ServerKind::Sglang => {
            b["stream_options"]["continuous_usage_stats"] = json!(true)
        }
        ServerKind::Other => {}
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_suite_loads_and_covers_the_seeds_workload() {
        let s = Suite::load("voice-assistant", Path::new("/nonexistent")).unwrap();
        let names: Vec<&str> = s.cases.iter().map(|c| c.name.as_str()).collect();
        for n in [
            "greeting",
            "factual",
            "arithmetic",
            "conversational",
            "long_response",
            "tool_search_memory",
            "tool_web_search",
            "multi_turn",
            "long_system_prompt",
        ] {
            assert!(names.contains(&n), "{n}");
        }
        let multi = s.cases.iter().find(|c| c.name == "multi_turn").unwrap();
        assert_eq!(multi.turns.len(), 5);
        let long = s
            .cases
            .iter()
            .find(|c| c.name == "long_system_prompt")
            .unwrap();
        assert!(s.system_for(long).unwrap().len() >= 8000);
        let tool = s
            .cases
            .iter()
            .find(|c| c.name == "tool_web_search")
            .unwrap();
        let tag = Tag {
            nonce: "n1",
            run: 2,
            turn: 1,
        };
        let body = s.request(
            "m",
            tool,
            &[json!({"role": "user", "content": "x"})],
            tag,
            ServerKind::Other,
        );
        assert_eq!(body["tools"].as_array().unwrap().len(), 2);
        assert_eq!(body["stream_options"]["include_usage"], true);
        assert!(body.get("cache_prompt").is_none());
    }

    #[test]
    fn no_two_requests_share_a_prompt_and_cold_ones_share_no_prefix() {
        let s = Suite::load("voice-assistant", Path::new("/nonexistent")).unwrap();
        let mut case = s
            .cases
            .iter()
            .find(|c| c.name == "factual")
            .unwrap()
            .clone();
        let history = [json!({"role": "user", "content": "What is the capital of Japan?"})];
        let tag = |run, turn| Tag {
            nonce: "ab12",
            run,
            turn,
        };
        let messages = |b: &Value| b["messages"].as_array().unwrap().clone();
        // Warm prefix: same system prompt, a new user turn per run.
        let a = s.request("m", &case, &history, tag(1, 1), ServerKind::LlamaServer);
        let b = s.request("m", &case, &history, tag(2, 1), ServerKind::LlamaServer);
        assert_eq!(messages(&a)[0], messages(&b)[0]);
        assert_eq!(
            messages(&a)[1]["content"],
            "[ab12-1] What is the capital of Japan?"
        );
        assert_ne!(messages(&a)[1], messages(&b)[1]);
        assert!(a.get("cache_prompt").is_none());
        assert_eq!(a["timings_per_token"], true);
        // Cold: the very first characters differ per request; llama-server is told too.
        case.cache = CacheMode::Cold;
        let a = s.request("m", &case, &history, tag(1, 1), ServerKind::LlamaServer);
        let b = s.request("m", &case, &history, tag(1, 2), ServerKind::LlamaServer);
        let first = |b: &Value| messages(b)[0]["content"].as_str().unwrap().to_string();
        assert!(
            first(&a).starts_with("[ab12-1-1] You are Annie"),
            "{}",
            first(&a)
        );
        assert_ne!(first(&a)[..12], first(&b)[..12]);
        assert_eq!(a["cache_prompt"], false);
        let v = s.request("m", &case, &history, tag(1, 1), ServerKind::Vllm);
        assert!(v.get("cache_prompt").is_none());
        assert_eq!(v["stream_options"]["continuous_usage_stats"], true);
    }

    #[test]
    fn suite_errors_name_the_file_and_line() {
        let dir = std::env::temp_dir().join(format!("sparkctl-suite-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("bad.yaml");
        std::fs::write(
            &f,
            "name: bad\ncases:\n  - name: x\n    turns: [hi]\n    expext: y\n",
        )
        .unwrap();
        let err = Suite::load(f.to_str().unwrap(), &dir)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("bad.yaml:5:5") && err.contains("expext"),
            "{err}"
        );
        std::fs::write(
            &f,
            "name: few\nruns: 2\ncases:\n  - name: x\n    turns: [hi]\n",
        )
        .unwrap();
        let err = Suite::load(f.to_str().unwrap(), &dir)
            .unwrap_err()
            .to_string();
        assert!(err.contains("runs") && err.contains("too few"), "{err}");
        // A key twice: YAML would keep the last silently; both lines are named.
        std::fs::write(
            &f,
            "name: dup\nruns: 5\ncases:\n  - name: x\n    turns: [hi]\nruns: 6\n",
        )
        .unwrap();
        let err = Suite::load(f.to_str().unwrap(), &dir)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("bad.yaml:6:1: runs: duplicate key `runs`") && err.contains("line 2"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
