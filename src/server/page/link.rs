//! A report's link on the live page: a capability for that one run's report. A browser
//! follows a link without the page's `Authorization` header, so on a keyed door the page
//! once fetched the report with the key and opened it from a blob URL — a document of the
//! page's own origin, outside the report's sandbox. The page's data (given only with the
//! key) carries instead, per run, a token signed with a secret of this door process; the
//! door serves the report to it under the report's own CSP. A token opens one run's report,
//! reveals nothing of the key, and dies with the door process.

use sha2::{Digest, Sha256};

/// Hex characters of a token: 128 bits of the signature.
const TOKEN_HEX: usize = 32;

/// Signs and checks report links with a secret of this process.
pub(crate) struct Signer {
    /// None when the system gave no randomness: links carry no token, and a report needs
    /// the key (as a header) on a keyed door.
    secret: Option<[u8; 32]>,
}

impl Signer {
    /// A signer with a new secret from the kernel's random source.
    pub(crate) fn new() -> Signer {
        use std::io::Read;
        let mut secret = [0u8; 32];
        let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut secret));
        Signer {
            secret: read.ok().map(|()| secret),
        }
    }

    #[cfg(test)]
    fn with(secret: [u8; 32]) -> Signer {
        Signer {
            secret: Some(secret),
        }
    }

    /// `run`'s token, when this signer has a secret.
    fn token(&self, run: &str) -> Option<String> {
        let mac = hmac(self.secret.as_ref()?, run.as_bytes());
        Some(crate::units::hex(&mac)[..TOKEN_HEX].to_string())
    }

    /// The path the page links `run`'s report by (`prefix` + `/report/RUN[/TOKEN]`).
    pub(crate) fn path(&self, prefix: &str, run: &str) -> String {
        match self.token(run) {
            Some(t) => format!("{prefix}/report/{run}/{t}"),
            None => format!("{prefix}/report/{run}"),
        }
    }

    /// Whether `token` is `run`'s (compared in time independent of where they differ).
    pub(crate) fn opens(&self, run: &str, token: &str) -> bool {
        self.token(run).is_some_and(|t| {
            t.len() == token.len()
                && t.bytes()
                    .zip(token.bytes())
                    .fold(0u8, |d, (a, b)| d | (a ^ b))
                    == 0
        })
    }
}

/// HMAC-SHA256 (RFC 2104) of `msg` under a 32-byte key.
fn hmac(key: &[u8; 32], msg: &[u8]) -> [u8; 32] {
    let mut block = [0u8; 64];
    block[..32].copy_from_slice(key);
    let pad = |byte: u8| block.map(|k| k ^ byte);
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(msg)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_opens_its_own_run_only() {
        let s = Signer::with([7; 32]);
        let path = s.path("/_sparkctl", "20260101-000000000-abcd");
        let token = path.rsplit('/').next().unwrap();
        assert_eq!(token.len(), TOKEN_HEX);
        assert!(s.opens("20260101-000000000-abcd", token));
        assert!(!s.opens("20260101-000000000-abce", token));
        assert!(!s.opens("20260101-000000000-abcd", &token[..31]));
        assert!(!s.opens("20260101-000000000-abcd", ""));
        // Another door process, another secret: yesterday's links open nothing.
        assert!(!Signer::with([8; 32]).opens("20260101-000000000-abcd", token));
        let none = Signer { secret: None };
        assert_eq!(none.path("/p", "r"), "/p/report/r");
        assert!(!none.opens("r", ""));
    }

    #[test]
    fn the_signature_is_hmac_sha256() {
        // RFC 4231 test case 2's message under a 32-byte key (0, 1, … 31); the answer is
        // Python's: hmac.new(bytes(range(32)), msg, "sha256").hexdigest().
        let key: [u8; 32] = std::array::from_fn(|i| i as u8);
        let mac = hmac(&key, b"what do ya want for nothing?");
        assert_eq!(
            crate::units::hex(&mac),
            PYTHON_HMAC,
            "HMAC-SHA256 differs from Python's"
        );
    }

    const PYTHON_HMAC: &str = "099805f4ac310786968565c098db515cc50862b420ae31e20238312344bed36a";
}
