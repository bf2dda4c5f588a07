//! Where skyconf reads configuration from. Each store is a cargo feature implementing [`Source`]:
//! it reports the raw values of the configuration keys it holds, watches them, and writes them
//! back for the admin API. The server decides what a value means (parsing, validation, keeping the
//! last good table); a source only reports, and never turns an outage into a delete.
//!
//! Keys are the OAP's dynamic-configuration keys, `<module>.<provider>.<item>`, mapped onto each
//! store exactly as the OAP maps them; agents' configuration lives under
//! [`AGENT_CONFIGURATIONS_KEY`].

#[cfg(feature = "dcs")]
pub mod dcs;
#[cfg(feature = "etcd")]
pub mod etcd;
#[cfg(feature = "file")]
pub mod file;
pub mod fs;
#[cfg(feature = "nacos")]
pub mod nacos;
pub mod registry;
pub mod shared;
pub mod supervise;
#[cfg(feature = "zookeeper")]
pub mod zookeeper;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

pub use registry::{NoneSettings, REGISTRY, StoreConfig, StoreEntry, WithStore, entry, with_store};
pub use shared::{Lifetime, Records, SharedRecords};
pub use skyconf_core::backoff::Backoff;
pub use skyconf_core::store::{AGENT_CONFIGURATIONS_KEY, OAP_GROUP_KEYS, OAP_SINGLE_KEYS, Revision, StoreContent};
pub use supervise::{ReceiverGone, Reporter, Session, SessionEnd, supervise};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Why a store could not be read or written. The last good configuration stays in service.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// Reading a file failed.
    #[error("cannot read {path}: {cause}")]
    Io {
        /// The file.
        path: String,
        /// The cause, in the message (so logs of the error alone keep it); not also its
        /// `source()`, which would print it twice in a chain.
        cause: std::io::Error,
    },
    /// Writing a file failed (permissions, a read-only file system, a full disk); nothing was
    /// written.
    #[error("cannot write {path}: {cause}")]
    Write {
        /// The file.
        path: String,
        /// The cause, in the message only (see [`SourceError::Io`]).
        cause: std::io::Error,
    },
    /// The value is larger than the configured limit.
    #[error("{what} is {size} bytes, more than the limit of {limit} bytes")]
    TooLarge {
        /// What was read.
        what: String,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// The value is not UTF-8 text.
    #[error("{what} is not UTF-8 text")]
    NotText {
        /// What was read.
        what: String,
    },
    /// Setting up a watch failed.
    #[error("cannot watch {what}: {message}")]
    Watch {
        /// What was to be watched.
        what: String,
        /// Why it failed.
        message: String,
    },
    /// The store cannot be reached or answered with an error.
    #[error("{store} is unavailable: {message}")]
    Unavailable {
        /// The store, as [`Source::describe`] names it.
        store: String,
        /// Why.
        message: String,
    },
    /// The store refused the request (authentication, permissions, bad settings).
    #[error("{store} refused the request: {message}")]
    Refused {
        /// The store.
        store: String,
        /// Why.
        message: String,
    },
    /// A write's compare-and-swap failed: the key changed in the store since this source last saw
    /// it (another writer, or an earlier write of ours that was not acknowledged but landed).
    /// Nothing was written; read the key again before writing.
    #[error("{store} changed under this write: {message}")]
    Conflict {
        /// The store.
        store: String,
        /// Which key, and what was expected of it.
        message: String,
    },
    /// The operation is not possible on this store.
    #[error("{0}")]
    Unsupported(String),
}

impl SourceError {
    /// Whether the store could not be reached or did not answer: an outage, which the consumer
    /// of [`Update::Failed`] reports once. Whoever else meets it on the same store (records,
    /// leases) says so at debug level, so one outage is one line.
    pub fn is_outage(&self) -> bool {
        matches!(self, Self::Unavailable { .. })
    }
}

/// What a source reports.
#[derive(Debug)]
pub enum Update {
    /// A single key's current raw value; `None` when the store holds no such key (a delete).
    Single {
        /// The dynamic-configuration key.
        key: String,
        /// Its raw text.
        value: Option<String>,
        /// The store's [`Revision`] of the value, where the store orders its changes.
        revision: Option<Revision>,
    },
    /// A group key's current sub-items; `None` when the group is absent.
    Group {
        /// The dynamic-configuration key.
        key: String,
        /// Sub-item name → raw value.
        items: Option<BTreeMap<String, String>>,
    },
    /// Everything the store holds for the watched keys; anything not in it is absent. Sent when a
    /// watch is (re-)established.
    Snapshot(StoreContent),
    /// The store could not be read or the watch broke; nothing changes. The source retries and
    /// sends a fresh [`Update::Snapshot`] once it is back.
    Failed(SourceError),
}

