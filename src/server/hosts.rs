//! Which requests the front door takes at all. A web page can rebind its own name to the
//! door's address (DNS rebinding) and then read the live page or call the API from the
//! user's browser, in the page's name: the browser says that name in `Host`. So the door
//! answers only to its addresses, `localhost` and the names it goes by (421 to any other),
//! and only to targets that are a path (400 to `OPTIONS *`, to a proxy's absolute target,
//! to `CONNECT`): it is nobody's proxy to elsewhere.

use hyper::{Request, StatusCode};

/// Why a request is not the door's to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Misdirected {
    /// The target is not a path (`*`, `http://elsewhere/…`, `host:443`).
    NotAPath,
    /// `Host` names none of the door's addresses or names.
    ForeignHost(String),
}

impl Misdirected {
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            Misdirected::NotAPath => StatusCode::BAD_REQUEST,
            Misdirected::ForeignHost(_) => StatusCode::MISDIRECTED_REQUEST,
        }
    }

    pub(crate) fn message(&self) -> String {
        match self {
            Misdirected::NotAPath => "the request target must be a path such as /v1/models: \
                this front door forwards nothing elsewhere"
                .into(),
            Misdirected::ForeignHost(host) => format!(
                "this front door answers to its addresses, localhost and the names in \
                 SPARKCTL_FRONTDOOR_NAMES, not to `{host}` (a web page's name rebound to it \
                 is refused; a name of this machine's goes in SPARKCTL_FRONTDOOR_NAMES)"
            ),
        }
    }
}

/// The host part of a `Host` value (`name`, `name:port`, `[v6]:port`).
fn host_of(value: &str) -> &str {
    let value = value.trim();
    if let Some(rest) = value.strip_prefix('[') {
        return rest.split(']').next().unwrap_or_default();
    }
    match value.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => host,
        _ => value,
    }
}

/// Whether a `Host` value names the door: an IP address (no page can make a browser send
/// one for its own name), `localhost` (browsers resolve it themselves), or one of `names`.
pub(crate) fn allowed(value: &str, names: &[String]) -> bool {
    let host = crate::frontdoor::normal_name(host_of(value));
    host.parse::<std::net::IpAddr>().is_ok()
        || host == "localhost"
        || host.ends_with(".localhost")
        || names.contains(&host)
}

/// Why `req` is not the door's to answer, if it is not. A request without `Host` (HTTP/1.0
/// tools) came from no browser.
pub(crate) fn check<B>(req: &Request<B>, names: &[String]) -> Option<Misdirected> {
    let uri = req.uri();
    if uri.scheme().is_some() || uri.authority().is_some() || !uri.path().starts_with('/') {
        return Some(Misdirected::NotAPath);
    }
    let host = req.headers().get(hyper::header::HOST)?;
    let value = String::from_utf8_lossy(host.as_bytes());
    (!allowed(&value, names)).then(|| Misdirected::ForeignHost(value.chars().take(100).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(target: &str, host: Option<&str>) -> Request<()> {
        let mut b = Request::builder().uri(target);
        if let Some(h) = host {
            b = b.header("host", h);
        }
        b.body(()).unwrap()
    }

    #[test]
    fn only_its_addresses_and_names_are_answered() {
        let names = vec!["spark.lan".to_string()];
        for ok in [
            "127.0.0.1:8003",
            "10.0.0.7",
            "[::1]:8003",
            "[fe80::1]",
            "localhost:8003",
            "LOCALHOST.",
            "app.localhost:8003",
            "Spark.LAN:8003",
        ] {
            assert_eq!(
                check(&request("/v1/models", Some(ok)), &names),
                None,
                "{ok}"
            );
        }
        assert_eq!(check(&request("/v1/models", None), &names), None);
        for foreign in [
            "evil.example:8003",
            "spark.lan.evil.example",
            "127.0.0.1.nip.io",
        ] {
            assert!(
                matches!(
                    check(&request("/v1/models", Some(foreign)), &names),
                    Some(Misdirected::ForeignHost(_))
                ),
                "{foreign}"
            );
        }
        for target in ["*", "http://example.com/v1/models", "example.com:443"] {
            assert_eq!(
                check(&request(target, Some("127.0.0.1")), &names),
                Some(Misdirected::NotAPath),
                "{target}"
            );
        }
    }
}
