//! The [`Source`] contract (see `skyconf_sources::Source`), checked once for every store: a
//! [`StoreBackend`] writes to a real store behind the source's back, and [`run_all`] checks what
//! the source reports:
//!
//! 1. the first update of `run` is a snapshot holding what was written before;
//! 2. a change to a single key arrives, alone, without another snapshot;
//! 3. group items arrive as they are added, changed and removed;
//! 4. a deleted key is absent;
//! 5. an outage is exactly one [`Update::Failed`], then a fresh snapshot once the store is back,
//!    then changes again.
//!
//! Steps a store cannot take (see [`Capabilities`]) are skipped for it, saying so. Modelled on
//! the agent's scenarios, which run the same poll-loop checks against skyconf and the OAP.

mod etcd;
mod file;
mod nacos;
mod zookeeper;

use std::time::Duration;

use skyconf_sources::{AGENT_CONFIGURATIONS_KEY, KeySet, Source, Update};

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
    /// A restart may bring the store up more than once (a harness that retries a broken start),
    /// so the source may report one failure per attempt, each followed by a snapshot.
    pub flapping_restart: bool,
}

impl Default for Capabilities {
    fn default() -> Self {
        Self { groups: true, outages: true, durable: true, flapping_restart: false }
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
    let mut probe = SourceProbe::spawn(backend.source(), backend.keys());
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
    assert_eq!((probe.snapshots(), probe.failures()), (1, 0), "{name}: no snapshot or failure before the outage");

    // 5. An outage: one failure, a fresh snapshot once back, then changes again.
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

fn single<'a>(content: &'a skyconf_sources::StoreContent, key: &str) -> Option<&'a str> {
    content.singles.get(key).map(String::as_str)
}

fn item<'a>(content: &'a skyconf_sources::StoreContent, item: &str) -> Option<&'a str> {
    content.groups.get(GROUP_KEY)?.get(item).map(String::as_str)
}
