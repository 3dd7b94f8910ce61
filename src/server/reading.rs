//! An answer read on its way through the front door: a stream's chunks as they pass (its
//! tokens, for the latency metrics, and its deltas, for the live checks), or a whole JSON
//! answer at its end (a client that does not stream: the OpenAI SDKs' default). Production's
//! answers and a rollout's candidate's are read the same way.

use std::time::Instant;

use bytes::Bytes;
use hyper::header::HeaderMap;
use serde::Deserialize;

use super::chunk::{Chunk, ChunkChoice};
use super::quality::{Answer, Delta, Verdict};
use crate::agents::Api;

/// The most of a whole (not streamed) answer kept to judge it; a larger one is not judged.
const WHOLE_LIMIT: usize = 1 << 20;
/// Bytes of an error event kept as the answer's fault.
const EVENT_KEPT: usize = 1024;

enum Form {
    Stream(crate::bench::sse::Parser),
    /// A whole JSON answer, gathered until its end (None: it outgrew the limit).
    Whole(Option<Vec<u8>>),
}

/// One answer being read.
pub(crate) struct Reading {
    form: Form,
    /// The running token count the stream reported last (llama-server timings, vLLM usage).
    running: u64,
    /// The answer judged, when it is one.
    answer: Option<Answer>,
    /// The stream reached its end.
    ended: bool,
    /// The server failed it (an error event, a broken stream).
    failed: Option<String>,
    /// The server reported a token count (else `chunks` stands for it).
    reported: bool,
    /// Token-bearing chunks seen.
    chunks: u64,
    /// Prompt tokens, as the server reported them.
    prompt: Option<u64>,
    /// Whose API the answer speaks (its request's path).
    api: Api,
}

/// The parts of a whole chat completion its judgement reads.
#[derive(Deserialize)]
struct Whole<'a> {
    #[serde(default, borrow)]
    choices: Vec<WholeChoice<'a>>,
    #[serde(default)]
    usage: Option<super::chunk::RunningUsage>,
}

#[derive(Deserialize)]
struct WholeChoice<'a> {
    #[serde(default, borrow)]
    message: Option<WholeMessage<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<std::borrow::Cow<'a, str>>,
}

#[derive(Deserialize)]
struct WholeMessage<'a> {
    #[serde(default, borrow)]
    content: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    tool_calls: Option<Vec<serde::de::IgnoredAny>>,
}

