//! What a key may still do at the door, and what it did: a request is admitted against
//! its key's limits (requests in any minute, at once, tokens in the UTC day) or refused
//! with 429 and when to come back; an admitted one holds a `Permit` until its answer's
//! last byte, which then adds its use to the book (`crate::usage`), written a second
//! behind and at the door's stop.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::exposition::{Exposed, Kind, Page};
use crate::keys::Key;
use crate::state::StateDir;
use crate::usage::{Book, Used};

/// The book is written this often while it changes: `sparkctl usage` is this far behind.
const WRITE_EVERY: Duration = Duration::from_secs(1);
const MINUTE: Duration = Duration::from_secs(60);

/// Which limit refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Limit {
    Rate(u32),
    Concurrency(u32),
    TokensPerDay(u64),
}

/// A refusal: the limit, and when a request may come again.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limited {
    pub(crate) limit: Limit,
    pub(crate) retry_after: Duration,
}

impl Limited {
    pub(crate) fn message(&self, key: &str) -> String {
        let what = match self.limit {
            Limit::Rate(n) => format!("{n} requests a minute"),
            Limit::Concurrency(n) => format!("{n} requests at once"),
            Limit::TokensPerDay(n) => format!("{n} tokens a day (UTC)"),
        };
        format!(
            "key {key} is past its limit of {what}; try again in {} s",
            self.retry_after.as_secs().max(1)
        )
    }

    pub(crate) fn code(&self) -> &'static str {
        match self.limit {
            Limit::Rate(_) => "rate_limit_exceeded",
            Limit::Concurrency(_) => "concurrency_limit_exceeded",
            Limit::TokensPerDay(_) => "token_limit_exceeded",
        }
    }
}

#[derive(Default)]
struct Inner {
    book: Book,
    at_once: HashMap<String, u32>,
    recent: HashMap<String, VecDeque<Instant>>,
    /// Changes not yet handed to a write.
    dirty: bool,
}

/// Every key's limits in force and use so far.
pub(crate) struct Quota {
    state: StateDir,
    inner: Mutex<Inner>,
    /// The newest book handed to a write; an older one queued behind it is skipped.
    generation: Arc<std::sync::atomic::AtomicU64>,
    /// Serializes the writes (never taken under `inner`: a slow disk stalls no request).
    writing: Arc<Mutex<()>>,
}

impl Quota {
    pub(crate) fn new(state: &StateDir) -> Arc<Quota> {
        let book = Book::load(state).unwrap_or_else(|e| {
            tracing::warn!("the usage book is not read, it starts anew: {e}");
            Book::default()
        });
        Arc::new(Quota {
            state: state.clone(),
            inner: Mutex::new(Inner {
                book,
                ..Inner::default()
            }),
            generation: Arc::default(),
            writing: Arc::default(),
        })
    }

    /// Admits a request of `key`, or says which limit refuses it (counted as `limited`).
    pub(crate) fn admit(self: &Arc<Self>, key: &Key) -> Result<Permit, Limited> {
        let mut i = self.inner.lock().expect("quota");
        let now = Instant::now();
        // A bound of 0 (a hand-edited file) is no bound here; `keys add` refuses it.
        let l = crate::keys::Limits {
            rpm: key.limits.rpm.filter(|n| *n > 0),
            concurrency: key.limits.concurrency.filter(|n| *n > 0),
            tokens_per_day: key.limits.tokens_per_day.filter(|n| *n > 0),
        };
        let refused = |limit, retry_after| Limited { limit, retry_after };
        let mut why = None;
        if let Some(n) = l.concurrency {
            if i.at_once.get(&key.name).copied().unwrap_or(0) >= n {
                why = Some(refused(Limit::Concurrency(n), Duration::from_secs(1)));
            }
        }
        if let (None, Some(n)) = (why, l.rpm) {
            let recent = i.recent.entry(key.name.clone()).or_default();
            while recent.front().is_some_and(|t| now - *t >= MINUTE) {
                recent.pop_front();
            }
            if let Some(oldest) = recent.front().filter(|_| recent.len() >= n as usize) {
                why = Some(refused(Limit::Rate(n), MINUTE - (now - *oldest)));
            }
        }
        if let (None, Some(n)) = (why, l.tokens_per_day) {
            if i.book.today(&key.name).tokens() >= n {
                let into_day = crate::units::unix_now().as_secs() % 86_400;
                why = Some(refused(
                    Limit::TokensPerDay(n),
                    Duration::from_secs(86_400 - into_day),
                ));
            }
        }
        if let Some(w) = why {
            let limited = Used {
                limited: 1,
                ..Used::default()
            };
            i.book.add(&key.name, &limited);
            i.dirty = true;
            return Err(w);
        }
        if l.rpm.is_some() {
            i.recent.entry(key.name.clone()).or_default().push_back(now);
        }
        *i.at_once.entry(key.name.clone()).or_default() += 1;
        Ok(Permit(Arc::new(Held {
            quota: self.clone(),
            key: key.name.clone(),
            used: Mutex::new(Used {
                requests: 1,
                errors: 1,
                ..Used::default()
            }),
        })))
    }

    /// Each key's use since `since` (unix seconds).
    pub(crate) fn since(&self, since: u64) -> std::collections::BTreeMap<String, Used> {
        self.inner.lock().expect("quota").book.since(since)
    }

