//! The gRPC port's sockets: TCP streams that tell h2 they take no vectored writes, and that read
//! ahead while a client streams; and the state each connection's calls share.
//!
//! h2 copies a DATA frame into its write buffer only when the payload is small: up to 256 bytes
//! when the socket takes vectored writes, up to 1 KiB when it does not. A larger payload is
//! *chained* instead, and h2 buffers nothing more until that frame is written, so every such
//! answer costs its own `writev` call. A changed CDS answer (six settings, the 128-character
//! digest, the serial number) is a few hundred bytes, so reporting no vectored writes lets h2
//! batch changed answers as it batches unchanged ones (BENCHMARKS.md has the syscall counts);
//! larger answers are still chained.
//!
//! Reads: h2 reads into a buffer sized for the frame it is decoding (8 to 16 KiB), so a client
//! streaming large messages (trace segments through the gateway) costs a `recvfrom` per 8 KiB.
//! Once a read fills h2's whole buffer (more is likely waiting), the socket reads up to
//! [`READ_AHEAD`] at once into a buffer of its own and hands it out from there. The buffer is
//! allocated uninitialised (the socket writes it before anything reads it: no 64 KiB of zeroes per
//! read ahead) and reused while reads keep filling it; it is freed once a read comes back short or
//! finds nothing, so an idle connection holds none, and a small request (a CDS poll) is read
//! straight into h2's buffer.
//!
//! Each connection also carries an [`AgentConnection`] into its calls' extensions: the peer
//! address (fleet status keys on it) and the [`ConnectionState`] its calls share, a set of typed
//! [`Slot`]s, one per component that keeps something per connection (the edge's bounds, the
//! held polls, the fleet link, the gateway's pin). The slots are made once, at accept
//! ([`SlotMakers`]); this module knows none of their types. [`peer_of`] reads the peer, with or
//! without TLS.

use std::any::Any;
use std::fmt;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::BytesMut;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use tonic::transport::server::{Connected, TcpConnectInfo, TlsConnectInfo};

/// What every call on one agent connection shares: its peer, and its state.
#[derive(Debug, Clone)]
pub struct AgentConnection {
    /// The TCP peer.
    pub tcp: TcpConnectInfo,
    /// Shared by the connection's calls; dropped when the connection closes and its last call
    /// ends.
    pub state: Arc<ConnectionState>,
}

/// What one component keeps per connection, in the connection's [`ConnectionState`].
pub trait Slot: Any + Send + Sync + fmt::Debug {
    /// The connection closed (its socket's outermost wrapper was dropped), even while calls that
    /// came on it are still unwinding. Nothing, unless the slot ties a fact to the connection.
    fn close(&self) {}
}

/// The state of one agent connection: its peer and its slots, at most one of each type, set at
/// accept and shared read-only by its calls (a slot changes through its own atomics or locks).
#[derive(Debug, Default)]
pub struct ConnectionState {
    peer: Option<SocketAddr>,
    slots: Vec<Box<dyn Slot>>,
}

impl ConnectionState {
    /// The state of a new connection from `peer`, with no slots yet.
    pub fn new(peer: Option<SocketAddr>) -> Self {
        Self { peer, slots: Vec::new() }
    }

    /// The one state, without peer or slots, of every connection whose owner has not set its
    /// own yet: shared, so a socket's info costs no allocation before its owner sets the real one.
    pub fn unset() -> Arc<Self> {
        static UNSET: std::sync::LazyLock<Arc<ConnectionState>> = std::sync::LazyLock::new(Arc::default);
        Arc::clone(&UNSET)
    }

    /// With `slot` (replacing a slot of its type).
    pub fn with<T: Slot>(mut self, slot: T) -> Self {
        self.slots.retain(|s| !(&**s as &dyn Any).is::<T>());
        self.slots.push(Box::new(slot));
        self
    }

    /// The connection's peer.
    pub fn peer(&self) -> Option<SocketAddr> {
        self.peer
    }

    /// Its slot of type `T`, if it has one.
    pub fn get<T: Slot>(&self) -> Option<&T> {
        self.slots.iter().find_map(|s| (&**s as &dyn Any).downcast_ref::<T>())
    }

