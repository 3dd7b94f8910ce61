//! Request bodies on their way through the front door: read whole (a request no upstream
//! took can be sent again), so bounded by design — a size cap per request, a memory budget
//! shared by all requests being read (the rest wait for room, their clients' sends held by
//! TCP), a time bound between two pieces and for the whole (a client sending one byte a
//! minute holds nothing for long), and memory handed back to the system once a large body
//! is gone.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::HeaderMap;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Larger requests are refused (413): a chat request is kilobytes; images may be MBs.
pub(crate) const MAX_REQUEST: usize = 64 << 20;
/// What all the bodies being read or held at once may take, KiB by KiB.
const BUDGET: usize = 256 << 20;
/// Below this a body is not accounted (a typical request; the cost is not worth it).
const SMALL: usize = 64 << 10;
/// The longest pause between two pieces of a body.
const BETWEEN_PIECES: Duration = Duration::from_secs(15);
/// The longest a whole body may take to arrive, once it has room.
const WHOLE: Duration = Duration::from_secs(120);
/// The longest a body waits for room in the budget.
const FOR_ROOM: Duration = Duration::from_secs(60);

/// Why a body was not read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Over `MAX_REQUEST` (413).
    TooLarge,
    /// Too slow (408).
    TimedOut,
    /// No room in the budget in time (503).
    NoRoom,
    /// The client's connection failed while sending it.
    Broken(String),
}

impl Refused {
    pub(crate) fn message(&self) -> String {
        match self {
            Refused::TooLarge => format!("the request body is over {MAX_REQUEST} bytes"),
            Refused::TimedOut => format!(
                "the request body did not arrive in time (a pause over {} s, or over {} s in all)",
                BETWEEN_PIECES.as_secs(),
                WHOLE.as_secs()
            ),
            Refused::NoRoom => "too many large request bodies at once; retry shortly".to_string(),
            Refused::Broken(e) => format!("the request body could not be read: {e}"),
        }
    }
}

/// A body read whole, holding its share of the budget until the last of its holders (the
/// request, a capture waiting to be written) drops it.
pub(crate) struct Read {
    pub(in crate::server) bytes: Bytes,
    room: Arc<Room>,
}

/// A body's share of the budget.
struct Room {
    _permit: Option<OwnedSemaphorePermit>,
    len: usize,
}

impl Drop for Room {
    fn drop(&mut self) {
        if self.len >= TRIM_ABOVE {
            give_back_memory();
        }
    }
}

impl Read {
    /// The body for another holder: its bytes (not copied) and its share of the budget,
    /// which holds until both have let go.
    pub(crate) fn share(&self) -> Read {
        Read {
            bytes: self.bytes.clone(),
            room: self.room.clone(),
        }
    }
}

/// The shared budget (one per front door).
#[derive(Clone)]
pub(crate) struct Budget {
    kib: Arc<Semaphore>,
}

impl Default for Budget {
    fn default() -> Budget {
        Budget {
            kib: Arc::new(Semaphore::new(BUDGET >> 10)),
        }
    }
}

fn declared_length(headers: &HeaderMap) -> Option<usize> {
    headers
        .get(hyper::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

impl Budget {
    /// Reads `body` whole within the bounds above.
    pub(crate) async fn read(
        &self,
        headers: &HeaderMap,
        mut body: Incoming,
    ) -> Result<Read, Refused> {
        let declared = declared_length(headers);
        if declared.is_some_and(|n| n > MAX_REQUEST) {
            return Err(Refused::TooLarge);
        }
        let mut room: Option<OwnedSemaphorePermit> = None;
        let mut held_kib = 0usize;
        // A declared size takes its room before a byte is read.
        if let Some(n) = declared.filter(|n| *n > SMALL) {
            room = Some(self.room(kib(n)).await?);
            held_kib = kib(n);
        }
        let mut buf = BytesMut::with_capacity(declared.unwrap_or(0).min(MAX_REQUEST));
        let began = Instant::now();
        loop {
            let left = WHOLE.saturating_sub(began.elapsed());
            let frame = match tokio::time::timeout(left.min(BETWEEN_PIECES), body.frame()).await {
                Err(_) => return Err(Refused::TimedOut),
                Ok(None) => break,
                Ok(Some(Err(e))) => return Err(Refused::Broken(e.to_string())),
                Ok(Some(Ok(f))) => f,
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            if buf.len() + data.len() > MAX_REQUEST {
                return Err(Refused::TooLarge);
            }
            buf.extend_from_slice(&data);
            // An undeclared (or understated) size takes room as it grows.
            if buf.len() > SMALL && kib(buf.len()) > held_kib {
                let more = self.room(kib(buf.len()) - held_kib).await?;
                held_kib = kib(buf.len());
                match room.as_mut() {
                    Some(r) => r.merge(more),
                    None => room = Some(more),
                }
            }
        }
        let len = buf.len();
        Ok(Read {
            bytes: buf.freeze(),
            room: Arc::new(Room { _permit: room, len }),
        })
    }

    async fn room(&self, kib: usize) -> Result<OwnedSemaphorePermit, Refused> {
        let n = u32::try_from(kib).map_err(|_| Refused::TooLarge)?;
        match tokio::time::timeout(FOR_ROOM, self.kib.clone().acquire_many_owned(n)).await {
            Ok(Ok(p)) => Ok(p),
            _ => Err(Refused::NoRoom),
        }
    }
}

fn kib(bytes: usize) -> usize {
    bytes.div_ceil(1024)
}

/// Bodies above this hand memory back when they go.
const TRIM_ABOVE: usize = 1 << 20;

/// Large buffers come straight from the system and go straight back (glibc otherwise
/// raises its threshold after the first one and keeps the next ones in its heap).
pub(crate) fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes the allocator's parameters.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 10);
    }
}

/// Returns the heap's free pages to the system shortly after (one trim covers every large
/// body that goes meanwhile), off the workers.
fn give_back_memory() {
    static PENDING: AtomicBool = AtomicBool::new(false);
    if PENDING.swap(true, Ordering::AcqRel) {
        return;
    }
    let trim = || {
        // After the caller's buffer is freed, and those of its neighbours.
        std::thread::sleep(Duration::from_millis(200));
        PENDING.store(false, Ordering::Release);
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: malloc_trim only releases free memory of the allocator.
        unsafe {
            libc::malloc_trim(0);
        }
    };
    if tokio::runtime::Handle::try_current().is_ok() {
        tokio::task::spawn_blocking(trim);
    } else {
        std::thread::spawn(trim);
    }
}
