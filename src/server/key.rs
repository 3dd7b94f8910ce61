//! The front door's API key: whether a request carries it, compared in constant time.

use hyper::HeaderMap;

/// Compares in time independent of where the first difference is.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// Whether the request carries the door's API key (always, when it has none).
pub(crate) fn authorized(api_key: Option<&str>, headers: &HeaderMap) -> bool {
    api_key.is_none_or(|key| {
        let given = headers
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or_default();
        same_secret(given.as_bytes(), key.as_bytes())
    })
}
