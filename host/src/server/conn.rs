//! Serving connections with limits on every one of them (axum's `serve`
//! has none): HTTP/1 through hyper with
//!
//! - a header-read timeout (a client that does not finish a request head in
//!   time is cut off; hyper starts it whenever a connection waits for its
//!   next request, so it also bounds idle keep-alive connections),
//! - an idle timeout (no request in flight and no byte either way),
//! - a request-body timeout (in the router, `router.rs`),
//! - a 2 MiB read buffer and up to 1,024 headers, so oversized heads reach
//!   the router's own 414/431 answers instead of hyper's empty ones,
//! - a bound on open connections (more are closed at once), and a smaller
//!   one on connections that have not yet made one authorised request
//!   ([`Trust`]): when it is reached, the oldest such connection is closed
//!   to make room, so a flood of half-open connections cannot keep a health
//!   check or an operator out;
//! - a write queue of at most 16 pieces of a response (hyper's vectored
//!   writes: body chunks are queued, not copied, and the body is not read
//!   further while the queue is full), so a client that does not read an
//!   event stream leaves little unread output in the node, and a
//!   [`Closer`] in each request's extensions, with which the event stream
//!   closes a connection whose client reads nothing (`events/hub.rs`);
//!
//! WebSocket upgrades leave hyper, and these timeouts, behind: region
//! sessions are long-lived and have their own deadlines (`sessions.rs`).
//! Every limit is a field of [`ConnectionLimits`], a flag and a TOML key.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// The read buffer of a connection: the largest request head hyper reads.
pub const MAX_BUF_SIZE: usize = 2 << 20;
/// Most headers in a request head.
pub const MAX_HEADERS: usize = 1_024;
/// The default of [`ConnectionLimits::max_event_streams`].
pub const DEFAULT_MAX_EVENT_STREAMS: usize = 256;
/// How long connections get to finish after a shutdown began.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// The limits of every connection. See the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Time to send a request head (and to start the next on a kept-alive connection).
    pub header_read_timeout: Duration,
    /// Time to send a request body.
    pub request_body_timeout: Duration,
    /// A connection with no request in flight and no traffic this long is closed.
    pub idle_timeout: Duration,
    /// Time a region session has to send its `Hello`, then its first `Register`.
    pub session_handshake_timeout: Duration,
    /// Most open connections (region sessions included); more are closed at once.
    pub max_connections: usize,
    /// Most connections that have not yet made an authorised request.
    pub max_unauthenticated: usize,
    /// How long a follower waits for the head of the leader's answer to a
    /// call it forwards before answering `503 leader-unavailable`
    /// (`forward.rs`; an upload waits for its compile instead).
    pub forward_timeout: Duration,
    /// Most event streams (`GET /v1/events`) served at once; more get
    /// `429 too-many-streams` (`events/hub.rs`).
    pub max_event_streams: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            header_read_timeout: Duration::from_secs(10),
            request_body_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            session_handshake_timeout: Duration::from_secs(10),
            max_connections: 4_096,
            max_unauthenticated: 512,
            forward_timeout: Duration::from_secs(5),
            max_event_streams: DEFAULT_MAX_EVENT_STREAMS,
        }
    }
}

/// A connection's standing, in its requests' extensions: unauthenticated
/// until a request of it passes the token checks ([`Trust::grant`]).
#[derive(Clone, Default)]
pub struct Trust(Arc<TrustState>);

#[derive(Default)]
struct TrustState {
    granted: AtomicBool,
    ended: AtomicBool,
    /// Cancelled to close the connection to make room.
    evict: CancellationToken,
}

impl Trust {
    /// The connection made an authorised request: it no longer counts as
    /// unauthenticated.
    pub fn grant(&self) {
        self.0.granted.store(true, Ordering::Relaxed);
    }

    fn pending(&self) -> bool {
        !self.0.granted.load(Ordering::Relaxed) && !self.0.ended.load(Ordering::Relaxed)
    }
}

/// Closes the connection a request came on: in every request's extensions.
#[derive(Clone, Debug, Default)]
pub struct Closer(CancellationToken);

impl Closer {
    /// The token that closes the connection when cancelled.
    pub fn token(&self) -> CancellationToken {
        self.0.clone()
    }
}

/// The connections not yet trusted, oldest first.
#[derive(Default)]
struct Untrusted(VecDeque<Trust>);

impl Untrusted {
    /// Makes room for one more under `max`, closing the oldest.
    fn admit(&mut self, trust: Trust, max: usize) {
        self.0.retain(Trust::pending);
        while self.0.len() >= max {
            let Some(oldest) = self.0.pop_front() else { break };
            oldest.0.evict.cancel();
        }
        self.0.push_back(trust);
    }
}

/// An I/O stream that records when it last moved a byte.
struct Tracked<T> {
    inner: T,
    activity: Arc<AtomicU64>,
    epoch: Instant,
}