impl Update {
    /// A single key's value, for a store without revisions.
    pub fn single(key: impl Into<String>, value: Option<String>) -> Self {
        Self::Single { key: key.into(), value, revision: None }
    }
}

/// What a write expects of the key it replaces: the compare of its compare-and-swap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Expect {
    /// The key as this source last saw it (from a read, its watch, or its own last write), or as
    /// the store has it now when it was never seen. Every store can do this; it keeps a write
    /// from undoing a change this source has not seen yet.
    #[default]
    Seen,
    /// Absent (`None`) or at exactly this [`Revision`]: a write based on what a client saw,
    /// refused on every replica once the key moved on. Only for stores that report revisions
    /// ([`Source::revisions`]); others answer [`SourceError::Unsupported`].
    At(Option<Revision>),
}

/// The keys a store is asked about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySet {
    /// SINGLE keys.
    pub singles: Vec<String>,
    /// GROUP keys.
    pub groups: Vec<String>,
}

impl KeySet {
    /// The keys an OAP registers (§3.6 of the behaviour reference).
    pub fn oap() -> Self {
        Self {
            singles: OAP_SINGLE_KEYS.iter().map(|k| (*k).to_owned()).collect(),
            groups: OAP_GROUP_KEYS.iter().map(|k| (*k).to_owned()).collect(),
        }
    }

    /// The OAP's keys plus `extra` single keys.
    pub fn oap_with(extra: impl IntoIterator<Item = String>) -> Self {
        let mut keys = Self::oap();
        for key in extra {
            if !keys.singles.contains(&key) {
                keys.singles.push(key);
            }
        }
        keys
    }
}

/// A configuration store skyconf can watch.
///
/// Contract, which the conformance suite (`skyconf_testkit::conformance`) checks for every store
/// against its real server:
/// - [`Source::load`] reads the watched keys once; it fails rather than returning a partial view.
/// - [`Source::run`] establishes its watch *first*, then sends an [`Update::Snapshot`] (so no
///   change between the two is lost), then one update per change, promptly (no polling where the
///   store can push). On an outage it sends one [`Update::Failed`], reconnects after the waits of
///   a [`Backoff`] (exponential, equal jitter), and sends a fresh snapshot when back. It returns
///   when `shutdown` is cancelled or the receiver is gone. Every store gets this by implementing
///   a [`Session`] and handing it to [`supervise()`].
/// - [`Source::put`] writes one single key (`None` deletes it), as the OAP's layout for the store
///   requires; the change then arrives through `run` like any other. Where the store can, the
///   write is a compare-and-swap ([`Expect`]), failing with [`SourceError::Conflict`] when the
///   key changed since; it answers the [`Revision`] it wrote at, where the store has revisions.
/// - [`Source::revisions`] says whether updates carry the store's [`Revision`]s (etcd,
///   ZooKeeper), on which writes can then be conditioned ([`Expect::At`]).
pub trait Source: Send + Sync + 'static {
    /// Names the store for logs and status: kind, address, namespace.
    fn describe(&self) -> String;

    /// Reads the watched keys once.
    fn load(&self, keys: &KeySet) -> impl Future<Output = Result<StoreContent, SourceError>> + Send;

    /// Watches the keys until `shutdown`.
    fn run(
        &self,
        keys: KeySet,
        updates: mpsc::Sender<Update>,
        shutdown: CancellationToken,
    ) -> impl Future<Output = ()> + Send;

    /// Writes (or with `None`, deletes) one single key, if it is as `expect`ed; the revision of
    /// the write, where the store has revisions (`None` for a delete).
    fn put(
        &self,
        key: &str,
        value: Option<&str>,
        expect: Expect,
    ) -> impl Future<Output = Result<Option<Revision>, SourceError>> + Send;

    /// Whether the store orders its changes with [`Revision`]s that updates carry.
    fn revisions(&self) -> bool {
        false
    }

    /// How this process reaches the store: a connection to a store server, unless it says
    /// otherwise.
    fn reach(&self) -> Reach {
        Reach::Connection
    }

    /// skyconf's own records in this store (see [`shared`]), shared by every replica watching it;
    /// `None` for a store that serves a single replica (the file store) or holds nothing.
    fn shared_records(&self) -> Option<Arc<dyn SharedRecords>> {
        None
    }
}

