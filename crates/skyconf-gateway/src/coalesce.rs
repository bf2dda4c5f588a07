//! Writes to an OAP gathered into one `write` per round of work on the connection.
//!
//! h2 writes a DATA frame of more than 256 bytes with a `writev` of its own, and flushes after
//! each one. Forwarded trace segments arrive in 16 KiB frames, so without gathering a 128 KiB
//! client stream costs eight writes to the OAP's socket, and on loopback (or any OAP on the same
//! host) each of them wakes the OAP, which reads 16 KiB and sleeps again: more time in context
//! switches than in forwarding (BENCHMARKS.md, "Gateway", has the profile).
//!
//! [`CoalescedWrites`] takes what h2 writes into a buffer of its own and writes it out once per
//! round: the first flush after some bytes were buffered is put off to the connection task's next
//! poll (the task is woken, so it comes right after the tasks that are ready now: the other
//! streams' request bodies, whose frames join the same write), and that poll's flush writes it
//! all. A round is counted by [`RoundExecutor`], the executor the upstream connection's tasks
//! are spawned on, which bumps [`Rounds`] every time one of them is polled. The buffer is written
//! out as soon as it holds [`WRITE_BATCH`] bytes, so it never holds much more: flow control
//! stays end to end (a socket that takes nothing leaves h2 waiting). Before the first
//! counted poll (the TCP, TLS and HTTP/2 handshakes) every flush writes at once.
//!
//! The bytes of forwarded messages are not copied into that buffer. h2 hands a DATA frame's
//! payload over as a slice of the `Bytes` it was given, which it cannot lend beyond the call,
//! so the request bodies sent upstream ([`LendingBody`]) record each payload in the
//! connection's [`Lent`] registry while h2 holds it; a write whose bytes lie in a recorded
//! payload is kept as a reference to that payload (`Bytes::slice_ref`) and written with the rest
//! of the round in one `writev`. Only frame headers and small frames are copied (copying the
//! payloads costs a tenth of the gateway's CPU time under segment load: BENCHMARKS.md,
//! "Gateway"). A write that is not found there (TLS records, which rustls builds in its own
//! buffer; frames h2 copied itself) is copied into the buffer, so the registry only ever saves work, never changes what is
//! written: a slice found in a live `Bytes` is that `Bytes`' memory, which cannot change.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::io::{self, IoSlice};
use std::ops::Range;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes};
use http_body::Frame;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Buffered bytes at which the buffer is written out without waiting for the round to end: a
/// bound on the buffer (it keeps its capacity, so each upstream connection holds up to this
/// much), large enough that a busy round is still one write. Under 32 agents streaming
/// segments a round gathers a median of about 300 KiB; a 128 KiB bound split it into several
/// writes, each waking the OAP, and cost 3-10 % more CPU per forwarded segment call than
/// this bound (`scripts/bench/gateway-cpu.sh`; BENCHMARKS.md, "Gateway").
pub const WRITE_BATCH: usize = 1024 * 1024;

/// Payloads shorter than this are not recorded (h2 copies a DATA frame of up to 256 bytes into
/// its own buffer anyway), and writes shorter than this are copied without a look-up.
const LEND_MIN: usize = 1024;

/// Slices handed to one `writev`.
const MAX_SLICES: usize = 128;

/// Polls of one upstream connection's tasks so far; 0 while none was polled.
#[derive(Debug, Clone, Default)]
pub struct Rounds(Arc<AtomicU64>);

impl Rounds {
    fn now(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Spawns hyper's tasks for one upstream connection on tokio, counting their polls in
/// [`Rounds`].
#[derive(Debug, Clone)]
pub struct RoundExecutor {
    rounds: Rounds,
}

impl RoundExecutor {
    /// Counting in `rounds`.
    pub fn new(rounds: Rounds) -> Self {
        Self { rounds }
    }
}

impl<F> hyper::rt::Executor<F> for RoundExecutor
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, future: F) {
        tokio::spawn(Counted { future, rounds: self.rounds.clone() });
    }
}

pin_project_lite::pin_project! {
    /// A future whose every poll starts a new round.
    struct Counted<F> {
        #[pin]
        future: F,
        rounds: Rounds,
    }
}

