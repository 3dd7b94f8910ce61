//! What the simulated engine answers to one chat request: a list of tokens, each sent at
//! `ttft + i / token_rate` after the request arrived. Pure, so it is unit-tested directly.

use serde_json::{json, Value};

use super::{Mimic, ReasoningAs, SimConfig, ToolCallsAs};

/// The parts of an OpenAI chat request the simulator looks at.
#[derive(Debug, Clone, Default)]
pub(crate) struct Request {
    pub(in crate::sim) messages: Vec<Value>,
    tools: Vec<Value>,
    tool_choice_none: bool,
    pub(in crate::sim) stream: bool,
    pub(in crate::sim) include_usage: bool,
    /// vLLM's `stream_options.continuous_usage_stats`: usage in every chunk.
    pub(in crate::sim) continuous_usage: bool,
    /// `chat_template_kwargs.enable_thinking`: false closes the think block in the prompt
    /// (Qwen3's templates), so a model served by vLLM does not reason.
    thinking: Option<bool>,
    max_tokens: Option<usize>,
    /// llama-server's `cache_prompt: false`: neither reuse nor keep this prompt.
    pub(in crate::sim) no_cache: bool,
}

impl Request {
    pub(crate) fn from_json(body: &Value) -> Result<Request, String> {
        let messages = body
            .get("messages")
            .and_then(Value::as_array)
            .cloned()
            .ok_or("`messages` must be an array")?;
        let max_tokens = body
            .get("max_completion_tokens")
            .or_else(|| body.get("max_tokens"))
            .and_then(Value::as_u64)
            .map(|n| n as usize);
        Ok(Request {
            messages,
            tools: body
                .get("tools")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            tool_choice_none: body.get("tool_choice").and_then(Value::as_str) == Some("none"),
            stream: body.get("stream").and_then(Value::as_bool).unwrap_or(false),
            include_usage: body
                .pointer("/stream_options/include_usage")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            continuous_usage: body
                .pointer("/stream_options/continuous_usage_stats")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            thinking: body
                .pointer("/chat_template_kwargs/enable_thinking")
                .and_then(Value::as_bool),
            max_tokens,
            no_cache: body.get("cache_prompt").and_then(Value::as_bool) == Some(false),
        })
    }

    fn text_of(message: &Value) -> String {
        match message.get("content") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(parts)) => parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join(" "),
            _ => String::new(),
        }
    }

    /// The system prompt, if the request opens with one.
    fn system_text(&self) -> Option<String> {
        self.messages
            .first()
            .filter(|m| m.get("role").and_then(Value::as_str) == Some("system"))
            .map(Self::text_of)
    }

    fn last_user_text(&self) -> String {
        self.messages
            .iter()
            .rev()
            .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
            .map(Self::text_of)
            .unwrap_or_default()
    }

    /// The simulator's "tokenizer": whitespace-separated words.
    pub(crate) fn prompt_tokens(&self) -> usize {
        self.token_ids().len()
    }

    /// The prompt as token ids: per message, its role and three template tokens, then a
    /// hash per word. Equal prefixes give equal ids, which is all the prefix cache needs.
    pub(crate) fn token_ids(&self) -> Vec<u64> {
        use std::hash::{Hash, Hasher};
        let id = |x: &str| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            x.hash(&mut h);
            h.finish()
        };
        let mut out = Vec::new();
        for m in &self.messages {
            let role = m.get("role").and_then(Value::as_str).unwrap_or("");
            out.extend([id(role), 1, 2, 3]);
            out.extend(Self::text_of(m).split_whitespace().map(id));
        }
        out
    }
}

/// One generated token.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Piece {
    Reasoning(String),
    Content(String),
    /// First token of a tool call: carries its id and function name.
    ToolStart {
        id: String,
        name: String,
    },
    /// A fragment of the tool call's JSON arguments.
    ToolArgs(String),
    /// A token the engine generates and counts but streams in no chunk (vLLM's parser eats
    /// `<think>` and `</think>`; the end-of-sequence token ends the stream).
    Silent,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Plan {
    pub(in crate::sim) pieces: Vec<Piece>,
    pub(in crate::sim) finish_reason: &'static str,
    pub(in crate::sim) prompt_tokens: usize,
    /// Prompt tokens served from the prefix cache (set once the request is admitted).
    pub(in crate::sim) cached_tokens: usize,
}

