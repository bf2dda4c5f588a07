//! How the agent port's connections close: no answer lost to a reset, and a bound on how long a
//! shutdown takes.
//!
//! Closing a socket that still holds unread input makes the kernel answer with a reset (RST), and
//! a reset throws away whatever the socket still had queued for sending; data the client sends to
//! a socket already closed does the same. A client that is slow to read (a busy host, a GC pause,
//! hundreds of answers at once at shutdown) and keeps sending small frames meanwhile (window
//! updates, pings) then loses answers the server did send: gRPC reports `UNAVAILABLE`, which makes a
//! Java agent drop its channel (finding N4 in RELIABILITY.md). So every connection closes in steps:
//!
//! 1. **Answered.** At shutdown every held poll is answered "unchanged" (`crate::cds::hold`) and
//!    every connection is asked to finish (HTTP/2 GOAWAY): no new calls, the open ones end.
//! 2. **Write side closed.** Once its calls have ended, the connection's last frame is flushed and
//!    the socket shut down for writing: the peer reads every answer, then end of file.
//! 3. **Drained.** The socket is read, and what arrives is discarded, until the peer closes its
//!    side too, or has sent nothing for [`LINGER`] (at shutdown, not before `SHUTDOWN_GRACE +
//!    LINGER` after it began: every socket may take that long anyway, and a client paused for a
//!    moment keeps its answers), and for [`DRAIN_MAX`] at most; only then is it closed
//!    ([`linger`]). A client still reading its answers keeps sending window updates, so it is
//!    waited for; a closed socket with nothing unread ends with FIN, and the kernel still
//!    delivers what is queued.
//!
//! Steps 2 and 3 apply to every close the server makes, at shutdown or not (a connection ended by
//! its keep-alive timeout too), except when the peer has closed already or a read or write failed.
//!
//! **Bounds.** Calls whose request message has not come are answered at once when the shutdown
//! begins (`DEADLINE_EXCEEDED`, `super::limits`). A connection still open [`SHUTDOWN_GRACE`] after
//! the shutdown began is cut as soon as it has nothing left on its way: no call being answered,
//! and every frame written (h2 flushes after writing all it has, and a flush that completes says
//! so). That is a silent peer that never acknowledges the GOAWAY; it is closed after its drain
//! (step 3). A connection with a call still being answered (thousands of held polls answered at
//! once take time; a forwarded stream, in gateway mode), or whose frames wait for the peer to
//! take them (a full window or socket buffer), is cut at `SHUTDOWN_DRAIN` (10 s, `crate::app`)
//! at the latest: its answers are not dropped while they are on their way. So a shutdown with held polls
//! takes a few milliseconds when the agents read their answers, `SHUTDOWN_GRACE + LINGER` (0.6 s)
//! with a silent peer, `SHUTDOWN_GRACE + DRAIN_MAX` (1.3 s) for a client that keeps sending and
//! never closes, and up to 10 s only while answers are still on their way (a very large fleet, a
//! client that does not read, a forwarded stream); [`Drain::closed`] waits for every socket to be
//! closed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long after the shutdown began a connection with nothing left to answer or to write may
/// stay open.
pub const SHUTDOWN_GRACE: Duration = Duration::from_millis(300);

/// How long a closing socket, its write side shut down, is read after the peer last sent
/// something, for the peer to close.
pub const LINGER: Duration = Duration::from_millis(300);

/// How long a closing socket is read at most.
pub const DRAIN_MAX: Duration = Duration::from_secs(1);

/// The agent port's connections as a shutdown sees them: when it began, how long answers on
/// their way may take, the sockets not closed yet, and the connections cut. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Drain {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    began: OnceLock<Instant>,
    /// Cancelled when the shutdown begins.
    beginning: CancellationToken,
    answering_bound: Duration,
    /// Sockets accepted and not closed yet (lingering ones included).
    open: watch::Sender<usize>,
    cut: AtomicUsize,
    lingered_out: AtomicUsize,
}

impl Drain {
    /// Connections whose answers on their way may take `answering_bound` after a shutdown
    /// begins.
    pub fn new(answering_bound: Duration) -> Self {
        Self {
            inner: Arc::new(Inner {
                began: OnceLock::new(),
                beginning: CancellationToken::new(),
                answering_bound,
                open: watch::Sender::new(0),
                cut: AtomicUsize::new(0),
                lingered_out: AtomicUsize::new(0),
            }),
        }
    }

    /// Marks the start of the shutdown (before the connections are asked to finish).
    pub fn begin(&self) {
        let _ = self.inner.began.set(Instant::now());
        self.inner.beginning.cancel();
    }

    /// Completes when the shutdown begins.
    pub fn begun(&self) -> tokio_util::sync::WaitForCancellationFutureOwned {
        self.inner.beginning.clone().cancelled_owned()
    }

    /// When the shutdown began, once it has.
    pub fn began(&self) -> Option<Instant> {
        self.inner.began.get().copied()
    }

    /// When a connection still open is cut whatever it is doing: the bound of answers on their
    /// way.
    pub(crate) fn hard_cut_at(&self, began: Instant) -> Instant {
        began + self.inner.answering_bound.max(SHUTDOWN_GRACE)
    }

    /// Counts one socket open until the returned guard is dropped.
    pub fn open(&self) -> OpenSocket {
        self.inner.open.send_modify(|n| *n += 1);
        OpenSocket { drain: self.clone() }
    }

