//! The state dir's locks: one writer at a time (`StateLock`, lent for a while by a flow
//! that only waits), and the deployment records held while a start spawns.

use std::fs;
use std::io::Write;

use super::StateDir;
use crate::error::{Error, Result};

/// One writer at a time: an exclusive `flock` on `STATE/lock`, released when the holder
/// exits however it exits. The file names the holder's pid for the next caller's message.
pub(crate) struct StateLock {
    file: std::fs::File,
}

/// The state lock let go for a while (`StateLock::lend`): taken back when dropped, waiting
/// for whoever took it meanwhile.
pub(crate) struct Lent<'a>(&'a StateLock);

impl StateLock {
    /// Lets other commands change state until the returned guard is dropped: a flow that
    /// only waits (a rollout's window of an hour) must not hold every other model still.
    pub(crate) fn lend(&self) -> Lent<'_> {
        use std::os::unix::io::AsRawFd;
        // SAFETY: flock on a descriptor this lock owns.
        unsafe { libc::flock(self.file.as_raw_fd(), libc::LOCK_UN) };
        Lent(self)
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        use std::os::unix::io::AsRawFd;
        // Blocking: a command that took it meanwhile ends, and this flow goes on after it.
        // SAFETY: flock on a descriptor the lock owns.
        unsafe { libc::flock(self.0.file.as_raw_fd(), libc::LOCK_EX) };
    }
}

/// The deployment records held (`StateDir::hold_deployment_records`) until dropped.
pub(crate) struct RecordsHeld {
    _dir: std::fs::File,
}

impl StateDir {
    pub(crate) fn lock(&self, what: &str) -> Result<StateLock> {
        use std::io::{Read, Seek};
        use std::os::unix::io::AsRawFd;
        let path = self.root.join("lock");
        let mut file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io(format!("cannot open {}", path.display()), e))?;
        // SAFETY: flock on a descriptor this function owns.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            return Err(Error::StateLockHeld {
                holder: Some(holder.trim().to_string()).filter(|h| !h.is_empty()),
            });
        }
        let _ = file.set_len(0);
        let _ = file.rewind();
        let _ = writeln!(file, "pid {} running `sparkctl {what}`", std::process::id());
        Ok(StateLock { file })
    }

    /// Holds the deployment records still while a start checks that its recipe is not
    /// running and records the process it spawns: two starters of one recipe (the front
    /// door's watch and a command's way back) must not both spawn, the loser's record
    /// hiding the winner's process. An `flock` on the directory itself, so that it needs
    /// no new file on a full disk; blocking, as the section is a spawn and one write.
    pub(crate) fn hold_deployment_records(&self) -> Result<RecordsHeld> {
        use std::os::unix::io::AsRawFd;
        let dir = self.root.join("deployments");
        let file = fs::File::open(&dir)
            .map_err(|e| Error::io(format!("cannot open {}", dir.display()), e))?;
        // SAFETY: flock on a descriptor this function owns.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(Error::io(
                format!("cannot lock {}", dir.display()),
                std::io::Error::last_os_error(),
            ));
        }
        Ok(RecordsHeld { _dir: file })
    }
}
