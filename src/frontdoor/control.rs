//! The control socket (`STATE/frontdoor/control.sock`): HTTP over a Unix socket, so only
//! this user (the socket's mode) can switch production. `GET /state`, `POST /switch`
//! (`{"production": …, "drain_ms": …}`), `POST /hold`, `POST /update` (production.json
//! without a change of route).

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::net::{UnixListener, UnixStream};

use super::{Door, DoorStatus, SwitchReport};
use crate::error::{Error, Result};
use crate::production::Production;

#[derive(Debug, Serialize, Deserialize)]
struct SwitchRequest {
    production: Production,
    drain_ms: u64,
}

fn reply(status: StatusCode, body: Value) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = status;
    r
}

async fn handle(door: &Door, req: Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
    let (method, path) = (req.method().clone(), req.uri().path().to_string());
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            return reply(
                StatusCode::BAD_REQUEST,
                serde_json::json!({"error": e.to_string()}),
            )
        }
    };
    match (method, path.as_str()) {
        (Method::GET, "/state") => reply(
            StatusCode::OK,
            serde_json::to_value(door.status()).unwrap_or(Value::Null),
        ),
        (Method::POST, "/hold") => {
            let drain_ms = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|v| v["drain_ms"].as_u64())
                .unwrap_or(0);
            let left = door.hold(Duration::from_millis(drain_ms)).await;
            reply(
                StatusCode::OK,
                serde_json::json!({"holding": true, "left_in_flight": left}),
            )
        }
        (Method::POST, "/update") => match serde_json::from_slice::<Production>(&body) {
            Ok(p) => match door.update(p).await {
                Ok(()) => reply(StatusCode::OK, serde_json::json!({"updated": true})),
                Err(e) => reply(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    serde_json::json!({"error": e.to_string()}),
                ),
            },
            Err(e) => reply(
                StatusCode::BAD_REQUEST,
                serde_json::json!({"error": e.to_string()}),
            ),
        },
        (Method::POST, "/switch") => {
            let req: SwitchRequest = match serde_json::from_slice(&body) {
                Ok(r) => r,
                Err(e) => {
                    return reply(
                        StatusCode::BAD_REQUEST,
                        serde_json::json!({"error": e.to_string()}),
                    )
                }
            };
            match door
                .switch(req.production, Duration::from_millis(req.drain_ms))
                .await
            {
                Ok(report) => reply(
                    StatusCode::OK,
                    serde_json::to_value(report).unwrap_or(Value::Null),
                ),
                // The write of production.json failed: nothing changed.
                Err(e) => reply(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    serde_json::json!({"error": e.to_string()}),
                ),
            }
        }
        _ => reply(
            StatusCode::NOT_FOUND,
            serde_json::json!({"error": "no such route"}),
        ),
    }
}

/// Serves the control socket until the process ends.
pub async fn serve(path: &Path, door: Arc<Door>) -> Result<()> {
    // A socket left by a crashed predecessor: the supervisor runs one server at a time.
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path)
        .map_err(|e| Error::io(format!("cannot listen on {}", path.display()), e))?;
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
    }
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let door = door.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let door = door.clone();
                async move { Ok::<_, Infallible>(handle(&door, req).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// The CLI's side of the control socket.
#[derive(Debug, Clone)]
pub struct Remote {
    socket: PathBuf,
}

impl Remote {
    pub fn new(socket: PathBuf) -> Remote {
        Remote { socket }
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        limit: Duration,
    ) -> Result<Value> {
        let unreachable = |e: String| {
            Error::Failed(format!(
                "the front door does not answer on {} ({e}); `sparkctl frontdoor start` starts it",
                self.socket.display()
            ))
        };
        let exchange = async {
            let stream = UnixStream::connect(&self.socket)
                .await
                .map_err(|e| unreachable(e.to_string()))?;
            let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|e| unreachable(e.to_string()))?;
            tokio::spawn(conn);
            let body = body.map(|b| b.to_string()).unwrap_or_default();
            let req = Request::builder()
                .method(method)
                .uri(path)
                .header(hyper::header::HOST, "frontdoor")
                .body(Full::new(Bytes::from(body)))
                .expect("static request parts are valid");
            let resp = sender
                .send_request(req)
                .await
                .map_err(|e| unreachable(e.to_string()))?;
            let status = resp.status();
            let bytes = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| unreachable(e.to_string()))?
                .to_bytes();
            let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            if !status.is_success() {
                return Err(Error::Failed(format!(
                    "the front door refused {path}: {}",
                    v["error"].as_str().unwrap_or("no reason given")
                )));
            }
            Ok(v)
        };
        tokio::time::timeout(limit, exchange)
            .await
            .map_err(|_| unreachable(format!("no answer within {} s", limit.as_secs())))?
    }

    pub async fn status(&self) -> Result<DoorStatus> {
        let v = self
            .call(Method::GET, "/state", None, Duration::from_secs(5))
            .await?;
        serde_json::from_value(v)
            .map_err(|e| Error::Failed(format!("the front door's state is unreadable: {e}")))
    }

    /// New requests wait until the next switch; returns once those in flight finished (or
    /// `drain` passed).
    pub async fn hold(&self, drain: Duration) -> Result<()> {
        let body = serde_json::json!({"drain_ms": drain.as_millis() as u64});
        self.call(
            Method::POST,
            "/hold",
            Some(body),
            drain + Duration::from_secs(10),
        )
        .await
        .map(|_| ())
    }

    /// Rewrites production.json (a new baseline, say) without changing the route.
    pub async fn update(&self, production: &Production) -> Result<()> {
        let body = serde_json::to_value(production).expect("production serializes");
        self.call(Method::POST, "/update", Some(body), Duration::from_secs(10))
            .await
            .map(|_| ())
    }

    /// Makes `production` current; returns once the old upstream drained (or `drain` passed).
    pub async fn switch(&self, production: &Production, drain: Duration) -> Result<SwitchReport> {
        let body = serde_json::to_value(SwitchRequest {
            production: production.clone(),
            drain_ms: drain.as_millis() as u64,
        })
        .expect("production serializes");
        let v = self
            .call(
                Method::POST,
                "/switch",
                Some(body),
                drain + Duration::from_secs(10),
            )
            .await?;
        serde_json::from_value(v)
            .map_err(|e| Error::Failed(format!("the front door's answer is unreadable: {e}")))
    }
}