    /// The connection closed: what it made true ends now, even while calls that came on it are
    /// still unwinding.
    pub fn close(&self) {
        for slot in &self.slots {
            slot.close();
        }
    }
}

/// A component's maker of its slot, from the connection's peer.
type MakeSlot = dyn Fn(Option<SocketAddr>) -> Box<dyn Slot> + Send + Sync;

/// The slots every connection of a port gets at accept: one maker per component, registered
/// once when the server is wired.
#[derive(Clone)]
pub struct SlotMakers(Arc<[Arc<MakeSlot>]>);

impl SlotMakers {
    /// With a slot made by `make` for each connection.
    pub fn with<T: Slot>(mut self, make: impl Fn(Option<SocketAddr>) -> T + Send + Sync + 'static) -> Self {
        let mut makers = self.0.to_vec();
        makers.push(Arc::new(move |peer| Box::new(make(peer))));
        self.0 = makers.into();
        self
    }

    /// `state` with every slot (for its peer) added.
    pub fn fill(&self, mut state: ConnectionState) -> ConnectionState {
        state.slots.extend(self.0.iter().map(|make| make(state.peer)));
        state
    }
}

impl Default for SlotMakers {
    fn default() -> Self {
        Self(Arc::new([]))
    }
}

impl fmt::Debug for SlotMakers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SlotMakers({})", self.0.len())
    }
}

/// Closes its connection's state when dropped: owned by the socket's outermost wrapper, so the
/// connection's facts end when the socket does (the peer's FIN or RST, a PING unanswered,
/// shutdown), not when the last call that shares the state lets go of it.
#[derive(Debug)]
pub struct OpenConnection(Arc<ConnectionState>);

impl OpenConnection {
    /// Opens `state`'s connection.
    pub fn of(state: ConnectionState) -> Self {
        Self(Arc::new(state))
    }

    /// Its state, shared with the calls on it.
    pub fn state(&self) -> &Arc<ConnectionState> {
        &self.0
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.close();
    }
}

impl AgentConnection {
    /// The peer's address.
    pub fn remote_addr(&self) -> Option<SocketAddr> {
        self.tcp.remote_addr()
    }
}

/// The connection a call came on, from the request's extensions (plaintext or TLS).
pub fn connection_of(extensions: &http::Extensions) -> Option<&AgentConnection> {
    extensions
        .get::<AgentConnection>()
        .or_else(|| extensions.get::<TlsConnectInfo<AgentConnection>>().map(TlsConnectInfo::get_ref))
}

/// The peer address of the connection a call came on.
pub fn peer_of(extensions: &http::Extensions) -> Option<SocketAddr> {
    connection_of(extensions)?.remote_addr()
}

/// How much a streaming connection reads at once.
pub const READ_AHEAD: usize = 64 * 1024;

/// A [`TcpStream`] that reports no vectored writes and reads ahead while a client streams (see
/// the module docs).
#[derive(Debug)]
pub struct BatchedWrites {
    stream: TcpStream,
    /// Read but not yet handed out: `ahead[start..]` (`ahead` holds exactly the bytes read, in
    /// a [`READ_AHEAD`] allocation). Kept, drained, while the client streams (the next read ahead
    /// fills it again without a fresh allocation); `None` otherwise.
    ahead: Option<BytesMut>,
    start: usize,
    /// Whether the last read filled the caller's buffer: more is likely waiting.
    streaming: bool,
    /// Where the HTTP/2 frames are, in plaintext (`None` under TLS: this sees ciphertext).
    frames: Option<Frames>,
}

impl BatchedWrites {
    /// Wraps an accepted stream.
    pub fn new(stream: TcpStream) -> Self {
        Self { stream, ahead: None, start: 0, streaming: false, frames: None }
    }

    /// The socket.
    pub fn tcp(&self) -> &TcpStream {
        &self.stream
    }

    /// Read ahead bytes are handed out up to the next HTTP/2 frame boundary (plaintext HTTP/2
    /// only): h2's decoder then gets a frame's header alone, makes room for exactly that frame,
    /// and gets its payload whole, where a hand-out across a boundary left it a partial frame
    /// to copy into a new buffer of its own (2-4 % of the gateway's time under segment streams).
    /// Only how many bytes a read returns changes: any byte stream, HTTP/2 or not, passes the
    /// same.
    pub fn with_frame_boundaries(mut self) -> Self {
        self.frames = Some(Frames::default());
        self
    }

