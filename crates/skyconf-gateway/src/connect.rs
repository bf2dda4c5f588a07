//! One HTTP/2 connection to an OAP: opened, counted as open once the OAP has spoken HTTP/2, and
//! driven while it lives.
//!
//! [`open`] connects (TCP, optionally TLS, the HTTP/2 handshake) and returns the connection only
//! once the OAP's SETTINGS frame has arrived, all within [`GatewayConfig::connect_timeout`].
//! hyper's handshake returns as soon as skyconf's own preface is written, so a process that
//! accepts TCP connections and never answers (a hung OAP) would otherwise count as up while
//! every call sent to it waits for its deadline. Until the OAP's SETTINGS arrive the connection
//! allows no stream (`initial_max_send_streams` 0), so nothing is sent to a peer that has not
//! spoken; a SETTINGS frame that allows no stream at all leaves the connection unused too.
//!
//! While it lives, the connection's [`Driver`] drives hyper's side of it and publishes the OAP's
//! stream limit (`SETTINGS_MAX_CONCURRENT_STREAMS`, which the OAP may change at any time) in the
//! [`Link`], where [`super::admission`] counts calls against it. Pings (every
//! `keepalive_interval`, each answered within `keepalive_timeout`) end a connection whose OAP has
//! stopped answering.
//!
//! The OAP's answers may carry header blocks of up to [`MAX_HEADER_LIST_BYTES`]: far more than
//! any agent takes, so that h2 decodes a too-large block and [`super::forward`] refuses it for
//! that one call. With hyper's default of 16 KiB, h2 treats a block over four times the limit
//! (64 KiB) as an attack on the whole connection (GOAWAY `ENHANCE_YOUR_CALM`), which would end
//! every other agent's call on it (N5 in RELIABILITY.md). The same happens beyond 64 MiB decoded, or
//! 20 MiB in `CONTINUATION` frames of 16 KiB, which is h2's own defence and out of reach of any
//! real OAP.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};

use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::pki_types::ServerName;

use super::admission::Stream;
use super::coalesce::{CoalescedWrites, LendingBody, Lent, RoundExecutor, Rounds};
use super::upstream::split_host_port;
use super::{GatewayConfig, GatewayError};

/// A handle on one upstream HTTP/2 connection, to send calls on.
pub type Sender = SendRequest<LendingBody>;

/// The future that drives one connection until it ends.
pub type Driver = Pin<Box<dyn Future<Output = hyper::Result<()>> + Send>>;

/// The largest header block (response headers or trailers) accepted from an OAP
/// (`SETTINGS_MAX_HEADER_LIST_SIZE`): h2's own default, which hyper lowers to 16 KiB.
pub const MAX_HEADER_LIST_BYTES: u32 = 16 * 1024 * 1024;

/// The receive windows of upstream connections. Responses on SkyWalking's paths are small
/// (`Commands`); the stream window bounds what one slow agent can hold of an OAP's answers, and
/// the connection window is large so that a few such agents never stall the others sharing it.
const STREAM_WINDOW: u32 = 256 * 1024;
const CONNECTION_WINDOW: u32 = 16 * 1024 * 1024;

/// One open HTTP/2 connection to an OAP: where calls are sent, and how many of the streams the
/// OAP allows on it are in use.
#[derive(Debug)]
pub struct Link {
    sender: Sender,
    /// `None` on a TLS connection (rustls encrypts into buffers of its own).
    lent: Option<Lent>,
    /// Calls holding one of its streams ([`Stream`]).
    in_flight: AtomicUsize,
    /// The OAP's `SETTINGS_MAX_CONCURRENT_STREAMS` (`usize::MAX`: no limit), as last seen by
    /// the driver.
    limit: Arc<AtomicUsize>,
}

impl Link {
    /// A handle to send one call with.
    pub fn sender(&self) -> Sender {
        self.sender.clone()
    }

    /// `body`, ready to be sent on this connection by the call holding `stream`.
    pub fn body(&self, body: axum::body::Body, stream: Stream) -> LendingBody {
        LendingBody::new(body, self.lent.clone()).holding(stream)
    }

    /// Whether calls can still be sent on it.
    pub fn is_open(&self) -> bool {
        !self.sender.is_closed()
    }