/// Whether `headers` say the body is a server-sent event stream.
pub(crate) fn is_stream(headers: &HeaderMap) -> bool {
    headers
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

impl Reading {
    /// A reading of a body with `headers`; `answer`: judged as well; `count`: its tokens
    /// counted (a whole answer is then kept, within its limit, for its usage).
    pub(crate) fn new(
        headers: &HeaderMap,
        answer: Option<Answer>,
        count: bool,
        api: Api,
    ) -> Reading {
        let form = match is_stream(headers) {
            true => Form::Stream(crate::bench::sse::Parser::default()),
            false => Form::Whole((answer.is_some() || count).then(Vec::new)),
        };
        Reading {
            form,
            running: 0,
            answer,
            ended: false,
            failed: None,
            reported: false,
            chunks: 0,
            prompt: None,
            api,
        }
    }

    /// The tokens read so far: the server's counts where it gave them, else one per
    /// token-bearing chunk.
    pub(crate) fn tokens(&self) -> super::quota::Tokens {
        super::quota::Tokens {
            prompt: self.prompt,
            out: if self.reported {
                self.running
            } else {
                self.chunks
            },
            counted: !self.reported && self.chunks > 0,
        }
    }

    /// The counts a chunk or a whole answer reports.
    fn counts(
        &mut self,
        timings: Option<&super::chunk::RunningCount>,
        usage: Option<&super::chunk::RunningUsage>,
    ) {
        let prompt = (timings.and_then(|t| t.prompt_n)).or(usage.and_then(|u| u.prompt_tokens));
        if prompt.is_some() {
            self.prompt = prompt;
        }
        let out = (timings.and_then(|t| t.predicted_n)).or(usage.and_then(|u| u.completion_tokens));
        if let Some(n) = out {
            self.reported = true;
            self.running = self.running.max(n);
        }
    }

    /// Reads `data`; returns the token count of each token-bearing chunk in it.
    pub(crate) fn feed(&mut self, data: &Bytes, now: Instant) -> Vec<usize> {
        let parser = match &mut self.form {
            Form::Stream(p) => p,
            Form::Whole(kept) => {
                let fits = kept
                    .as_ref()
                    .is_some_and(|k| k.len() + data.len() <= WHOLE_LIMIT);
                match fits {
                    true => kept.as_mut().expect("checked").extend_from_slice(data),
                    false => *kept = None,
                }
                return Vec::new();
            }
        };
        let mut tokens = Vec::new();
        let events = parser.feed(data);
        if self.api != Api::Chat {
            for event in events {
                let r = crate::agents::event(self.api, &event);
                tokens.extend(self.agent_read(r, now));
            }
            return tokens;
        }
        for event in events {
            let Ok(chunk) = serde_json::from_str::<Chunk>(&event) else {
                continue;
            };
            if self.answer.is_some() && chunk.error.is_some() {
                // Its start says what went wrong; the whole of it (a server may send
                // megabytes) would be kept in every window and record that keeps the fault.
                let mut cut = event.len().min(EVENT_KEPT);
                while !event.is_char_boundary(cut) {
                    cut -= 1;
                }
                let more = if cut < event.len() { "…" } else { "" };
                self.failed = Some(format!("an error event: {}{more}", &event[..cut]));
            }
            let bears = chunk.choices.first().is_some_and(ChunkChoice::bears_token);
            let n = match bears {
                true => self.tokens_in(&chunk),
                false => 0,
            };
            self.chunks += u64::from(bears);
            self.counts(chunk.timings.as_ref(), chunk.usage.as_ref());
            if let (Some(a), Some(c)) = (self.answer.as_mut(), chunk.choices.first()) {
                let delta = Delta {
                    content: c.delta.content.as_deref(),
                    tool_call: c.delta.tool_calls.as_ref().is_some_and(|t| !t.is_empty()),
                    finish: c.finish_reason.as_deref(),
                    tokens: n as u64,
                };
                a.delta(delta, now);
            }
            if bears {
                tokens.push(n);
            }
        }
        tokens
    }

    /// One agent API event read (`agents`): its token (one), if it bore one.
    fn agent_read(&mut self, r: crate::agents::Read, now: Instant) -> Option<usize> {
        if let (Some(why), true) = (&r.error, self.answer.is_some()) {
            self.failed = Some(format!("an error event: {why}"));
        }
        self.prompt = r.prompt.or(self.prompt);
        if let Some(n) = r.out {
            (self.reported, self.running) = (true, self.running.max(n));
        }
        let bears = r.bears_token();
        self.chunks += u64::from(bears);
        if let Some(a) = self.answer.as_mut() {
            let delta = Delta {
                content: r.content.as_deref(),
                tool_call: r.tool_call,
                finish: r.finish,
                tokens: u64::from(bears),
            };
            a.delta(delta, now);
        }
        bears.then_some(1)
    }

    /// The tokens a token-bearing chunk carried: from the running count when the stream
    /// reports one, else one.
    fn tokens_in(&mut self, chunk: &Chunk) -> usize {
        let count = chunk
            .timings
            .as_ref()
            .and_then(|t| t.predicted_n)
            .or_else(|| chunk.usage.as_ref().and_then(|u| u.completion_tokens));
        match count {
            Some(n) => {
                let d = n.saturating_sub(self.running);
                self.running = n;
                d as usize
            }
            None => 1,
        }
    }

    /// The body broke before its end.
    pub(crate) fn broke(&mut self, why: String) {
        if self.answer.is_some() {
            self.failed = Some(why);
        }
    }

    /// The body reached its end: a whole answer is read now.
    pub(crate) fn ended(&mut self) {
        if self.ended {
            return;
        }
        self.ended = true;
        if matches!(self.form, Form::Whole(None)) {
            // Too large to judge: not judged, rather than judged empty.
            self.answer = None;
        }
        let Form::Whole(Some(body)) = &self.form else {
            return;
        };
        if self.api != Api::Chat {
            match crate::agents::whole(self.api, body) {
                Ok(r) => {
                    let now = Instant::now();
                    if let Some(a) = self.answer.as_mut() {
                        a.whole();
                        let tokens = r.out.unwrap_or(1);
                        let d = Delta {
                            content: r.content.as_deref(),
                            tool_call: r.tool_call,
                            finish: r.finish,
                            tokens,
                        };
                        a.delta(d, now);
                    }
                    self.prompt = r.prompt;
                    if let Some(n) = r.out {
                        (self.reported, self.running) = (true, n);
                    }
                }
                Err(why) if self.answer.is_some() => {
                    self.failed = Some(format!(
                        "an answer that is not a {:?} answer: {why}",
                        self.api
                    ));
                }
                Err(_) => {}
            }
            return;
        }
        let whole = serde_json::from_slice::<Whole>(body);
        if let Ok(w) = &whole {
            let usage = w.usage.as_ref();
            let prompt = usage.and_then(|u| u.prompt_tokens);
            self.prompt = prompt.or(self.prompt);
            if let Some(n) = usage.and_then(|u| u.completion_tokens) {
                (self.reported, self.running) = (true, n);
            }
        }
        let Some(a) = self.answer.as_mut() else {
            return;
        };
        let now = Instant::now();
        a.whole();
        match whole {
            Ok(w) => {
                let c = w.choices.first();
                let m = c.and_then(|c| c.message.as_ref());
                let tokens = w.usage.and_then(|u| u.completion_tokens).unwrap_or(1);
                a.delta(
                    Delta {
                        content: m.and_then(|m| m.content.as_deref()),
                        tool_call: m
                            .and_then(|m| m.tool_calls.as_ref())
                            .is_some_and(|t| !t.is_empty()),
                        finish: c.and_then(|c| c.finish_reason.as_deref()),
                        tokens,
                    },
                    now,
                );
            }
            Err(e) => self.failed = Some(format!("an answer that is not a chat completion: {e}")),
        }
    }

    /// How the answer went: None when it was not judged, or its client left before its end
    /// (not the server's doing).
    pub(crate) fn verdict(self, arrived: Instant) -> Option<Verdict> {
        let answer = self.answer?;
        match (self.failed, self.ended) {
            (Some(why), _) => Some(Verdict::failed(arrived, why)),
            (None, true) => Some(answer.end()),
            (None, false) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::quality::Asked;

    #[test]
    fn an_error_event_is_kept_by_its_start_only() {
        let mut headers = HeaderMap::new();
        headers.insert(
            hyper::header::CONTENT_TYPE,
            "text/event-stream".parse().unwrap(),
        );
        let arrived = Instant::now();
        let mut r = Reading::new(
            &headers,
            Some(Answer::new(Asked::default(), arrived)),
            false,
            Api::Chat,
        );
        let event = format!(
            "data: {{\"error\":{{\"message\":\"{}\"}}}}\n\n",
            "é".repeat(1 << 19)
        );
        r.feed(&Bytes::from(event), Instant::now());
        r.ended();
        let why = r.verdict(arrived).unwrap().error.unwrap();
        assert!(why.starts_with("an error event: {\"error\""), "{why:.80}");
        assert!(why.len() <= EVENT_KEPT + 64, "{} bytes kept", why.len());
    }
}
