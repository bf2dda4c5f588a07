//! Writes to an OAP gathered into one `write` per round of work on the connection.
//!
//! h2 writes a DATA frame of more than 256 bytes with a `writev` of its own, and flushes after
//! each one. Forwarded trace segments arrive in 16 KiB frames, so a 128 KiB client stream cost
//! eight writes to the OAP's socket, and on loopback (or any OAP on the same host) each of them
//! woke the OAP, which then read 16 KiB and slept again: the profile of the segment benchmark
//! showed more time in those context switches than in forwarding (BENCHMARKS.md, "Gateway").
//!
//! [`CoalescedWrites`] takes what h2 writes into a buffer of its own and writes it out once per
//! round: the first flush after some bytes were buffered is put off to the connection task's next
//! poll (the task is woken, so it comes right after the tasks that are ready now: the other
//! streams' request bodies, whose frames join the same write), and that poll's flush writes it
//! all. A round is counted by [`RoundExecutor`], the executor the upstream connection's tasks
//! are spawned on, which bumps [`Rounds`] every time one of them is polled. The buffer is written
//! out as soon as it holds [`WRITE_BATCH`] bytes, so it never holds much more: flow control
//! stays end to end (a socket that takes nothing leaves h2 waiting, as before). Before the first
//! counted poll (the TCP, TLS and HTTP/2 handshakes) every flush writes at once.

use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Buffered bytes at which the buffer is written out without waiting for the round to end: a
/// bound on the buffer (it keeps its capacity, so each upstream connection holds up to this
/// much), large enough that a busy round is still one write. Under 32 agents streaming
/// segments a round gathers a median of about 300 KiB; a 128 KiB bound split it into several
/// writes, each waking the OAP, and cost 3-10 % more CPU per forwarded segment call than
/// this bound (`scripts/bench/gateway-cpu.sh`; BENCHMARKS.md, "Gateway").
pub const WRITE_BATCH: usize = 1024 * 1024;

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

/// An upstream socket whose writes are gathered per round (see the module docs).
#[derive(Debug)]
pub struct CoalescedWrites<T> {
    inner: T,
    /// Taken from h2, not yet written: `buf[written..]`.
    buf: Vec<u8>,
    written: usize,
    /// The round in which a flush of the buffered bytes was put off.
    deferred_at: Option<u64>,
    rounds: Rounds,
}

impl<T> CoalescedWrites<T> {
    /// Wraps `inner`, counting rounds with `rounds`.
    pub fn new(inner: T, rounds: Rounds) -> Self {
        Self { inner, buf: Vec::new(), written: 0, deferred_at: None, rounds }
    }

    fn pending(&self) -> usize {
        self.buf.len() - self.written
    }
}

impl<T: AsyncWrite + Unpin> CoalescedWrites<T> {
    /// Writes out everything buffered.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.buf.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.buf[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.buf.clear();
        self.written = 0;
        self.deferred_at = None;
        Poll::Ready(Ok(()))
    }

    /// Makes room for more: writes the buffer out once it holds a batch.
    fn poll_room(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.pending() >= WRITE_BATCH { self.poll_drain(cx) } else { Poll::Ready(Ok(())) }
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
        self.buf.extend_from_slice(data);
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
            self.buf.extend_from_slice(slice);
            n += slice.len();
        }
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        // h2 then hands a large DATA frame's header and payload over in one call.
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.pending() > 0 {
            let now = self.rounds.now();
            let due = now == 0 || self.pending() >= WRITE_BATCH || self.deferred_at.is_some_and(|at| at != now);
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
        let mut w = CoalescedWrites::new(a, Rounds::default());
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
        let mut w = CoalescedWrites::new(a, rounds.clone());
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
        let mut w = CoalescedWrites::new(a, rounds);
        let chunk = vec![7u8; WRITE_BATCH];
        w.write_all(&chunk).await.unwrap();
        w.flush().await.unwrap();
        let mut got = vec![0; WRITE_BATCH];
        b.read_exact(&mut got).await.unwrap();
        assert_eq!(got, chunk);
    }

    #[derive(Default)]
    struct WakeCount(AtomicU64);

    impl std::task::Wake for WakeCount {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
}
