//! The table being served, the store content behind it, and what is known about both.
//!
//! The current [`Snapshot`] sits behind an `ArcSwap`: the CDS hot path loads it without locks and
//! answers from its pre-encoded bytes. Every install bumps the version on a `watch` channel, so
//! anything that wants to react to a change (push streams, metrics, tests) can wait for it.
//!
//! Before the first table is known (a remote store unreachable at start-up and nothing persisted)
//! the snapshot is *not ready*: every agent is answered "no change" and keeps what it has, rather
//! than the EMPTY answer that would reset it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use arc_swap::ArcSwap;
use skyconf_core::codec::PreEncoded;
use skyconf_core::{AgentConfigurations, Digest};
use tokio::sync::watch;

/// What a service (or an unknown service) is answered with.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The digest agents echo once they hold this configuration.
    pub digest: Digest,
    /// The whole `Commands` message, serial number to be patched in.
    pub encoded: PreEncoded,
}

impl Answer {
    fn new(digest: Digest, entries: &[(String, String)]) -> Self {
        let encoded = PreEncoded::new(&digest, entries.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        Self { digest, encoded }
    }
}

/// One accepted table with its answers encoded.
#[derive(Debug)]
pub struct Snapshot {
    /// Increases by one with every install; 1 is the table loaded at start-up.
    pub version: u64,
    /// The table.
    pub table: AgentConfigurations,
    /// When it was installed.
    pub installed_at: SystemTime,
    /// False until a first table is known: agents then get "no change".
    pub ready: bool,
    answers: HashMap<String, Answer>,
    empty: Answer,
}

impl Snapshot {
    fn new(version: u64, table: AgentConfigurations) -> Self {
        let answers =
            table.services().map(|s| (s.name().to_owned(), Answer::new(s.digest().clone(), s.entries()))).collect();
        Self {
            version,
            table,
            installed_at: SystemTime::now(),
            ready: true,
            answers,
            empty: Answer::new(Digest::empty(), &[]),
        }
    }

    /// The answer for `service`: its own, or the EMPTY answer the OAP gives unknown services.
    pub fn answer(&self, service: &str) -> &Answer {
        self.answers.get(service).unwrap_or(&self.empty)
    }
}

/// A document that was refused, kept for operators.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Rejection {
    /// Where it came from (a path, a store key).
    pub origin: String,
    /// Why, with line and column where known.
    pub error: String,
    /// When.
    #[serde(with = "unix_seconds")]
    pub at: SystemTime,
}

/// The served table plus operator-facing status.
#[derive(Debug)]
pub struct ServedTable {
    current: ArcSwap<Snapshot>,
    changes: watch::Sender<u64>,
    // Short critical sections only, never held across an await.
    last_rejection: Mutex<Option<Rejection>>,
}

impl ServedTable {
    /// Starts serving `table` as version 1.
    pub fn new(table: AgentConfigurations) -> Self {
        Self::from_snapshot(Snapshot::new(1, table))
    }

    /// Starts without a table (version 0, not ready) until the first [`Self::install`].
    pub fn waiting() -> Self {
        Self::from_snapshot(Snapshot { ready: false, ..Snapshot::new(0, AgentConfigurations::default()) })
    }

    fn from_snapshot(snapshot: Snapshot) -> Self {
        let (changes, _) = watch::channel(snapshot.version);
        Self { current: ArcSwap::from_pointee(snapshot), changes, last_rejection: Mutex::new(None) }
    }

    /// The current snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// Runs `f` on the current snapshot without touching its reference count (the hot path).
    pub fn with_snapshot<R>(&self, f: impl FnOnce(&Snapshot) -> R) -> R {
        f(&self.current.load())
    }

    /// Installs a new table and returns its version.
    pub fn install(&self, table: AgentConfigurations) -> u64 {
        let version = self.current.load().version + 1;
        self.current.store(Arc::new(Snapshot::new(version, table)));
        self.changes.send_replace(version);
        version
    }

