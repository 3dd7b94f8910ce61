//! Traffic capture: production's chat requests, and the agents' (Anthropic Messages,
//! OpenAI Responses), with their arrival times, written by the
//! front door when asked (`sparkctl frontdoor capture on`), for `bench --replay captured`.
//! Local only (`STATE/frontdoor/capture/`, the directory 700, the files 600), bounded
//! (two files of half the size each: the older is dropped as the newer fills), written
//! off the request path (a full queue drops the entry and counts it). A body waiting to be
//! written keeps its share of the door's memory budget for bodies (`body`), and the queue
//! holds `QUEUE_BYTES` at most: a writer slower than the clients costs dropped captures,
//! never memory, and never more than that share of the budget. Nothing secret is
//! kept: no header (so no `Authorization`), only the request fields a replay needs
//! (`metadata`, `user` and the like are dropped), values under secret-looking keys and
//! secret-looking strings replaced, and the front door's own key wherever it appears.

use std::fmt;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::mpsc;

use super::body::Read;
pub(crate) use crate::capture_file::{dir, files, CapturedRequest};
use crate::error::{Error, Result};
use crate::exposition::{Exposed, Kind, Page};
pub(crate) use crate::frontdoor::capture::{
    config_file, read_config, CaptureConfig, CaptureStatus,
};
use crate::secrets::{scrub, secret_key, REDACTED};

/// Requests waiting to be written; more are dropped (and counted).
const QUEUE: usize = 1024;
/// What their bodies may hold together (a quarter of the door's budget for bodies): the
/// rest of the budget is the requests'.
const QUEUE_BYTES: usize = 64 << 20;

/// The request fields a replay sends again; every other field is dropped.
const KEPT: &[&str] = &[
    "model",
    "messages",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "stop",
    "stream",
    "stream_options",
    "chat_template_kwargs",
    "response_format",
    "seed",
    "n",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "reasoning_effort",
    // Anthropic Messages' and OpenAI Responses' own.
    "system",
    "input",
    "instructions",
    "max_output_tokens",
    "stop_sequences",
    "thinking",
    "reasoning",
];

/// The front door's capture: the config in force and the queue to its writer.
pub(crate) struct Capture {
    config: Mutex<CaptureConfig>,
    queue: mpsc::Sender<Queued>,
    /// The bytes of the bodies queued or being written.
    queued: AtomicUsize,
    written: AtomicU64,
    dropped: AtomicU64,
}

/// A request waiting to be written: when it came, its path, its body (with its share of
/// the budget).
struct Queued {
    unix_ms: u64,
    path: String,
    body: Read,
}

impl Capture {
    /// Starts the writer for `dir` (a task on the current tokio executor).
    pub(crate) fn start(
        dir: PathBuf,
        config: CaptureConfig,
        api_key: Option<String>,
    ) -> Arc<Capture> {
        let (tx, rx) = mpsc::channel(QUEUE);
        let c = Arc::new(Capture {
            config: Mutex::new(config),
            queue: tx,
            queued: AtomicUsize::default(),
            written: AtomicU64::default(),
            dropped: AtomicU64::default(),
        });
        let writer = Writer {
            dir,
            secret: api_key,
        };
        tokio::spawn(writer.run(rx, c.clone()));
        c
    }

