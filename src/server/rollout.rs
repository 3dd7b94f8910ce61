//! A rollout in the front door (`crate::rollout`): which requests meet the candidate, the
//! shadow copies sent off the request path, and the tally the analysis reads. Production's
//! answers go to their clients as ever; a shadow copy's answer is read and dropped, never
//! sent; a canary request the candidate fails before its first byte goes to production.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use serde::Deserialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::quality::{Answer, Asked, Verdict};
use super::reading::Reading;
use crate::bench::suite::Check;
use crate::production::Upstream;
use crate::rollout::tally::Pair;
use crate::rollout::{analysis, Asking, Mode, RolloutStatus, Sample, Spec, Tally};

/// Shadow copies waiting on the candidate at once; past this, copies are dropped (and
/// counted) rather than queued: a slow candidate never holds production's resources.
const COPIES_IN_FLIGHT: usize = 64;

/// Characters kept of an answer's start, or of what was wrong with it, for the evidence.
const KEPT_CHARS: usize = 240;

/// A rollout running.
pub(crate) struct Rollout {
    spec: Spec,
    pub(in crate::server) candidate: Upstream,
    started: Instant,
    started_at: String,
    copies: Arc<Semaphore>,
    tally: Mutex<Tally>,
    /// Requests seen: the shadow's sampling counts them.
    seq: AtomicU64,
    /// Canary answers the candidate is sending now: it is not stopped under them.
    streams: AtomicUsize,
    drained: tokio::sync::Notify,
}

/// A canary request to the candidate, counted until its answer is done.
pub(crate) struct CanaryStream(Arc<Rollout>);

impl std::ops::Deref for CanaryStream {
    type Target = Rollout;

    fn deref(&self) -> &Rollout {
        &self.0
    }
}

impl CanaryStream {
    /// The rollout this canary request belongs to.
    pub(crate) fn rollout(&self) -> Arc<Rollout> {
        self.0.clone()
    }
}

impl Drop for CanaryStream {
    fn drop(&mut self) {
        if self.0.streams.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.drained.notify_waiters();
        }
    }
}

/// How one request meets the rollout.
pub(crate) enum Way {
    /// Production alone: its answer still counts, as the canary's comparison.
    Production(Arc<Rollout>),
    /// Production answers; a copy goes to the candidate; the two answers pair up here.
    Shadow(Arc<PairSlot>),
    /// The candidate answers (production if it fails before its first byte).
    Canary(Arc<Rollout>),
}

impl Rollout {
    pub(crate) fn new(asking: Asking) -> Rollout {
        Rollout {
            spec: asking.spec,
            candidate: asking.candidate,
            started: Instant::now(),
            started_at: crate::units::now_utc(),
            copies: Arc::new(Semaphore::new(COPIES_IN_FLIGHT)),
            tally: Mutex::new(Tally::default()),
            seq: AtomicU64::new(0),
            streams: AtomicUsize::new(0),
            drained: tokio::sync::Notify::new(),
        }
    }

    /// A canary request on its way to the candidate.
    pub(crate) fn stream(self: &Arc<Self>) -> CanaryStream {
        self.streams.fetch_add(1, Ordering::SeqCst);
        CanaryStream(self.clone())
    }