/// How this process reaches a store, which says what "up" means for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reach {
    /// A session to a store server (etcd, ZooKeeper, Nacos, an OAP's DCS): up while connected.
    Connection,
    /// A file or directory read and watched here: no connection, up while it can be read.
    Files,
    /// Nothing to reach (the `none` store).
    Nothing,
}

/// A future boxed for a trait object.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A store operation's boxed future: its value, or the store's error.
pub type StoreFuture<'a, T> = BoxFuture<'a, Result<T, SourceError>>;

/// A [`Source`] as a trait object, for code that picks the store at run time (the CLI, the admin
/// API's writer). Every `Source` is one; a `Box<dyn DynSource>` is a `Source` again, so generic
/// code such as the server's `start_with` takes it unchanged. The methods carry a `_boxed` suffix
/// so they never shadow [`Source`]'s.
pub trait DynSource: Send + Sync + 'static {
    /// [`Source::describe`].
    fn describe_boxed(&self) -> String;
    /// [`Source::load`], boxed.
    fn load_boxed<'a>(&'a self, keys: &'a KeySet) -> StoreFuture<'a, StoreContent>;
    /// [`Source::run`], boxed.
    fn run_boxed(&self, keys: KeySet, updates: mpsc::Sender<Update>, shutdown: CancellationToken) -> BoxFuture<'_, ()>;
    /// [`Source::put`], boxed.
    fn put_boxed<'a>(
        &'a self,
        key: &'a str,
        value: Option<&'a str>,
        expect: Expect,
    ) -> StoreFuture<'a, Option<Revision>>;
    /// [`Source::revisions`].
    fn revisions_boxed(&self) -> bool;
    /// [`Source::reach`].
    fn reach_boxed(&self) -> Reach;
    /// [`Source::shared_records`].
    fn shared_records_boxed(&self) -> Option<Arc<dyn SharedRecords>>;
}

impl<S: Source> DynSource for S {
    fn describe_boxed(&self) -> String {
        self.describe()
    }

    fn load_boxed<'a>(&'a self, keys: &'a KeySet) -> StoreFuture<'a, StoreContent> {
        Box::pin(self.load(keys))
    }

    fn run_boxed(&self, keys: KeySet, updates: mpsc::Sender<Update>, shutdown: CancellationToken) -> BoxFuture<'_, ()> {
        Box::pin(self.run(keys, updates, shutdown))
    }

    fn put_boxed<'a>(
        &'a self,
        key: &'a str,
        value: Option<&'a str>,
        expect: Expect,
    ) -> StoreFuture<'a, Option<Revision>> {
        Box::pin(self.put(key, value, expect))
    }

    fn revisions_boxed(&self) -> bool {
        self.revisions()
    }

    fn reach_boxed(&self) -> Reach {
        self.reach()
    }

    fn shared_records_boxed(&self) -> Option<Arc<dyn SharedRecords>> {
        self.shared_records()
    }
}

impl Source for Box<dyn DynSource> {
    fn describe(&self) -> String {
        (**self).describe_boxed()
    }

    async fn load(&self, keys: &KeySet) -> Result<StoreContent, SourceError> {
        (**self).load_boxed(keys).await
    }

    async fn run(&self, keys: KeySet, updates: mpsc::Sender<Update>, shutdown: CancellationToken) {
        (**self).run_boxed(keys, updates, shutdown).await;
    }

    async fn put(&self, key: &str, value: Option<&str>, expect: Expect) -> Result<Option<Revision>, SourceError> {
        (**self).put_boxed(key, value, expect).await
    }

    fn revisions(&self) -> bool {
        (**self).revisions_boxed()
    }

    fn reach(&self) -> Reach {
        (**self).reach_boxed()
    }

    fn shared_records(&self) -> Option<Arc<dyn SharedRecords>> {
        (**self).shared_records_boxed()
    }
}

