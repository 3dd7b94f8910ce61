//! The parts of a streamed chat-completion chunk the front door reads on every token:
//! typed and borrowed, for the metering (`proxy`) and the live judge (`quality`).

/// The parts of a streamed chunk the metrics read, borrowed where the text allows: a typed
/// parse costs a fraction of a generic `Value` on every token of every stream.
#[derive(serde::Deserialize)]
pub(crate) struct Chunk<'a> {
    #[serde(default, borrow)]
    pub(in crate::server) choices: Vec<ChunkChoice<'a>>,
    #[serde(default)]
    pub(in crate::server) timings: Option<RunningCount>,
    #[serde(default)]
    pub(in crate::server) usage: Option<RunningUsage>,
    /// An error event in place of a chunk.
    #[serde(default)]
    pub(in crate::server) error: Option<serde::de::IgnoredAny>,
}

#[derive(serde::Deserialize)]
pub(crate) struct ChunkChoice<'a> {
    #[serde(default, borrow)]
    pub(in crate::server) delta: ChunkDelta<'a>,
    #[serde(default)]
    pub(in crate::server) finish_reason: Option<std::borrow::Cow<'a, str>>,
}

#[derive(serde::Deserialize, Default)]
pub(crate) struct ChunkDelta<'a> {
    #[serde(default)]
    role: Option<serde::de::IgnoredAny>,
    #[serde(default, borrow)]
    pub(in crate::server) content: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning_content: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    pub(in crate::server) tool_calls: Option<Vec<serde::de::IgnoredAny>>,
}

#[derive(serde::Deserialize)]
pub(crate) struct RunningCount {
    pub(in crate::server) predicted_n: Option<u64>,
    #[serde(default)]
    pub(in crate::server) prompt_n: Option<u64>,
}

#[derive(serde::Deserialize)]
pub(crate) struct RunningUsage {
    /// Anthropic's Messages and OpenAI's Responses name them input and output.
    #[serde(default, alias = "output_tokens")]
    pub(in crate::server) completion_tokens: Option<u64>,
    #[serde(default, alias = "input_tokens")]
    pub(in crate::server) prompt_tokens: Option<u64>,
}

impl ChunkChoice<'_> {
    /// The same rule as the benchmark's (`bench::client::bears_token`).
    pub(crate) fn bears_token(&self) -> bool {
        let d = &self.delta;
        let texts = [&d.content, &d.reasoning_content, &d.reasoning];
        let calls = d.tool_calls.as_ref().is_some_and(|c| !c.is_empty());
        let empty_token =
            d.role.is_none() && self.finish_reason.is_none() && texts.iter().any(|t| t.is_some());
        calls
            || texts
                .iter()
                .any(|t| t.as_ref().is_some_and(|t| !t.is_empty()))
            || empty_token
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_typed_token_rule_agrees_with_the_benchmarks() {
        for event in [
            r#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#,
            r#"{"choices":[{"delta":{"role":"assistant","content":null}}]}"#,
            r#"{"choices":[{"delta":{"content":"Tok"}}]}"#,
            r#"{"choices":[{"delta":{"content":""}}]}"#,
            r#"{"choices":[{"delta":{"content":"a \"quoted\" word"}}]}"#,
            r#"{"choices":[{"delta":{"reasoning_content":"hmm"}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#,
            r#"{"choices":[{"delta":{"content":""},"finish_reason":"length"}]}"#,
            r#"{"choices":[],"usage":{"completion_tokens":3}}"#,
        ] {
            let typed: Chunk = serde_json::from_str(event).unwrap();
            let value: serde_json::Value = serde_json::from_str(event).unwrap();
            let generic = value
                .pointer("/choices/0")
                .is_some_and(crate::bench::client::bears_token);
            assert_eq!(
                typed.choices.first().is_some_and(ChunkChoice::bears_token),
                generic,
                "{event}"
            );
        }
    }
}
