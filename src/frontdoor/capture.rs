//! What traffic capture is asked to do and what it did (`frontdoor capture`): the config
//! kept in `STATE/frontdoor/capture.json` and the status the door gives. The writer is the
//! front door's (`crate::server::capture`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub(crate) use crate::capture_file::{dir, files};

/// What capture is asked to do (`STATE/frontdoor/capture.json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CaptureConfig {
    pub(crate) on: bool,
    /// The most the captured files take together, bytes.
    pub(crate) max_bytes: u64,
}

/// The default bound: 64 MiB, some tens of thousands of requests.
pub(crate) const DEFAULT_MAX: u64 = 64 << 20;

/// The capture's config, where it writes, and what it wrote since the front door started.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct CaptureStatus {
    /// Named `settings` in the JSON that `frontdoor capture status --json` prints.
    #[serde(rename = "settings")]
    pub(crate) config: CaptureConfig,
    pub(crate) dir: PathBuf,
    /// What the capture files hold now.
    pub(crate) bytes: u64,
    pub(crate) written: u64,
    pub(crate) dropped: u64,
}

pub(crate) fn config_file(state: &crate::state::StateDir) -> PathBuf {
    super::dir(state).join("capture.json")
}

/// The config as written, or capture off.
pub(crate) fn read_config(state: &crate::state::StateDir) -> CaptureConfig {
    crate::state::read_json(&config_file(state)).unwrap_or(CaptureConfig {
        on: false,
        max_bytes: DEFAULT_MAX,
    })
}