const REASONING: &str =
    "The user is asking something. Let me think about what they need and answer briefly.";
/// What a long answer goes on with: varied enough that a healthy answer is never a loop
/// (it repeats only after more words than a loop's unit is looked for).
const FILLER: &str = "I can say more about that if you would like to hear it. There is a lot \
     of history behind it, and people in many places have their own stories about how it \
     began. Some of those stories are true and some are only good fun, but together they \
     show how much it has meant to everyday life over the years. Let me know which part \
     interests you most and we can look at it together.";

fn answer_for(question: &str) -> &'static str {
    let q = question.to_lowercase();
    if q.contains("capital of japan") {
        "Tokyo is the capital of Japan."
    } else if q.contains("box") && q.contains("ball") {
        "Three boxes with five balls each make 15 balls."
    } else {
        "Hello! I am the simulated engine and I am happy to help."
    }
}

/// Words of `text` as tokens: each but the first carries its leading space.
fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(' ').enumerate().map(|(i, w)| {
        if i == 0 {
            w.to_string()
        } else {
            format!(" {w}")
        }
    })
}

/// `n` tokens of `text`, repeating `pad` after it when more are wanted.
fn take_tokens(text: &str, pad: &str, n: usize) -> Vec<String> {
    words(text)
        .chain(
            std::iter::repeat_with(|| words(pad).collect::<Vec<_>>())
                .flatten()
                .map(|w| {
                    if w.starts_with(' ') {
                        w
                    } else {
                        format!(" {w}")
                    }
                }),
        )
        .take(n)
        .collect()
}

fn pick_tool<'a>(tools: &'a [Value], question: &str) -> Option<&'a Value> {
    let q = question.to_lowercase();
    let name = |t: &Value| {
        t.pointer("/function/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let score = |t: &Value| {
        name(t)
            .split('_')
            .filter(|part| part.len() > 2 && q.contains(part))
            .count()
    };
    tools
        .iter()
        .enumerate()
        .max_by_key(|(i, t)| (score(t), std::cmp::Reverse(*i)))
        .map(|(_, t)| t)
}

