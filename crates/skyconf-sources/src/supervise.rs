//! The one loop that keeps a store watched: every store implements a [`Session`] (one connection
//! attempt: establish the watch, send a snapshot, stream updates until it breaks) and its
//! [`Source::run`] hands that session to [`supervise`], which survives the breaks.
//!
//! [`supervise`] owns what every store needs alike, so that no store writes it again:
//! - an outage is reported as exactly one [`Update::Failed`], however many attempts it lasts, and
//!   logged only at DEBUG: the consumer of the update logs it once, with what it means for what
//!   is served (one cause, one line);
//! - between attempts it waits [`Backoff::next_delay`], and stops waiting at once on shutdown or
//!   when the receiver is gone;
//! - the back-off starts over after a session that established its watch;
//! - a watch that breaks after it was established is re-established once before it counts as an
//!   outage: the store may well still answer;
//! - a session that lost the history it resumes from ([`SessionEnd::Relist`]) is started again at
//!   once, without waiting and without a failure.
//!
//! The retry policy is a value ([`Backoff`], from each store's settings); the loop is written once.

use std::future::Future;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::{Backoff, KeySet, Source, SourceError, Update};

/// One connection attempt of a store.
///
/// [`Session::run_once`] connects, establishes its watch, calls [`Reporter::established`] and sends
/// its snapshot (in whichever order keeps changes from falling between the two), then reports every
/// change until the watch breaks. A session that recovers by itself (a client that reconnects, a
/// poll that fails one round) reports the outage through [`Reporter::outage`] and carries on.
/// The future is dropped at shutdown, so it must hold nothing that cannot be dropped mid-way.
pub trait Session: Source {
    /// Runs one session over `keys`, reporting through `reporter`, until it ends.
    fn run_once(&self, keys: &KeySet, reporter: &mut Reporter<'_>) -> impl Future<Output = SessionEnd> + Send;
}

/// How a [`Session`] ended.
#[derive(Debug)]
pub enum SessionEnd {
    /// The receiver is gone: nothing is listening any more.
    ReceiverGone,
    /// The store failed: connecting, reading, or the watch broke.
    Failed(SourceError),
    /// The history the session resumes from is gone (etcd's compaction, a restored cluster): start
    /// again at once from a full read. Not a failure.
    Relist(String),
}

/// The receiver of the updates is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the update receiver is gone")]
pub struct ReceiverGone;

impl From<ReceiverGone> for SessionEnd {
    fn from(_: ReceiverGone) -> Self {
        Self::ReceiverGone
    }
}

/// What a [`Session`] reports through: the update channel, and the outage state [`supervise`]
/// keeps across sessions.
#[derive(Debug)]
pub struct Reporter<'a> {
    updates: &'a mpsc::Sender<Update>,
    store: &'a str,
    /// An outage has been reported and the store has not answered since.
    failing: bool,
    /// This session established its watch.
    established: bool,
}

impl<'a> Reporter<'a> {
    pub(crate) fn new(updates: &'a mpsc::Sender<Update>, store: &'a str) -> Self {
        Self { updates, store, failing: false, established: false }
    }

    /// Sends one update.
    pub async fn send(&self, update: Update) -> Result<(), ReceiverGone> {
        self.updates.send(update).await.map_err(|_| ReceiverGone)
    }

    /// Sends every update, in order.
    pub async fn send_all(&self, updates: impl IntoIterator<Item = Update>) -> Result<(), ReceiverGone> {
        for update in updates {
            self.send(update).await?;
        }
        Ok(())
    }

    /// The store answers and the watch is in place: any outage is over, and the back-off starts
    /// over after this session. Call it before sending the snapshot.
    pub fn established(&mut self) {
        if self.failing {
            tracing::info!(store = %self.store, "The store is back.");
        }
        self.failing = false;
        self.established = true;
    }

    /// The store failed but the session goes on (it recovers by itself): reported as one
    /// [`Update::Failed`] per outage (whose receiver logs it), logged here at DEBUG only.
    pub async fn outage(&mut self, error: SourceError) -> Result<(), ReceiverGone> {
        if self.failing {
            tracing::debug!(store = %self.store, %error, "The store is still unavailable.");
            return Ok(());
        }
        tracing::debug!(store = %self.store, %error, "The store is unavailable; retrying.");
        self.failing = true;
        self.send(Update::Failed(error)).await
    }
}

