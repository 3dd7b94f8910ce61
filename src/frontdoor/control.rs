//! The control socket (`STATE/frontdoor/control.sock`): HTTP over a Unix socket, so only
//! this user (the socket's mode) can switch production. `GET /state`, `POST /switch`
//! (`{"production": …, "drain_ms": …}`), `POST /hold`, `POST /update` (production.json
//! without a change of route), each about one model's production: `?model=NAME` (none: the
//! only model, or the default one; `crate::models`).

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
use tokio::sync::watch;

use super::accept::{self, Conns, Limits};
use super::{Door, DoorStatus, Lanes, SwitchReport};
use crate::error::{Error, Result};
use crate::host::ProcessId;
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

/// The model a control request is about: `?model=NAME`, percent-encoded.
fn model_of(query: Option<&str>) -> Option<String> {
    let value = query?.split('&').find_map(|kv| kv.strip_prefix("model="))?;
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// `model` as a query value: everything but letters and digits percent-encoded.
fn encoded(model: &str) -> String {
    (model.bytes())
        .map(|b| match b.is_ascii_alphanumeric() {
            true => (b as char).to_string(),
            false => format!("%{b:02X}"),
        })
        .collect()
}

async fn handle(lanes: &Lanes, req: Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
    let door = match model_of(req.uri().query()) {
        Some(m) => lanes.lane(&m),
        None => lanes.primary(),
    };
    let changes = req.method() == Method::POST && req.uri().path() == "/switch";
    let answer = answer(lanes, &door, req).await;
    if changes {
        // Another model's production may be the default now.
        lanes.refresh();
    }
    answer
}

async fn answer(
    lanes: &Lanes,
    door: &Door,
    req: Request<hyper::body::Incoming>,
) -> Response<Full<Bytes>> {
    let (method, path) = (req.method().clone(), req.uri().path().to_string());
    let body = match http_body_util::Limited::new(req.into_body(), 1 << 20)
        .collect()
        .await
    {
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
            serde_json::to_value(DoorStatus {
                models: lanes.statuses(),
                ..door.status()
            })
            .unwrap_or(Value::Null),
        ),
        (Method::POST, "/hold") => {
            let v = serde_json::from_slice::<Value>(&body).unwrap_or(Value::Null);
            let drain_ms = v["drain_ms"].as_u64().unwrap_or(0);
            // The command holding: while it lives, the watch leaves production to it.
            let owner = serde_json::from_value::<ProcessId>(v["owner"].clone()).ok();
            let left = door.hold(Duration::from_millis(drain_ms), owner).await;
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
        (Method::GET, "/rollout") => reply(
            StatusCode::OK,
            serde_json::to_value(door.rollout.get().map(|r| r.status())).unwrap_or(Value::Null),
        ),
        (Method::POST, "/rollout") => match serde_json::from_slice::<super::rollout::Asking>(&body)
        {
            Ok(a) => match door.start_rollout(a).await {
                Ok(s) => reply(
                    StatusCode::OK,
                    serde_json::to_value(s).unwrap_or(Value::Null),
                ),
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
        (Method::DELETE, "/rollout") => match door.end_rollout().await {
            Ok(s) => reply(
                StatusCode::OK,
                serde_json::to_value(s).unwrap_or(Value::Null),
            ),
            Err(e) => reply(
                StatusCode::INTERNAL_SERVER_ERROR,
                serde_json::json!({"error": e.to_string()}),
            ),
        },
        (Method::GET, "/capture") => reply(StatusCode::OK, capture_status(door)),
        (Method::POST, "/capture") => match set_capture(door, &body).await {
            Ok(v) => reply(StatusCode::OK, v),
            Err((code, e)) => reply(code, serde_json::json!({"error": e})),
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

fn capture_status(door: &Door) -> Value {
    let dir = super::capture::dir(&door.state);
    serde_json::to_value(door.capture.status(&dir)).unwrap_or(Value::Null)
}

/// A new capture config: written (kept across restarts), then in force.
async fn set_capture(door: &Door, body: &[u8]) -> std::result::Result<Value, (StatusCode, String)> {
    let s: super::capture::CaptureConfig =
        serde_json::from_slice(body).map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()))?;
    crate::state::write_json_off_thread(super::capture::config_file(&door.state), s)
        .await
        .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    door.capture.set(s);
    Ok(capture_status(door))
}

fn bind(path: &Path) -> Result<UnixListener> {
    // A socket left by a crashed predecessor: one server answers here at a time.
    let _ = std::fs::remove_file(path);
    // Created 600, never for a moment more open: the socket switches production. The mask
    // is the process's; for the bind alone, and anything made meanwhile is only the more
    // private for it.
    // SAFETY: umask only swaps the process's file mode mask.
    let before = unsafe { libc::umask(0o177) };
    let bound = UnixListener::bind(path);
    // SAFETY: as above, putting the mask back.
    unsafe { libc::umask(before) };
    bound.map_err(|e| Error::io(format!("cannot listen on {}", path.display()), e))
}

fn inode(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| m.ino())
}

/// Answers the control socket until `stop` turns true. The socket file is looked at every
/// 2 s: gone, or left by a server that died (a restart onto a binary that failed), it is
/// bound again; while another server answers there (a restart), it is that one's.
pub(crate) fn listen(
    path: &Path,
    lanes: Arc<Lanes>,
    limits: Limits,
    stop: watch::Receiver<bool>,
) -> Result<()> {
    let listener = bind(path)?;
    let path = path.to_path_buf();
    tokio::spawn(async move {
        let mut listener = Some(listener);
        let conns = Conns::new(limits.connections);
        loop {
            let Some(l) = listener.take() else { return };
            let ours = inode(&path);
            let (lost_tx, lost) = watch::channel(false);
            let serving = tokio::spawn(accept::serve(
                l,
                "the control socket",
                limits,
                conns.clone(),
                lost,
                {
                    let lanes = lanes.clone();
                    move |req| {
                        let lanes = lanes.clone();
                        async move { handle(&lanes, req).await }
                    }
                },
            ));
            let mut stop = stop.clone();
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(2)) => {}
                    _ = stop.changed() => {}
                }
                if *stop.borrow() {
                    let _ = lost_tx.send(true);
                    return;
                }
                let lost = match inode(&path) {
                    None => true,
                    now if now == ours => false,
                    Some(_) => UnixStream::connect(&path).await.is_err(),
                };
                if lost {
                    break;
                }
            }
            let _ = lost_tx.send(true);
            let _ = serving.await;
            match bind(&path) {
                Ok(l) => {
                    super::say!("the control socket {} was bound again", path.display());
                    listener = Some(l);
                }
                Err(e) => {
                    super::say!("{e}; trying again");
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    listener = bind(&path).ok();
                }
            }
        }
    });
    Ok(())
}