    /// Calls holding one of its streams now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// The OAP's stream limit on this connection; `usize::MAX`: none.
    pub fn stream_limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    /// Takes one of its streams, if the OAP's limit leaves one.
    pub(super) fn try_take(&self) -> bool {
        let limit = self.stream_limit();
        self.in_flight.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < limit).then_some(n + 1)).is_ok()
    }

    /// Gives a stream taken with [`Self::try_take`] back.
    pub(super) fn give_back(&self) {
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// TLS towards the OAPs: the connector, and the name to check certificates against (`None`: the
/// host of each upstream).
pub type Tls = (TlsConnector, Option<ServerName<'static>>);

/// One HTTP/2 connection to `addr`, once the OAP has spoken HTTP/2 (see the module docs), and
/// the future that drives it.
pub async fn open(addr: &str, tls: Option<&Tls>, config: &GatewayConfig) -> Result<(Arc<Link>, Driver), GatewayError> {
    let deadline = Instant::now() + config.connect_timeout;
    let io_error = |cause: io::Error| GatewayError::Connect { addr: addr.to_owned(), cause };
    let timed_out = || io_error(io::Error::new(io::ErrorKind::TimedOut, "connecting timed out"));
    let tcp = tokio::time::timeout_at(deadline, TcpStream::connect(addr))
        .await
        .map_err(|_| timed_out())?
        .map_err(io_error)?;
    let _ = tcp.set_nodelay(true);
    // Writes go out once per round of the connection's tasks ([`super::coalesce`]).
    let rounds = Rounds::default();
    // Payloads are written from where they are, except under TLS.
    let lent = tls.is_none().then(Lent::default);
    let tcp = CoalescedWrites::new(tcp, rounds.clone(), lent.clone());
    match tls {
        None => handshake(tcp, lent, rounds, addr, config, deadline).await,
        Some((connector, name)) => {
            let name = match name {
                Some(name) => name.clone(),
                None => {
                    let (host, _) = split_host_port(addr)?;
                    ServerName::try_from(host.to_owned())
                        .map_err(|_| GatewayError::ServerName { name: host.to_owned() })?
                }
            };
            let tls = tokio::time::timeout_at(deadline, connector.connect(name, tcp))
                .await
                .map_err(|_| timed_out())?
                .map_err(io_error)?;
            handshake(tls, None, rounds, addr, config, deadline).await
        }
    }
}

/// The HTTP/2 handshake on `io`, up to the OAP's SETTINGS.
async fn handshake<T>(
    io: T,
    lent: Option<Lent>,
    rounds: Rounds,
    addr: &str,
    config: &GatewayConfig,
    deadline: Instant,
) -> Result<(Arc<Link>, Driver), GatewayError>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let signal = Arc::new(Signal::default());
    let io = TokioIo::new(Heard { inner: io, signal: Arc::clone(&signal) });
    let mut builder = hyper::client::conn::http2::Builder::new(RoundExecutor::new(rounds));
    builder
        .timer(TokioTimer::new())
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .initial_max_send_streams(0)
        .max_header_list_size(MAX_HEADER_LIST_BYTES)
        .keep_alive_interval(config.keepalive_interval)
        .keep_alive_timeout(config.keepalive_timeout)
        .keep_alive_while_idle(true);
    let silent = || GatewayError::Silent { addr: addr.to_owned(), timeout: config.connect_timeout };
    let (sender, conn) = tokio::time::timeout_at(deadline, builder.handshake(io))
        .await
        .map_err(|_| silent())?
        .map_err(|cause| GatewayError::Handshake { addr: addr.to_owned(), cause })?;
    let mut conn = Box::pin(conn);
    // The OAP's SETTINGS: every read and write on the connection is a moment to look again, and
    // h2 writes its acknowledgement after it has applied them.
    loop {
        let heard = signal.notify.notified();
        tokio::pin!(heard);
        heard.as_mut().enable();
        if conn.current_max_send_streams() > 0 {
            break;
        }
        tokio::select! {
            ended = conn.as_mut() => {
                let cause = match ended {
                    Ok(()) => io::Error::new(io::ErrorKind::UnexpectedEof, "closed before speaking HTTP/2"),
                    Err(error) => io::Error::other(error),
                };
                return Err(GatewayError::Connect { addr: addr.to_owned(), cause });
            }
            heard = tokio::time::timeout_at(deadline, heard) => heard.map_err(|_| silent())?,
        }
    }
    signal.settled.store(true, Ordering::Relaxed);
    let limit = Arc::new(AtomicUsize::new(conn.current_max_send_streams()));
    let link = Arc::new(Link { sender, lent, in_flight: AtomicUsize::new(0), limit: Arc::clone(&limit) });
    let driver = Box::pin(std::future::poll_fn(move |cx| {
        let polled = conn.as_mut().poll(cx);
        // hyper's side is polled on every call sent: the limit is as fresh as the last call.
        limit.store(conn.current_max_send_streams(), Ordering::Relaxed);
        polled
    }));
    Ok((link, driver))
}

/// Told of reads and writes on a connection until its handshake is settled.
#[derive(Debug, Default)]
struct Signal {
    settled: AtomicBool,
    notify: Notify,
}

impl Signal {
    fn poke(&self) {
        if !self.settled.load(Ordering::Relaxed) {
            self.notify.notify_waiters();
        }
    }
}

/// A connection's socket, telling its [`Signal`] of every read and write.
struct Heard<T> {
    inner: T,
    signal: Arc<Signal>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Heard<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if polled.is_ready() {
            self.signal.poke();
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Heard<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        if polled.is_ready() {
            self.signal.poke();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, data);
        if polled.is_ready() {
            self.signal.poke();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
