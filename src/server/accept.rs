//! One accept loop for the production port and the control socket. Connections are capped
//! (the excess waits in the kernel's backlog: never refused here, never a crash), idle ones
//! make room first when the cap is reached, a failing `accept` (out of descriptors) backs
//! off instead of spinning, a request's head must arrive within a bound (slowloris), an
//! answer its client stops reading is cut after another, and the end is graceful: no new
//! connection, answers in flight finish, idle ones close.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{watch, Notify};

/// The connection a request came on: one client, as far as the door can tell (a client
/// keeps its connection for its next request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Client(pub(crate) u64);

/// A socket that hands out connections.
pub(crate) trait Listener: Send + 'static {
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    fn accept(&self) -> impl Future<Output = std::io::Result<Self::Io>> + Send;
}

impl Listener for tokio::net::TcpListener {
    type Io = tokio::net::TcpStream;
    async fn accept(&self) -> std::io::Result<Self::Io> {
        let (stream, _) = tokio::net::TcpListener::accept(self).await?;
        // Tokens are small writes that must leave at once.
        let _ = stream.set_nodelay(true);
        Ok(stream)
    }
}

impl Listener for tokio::net::UnixListener {
    type Io = tokio::net::UnixStream;
    async fn accept(&self) -> std::io::Result<Self::Io> {
        Ok(tokio::net::UnixListener::accept(self).await?.0)
    }
}

/// What one accept loop allows.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Connections open at once; beyond it new ones wait in the kernel's backlog.
    pub(in crate::server) connections: usize,
    /// How long a request's head may take to arrive, and an idle kept-alive connection
    /// may wait for the next one.
    pub(in crate::server) header_timeout: Duration,
    /// How long a write may wait for the client to read before the connection is closed.
    pub(in crate::server) send_timeout: Duration,
}

/// A connection whose writes must make progress: a client that reads nothing of its answer
/// for `limit` (its buffers full) gets its connection closed, which ends the answer, its
/// upstream's stream and what they hold. The clock runs only while a write waits.
struct SendBound<IO> {
    io: IO,
    limit: Duration,
    /// Since when a write has waited for the client to read.
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<IO> SendBound<IO> {
    fn new(io: IO, limit: Duration) -> SendBound<IO> {
        SendBound {
            io,
            limit,
            stalled: None,
        }
    }

    /// `r`, a write's outcome; a write still waiting past the limit fails.
    fn track<T>(
        &mut self,
        cx: &mut Context<'_>,
        r: Poll<std::io::Result<T>>,
    ) -> Poll<std::io::Result<T>> {
        if r.is_ready() {
            self.stalled = None;
            return r;
        }
        let limit = self.limit;
        let timer = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "the client read nothing of its answer for {} s",
                    limit.as_secs()
                ),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for SendBound<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for SendBound<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write(cx, buf);
        this.track(cx, r)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.track(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_flush(cx);
        this.track(cx, r)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_shutdown(cx);
        this.track(cx, r)
    }
}

/// The connections of one accept loop: how many, which are idle, how to close them.
#[derive(Clone)]
pub(crate) struct Conns {
    inner: Arc<Mutex<Registry>>,
    /// A connection ended (room for the next, or the last one of a drain).
    freed: Arc<Notify>,
    limit: usize,
}

#[derive(Default)]
struct Registry {
    next: u64,
    live: HashMap<u64, Conn>,
}

struct Conn {
    /// Requests being answered on it.
    busy: u32,
    /// Since when it waits for a request (meaningful while `busy` is 0).
    idle_since: Instant,
    /// Asked to close (eviction): not picked twice.
    closing: bool,
    close: Arc<Notify>,
}

impl Conns {
    pub(crate) fn new(limit: usize) -> Conns {
        Conns {
            inner: Arc::default(),
            freed: Arc::new(Notify::new()),
            limit: limit.max(1),
        }
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Open connections, and those answering a request now.
    pub(crate) fn counts(&self) -> (usize, usize) {
        let r = self.registry();
        (r.live.len(), r.live.values().filter(|c| c.busy > 0).count())
    }

    fn has_room(&self) -> bool {
        self.registry().live.len() < self.limit
    }

    fn open(&self) -> (u64, Arc<Notify>) {
        let mut r = self.registry();
        r.next += 1;
        let id = r.next;
        let close = Arc::new(Notify::new());
        r.live.insert(
            id,
            Conn {
                busy: 0,
                idle_since: Instant::now(),
                closing: false,
                close: close.clone(),
            },
        );
        (id, close)
    }

    fn closed(&self, id: u64) {
        self.registry().live.remove(&id);
        self.freed.notify_waiters();
    }

    /// Asks the connection idle the longest to close; false when every one is busy.
    fn evict_idle(&self) -> bool {
        let mut r = self.registry();
        let oldest = r
            .live
            .values_mut()
            .filter(|c| c.busy == 0 && !c.closing)
            .min_by_key(|c| c.idle_since);
        match oldest {
            Some(c) => {
                c.closing = true;
                c.close.notify_one();
                true
            }
            None => false,
        }
    }

    fn is_busy(&self, id: u64) -> bool {
        self.registry().live.get(&id).is_some_and(|c| c.busy > 0)
    }

    fn busy(&self, id: u64) -> Busy {
        if let Some(c) = self.registry().live.get_mut(&id) {
            c.busy += 1;
        }
        Busy {
            conns: self.clone(),
            id,
        }
    }

    /// Waits until no connection is left, at most until `deadline`; returns how many are.
    pub(crate) async fn drained(&self, deadline: tokio::time::Instant) -> usize {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            let left = self.registry().live.len();
            if left == 0 {
                return 0;
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                return self.registry().live.len();
            }
        }
    }
}

/// A request being answered on connection `id`, until its response body is dropped.
struct Busy {
    conns: Conns,
    id: u64,
}

impl Drop for Busy {
    fn drop(&mut self) {
        if let Some(c) = self.conns.registry().live.get_mut(&self.id) {
            c.busy = c.busy.saturating_sub(1);
            c.idle_since = Instant::now();
        }
    }
}

/// A response body that keeps its connection counted busy until it is done.
pub(crate) struct Guarded<B> {
    inner: B,
    _busy: Busy,
}

impl<B: Body + Unpin> Body for Guarded<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Says at most one line per interval about failing accepts, with how many there were.
struct Complaints {
    what: &'static str,
    last: Option<Instant>,
    since: u64,
}

impl Complaints {
    fn note(&mut self, e: &std::io::Error) {
        self.since += 1;
        if self
            .last
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(10))
        {
            super::say!(
                "accept on {} failed {} time(s) since the last note: {e}; backing off",
                self.what,
                self.since
            );
            self.last = Some(Instant::now());
            self.since = 0;
        }
    }
}