/// Refuses [`Expect::At`] for a store without revisions: such a write cannot be conditioned on
/// what a client saw, only on what the source saw.
#[cfg_attr(not(any(feature = "file", feature = "nacos")), allow(dead_code))]
pub(crate) fn only_seen(store: &str, expect: Expect) -> Result<(), SourceError> {
    match expect {
        Expect::Seen => Ok(()),
        Expect::At(_) => Err(SourceError::Unsupported(format!("{store} has no revisions to condition a write on"))),
    }
}

/// Settings a store cannot work with: the one error every store's settings fail with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {store} settings: {message}")]
pub struct SettingsError {
    /// The store, by its selector (`etcd`, `zookeeper`, ...).
    pub store: &'static str,
    /// What is wrong, naming the setting as the OAP names it.
    pub message: String,
}

impl SettingsError {
    /// `message` about `store`'s settings.
    pub fn new(store: &'static str, message: impl Into<String>) -> Self {
        Self { store, message: message.into() }
    }
}

/// The updates that turn `before` into `now`, one per key that differs (for stores that re-read
/// rather than being told what changed).
#[cfg_attr(not(any(feature = "file", feature = "nacos")), allow(dead_code))]
pub(crate) fn changes(before: &StoreContent, now: &StoreContent) -> Vec<Update> {
    let mut updates = Vec::new();
    let singles: BTreeSet<&String> = before.singles.keys().chain(now.singles.keys()).collect();
    for key in singles {
        if before.singles.get(key) != now.singles.get(key) {
            updates.push(Update::Single {
                key: key.clone(),
                value: now.singles.get(key).cloned(),
                revision: now.revision(key),
            });
        }
    }
    let groups: BTreeSet<&String> = before.groups.keys().chain(now.groups.keys()).collect();
    for key in groups {
        if before.groups.get(key) != now.groups.get(key) {
            updates.push(Update::Group { key: key.clone(), items: now.groups.get(key).cloned() });
        }
    }
    updates
}

/// The OAP's `none` selector: a store that holds nothing, so every agent gets the EMPTY answer.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoStore;

impl Source for NoStore {
    fn describe(&self) -> String {
        "none".to_owned()
    }

    async fn load(&self, _keys: &KeySet) -> Result<StoreContent, SourceError> {
        Ok(StoreContent::default())
    }

    async fn run(&self, _keys: KeySet, _updates: mpsc::Sender<Update>, shutdown: CancellationToken) {
        shutdown.cancelled().await;
    }

    async fn put(&self, _key: &str, _value: Option<&str>, _expect: Expect) -> Result<Option<Revision>, SourceError> {
        Err(SourceError::Unsupported("the `none` store holds nothing and cannot be written".into()))
    }

    fn reach(&self) -> Reach {
        Reach::Nothing
    }
}

/// Settings every source shares.
#[derive(Debug, Clone)]
pub struct Limits {
    /// The largest value accepted, in bytes.
    pub max_value_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self { max_value_bytes: 32 * 1024 * 1024 }
    }
}

/// How long a burst of change notifications must stay quiet before a source reads again.
pub const DEFAULT_SETTLE: Duration = Duration::from_millis(15);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oap_keys_include_the_agent_configurations() {
        let keys = KeySet::oap_with(["x.y.z".to_owned(), AGENT_CONFIGURATIONS_KEY.to_owned()]);
        assert_eq!(keys.singles.iter().filter(|k| *k == AGENT_CONFIGURATIONS_KEY).count(), 1);
        assert!(keys.singles.contains(&"x.y.z".to_owned()));
        assert_eq!(keys.groups, ["core.default.endpoint-name-grouping-openapi"]);
    }

    #[test]
    fn changes_name_what_differs() {
        let mut before = StoreContent::default();
        before.singles.insert("a".into(), "1".into());
        before.groups.insert("g".into(), BTreeMap::from([("x".into(), "1".into())]));
        let mut now = StoreContent::default();
        now.singles.insert("b".into(), "2".into());
        now.groups.insert("g".into(), BTreeMap::new());
        let updates = changes(&before, &now);
        assert_eq!(updates.len(), 3, "{updates:?}");
        assert!(matches!(&updates[0], Update::Single { key, value: None, .. } if key == "a"));
        assert!(matches!(&updates[1], Update::Single { key, value: Some(v), .. } if key == "b" && v == "2"));
        assert!(matches!(&updates[2], Update::Group { key, items: Some(i) } if key == "g" && i.is_empty()));
        assert!(changes(&now, &now).is_empty());
    }
}
