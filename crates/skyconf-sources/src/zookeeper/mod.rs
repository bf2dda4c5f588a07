//! The ZooKeeper store: every child znode of a namespace is a key, laid out as the OAP's
//! `configuration.zookeeper` provider reads it: the znode's data is a single value, its children
//! are a group's items (the `layout` module has the exact rules).
//!
//! Where the OAP polls every `period` seconds, this source watches: one persistent recursive watch
//! on the namespace (ZooKeeper 3.6 or newer) reports every create, delete and data change below
//! it, and the key it concerns is re-read at once. The watch is added before the namespace is read,
//! so no change can fall between the snapshot and the first event.
//!
//! Outages: the client keeps its session across a lost connection and re-registers the watch by
//! itself, but ZooKeeper does not replay the events missed meanwhile, so a disconnect is reported
//! as one [`Update::Failed`] and the reconnect is followed by a fresh [`Update::Snapshot`]. When the
//! session itself ends (expiry, authentication), a new one is opened after a backoff with jitter
//! (`baseSleepTimeMs`, doubling `maxRetries` times at most) and the cycle starts over.
//!
//! Writes ([`Source::put`]) are compare-and-swaps against the key's znode as this source last saw
//! it (from a read, a watch event's re-read, or its own last write): `setData` or `delete` with the
//! znode's data version as the expected version, `create` when it was absent. When the znode
//! changed in between, nothing is written and `put` fails with [`SourceError::Conflict`]. A source
//! that has not read its namespace yet looks the znode up first. ZooKeeper compares versions only,
//! so a znode deleted and re-created by someone else up to the same version is not told apart.
//!
//! skyconf's own records ([`Source::shared_records`]) live under `{namespace}/skyconf`, which is
//! not a key; session records are ephemeral znodes of a session of their own (the `records`
//! module).

mod connect;
mod layout;
mod records;
mod settings;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, OnceLock, PoisonError};
use std::time::Duration;

use futures_util::FutureExt as _;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

use self::connect::{Connect, Failure, SessionSlot};
use self::layout::{KeyState, Namespace};
use self::records::ZkRecords;
pub use self::settings::ZookeeperSettings;
use crate::{
    Backoff, Expect, KeySet, Reporter, Revision, Session, SessionEnd, SettingsError, Source, SourceError, StoreContent,
    Update, supervise,
};

/// The session timeout asked for (the server may grant less): long enough to ride out a leader
/// election or a server restart without losing the session.
const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(30);

/// How long one request, or opening a session, may take.
const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest value written: ZooKeeper's default packet limit (`jute.maxbuffer`) is just under
/// 1 MiB and a server drops the connection of a client that sends more.
const MAX_VALUE_BYTES: u64 = 1024 * 1024 - 4096;

/// At most this many queued watch events are handled as one batch (one read per key touched).
const MAX_BATCH: usize = 4096;

/// A ZooKeeper namespace, watched.
#[derive(Debug, Clone)]
pub struct ZookeeperSource {
    settings: ZookeeperSettings,
    /// The connect string and the session's timeouts.
    how: Connect,
    namespace: Namespace,
    backoff: Backoff,
    /// One session shared by `load`, `run` and `put`; replaced when it ends.
    client: Arc<SessionSlot>,
    /// Each key's znode as last seen, shared by the copies of the source: what `put` compares
    /// against.
    seen: Arc<std::sync::Mutex<Seen>>,
    /// skyconf's own records, made on first use with the session settings of that time, and shared
    /// by the copies of the source.
    records: Arc<OnceLock<Arc<ZkRecords>>>,
}

/// Each key's znode as the source last saw it.
#[derive(Debug, Default)]
struct Seen {
    /// Whether the namespace was read whole at least once: a key without an entry is absent.
    read: bool,
    /// Key → its znode's (mzxid, data version), `None` when there is no znode.
    keys: HashMap<String, Option<(i64, i32)>>,
}

impl Seen {
    /// `key`'s znode is now `stat` (`None`: absent). A present state older than the one known (a
    /// re-read that raced an own write) is ignored.
    fn learn(&mut self, key: &str, stat: Option<&zk::Stat>) {
        let now = stat.map(|s| (s.mzxid, s.version));
        if let (Some(Some((known, _))), Some((mzxid, _))) = (self.keys.get(key), now)
            && *known > mzxid
        {
            return;
        }
        self.keys.insert(key.to_owned(), now);
    }

