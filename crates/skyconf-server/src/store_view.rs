//! The store's raw content behind the served table (every key, not only the agent
//! configurations) and how the store is doing; the DCS server, the admin API and the metrics read
//! it.

use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use arc_swap::ArcSwap;
use tokio::sync::watch;

/// How the store behind the table is doing.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct StoreStatus {
    /// The store, as its source describes it.
    pub store: String,
    /// Whether the last contact with the store succeeded.
    pub connected: bool,
    /// Whether what is served did not come from the store in this run (a persisted copy).
    pub stale: bool,
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