pub(crate) fn plan(cfg: &SimConfig, req: &Request) -> Plan {
    let budget = req.max_tokens.unwrap_or(usize::MAX);
    let question = req.last_user_text();
    let mut pieces = Vec::new();

    let vllm = cfg.mimic == Mimic::Vllm;
    let thinks = !(vllm && req.thinking == Some(false));
    let reasoning = match thinks {
        true => take_tokens(REASONING, REASONING, cfg.reasoning_tokens),
        false => Vec::new(),
    };
    match cfg.reasoning_as {
        // vLLM's reasoning parser: the model's <think> and </think> are tokens of their
        // own that no chunk carries.
        ReasoningAs::Field if vllm && !reasoning.is_empty() => {
            pieces.push(Piece::Silent);
            pieces.extend(reasoning.into_iter().map(Piece::Reasoning));
            pieces.push(Piece::Silent);
        }
        ReasoningAs::Field => pieces.extend(reasoning.into_iter().map(Piece::Reasoning)),
        ReasoningAs::Leak if !reasoning.is_empty() => {
            pieces.push(Piece::Content("<think>\n".into()));
            pieces.extend(reasoning.into_iter().map(Piece::Content));
            pieces.push(Piece::Content("\n</think>\n\n".into()));
        }
        ReasoningAs::Leak => {}
    }

    let tool = (cfg.tool_calls != ToolCallsAs::Off && !req.tool_choice_none)
        .then(|| pick_tool(&req.tools, &question))
        .flatten();
    let mut finish_reason = "stop";
    let evaluated = super::eval::answer(req.system_text().as_deref(), &question, cfg.eval_wrong);
    if let Some(a) = evaluated {
        match a.tool_call {
            Some((name, args)) => {
                finish_reason = "tool_calls";
                pieces.push(Piece::ToolStart {
                    id: "call_sim_0".into(),
                    name,
                });
                let chars: Vec<char> = args.chars().collect();
                pieces.extend(chars.chunks(8).map(|c| Piece::ToolArgs(c.iter().collect())));
            }
            None => pieces.extend(words(&a.content).map(Piece::Content)),
        }
    } else if let Some(tool) = tool {
        let name = tool
            .pointer("/function/name")
            .and_then(Value::as_str)
            .unwrap_or("tool");
        let args = json!({ "query": question }).to_string();
        match cfg.tool_calls {
            ToolCallsAs::Field => {
                finish_reason = "tool_calls";
                pieces.push(Piece::ToolStart {
                    id: "call_sim_0".into(),
                    name: name.into(),
                });
                let chars: Vec<char> = args.chars().collect();
                pieces.extend(chars.chunks(8).map(|c| Piece::ToolArgs(c.iter().collect())));
            }
            _ => {
                let xml = format!(
                    "<tool_call>\n{}\n</tool_call>",
                    json!({"name": name, "arguments": {"query": question}})
                );
                pieces.extend(words(&xml).map(Piece::Content));
            }
        }
    } else {
        let answer = answer_for(&question);
        let text = if cfg.markdown {
            format!("## Answer\n\n**{answer}**\n\n- first point\n- second point")
        } else {
            answer.to_string()
        };
        pieces.extend(
            take_tokens(&text, FILLER, cfg.tokens)
                .into_iter()
                .map(Piece::Content),
        );
    }
    // vLLM counts the end-of-sequence token; an answer whose budget ends before it stops
    // on length.
    if vllm {
        pieces.push(Piece::Silent);
    }
    if pieces.len() > budget {
        pieces.truncate(budget);
        finish_reason = "length";
    }
    Plan {
        pieces,
        finish_reason,
        prompt_tokens: req.prompt_tokens(),
        cached_tokens: 0,
    }
}

/// How an answer goes bad (`--garbage-after`, `--loop-after`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Broken {
    Garbage,
    Loop,
    /// Nothing at all: every content token empty.
    Empty,
}

/// Tokens of a broken answer that are still right: short answers stay correct.
const STILL_RIGHT: usize = 2;

