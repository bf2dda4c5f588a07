//! [`SourceProbe`]: a source's `run` in a task, and the updates it sends pulled one at a time,
//! each within [`crate::PATIENCE`]. The probe also adds the updates up, as a server would: the
//! content they describe, and how many snapshots and failures there were.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use skyconf_sources::{KeySet, Source, StoreContent, Update};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::PATIENCE;

/// A running source, the updates it sent and what they add up to.
#[derive(Debug)]
pub struct SourceProbe {
    updates: mpsc::Receiver<Update>,
    content: StoreContent,
    snapshots: usize,
    failures: usize,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl SourceProbe {
    /// Runs `source` on `keys` in a task.
    pub fn spawn<S: Source>(source: S, keys: KeySet) -> Self {
        Self::spawn_shared(&Arc::new(source), keys)
    }

    /// Runs a source the test keeps using (to write through it, or ask it questions).
    pub fn spawn_shared<S: Source>(source: &Arc<S>, keys: KeySet) -> Self {
        // `RUST_LOG=skyconf_sources=debug` shows what the source does.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let (tx, updates) = mpsc::channel(64);
        let stop = CancellationToken::new();
        let (source, token) = (Arc::clone(source), stop.clone());
        let task = tokio::spawn(async move { source.run(keys, tx, token).await });
        Self { updates, content: StoreContent::default(), snapshots: 0, failures: 0, stop, task }
    }

    /// Runs `source` on `keys` and takes its first update, which must be a snapshot; it is in
    /// [`Self::content`].
    pub async fn started<S: Source>(source: S, keys: KeySet) -> Self {
        let mut probe = Self::spawn(source, keys);
        let first = probe.next().await;
        assert!(matches!(first, Update::Snapshot(_)), "the first update is a snapshot: {first:?}");
        probe
    }

    /// The next update, within [`PATIENCE`].
    pub async fn next(&mut self) -> Update {
        match tokio::time::timeout(PATIENCE, self.updates.recv()).await {
            Ok(Some(update)) => {
                self.apply(&update);
                update
            }
            Ok(None) => panic!("the source stopped"),
            Err(_) => panic!("no update within {PATIENCE:?}; content so far: {:?}", self.content),
        }
    }

    /// An update already sent, if any: for "nothing else was reported".
    pub fn try_next(&mut self) -> Option<Update> {
        let update = self.updates.try_recv().ok()?;
        self.apply(&update);
        Some(update)
    }

    /// The next update if one comes within `quiet`; `None` when the source stays quiet.
    pub async fn next_within(&mut self, quiet: Duration) -> Option<Update> {
        let update = match tokio::time::timeout(quiet, self.updates.recv()).await {
            Err(_) => return None,
            Ok(Some(update)) => update,
            Ok(None) => panic!("the source stopped"),
        };
        self.apply(&update);
        Some(update)
    }

    /// The next update, which must be a snapshot.
    pub async fn snapshot(&mut self) -> StoreContent {
        match self.next().await {
            Update::Snapshot(content) => content,
            other => panic!("expected a snapshot, got {other:?}"),
        }
    }

    /// The next update, which must be a single key.
    pub async fn single(&mut self) -> (String, Option<String>) {
        match self.next().await {
            Update::Single { key, value, .. } => (key, value),
            other => panic!("expected a single key, got {other:?}"),
        }
    }

    /// The next update, which must be a group key.
    pub async fn group(&mut self) -> (String, Option<BTreeMap<String, String>>) {
        match self.next().await {
            Update::Group { key, items } => (key, items),
            other => panic!("expected a group, got {other:?}"),
        }
    }

    /// Applies updates to `content` until `done` holds; a failure, or [`PATIENCE`] without it,
    /// fails the test.
    pub async fn follow(&mut self, content: &mut StoreContent, done: impl Fn(&StoreContent) -> bool) {
        while !done(content) {
            match self.next().await {
                Update::Snapshot(new) => *content = new,
                Update::Single { key, value, revision } => drop(content.set_single_at(&key, value, revision)),
                Update::Group { key, items } => drop(content.set_group(&key, items)),
                Update::Failed(error) => panic!("unexpected failure: {error}"),
            }
        }
    }

    /// Takes updates until what they add up to ([`Self::content`]) satisfies `done`; failures
    /// are counted, not fatal.
    pub async fn until(&mut self, what: &str, done: impl Fn(&StoreContent) -> bool) {
        let give_up = Instant::now() + PATIENCE;
        while !done(&self.content) {
            assert!(Instant::now() < give_up, "never saw {what}; content: {:?}", self.content);
            self.next().await;
        }
    }

    /// What the updates so far add up to.
    pub fn content(&self) -> &StoreContent {
        &self.content
    }

    /// How many snapshots the source sent.
    pub fn snapshots(&self) -> usize {
        self.snapshots
    }

    /// How many failures the source reported.
    pub fn failures(&self) -> usize {
        self.failures
    }

    /// Stops the source and waits (bounded) until its `run` returns.
    pub async fn stop(self) {
        self.stop.cancel();
        tokio::time::timeout(PATIENCE, self.task).await.expect("run returns").unwrap();
    }

    fn apply(&mut self, update: &Update) {
        match update {
            Update::Snapshot(content) => {
                self.snapshots += 1;
                self.content = content.clone();
            }
            Update::Single { key, value, revision } => drop(self.content.set_single_at(key, value.clone(), *revision)),
            Update::Group { key, items } => drop(self.content.set_group(key, items.clone())),
            Update::Failed(_) => self.failures += 1,
        }
    }
}