/// The next pause after a failed accept: out of descriptors or memory waits longer (a
/// connection must end first), anything else briefly; never a spin.
fn backoff(previous: Duration, e: &std::io::Error) -> Duration {
    let scarce = matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    );
    let first = if scarce {
        Duration::from_millis(10)
    } else {
        Duration::from_millis(1)
    };
    (previous * 2).clamp(first, Duration::from_secs(1))
}

/// Serves HTTP/1 on `listener` with `handle` until `stop` turns true; then the listener
/// is dropped (closed here) and every connection is asked to finish its answer and close.
/// `Conns::drained` tells when they have.
pub(crate) async fn serve<L, H, F, B>(
    listener: L,
    what: &'static str,
    limits: Limits,
    conns: Conns,
    mut stop: watch::Receiver<bool>,
    handle: H,
) where
    L: Listener,
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: Body<Data = Bytes> + Unpin + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut pause = Duration::ZERO;
    let mut complaints = Complaints {
        what,
        last: None,
        since: 0,
    };
    while !*stop.borrow() {
        // Room first: beyond the cap, connections wait in the kernel's backlog. The one
        // idle the longest makes room when there is one.
        if !conns.has_room() {
            let freed = conns.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if conns.has_room() {
                continue;
            }
            conns.evict_idle();
            tokio::select! {
                _ = freed => {}
                // Another connection may turn idle while every one is busy.
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                _ = stop.changed() => {}
            }
            continue;
        }
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = stop.changed() => continue,
        };
        match accepted {
            Ok(io) => {
                pause = Duration::ZERO;
                let (id, close) = conns.open();
                tokio::spawn(connection(
                    io,
                    limits,
                    conns.clone(),
                    (id, close),
                    stop.clone(),
                    handle.clone(),
                ));
            }
            Err(e) => {
                complaints.note(&e);
                pause = backoff(pause, &e);
                tokio::select! {
                    _ = tokio::time::sleep(pause) => {}
                    _ = stop.changed() => {}
                }
            }
        }
    }
}