    /// Waits, up to `limit`, for the candidate's canary answers to finish.
    async fn drain(&self, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let done = self.drained.notified();
            if self.streams.load(Ordering::SeqCst) == 0 {
                return;
            }
            if tokio::time::timeout_at(deadline, done).await.is_err() {
                return;
            }
        }
    }

    fn tally(&self) -> std::sync::MutexGuard<'_, Tally> {
        self.tally.lock().expect("rollout tally")
    }

    pub(crate) fn status(&self) -> RolloutStatus {
        let elapsed = self.started.elapsed();
        // Judged on a copy: every request takes the tally's lock.
        let tally = self.tally().clone();
        RolloutStatus {
            spec: self.spec.clone(),
            candidate: self.candidate.clone(),
            started_at: self.started_at.clone(),
            elapsed_s: elapsed.as_secs_f64(),
            tally: tally.counts(),
            judgement: analysis::judge(&self.spec, &tally, elapsed),
        }
    }

    /// How a request with `body` (judged as `asked`) meets the candidate.
    pub(crate) fn way(
        self: &Arc<Self>,
        headers: &hyper::HeaderMap,
        body: &[u8],
        asked: Option<Asked>,
    ) -> Way {
        self.tally().offered += 1;
        let Some(asked) = asked else {
            // Not a chat completion: nothing to compare; production answers it.
            return Way::Production(self.clone());
        };
        let i = self.seq.fetch_add(1, Ordering::Relaxed);
        match self.spec.mode {
            Mode::Shadow => {
                // Every request whose running share crosses a whole one: exact shares
                // without randomness.
                let share = self.spec.share / 100.0;
                let taken = ((i + 1) as f64 * share).floor() > (i as f64 * share).floor();
                if !taken {
                    return Way::Production(self.clone());
                }
                match self.copies.clone().try_acquire_owned() {
                    Ok(permit) => Way::Shadow(Arc::new(PairSlot {
                        rollout: self.clone(),
                        greedy: asked.deterministic,
                        sides: Mutex::new((None, None)),
                        permit: Mutex::new(Some(permit)),
                    })),
                    Err(_) => {
                        self.tally().dropped += 1;
                        Way::Production(self.clone())
                    }
                }
            }
            Mode::Canary => match bucket(headers, body) < self.spec.share {
                true => {
                    self.tally().to_candidate += 1;
                    Way::Canary(self.clone())
                }
                false => Way::Production(self.clone()),
            },
        }
    }

    /// One answer of a side (canary), judged.
    pub(crate) fn answered(&self, candidate: bool, v: &Verdict) {
        self.tally().answer(candidate, sample(v));
    }

    /// The candidate failed a canary request before its first byte; production answers it.
    pub(crate) fn retried(&self, why: String) {
        let mut t = self.tally();
        t.retried += 1;
        t.answer(
            true,
            Sample {
                fault: Some(kept(&format!("failed before its first byte: {why}"))),
                ttft_ms: None,
                itl_ms: None,
                text: None,
            },
        );
    }

    /// The candidate refused a canary request as the client's (4xx): production answers it,
    /// and it is no fault of the candidate's (production would likely refuse it too).
    pub(crate) fn passed_on(&self) {
        self.tally().retried += 1;
    }

    /// Bytes of the candidate's answer sent to a client (canary).
    pub(crate) fn delivered(&self, bytes: usize) {
        self.tally().candidate_bytes_to_clients += bytes as u64;
    }
}

/// Where a conversation falls in [0, 100): the same for every turn of it. Recognised by a
/// header a client sets, the body's `user`, else its system prompt and first user message
/// (which every later turn repeats).
fn bucket(headers: &hyper::HeaderMap, body: &[u8]) -> f64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    let named = ["x-conversation-id", "x-session-id"]
        .iter()
        .find_map(|n| headers.get(*n).map(|v| v.as_bytes().to_vec()));
    match named {
        Some(id) => id.hash(&mut h),
        None => {
            #[derive(Deserialize)]
            struct Conversation {
                #[serde(default)]
                user: Option<String>,
                #[serde(default)]
                messages: Vec<serde_json::Value>,
                /// OpenAI Responses' turns (a list, or one user text).
                #[serde(default)]
                input: serde_json::Value,
            }
            match serde_json::from_slice::<Conversation>(body) {
                Ok(Conversation { user: Some(u), .. }) => u.hash(&mut h),
                Ok(c) => {
                    let turns = match (c.messages.is_empty(), c.input) {
                        (true, serde_json::Value::Array(items)) => items,
                        (true, one @ serde_json::Value::String(_)) => {
                            vec![serde_json::json!({"role": "user", "content": one})]
                        }
                        _ => c.messages,
                    };
                    let first_user = turns.iter().position(|m| m["role"] == "user");
                    let upto = first_user.map_or(turns.len(), |i| i + 1);
                    for m in &turns[..upto] {
                        m["content"].to_string().hash(&mut h);
                    }
                }
                Err(_) => body.hash(&mut h),
            }
        }
    }
    (h.finish() % 10_000) as f64 / 100.0
}

/// One shadowed request's two answers, paired when both are in.
pub(crate) struct PairSlot {
    rollout: Arc<Rollout>,
    greedy: bool,
    /// (production's, the candidate's); production's None inside: not judged (its client
    /// left), so the pair is not counted.
    sides: Mutex<(Option<Option<Verdict>>, Option<Verdict>)>,
    /// The copy's place among those in flight, freed when the candidate's answer is in.
    permit: Mutex<Option<OwnedSemaphorePermit>>,
}