    /// Where the bytes read ahead end: `ahead`'s length, 0 without it.
    fn end(&self) -> usize {
        self.ahead.as_ref().map_or(0, BytesMut::len)
    }

    /// Hands out what was read ahead; frees the buffer once it is drained, unless the client is
    /// still streaming (the next read ahead reuses it).
    fn hand_out(&mut self, buf: &mut ReadBuf<'_>) {
        let Some(ahead) = &self.ahead else { return };
        let mut n = (self.end() - self.start).min(buf.remaining());
        if let Some(frames) = &mut self.frames {
            n = n.min(frames.until_boundary());
            frames.pass(&ahead[self.start..self.start + n]);
        }
        buf.put_slice(&ahead[self.start..self.start + n]);
        self.start += n;
        if self.start == self.end() && !self.streaming {
            self.ahead = None;
        }
    }
}

/// Where a plaintext HTTP/2 connection's bytes are: in the client's preface, a frame's 9-byte
/// header, or its payload. Public for tests that act at frame boundaries.
#[derive(Debug, Clone, Copy)]
pub struct Frames {
    /// Bytes left of the preface.
    preface: usize,
    /// Bytes of the current frame header passed, and the length read from its first three.
    header: usize,
    length: usize,
    /// Bytes left of the current frame's payload.
    payload: usize,
}

impl Default for Frames {
    fn default() -> Self {
        Self { preface: 24, header: 0, length: 0, payload: 0 }
    }
}

impl Frames {
    /// Bytes up to the next boundary: the preface's end, a header's end, a payload's end.
    fn until_boundary(&self) -> usize {
        if self.preface > 0 {
            self.preface
        } else if self.payload > 0 {
            self.payload
        } else {
            9 - self.header
        }
    }

    /// Whether the bytes passed end exactly at a frame boundary (or before any byte).
    pub fn at_boundary(&self) -> bool {
        self.preface == 0 && self.header == 0 && self.payload == 0
    }

    /// Moves past `bytes`.
    pub fn pass(&mut self, mut bytes: &[u8]) {
        while let Some(&first) = bytes.first() {
            let skipped = if self.preface > 0 {
                let n = self.preface.min(bytes.len());
                self.preface -= n;
                n
            } else if self.payload > 0 {
                let n = self.payload.min(bytes.len());
                self.payload -= n;
                n
            } else {
                if self.header < 3 {
                    self.length = self.length << 8 | usize::from(first);
                }
                self.header += 1;
                if self.header == 9 {
                    (self.payload, self.header, self.length) = (self.length, 0, 0);
                }
                1
            };
            bytes = &bytes[skipped..];
        }
    }
}

impl Connected for BatchedWrites {
    type ConnectInfo = AgentConnection;

    /// The peer, with no state of its own: the state its calls share is made at accept by the
    /// wrapper that owns the connection's lifetime (`crate::security::connections::Guarded`),
    /// which sets it in place of [`ConnectionState::unset`].
    fn connect_info(&self) -> Self::ConnectInfo {
        AgentConnection { tcp: self.stream.connect_info(), state: ConnectionState::unset() }
    }
}

