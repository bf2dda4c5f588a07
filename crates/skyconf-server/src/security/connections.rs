//! Connections: how many each port holds (in all, and per source on the gRPC port), how long a
//! new one may take to say what it is, how accepting behaves when the process runs out of file
//! descriptors, and how a connection closes.
//!
//! - **Handshake deadline.** A new connection must send its opening bytes within
//!   [`ConnectionLimits::handshake_timeout`], or it is closed. On the gRPC port that is the
//!   HTTP/2 preface and the header of the first SETTINGS frame (33 bytes). On the admin port it
//!   is the HTTP/2 preface likewise, or the complete header block of the first HTTP/1 request.
//!   With TLS, the TLS handshake has a deadline of its own ([`super::tls::HANDSHAKE_TIMEOUT`]) and
//!   these bytes are counted above TLS, so the deadline starts again once TLS is up. Once these bytes are in, the deadline is gone for good: an agent's
//!   long-lived, mostly idle connection is never cut by it (dead peers are found by HTTP/2
//!   keep-alive pings, see [`super::GrpcLimits`]).
//! - **Connection cap.** Each port accepts at most so many connections at once; the next one
//!   waits in the kernel's backlog until one closes. The gRPC cap defaults to below the
//!   process's open-file limit, which is read from `/proc/self/limits` and logged at start.
//! - **Connection share.** On the gRPC port one source (an IP address, an IPv6 /64) holds at most
//!   [`ConnectionLimits::max_grpc_connections_per_source`] of them (a quarter of the cap by
//!   default, see [`super::sources`]); a connection beyond its source's share is closed as soon as
//!   it is accepted, and counted, so that connections which answer every ping (never cut as
//!   idle) cannot take the cap from the fleet.
//! - **Accept errors.** Out of file descriptors (`EMFILE`, `ENFILE`) and the like: the accept loop
//!   logs a warning once per episode and backs off (10 ms doubling to 1 s) instead of spinning.
//! - **Closing.** A gRPC connection the server closes is drained first, and cut at shutdown when
//!   it outlasts its bound ([`super::drain`]): [`Guarded`] does both.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

use super::drain::{Drain, OpenSocket};
use super::metrics::EdgeMetrics;
use super::sources::{Bound, Source, SourceConnection, Sources, default_share};
use crate::socket::{AgentConnection, ConnectionState, OpenConnection, Slot, SlotMakers};

/// The HTTP/2 client preface and the header of the SETTINGS frame that must follow it.
const HTTP2_OPENING_BYTES: usize = 24 + 9;

/// File descriptors kept free for everything that is not a connection (stores, files, logs).
const FD_RESERVE: u64 = 128;

/// Connection limits of both ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// How long a new connection may take to send its opening bytes (see the module docs).
    pub handshake_timeout: Duration,
    /// Concurrent connections on the gRPC port; `None`: below the open-file limit.
    pub max_grpc_connections: Option<usize>,
    /// Concurrent connections on the gRPC port from one source ([`super::sources`]); `None`: a
    /// quarter of the gRPC cap.
    pub max_grpc_connections_per_source: Option<usize>,
    /// Concurrent connections on the admin port.
    pub max_admin_connections: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            handshake_timeout: Duration::from_secs(10),
            max_grpc_connections: None,
            max_grpc_connections_per_source: None,
            max_admin_connections: 256,
        }
    }
}

impl ConnectionLimits {
    /// The gRPC cap: as configured, or the soft open-file limit less the admin cap and a
    /// reserve (at least 16). Logs the limit it read.
    pub fn grpc_cap(&self) -> usize {
        let soft = open_file_limit();
        match soft {
            Some(soft) => tracing::info!(open_file_limit = soft, "Read the process's open-file limit."),
            None => tracing::info!("Cannot read the process's open-file limit; assuming 1024."),
        }
        self.grpc_cap_under(soft)
    }

    /// One source's share of the gRPC cap `cap`: as configured (at most the cap), or a quarter.
    pub fn grpc_share(&self, cap: usize) -> usize {
        self.max_grpc_connections_per_source.map_or_else(|| default_share(cap), |share| share.clamp(1, cap.max(1)))
    }

