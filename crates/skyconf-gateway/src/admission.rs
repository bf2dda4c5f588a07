//! Which stream a call gets, and the bounded queue of calls waiting while every stream an OAP
//! allows is in use.
//!
//! An OAP limits the streams open at once on each connection (`SETTINGS_MAX_CONCURRENT_STREAMS`;
//! Satellite's default is 32). A call takes one on a connection of its OAP that has room
//! ([`super::connect::Link::try_take`]) and holds it as a [`Stream`] until both its request body
//! (inside hyper) and its response body have let go of it, which is when the HTTP/2 stream has
//! ended. Sending a call on a full connection would leave it pending in h2, and hyper then holds
//! every later call on that connection behind it: one client holding streams open would stop
//! every agent whose calls share the connection (N6 in RELIABILITY.md).
//!
//! When no connection has room, [`super::upstream`] opens another one (up to
//! `max_connections_per_upstream`) and the call waits in its OAP's [`Queue`]: at most
//! `max_queued_calls` calls, each for at most `queue_wait`, after which it ends with
//! DEADLINE_EXCEEDED, as a call whose deadline passes while it waits for the OAP does. A call
//! whose own `grpc-timeout` is shorter is ended by that first (the server's agent port applies
//! it to the whole call). A full queue ends a call at once, with DEADLINE_EXCEEDED too: the status a
//! client sees when its call cannot start in time, and not one that makes a Java agent drop its
//! channel (RESOURCE_EXHAUSTED would: a reconnect storm of every agent while the OAP is busy).
//!
//! Waiters are woken one at a time as streams are given back, oldest first (each one that gets a
//! stream wakes the next, in case there is more room), and all at once when a connection opens
//! or the OAP goes down. While any call waits, new calls queue behind it rather than take a
//! stream given back for the waiter.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::connect::Link;
use super::upstream::Member;

/// One call's hold on a stream of an upstream connection, shared by its request and response
/// bodies: the stream counts as in use until both have dropped it.
#[derive(Debug, Clone)]
pub struct Stream(Arc<Held>);

#[derive(Debug)]
struct Held {
    link: Arc<Link>,
    member: Arc<Member>,
}

impl Stream {
    /// A stream already taken on `link` (of `member`).
    pub(super) fn new(link: Arc<Link>, member: &Arc<Member>) -> Self {
        Self(Arc::new(Held { link, member: Arc::clone(member) }))
    }

    /// The connection it is on.
    pub fn link(&self) -> &Link {
        &self.0.link
    }

    /// The OAP.
    pub fn member(&self) -> &Member {
        &self.0.member
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.link.give_back();
        self.member.queue.stream_given_back();
    }
}

/// Why a call got no stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unsent {
    /// No OAP is reachable.
    NoUpstream,
    /// It waited `queue_wait` in the queue.
    Deadline,
    /// The queue was full.
    Full,
    /// Its OAP went down while it waited.
    Down,
}

/// What one look for a stream found, for [`Queue::wait`].
pub(super) enum Attempt<T> {
    /// A stream.
    Taken(T),
    /// None yet.
    Retry,
    /// None to be had: the OAP is down.
    Down,
}

/// The calls waiting for a stream to one OAP.
#[derive(Debug)]
pub struct Queue {
    waiting: AtomicUsize,
    room: Notify,
    max: usize,
    wait: Duration,
    deadline: AtomicU64,
    full: AtomicU64,
    left: AtomicU64,
}

/// Calls that never reached the OAP for want of a stream, by why (counters).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnsentCounts {
    /// Ended DEADLINE_EXCEEDED after waiting `queue_wait`.
    pub deadline: u64,
    /// Ended DEADLINE_EXCEEDED at once: the queue was full.
    pub full: u64,
    /// Ended while waiting: the call's own deadline passed or the agent cancelled it.
    pub left: u64,
}

impl Queue {
    /// Up to `max` calls, each waiting up to `wait`.
    pub(super) fn new(max: usize, wait: Duration) -> Self {
        Self {
            waiting: AtomicUsize::new(0),
            room: Notify::new(),
            max,
            wait,
            deadline: AtomicU64::new(0),
            full: AtomicU64::new(0),
            left: AtomicU64::new(0),
        }
    }

    /// Calls waiting now.
    pub fn waiting(&self) -> usize {
        // SeqCst here, in `wait`'s count and in the stream counts of `Link`: a stream given
        // back and a waiter arriving must not each miss the other.
        self.waiting.load(Ordering::SeqCst)
    }

