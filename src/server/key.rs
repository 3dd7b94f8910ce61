//! Who a request is, by the key it carries: the door's own key (`SPARKCTL_FRONTDOOR_API_KEY`,
//! an admin's), or a client's from `STATE/keys.json` (`crate::keys`), read again whenever
//! the file changes (looked at at most every `LOOK` ms, so a key added or revoked counts
//! within a second, without a restart). A loopback door with no key at all is open, as it
//! always was; once any key exists, every request but `/health` needs one.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Instant, SystemTime};

use hyper::HeaderMap;

use super::quota::{Limited, Permit, Quota};
use crate::keys::{Key, Keys};

/// Where Anthropic's clients put their key.
pub(crate) const X_API_KEY: &str = "x-api-key";

/// How often the keys file is looked at, ms.
const LOOK: u64 = 200;

/// Who a request is.
#[derive(Debug, Clone)]
pub(crate) enum Caller {
    /// No key is set anywhere: a loopback door open to all, as before keys.
    Open,
    /// The door's own key (None), or a key made `--admin`: everything.
    Admin(Option<Key>),
    /// A client's key: the models it may reach.
    Client(Key),
    /// Keys exist, and this request carries none of them.
    Nobody,
}

impl Caller {
    /// The live page, `/metrics`: an admin's (or anyone's on an open door).
    pub(crate) fn admin(&self) -> bool {
        matches!(self, Caller::Open | Caller::Admin(_))
    }

    /// The keys-file key it came with, whose limits and usage count.
    pub(crate) fn key(&self) -> Option<&Key> {
        match self {
            Caller::Admin(k) => k.as_ref(),
            Caller::Client(k) => Some(k),
            _ => None,
        }
    }

    /// Whether it may ask for `model` (its served name).
    pub(crate) fn reaches(&self, model: &str) -> bool {
        match self {
            Caller::Open | Caller::Admin(_) => true,
            Caller::Client(k) => k.reaches(model),
            Caller::Nobody => false,
        }
    }
}

/// The keys a door knows, as of the last look at the file.
pub(crate) struct Access {
    own: Option<String>,
    file: PathBuf,
    keys: RwLock<(Option<Seen>, Arc<Keys>)>,
    began: Instant,
    looked_ms: AtomicU64,
    /// Each key's limits in force and use.
    pub(crate) quota: Arc<Quota>,
}

/// What a look at the file saw: a rename (every write is one) gives a new inode, so a
/// change within one tick of the clock is not missed.
type Seen = (u64, Option<SystemTime>, u64);

fn modified(file: &PathBuf) -> Option<Seen> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(file).ok()?;
    Some((m.ino(), m.modified().ok(), m.len()))
}

impl Access {
    pub(crate) fn new(own: Option<String>, state: &crate::state::StateDir) -> Access {
        let file = crate::keys::path(state);
        let keys = Keys::load(state).unwrap_or_else(|e| {
            tracing::error!("the keys are not read, so only the door's own key opens it: {e}");
            Keys::unreadable()
        });
        Access {
            own,
            keys: RwLock::new((modified(&file), Arc::new(keys))),
            file,
            began: Instant::now(),
            looked_ms: AtomicU64::new(0),
            quota: Quota::new(state),
        }
    }

    /// The keys now: read again when the file changed since the last look.
    fn current(&self) -> Arc<Keys> {
        let now = self.began.elapsed().as_millis() as u64;
        let last = self.looked_ms.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= LOOK
            && self
                .looked_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            let seen = modified(&self.file);
            let stale = self.keys.read().expect("keys").0 != seen;
            if stale {
                let read = std::fs::read(&self.file)
                    .ok()
                    .and_then(|b| serde_json::from_slice::<Keys>(&b).ok());
                // A file being replaced (or gone) reads as none: gone is no keys.
                let keys = match (read, seen) {
                    (Some(k), _) => Some(k),
                    (None, None) => Some(Keys::default()),
                    (None, Some(_)) => None,
                };
                if let Some(k) = keys {
                    *self.keys.write().expect("keys") = (seen, Arc::new(k));
                }
            }
        }
        self.keys.read().expect("keys").1.clone()
    }

    /// Whether any key guards the door (then its `Authorization` is never forwarded).
    pub(crate) fn keyed(&self) -> bool {
        self.own.is_some() || self.current().guards()
    }

    /// Who a request carrying `headers` is.
    pub(crate) fn caller(&self, headers: &HeaderMap) -> Caller {
        // OpenAI's clients send `Authorization: Bearer`; Anthropic's (Claude Code) `x-api-key`.
        let bearer = (headers.get(hyper::header::AUTHORIZATION))
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let presented = bearer.or_else(|| headers.get(X_API_KEY).and_then(|v| v.to_str().ok()));
        let keys = self.current();
        if let Some(p) = presented {
            if (self.own.as_deref())
                .is_some_and(|own| crate::keys::same(p.as_bytes(), own.as_bytes()))
            {
                return Caller::Admin(None);
            }
            if let Some(k) = keys.find(p) {
                return match k.admin {
                    true => Caller::Admin(Some(k.clone())),
                    false => Caller::Client(k.clone()),
                };
            }
        }
        match self.own.is_none() && !keys.guards() {
            true => Caller::Open,
            false => Caller::Nobody,
        }
    }
}

impl Access {
    /// A request of `caller` admitted against its key's limits (None: no key to count).
    pub(crate) fn admit(&self, caller: &Caller) -> Result<Option<Permit>, (String, Limited)> {
        match caller.key() {
            None => Ok(None),
            Some(k) => (self.quota.admit(k).map(Some)).map_err(|l| (k.name.clone(), l)),
        }
    }
}

/// The door's own answer (`GET /v1/models` with several models) as `caller` may see it: a
/// client key's listing holds only its models.
pub(crate) fn scoped(mut v: serde_json::Value, caller: &Caller) -> serde_json::Value {
    if let (Caller::Client(_), Some(data)) = (caller, v.get_mut("data")) {
        if let Some(list) = data.as_array_mut() {
            // An alias or a preset is of the model it stands for.
            let model = |m: &serde_json::Value| {
                m["sparkctl"]["model"]
                    .as_str()
                    .or(m["id"].as_str())
                    .map(str::to_string)
            };
            list.retain(|m| model(m).is_some_and(|id| caller.reaches(&id)));
        }
    }
    v
}

/// A 403's body for a request naming `model` outside `caller`'s scope, naming what it may
/// ask for.
pub(crate) fn out_of_scope(model: &str, caller: &Caller) -> serde_json::Value {
    let allowed = match caller {
        Caller::Client(k) => k.models.clone().unwrap_or_default(),
        _ => Vec::new(),
    };
    serde_json::json!({"error": {
        "message": format!("this key may not ask for `{model}`; it may ask for: {}", allowed.join(", ")),
        "type": "permission_error", "code": "model_not_allowed", "models": allowed,
    }})
}

/// What `caller` may see of the keys' use (all time the book keeps): a client key its own.
pub(crate) fn usage(access: &Access, caller: &Caller) -> serde_json::Value {
    let mut all = access.quota.since(0);
    if let Caller::Client(k) = caller {
        all.retain(|name, _| *name == k.name);
    }
    serde_json::to_value(all).unwrap_or_default()
}