impl PairSlot {
    pub(crate) fn production(&self, v: Option<Verdict>) {
        let mut s = self.sides.lock().expect("pair");
        s.0 = Some(v);
        self.complete(&mut s);
    }

    fn candidate_answered(&self, v: Verdict) {
        *self.permit.lock().expect("permit") = None;
        let mut s = self.sides.lock().expect("pair");
        s.1 = Some(v);
        self.complete(&mut s);
    }

    fn complete(&self, s: &mut (Option<Option<Verdict>>, Option<Verdict>)) {
        if let (Some(Some(p)), Some(c)) = (&s.0, &s.1) {
            let both = pair(p, c, self.greedy);
            self.rollout.tally().pair(both);
        }
    }

    /// Where the copy goes.
    pub(crate) fn candidate(&self) -> &Upstream {
        &self.rollout.candidate
    }

    /// Sends the copy to the candidate and reads its answer, off the request path.
    pub(crate) fn send(
        self: Arc<Self>,
        client: Client<HttpConnector, Full<Bytes>>,
        request: Request<Full<Bytes>>,
        asked: Asked,
        limit: Duration,
    ) {
        self.rollout.tally().to_candidate += 1;
        tokio::spawn(async move {
            let arrived = Instant::now();
            let read = async {
                let resp = client
                    .request(request)
                    .await
                    .map_err(|e| format!("no answer: {}", crate::error::chain(&e)))?;
                if !resp.status().is_success() {
                    return Err(format!("answered {}", resp.status()));
                }
                let answer = Answer::new(asked, arrived).keeping_text();
                let mut reading = Reading::new(resp.headers(), Some(answer), false, asked.api);
                let mut body = resp.into_body();
                loop {
                    match body.frame().await {
                        None => break,
                        Some(Ok(frame)) => {
                            if let Some(data) = frame.data_ref() {
                                reading.feed(data, Instant::now());
                            }
                        }
                        Some(Err(e)) => {
                            reading.broke(format!("the stream broke: {e}"));
                            break;
                        }
                    }
                }
                reading.ended();
                Ok(reading.verdict(arrived))
            };
            let verdict = match tokio::time::timeout(limit, read).await {
                Ok(Ok(Some(v))) => v,
                Ok(Ok(None)) => return,
                Ok(Err(why)) => Verdict::failed(arrived, why),
                Err(_) => Verdict::failed(
                    arrived,
                    format!("no complete answer within {} s", limit.as_secs()),
                ),
            };
            self.candidate_answered(verdict);
        });
    }
}

/// `text` as the evidence keeps it (the run record, `status`, the page): secrets replaced
/// as a capture replaces them, control characters escaped, at most `KEPT_CHARS`
/// characters and a mark where it was cut. Scrubbed over a window a little wider than
/// what is kept: a megabyte of error event costs no more than its start.
fn kept(text: &str) -> String {
    let window = text
        .char_indices()
        .nth(4 * KEPT_CHARS)
        .map_or(text.len(), |(i, _)| i);
    let clean = super::quality::escape(&crate::secrets::scrub(&text[..window], None));
    let mut out: String = clean.chars().take(KEPT_CHARS).collect();
    if out.len() < clean.len() || window < text.len() {
        out.push('…');
    }
    out
}

/// One answer, as the rollout's analysis compares it: its fault is what the server did
/// wrong (an answer cut by the client's max_tokens, or written in markdown, is the request's
/// doing as much as the server's). What it keeps of the answer and of its fault is
/// scrubbed and bounded (`kept`).
fn sample(v: &Verdict) -> Sample {
    let fault = v.error.as_deref().map(kept).or_else(|| {
        v.checks
            .iter()
            .filter(|(c, _)| !matches!(c, Check::Finished | Check::NoMarkdown))
            .find(|(c, _)| v.fails(*c))
            .map(|(c, _)| format!("failed {}", c.name()))
    });
    Sample {
        fault,
        ttft_ms: v.ttft_ms,
        itl_ms: v.tpot_ms,
        text: v.text.as_deref().map(kept),
    }
}