impl<F: Future> Future for Counted<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        this.rounds.0.fetch_add(1, Ordering::Relaxed);
        this.future.poll(cx)
    }
}

/// The payloads h2 holds to write to one upstream connection, by the address of their first
/// byte (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct Lent(Arc<Mutex<BTreeMap<usize, Bytes>>>);

impl Lent {
    /// `bytes`, recorded here until the returned chunk is dropped (by h2, once written or when
    /// its stream is reset).
    pub fn lend(&self, bytes: Bytes) -> LentChunk {
        let key = bytes.as_ptr() as usize;
        // Two chunks starting at one address: the second one is simply not recorded.
        let recorded = bytes.len() >= LEND_MIN && {
            let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            match map.entry(key) {
                std::collections::btree_map::Entry::Vacant(entry) => {
                    entry.insert(bytes.clone());
                    true
                }
                std::collections::btree_map::Entry::Occupied(_) => false,
            }
        };
        LentChunk { bytes, recorded: recorded.then(|| (self.clone(), key)) }
    }

    /// `slice` as a `Bytes` of its own, when it lies in a recorded payload.
    fn find(&self, slice: &[u8]) -> Option<Bytes> {
        let addr = slice.as_ptr() as usize;
        let map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let (start, bytes) = map.range(..=addr).next_back()?;
        (addr + slice.len() <= start + bytes.len()).then(|| bytes.slice_ref(slice))
    }

    /// Payloads recorded now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A payload handed to h2, recorded in a [`Lent`] registry while it lives.
#[derive(Debug)]
pub struct LentChunk {
    bytes: Bytes,
    recorded: Option<(Lent, usize)>,
}

impl Drop for LentChunk {
    fn drop(&mut self) {
        if let Some((lent, key)) = self.recorded.take() {
            lent.0.lock().unwrap_or_else(PoisonError::into_inner).remove(&key);
        }
    }
}

impl Buf for LentChunk {
    fn remaining(&self) -> usize {
        self.bytes.len()
    }

    fn chunk(&self) -> &[u8] {
        &self.bytes
    }

    fn advance(&mut self, cnt: usize) {
        self.bytes.advance(cnt);
    }

    fn copy_to_bytes(&mut self, len: usize) -> Bytes {
        self.bytes.copy_to_bytes(len)
    }
}

pin_project_lite::pin_project! {
    /// A request body on its way to an OAP: its payloads recorded in the connection's [`Lent`]
    /// registry (`None`: not recorded, for a TLS connection), holding the call's stream
    /// ([`super::admission`]) for as long as hyper holds the body.
    pub struct LendingBody {
        #[pin]
        inner: axum::body::Body,
        lent: Option<Lent>,
        stream: Option<super::admission::Stream>,
    }
}

impl LendingBody {
    /// `inner`, its payloads recorded in `lent`.
    pub fn new(inner: axum::body::Body, lent: Option<Lent>) -> Self {
        Self { inner, lent, stream: None }
    }