    /// [`Self::grpc_cap`] under the soft open-file limit `soft` (`None`: unknown, 1024).
    fn grpc_cap_under(&self, soft: Option<u64>) -> usize {
        if let Some(configured) = self.max_grpc_connections {
            return configured.max(1);
        }
        let soft = soft.unwrap_or(1024);
        let cap = soft.saturating_sub(self.max_admin_connections as u64).saturating_sub(FD_RESERVE).max(16);
        usize::try_from(cap).unwrap_or(usize::MAX).min(Semaphore::MAX_PERMITS)
    }
}

/// The soft `Max open files` of this process, from `/proc/self/limits`; `None` elsewhere or
/// when unlimited.
pub fn open_file_limit() -> Option<u64> {
    parse_open_file_limit(&std::fs::read_to_string("/proc/self/limits").ok()?)
}

fn parse_open_file_limit(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..].split_whitespace().next()?.parse().ok()
}

/// What a connection's opening bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opening {
    /// The HTTP/2 preface and a frame header (the gRPC port).
    Http2,
    /// The HTTP/2 preface likewise, or an HTTP/1 request's header block up to its empty line.
    Http1OrHttp2,
}

/// Finds the end of a connection's opening bytes.
#[derive(Debug, Clone, Copy)]
struct OpeningBytes {
    opening: Opening,
    read: usize,
    /// The first bytes read.
    head: [u8; 4],
    /// The last bytes read, to find `\r\n\r\n` across reads.
    tail: [u8; 4],
}

impl OpeningBytes {
    fn new(opening: Opening) -> Self {
        Self { opening, read: 0, head: [0; 4], tail: [0; 4] }
    }

    /// Whether the opening bytes are complete after `bytes` more were read.
    fn opened(&mut self, bytes: &[u8]) -> bool {
        for &b in bytes {
            self.read = self.read.saturating_add(1);
            if let Some(slot) = self.head.get_mut(self.read - 1) {
                *slot = b;
            }
            // `PRI ` starts only the HTTP/2 preface.
            if self.opening == Opening::Http2 || (self.read >= 4 && self.head == *b"PRI ") {
                if self.read >= HTTP2_OPENING_BYTES {
                    return true;
                }
                continue;
            }
            self.tail = [self.tail[1], self.tail[2], self.tail[3], b];
            if self.tail == *b"\r\n\r\n" {
                return true;
            }
        }
        false
    }
}

/// What an accepted connection holds until its socket is closed (after its drain, if any): its
/// slot in the port's cap, its place in its source's share, its count among the open sockets.
#[derive(Debug)]
pub struct Admission {
    permit: OwnedSemaphorePermit,
    source: Option<SourceConnection>,
    open: Option<OpenSocket>,
    /// The slots its connection state gets.
    slots: SlotMakers,
}

impl Admission {
    /// The connection's source, when the port shares its bounds by source.
    pub fn source(&self) -> Option<&Arc<Source>> {
        self.source.as_ref().map(SourceConnection::source)
    }
}

/// A stream over one TCP socket: what a closing connection drains ([`super::drain`]).
pub trait Socket {
    /// The socket.
    fn tcp(&self) -> &TcpStream;
}

impl Socket for TcpStream {
    fn tcp(&self) -> &TcpStream {
        self
    }
}

impl Socket for crate::socket::BatchedWrites {
    fn tcp(&self) -> &TcpStream {
        self.tcp()
    }
}

impl<S: Socket> Socket for tokio_rustls::server::TlsStream<S> {
    fn tcp(&self) -> &TcpStream {
        self.get_ref().0.tcp()
    }
}

/// What the agent port's bounds and its shutdown know of one connection, a slot of its
/// [`ConnectionState`]: its source (whose shares its calls count in), and its calls open (which
/// keep it open at shutdown until they are answered, [`super::drain`]).
#[derive(Debug, Default)]
pub struct EdgeState {
    source: Option<Arc<Source>>,
    calls: AtomicUsize,
    /// Calls ended so far.
    ended: AtomicUsize,
}

impl EdgeState {
    /// The state of a connection from `source` (`None`: the port does not share by source).
    pub fn of(source: Option<Arc<Source>>) -> Self {
        Self { source, calls: AtomicUsize::new(0), ended: AtomicUsize::new(0) }
    }

    /// The connection's source, when the port shares its bounds by source.
    pub fn source(&self) -> Option<&Source> {
        self.source.as_deref()
    }