impl AsyncRead for BatchedWrites {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.start < this.end() {
            this.hand_out(buf);
            return Poll::Ready(Ok(()));
        }
        let wanted = buf.remaining();
        if !this.streaming || wanted >= READ_AHEAD {
            this.ahead = None;
            let before = buf.filled().len();
            let polled = Pin::new(&mut this.stream).poll_read(cx, buf);
            if polled.is_ready() {
                this.streaming = wanted > 0 && buf.filled().len() - before == wanted;
                if let Some(frames) = &mut this.frames {
                    frames.pass(&buf.filled()[before..]);
                }
            }
            return polled;
        }
        // Uninitialised capacity, written by the read before any byte of it is handed out
        // (tokio-util's `poll_read_buf` reads into a `BytesMut`'s spare capacity).
        let mut ahead = this.ahead.take().unwrap_or_else(|| BytesMut::with_capacity(READ_AHEAD));
        ahead.clear();
        match tokio_util::io::poll_read_buf(Pin::new(&mut this.stream), cx, &mut ahead) {
            Poll::Ready(Ok(n)) => {
                // A short read drained the socket: back to reading straight into h2's buffer.
                this.streaming = n == ahead.capacity();
                if n > 0 {
                    (this.ahead, this.start) = (Some(ahead), 0);
                    this.hand_out(buf);
                }
                Poll::Ready(Ok(()))
            }
            // Nothing waiting: the buffer goes, so that an idle connection holds none.
            Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncWrite for BatchedWrites {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        // Still correct if a caller asks anyway.
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        false
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn reports_no_vectored_writes_and_keeps_the_peer_address_and_the_bytes() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        assert!(accepted.is_write_vectored(), "tokio's TcpStream takes vectored writes: the reason for the wrapper");

        let mut server = BatchedWrites::new(accepted);
        assert!(!server.is_write_vectored(), "h2 must see no vectored writes, to copy answers up to 1 KiB");
        assert_eq!(server.connect_info().remote_addr(), Some(client.local_addr().unwrap()), "fleet status keys on it");

        server.write_all(b"answer").await.unwrap();
        let written = server.write_vectored(&[IoSlice::new(b" and"), IoSlice::new(b" more")]).await.unwrap();
        assert!(written > 0);
        server.flush().await.unwrap();
        client.write_all(b"request").await.unwrap();
        let mut request = [0; 7];
        server.read_exact(&mut request).await.unwrap();
        assert_eq!(&request, b"request");
        let mut answer = vec![0; 6 + written];
        client.read_exact(&mut answer).await.unwrap();
        assert!(answer.starts_with(b"answer and"), "{answer:?}");
    }

    /// The state its calls share is set by the connection's owner: the socket's own info makes
    /// none per connection.
    #[tokio::test]
    async fn a_sockets_info_makes_no_state_of_its_own() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut infos = Vec::new();
        for _ in 0..2 {
            let _client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
            let (accepted, _) = listener.accept().await.unwrap();
            infos.push(BatchedWrites::new(accepted).connect_info());
        }
        assert!(Arc::ptr_eq(&infos[0].state, &infos[1].state), "one shared placeholder, not a state per socket");
        assert_ne!(infos[0].remote_addr(), infos[1].remote_addr(), "each keeps its own peer");
    }

    #[tokio::test]
    async fn a_streaming_client_is_read_ahead_in_large_reads_and_every_byte_arrives_in_order() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let mut server = BatchedWrites::new(listener.accept().await.unwrap().0);
        let sent: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
        let writer = tokio::spawn({
            let sent = sent.clone();
            async move { client.write_all(&sent).await.unwrap() }
        });
        // h2's small reads: 8 KiB at a time.
        let (mut got, mut reads, mut large) = (Vec::new(), 0, 0);
        while got.len() < sent.len() {
            let mut chunk = vec![0; 8 * 1024];
            let n = server.read(&mut chunk).await.unwrap();
            assert!(n > 0);
            got.extend_from_slice(&chunk[..n]);
            reads += 1;
            if server.end() > 8 * 1024 {
                large += 1;
            }
        }
        writer.await.unwrap();
        assert_eq!(got, sent, "every byte, in order");
        assert!(large > 0, "the socket read ahead ({reads} reads)");
        // The client is gone (its task ended): the read finding nothing frees the buffer.
        assert_eq!(server.read(&mut [0; 8 * 1024]).await.unwrap(), 0);
        assert!(server.ahead.is_none(), "a drained read-ahead buffer is freed once the stream pauses");