/// The CLI's side of the control socket, about one model's production (none named: the
/// only model, or the default one).
#[derive(Debug, Clone)]
pub(crate) struct Remote {
    socket: PathBuf,
    /// Shared by its clones: a switch that gives the lane another model's name (one model
    /// replaced by another model's recipe) is followed by every part of the flow.
    model: Arc<std::sync::Mutex<Option<String>>>,
}

impl Remote {
    pub(crate) fn new(socket: PathBuf) -> Remote {
        Remote {
            socket,
            model: Arc::default(),
        }
    }

    /// The front door of `state`, about the model whose production (or warm instance) is
    /// `recipe`'s; about the only model when production.json predates several (the front
    /// door knows which).
    pub(crate) fn about(state: &crate::state::StateDir, recipe: &str) -> Remote {
        let door = Remote::new(super::control_socket(state));
        let file = crate::production::Production::load(state).unwrap_or_default();
        match crate::models::serving(&file, recipe) {
            Some(m) if file.model.is_some() => door.for_model(&m),
            _ => door,
        }
    }

    /// The same front door, about `model`'s production.
    pub(crate) fn for_model(&self, model: &str) -> Remote {
        Remote {
            socket: self.socket.clone(),
            model: Arc::new(std::sync::Mutex::new(Some(model.to_string()))),
        }
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        limit: Duration,
    ) -> Result<Value> {
        let unreachable = |cause: String| Error::DoorUnreachable {
            socket: self.socket.clone(),
            cause,
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
            let model = self.model.lock().expect("model").clone();
            let uri = match model {
                Some(m) => format!("{path}?model={}", encoded(&m)),
                None => path.to_string(),
            };
            let req = Request::builder()
                .method(method)
                .uri(uri)
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
                return Err(Error::DoorFailed {
                    what: format!(
                        "refused {path}: {}",
                        v["error"].as_str().unwrap_or("no reason given")
                    ),
                });
            }
            Ok(v)
        };
        tokio::time::timeout(limit, exchange)
            .await
            .map_err(|_| unreachable(format!("no answer within {} s", limit.as_secs())))?
    }

    pub(crate) async fn status(&self) -> Result<DoorStatus> {
        let v = self
            .call(Method::GET, "/state", None, Duration::from_secs(5))
            .await?;
        serde_json::from_value(v).map_err(|e| unreadable("state", e))
    }

    /// New requests wait until the next switch; returns once those in flight finished (or
    /// `drain` passed).
    pub(crate) async fn hold(&self, drain: Duration) -> Result<()> {
        let owner = ProcessId::of(std::process::id());
        let body = serde_json::json!({"drain_ms": drain.as_millis() as u64, "owner": owner});
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
    pub(crate) async fn update(&self, production: &Production) -> Result<()> {
        let body = serde_json::to_value(production).expect("production serializes");
        self.call(Method::POST, "/update", Some(body), Duration::from_secs(10))
            .await
            .map(|_| ())
    }

    /// Capture's settings and counters; with `set`, new settings first.
    pub(crate) async fn capture(
        &self,
        set: Option<super::capture::CaptureConfig>,
    ) -> Result<super::capture::CaptureStatus> {
        let v = match set {
            Some(s) => {
                let body = serde_json::to_value(s).expect("settings serialize");
                self.call(
                    Method::POST,
                    "/capture",
                    Some(body),
                    Duration::from_secs(10),
                )
                .await?
            }
            None => {
                self.call(Method::GET, "/capture", None, Duration::from_secs(5))
                    .await?
            }
        };
        serde_json::from_value(v).map_err(|e| unreadable("answer", e))
    }

    /// Starts a rollout of `asking`'s candidate on this model's traffic.
    pub(crate) async fn start_rollout(
        &self,
        asking: &super::rollout::Asking,
    ) -> Result<super::rollout::RolloutStatus> {
        let body = serde_json::to_value(asking).expect("a rollout serializes");
        let v = self
            .call(
                Method::POST,
                "/rollout",
                Some(body),
                Duration::from_secs(10),
            )
            .await?;
        serde_json::from_value(v).map_err(|e| unreadable("answer", e))
    }

    /// The rollout running, if any.
    pub(crate) async fn rollout(&self) -> Result<Option<super::rollout::RolloutStatus>> {
        let v = self
            .call(Method::GET, "/rollout", None, Duration::from_secs(5))
            .await?;
        serde_json::from_value(v).map_err(|e| unreadable("answer", e))
    }

    /// Ends the rollout; its last status.
    pub(crate) async fn end_rollout(&self) -> Result<Option<super::rollout::RolloutStatus>> {
        // The door waits for the candidate's canary answers to finish (its drain time).
        let v = self
            .call(Method::DELETE, "/rollout", None, Duration::from_secs(600))
            .await?;
        serde_json::from_value(v).map_err(|e| unreadable("answer", e))
    }

    /// Makes `production` current; returns once the old upstream drained (or `drain` passed).
    pub(crate) async fn switch(
        &self,
        production: &Production,
        drain: Duration,
    ) -> Result<SwitchReport> {
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
        let report: SwitchReport =
            serde_json::from_value(v).map_err(|e| unreadable("answer", e))?;
        let mut model = self.model.lock().expect("model");
        if let (Some(now), Some(_)) = (&report.model, model.as_ref()) {
            *model = Some(now.clone());
        }
        drop(model);
        Ok(report)
    }
}

/// An answer of the front door this sparkctl cannot read (another version's, say).
fn unreadable(what: &str, e: serde_json::Error) -> Error {
    Error::DoorFailed {
        what: format!("gave a {what} this sparkctl cannot read ({e})"),
    }
}