/// Replaces the content past its first tokens with garbled text or a loop, as many tokens
/// as there were; reasoning and tool calls are left as they were.
pub(crate) fn break_answer(plan: &mut Plan, how: Broken) {
    const GARBLED: [&str; 8] = [
        "\u{fffd}\u{fffd}",
        " ĠĠ",
        "\u{fffd}",
        " ort",
        "\u{fffd}\u{fffd}\u{fffd}",
        " ándt",
        "\u{1}",
        " \u{fffd}x",
    ];
    const LOOP: [&str; 6] = [" and", " then", " it", " went", " on", " again"];
    let mut seen = 0;
    for (i, piece) in plan.pieces.iter_mut().enumerate() {
        if let Piece::Content(text) = piece {
            seen += 1;
            if how == Broken::Empty {
                text.clear();
            } else if seen > STILL_RIGHT {
                *text = match how {
                    // A fixed but irregular pick: garbage, not a loop.
                    Broken::Garbage => GARBLED[(i * 7 + i / 3) % GARBLED.len()],
                    Broken::Loop => LOOP[i % LOOP.len()],
                    Broken::Empty => "",
                }
                .to_string();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        cfg: SimConfig,
    }

    fn cfg(args: &[&str]) -> SimConfig {
        Wrap::parse_from(std::iter::once("sim").chain(args.iter().copied())).cfg
    }

    fn ask(text: &str) -> Request {
        Request::from_json(&json!({"messages": [{"role": "user", "content": text}]})).unwrap()
    }

    fn content(plan: &Plan) -> String {
        plan.pieces
            .iter()
            .filter_map(|p| match p {
                Piece::Content(s) => Some(s.as_str()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn answers_the_seed_questions_with_the_requested_length() {
        let p = plan(
            &cfg(&["--tokens", "6"]),
            &ask("What is the capital of Japan?"),
        );
        assert_eq!(content(&p), "Tokyo is the capital of Japan.");
        assert_eq!(p.pieces.len(), 6);
        let p = plan(
            &cfg(&["--tokens", "40"]),
            &ask("3 boxes with 5 balls each?"),
        );
        assert!(content(&p).starts_with("Three boxes with five balls each make 15 balls. I can"));
        assert_eq!(p.pieces.len(), 40);
    }

    #[test]
    fn reasoning_as_field_or_leaked_think_text() {
        let p = plan(
            &cfg(&["--reasoning-tokens", "3", "--tokens", "2"]),
            &ask("hi"),
        );
        assert_eq!(
            p.pieces
                .iter()
                .filter(|x| matches!(x, Piece::Reasoning(_)))
                .count(),
            3
        );
        let p = plan(
            &cfg(&[
                "--reasoning-tokens",
                "3",
                "--reasoning-as",
                "leak",
                "--tokens",
                "2",
            ]),
            &ask("hi"),
        );
        assert!(content(&p).starts_with("<think>\nThe user is\n</think>\n\nHello!"));
    }

    #[test]
    fn max_tokens_can_starve_content_like_the_seeds_v2_run() {
        let mut req = ask("hi");
        req.max_tokens = Some(4);
        let p = plan(&cfg(&["--reasoning-tokens", "10"]), &req);
        assert_eq!(content(&p), "");
        assert_eq!(p.finish_reason, "length");
    }

    #[test]
    fn tool_calls_pick_the_tool_named_in_the_question() {
        let tools = json!([
            {"type": "function", "function": {"name": "search_memory"}},
            {"type": "function", "function": {"name": "web_search"}}
        ]);
        let body = json!({"messages": [{"role": "user", "content": "do a web search for the news"}], "tools": tools});
        let req = Request::from_json(&body).unwrap();
        let p = plan(&cfg(&[]), &req);
        assert_eq!(p.finish_reason, "tool_calls");
        assert_eq!(
            p.pieces[0],
            Piece::ToolStart {
                id: "call_sim_0".into(),
                name: "web_search".into()
            }
        );
        let args: String = p.pieces[1..]
            .iter()
            .map(|x| match x {
                Piece::ToolArgs(s) => s.as_str(),
                _ => "",
            })
            .collect();
        assert_eq!(
            serde_json::from_str::<Value>(&args).unwrap()["query"],
            "do a web search for the news"
        );

        let p = plan(&cfg(&["--tool-calls", "content"]), &req);
        assert!(content(&p).starts_with("<tool_call>\n{\"name\":\"web_search\""));
        assert_eq!(p.finish_reason, "stop");
    }

    #[test]
    fn broken_answers_keep_their_first_tokens_and_go_bad_after() {
        for how in [Broken::Garbage, Broken::Loop] {
            let mut p = plan(
                &cfg(&["--tokens", "60"]),
                &ask("What is the capital of Japan?"),
            );
            break_answer(&mut p, how);
            let text = content(&p);
            assert!(text.starts_with("Tokyo is"), "{text}");
            assert!(
                crate::bench::degenerate::degenerate(&text).is_some(),
                "{how:?}: {text}"
            );
            let mut one = plan(
                &cfg(&["--tokens", "1"]),
                &ask("What is the capital of Japan?"),
            );
            break_answer(&mut one, how);
            assert_eq!(content(&one), "Tokyo");
        }
        // The healthy long answer is no loop.
        let p = plan(&cfg(&["--tokens", "300"]), &ask("hi"));
        assert_eq!(crate::bench::degenerate::degenerate(&content(&p)), None);
    }

    #[test]
    fn markdown_when_asked() {
        let p = plan(&cfg(&["--markdown", "--tokens", "100"]), &ask("hi"));
        assert!(content(&p).starts_with("## Answer\n\n**Hello!"));
    }
}
