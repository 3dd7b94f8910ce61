//! Keys for the front door, one per client (a person, an agent): a random secret printed
//! once at `keys add`, of which only a hash is kept (`STATE/keys.json`, 0600), with what the
//! key may reach (`--models`), whether it is an admin's (the live page, `/metrics`), and when
//! it ends (`--expires`; `rotate --overlap` keeps the old secret that long). The running
//! door reads the file again when it changes. A key is checked by hashing what a request
//! presents and comparing with every kept hash in constant time.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, FlagProblem, Result};
use crate::state::StateDir;

/// What a key is shown as: a prefix that says what it is, 32 random bytes in hex (256 bits).
const PREFIX: &str = "sk-spark-";

/// One client's key, as kept: never the secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Key {
    pub(crate) name: String,
    /// sha256 of the secret, hex; the secret before it, during a rotation's overlap.
    hashes: Vec<Secret>,
    /// The models it may ask for (their served names); None: every one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) models: Option<Vec<String>>,
    /// The live page, `/metrics` and every model.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) admin: bool,
    pub(crate) created: String,
    /// Unix seconds after which it opens nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) expires: Option<u64>,
    /// What it may use (none set: no bound but the door's own).
    #[serde(default, skip_serializing_if = "Limits::none")]
    pub(crate) limits: Limits,
}

/// A key's bounds; past one the door answers 429 with `Retry-After`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Limits {
    /// Requests begun in any 60 s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) rpm: Option<u32>,
    /// Requests at once (waiting for their model or answering).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) concurrency: Option<u32>,
    /// Tokens in and out in a UTC day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) tokens_per_day: Option<u64>,
}

impl Limits {
    pub(crate) fn none(&self) -> bool {
        *self == Limits::default()
    }
}

/// A secret's hash, and until when it opens (a rotated-out one).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Secret {
    sha256: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    until: Option<u64>,
}

impl Key {
    /// Whether it may ask for `model`.
    pub(crate) fn reaches(&self, model: &str) -> bool {
        self.admin
            || self
                .models
                .as_ref()
                .is_none_or(|m| m.iter().any(|x| x == model))
    }
}

/// The keys file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Keys {
    #[serde(default)]
    keys: Vec<Key>,
    /// The file is there and could not be read: the door takes it as guarding, and
    /// opens to its own key alone.
    #[serde(skip)]
    unreadable: bool,
}

pub(crate) fn path(state: &StateDir) -> PathBuf {
    state.root().join("keys.json")
}

fn now() -> u64 {
    crate::units::unix_now().as_secs()
}

fn sha256_hex(secret: &str) -> String {
    crate::units::hex(&Sha256::digest(secret.as_bytes()))
}

/// Compares in time independent of where the first difference is.
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

fn new_secret() -> Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| Error::io("cannot read /dev/urandom for a key", e))?;
    Ok(format!("{PREFIX}{}", crate::units::hex(&bytes)))
}

impl Keys {
    /// The keys file of `state` (none yet: no keys).
    pub(crate) fn load(state: &StateDir) -> Result<Keys> {
        let p = path(state);
        match std::fs::read(&p) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| Error::DamagedState {
                path: p,
                cause: e.to_string(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Keys::default()),
            Err(e) => Err(Error::io(format!("cannot read {}", p.display()), e)),
        }
    }

    /// Written whole, by rename, readable by its user alone.
    fn save(&self, state: &StateDir) -> Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let p = path(state);
        crate::state::write_json(&p, self)?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| Error::io(format!("cannot make {} private", p.display()), e))
    }

    pub(crate) fn all(&self) -> &[Key] {
        &self.keys
    }

    /// A keys file that cannot be read: nothing but the door's own key opens.
    pub(crate) fn unreadable() -> Keys {
        Keys {
            keys: Vec::new(),
            unreadable: true,
        }
    }

    /// Whether the door needs a key: any key kept, even one that has ended (a door whose
    /// last key expired does not fall open), or a file that cannot be read.
    pub(crate) fn guards(&self) -> bool {
        self.unreadable || !self.keys.is_empty()
    }

    /// The key whose secret `presented` is, when one is and it has not ended.
    pub(crate) fn find(&self, presented: &str) -> Option<&Key> {
        let (t, hash) = (now(), sha256_hex(presented));
        let mut found = None;
        // Every hash is compared, whichever matches: the time says nothing of which.
        for k in &self.keys {
            let live = k.expires.is_none_or(|e| e > t);
            for s in &k.hashes {
                let open = live && s.until.is_none_or(|u| u > t);
                if same(s.sha256.as_bytes(), hash.as_bytes()) && open {
                    found = Some(k);
                }
            }
        }
        found
    }
}

/// What `keys add` asks for.
pub(crate) struct NewKey {
    pub(crate) name: String,
    pub(crate) models: Option<Vec<String>>,
    pub(crate) admin: bool,
    pub(crate) expires: Option<Duration>,
    pub(crate) limits: Limits,
}