    /// What `frontdoor capture status` shows.
    pub(crate) fn status(&self, dir: &Path) -> CaptureStatus {
        let bytes = files(dir)
            .iter()
            .filter_map(|f| std::fs::metadata(f).ok())
            .map(|m| m.len())
            .sum();
        CaptureStatus {
            config: self.config(),
            dir: dir.to_path_buf(),
            bytes,
            written: self.written.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn config(&self) -> CaptureConfig {
        *self.config.lock().expect("capture")
    }

    pub(crate) fn set(&self, s: CaptureConfig) {
        *self.config.lock().expect("capture") = s;
    }

    /// Queues a request for writing, when capture is on and it asks for an answer (chat, or
    /// an agent's API); the body is shared, not copied. One that could never fit in a capture file (half the
    /// bound), or finds the queue full, is dropped and counted.
    pub(crate) fn offer(&self, method: &hyper::Method, path: &str, body: &Read) {
        let config = self.config();
        let answers = ["/chat/completions", "/messages", "/responses"];
        if !config.on || method != hyper::Method::POST || !answers.iter().any(|a| path.ends_with(a))
        {
            return;
        }
        let len = body.bytes.len();
        if len as u64 > config.max_bytes / 2 || !self.reserve(len) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let queued = Queued {
            unix_ms: crate::units::unix_now().as_millis() as u64,
            path: path.to_string(),
            body: body.share(),
        };
        if self.queue.try_send(queued).is_err() {
            self.queued.fetch_sub(len, Ordering::AcqRel);
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts `len` bytes into the queue's, when they fit.
    fn reserve(&self, len: usize) -> bool {
        let before = self.queued.fetch_add(len, Ordering::AcqRel);
        if before + len > QUEUE_BYTES {
            self.queued.fetch_sub(len, Ordering::AcqRel);
            return false;
        }
        true
    }
}

impl Exposed for Capture {
    /// The capture's counters.
    fn expose(&self, page: &mut Page<'_>) -> fmt::Result {
        page.family(
            "sparkctl_frontdoor_captured",
            "Requests written to the traffic capture.",
            Kind::Counter,
        )?
        .counter(&[], self.written.load(Ordering::Relaxed))?;
        page.family(
            "sparkctl_frontdoor_capture_dropped",
            "Requests the capture could not keep (queue full, unreadable, larger than half the bound).",
            Kind::Counter,
        )?
        .counter(&[], self.dropped.load(Ordering::Relaxed))
    }
}

/// The task that writes queued requests; it counts into the `Capture` it serves.
struct Writer {
    dir: PathBuf,
    secret: Option<String>,
}

impl Writer {
    async fn run(self, mut rx: mpsc::Receiver<Queued>, capture: Arc<Capture>) {
        let writer = Arc::new(self);
        while let Some(q) = rx.recv().await {
            let max = capture.config().max_bytes;
            let w = writer.clone();
            let len = q.body.bytes.len();
            let wrote =
                tokio::task::spawn_blocking(move || w.write(q.unix_ms, q.path, &q.body.bytes, max))
                    .await;
            // The body is gone with the task: its bytes leave the queue's count.
            capture.queued.fetch_sub(len, Ordering::AcqRel);
            match wrote {
                Ok(Ok(true)) => capture.written.fetch_add(1, Ordering::Relaxed),
                _ => capture.dropped.fetch_add(1, Ordering::Relaxed),
            };
        }
    }

    /// Appends one request (redacted) as a line, rotating first when it would not fit.
    fn write(&self, unix_ms: u64, path: String, body: &[u8], max: u64) -> Result<bool> {
        let Ok(body) = serde_json::from_slice::<Value>(body) else {
            return Ok(false);
        };
        let entry = CapturedRequest {
            unix_ms,
            path,
            body: redact(body, self.secret.as_deref()),
        };
        let mut line = serde_json::to_vec(&entry).expect("a value serializes");
        line.push(b'\n');
        let half = max / 2;
        if line.len() as u64 > half {
            return Ok(false);
        }
        private_dir(&self.dir)?;
        let [old, now] = files(&self.dir);
        let size = std::fs::metadata(&now).map_or(0, |m| m.len());
        if size + line.len() as u64 > half {
            std::fs::rename(&now, &old)
                .map_err(|e| Error::io(format!("cannot rotate {}", now.display()), e))?;
        }
        let mut f = private_file(&now)?;
        f.write_all(&line)
            .map_err(|e| Error::io(format!("cannot write {}", now.display()), e))?;
        Ok(true)
    }
}

/// The capture directory, made and kept to its owner.
fn private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| Error::io(format!("cannot restrict {}", dir.display()), e))
}

/// Opens `path` for appending, created 600 (and made 600 if it was not).
fn private_file(path: &Path) -> Result<std::fs::File> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io(format!("cannot open {}", path.display()), e))?;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(|e| Error::io(format!("cannot restrict {}", path.display()), e))?;
    Ok(f)
}

fn scrub_value(v: Value, secret: Option<&str>) -> Value {
    match v {
        Value::String(s) => Value::String(scrub(&s, secret)),
        Value::Array(a) => Value::Array(a.into_iter().map(|x| scrub_value(x, secret)).collect()),
        Value::Object(o) => Value::Object(
            o.into_iter()
                .map(|(k, x)| {
                    let x = match secret_key(&k) && !x.is_object() && !x.is_array() {
                        true => Value::String(REDACTED.into()),
                        false => scrub_value(x, secret),
                    };
                    (k, x)
                })
                .collect(),
        ),
        other => other,
    }
}

/// The request as it is kept: only the fields a replay sends, secrets replaced.
pub(crate) fn redact(body: Value, secret: Option<&str>) -> Value {
    let Value::Object(fields) = body else {
        return Value::Null;
    };
    let kept = fields
        .into_iter()
        .filter(|(k, _)| KEPT.contains(&k.as_str()))
        .collect();
    scrub_value(Value::Object(kept), secret)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secrets::secret_word;
    use serde_json::json;

    #[test]
    fn only_replayable_fields_are_kept_and_secrets_never() {
        let body = json!({
            "model": "m", "max_tokens": 32, "stream": true,
            "messages": [
                {"role": "system", "content": "You are Annie."},
                {"role": "user", "content": "My key is sk-abcdefghijklmnop1234 and Bearer abc.def, ok? Tell me a joke about tokens."}
            ],
            "metadata": {"api_key": "sk-live-0123456789abcdef", "note": "x"},
            "user": "alice@example.com",
            "api_key": "plain-secret-value",
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"auth_token": "tok-123"}}}],
        });
        let kept = redact(body, Some("door-key-42"));
        let text = kept.to_string();
        for secret in [
            "sk-abcdefghijklmnop1234",
            "abc.def",
            "sk-live",
            "alice@",
            "plain-secret",
            "tok-123",
        ] {
            assert!(!text.contains(secret), "{secret} kept: {text}");
        }
        assert!(kept.get("metadata").is_none() && kept.get("user").is_none());
        assert_eq!(
            kept["messages"][1]["content"],
            "My key is <redacted> and Bearer <redacted>, ok? Tell me a joke about tokens."
        );
        assert_eq!(kept["messages"][0]["content"], "You are Annie.");
        assert_eq!(kept["max_tokens"], 32);
        let k = redact(
            json!({"messages": [{"role": "user", "content": "the door-key-42 leaked"}]}),
            Some("door-key-42"),
        );
        assert_eq!(k["messages"][0]["content"], "the <redacted> leaked");
        assert!(
            !secret_word("skeleton")
                && !secret_word("tokens")
                && secret_word("hf_abcdefghijklmnopqrs")
        );
        for (k, secret) in [
            ("api_key", true),
            ("apiKey", true),
            ("x-api-key", true),
            ("sessionToken", true),
            ("Authorization", true),
            ("max_tokens", false),
            ("keywords", false),
            ("monkey", false),
        ] {
            assert_eq!(secret_key(k), secret, "{k}");
        }
    }
}