    /// Whether a call is open on the connection: its answer is not over yet.
    pub fn answering(&self) -> bool {
        self.calls.load(Ordering::Acquire) > 0
    }

    /// Calls ended on the connection so far.
    fn ended(&self) -> usize {
        self.ended.load(Ordering::Acquire)
    }
}

impl Slot for EdgeState {}

/// One call open on its connection ([`EdgeState::answering`]), from its request until its
/// answer's body ends (or its stream is reset): until dropped.
#[derive(Debug)]
pub struct OpenCall(Arc<ConnectionState>);

impl OpenCall {
    /// Counts the call of `extensions` (a request's) on its connection, if it came on one.
    pub fn of(extensions: &http::Extensions) -> Option<Self> {
        let state = Arc::clone(&crate::socket::connection_of(extensions)?.state);
        state.get::<EdgeState>()?.calls.fetch_add(1, Ordering::AcqRel);
        Some(Self(state))
    }

    /// The state of the connection the call came on.
    pub fn state(&self) -> &Arc<ConnectionState> {
        &self.0
    }
}

impl Drop for OpenCall {
    fn drop(&mut self) {
        // Counted ended before it is no longer open: a flush that sees it closed sees it ended.
        if let Some(edge) = self.0.get::<EdgeState>() {
            edge.ended.fetch_add(1, Ordering::AcqRel);
            edge.calls.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Connection info that carries the connection's [`ConnectionState`] (the gRPC port's, plain or
/// over TLS).
pub trait CarriesState {
    /// Makes `state` the one the connection's calls share.
    fn set_state(&mut self, state: Arc<ConnectionState>);
}

impl CarriesState for AgentConnection {
    fn set_state(&mut self, state: Arc<ConnectionState>) {
        self.state = state;
    }
}

impl<T: CarriesState> CarriesState for tonic::transport::server::TlsConnectInfo<T> {
    fn set_state(&mut self, state: Arc<ConnectionState>) {
        self.get_mut().set_state(state);
    }
}

/// A stream with a deadline on its opening bytes, holding its [`Admission`]; on the gRPC port it
/// carries the state its calls share, is cut when it outlasts its bound at shutdown, and is
/// drained when closed ([`super::drain`]).
#[derive(Debug)]
pub struct Guarded<S> {
    inner: S,
    deadline: Option<Pin<Box<Sleep>>>,
    opening: OpeningBytes,
    /// Given to the drain when the stream is dropped, or dropped with it.
    admission: Option<Admission>,
    /// The state its calls share, closed (the connection's fleet rows end) when it is dropped.
    state: OpenConnection,
    /// The socket of `inner`, for the drain.
    tcp: fn(&S) -> &TcpStream,
    /// Whether the socket is closed without a drain: the peer closed it, or a read or a write
    /// failed.
    finished: bool,
    /// At shutdown: the timer that wakes the connection at its next bound, whether a flush
    /// found it with nothing left to answer or write after the grace (its next read fails), and
    /// whether it was cut.
    cut: Option<Pin<Box<Sleep>>>,
    cut_next_read: bool,
    was_cut: bool,
    /// The connection's calls ended as of the last flush that found none open.
    ended_at_flush: Option<usize>,
}

impl<S: Socket> Guarded<S> {
    /// `inner`, which must send its opening bytes within `timeout`, holding `admission`.
    pub fn new(inner: S, opening: Opening, timeout: Duration, admission: Admission) -> Self {
        let source = admission.source().cloned();
        let peer = S::tcp(&inner).peer_addr().ok();
        let state = admission.slots.fill(ConnectionState::new(peer).with(EdgeState::of(source)));
        Self {
            inner,
            deadline: Some(Box::pin(tokio::time::sleep(timeout))),
            opening: OpeningBytes::new(opening),
            admission: Some(admission),
            state: OpenConnection::of(state),
            tcp: S::tcp,
            finished: false,
            cut: None,
            cut_next_read: false,
            was_cut: false,
            ended_at_flush: None,
        }
    }
}

impl<S> Guarded<S> {
    /// The edge's slot of the connection's state (always there: [`Guarded::new`] sets it).
    fn edge(&self) -> Option<&EdgeState> {
        self.state.state().get::<EdgeState>()
    }

    /// The wrapped stream.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// When the shutdown began, and when the connection is cut whatever it is doing, once a
    /// shutdown began.
    fn shutdown_bounds(&self) -> Option<(Instant, Instant)> {
        let drain = self.admission.as_ref()?.open.as_ref()?.drain();
        let began = drain.began()?;
        Some((began, drain.hard_cut_at(began)))
    }

    /// At shutdown, whether the connection is cut now: at its hard bound, whatever it is doing.
    /// Until then a timer wakes it at the grace and at the hard bound, so that its next flush
    /// ([`Self::flushed`]) can find it done.
    fn cut_now(&mut self, cx: &mut Context<'_>) -> bool {
        if self.was_cut {
            return true;
        }
        let Some((began, hard)) = self.shutdown_bounds() else { return false };
        let soft = began + super::drain::SHUTDOWN_GRACE;
        let next = if Instant::now() < soft { soft } else { hard };
        let timer = self.cut.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(next)));
        if timer.deadline() != next {
            timer.as_mut().reset(next);
        }
        if timer.as_mut().poll(cx).is_pending() || next < hard {
            return false;
        }
        self.cut();
        true
    }

    /// A flush has just written every frame h2 had (h2 flushes after writing all it has). At
    /// shutdown, after the grace, the connection has nothing left on its way once two flushes in
    /// a row find no call open and none ended between them: a call that ended just before the
    /// first may have had its last frames queued after that flush took its frames, but not
    /// after the second's. It is then cut at its next read, and its socket drained.
    fn flushed(&mut self, cx: &mut Context<'_>) {
        let Some((began, _)) = self.shutdown_bounds() else { return };
        if Instant::now() < began + super::drain::SHUTDOWN_GRACE || self.edge().is_some_and(EdgeState::answering) {
            self.ended_at_flush = None;
            return;
        }
        let ended = self.edge().map_or(0, EdgeState::ended);
        if self.ended_at_flush == Some(ended) {
            self.cut_next_read = true;
        } else {
            self.ended_at_flush = Some(ended);
        }
        // Another round: the next flush confirms, or the next read is cut.
        cx.waker().wake_by_ref();
    }

    fn cut(&mut self) {
        if let Some(open) = self.admission.as_ref().and_then(|a| a.open.as_ref()) {
            open.drain().count_cut();
        }
        // Its socket is still drained when dropped: what was sent reaches a slow reader.
        self.was_cut = true;
    }
}

/// What a cut connection's reads and writes fail with (not counted as a failure of the socket).
fn cut_error() -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionAborted, "the connection outlasted its bound at shutdown")
}

