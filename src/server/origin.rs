//! Which web pages may call the door. The engines behind it allow every origin
//! (llama-server's CORS headers, vLLM's default `--allowed-origins *`), so passing their
//! headers through would let any page the owner opens read the models on the loopback door,
//! and a blind `no-cors` POST needs no CORS at all to start and evict models. The door owns
//! CORS instead: the engines' `Access-Control-*` headers are dropped, preflights are
//! answered here, and an API request from a page of another origin — one not listed in
//! `SPARKCTL_FRONTDOOR_ORIGINS` (none by default) — gets 403 before any model is touched.

use hyper::header::{HeaderMap, HeaderValue};
use hyper::{Method, StatusCode};

pub(crate) use crate::frontdoor::Origins;

/// Who sent a request, as the browser says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Caller {
    /// No browser said otherwise: a program, or a page of the door's own origin.
    Own,
    /// A page of an origin on the list: answered, with CORS headers naming it.
    Allowed(HeaderValue),
    /// A page of another origin, or a request the browser marks `cross-site`.
    Foreign(String),
}

/// The caller of a request with `headers`, sent to a door reached as `host` (its `Host`).
pub(crate) fn caller(headers: &HeaderMap, origins: &Origins) -> Caller {
    let origin = (headers.get(hyper::header::ORIGIN)).and_then(|v| v.to_str().ok());
    let cross_site = (headers.get("sec-fetch-site"))
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("cross-site"));
    let host = (headers.get(hyper::header::HOST)).and_then(|v| v.to_str().ok());
    match origin {
        // `null`: a sandboxed page, a file, a redirect across origins: never the door's.
        Some(o) if origins.allows(o) && o != "null" => match HeaderValue::from_str(o) {
            Ok(v) => Caller::Allowed(v),
            Err(_) => Caller::Foreign(o.to_string()),
        },
        Some(o) if !same_origin(o, host) => Caller::Foreign(o.to_string()),
        _ if cross_site => Caller::Foreign("a page of another site".into()),
        _ => Caller::Own,
    }
}

/// Whether `origin` is the door's own, reached as `host`.
fn same_origin(origin: &str, host: Option<&str>) -> bool {
    let Some(host) = host else { return false };
    let Some(rest) = origin.strip_prefix("http://") else {
        return false;
    };
    rest.eq_ignore_ascii_case(host.trim())
}

/// A preflight (`OPTIONS` with `Access-Control-Request-Method`): answered here, never by an
/// engine. An allowed origin gets what it may send; any other none of it (403).
pub(crate) fn preflight(method: &Method, headers: &HeaderMap) -> bool {
    method == Method::OPTIONS && headers.contains_key(hyper::header::ACCESS_CONTROL_REQUEST_METHOD)
}

/// The status and headers of a preflight's answer from `caller`.
pub(crate) fn preflight_answer(caller: &Caller, headers: &HeaderMap) -> (StatusCode, HeaderMap) {
    let mut out = HeaderMap::new();
    out.insert(hyper::header::VARY, HeaderValue::from_static("Origin"));
    let Caller::Allowed(origin) = caller else {
        return (StatusCode::FORBIDDEN, out);
    };
    out.insert(hyper::header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
    out.insert(
        hyper::header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST, OPTIONS"),
    );
    let asked = headers.get(hyper::header::ACCESS_CONTROL_REQUEST_HEADERS);
    out.insert(
        hyper::header::ACCESS_CONTROL_ALLOW_HEADERS,
        asked
            .cloned()
            .unwrap_or_else(|| HeaderValue::from_static("authorization, content-type")),
    );
    out.insert(
        hyper::header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("600"),
    );
    (StatusCode::NO_CONTENT, out)
}

/// Whether a response header is CORS's, which only the door sets.
pub(crate) fn is_cors(name: &hyper::header::HeaderName) -> bool {
    name.as_str().starts_with("access-control-")
}

/// An answer to an allowed origin names it (the engines' own CORS headers are dropped).
pub(crate) fn allow(caller: &Caller, out: &mut HeaderMap) {
    if let Caller::Allowed(origin) = caller {
        out.insert(hyper::header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
        out.append(hyper::header::VARY, HeaderValue::from_static("Origin"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn only_the_doors_own_origin_and_listed_ones_are_callers() {
        let none = Origins::default();
        let listed = Origins::new(&["http://webui.lan:3000/".into()]);
        let host = ("host", "127.0.0.1:8003");
        // A program, and the door's own page.
        assert_eq!(caller(&headers(&[host]), &none), Caller::Own);
        let own = headers(&[host, ("origin", "http://127.0.0.1:8003")]);
        assert_eq!(caller(&own, &none), Caller::Own);
        // Another page, another port of this machine, a sandboxed page, a blind no-cors POST.
        for o in ["https://evil.example", "http://127.0.0.1:3000", "null"] {
            let h = headers(&[host, ("origin", o)]);
            assert!(matches!(caller(&h, &none), Caller::Foreign(_)), "{o}");
        }
        let blind = headers(&[host, ("sec-fetch-site", "cross-site")]);
        assert!(matches!(caller(&blind, &none), Caller::Foreign(_)));
        // A listed origin, however written.
        let h = headers(&[host, ("origin", "HTTP://WebUI.lan:3000")]);
        assert!(matches!(caller(&h, &listed), Caller::Allowed(_)));
        let (status, out) = preflight_answer(&caller(&h, &listed), &h);
        assert_eq!(status, StatusCode::NO_CONTENT);
        assert!(out.contains_key(hyper::header::ACCESS_CONTROL_ALLOW_ORIGIN));
        let evil = headers(&[host, ("origin", "https://evil.example")]);
        let (status, out) = preflight_answer(&caller(&evil, &listed), &evil);
        assert_eq!(status, StatusCode::FORBIDDEN);
        assert!(!out.contains_key(hyper::header::ACCESS_CONTROL_ALLOW_ORIGIN));
    }
}