    /// Calls that never reached the OAP, so far.
    pub fn unsent(&self) -> UnsentCounts {
        UnsentCounts {
            deadline: self.deadline.load(Ordering::Relaxed),
            full: self.full.load(Ordering::Relaxed),
            left: self.left.load(Ordering::Relaxed),
        }
    }

    /// Wakes the oldest waiter, if any: a stream was given back.
    fn stream_given_back(&self) {
        if self.waiting() > 0 {
            self.room.notify_one();
        }
    }

    /// Wakes every waiter: a connection opened, or the OAP went down.
    pub(super) fn wake_all(&self) {
        self.room.notify_waiters();
    }

    /// Waits in the queue until `attempt` takes a stream, the OAP goes down, or the wait ends.
    pub(super) async fn wait<T>(&self, mut attempt: impl FnMut() -> Attempt<T>) -> Result<T, Unsent> {
        if self.waiting.fetch_add(1, Ordering::SeqCst) >= self.max {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            self.full.fetch_add(1, Ordering::Relaxed);
            return Err(Unsent::Full);
        }
        let mut waiter = Waiter { queue: self, settled: false };
        let deadline = Instant::now() + self.wait;
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            match attempt() {
                Attempt::Taken(taken) => {
                    waiter.settle();
                    // There may be room for the next one too.
                    self.stream_given_back();
                    return Ok(taken);
                }
                Attempt::Down => {
                    waiter.settle();
                    return Err(Unsent::Down);
                }
                Attempt::Retry => {}
            }
            if tokio::time::timeout_at(deadline, room).await.is_err() {
                waiter.settle();
                self.deadline.fetch_add(1, Ordering::Relaxed);
                return Err(Unsent::Deadline);
            }
        }
    }
}

/// A call's place in a [`Queue`]: counted while it lives, and as having left when dropped before
/// it was settled (the call ended while waiting).
struct Waiter<'a> {
    queue: &'a Queue,
    settled: bool,
}

impl Waiter<'_> {
    fn settle(&mut self) {
        if !self.settled {
            self.settled = true;
            self.queue.waiting.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        if !self.settled {
            self.queue.waiting.fetch_sub(1, Ordering::SeqCst);
            self.queue.left.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    #[tokio::test(start_paused = true)]
    async fn a_waiting_call_ends_at_the_queue_deadline() {
        let queue = Queue::new(4, Duration::from_secs(10));
        let started = Instant::now();
        let waited = queue.wait(|| Attempt::<()>::Retry).await;
        assert_eq!(waited, Err(Unsent::Deadline));
        assert_eq!(started.elapsed(), Duration::from_secs(10));
        assert_eq!(queue.waiting(), 0);
        assert_eq!(queue.unsent(), UnsentCounts { deadline: 1, ..UnsentCounts::default() });
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_queue_refuses_at_once_and_a_cancelled_waiter_counts_as_left() {
        let queue = Arc::new(Queue::new(2, Duration::from_secs(10)));
        let mut waiters = Vec::new();
        for _ in 0..2 {
            let queue = Arc::clone(&queue);
            waiters.push(tokio::spawn(async move { queue.wait(|| Attempt::<()>::Retry).await }));
        }
        while queue.waiting() < 2 {
            tokio::task::yield_now().await;
        }
        assert_eq!(queue.wait(|| Attempt::<()>::Retry).await, Err(Unsent::Full));
        for waiter in &waiters {
            waiter.abort();
        }
        for waiter in waiters {
            assert!(waiter.await.unwrap_err().is_cancelled());
        }
        assert_eq!(queue.waiting(), 0);
        assert_eq!(queue.unsent(), UnsentCounts { deadline: 0, full: 1, left: 2 });
    }

    /// A stream given back wakes a waiter, which takes it.
    #[tokio::test(start_paused = true)]
    async fn a_stream_given_back_goes_to_a_waiter() {
        let queue = Arc::new(Queue::new(4, Duration::from_secs(10)));
        let room = Arc::new(AtomicBool::new(false));
        let waiter = {
            let (queue, room) = (Arc::clone(&queue), Arc::clone(&room));
            tokio::spawn(async move {
                queue
                    .wait(|| if room.swap(false, Ordering::AcqRel) { Attempt::Taken(()) } else { Attempt::Retry })
                    .await
            })
        };
        while queue.waiting() < 1 {
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        room.store(true, Ordering::Release);
        queue.stream_given_back();
        assert_eq!(waiter.await.unwrap(), Ok(()));
        assert_eq!(queue.unsent(), UnsentCounts::default());
    }
}