        // A small request alone is read straight in, holding no buffer.
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let mut server = BatchedWrites::new(listener.accept().await.unwrap().0);
        client.write_all(b"poll").await.unwrap();
        let mut chunk = vec![0; 8 * 1024];
        assert_eq!(server.read(&mut chunk).await.unwrap(), 4);
        assert!(!server.streaming && server.ahead.is_none());
    }

    #[test]
    fn frame_boundaries_are_found_across_any_split() {
        // The preface, a 5-byte frame, an empty frame, a 20,000-byte frame.
        let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        let mut ends = vec![bytes.len()];
        for len in [5usize, 0, 20_000] {
            bytes.extend_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8, 0, 0, 0, 0, 0, 1]);
            ends.push(bytes.len());
            bytes.extend(std::iter::repeat_n(7u8, len));
            if len > 0 {
                ends.push(bytes.len());
            }
        }
        for step in [1, 2, 7, 9, 100, 4096, 1 << 20] {
            let (mut frames, mut at, mut reached) = (Frames::default(), 0, Vec::new());
            while at < bytes.len() {
                let boundary = frames.until_boundary();
                let n = boundary.min(step);
                frames.pass(&bytes[at..at + n]);
                at += n;
                if n == boundary {
                    reached.push(at);
                }
            }
            assert_eq!(reached, ends, "step {step}");
        }
    }

    #[tokio::test]
    async fn with_frame_boundaries_a_read_ahead_is_handed_out_frame_by_frame() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let mut server = BatchedWrites::new(listener.accept().await.unwrap().0).with_frame_boundaries();
        let mut sent = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        for i in 0..40u8 {
            sent.extend_from_slice(&[0, 0x40, 0, 0, 0, 0, 0, 0, 1]);
            sent.extend(std::iter::repeat_n(i, 0x4000));
        }
        let writer = tokio::spawn({
            let sent = sent.clone();
            async move { client.write_all(&sent).await.unwrap() }
        });
        let (mut got, mut sizes) = (Vec::new(), Vec::new());
        while got.len() < sent.len() {
            let mut chunk = vec![0; 0x4000 + 9];
            let before = (server.start, server.end());
            let n = server.read(&mut chunk).await.unwrap();
            got.extend_from_slice(&chunk[..n]);
            // A read straight into the caller's buffer (not streaming) takes what the socket has.
            sizes.push((n, (server.start, server.end()) != before));
        }
        writer.await.unwrap();
        assert_eq!(got, sent, "every byte, in order");
        // No hand-out from a read ahead crosses a boundary: headers come alone, payloads whole or
        // in parts that end on the frame's end.
        let mut at = 0;
        assert!(sizes.iter().any(|(_, ahead)| *ahead), "read ahead: {sizes:?}");
        for (n, ahead) in sizes {
            let (start, end) = (at, at + n);
            if ahead && start >= 24 {
                let frame_start = 24 + (start - 24) / (0x4000 + 9) * (0x4000 + 9);
                assert!(end <= frame_start + 0x4000 + 9, "a read of {n} at {start} crosses a frame's end");
                assert!(
                    start >= frame_start + 9 || end <= frame_start + 9,
                    "a read of {n} at {start} crosses a header's end"
                );
            }
            at = end;
        }
    }
}

#[cfg(test)]
mod slot_tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[derive(Debug, Default)]
    struct Counted(AtomicUsize);

    impl Slot for Counted {
        fn close(&self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[derive(Debug)]
    struct Peer(Option<SocketAddr>);

    impl Slot for Peer {}

    #[test]
    fn slots_are_found_by_type_made_from_the_peer_and_closed_when_the_connection_is() {
        let peer: SocketAddr = "10.0.0.1:9".parse().unwrap();
        let makers = SlotMakers::default().with(|_| Counted::default()).with(Peer);
        let open = OpenConnection::of(makers.fill(ConnectionState::new(Some(peer))));
        let state = Arc::clone(open.state());
        assert_eq!(state.get::<Peer>().and_then(|p| p.0), Some(peer));
        assert_eq!(state.get::<Counted>().unwrap().0.load(Ordering::Relaxed), 0);
        assert!(ConnectionState::default().get::<Counted>().is_none(), "a slot never registered is absent");
        drop(open);
        assert_eq!(state.get::<Counted>().unwrap().0.load(Ordering::Relaxed), 1, "closed once, by the guard's drop");
        let replaced = ConnectionState::new(None).with(Peer(None)).with(Peer(Some(peer)));
        assert_eq!((replaced.slots.len(), replaced.get::<Peer>().unwrap().0), (1, Some(peer)));
    }
}