/// Adds a key; its secret, to be shown once.
pub(crate) fn add(state: &StateDir, new: NewKey) -> Result<String> {
    let mut keys = Keys::load(state)?;
    let legal = |c: char| c.is_ascii_alphanumeric() || "-_.".contains(c);
    if new.name.is_empty() || !new.name.chars().all(legal) {
        return Err(Error::BadFlag(FlagProblem::KeyName { name: new.name }));
    }
    if keys.keys.iter().any(|k| k.name == new.name) {
        return Err(Error::BadFlag(FlagProblem::KeyExists { name: new.name }));
    }
    let secret = new_secret()?;
    keys.keys.push(Key {
        name: new.name,
        hashes: vec![Secret {
            sha256: sha256_hex(&secret),
            until: None,
        }],
        models: new.models,
        admin: new.admin,
        created: crate::units::now_utc(),
        expires: new.expires.map(|d| now() + d.as_secs()),
        limits: new.limits,
    });
    keys.save(state)?;
    Ok(secret)
}

/// Ends `name`'s key at once.
pub(crate) fn revoke(state: &StateDir, name: &str) -> Result<()> {
    let mut keys = Keys::load(state)?;
    let before = keys.keys.len();
    keys.keys.retain(|k| k.name != name);
    if keys.keys.len() == before {
        return Err(unknown(&keys, name));
    }
    keys.save(state)
}

/// A new secret for `name`; the old one opens for `overlap` more (none: ends now).
pub(crate) fn rotate(state: &StateDir, name: &str, overlap: Option<Duration>) -> Result<String> {
    let mut keys = Keys::load(state)?;
    let secret = new_secret()?;
    let t = now();
    let Some(k) = keys.keys.iter_mut().find(|k| k.name == name) else {
        return Err(unknown(&keys, name));
    };
    // Old secrets: until the overlap ends (one already ending keeps its own end).
    k.hashes.retain(|s| s.until.is_none_or(|u| u > t));
    for s in &mut k.hashes {
        let end = t + overlap.map_or(0, |d| d.as_secs());
        s.until = Some(s.until.map_or(end, |u| u.min(end)));
    }
    k.hashes.retain(|s| s.until.is_none_or(|u| u > t));
    k.hashes.push(Secret {
        sha256: sha256_hex(&secret),
        until: None,
    });
    keys.save(state)?;
    Ok(secret)
}

fn unknown(keys: &Keys, name: &str) -> Error {
    Error::BadFlag(FlagProblem::NoKey {
        name: name.to_string(),
        keys: keys.keys.iter().map(|k| k.name.clone()).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> (StateDir, PathBuf) {
        let dir = std::env::temp_dir().join(format!(
            "sparkctl-keys-{}-{}",
            std::process::id(),
            crate::state::new_run_id()
        ));
        (StateDir::open(&dir).unwrap(), dir)
    }

    #[test]
    fn a_key_is_kept_as_a_hash_and_opens_what_it_may() {
        let (state, dir) = state();
        let new = |name: &str, models: Option<Vec<&str>>| NewKey {
            name: name.into(),
            models: models.map(|m| m.iter().map(|s| s.to_string()).collect()),
            admin: false,
            expires: None,
            limits: Limits::default(),
        };
        let kid = add(&state, new("kid", Some(vec!["tiny"]))).unwrap();
        assert!(kid.starts_with(PREFIX) && kid.len() == PREFIX.len() + 64);
        let text = std::fs::read_to_string(path(&state)).unwrap();
        assert!(
            !text.contains(&kid[PREFIX.len()..]),
            "the secret was stored"
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path(&state))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let keys = Keys::load(&state).unwrap();
        let k = keys.find(&kid).unwrap();
        assert!(k.reaches("tiny") && !k.reaches("big"));
        assert!(keys.find("sk-spark-wrong").is_none());
        assert!(add(&state, new("kid", None)).is_err());
        // Rotated with no overlap: the old secret ends, the new one opens.
        let again = rotate(&state, "kid", None).unwrap();
        let keys = Keys::load(&state).unwrap();
        assert!(keys.find(&kid).is_none() && keys.find(&again).is_some());
        // With an overlap, both open meanwhile.
        let third = rotate(&state, "kid", Some(Duration::from_secs(60))).unwrap();
        let keys = Keys::load(&state).unwrap();
        assert!(keys.find(&again).is_some() && keys.find(&third).is_some());
        revoke(&state, "kid").unwrap();
        assert!(!Keys::load(&state).unwrap().guards());
        let e = revoke(&state, "kid").unwrap_err().to_string();
        assert!(e.contains("key kid: there are no keys"), "{e}");
        // One that has ended still guards: the door does not fall open.
        let mut ended = new("old", None);
        ended.expires = Some(Duration::ZERO);
        let old = add(&state, ended).unwrap();
        let keys = Keys::load(&state).unwrap();
        assert!(keys.guards() && keys.find(&old).is_none());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
