//! The door's own answers, in OpenAI's error shape: a refusal (401, 403, 405), a key past
//! its limit (429 with `Retry-After`), no upstream within the hold (503 with
//! `Retry-After`), a body refused (413, 408), and plain text (`/metrics`).

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::HeaderValue;
use hyper::{Response, StatusCode};

use super::body::Refused;
use super::metered::ProxyBody;
use super::quota::Limited;
use super::route::Refusal;

pub(super) fn text(status: StatusCode, body: String) -> Response<ProxyBody> {
    let mut r = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed(),
    );
    *r.status_mut() = status;
    r
}

pub(super) fn error(status: StatusCode, message: &str) -> Response<ProxyBody> {
    let body = serde_json::json!({"error": {
        "message": message, "type": "sparkctl_frontdoor", "code": status.as_u16()
    }});
    json(status, &body)
}

/// 429: `key` is past a limit; when to come back.
pub(super) fn limited(key: &str, l: &Limited) -> Response<ProxyBody> {
    let body = serde_json::json!({"error": {
        "message": l.message(key), "type": "rate_limit_error", "code": l.code(),
    }});
    let mut r = json(StatusCode::TOO_MANY_REQUESTS, &body);
    let after = l.retry_after.as_secs().max(1);
    r.headers_mut()
        .insert(hyper::header::RETRY_AFTER, HeaderValue::from(after));
    r
}

pub(super) fn json(status: StatusCode, body: &serde_json::Value) -> Response<ProxyBody> {
    let mut r = text(status, body.to_string());
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// No upstream for a request: 503, to be tried again.
pub(super) fn no_upstream(why: Refusal) -> Response<ProxyBody> {
    if let Refusal::StartFailed(f) = &why {
        let body = serde_json::json!({"error": {
            "message": format!(
                "its model's server was started for it and did not start: {}", f.reason
            ),
            "type": "sparkctl_frontdoor", "code": 503, "kind": f.kind, "attempts": f.attempts,
        }});
        let mut r = json(StatusCode::SERVICE_UNAVAILABLE, &body);
        let after = f.retry_in().as_secs().max(1);
        r.headers_mut()
            .insert(hyper::header::RETRY_AFTER, HeaderValue::from(after));
        return r;
    }
    let reason = match why {
        Refusal::QueueFull => {
            "too many requests are waiting for a backend (production is being switched or restarted)"
        }
        Refusal::TimedOut => {
            "no backend could serve within the front door's hold time (production is being switched or restarted)"
        }
        Refusal::Offline => {
            "there is no production behind this front door (`sparkctl rollback --to NAME` or `sparkctl up NAME` sets one)"
        }
        Refusal::StartFailed(_) => unreachable!("answered above"),
    };
    let mut r = error(StatusCode::SERVICE_UNAVAILABLE, reason);
    r.headers_mut()
        .insert(hyper::header::RETRY_AFTER, HeaderValue::from_static("5"));
    r
}

/// A body that was not read whole: why, as an HTTP status.
pub(super) fn body_refused(why: Refused) -> Response<ProxyBody> {
    let status = match why {
        Refused::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        Refused::TimedOut => StatusCode::REQUEST_TIMEOUT,
        Refused::NoRoom => StatusCode::SERVICE_UNAVAILABLE,
        Refused::Broken(_) => StatusCode::BAD_REQUEST,
    };
    let mut r = error(status, &why.message());
    if why == Refused::NoRoom {
        r.headers_mut()
            .insert(hyper::header::RETRY_AFTER, HeaderValue::from_static("5"));
    }
    r
}
