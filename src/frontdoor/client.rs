//! The commands' side of the control socket (`STATE/frontdoor/control.sock`): `Remote`, about
//! one model's production (none named: the only model, or the default one).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;
use tokio::net::UnixStream;

use super::protocol::{self, Refused, Request as Ask};
use super::status::{DoorStatus, SwitchReport};
use crate::error::{Error, Result};
use crate::host::ProcessId;
use crate::production::Production;

/// `model` as a query value: everything but letters and digits percent-encoded.
fn encoded(model: &str) -> String {
    (model.bytes())
        .map(|b| match b.is_ascii_alphanumeric() {
            true => (b as char).to_string(),
            false => format!("%{b:02X}"),
        })
        .collect()
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
        let file = crate::production::Book::load(state).unwrap_or_default();
        match crate::models::serving(&file, recipe) {
            Some(m) if file.settled() => door.for_model(&m),
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

    /// Asks `request` of the front door; its answer as `T`. A refusal comes back as the
    /// error it was in the door, kind and all; a door that does not speak this protocol
    /// (an older sparkctl's) is named as such.
    async fn ask<T: DeserializeOwned>(&self, request: &Ask, limit: Duration) -> Result<T> {
        let (method, path) = request.route();
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
            let body = request.body().map(|b| b.to_string()).unwrap_or_default();
            let model = self.model.lock().expect("model").clone();
            let uri = match model {
                Some(m) => format!("{path}?model={}", encoded(&m)),
                None => path.to_string(),
            };
            let req = Request::builder()
                .method(method)
                .uri(uri)
                .header(hyper::header::HOST, "frontdoor")
                .header(protocol::VERSION_HEADER, protocol::VERSION)
                .body(Full::new(Bytes::from(body)))
                .expect("static request parts are valid");
            let resp = sender
                .send_request(req)
                .await
                .map_err(|e| unreachable(e.to_string()))?;
            let status = resp.status();
            let version = (resp.headers().get(protocol::VERSION_HEADER))
                .and_then(|v| v.to_str().ok()?.parse::<u32>().ok());
            let bytes = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| unreachable(e.to_string()))?
                .to_bytes();
            if version != Some(protocol::VERSION) {
                return Err(Error::DoorTooOld {
                    speaks: version,
                    wants: protocol::VERSION,
                });
            }
            if !status.is_success() {
                let refused: Refused =
                    serde_json::from_slice(&bytes).map_err(|e| unreadable(path, e))?;
                return Err(Error::DoorRefused {
                    route: path,
                    kind: refused.error.kind,
                    message: refused.error.message,
                });
            }
            serde_json::from_slice(&bytes).map_err(|e| unreadable(path, e))
        };
        tokio::time::timeout(limit, exchange)
            .await
            .map_err(|_| unreachable(format!("no answer within {} s", limit.as_secs())))?
    }

    /// The models whose production is one of `recipes` evicted for `for_recipe`, those that
    /// are idle; what was evicted and what kept.
    pub(crate) async fn evict(
        &self,
        recipes: Vec<String>,
        for_recipe: &str,
    ) -> Result<protocol::Evicted> {
        let ask = Ask::Evict(protocol::Evict {
            recipes,
            for_recipe: for_recipe.to_string(),
        });
        self.ask(&ask, Duration::from_secs(60)).await
    }

    pub(crate) async fn status(&self) -> Result<DoorStatus> {
        self.ask(&Ask::State, Duration::from_secs(5)).await
    }

    /// New requests wait until the next switch; returns once those in flight finished (or
    /// `drain` passed).
    pub(crate) async fn hold(&self, drain: Duration) -> Result<()> {
        let hold = Ask::Hold(protocol::Hold {
            drain_ms: drain.as_millis() as u64,
            owner: ProcessId::of(std::process::id()),
        });
        let _: protocol::Held = self.ask(&hold, drain + Duration::from_secs(10)).await?;
        Ok(())
    }

    /// Rewrites production.json (a new baseline, say) without changing the route.
    pub(crate) async fn update(&self, production: &Production) -> Result<()> {
        let update = Ask::Update(production.clone());
        let _: protocol::Updated = self.ask(&update, Duration::from_secs(10)).await?;
        Ok(())
    }

    /// Capture's settings and counters; with `set`, new settings first.
    pub(crate) async fn capture(
        &self,
        set: Option<super::capture::CaptureConfig>,
    ) -> Result<super::capture::CaptureStatus> {
        let ask = match set {
            Some(s) => Ask::SetCapture(s),
            None => Ask::Capture,
        };
        self.ask(&ask, Duration::from_secs(10)).await
    }

    /// Starts a rollout of `asking`'s candidate on this model's traffic.
    pub(crate) async fn start_rollout(
        &self,
        asking: &crate::rollout::Asking,
    ) -> Result<crate::rollout::RolloutStatus> {
        let ask = Ask::StartRollout(asking.clone());
        self.ask(&ask, Duration::from_secs(10)).await
    }

    /// The rollout running, if any.
    pub(crate) async fn rollout(&self) -> Result<Option<crate::rollout::RolloutStatus>> {
        self.ask(&Ask::Rollout, Duration::from_secs(5)).await
    }

    /// Ends the rollout; its last status.
    pub(crate) async fn end_rollout(&self) -> Result<Option<crate::rollout::RolloutStatus>> {
        // The door waits for the candidate's canary answers to finish (its drain time).
        self.ask(&Ask::EndRollout, Duration::from_secs(600)).await
    }

    /// Makes `production` current; returns once the old upstream drained (or `drain` passed).
    pub(crate) async fn switch(
        &self,
        production: &Production,
        drain: Duration,
    ) -> Result<SwitchReport> {
        let switch = Ask::Switch(protocol::Switch {
            production: production.clone(),
            drain_ms: drain.as_millis() as u64,
        });
        let report: SwitchReport = self.ask(&switch, drain + Duration::from_secs(10)).await?;
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
    Error::DoorFailed(crate::error::DoorProblem::Unreadable {
        route: what.to_string(),
        cause: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A control socket that answers every request with `answer` (head and body).
    fn socket(answer: &str) -> (tempdir::Dir, PathBuf) {
        let dir = tempdir::Dir::new();
        let path = dir.0.join("control.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let answer = answer.to_string();
        std::thread::spawn(move || {
            use std::io::{Read, Write};
            for mut conn in listener.incoming().flatten() {
                let mut head = [0u8; 4096];
                let _ = conn.read(&mut head);
                let _ = conn.write_all(answer.as_bytes());
            }
        });
        (dir, path)
    }

    mod tempdir {
        pub(super) struct Dir(pub(super) std::path::PathBuf);
        impl Dir {
            pub(super) fn new() -> Dir {
                let p = std::env::temp_dir().join(format!(
                    "sparkctl-client-{}-{}",
                    std::process::id(),
                    crate::state::new_run_id()
                ));
                std::fs::create_dir_all(&p).unwrap();
                Dir(p)
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    #[tokio::test]
    async fn an_older_door_is_named_and_a_refusal_keeps_its_kind() {
        // A door from before versions: it answers, without the header.
        let (_dir, path) =
            socket("HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}");
        let e = Remote::new(path).status().await.unwrap_err();
        assert!(matches!(e, Error::DoorTooOld { speaks: None, .. }), "{e}");
        assert!(e.to_string().contains("sparkctl frontdoor restart"), "{e}");
        // A full disk in the door reaches the command as `io`, not `failed`.
        let answer = format!(
            "HTTP/1.1 500 Internal Server Error\r\nx-sparkctl-control: {}\r\ncontent-length: 71\r\nconnection: close\r\n\r\n{{\"error\": {{\"kind\": \"io\", \"message\": \"No space left on device (os 28)\"}}}}",
            protocol::VERSION
        );
        let (_dir, path) = socket(&answer);
        let e = Remote::new(path)
            .update(&Production::default())
            .await
            .unwrap_err();
        assert_eq!(e.kind(), crate::error::ErrorKind::Io, "{e}");
        assert!(
            e.to_string().contains("refused /update: No space left"),
            "{e}"
        );
    }
}