    /// What a write of `key` expects: `Some(None)` absent, `Some(Some(version))`; `None` when
    /// the source has not seen it.
    fn expected(&self, key: &str) -> Option<Option<i32>> {
        match self.keys.get(key) {
            Some(state) => Some(state.map(|(_, version)| version)),
            None if self.read => Some(None),
            None => None,
        }
    }
}

impl ZookeeperSource {
    /// A source for `settings`, or why they cannot work. Connects lazily.
    pub fn new(settings: ZookeeperSettings) -> Result<Self, SettingsError> {
        let connect = settings.connect_string()?;
        let namespace = Namespace::new(settings.namespace_prefix()?);
        Ok(Self {
            backoff: settings.backoff(),
            settings,
            how: Connect {
                connect,
                session_timeout: DEFAULT_SESSION_TIMEOUT,
                request_timeout: DEFAULT_REQUEST_TIMEOUT,
            },
            namespace,
            client: Arc::default(),
            seen: Arc::default(),
            records: Arc::default(),
        })
    }

    /// Sets the session timeout asked of the server (it grants a value within its own bounds).
    pub fn with_session_timeout(mut self, timeout: Duration) -> Self {
        self.how.session_timeout = timeout;
        self
    }

    /// Sets how long one request, or opening a session, may take.
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.how.request_timeout = timeout;
        self
    }

    /// Sets the back-off between sessions (by default `baseSleepTimeMs` doubling `maxRetries`
    /// times).
    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// The settings.
    pub fn settings(&self) -> &ZookeeperSettings {
        &self.settings
    }

    /// The znode holding `key`.
    pub fn znode_of(&self, key: &str) -> String {
        self.namespace.key_path(key)
    }

    fn unavailable(&self, message: impl Into<String>) -> SourceError {
        SourceError::Unavailable { store: self.describe(), message: message.into() }
    }

    fn error(&self, failure: Failure) -> SourceError {
        failure.into_error(self.describe())
    }

    /// What the source last saw of each key's znode; never held across an await.
    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs one request (or several) within the request timeout.
    async fn timed<T>(&self, request: impl Future<Output = Result<T, zk::Error>>) -> Result<T, Failure> {
        connect::timed(self.how.request_timeout, request).await
    }

    /// The shared session, opened if there is none or it has ended.
    async fn client(&self) -> Result<zk::Client, SourceError> {
        self.client.client(&self.how, &self.describe(), "the configuration").await.map_err(|f| self.error(f))
    }

    /// Drops the shared session if it is `client`'s, so the next caller opens a new one.
    async fn forget(&self, client: &zk::Client) {
        self.client.forget(client).await;
    }

    /// Reads one key's znode: data and children in one round trip, then the items' data.
    async fn read_key(&self, client: &zk::Client, key: &str, groups: &BTreeSet<String>) -> Result<KeyState, zk::Error> {
        let path = self.namespace.key_path(key);
        // Both requests are sent before either answer is awaited.
        let data = client.get_data(&path);
        let children = client.get_children(&path);
        let (data, children, mzxid) = match (data.await, children.await) {
            // Deleted meanwhile: absent (the delete's own event follows).
            (Err(zk::Error::NoNode), _) | (_, Err(zk::Error::NoNode)) => {
                self.seen().learn(key, None);
                return Ok(KeyState::default());
            }
            (Err(e), _) | (_, Err(e)) => return Err(e),
            (Ok((data, stat)), Ok((children, _))) => {
                self.seen().learn(key, Some(&stat));
                (data, children, stat.mzxid)
            }
        };
        let reads: Vec<_> = children
            .into_iter()
            .map(|item| {
                let item_path = format!("{path}/{item}");
                let read = client.get_data(&item_path);
                (item, item_path, read)
            })
            .collect();
        let mut items = BTreeMap::new();
        for (item, item_path, read) in reads {
            match read.await {
                Ok((value, _)) => {
                    items.insert(item, layout::text(&item_path, value));
                }
                Err(zk::Error::NoNode) => {}
                Err(e) => return Err(e),
            }
        }
        let data = (!data.is_empty()).then(|| layout::text(&path, data));
        Ok(KeyState::of(data, items, groups.contains(key), mzxid))
    }

    /// Reads every key under the namespace.
    async fn read_all(&self, client: &zk::Client, groups: &BTreeSet<String>) -> Result<StoreContent, zk::Error> {
        let mut content = StoreContent::default();
        let keys = match client.get_children(self.namespace.path()).await {
            Ok((children, _)) => children,
            Err(zk::Error::NoNode) => {
                *self.seen() = Seen { read: true, keys: HashMap::new() };
                return Ok(content);
            }
            Err(e) => return Err(e),
        };
        let keys: Vec<String> = keys.into_iter().filter(|k| self.namespace.is_key(k)).collect();
        {
            // Keys not listed are absent; the listed ones are recorded as they are read.
            let mut seen = self.seen();
            seen.read = true;
            seen.keys.retain(|key, _| keys.contains(key));
        }
        let states = futures_util::future::join_all(keys.iter().map(|k| self.read_key(client, k, groups))).await;
        for (key, state) in keys.iter().zip(states) {
            state?.add_to(key, &mut content);
        }
        Ok(content)
    }

    /// Watches with one session until it breaks.
    async fn watch_session(&self, groups: &BTreeSet<String>, reporter: &mut Reporter<'_>) -> SessionEnd {
        let client = match self.client().await {
            Ok(client) => client,
            Err(error) => return SessionEnd::Failed(error),
        };
        let end = self.watch_with(&client, groups, reporter).await;
        if matches!(end, SessionEnd::Failed(_)) {
            self.forget(&client).await;
        }
        end
    }

    async fn watch_with(
        &self,
        client: &zk::Client,
        groups: &BTreeSet<String>,
        reporter: &mut Reporter<'_>,
    ) -> SessionEnd {
        let store = self.describe();
        // The watch first, then the read: a change between the two is both read and reported.
        let watch = client.watch(self.namespace.path(), zk::AddWatchMode::PersistentRecursive);
        let mut watcher = match self.timed(watch).await {
            Ok(watcher) => watcher,
            Err(failure) => return SessionEnd::Failed(self.error(failure)),
        };
        let mut content = match self.timed(self.read_all(client, groups)).await {
            Ok(content) => content,
            Err(failure) => return SessionEnd::Failed(self.error(failure)),
        };
        tracing::info!(store = %store, session = %client.session_id(), singles = content.singles.len(), groups = content.groups.len(), "Watching the ZooKeeper namespace.");
        reporter.established();
        if let Err(gone) = reporter.send(Update::Snapshot(content.clone())).await {
            return gone.into();
        }

        let mut connected = true;
        loop {
            let Some(first) = next_event(&mut watcher).await else {
                return SessionEnd::Failed(self.unavailable("the watch ended"));
            };
            // Everything already queued is handled together: one read per key touched.
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH && !ends_session(&batch[batch.len() - 1]) {
                match AssertUnwindSafe(watcher.changed()).catch_unwind().now_or_never() {
                    Some(Ok(event)) => batch.push(event),
                    Some(Err(_)) => return SessionEnd::Failed(self.unavailable("the watch ended")),
                    None => break,
                }
            }
            let mut dirty = BTreeSet::new();
            let mut resync = false;
            for event in &batch {
                if event.event_type != zk::EventType::Session {
                    if let Some(key) = self.namespace.key_of(&event.path) {
                        dirty.insert(key.to_owned());
                    }
                    continue;
                }
                match event.session_state {
                    state if state.is_terminated() => {
                        // The watcher must not be polled again after a terminal state.
                        return SessionEnd::Failed(self.unavailable(format!("the session ended: {state}")));
                    }
                    zk::SessionState::Disconnected => {
                        connected = false;
                        // The client reconnects by itself, within the session.
                        if let Err(gone) = reporter.outage(self.unavailable("disconnected")).await {
                            return gone.into();
                        }
                    }
                    _ => {
                        // Back within the session; events missed meanwhile are not replayed.
                        connected = true;
                        resync = true;
                    }
                }
            }
            if !connected {
                continue;
            }
            if resync {
                // zookeeper-client 0.11.2 does not re-register persistent watches on a reconnect
                // (its SetWatches request leaves their lists out), so the watch is added again,
                // before the re-read. Replacing the watcher does not remove the watch.
                let watch = client.watch(self.namespace.path(), zk::AddWatchMode::PersistentRecursive);
                match self.timed(watch).await {
                    Ok(fresh) => watcher = fresh,
                    Err(_) if client.state() == zk::SessionState::Disconnected => continue,
                    Err(failure) => return SessionEnd::Failed(self.error(failure)),
                }
                match self.timed(self.read_all(client, groups)).await {
                    Ok(now) => {
                        content = now;
                        tracing::info!(store = %store, session = %client.session_id(), singles = content.singles.len(), groups = content.groups.len(), "Reconnected to ZooKeeper.");
                        reporter.established();
                        if let Err(gone) = reporter.send(Update::Snapshot(content.clone())).await {
                            return gone.into();
                        }
                    }
                    // Lost again: the next connected event resyncs.
                    Err(_) if client.state() == zk::SessionState::Disconnected => {}
                    Err(failure) => return SessionEnd::Failed(self.error(failure)),
                }
                continue;
            }
            for key in dirty {
                let state = match self.timed(self.read_key(client, &key, groups)).await {
                    Ok(state) => state,
                    Err(_) if client.state() == zk::SessionState::Disconnected => break,
                    Err(failure) => return SessionEnd::Failed(self.error(failure)),
                };
                for update in state.apply_to(&key, &mut content) {
                    tracing::debug!(store = %store, key = %key, "A key changed in ZooKeeper.");
                    if let Err(gone) = reporter.send(update).await {
                        return gone.into();
                    }
                }
            }
        }
    }

    /// Writes `value` to `key`'s znode at `path` (`None`: deletes it) only if the znode is as
    /// `expected`: absent (`None`) or at that data version.
    async fn swap(
        &self,
        client: &zk::Client,
        key: &str,
        path: &str,
        expected: Option<i32>,
        value: Option<&str>,
    ) -> Result<Swap, Failure> {
        let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        let changed = |now: &str| Ok(Swap::Changed(now.to_owned()));
        let written = |stat: &zk::Stat| Swap::Written(u64::try_from(stat.mzxid).ok());
        match (expected, value) {
            (Some(version), Some(value)) => {
                match self.timed(client.set_data(path, value.as_bytes(), Some(version))).await {
                    Ok(stat) => {
                        self.seen().learn(key, Some(&stat));
                        Ok(written(&stat))
                    }
                    Err(Failure::Zk(zk::Error::BadVersion)) => changed("it was changed"),
                    Err(Failure::Zk(zk::Error::NoNode)) => changed("it was deleted"),
                    Err(failure) => Err(failure),
                }
            }
            (Some(version), None) => match self.timed(client.delete(path, Some(version))).await {
                Ok(()) => {
                    self.seen().learn(key, None);
                    Ok(Swap::Written(None))
                }
                Err(Failure::Zk(zk::Error::BadVersion)) => changed("it was changed"),
                Err(Failure::Zk(zk::Error::NoNode)) => changed("it was deleted"),
                Err(failure) => Err(failure),
            },
            (None, Some(value)) => {
                if self.namespace.path() != "/" {
                    self.timed(client.mkdir(self.namespace.path(), &options)).await?;
                }
                match self.timed(client.create(path, value.as_bytes(), &options)).await {
                    Ok((stat, _)) => {
                        self.seen().learn(key, Some(&stat));
                        Ok(written(&stat))
                    }
                    Err(Failure::Zk(zk::Error::NodeExists)) => changed("it was created"),
                    Err(failure) => Err(failure),
                }
            }
            // Deleting what is absent: fine while it still is.
            (None, None) => match self.timed(client.check_stat(path)).await? {
                None => Ok(Swap::Written(None)),
                Some(_) => changed("it was created"),
            },
        }
    }
}