/// Runs `session` over `keys` until `shutdown` is cancelled or the receiver is gone, reconnecting
/// with `backoff` (see the module header for the rules).
pub async fn supervise<S: Session + ?Sized>(
    session: &S,
    keys: &KeySet,
    updates: mpsc::Sender<Update>,
    mut backoff: Backoff,
    shutdown: CancellationToken,
) {
    let store = session.describe();
    let mut reporter = Reporter::new(&updates, &store);
    loop {
        reporter.established = false;
        let end = tokio::select! {
            () = shutdown.cancelled() => return,
            () = updates.closed() => return,
            end = session.run_once(keys, &mut reporter) => end,
        };
        if reporter.established {
            backoff.reset();
        }
        match end {
            SessionEnd::ReceiverGone => return,
            SessionEnd::Relist(reason) => {
                tracing::info!(store = %store, %reason, "Reading the store again from the start.");
                continue;
            }
            SessionEnd::Failed(error) if reporter.established && !reporter.failing => {
                // The store may well still be there: reconnect before calling it an outage.
                tracing::warn!(store = %store, %error, "The watch ended; reconnecting.");
            }
            SessionEnd::Failed(error) => {
                if reporter.outage(error).await.is_err() {
                    return;
                }
            }
        }
        let delay = backoff.next_delay();
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = updates.closed() => return,
            () = tokio::time::sleep(delay) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;
    use std::time::Duration;

    use tokio::time::Instant;

    use super::*;
    use crate::StoreContent;

    /// What one scripted session does.
    #[derive(Debug, Clone, Copy)]
    enum Step {
        /// Fails before establishing anything.
        Fail,
        /// Establishes, sends a snapshot, then fails.
        EstablishThenFail,
        /// Establishes, sends a snapshot, then streams nothing forever.
        Establish,
        /// Asks for a re-list.
        Relist,
    }

    /// A store whose sessions follow a script, recording when each began.
    struct Scripted {
        steps: Mutex<VecDeque<Step>>,
        starts: Mutex<Vec<Instant>>,
    }

    impl Scripted {
        fn new(steps: &[Step]) -> Self {
            Self { steps: Mutex::new(steps.iter().copied().collect()), starts: Mutex::default() }
        }

        /// The waits between consecutive session starts.
        fn waits(&self) -> Vec<Duration> {
            let starts = self.starts.lock().unwrap();
            starts.windows(2).map(|w| w[1] - w[0]).collect()
        }
    }

    impl Source for Scripted {
        fn describe(&self) -> String {
            "scripted".to_owned()
        }

        async fn load(&self, _keys: &KeySet) -> Result<StoreContent, SourceError> {
            Ok(StoreContent::default())
        }

        async fn run(&self, keys: KeySet, updates: mpsc::Sender<Update>, shutdown: CancellationToken) {
            supervise(self, &keys, updates, Backoff::default(), shutdown).await;
        }

        async fn put(
            &self,
            _key: &str,
            _value: Option<&str>,
            _expect: crate::Expect,
        ) -> Result<Option<crate::Revision>, SourceError> {
            Err(SourceError::Unsupported("scripted".to_owned()))
        }
    }

    impl Session for Scripted {
        async fn run_once(&self, _keys: &KeySet, reporter: &mut Reporter<'_>) -> SessionEnd {
            self.starts.lock().unwrap().push(Instant::now());
            let step = self.steps.lock().unwrap().pop_front();
            let failed =
                SessionEnd::Failed(SourceError::Unavailable { store: "scripted".into(), message: "down".into() });
            match step {
                Some(Step::Fail) => failed,
                Some(Step::Relist) => SessionEnd::Relist("history gone".to_owned()),
                Some(step @ (Step::Establish | Step::EstablishThenFail)) => {
                    reporter.established();
                    if let Err(gone) = reporter.send(Update::Snapshot(StoreContent::default())).await {
                        return gone.into();
                    }
                    match step {
                        Step::EstablishThenFail => failed,
                        _ => std::future::pending().await,
                    }
                }
                // Out of script: hang, as a healthy watch does.
                None => std::future::pending().await,
            }
        }
    }

    const MIN: Duration = Duration::from_millis(100);
    const MAX: Duration = Duration::from_millis(800);

    /// Runs `store` under `supervise` in a task.
    fn spawn(
        store: &std::sync::Arc<Scripted>,
    ) -> (mpsc::Receiver<Update>, CancellationToken, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(16);
        let stop = CancellationToken::new();
        let (store, token) = (std::sync::Arc::clone(store), stop.clone());
        let task =
            tokio::spawn(async move { supervise(&*store, &KeySet::oap(), tx, Backoff::new(MIN, MAX), token).await });
        (rx, stop, task)
    }

    /// Asserts `wait` is the back-off's wait for `ceiling`: within equal jitter, give or take the
    /// timer's millisecond.
    fn assert_wait(wait: Duration, ceiling: Duration) {
        let slack = Duration::from_millis(1);
        assert!(wait >= ceiling / 2 && wait <= ceiling + slack, "waited {wait:?} for a ceiling of {ceiling:?}");
    }

    fn kind(update: &Update) -> &'static str {
        match update {
            Update::Snapshot(_) => "snapshot",
            Update::Failed(_) => "failed",
            Update::Single { .. } | Update::Group { .. } => "change",
        }
    }

    async fn next(rx: &mut mpsc::Receiver<Update>) -> &'static str {
        kind(&rx.recv().await.expect("supervise is running"))
    }

    /// `end` (a shutdown, the receiver dropped) ends `task` at once: no time passes on the paused
    /// clock.
    async fn ended_at_once(task: tokio::task::JoinHandle<()>, end: impl FnOnce(), when: &str) {
        let before = Instant::now();
        end();
        task.await.unwrap();
        assert_eq!(before.elapsed(), Duration::ZERO, "{when}");
    }

    #[tokio::test(start_paused = true)]
    async fn an_outage_is_one_failure_and_the_waits_grow_within_the_backoff() {
        let store =
            std::sync::Arc::new(Scripted::new(&[Step::Fail, Step::Fail, Step::Fail, Step::Fail, Step::Establish]));
        let (mut rx, stop, task) = spawn(&store);
        assert_eq!(next(&mut rx).await, "failed");
        assert_eq!(next(&mut rx).await, "snapshot", "one failure for four failed attempts");
        let waits = store.waits();
        assert_eq!(waits.len(), 4);
        for (wait, ceiling) in waits.into_iter().zip([MIN, MIN * 2, MIN * 4, MAX]) {
            assert_wait(wait, ceiling);
        }
        stop.cancel();
        task.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn the_backoff_starts_over_after_a_snapshot_and_a_broken_watch_is_retried_before_it_is_an_outage() {
        use Step::*;
        let store = std::sync::Arc::new(Scripted::new(&[
            Fail,
            Fail,
            Fail,
            EstablishThenFail,
            Fail,
            EstablishThenFail,
            Establish,
        ]));
        let (mut rx, stop, task) = spawn(&store);
        let mut seen = Vec::new();
        for _ in 0..5 {
            seen.push(next(&mut rx).await);
        }
        assert_eq!(
            seen,
            ["failed", "snapshot", "failed", "snapshot", "snapshot"],
            "a broken watch is not an outage until reconnecting fails"
        );
        let waits = store.waits();
        assert_eq!(waits.len(), 6);
        for (wait, ceiling) in waits.into_iter().zip([MIN, MIN * 2, MIN * 4, MIN, MIN * 2, MIN]) {
            assert_wait(wait, ceiling);
        }
        stop.cancel();
        task.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_relist_starts_again_at_once_without_a_failure() {
        let store = std::sync::Arc::new(Scripted::new(&[Step::Relist, Step::Relist, Step::Establish]));
        let (mut rx, stop, task) = spawn(&store);
        assert_eq!(next(&mut rx).await, "snapshot");
        assert_eq!(store.waits(), [Duration::ZERO, Duration::ZERO]);
        stop.cancel();
        task.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn returns_at_once_on_shutdown_while_waiting_and_while_watching() {
        let store = std::sync::Arc::new(Scripted::new(&[Step::Fail]));
        let (mut rx, stop, task) = spawn(&store);
        assert_eq!(next(&mut rx).await, "failed");
        ended_at_once(task, || stop.cancel(), "no part of the wait is sat out").await;

        let store = std::sync::Arc::new(Scripted::new(&[Step::Establish]));
        let (mut rx, stop, task) = spawn(&store);
        assert_eq!(next(&mut rx).await, "snapshot");
        ended_at_once(task, || stop.cancel(), "while the session watches").await;
    }

    #[tokio::test(start_paused = true)]
    async fn returns_at_once_when_the_receiver_is_gone() {
        let store = std::sync::Arc::new(Scripted::new(&[Step::Fail]));
        let (mut rx, _stop, task) = spawn(&store);
        assert_eq!(next(&mut rx).await, "failed");
        ended_at_once(task, || drop(rx), "while waiting").await;

        let store = std::sync::Arc::new(Scripted::new(&[Step::Establish]));
        let (mut rx, _stop, task) = spawn(&store);
        assert_eq!(next(&mut rx).await, "snapshot");
        ended_at_once(task, || drop(rx), "while the session watches").await;
        assert_eq!(store.waits(), [], "and no new session is started");
    }
}
