//! vLLM 0.32's sleep mode as its code defines it (`entrypoints/serve/dev/sleep`, the
//! engine core's `sleep`/`wake_up`): routes open only in its development mode
//! (`VLLM_SERVER_DEV_MODE=1`). `POST /sleep?level=N` (0 to 2, default 1) pauses scheduling
//! — requests are still taken and wait — and at level 1 or 2 frees the memory the server
//! holds (here: `--hold-memory`); `POST /wake_up` (optionally `?tags=weights`,
//! `?tags=kv_cache`) takes it back and resumes once everything is awake; `GET /is_sleeping`
//! says which. After level 2 the weights are gone: a wake must reload them
//! (`POST /collective_rpc {"method": "reload_weights"}`) or the first answer is garbage,
//! as the real engine's would be. Without `--enable-sleep-mode` vLLM's CPU worker ignores
//! a sleep (it frees nothing, it still pauses); so does this one.

use std::sync::Mutex;
use std::time::Duration;

use hyper::Method;
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::error::{Error, Result};
use crate::stdio;

/// Where a sleeping server stands.
#[derive(Debug, Clone, Default, PartialEq)]
struct Asleep {
    /// 0: awake. Else the level it was put to sleep at.
    level: u8,
    /// The tags still asleep (`weights`, `kv_cache`); empty when awake.
    tags: Vec<&'static str>,
    /// Level 2 dropped the weights; a wake brings back the memory, not what was in it.
    weights_lost: bool,
}

/// The sleep state of one simulated engine.
pub(super) struct Sleep {
    /// Whether `--enable-sleep-mode` was given: only then does a sleep free memory.
    enabled: bool,
    /// What is held while awake (`--hold-memory`), freed at level 1 or 2.
    held: Mutex<Option<Vec<u8>>>,
    bytes: usize,
    state: Mutex<Asleep>,
    /// False while scheduling is paused: requests wait on it.
    running: watch::Sender<bool>,
    /// A wake takes this long (the weights copied back, the KV cache allocated).
    wake_time: Duration,
    /// `--wake-fault`.
    fault: Option<super::WakeFault>,
}

impl Sleep {
    pub(super) fn new(
        enabled: bool,
        held: Vec<u8>,
        (wake_time, fault): (Duration, Option<super::WakeFault>),
    ) -> Sleep {
        Sleep {
            enabled,
            bytes: held.len(),
            held: Mutex::new(Some(held)),
            state: Mutex::new(Asleep::default()),
            running: watch::Sender::new(true),
            wake_time,
            fault,
        }
    }

    /// Waits while scheduling is paused (a request taken during a sleep).
    pub(super) async fn resumed(&self) {
        let mut rx = self.running.subscribe();
        let _ = rx.wait_for(|running| *running).await;
    }

    /// Whether the weights a level-2 sleep dropped were not reloaded before the wake.
    pub(super) fn weights_lost(&self) -> bool {
        self.state.lock().expect("sleep").weights_lost
    }

    pub(super) fn is_sleeping(&self) -> Value {
        json!({"is_sleeping": self.state.lock().expect("sleep").level > 0})
    }

    /// One development route's answer: its status and body.
    pub(super) async fn answer(
        &self,
        method: &Method,
        path: &str,
        query: Option<&str>,
        body: &Value,
    ) -> (u16, Value) {
        match (method, path) {
            (&Method::POST, "/sleep") => self.sleep(query),
            (&Method::POST, "/wake_up") => self.wake_up(query).await,
            (&Method::GET, "/is_sleeping") => (200, self.is_sleeping()),
            (&Method::POST, "/collective_rpc") => self.collective_rpc(body),
            _ => (405, json!({"detail": "Method Not Allowed"})),
        }
    }

    /// `POST /sleep?level=N`: the answer's status and body.
    pub(super) fn sleep(&self, query: Option<&str>) -> (u16, Value) {
        let level = match param(query, "level") {
            None => 1,
            Some(l) => match l.parse::<u8>() {
                Ok(l) if l <= 2 => l,
                // vLLM's validation error, as its handler words it.
                _ => {
                    let message = format!(
                        "1 validation error:\n  {{'type': 'less_than_equal', 'loc': 'query.level', \
                         'msg': 'Input should be less than or equal to 2', 'input': '{l}', \
                         'ctx': {{'le': 2}}}}"
                    );
                    return (
                        400,
                        json!({"error": {"message": message, "type": "Bad Request",
                            "param": "query.level", "code": 400}}),
                    );
                }
            },
        };
        self.running.send_replace(false);
        if level >= 1 {
            let mut s = self.state.lock().expect("sleep");
            s.level = level;
            s.tags = vec!["weights", "kv_cache"];
            if self.enabled {
                s.weights_lost |= level == 2;
                // Freed: the process holds what it holds without its weights and cache.
                *self.held.lock().expect("held") = None;
            }
        }
        (200, json!({"status": "sleeping", "level": level}))
    }