impl<S: AsyncRead + Unpin> AsyncRead for Guarded<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.cut_next_read && !this.was_cut {
            this.cut();
        }
        if this.cut_now(cx) {
            return Poll::Ready(Err(cut_error()));
        }
        let filled = buf.filled().len();
        let room = buf.remaining();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        match polled {
            Poll::Ready(Ok(())) => {
                let fresh = &buf.filled()[filled..];
                if fresh.is_empty() && room > 0 {
                    // End of file: the peer closed its side.
                    this.finished = true;
                }
                if this.deadline.is_some() && this.opening.opened(fresh) {
                    this.deadline = None;
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => {
                this.finished = true;
                Poll::Ready(Err(e))
            }
            Poll::Pending => match this.deadline.as_mut().map(|deadline| deadline.as_mut().poll(cx)) {
                Some(Poll::Ready(())) => {
                    this.finished = true;
                    Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the connection did not complete its handshake in time",
                    )))
                }
                _ => Poll::Pending,
            },
        }
    }
}

impl<S: AsyncWrite + Unpin> Guarded<S> {
    /// `polled` (a write's or a flush's result), noting a failure.
    fn written<T>(&mut self, polled: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if let Poll::Ready(Err(_)) = &polled {
            self.finished = true;
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Guarded<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if self.cut_now(cx) {
            return Poll::Ready(Err(cut_error()));
        }
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.written(polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.cut_now(cx) {
            return Poll::Ready(Err(cut_error()));
        }
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.written(polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.cut_now(cx) {
            return Poll::Ready(Err(cut_error()));
        }
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        if let Poll::Ready(Ok(())) = polled {
            self.flushed(cx);
        }
        self.written(polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.cut_now(cx) {
            return Poll::Ready(Err(cut_error()));
        }
        let polled = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.written(polled)
    }
}

impl<S> Drop for Guarded<S> {
    /// Hands the socket to the drain ([`super::drain::linger`]) unless it needs none; the
    /// admission is kept until the socket is closed.
    fn drop(&mut self) {
        let Some(Admission { permit, source, open, .. }) = self.admission.take() else { return };
        let (Some(open), false) = (open, self.finished) else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        // Another descriptor of the socket: this one closes with `inner`, that one after the drain.
        let Some(tcp) = another_descriptor((self.tcp)(&self.inner)) else { return };
        runtime.spawn(super::drain::linger(tcp, open, (permit, source)));
    }
}

/// A second descriptor of `tcp`'s socket, registered with the runtime.
fn another_descriptor(tcp: &TcpStream) -> Option<TcpStream> {
    use std::os::fd::AsFd;
    let std = std::net::TcpStream::from(tcp.as_fd().try_clone_to_owned().ok()?);
    std.set_nonblocking(true).ok()?;
    TcpStream::from_std(std).ok()
}

impl<S> tonic::transport::server::Connected for Guarded<S>
where
    S: tonic::transport::server::Connected,
    S::ConnectInfo: CarriesState,
{
    type ConnectInfo = S::ConnectInfo;

    /// The inner stream's info, carrying this connection's state (made at accept, with its
    /// source).
    fn connect_info(&self) -> Self::ConnectInfo {
        let mut info = self.inner.connect_info();
        info.set_state(Arc::clone(self.state.state()));
        info
    }
}

/// Accepts on one listener within a connection cap (and, on the gRPC port, within each
/// source's share of it), backing off on accept errors.
#[derive(Debug)]
pub struct Acceptor {
    listener: TcpListener,
    slots: Arc<Semaphore>,
    port: &'static str,
    backoff: Option<Duration>,
    full: bool,
    sources: Option<(Arc<Sources>, EdgeMetrics)>,
    drain: Option<Drain>,
    /// The slots every connection's state gets.
    connection_slots: SlotMakers,
}

impl Acceptor {
    /// Accepts on `listener` at most `cap` connections at once (`port` names it in logs).
    pub fn new(listener: TcpListener, cap: usize, port: &'static str) -> Self {
        Self {
            listener,
            slots: Arc::new(Semaphore::new(cap.max(1))),
            port,
            backoff: None,
            full: false,
            sources: None,
            drain: None,
            connection_slots: SlotMakers::default(),
        }
    }

    /// Gives every connection's state the slots `slots` make (besides the edge's own).
    pub fn with_slots(mut self, slots: SlotMakers) -> Self {
        self.connection_slots = slots;
        self
    }

    /// Closes, at once, connections from a source that holds its share in `sources`, counting
    /// them in `metrics`; the others carry their source to their calls.
    pub fn with_sources(mut self, sources: Arc<Sources>, metrics: EdgeMetrics) -> Self {
        self.sources = Some((sources, metrics));
        self
    }

    /// Counts every connection's socket in `drain` until it is closed, and drains it then
    /// ([`super::drain`]).
    pub fn with_drain(mut self, drain: Drain) -> Self {
        self.drain = Some(drain);
        self
    }

    /// The listener.
    pub fn listener(&self) -> &TcpListener {
        &self.listener
    }

    /// The next connection and what it holds; waits while the cap is reached, never fails.
    pub async fn accept(&mut self) -> (TcpStream, std::net::SocketAddr, Admission) {
        loop {
            let permit = match Arc::clone(&self.slots).try_acquire_owned() {
                Ok(permit) => permit,
                Err(_) => {
                    if !self.full {
                        self.full = true;
                        tracing::warn!(port = self.port, "The connection limit is reached; new connections wait.");
                    }
                    match Arc::clone(&self.slots).acquire_owned().await {
                        Ok(permit) => permit,
                        // The semaphore is never closed.
                        Err(_) => std::future::pending().await,
                    }
                }
            };
            match self.listener.accept().await {
                Ok((stream, peer)) => {
                    if self.backoff.take().is_some() {
                        tracing::info!(port = self.port, "Accepting connections again.");
                    }
                    if self.full && self.slots.available_permits() > 0 {
                        self.full = false;
                    }
                    let source = match &self.sources {
                        None => None,
                        Some((sources, metrics)) => match sources.admit(peer.ip()) {
                            Ok(place) => Some(place),
                            Err(source) => {
                                // Closed at once, before any byte is read: its source holds its share.
                                source.reached(Bound::Connections, sources.max_connections());
                                metrics.connection_refused();
                                continue;
                            }
                        },
                    };
                    let open = self.drain.as_ref().map(Drain::open);
                    return (stream, peer, Admission { permit, source, open, slots: self.connection_slots.clone() });
                }
                Err(error) if is_connection_error(&error) => {}
                Err(error) => {
                    let delay = match self.backoff {
                        None => {
                            tracing::warn!(port = self.port, %error, open_file_limit = ?open_file_limit(), "Cannot accept connections; backing off until it can.");
                            Duration::from_millis(10)
                        }
                        Some(delay) => (delay * 2).min(Duration::from_secs(1)),
                    };
                    self.backoff = Some(delay);
                    drop(permit);
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }
}

fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_soft_open_file_limit() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max cpu time              unlimited            unlimited            seconds   \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(parse_open_file_limit(limits), Some(1024));
        assert_eq!(parse_open_file_limit("Max open files  unlimited unlimited files"), None);
        assert_eq!(parse_open_file_limit(""), None);
    }

    #[test]
    fn the_grpc_cap_follows_the_open_file_limit_to_100_000_agents_and_beyond() {
        let limits = ConnectionLimits::default();
        // A limit of 20,000 descriptors: 19,616 agent connections.
        assert_eq!(limits.grpc_cap_under(Some(20_000)), 20_000 - 256 - 128);
        // A host whose limit is raised (systemd's LimitNOFILE=1048576): 100,000 agents fit.
        assert_eq!(limits.grpc_cap_under(Some(1_048_576)), 1_048_576 - 256 - 128);
        assert_eq!(limits.grpc_cap_under(None), 1024 - 256 - 128, "unknown: the usual 1024");
        assert_eq!(limits.grpc_cap_under(Some(100)), 16, "never below 16");
        let configured = ConnectionLimits { max_grpc_connections: Some(150_000), ..limits };
        assert_eq!(configured.grpc_cap_under(Some(20_000)), 150_000, "as configured");
    }

    #[tokio::test]
    async fn an_acceptor_capped_at_100_000_takes_connections_until_its_slots_run_out() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut acceptor = Acceptor::new(listener, 100_000, "test");
        // 100,000 connections would need as many descriptors; the slots they hold are counted
        // the same way: take all but one, then one connection takes the last.
        let held: Vec<_> = (0..99_999).map(|_| Arc::clone(&acceptor.slots).try_acquire_owned().unwrap()).collect();
        let client = TcpStream::connect(addr).await.unwrap();
        let (_stream, _, last) = acceptor.accept().await;
        assert_eq!(acceptor.slots.available_permits(), 0);
        let waiting = TcpStream::connect(addr).await.unwrap();
        let next = tokio::time::timeout(Duration::from_millis(200), acceptor.accept()).await;
        assert!(next.is_err(), "the 100,001st connection waits while every slot is taken");
        drop((held, last, client));
        let (_stream, _, _permit) = acceptor.accept().await;
        drop(waiting);
    }

    #[test]
    fn the_opening_is_the_preface_and_a_frame_header_or_an_http1_header_block() {
        let mut g = OpeningBytes::new(Opening::Http2);
        assert!(!g.opened(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"));
        assert!(g.opened(&[0; 9]));

        let mut g = OpeningBytes::new(Opening::Http1OrHttp2);
        assert!(!g.opened(b"PR"));
        assert!(!g.opened(b"I * HTTP/2.0\r\n\r\nSM\r\n\r\n"), "the preface's empty lines are not an HTTP/1 header end");
        assert!(g.opened(&[0; 9]));

        let mut g = OpeningBytes::new(Opening::Http1OrHttp2);
        assert!(!g.opened(b"GET / HTTP/1.1\r\nHost: x\r"));
        assert!(!g.opened(b"\n\r"));
        assert!(g.opened(b"\n"));

        let mut g = OpeningBytes::new(Opening::Http1OrHttp2);
        assert!(g.opened(b"\r\n\r\n"));
    }
}
