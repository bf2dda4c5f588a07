//! The [`Source`] contract (see `skyconf_sources::Source`), checked once for every store: a
//! [`StoreBackend`] writes to a real store behind the source's back, and [`run_all`] checks what
//! the source reports:
//!
//! 1. the first update of `run` is a snapshot holding what was written before;
//! 2. a change to a single key arrives, alone, without another snapshot;
//! 3. group items arrive as they are added, changed and removed;
//! 4. a deleted key is absent;
//! 5. writes through [`Source::put`]: in a row, each expecting the last, and after a change the
//!    watch saw; where the store can compare and swap, a write based on what another client has
//!    changed since is a [`SourceError::Conflict`] that writes nothing; where it has revisions,
//!    [`Expect::At`] conditions a write on one (and elsewhere is [`SourceError::Unsupported`]);
//! 6. an outage is exactly one [`Update::Failed`], then a fresh snapshot once the store is back,
//!    then changes again.
//!
//! Steps a store cannot take (see [`Capabilities`]) are skipped for it, saying so. Modelled on
//! the agent's scenarios, which run the same poll-loop checks against skyconf and the OAP.

mod etcd;
mod file;
mod nacos;
mod zookeeper;

use std::sync::Arc;
use std::time::Duration;

use skyconf_sources::{AGENT_CONFIGURATIONS_KEY, Expect, KeySet, Source, SourceError, Update};

pub use etcd::EtcdBackend;
pub use file::FileBackend;
pub use nacos::NacosBackend;
pub use zookeeper::ZookeeperBackend;

use crate::probe::SourceProbe;

/// The single keys the suite writes (both watched by an OAP).
pub const SINGLE_KEYS: [&str; 2] = [AGENT_CONFIGURATIONS_KEY, "alarm.default.alarm-settings"];
/// The group key the suite writes (registered by an OAP).
pub const GROUP_KEY: &str = crate::fixtures::OPENAPI_GROUP;

/// What a store can do, so the suite skips the steps it cannot.
#[derive(Debug, Clone, Copy)]
pub struct Capabilities {
    /// It has group keys.
    pub groups: bool,
    /// It can be stopped and restarted.
    pub outages: bool,
    /// It holds its data across a restart; when not, the suite writes again after it.
    pub durable: bool,
    /// Its writes are compare-and-swaps ([`Expect::Seen`] refuses a key another client changed).
    pub compare_and_swap: bool,
    /// A restart may bring the store up more than once (a harness that retries a broken start),
    /// so the source may report one failure per attempt, each followed by a snapshot.
    pub flapping_restart: bool,
}

impl Default for Capabilities {
    fn default() -> Self {
        Self { groups: true, outages: true, durable: true, compare_and_swap: true, flapping_restart: false }
    }
}

/// A real store the suite can write to directly (not through the source under test), stop and
/// restart.
// Test code on a current-thread runtime: the futures need not be `Send`.
#[allow(async_fn_in_trait)]
pub trait StoreBackend {
    /// The source under test.
    type Source: Source;

    /// Names the store in messages.
    fn name(&self) -> &str;

    /// What the store can do.
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }

    /// A new source on the store, with short retry delays.
    fn source(&self) -> Self::Source;

    /// The keys the source watches.
    fn keys(&self) -> KeySet {
        KeySet::oap()
    }

    /// Writes a single key.
    async fn put(&mut self, key: &str, value: &str);

    /// Deletes a single key.
    async fn delete(&mut self, key: &str);

    /// Writes one item of a group key.
    async fn put_item(&mut self, group: &str, item: &str, value: &str);

    /// Removes one item of a group key.
    async fn delete_item(&mut self, group: &str, item: &str);

    /// Makes the store unreachable (a crash, not a shutdown).
    async fn stop(&mut self);

    /// Brings the store back on the same address.
    async fn restart(&mut self);
}