    /// The same body, holding `stream` while it lives.
    pub fn holding(mut self, stream: super::admission::Stream) -> Self {
        self.stream = Some(stream);
        self
    }
}

impl http_body::Body for LendingBody {
    type Data = LentChunk;
    type Error = axum::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<LentChunk>, axum::Error>>> {
        let this = self.project();
        let frame = ready!(this.inner.poll_frame(cx));
        Poll::Ready(frame.map(|frame| {
            frame.map(|frame| {
                frame.map_data(|bytes| match this.lent {
                    Some(lent) => lent.lend(bytes),
                    None => LentChunk { bytes, recorded: None },
                })
            })
        }))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// One part of what is to be written.
#[derive(Debug)]
enum Piece {
    /// A range of [`CoalescedWrites::copied`].
    Copied(Range<usize>),
    /// A lent payload, or part of one.
    Lent(Bytes),
}

/// An upstream socket whose writes are gathered per round (see the module docs).
#[derive(Debug)]
pub struct CoalescedWrites<T> {
    inner: T,
    /// Taken from h2, not yet written, in order; the front one from `front_written` on.
    pieces: VecDeque<Piece>,
    front_written: usize,
    /// The bytes of the `Copied` pieces.
    copied: Vec<u8>,
    /// Bytes taken and not yet written.
    pending: usize,
    /// The round in which a flush of the buffered bytes was put off.
    deferred_at: Option<u64>,
    rounds: Rounds,
    /// Where payloads are recorded; `None`: everything is copied.
    lent: Option<Lent>,
}

impl<T> CoalescedWrites<T> {
    /// Wraps `inner`, counting rounds with `rounds`, referring to the payloads recorded in
    /// `lent` rather than copying them.
    pub fn new(inner: T, rounds: Rounds, lent: Option<Lent>) -> Self {
        Self {
            inner,
            pieces: VecDeque::new(),
            front_written: 0,
            copied: Vec::new(),
            pending: 0,
            deferred_at: None,
            rounds,
            lent,
        }
    }

    /// Takes `data` to write: a reference to a lent payload, or a copy.
    fn take(&mut self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        self.pending += data.len();
        if data.len() >= LEND_MIN
            && let Some(bytes) = self.lent.as_ref().and_then(|lent| lent.find(data))
        {
            self.pieces.push_back(Piece::Lent(bytes));
            return;
        }
        let start = self.copied.len();
        self.copied.extend_from_slice(data);
        match self.pieces.back_mut() {
            Some(Piece::Copied(range)) if range.end == start => range.end = self.copied.len(),
            _ => self.pieces.push_back(Piece::Copied(start..self.copied.len())),
        }
    }

    /// Counts `n` more bytes as written.
    fn advance(&mut self, mut n: usize) {
        self.pending -= n;
        while n > 0 {
            let Some(front) = self.pieces.front() else { break };
            let left = piece_len(front) - self.front_written;
            if n < left {
                self.front_written += n;
                return;
            }
            n -= left;
            self.pieces.pop_front();
            self.front_written = 0;
        }
    }
}

fn piece_len(piece: &Piece) -> usize {
    match piece {
        Piece::Copied(range) => range.len(),
        Piece::Lent(bytes) => bytes.len(),
    }
}

impl<T: AsyncWrite + Unpin> CoalescedWrites<T> {
    /// Writes out everything buffered.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.pending > 0 {
            let mut slices = [IoSlice::new(&[]); MAX_SLICES];
            let mut count = 0;
            let mut skip = self.front_written;
            for piece in self.pieces.iter().take(MAX_SLICES) {
                let bytes = match piece {
                    Piece::Copied(range) => &self.copied[range.clone()],
                    Piece::Lent(bytes) => &bytes[..],
                };
                slices[count] = IoSlice::new(&bytes[skip..]);
                skip = 0;
                count += 1;
            }
            let n = ready!(Pin::new(&mut self.inner).poll_write_vectored(cx, &slices[..count]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.advance(n);
        }
        self.pieces.clear();
        self.front_written = 0;
        self.copied.clear();
        self.deferred_at = None;
        Poll::Ready(Ok(()))
    }

    /// Makes room for more: writes the buffer out once it holds a batch.
    fn poll_room(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.pending >= WRITE_BATCH { self.poll_drain(cx) } else { Poll::Ready(Ok(())) }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for CoalescedWrites<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for CoalescedWrites<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        ready!(self.poll_room(cx))?;
        self.take(data);
        Poll::Ready(Ok(data.len()))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        ready!(self.poll_room(cx))?;
        let mut n = 0;
        for slice in data {
            self.take(slice);
            n += slice.len();
        }
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        // h2 then hands a large DATA frame's header and payload over in one call.
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.pending > 0 {
            let now = self.rounds.now();
            let due = now == 0 || self.pending >= WRITE_BATCH || self.deferred_at.is_some_and(|at| at != now);
            if !due {
                if self.deferred_at.is_none() {
                    // The next poll of this task flushes; the tasks ready now run first.
                    self.deferred_at = Some(now);
                    cx.waker().wake_by_ref();
                }
                return Poll::Ready(Ok(()));
            }
            ready!(self.poll_drain(cx))?;
        }
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Outside a counted task (the handshakes) a flush writes at once.
    #[tokio::test]
    async fn before_the_first_round_a_flush_writes_at_once() {
        let (a, mut b) = tokio::io::duplex(1 << 20);
        let mut w = CoalescedWrites::new(a, Rounds::default(), None);
        w.write_all(b"preface").await.unwrap();
        w.flush().await.unwrap();
        let mut got = [0; 7];
        b.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"preface");
    }

    /// In a round, the first flush is put off (and the task woken); the next round's flush
    /// writes everything buffered in between, in order, in one go.
    #[tokio::test]
    async fn a_flush_is_put_off_to_the_next_round_and_writes_everything_then() {
        let (a, mut b) = tokio::io::duplex(1 << 20);
        let rounds = Rounds::default();
        let mut w = CoalescedWrites::new(a, rounds.clone(), None);
        rounds.0.fetch_add(1, Ordering::Relaxed);
        let woken = Arc::new(WakeCount::default());
        let waker = std::task::Waker::from(Arc::clone(&woken));
        let mut cx = Context::from_waker(&waker);
        let mut w = Pin::new(&mut w);
        assert!(w.as_mut().poll_write(&mut cx, b"one,").is_ready());
        assert!(w.as_mut().poll_flush(&mut cx).is_ready());
        assert!(w.as_mut().poll_write_vectored(&mut cx, &[IoSlice::new(b"two,"), IoSlice::new(b"three")]).is_ready());
        assert!(w.as_mut().poll_flush(&mut cx).is_ready());
        assert_eq!(woken.0.load(Ordering::Relaxed), 1, "woken once to flush in the next round");
        let mut none = [0; 1];
        assert!(tokio::time::timeout(std::time::Duration::from_millis(20), b.read(&mut none)).await.is_err());
        rounds.0.fetch_add(1, Ordering::Relaxed);
        assert!(w.as_mut().poll_flush(&mut cx).is_ready());
        let mut got = [0; 13];
        b.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"one,two,three");
    }

    /// A full batch is written without waiting for the round to end.
    #[tokio::test]
    async fn a_full_batch_is_written_at_once() {
        let (a, mut b) = tokio::io::duplex(4 * WRITE_BATCH);
        let rounds = Rounds::default();
        rounds.0.fetch_add(1, Ordering::Relaxed);
        let mut w = CoalescedWrites::new(a, rounds, None);
        let chunk = vec![7u8; WRITE_BATCH];
        w.write_all(&chunk).await.unwrap();
        w.flush().await.unwrap();
        let mut got = vec![0; WRITE_BATCH];
        b.read_exact(&mut got).await.unwrap();
        assert_eq!(got, chunk);
    }

    /// A socket that takes at most `step` bytes per write, to cut writes anywhere.
    struct Trickle {
        written: Vec<u8>,
        step: usize,
        writes: usize,
    }

    impl AsyncWrite for Trickle {
        fn poll_write(mut self: Pin<&mut Self>, _: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
            let n = data.len().min(self.step);
            self.written.extend_from_slice(&data[..n]);
            self.writes += 1;
            Poll::Ready(Ok(n))
        }

        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            data: &[IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            let mut n = 0;
            for slice in data {
                let take = slice.len().min(self.step - n);
                self.written.extend_from_slice(&slice[..take]);
                n += take;
                if n == self.step {
                    break;
                }
            }
            self.writes += 1;
            Poll::Ready(Ok(n))
        }

        fn is_write_vectored(&self) -> bool {
            true
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn payload(len: usize, seed: u8) -> Bytes {
        (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect::<Vec<u8>>().into()
    }

    /// Frames as h2 writes them (a header copied, the payload or a part of it lent) come out
    /// in order and whole, however the socket cuts the writes; the payloads are kept as
    /// references, not copied.
    #[tokio::test]
    async fn lent_payloads_are_written_by_reference_in_order_whatever_the_socket_takes() {
        for step in [1, 7, 9, 1000, 4096, 1 << 20] {
            let lent = Lent::default();
            let mut w = CoalescedWrites::new(
                Trickle { written: Vec::new(), step, writes: 0 },
                Rounds::default(),
                Some(lent.clone()),
            );
            let chunks: Vec<LentChunk> = (0..4).map(|k| lent.lend(payload(3000 + 500 * k, k as u8))).collect();
            assert_eq!(lent.len(), 4);
            let mut expected = Vec::new();
            for (k, chunk) in chunks.iter().enumerate() {
                let header = [k as u8; 9];
                // The last payload goes in two frames, as h2 splits one beyond the frame size.
                let parts: Vec<&[u8]> =
                    if k == 3 { vec![&chunk.chunk()[..1200], &chunk.chunk()[1200..]] } else { vec![chunk.chunk()] };
                for part in parts {
                    let n = w.write_vectored(&[IoSlice::new(&header), IoSlice::new(part)]).await.unwrap();
                    assert_eq!(n, header.len() + part.len(), "a write is always taken whole");
                    expected.extend_from_slice(&header);
                    expected.extend_from_slice(part);
                }
            }
            // A small write, copied, between them.
            w.write_all(b"ping").await.unwrap();
            expected.extend_from_slice(b"ping");
            let lent_pieces = w.pieces.iter().filter(|p| matches!(p, Piece::Lent(_))).count();
            assert_eq!(lent_pieces, 5, "every payload (and both parts of the split one) by reference");
            assert_eq!(w.copied.len(), 5 * 9 + 4, "only headers and the small write copied");
            w.flush().await.unwrap();
            assert_eq!(w.inner.written, expected, "step {step}");
            assert_eq!(w.pending, 0);
            drop(chunks);
            assert!(lent.is_empty(), "a dropped chunk is no longer recorded");
        }
    }

    /// Bytes equal to a lent payload but elsewhere in memory, and a payload shorter than
    /// `LEND_MIN`, are copied; so is everything without a registry (TLS).
    #[tokio::test]
    async fn anything_not_lent_is_copied() {
        let lent = Lent::default();
        let big = lent.lend(payload(5000, 1));
        let small = lent.lend(payload(100, 2));
        assert_eq!(lent.len(), 1, "a short payload is not recorded");
        let elsewhere = big.chunk().to_vec();
        for registry in [Some(lent.clone()), None] {
            let mut w = CoalescedWrites::new(
                Trickle { written: Vec::new(), step: 1 << 20, writes: 0 },
                Rounds::default(),
                registry.clone(),
            );
            w.write_all(&elsewhere).await.unwrap();
            w.write_all(small.chunk()).await.unwrap();
            w.write_all(big.chunk()).await.unwrap();
            let by_reference = w.pieces.iter().filter(|p| matches!(p, Piece::Lent(_))).count();
            assert_eq!(by_reference, usize::from(registry.is_some()));
            w.flush().await.unwrap();
            assert_eq!(w.inner.written, [&elsewhere[..], small.chunk(), big.chunk()].concat());
            assert_eq!(w.inner.writes, 1, "one round, one write");
        }
    }

    /// A body's data frames become lent chunks; trailers pass unchanged.
    #[tokio::test]
    async fn a_lending_body_records_each_payload_while_it_lives() {
        use http_body_util::BodyExt;
        let lent = Lent::default();
        let frames = vec![
            Ok::<_, std::convert::Infallible>(Frame::data(payload(2048, 3))),
            Ok(Frame::trailers(http::HeaderMap::from_iter([(
                http::header::HeaderName::from_static("grpc-status"),
                http::HeaderValue::from_static("0"),
            )]))),
        ];
        let body = axum::body::Body::new(http_body_util::StreamBody::new(futures_util::stream::iter(frames)));
        let mut body = LendingBody::new(body, Some(lent.clone()));
        let data = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(data.chunk(), &payload(2048, 3)[..]);
        assert_eq!(lent.len(), 1);
        drop(data);
        assert!(lent.is_empty());
        let trailers = body.frame().await.unwrap().unwrap().into_trailers().unwrap();
        assert_eq!(trailers["grpc-status"], "0");
    }

    #[derive(Default)]
    struct WakeCount(AtomicU64);

    impl std::task::Wake for WakeCount {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
}
