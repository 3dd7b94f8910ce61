//! How a long command tells how it is getting on (`starting qwen`, `stopping old to make
//! room`, `pulling …`): one trait the library's flows speak to, and that the terminal
//! (`cli::Output`, on stderr, silenced by `--quiet`) or a log (`ToLog`) carries. What a
//! command found, its result, goes to stdout through the CLI, never through here.

/// Where a flow's steps go (Sync: the front door's watch runs its flows on any worker).
pub(crate) trait Progress: Sync {
    /// One step, begun or done, in a line.
    fn step(&self, line: &str);
}

/// Steps as warnings in the log: for the front door's watch, which has no terminal and
/// whose every step (a restart, making room) is worth reading there.
pub(crate) struct ToLog;

impl Progress for ToLog {
    fn step(&self, line: &str) {
        tracing::warn!("{line}");
    }
}