/// Runs every step against `backend`'s store.
pub async fn run_all<B: StoreBackend>(backend: &mut B) {
    let name = backend.name().to_owned();
    let can = backend.capabilities();
    let [agent, other] = SINGLE_KEYS;

    // 1. Snapshot after the watch: what was written before is in the first update.
    backend.put(agent, "v1").await;
    let source = Arc::new(backend.source());
    let mut probe = SourceProbe::spawn_shared(&source, backend.keys());
    let first = probe.snapshot().await;
    assert_eq!(first.singles.get(agent).map(String::as_str), Some("v1"), "{name}: the first snapshot: {first:?}");

    // 2. Single keys: each change arrives as it happens, without a new snapshot.
    backend.put(agent, "v2").await;
    probe.until(&format!("{name}: a changed single key"), |c| single(c, agent) == Some("v2")).await;
    backend.put(other, "rules: {}").await;
    probe.until(&format!("{name}: a new single key"), |c| single(c, other) == Some("rules: {}")).await;
    assert_eq!((probe.snapshots(), probe.failures()), (1, 0), "{name}: changes are updates, not snapshots");

    // 3. Group keys: items added, changed and removed.
    if can.groups {
        backend.put_item(GROUP_KEY, "a.yaml", "1").await;
        probe.until(&format!("{name}: a group item"), |c| item(c, "a.yaml") == Some("1")).await;
        backend.put_item(GROUP_KEY, "b.yaml", "2").await;
        backend.put_item(GROUP_KEY, "a.yaml", "11").await;
        probe
            .until(&format!("{name}: a second and a changed item"), |c| {
                item(c, "a.yaml") == Some("11") && item(c, "b.yaml") == Some("2")
            })
            .await;
        backend.delete_item(GROUP_KEY, "a.yaml").await;
        probe
            .until(&format!("{name}: a removed item"), |c| {
                item(c, "a.yaml").is_none() && item(c, "b.yaml") == Some("2")
            })
            .await;
    } else {
        eprintln!("{name}: no group keys; skipping the group step");
    }

    // 4. Delete: the key is absent.
    backend.delete(other).await;
    probe.until(&format!("{name}: a deleted key"), |c| single(c, other).is_none()).await;
    assert_eq!((probe.snapshots(), probe.failures()), (1, 0), "{name}: no snapshot or failure after a delete");

    // 5. Writes through the source.
    writes(backend, &source, &mut probe).await;
    assert_eq!((probe.snapshots(), probe.failures()), (1, 0), "{name}: no snapshot or failure before the outage");

    // 6. An outage: one failure, a fresh snapshot once back, then changes again.
    if !can.outages {
        eprintln!("{name}: cannot be stopped; skipping the outage step");
        probe.stop().await;
        return;
    }
    backend.stop().await;
    let failed = probe.next().await;
    assert!(matches!(failed, Update::Failed(_)), "{name}: an outage is a failure first: {failed:?}");
    let quiet = probe.next_within(Duration::from_secs(1)).await;
    assert!(quiet.is_none(), "{name}: one failure per outage, not one per retry: {quiet:?}");

    backend.restart().await;
    // A store that lost its data is written again, with a value the source has not seen yet.
    let expected = if can.durable { "v2" } else { "v2 again" };
    if !can.durable {
        backend.put(agent, expected).await;
    }
    if can.flapping_restart {
        let give_up = std::time::Instant::now() + crate::PATIENCE;
        while probe.snapshots() <= probe.failures() || single(probe.content(), agent) != Some(expected) {
            assert!(std::time::Instant::now() < give_up, "{name}: never recovered: {:?}", probe.content());
            probe.next().await;
        }
        assert_eq!(probe.snapshots(), probe.failures() + 1, "{name}: a fresh snapshot after each outage");
    } else {
        match probe.next().await {
            Update::Snapshot(_) => {}
            Update::Failed(error) => panic!("{name}: a second failure in one outage: {error}"),
            other => panic!("{name}: expected the recovery snapshot, got {other:?}"),
        }
        probe.until(&format!("{name}: the value after the restart"), |c| single(c, agent) == Some(expected)).await;
        assert_eq!((probe.snapshots(), probe.failures()), (2, 1), "{name}: one failure, one fresh snapshot");
    }
    backend.put(agent, "v3").await;
    probe.until(&format!("{name}: a change after the outage"), |c| single(c, agent) == Some("v3")).await;
    probe.stop().await;
}