async fn connection<IO, H, F, B>(
    io: IO,
    limits: Limits,
    conns: Conns,
    (id, close): (u64, Arc<Notify>),
    mut stop: watch::Receiver<bool>,
    handle: H,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: Body<Data = Bytes> + Unpin + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let service = {
        let conns = conns.clone();
        let stop = stop.clone();
        hyper::service::service_fn(move |mut req: Request<Incoming>| {
            let busy = conns.busy(id);
            req.extensions_mut().insert(Client(id));
            let answer = handle(req);
            let stop = stop.clone();
            async move {
                let mut resp = answer.await;
                // A stopping door says so in the answer, so the client sends its next
                // request on a new connection (to the door that follows) and never on one
                // about to close.
                if *stop.borrow() {
                    resp.headers_mut().insert(
                        hyper::header::CONNECTION,
                        hyper::header::HeaderValue::from_static("close"),
                    );
                }
                Ok::<_, std::convert::Infallible>(resp.map(|inner| Guarded { inner, _busy: busy }))
            }
        })
    };
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .serve_connection(
            TokioIo::new(SendBound::new(io, limits.send_timeout)),
            service,
        );
    tokio::pin!(conn);
    let mut closing = false;
    // Set when the door stops while this connection is idle: until then a request the
    // client has already sent is read and answered (with `Connection: close`), not met by
    // a closed socket, which a client sees as a failed request it cannot safely retry.
    let mut linger: Option<Instant> = None;
    let mut stopping = *stop.borrow();
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    loop {
        if stopping && !closing {
            if conns.is_busy(id) || linger.is_some_and(|l| l.elapsed() >= LINGER) {
                conn.as_mut().graceful_shutdown();
                closing = true;
            } else if linger.is_none() {
                linger = Some(Instant::now());
            }
        }
        tokio::select! {
            _ = conn.as_mut() => break,
            _ = close.notified(), if !closing => {
                conn.as_mut().graceful_shutdown();
                closing = true;
            }
            _ = stop.changed(), if !stopping => stopping = true,
            _ = tick.tick(), if stopping && !closing => {}
        }
    }
    conns.closed(id);
}

/// How long an idle connection stays open once the door stops, for a request already on
/// its way: about a round trip on a busy host, far below any client's idle timeout.
const LINGER: Duration = Duration::from_millis(500);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_accept_backs_off_and_never_spins() {
        let emfile = std::io::Error::from_raw_os_error(libc::EMFILE);
        let aborted = std::io::Error::from_raw_os_error(libc::ECONNABORTED);
        let mut p = Duration::ZERO;
        p = backoff(p, &emfile);
        assert_eq!(p, Duration::from_millis(10));
        for _ in 0..20 {
            p = backoff(p, &emfile);
        }
        assert_eq!(p, Duration::from_secs(1));
        assert_eq!(backoff(Duration::ZERO, &aborted), Duration::from_millis(1));
    }

    #[test]
    fn the_connection_idle_the_longest_makes_room_and_busy_ones_never_do() {
        let conns = Conns::new(3);
        let (a, close_a) = conns.open();
        std::thread::sleep(Duration::from_millis(2));
        let (_b, close_b) = conns.open();
        let (c, _) = conns.open();
        assert!(!conns.has_room());
        let busy_a = conns.busy(a);
        let _busy_c = conns.busy(c);
        assert!(conns.evict_idle(), "b is idle");
        // b was asked; a is busy and older, yet kept.
        let asked = |n: &Arc<Notify>| {
            let f = n.notified();
            tokio::pin!(f);
            f.as_mut().enable()
        };
        assert!(asked(&close_b));
        assert!(!asked(&close_a));
        assert!(
            !conns.evict_idle(),
            "nothing idle that was not asked already"
        );
        drop(busy_a);
        assert!(conns.evict_idle());
        assert!(asked(&close_a));
        assert_eq!(conns.counts(), (3, 1));
    }

    /// A request sent on a kept-alive connection just after the door stops is answered,
    /// and told the connection closes; a connection that sends nothing is closed soon after.
    #[tokio::test]
    async fn a_request_already_on_its_way_at_stop_is_answered_not_cut() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop_tx, stop) = watch::channel(false);
        let conns = Conns::new(16);
        let limits = Limits {
            connections: 16,
            header_timeout: Duration::from_secs(30),
            send_timeout: Duration::from_secs(30),
        };
        let handle = |_req: Request<Incoming>| async {
            Response::new(http_body_util::Full::new(Bytes::from_static(b"ok")))
        };
        tokio::spawn(serve(listener, "test", limits, conns.clone(), stop, handle));
        let ask = b"GET / HTTP/1.1\r\nhost: x\r\n\r\n";
        let mut kept = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut idle = tokio::net::TcpStream::connect(addr).await.unwrap();
        kept.write_all(ask).await.unwrap();
        let mut buf = vec![0u8; 4096];
        let n = kept.read(&mut buf).await.unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
        stop_tx.send(true).unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        kept.write_all(ask).await.unwrap();
        let mut second = Vec::new();
        kept.read_to_end(&mut second).await.unwrap();
        let second = String::from_utf8_lossy(&second).to_lowercase();
        assert!(second.starts_with("http/1.1 200"), "{second}");
        assert!(second.contains("connection: close"), "{second}");
        let deadline = tokio::time::Instant::now() + LINGER * 4;
        assert_eq!(conns.drained(deadline).await, 0, "the idle one stayed open");
        assert_eq!(idle.read(&mut buf).await.unwrap(), 0, "closed, unasked");
    }
}