impl<T> Tracked<T> {
    fn touch(&self) {
        self.activity.store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Tracked<T> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.touch();
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Tracked<T> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(polled, std::task::Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, data);
        if matches!(polled, std::task::Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Marks a connection's trust as ended when its task ends.
struct Ended(Trust);

impl Drop for Ended {
    fn drop(&mut self) {
        self.0.0.ended.store(true, Ordering::Relaxed);
    }
}

/// Counts requests in flight on a connection while alive.
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn start(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        InFlight(count.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A TCP listener whose connections send each write at once: with Nagle's
/// algorithm a pipelining region's small answers wait for the peer's
/// acknowledgement of the previous ones. Pass it to `Node::serve`.
pub fn no_delay(
    listener: tokio::net::TcpListener,
) -> axum::serve::TapIo<tokio::net::TcpListener, fn(&mut tokio::net::TcpStream)> {
    use axum::serve::ListenerExt;
    fn set(stream: &mut tokio::net::TcpStream) {
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "cannot set TCP_NODELAY");
        }
    }
    listener.tap_io(set as fn(&mut tokio::net::TcpStream))
}

/// Serves `router` on `listener` with `limits` until `shutdown` completes;
/// then stops accepting, asks every connection to finish, and waits for
/// them at most [`SHUTDOWN_GRACE`].
pub async fn serve<L>(
    mut listener: L,
    router: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    let all = Arc::new(Semaphore::new(limits.max_connections));
    let mut untrusted = Untrusted::default();
    let stop = CancellationToken::new();
    let mut refused_logged = Instant::now() - Duration::from_secs(60);
    tokio::pin!(shutdown);
    loop {
        let (io, peer) = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = &mut shutdown => break,
        };
        let Ok(permit) = all.clone().try_acquire_owned() else {
            drop(io);
            if refused_logged.elapsed() >= Duration::from_secs(1) {
                refused_logged = Instant::now();
                tracing::warn!(?peer, "connection limit reached: closing new connections");
            }
            continue;
        };
        let trust = Trust::default();
        untrusted.admit(trust.clone(), limits.max_unauthenticated);
        tokio::spawn(connection(io, router.clone(), limits, trust, stop.clone(), permit));
    }
    stop.cancel();
    let everyone = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    if tokio::time::timeout(SHUTDOWN_GRACE, all.acquire_many(everyone)).await.is_err() {
        tracing::warn!("connections still open {SHUTDOWN_GRACE:?} after the shutdown began; leaving them");
    }
}

async fn connection<I>(
    io: I,
    router: Router,
    limits: ConnectionLimits,
    trust: Trust,
    stop: CancellationToken,
    _permit: OwnedSemaphorePermit,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let epoch = Instant::now();
    let activity = Arc::new(AtomicU64::new(0));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let io = TokioIo::new(Tracked { inner: io, activity: activity.clone(), epoch });
    let requests = in_flight.clone();
    let evicted = trust.0.evict.clone();
    let _ended = Ended(trust.clone());
    let closer = Closer::default();
    let closed = closer.token();
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        request.extensions_mut().insert(trust.clone());
        request.extensions_mut().insert(closer.clone());
        let flight = InFlight::start(&requests);
        let router = router.clone();
        async move {
            let response = router.oneshot(request.map(Body::new)).await;
            drop(flight);
            response
        }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(MAX_BUF_SIZE)
        .max_headers(MAX_HEADERS)
        .writev(true)
        .keep_alive(true);
    let conn = builder.serve_connection(io, service).with_upgrades();
    tokio::pin!(conn);
    let check = (limits.idle_timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(5));
    let mut closing = false;
    // A connection asked to close that does not (a client that stopped
    // mid-body) is dropped after this long.
    let mut drop_at = tokio::time::Instant::now() + Duration::from_secs(365 * 24 * 3600);
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(drop_at) => {
                tracing::debug!("dropped a connection that did not finish closing");
                return;
            }
            result = conn.as_mut() => {
                if let Err(error) = result {
                    tracing::debug!(%error, "connection ended");
                }
                return;
            }
            _ = tokio::time::sleep(check), if !closing => {
                let quiet = epoch.elapsed().saturating_sub(Duration::from_millis(activity.load(Ordering::Relaxed)));
                if in_flight.load(Ordering::Relaxed) == 0 && quiet >= limits.idle_timeout {
                    closing = true;
                    drop_at = tokio::time::Instant::now() + limits.idle_timeout;
                    conn.as_mut().graceful_shutdown();
                }
            }
            _ = closed.cancelled() => {
                tracing::debug!("closed a connection whose client reads nothing of its event stream");
                return;
            }
            _ = evicted.cancelled() => {
                tracing::debug!("closed an unauthenticated connection to make room for a newer one");
                return;
            }
            _ = stop.cancelled(), if !closing => {
                closing = true;
                drop_at = tokio::time::Instant::now() + SHUTDOWN_GRACE;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}