/// Step 5: [`Source::put`] on `source`, which `probe` watches, on a key that is absent.
async fn writes<B: StoreBackend>(backend: &mut B, source: &B::Source, probe: &mut SourceProbe) {
    let name = backend.name().to_owned();
    let can = backend.capabilities();
    let key = SINGLE_KEYS[1];
    let has = |value: &'static str| move |c: &skyconf_sources::StoreContent| single(c, key) == Some(value);

    // In a row, each expecting the one before it before the watch reports it: a creation,
    // changes, a delete, a delete of what is absent, a new creation.
    for value in ["a", "b", "c"] {
        source.put(key, Some(value), Expect::Seen).await.unwrap_or_else(|e| panic!("{name}: put {value}: {e}"));
    }
    for _ in 0..2 {
        source.put(key, None, Expect::Seen).await.unwrap_or_else(|e| panic!("{name}: a delete in a row: {e}"));
    }
    source.put(key, Some("d"), Expect::Seen).await.unwrap_or_else(|e| panic!("{name}: a new creation: {e}"));
    probe.until(&format!("{name}: writes in a row"), has("d")).await;

    // A change by another client, once the watch reported it, is what the next write expects;
    // so is a delete.
    backend.put(key, "external").await;
    probe.until(&format!("{name}: an external change"), has("external")).await;
    source.put(key, Some("after"), Expect::Seen).await.unwrap_or_else(|e| panic!("{name}: after a change: {e}"));
    probe.until(&format!("{name}: a write after an external change"), has("after")).await;
    backend.delete(key).await;
    probe.until(&format!("{name}: an external delete"), |c| single(c, key).is_none()).await;
    source.put(key, Some("again"), Expect::Seen).await.unwrap_or_else(|e| panic!("{name}: after a delete: {e}"));
    probe.until(&format!("{name}: a write after an external delete"), has("again")).await;

    // A write based on what another client has changed since: refused, nothing written. A second
    // source, not watching, knows the key only from its own write.
    if can.compare_and_swap {
        let stale = backend.source();
        stale.put(key, Some("mine"), Expect::Seen).await.unwrap_or_else(|e| panic!("{name}: put mine: {e}"));
        probe.until(&format!("{name}: the second source's write"), has("mine")).await;
        backend.put(key, "theirs").await;
        probe.until(&format!("{name}: another change"), has("theirs")).await;
        let error = stale.put(key, Some("stale"), Expect::Seen).await.unwrap_err();
        assert!(matches!(error, SourceError::Conflict { .. }), "{name}: a stale write conflicts: {error}");
        let error = stale.put(key, None, Expect::Seen).await.unwrap_err();
        assert!(matches!(error, SourceError::Conflict { .. }), "{name}: a stale delete conflicts: {error}");
        // Nothing was written: the next change is the one the suite makes, and the value before
        // it was still `theirs`.
        backend.put(key, "marker").await;
        probe.until(&format!("{name}: the change after the refused writes"), has("marker")).await;
    } else {
        eprintln!("{name}: no compare-and-swap; skipping the conflict step");
    }

    // Revisions: a write conditioned on one succeeds while the key is there, at it.
    let current = single(probe.content(), key).map(str::to_owned);
    if source.revisions() {
        let first = source.put(key, Some("r1"), Expect::Seen).await.unwrap_or_else(|e| panic!("{name}: r1: {e}"));
        assert!(first.is_some(), "{name}: a store with revisions answers the revision it wrote at");
        let second = source.put(key, Some("r2"), Expect::At(first)).await;
        assert!(second.as_ref().is_ok_and(Option::is_some), "{name}: a write at the current revision: {second:?}");
        let error = source.put(key, Some("r3"), Expect::At(first)).await.unwrap_err();
        assert!(matches!(error, SourceError::Conflict { .. }), "{name}: a write at an old revision: {error}");
        let error = source.put(key, Some("r3"), Expect::At(None)).await.unwrap_err();
        assert!(matches!(error, SourceError::Conflict { .. }), "{name}: a creation of a present key: {error}");
        probe.until(&format!("{name}: the write at a revision"), has("r2")).await;
    } else {
        let error = source.put(key, Some("r1"), Expect::At(None)).await.unwrap_err();
        assert!(matches!(error, SourceError::Unsupported(_)), "{name}: no revisions to write at: {error}");
        assert_eq!(single(probe.content(), key), current.as_deref(), "{name}: nothing written");
    }

    source.put(key, None, Expect::Seen).await.unwrap_or_else(|e| panic!("{name}: the last delete: {e}"));
    probe.until(&format!("{name}: the key deleted through the source"), |c| single(c, key).is_none()).await;
}

fn single<'a>(content: &'a skyconf_sources::StoreContent, key: &str) -> Option<&'a str> {
    content.singles.get(key).map(String::as_str)
}

fn item<'a>(content: &'a skyconf_sources::StoreContent, item: &str) -> Option<&'a str> {
    content.groups.get(GROUP_KEY)?.get(item).map(String::as_str)
}