/// What a compare-and-swap did.
#[derive(Debug)]
enum Swap {
    /// Written, at this `mzxid` (`None`: deleted).
    Written(Option<u64>),
    /// The znode changed since it was last seen: how. Nothing was written.
    Changed(String),
}

/// The next watch event; `None` if the watcher broke (the client never panics here once a terminal
/// state has been seen, but a store must not bring the server down if it did).
async fn next_event(watcher: &mut zk::PersistentWatcher) -> Option<zk::WatchedEvent> {
    AssertUnwindSafe(watcher.changed()).catch_unwind().await.ok()
}

fn ends_session(event: &zk::WatchedEvent) -> bool {
    event.event_type == zk::EventType::Session && event.session_state.is_terminated()
}

impl Source for ZookeeperSource {
    fn describe(&self) -> String {
        format!("zookeeper {} namespace {}", self.how.connect, self.namespace.path())
    }

    async fn load(&self, keys: &KeySet) -> Result<StoreContent, SourceError> {
        let groups: BTreeSet<String> = keys.groups.iter().cloned().collect();
        let client = self.client().await?;
        let read = self.timed(self.read_all(&client, &groups)).await.map_err(|f| self.error(f));
        if read.is_err() && client.state().is_terminated() {
            self.forget(&client).await;
        }
        read
    }