    /// `POST /wake_up[?tags=…]`: awake once every tag is; it takes `--wake-time` when memory
    /// comes back.
    pub(super) async fn wake_up(&self, query: Option<&str>) -> (u16, Value) {
        match self.fault {
            Some(super::WakeFault::Fail) => {
                let e = json!({"error": {"message": "simulated wake failure", "code": 500}});
                return (500, e);
            }
            Some(super::WakeFault::Hang) => std::future::pending().await,
            None => {}
        }
        let asked: Vec<String> = params(query, "tags");
        let tags = (!asked.is_empty()).then(|| asked.clone());
        let frees = {
            let mut s = self.state.lock().expect("sleep");
            if s.level == 0 {
                self.running.send_replace(true);
                return (200, json!({"status": "awake", "tags": tags}));
            }
            match asked.is_empty() {
                true => s.tags.clear(),
                false => s.tags.retain(|t| !asked.iter().any(|a| a == t)),
            }
            self.enabled && s.tags.is_empty()
        };
        if frees {
            tokio::time::sleep(self.wake_time).await;
            let back = hold(self.bytes as u64).unwrap_or_default();
            *self.held.lock().expect("held") = Some(back);
        }
        let mut s = self.state.lock().expect("sleep");
        let awake = s.tags.is_empty();
        if awake {
            s.level = 0;
            self.running.send_replace(true);
        }
        let status = if awake { "awake" } else { "sleeping" };
        (200, json!({"status": status, "tags": tags}))
    }

    /// `POST /collective_rpc`: `reload_weights` restores what a level-2 sleep dropped; any
    /// other method is answered as the engine answers a method it runs with no result.
    pub(super) fn collective_rpc(&self, body: &Value) -> (u16, Value) {
        match body.get("method").and_then(Value::as_str) {
            None => (400, json!({"detail": "Missing 'method' in request body"})),
            Some("reload_weights") => {
                self.state.lock().expect("sleep").weights_lost = false;
                (200, json!({"results": [null]}))
            }
            Some(_) => (200, json!({"results": [null]})),
        }
    }
}

/// Allocates `bytes` and writes every byte, so the kernel really backs them (an untouched
/// allocation is only address space, and would not show in RSS or the cgroup's use).
pub(super) fn hold(bytes: u64) -> Result<Vec<u8>> {
    let n = usize::try_from(bytes)
        .map_err(|_| Error::BadFlag(crate::error::FlagProblem::HoldMemoryTooBig { bytes }))?;
    let mut held: Vec<u8> = Vec::new();
    held.try_reserve_exact(n).map_err(|e| {
        Error::Failed(format!(
            "sim: cannot allocate --hold-memory {bytes} bytes ({e}); ask for less"
        ))
    })?;
    // Non-zero, so no allocator or kernel shortcut for zeroed memory leaves pages untouched.
    // One memset: `resize` writes byte by byte in a debug build (the suite's), seconds for
    // 300 MB, which a wake and a start would both pay as if the engine did.
    // SAFETY: `try_reserve_exact` gave room for `n` bytes; all of them are written before
    // the length covers them.
    unsafe {
        std::ptr::write_bytes(held.as_mut_ptr(), 1, n);
        held.set_len(n);
    }
    // Keep the writes: nothing reads them, and the optimiser must not drop them.
    std::hint::black_box(&mut held);
    stdio::out(format_args!(
        "sparkctl-sim: holding {bytes} bytes of memory (--hold-memory)"
    ));
    Ok(held)
}

/// The first value of `name` in a query string.
fn param<'a>(query: Option<&'a str>, name: &str) -> Option<&'a str> {
    (query?.split('&')).find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
}

/// Every value of `name` in a query string.
fn params(query: Option<&str>, name: &str) -> Vec<String> {
    (query.unwrap_or_default().split('&'))
        .filter_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
        .map(String::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_sleep_pauses_frees_and_a_wake_takes_it_back_as_vllm_s_does() {
        let s = Sleep::new(true, vec![1u8; 4096], (Duration::from_millis(10), None));
        assert_eq!(s.is_sleeping(), json!({"is_sleeping": false}));
        assert_eq!(s.sleep(Some("level=3")).0, 400);
        assert_eq!(
            s.sleep(Some("level=2")),
            (200, json!({"status": "sleeping", "level": 2}))
        );
        assert_eq!(s.is_sleeping(), json!({"is_sleeping": true}));
        assert!(s.held.lock().unwrap().is_none());
        // A request taken now waits.
        assert!(tokio::time::timeout(Duration::from_millis(20), s.resumed())
            .await
            .is_err());
        // Weights first: still asleep.
        let (_, v) = s.wake_up(Some("tags=weights")).await;
        assert_eq!(v, json!({"status": "sleeping", "tags": ["weights"]}));
        assert_eq!(
            s.collective_rpc(&json!({"method": "reload_weights"})).0,
            200
        );
        let (_, v) = s.wake_up(Some("tags=kv_cache")).await;
        assert_eq!(v, json!({"status": "awake", "tags": ["kv_cache"]}));
        assert!(!s.weights_lost());
        assert_eq!(s.held.lock().unwrap().as_ref().map(Vec::len), Some(4096));
        s.resumed().await;
        // Level 2 then a plain wake: awake, but the weights are gone.
        s.sleep(Some("level=2"));
        assert_eq!(
            s.wake_up(None).await.1,
            json!({"status": "awake", "tags": null})
        );
        assert!(s.weights_lost());
        // Without sleep mode, as vLLM's CPU worker: it pauses and frees nothing.
        let off = Sleep::new(false, vec![1u8; 4096], (Duration::ZERO, None));
        off.sleep(None);
        assert_eq!(off.is_sleeping(), json!({"is_sleeping": true}));
        assert!(off.held.lock().unwrap().is_some());
    }
}
