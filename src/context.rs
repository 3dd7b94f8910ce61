//! What the commands that run things share, built once by the CLI: the state dir, both
//! runtimes, where the image lock is, the machine's settings and this binary.

use crate::runtime::Runtimes;

pub(crate) struct Context {
    pub(crate) state: crate::state::StateDir,
    /// images.lock, which containers run their digests from.
    pub(crate) lock_path: std::path::PathBuf,
    pub(crate) runtimes: Runtimes,
    pub(crate) settings: crate::settings::Settings,
    /// This binary: what runs `sparkctl sim` for sim recipes on the host, and the front
    /// door's process.
    pub(crate) self_exe: String,
}