/// The two verdicts of one request; `greedy`: it was asked at temperature 0.
fn pair(production: &Verdict, candidate: &Verdict, greedy: bool) -> Pair {
    let agree = match (&production.text, &candidate.text) {
        (Some(p), Some(c)) if greedy && production.error.is_none() => {
            Some(candidate.error.is_none() && crate::rollout::agree::agree(p, c))
        }
        _ => None,
    };
    Pair {
        production: sample(production),
        candidate: sample(candidate),
        agree,
    }
}

/// A model's rollout slot in its lane.
#[derive(Default)]
pub(crate) struct Slot {
    now: Mutex<Option<Arc<Rollout>>>,
    /// Rollouts whose `up` died without ending them (SIGKILL): their candidates, for the
    /// model's watch to stop — nobody else would, and every memory plan counts them.
    orphans: Mutex<Vec<Arc<Rollout>>>,
    /// Told when an orphan is left.
    pub(in crate::server) orphaned: tokio::sync::Notify,
}

impl Slot {
    pub(crate) fn get(&self) -> Option<Arc<Rollout>> {
        self.now.lock().expect("rollout slot").clone()
    }

    /// Starts `asking`'s rollout in place of any other; it ends when its owner does, and
    /// its candidate is then left to the watch to stop.
    pub(crate) fn start(self: &Arc<Self>, asking: Asking) -> RolloutStatus {
        let owner = asking.owner;
        let r = Arc::new(Rollout::new(asking));
        *self.now.lock().expect("rollout slot") = Some(r.clone());
        if let Some(owner) = owner {
            let (slot, mine) = (Arc::downgrade(self), Arc::downgrade(&r));
            tokio::spawn(async move {
                owner.ended().await;
                if let (Some(slot), Some(mine)) = (slot.upgrade(), mine.upgrade()) {
                    if slot.end_if(&mine) {
                        slot.orphans.lock().expect("orphans").push(mine);
                        slot.orphaned.notify_one();
                    }
                }
            });
        }
        r.status()
    }

    /// Ends the rollout: no request meets the candidate from now on, and the canary answers
    /// it is sending finish (for up to `drain`) before this returns, so stopping it next cuts
    /// no client's answer. Its last status.
    pub(crate) async fn end(&self, drain: Duration) -> Option<RolloutStatus> {
        let r = self.now.lock().expect("rollout slot").take()?;
        r.drain(drain).await;
        Some(r.status())
    }

    /// The candidates of rollouts whose owner died, once their canary answers finished
    /// (for up to `drain`): to be stopped.
    pub(crate) async fn orphans(&self, drain: Duration) -> Vec<Upstream> {
        let gone = std::mem::take(&mut *self.orphans.lock().expect("orphans"));
        let mut out = Vec::new();
        for r in gone {
            r.drain(drain).await;
            out.push(r.candidate.clone());
        }
        out
    }

    /// Ends `r` if it is the rollout running; whether it was.
    fn end_if(&self, r: &Arc<Rollout>) -> bool {
        let mut s = self.now.lock().expect("rollout slot");
        let ended = s.as_ref().is_some_and(|now| Arc::ptr_eq(now, r));
        if ended {
            *s = None;
        }
        ended
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "sk-live-0123456789abcdefghij";

    /// An answer that quotes a secret, ended by a server's error event of a megabyte.
    fn verdict() -> Verdict {
        let event = format!("{{\"error\":{{\"message\":\"{}\"}}}}", "x".repeat(1 << 20));
        let mut v = Verdict::failed(Instant::now(), format!("an error event: {event} {SECRET}"));
        v.text = Some(format!(
            "Your key is {SECRET}, and Bearer abcdef123456 too. {}",
            "y".repeat(5000)
        ));
        v
    }

    #[test]
    fn kept_evidence_is_scrubbed_and_bounded() {
        let s = sample(&verdict());
        let (text, fault) = (s.text.unwrap(), s.fault.unwrap());
        for kept in [&text, &fault] {
            assert!(
                !kept.contains(SECRET) && !kept.contains("abcdef123456"),
                "{kept}"
            );
            assert!(
                kept.chars().count() <= KEPT_CHARS + 1,
                "{} chars",
                kept.chars().count()
            );
        }
        assert!(text.starts_with("Your key is <redacted>"), "{text}");
        assert!(fault.starts_with("an error event: {"), "{fault}");
    }
}
