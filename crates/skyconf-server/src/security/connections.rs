//! Connections: how many each port holds, how long a new one may take to say what it is, and
//! how accepting behaves when the process runs out of file descriptors.
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
//! - **Accept errors.** Out of file descriptors (`EMFILE`, `ENFILE`) and the like: the accept loop
//!   logs a warning once per episode and backs off (10 ms doubling to 1 s) instead of spinning.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;

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
    /// Concurrent connections on the admin port.
    pub max_admin_connections: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self { handshake_timeout: Duration::from_secs(10), max_grpc_connections: None, max_admin_connections: 256 }
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

/// A stream with a deadline on its opening bytes, holding its slot of the connection cap.
#[derive(Debug)]
pub struct Guarded<S> {
    inner: S,
    deadline: Option<Pin<Box<Sleep>>>,
    opening: Opening,
    read: usize,
    /// The first bytes read.
    head: [u8; 4],
    /// The last bytes read, to find `\r\n\r\n` across reads.
    tail: [u8; 4],
    _permit: OwnedSemaphorePermit,
}

impl<S> Guarded<S> {
    /// `inner`, which must send its opening bytes within `timeout`, holding `permit`.
    pub fn new(inner: S, opening: Opening, timeout: Duration, permit: OwnedSemaphorePermit) -> Self {
        Self {
            inner,
            deadline: Some(Box::pin(tokio::time::sleep(timeout))),
            opening,
            read: 0,
            head: [0; 4],
            tail: [0; 4],
            _permit: permit,
        }
    }

    /// The wrapped stream.
    pub fn get_ref(&self) -> &S {
        &self.inner
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

impl<S: AsyncRead + Unpin> AsyncRead for Guarded<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let filled = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        let Some(deadline) = this.deadline.as_mut() else {
            return polled;
        };
        match polled {
            Poll::Ready(Ok(())) => {
                let fresh = buf.filled()[filled..].to_vec();
                if this.opened(&fresh) {
                    this.deadline = None;
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => match deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the connection did not complete its handshake in time",
                ))),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Guarded<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
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

impl<S: tonic::transport::server::Connected> tonic::transport::server::Connected for Guarded<S> {
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

/// Accepts on one listener within a connection cap, backing off on accept errors.
#[derive(Debug)]
pub struct Acceptor {
    listener: TcpListener,
    slots: Arc<Semaphore>,
    port: &'static str,
    backoff: Option<Duration>,
    full: bool,
}

impl Acceptor {
    /// Accepts on `listener` at most `cap` connections at once (`port` names it in logs).
    pub fn new(listener: TcpListener, cap: usize, port: &'static str) -> Self {
        Self { listener, slots: Arc::new(Semaphore::new(cap.max(1))), port, backoff: None, full: false }
    }

    /// The listener.
    pub fn listener(&self) -> &TcpListener {
        &self.listener
    }

    /// The next connection and its slot; waits while the cap is reached, never fails.
    pub async fn accept(&mut self) -> (TcpStream, std::net::SocketAddr, OwnedSemaphorePermit) {
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
                    return (stream, peer, permit);
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
        // This machine's limit (issue 16): 20,000 descriptors, 19,616 agent connections.
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

    fn guarded(opening: Opening) -> Guarded<()> {
        let permit = Arc::new(Semaphore::new(1)).try_acquire_owned().unwrap();
        Guarded { inner: (), deadline: None, opening, read: 0, head: [0; 4], tail: [0; 4], _permit: permit }
    }

    #[test]
    fn the_opening_is_the_preface_and_a_frame_header_or_an_http1_header_block() {
        let mut g = guarded(Opening::Http2);
        assert!(!g.opened(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"));
        assert!(g.opened(&[0; 9]));

        let mut g = guarded(Opening::Http1OrHttp2);
        assert!(!g.opened(b"PR"));
        assert!(!g.opened(b"I * HTTP/2.0\r\n\r\nSM\r\n\r\n"), "the preface's empty lines are not an HTTP/1 header end");
        assert!(g.opened(&[0; 9]));

        let mut g = guarded(Opening::Http1OrHttp2);
        assert!(!g.opened(b"GET / HTTP/1.1\r\nHost: x\r"));
        assert!(!g.opened(b"\n\r"));
        assert!(g.opened(b"\n"));

        let mut g = guarded(Opening::Http1OrHttp2);
        assert!(g.opened(b"\r\n\r\n"));
    }
}
