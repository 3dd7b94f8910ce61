//! The control socket's server side (`STATE/frontdoor/control.sock`): HTTP over a Unix
//! socket, so only this user (the socket's mode) can switch production. Each request is read
//! into the protocol's typed `Request` (`crate::frontdoor::protocol`) in one place, then
//! applied to one model's lane (`?model=NAME`; none: the only model, or the default one);
//! what goes wrong is a `Refusal` with its error's kind.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, StatusCode};
use serde_json::Value;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;

use super::accept::{self, Conns, Limits};
use super::{Door, Lanes};
use crate::error::ErrorKind;
use crate::error::{Error, Result};
use crate::frontdoor::protocol::{self, Held, Refusal, Refused, Request as Ask, Updated};
use crate::frontdoor::status::DoorStatus;

/// An answer, with the protocol's version.
fn reply(status: StatusCode, body: Value) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        protocol::VERSION_HEADER,
        hyper::header::HeaderValue::from(protocol::VERSION),
    );
    r
}

fn refuse(refused: Refusal) -> Response<Full<Bytes>> {
    let status = refused.status();
    let body = serde_json::to_value(Refused { error: refused }).unwrap_or(Value::Null);
    reply(status, body)
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

/// How long a command's eviction may take: the watch's next look, the drain of a request
/// that slipped in, the stop.
const EVICT_WITHIN: Duration = Duration::from_secs(45);

async fn handle(lanes: &Lanes, req: Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
    let door = match model_of(req.uri().query()) {
        Some(m) => lanes.lane(&m),
        None => lanes.primary(),
    };
    let (method, path) = (req.method().clone(), req.uri().path().to_string());
    let bytes = match http_body_util::Limited::new(req.into_body(), 1 << 20)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            let refused = Refusal::new(ErrorKind::Usage, format!("the request's body: {e}"));
            return refuse(refused);
        }
    };
    let request = match Ask::parse(&method, &path, &bytes) {
        Ok(r) => r,
        Err(refused) => return refuse(refused),
    };
    let switches = request.switches();
    let answered = apply(lanes, &door, request).await;
    if switches {
        // Another model's production may be the default now.
        lanes.refresh();
    }
    match answered {
        Ok(v) => reply(StatusCode::OK, v),
        Err(refused) => refuse(refused),
    }
}

/// Does what `request` asks of `door`'s model; its answer, or why not.
async fn apply(lanes: &Lanes, door: &Door, request: Ask) -> Result<Value, Refusal> {
    let answer = |v: std::result::Result<Value, serde_json::Error>| {
        v.map_err(|e| {
            Refusal::new(
                ErrorKind::Failed,
                format!("an answer that does not serialize: {e}"),
            )
        })
    };
    let done = |r: crate::error::Result<Value>| r.map_err(|e| Refusal::from(&e));
    match request {
        Ask::State => answer(serde_json::to_value(DoorStatus {
            models: lanes.statuses(),
            ..door.status()
        })),
        Ask::Hold(h) => {
            let left = door.hold(Duration::from_millis(h.drain_ms), h.owner).await;
            answer(serde_json::to_value(Held {
                holding: true,
                left_in_flight: left,
            }))
        }
        Ask::Update(p) => {
            done(door.update(p).await.map(|()| Value::Null))?;
            answer(serde_json::to_value(Updated { updated: true }))
        }
        Ask::Rollout => answer(serde_json::to_value(door.rollout.get().map(|r| r.status()))),
        Ask::StartRollout(a) => {
            let s = done(door.start_rollout(a).await.map(|s| serde_json::json!(s)))?;
            Ok(s)
        }
        Ask::EndRollout => done(door.end_rollout().await.map(|s| serde_json::json!(s))),
        Ask::Capture => answer(serde_json::to_value(capture_status(door))),
        Ask::SetCapture(c) => {
            let path = super::capture::config_file(&door.state);
            done(
                crate::state::write_json_off_thread(path, c)
                    .await
                    .map(|()| Value::Null),
            )?;
            door.capture.set(c);
            answer(serde_json::to_value(capture_status(door)))
        }
        Ask::Evict(e) => {
            let mut out = crate::frontdoor::protocol::Evicted::default();
            for lane in lanes.all() {
                let Some(recipe) = lane.production().current.map(|c| c.recipe) else {
                    continue;
                };
                if !e.recipes.contains(&recipe) {
                    continue;
                }
                match lane.demand.evict_for(&e.for_recipe, EVICT_WITHIN).await {
                    Ok(()) => out.evicted.push(recipe),
                    Err(why) => out.kept.push((recipe, why)),
                }
            }
            answer(serde_json::to_value(out))
        }
        // A write of production.json that failed changed nothing.
        Ask::Switch(s) => done(
            door.switch(s.production, Duration::from_millis(s.drain_ms))
                .await
                .map(|r| serde_json::json!(r)),
        ),
    }
}

fn capture_status(door: &Door) -> crate::frontdoor::capture::CaptureStatus {
    let dir = super::capture::dir(&door.state);
    door.capture.status(&dir)
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