    /// Sockets not closed yet.
    pub fn open_sockets(&self) -> usize {
        *self.inner.open.borrow()
    }

    pub(crate) fn count_cut(&self) {
        self.inner.cut.fetch_add(1, Ordering::Relaxed);
    }

    /// Connections cut so far (still open at their bound).
    pub fn cut(&self) -> usize {
        self.inner.cut.load(Ordering::Relaxed)
    }

    /// Until when a closing socket whose peer sent something just now is read, if the peer
    /// sends nothing more: [`LINGER`], and at shutdown not before `SHUTDOWN_GRACE + LINGER` after
    /// it began.
    fn quiet_until(&self) -> Instant {
        let linger = Instant::now() + LINGER;
        self.began().map_or(linger, |began| linger.max(began + SHUTDOWN_GRACE + LINGER))
    }

    /// Closing sockets whose peer had not closed within their drain.
    pub fn lingered_out(&self) -> usize {
        self.inner.lingered_out.load(Ordering::Relaxed)
    }

    /// Waits until every socket is closed, at most `within`; whether they all were.
    pub async fn closed(&self, within: Duration) -> bool {
        let mut open = self.inner.open.subscribe();
        tokio::time::timeout(within, open.wait_for(|n| *n == 0)).await.is_ok()
    }
}

/// One socket counted open in its [`Drain`]; dropped when the socket is closed.
#[derive(Debug)]
pub struct OpenSocket {
    drain: Drain,
}

impl OpenSocket {
    /// The drain it is counted in.
    pub fn drain(&self) -> &Drain {
        &self.drain
    }
}

impl Drop for OpenSocket {
    fn drop(&mut self) {
        self.drain.inner.open.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// Steps 2 and 3 of the module docs on `tcp` (another descriptor of a connection's socket, whose
/// own is being closed): shuts its write side down, reads until the peer closes, goes quiet or
/// [`DRAIN_MAX`] passes, then closes it, and only then drops `held` (the connection's places in
/// the bounds) and `open` (its count among the open sockets).
pub async fn linger<T>(mut tcp: TcpStream, open: OpenSocket, held: T) {
    let _ = socket2::SockRef::from(&tcp).shutdown(std::net::Shutdown::Write);
    let mut discard = [0u8; 1024];
    let at_most = Instant::now() + DRAIN_MAX;
    let closed = loop {
        let until = open.drain().quiet_until().min(at_most);
        match tokio::time::timeout_at(until, tcp.read(&mut discard)).await {
            // The peer closed its side (or the socket failed): nothing more can come.
            Ok(Ok(0) | Err(_)) => break true,
            // Still sending: it is still reading its answers too.
            Ok(Ok(_)) => {}
            Err(_) => break false,
        }
    };
    if !closed {
        open.drain().inner.lingered_out.fetch_add(1, Ordering::Relaxed);
    }
    drop(tcp);
    drop(held);
    drop(open);
}

/// `response` with `held` kept until its body is dropped: the answer ended, or its stream was
/// reset.
pub fn keep_until_answered<T: Send + Unpin + 'static>(
    response: http::Response<tonic::body::Body>,
    held: T,
) -> http::Response<tonic::body::Body> {
    response.map(|body| tonic::body::Body::new(Holding { body, _held: held }))
}

/// A body that keeps a value alive as long as itself.
struct Holding<T> {
    body: tonic::body::Body,
    _held: T,
}

impl<T: Unpin> http_body::Body for Holding<T> {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// A connection over loopback: its client end and its server end.
    async fn connected() -> (TcpStream, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (client, server)
    }

    #[tokio::test]
    async fn a_closing_socket_reads_until_the_peer_closes_and_then_no_reset_comes() {
        let (mut client, server) = connected().await;
        let drain = Drain::new(Duration::from_secs(10));
        let open = drain.open();
        let mut server = server;
        server.write_all(b"the last answer").await.unwrap();
        // The client sends more after the server is done: unread input at the close.
        client.write_all(b"a window update").await.unwrap();
        let lingering = tokio::spawn(linger(server, open, ()));
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.expect("end of file, not a reset");
        assert_eq!(got, b"the last answer");
        // More sent after the server's FIN is read and discarded too, until the client closes.
        let _ = client.write_all(b"a ping").await;
        drop(client);
        lingering.await.unwrap();
        assert!(drain.closed(Duration::from_secs(1)).await);
        assert_eq!(drain.lingered_out(), 0, "the peer closed in time");
    }

    #[tokio::test(start_paused = true)]
    async fn a_peer_that_keeps_sending_is_read_until_the_drain_bound() {
        let (mut client, server) = connected().await;
        let drain = Drain::new(Duration::from_secs(10));
        let open = drain.open();
        let lingering = tokio::spawn(async move {
            let started = Instant::now();
            linger(server, open, ()).await;
            started.elapsed()
        });
        // A ping every 200 ms, each within the linger of the last, for 2 s.
        for _ in 0..10 {
            let _ = client.write_all(b"ping").await;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert_eq!(lingering.await.unwrap(), DRAIN_MAX);
        assert_eq!(drain.lingered_out(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_peer_that_never_closes_is_waited_for_at_most_the_linger() {
        let (_client, server) = connected().await;
        let drain = Drain::new(Duration::from_secs(10));
        let started = Instant::now();
        linger(server, drain.open(), ()).await;
        assert_eq!(started.elapsed(), LINGER);
        assert_eq!((drain.lingered_out(), drain.open_sockets()), (1, 0));
    }
}
