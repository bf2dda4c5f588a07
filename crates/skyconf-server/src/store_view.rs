//! The store's raw content behind the served table (every key, not only the agent
//! configurations) and how the store is doing; the DCS server, the admin API and the metrics read
//! it.

use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use arc_swap::ArcSwap;
use skyconf_sources::Reach;
use tokio::sync::watch;

/// How the store behind the table is doing.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct StoreStatus {
    /// The store, as its source describes it.
    pub store: String,
    /// How this process reaches the store: `connection` (etcd, ZooKeeper, Nacos, an OAP's DCS),
    /// `files` (a file or directory read and watched here, no connection), `nothing` (`none`).
    #[schema(value_type = String)]
    pub reach: Reach,
    /// Whether the last contact with the store succeeded: for a connection, that it is up; for
    /// files, that they were read.
    pub connected: bool,
    /// The same in a word, as the page shows it: `connected` or `disconnected` for a
    /// connection, `watching` or `unreadable` for files, `none` for the `none` store.
    pub state: &'static str,
    /// Whether what is served may be behind the store: a persisted copy the store has not
    /// confirmed in this run, or the last good content kept while the store cannot be reached.
    /// Cleared when the store reports content again.
    pub stale: bool,
    /// Since when the served content has been stale (`stale_since_ms` in JSON; `null` while it
    /// is current): the start for a persisted copy, the first failed contact for an outage.
    #[serde(rename = "stale_since_ms", serialize_with = "crate::unix_time::serialize_ms_opt")]
    #[schema(value_type = Option<u64>)]
    pub stale_since: Option<SystemTime>,
    /// The last failure, while it lasts.
    pub last_error: Option<String>,
    /// When the store last reported content (`last_update_ms` in JSON).
    #[serde(rename = "last_update_ms", serialize_with = "crate::unix_time::serialize_ms_opt")]
    #[schema(value_type = Option<u64>)]
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
        let now = SystemTime::now();
        let status = StoreStatus {
            store,
            reach: Reach::Connection,
            connected,
            state: state(Reach::Connection, connected),
            stale,
            stale_since: stale.then_some(now),
            last_error: None,
            last_update: connected.then_some(now),
        };
        Self { content: ArcSwap::from_pointee(content), status: Mutex::new(status), changes }
    }

    /// A view of a store reached through `reach` (a connection unless said).
    pub fn with_reach(self, reach: Reach) -> Self {
        {
            let mut status = self.lock_status();
            status.reach = reach;
            status.state = state(reach, status.connected);
        }
        self
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
            status.state = state(status.reach, true);
            status.stale = false;
            status.stale_since = None;
            status.last_error = None;
            status.last_update = Some(SystemTime::now());
        }
        self.changes.send_modify(|v| *v += 1);
    }

    /// Records a failure; the content stays, and is stale from the first failure until the
    /// store reports content again.
    pub fn mark_failed(&self, error: String) {
        let mut status = self.lock_status();
        status.connected = false;
        status.state = state(status.reach, false);
        status.last_error = Some(error);
        if !status.stale {
            status.stale = true;
            status.stale_since = Some(SystemTime::now());
        }
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

/// The store's state in a word: what is true of it, as `reach` says what "up" means.
fn state(reach: Reach, up: bool) -> &'static str {
    match (reach, up) {
        (Reach::Connection, true) => "connected",
        (Reach::Connection, false) => "disconnected",
        (Reach::Files, true) => "watching",
        (Reach::Files, false) => "unreadable",
        (Reach::Nothing, _) => "none",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outage_makes_the_content_stale_from_its_first_failure_until_the_store_reports_again() {
        let view = StoreView::new("test".into(), Default::default(), true, false);
        assert!(!view.status().stale && view.status().stale_since.is_none());
        view.mark_failed("down".into());
        let first = view.status();
        assert!(first.stale && !first.connected, "{first:?}");
        view.mark_failed("still down".into());
        assert_eq!(view.status().stale_since, first.stale_since, "stale since the first failure");
        view.replace(Default::default());
        let back = view.status();
        assert!(!back.stale && back.stale_since.is_none() && back.connected, "{back:?}");
    }

    #[test]
    fn a_file_store_is_watched_not_connected() {
        let view = StoreView::new("file a.yaml".into(), Default::default(), true, false).with_reach(Reach::Files);
        let status = serde_json::to_value(view.status()).unwrap();
        assert_eq!((&status["reach"], &status["state"]), (&"files".into(), &"watching".into()), "{status}");
        view.mark_failed("gone".into());
        assert_eq!(view.status().state, "unreadable");
        let etcd = StoreView::new("etcd".into(), Default::default(), false, false);
        assert_eq!((etcd.status().reach, etcd.status().state), (Reach::Connection, "disconnected"));
    }

    #[test]
    fn a_persisted_copy_is_stale_from_the_start() {
        let view = StoreView::new("test".into(), Default::default(), false, true);
        let status = serde_json::to_value(view.status()).unwrap();
        assert_eq!(status["stale"], true);
        assert!(status["stale_since_ms"].as_u64().is_some_and(|ms| ms > 0), "{status}");
    }
}