    fn settle(&self, key: &str, used: &Used) {
        let mut i = self.inner.lock().expect("quota");
        if let Some(n) = i.at_once.get_mut(key) {
            *n = n.saturating_sub(1);
        }
        i.book.add(key, used);
        i.dirty = true;
    }

    /// Writes the book every `WRITE_EVERY` it changed in, until the door stops.
    pub(crate) async fn keep_written(
        self: Arc<Self>,
        mut stopped: tokio::sync::watch::Receiver<bool>,
    ) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(WRITE_EVERY) => self.write_later(),
                _ = stopped.changed() => return,
            }
        }
    }

    /// The book handed to a write off this thread, when it changed.
    fn write_later(&self) {
        use std::sync::atomic::Ordering;
        let (book, mine) = {
            let mut i = self.inner.lock().expect("quota");
            if !i.dirty {
                return;
            }
            i.dirty = false;
            (
                i.book.clone(),
                self.generation.fetch_add(1, Ordering::SeqCst) + 1,
            )
        };
        let (state, writing, newest) = (
            self.state.clone(),
            self.writing.clone(),
            self.generation.clone(),
        );
        crate::state::later(move || {
            let _one = writing.lock().expect("usage writes");
            // A newer book is queued behind this one: it writes, this one need not.
            if newest.load(Ordering::SeqCst) == mine {
                if let Err(e) = book.save(&state) {
                    tracing::warn!("the usage book was not written: {e}");
                }
            }
        });
    }

    /// At the door's stop: the last figures written.
    pub(crate) fn flush(&self) {
        let book = {
            let mut i = self.inner.lock().expect("quota");
            i.dirty = false;
            i.book.clone()
        };
        // Any write still queued holds an older book.
        (self.generation).fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let _g = self.writing.lock().expect("usage writes");
        if let Err(e) = book.save(&self.state) {
            tracing::warn!("the usage book was not written: {e}");
        }
    }
}

/// An admitted request's hold on its key's concurrency, and its use so far; shared by the
/// request and its answer's body, settled when the last of them is done.
#[derive(Clone)]
pub(crate) struct Permit(Arc<Held>);

struct Held {
    quota: Arc<Quota>,
    key: String,
    used: Mutex<Used>,
}

/// The tokens one answer carried, as read from it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Tokens {
    /// Prompt tokens, when the server reported them.
    pub(crate) prompt: Option<u64>,
    pub(crate) out: u64,
    /// `out` was counted from the stream's chunks: the server reported no count.
    pub(crate) counted: bool,
}

impl Permit {
    fn with(&self, f: impl FnOnce(&mut Used)) {
        f(&mut self.0.used.lock().expect("permit"));
    }

    pub(crate) fn waited(&self, d: Duration) {
        self.with(|u| u.waited_ms = d.as_millis() as u64);
    }

    /// The upstream answered with `status` (its body may yet break).
    pub(crate) fn answered(&self, status: u16) {
        self.with(|u| u.errors = u64::from(!(200..400).contains(&status)));
    }

    /// The body broke before its end.
    pub(crate) fn broke(&self) {
        self.with(|u| u.errors = 1);
    }

    pub(crate) fn tokens(&self, t: Tokens) {
        self.with(|u| {
            u.tokens_in = t.prompt.unwrap_or(0);
            u.unreported_in = u64::from(t.prompt.is_none());
            u.tokens_out = t.out;
            u.tokens_out_counted = if t.counted { t.out } else { 0 };
        });
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let used = *self.used.lock().expect("permit");
        self.quota.settle(&self.key, &used);
    }
}

/// A family of `/metrics` per key: its name, its help, its figure.
type Counter = (&'static str, &'static str, fn(&Used) -> u64);

impl Exposed for Quota {
    /// Per key, under its name (never its secret): all the book holds.
    fn expose(&self, page: &mut Page<'_>) -> fmt::Result {
        let all = self.since(0);
        if all.is_empty() {
            return Ok(());
        }
        let counters: [Counter; 5] = [
            (
                "sparkctl_frontdoor_key_requests",
                "Requests admitted, by key name.",
                |u| u.requests,
            ),
            (
                "sparkctl_frontdoor_key_errors",
                "Requests of a key answered with no success.",
                |u| u.errors,
            ),
            (
                "sparkctl_frontdoor_key_limited",
                "Requests of a key refused past one of its limits (429).",
                |u| u.limited,
            ),
            (
                "sparkctl_frontdoor_key_counted_tokens_out",
                "Output tokens of a key counted from streams whose server reported no count.",
                |u| u.tokens_out_counted,
            ),
            (
                "sparkctl_frontdoor_key_wait_milliseconds",
                "Time a key's requests waited for their model's server.",
                |u| u.waited_ms,
            ),
        ];
        for (name, help, value) in counters {
            let mut f = page.family(name, help, Kind::Counter)?;
            for (key, used) in &all {
                f.counter(&[("key", key.as_str())], value(used))?;
            }
        }
        let mut f = page.family(
            "sparkctl_frontdoor_key_tokens",
            "Tokens of a key, in (prompt, as reported) and out.",
            Kind::Counter,
        )?;
        for (key, used) in &all {
            f.counter(
                &[("key", key.as_str()), ("direction", "in")],
                used.tokens_in,
            )?;
            f.counter(
                &[("key", key.as_str()), ("direction", "out")],
                used.tokens_out,
            )?;
        }
        Ok(())
    }
}
