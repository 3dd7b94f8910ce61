//! What each key used at the front door, by the hour: requests, errors, refusals past a
//! limit, tokens in and out, time waited for a model. Kept in `STATE/usage.json` (written
//! by the door, a few seconds behind at most, and at its stop), so figures and the daily
//! token limit outlive a restart; `sparkctl usage` and `/metrics` read it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::state::StateDir;

/// How long hours are kept.
const KEPT_HOURS: u64 = 24 * 92;

/// One key's use over some time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Used {
    pub(crate) requests: u64,
    /// Answered with no success: the server's error, none at all, or the door's 5xx.
    pub(crate) errors: u64,
    /// Refused past one of its limits (429); not in `requests`.
    pub(crate) limited: u64,
    /// Prompt tokens the servers reported.
    pub(crate) tokens_in: u64,
    pub(crate) tokens_out: u64,
    /// Of `tokens_out`, those counted from a stream's chunks: the server reported none.
    #[serde(default)]
    pub(crate) tokens_out_counted: u64,
    /// Requests whose prompt tokens no server reported (not in `tokens_in`).
    #[serde(default)]
    pub(crate) unreported_in: u64,
    /// Time waited for a model's server (a start on demand, a switch), ms.
    pub(crate) waited_ms: u64,
}

impl Used {
    pub(crate) fn add(&mut self, o: &Used) {
        self.requests += o.requests;
        self.errors += o.errors;
        self.limited += o.limited;
        self.tokens_in += o.tokens_in;
        self.tokens_out += o.tokens_out;
        self.tokens_out_counted += o.tokens_out_counted;
        self.unreported_in += o.unreported_in;
        self.waited_ms += o.waited_ms;
    }

    pub(crate) fn tokens(&self) -> u64 {
        self.tokens_in + self.tokens_out
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Row {
    key: String,
    /// Unix hour (seconds / 3600).
    hour: u64,
    #[serde(flatten)]
    used: Used,
}

#[derive(Serialize, Deserialize, Default)]
struct File {
    #[serde(default)]
    rows: Vec<Row>,
}

/// Every key's use, by the hour.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Book {
    hours: BTreeMap<(String, u64), Used>,
}

pub(crate) fn path(state: &StateDir) -> PathBuf {
    state.root().join("usage.json")
}

fn hour_now() -> u64 {
    crate::units::unix_now().as_secs() / 3600
}

impl Book {
    /// The book of `state` (none yet: nothing used).
    pub(crate) fn load(state: &StateDir) -> Result<Book> {
        let p = path(state);
        let file: File = match std::fs::read(&p) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| Error::DamagedState {
                path: p,
                cause: e.to_string(),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => File::default(),
            Err(e) => return Err(Error::io(format!("cannot read {}", p.display()), e)),
        };
        let mut book = Book::default();
        for r in file.rows {
            book.hours.entry((r.key, r.hour)).or_default().add(&r.used);
        }
        Ok(book)
    }

    /// Written whole, by rename; hours older than `KEPT_HOURS` left out.
    pub(crate) fn save(&self, state: &StateDir) -> Result<()> {
        let oldest = hour_now().saturating_sub(KEPT_HOURS);
        let rows = (self.hours.iter())
            .filter(|((_, h), _)| *h >= oldest)
            .map(|((key, hour), used)| Row {
                key: key.clone(),
                hour: *hour,
                used: *used,
            })
            .collect();
        crate::state::write_json(&path(state), &File { rows })
    }

    /// `used` by `key`, this hour.
    pub(crate) fn add(&mut self, key: &str, used: &Used) {
        let at = (key.to_string(), hour_now());
        self.hours.entry(at).or_default().add(used);
    }

    /// Each key's use in the hours since `since` (unix seconds) began, this one included.
    pub(crate) fn since(&self, since: u64) -> BTreeMap<String, Used> {
        let from = since / 3600;
        let mut out: BTreeMap<String, Used> = BTreeMap::new();
        for ((key, hour), used) in &self.hours {
            if *hour >= from {
                out.entry(key.clone()).or_default().add(used);
            }
        }
        out
    }

    /// What `key` used since this UTC day began.
    pub(crate) fn today(&self, key: &str) -> Used {
        let day = crate::units::unix_now().as_secs() / 86_400 * 86_400;
        let from = (key.to_string(), day / 3600);
        let mut out = Used::default();
        for (_, used) in self.hours.range(from..).take_while(|((k, _), _)| k == key) {
            out.add(used);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn use_is_summed_by_key_and_kept_across_a_save() {
        let dir = std::env::temp_dir().join(format!(
            "sparkctl-usage-{}-{}",
            std::process::id(),
            crate::state::new_run_id()
        ));
        let state = StateDir::open(&dir).unwrap();
        let mut book = Book::load(&state).unwrap();
        let one = Used {
            requests: 1,
            tokens_in: 10,
            tokens_out: 5,
            ..Used::default()
        };
        book.add("kid", &one);
        book.add("kid", &one);
        book.add("mum", &one);
        book.save(&state).unwrap();
        let again = Book::load(&state).unwrap();
        assert_eq!(again, book);
        assert_eq!(again.today("kid").tokens(), 30);
        assert_eq!(again.today("ki").requests, 0);
        let all = again.since(0);
        assert_eq!((all["kid"].requests, all["mum"].requests), (2, 1));
        let future = crate::units::unix_now().as_secs() + 7200;
        assert!(again.since(future).is_empty());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