    async fn run(&self, keys: KeySet, updates: mpsc::Sender<Update>, shutdown: CancellationToken) {
        supervise(self, &keys, updates, self.backoff.clone(), shutdown).await;
    }

    fn shared_records(&self) -> Option<Arc<dyn crate::SharedRecords>> {
        let records = self.records.get_or_init(|| {
            let prefix = self.namespace.path().trim_end_matches('/');
            Arc::new(ZkRecords::new(self.how.clone(), prefix, self.describe()))
        });
        Some(Arc::clone(records) as Arc<dyn crate::SharedRecords>)
    }

    fn revisions(&self) -> bool {
        true
    }

    async fn put(&self, key: &str, value: Option<&str>, expect: Expect) -> Result<Option<Revision>, SourceError> {
        if let Some(why) = self.namespace.refuse_key(key) {
            return Err(SourceError::Unsupported(why));
        }
        let path = self.namespace.key_path(key);
        if let Some(size) = value.map(|v| v.len() as u64).filter(|n| *n > MAX_VALUE_BYTES) {
            return Err(SourceError::TooLarge { what: path, size, limit: MAX_VALUE_BYTES });
        }
        let client = self.client().await?;
        let seen = self.seen().expected(key);
        let expected = match expect {
            Expect::Seen => match seen {
                Some(expected) => Ok(Ok(expected)),
                // Not seen yet: as the store has it now.
                None => self.timed(client.check_stat(&path)).await.map(|stat| Ok(stat.map(|s| s.version))),
            },
            Expect::At(None) => Ok(Ok(None)),
            // ZooKeeper compares data versions: the znode's, when it is still at that mzxid. The
            // stat may come from a follower that lags, but the leader checks the version.
            Expect::At(Some(revision)) => self.timed(client.check_stat(&path)).await.map(|stat| match stat {
                Some(stat) if u64::try_from(stat.mzxid).ok() == Some(revision) => Ok(Some(stat.version)),
                Some(stat) => Err(format!("it is at mzxid {}, not {revision}", stat.mzxid)),
                None => Err(format!("it is absent, not at mzxid {revision}")),
            }),
        };
        let expected = match expected {
            Ok(Err(how)) => {
                return Err(SourceError::Conflict {
                    store: self.describe(),
                    message: format!("znode {path} changed since the version the write is based on: {how}"),
                });
            }
            Ok(Ok(expected)) => Ok(expected),
            Err(failure) => Err(failure),
        };
        let swapped = match expected {
            Ok(expected) => self.swap(&client, key, &path, expected, value).await.map(|swap| (expected, swap)),
            Err(failure) => Err(failure),
        };
        let result = match swapped {
            Ok((_, Swap::Written(revision))) => Ok(revision),
            Ok((expected, Swap::Changed(how))) => {
                let was = match expected {
                    Some(version) => format!("at data version {version}"),
                    None => "absent".to_owned(),
                };
                tracing::warn!(store = %self.describe(), znode = %path, ?expected, "A write found the znode changed since it was last seen; nothing was written.");
                Err(SourceError::Conflict {
                    store: self.describe(),
                    message: format!("znode {path} was {was} when last seen; since, {how}"),
                })
            }
            Err(Failure::Zk(zk::Error::NotEmpty)) => Err(SourceError::Refused {
                store: self.describe(),
                message: format!("{path} has children (it holds a group's items); delete them first"),
            }),
            Err(failure) => Err(self.error(failure)),
        };
        if result.is_err() && client.state().is_terminated() {
            self.forget(&client).await;
        }
        result
    }
}

impl Session for ZookeeperSource {
    async fn run_once(&self, keys: &KeySet, reporter: &mut Reporter<'_>) -> SessionEnd {
        let groups: BTreeSet<String> = keys.groups.iter().cloned().collect();
        self.watch_session(&groups, reporter).await
    }
}