    /// A receiver that sees every new version.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Remembers a refused document.
    pub fn record_rejection(&self, rejection: Rejection) {
        *self.last_rejection.lock().unwrap_or_else(|p| p.into_inner()) = Some(rejection);
    }

    /// Forgets the refused document once a good one is installed.
    pub fn clear_rejection(&self) {
        *self.last_rejection.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// The document refused last, unless a good one came after it.
    pub fn last_rejection(&self) -> Option<Rejection> {
        self.last_rejection.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

mod unix_seconds {
    use std::time::{SystemTime, UNIX_EPOCH};

    pub(super) fn serialize<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(t.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> AgentConfigurations {
        skyconf_core::read(text).unwrap()
    }

    #[test]
    fn unknown_services_get_the_empty_answer() {
        let served = ServedTable::new(table("configurations:\n  a: {k: v}\n"));
        let snap = served.snapshot();
        assert_eq!(snap.answer("nope").digest, Digest::empty());
        assert_ne!(snap.answer("a").digest, Digest::empty());
    }

    #[tokio::test]
    async fn installs_bump_the_version_and_notify() {
        let served = ServedTable::new(AgentConfigurations::default());
        let mut changes = served.subscribe();
        assert_eq!(served.install(table("configurations:\n  a: {k: v}\n")), 2);
        changes.changed().await.unwrap();
        assert_eq!(*changes.borrow(), 2);
        assert_eq!(served.snapshot().table.len(), 1);
    }
}

/// How the store behind the table is doing.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StoreStatus {
    /// The store, as its source describes it.
    pub store: String,
    /// Whether the last contact with the store succeeded.
    pub connected: bool,
    /// Whether what is served did not come from the store in this run (a persisted copy).
    pub stale: bool,
    /// The last failure, while it lasts.
    pub last_error: Option<String>,
    /// When the store last reported content.
    #[serde(with = "unix_seconds_opt")]
    pub last_update: Option<SystemTime>,
}

/// The store's raw content (every key, not only the agent configurations) and its status; the
/// DCS server and the admin API read it.
#[derive(Debug)]
pub struct StoreView {
    content: ArcSwap<skyconf_core::store::StoreContent>,
    status: Mutex<StoreStatus>,
    changes: watch::Sender<u64>,
}

impl StoreView {
    /// A view of `store` holding `content`.
    pub fn new(store: String, content: skyconf_core::store::StoreContent, connected: bool, stale: bool) -> Self {
        let (changes, _) = watch::channel(0);
        let status =
            StoreStatus { store, connected, stale, last_error: None, last_update: connected.then(SystemTime::now) };
        Self { content: ArcSwap::from_pointee(content), status: Mutex::new(status), changes }
    }

    /// The current content.
    pub fn content(&self) -> Arc<skyconf_core::store::StoreContent> {
        self.content.load_full()
    }

    /// Replaces the content (the store reported it) and marks the store connected and current.
    pub fn replace(&self, content: skyconf_core::store::StoreContent) {
        self.content.store(Arc::new(content));
        {
            let mut status = self.lock_status();
            status.connected = true;
            status.stale = false;
            status.last_error = None;
            status.last_update = Some(SystemTime::now());
        }
        self.changes.send_modify(|v| *v += 1);
    }

    /// Records a failure; the content stays.
    pub fn mark_failed(&self, error: String) {
        let mut status = self.lock_status();
        status.connected = false;
        status.last_error = Some(error);
    }

    /// The status.
    pub fn status(&self) -> StoreStatus {
        self.lock_status().clone()
    }

    /// A receiver that sees every content change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn lock_status(&self) -> std::sync::MutexGuard<'_, StoreStatus> {
        self.status.lock().unwrap_or_else(|p| p.into_inner())
    }
}

mod unix_seconds_opt {
    use std::time::{SystemTime, UNIX_EPOCH};

    pub(super) fn serialize<S: serde::Serializer>(t: &Option<SystemTime>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => s.serialize_some(&t.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)),
            None => s.serialize_none(),
        }
    }
}
