//! Watchers and the registry that holds them.
//!
//! A [`Watcher`] owns one setting (its key), knows its current value, and is notified of MODIFY
//! and DELETE. Several watchers may share a key; a second watcher of the same [`WatcherKind`]
//! under a key is ignored, as the Java agent ignores a second watcher of the same class.
//!
//! The number of registered watchers matters: when it changes, the agent forgets its uuid so the
//! next answer carries the full configuration and a late watcher receives its value.

use std::any::TypeId;
use std::fmt;
use std::sync::{Arc, Mutex};

/// What happened to a setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// The setting has a new value.
    Modify,
    /// The setting is gone; the watcher returns to its local default.
    Delete,
}

impl EventType {
    /// `MODIFY` or `DELETE`, as the Java agent names them.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Modify => "MODIFY",
            Self::Delete => "DELETE",
        }
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A change delivered to a watcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangeEvent<'a> {
    /// The setting.
    pub key: &'a str,
    /// MODIFY or DELETE.
    pub event: EventType,
    /// The new value for MODIFY (never blank); `None` for DELETE.
    pub value: Option<&'a str>,
    /// The digest of the configuration this change belongs to, as the server sent it.
    pub uuid: Option<&'a str>,
}

/// A watcher refused a change. The agent stops applying the command and keeps its uuid, so the
/// next poll delivers the command again.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct WatcherError {
    message: String,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl WatcherError {
    /// An error with a message.
    pub fn new(message: impl Into<String>) -> Self {
        Self { message: message.into(), source: None }
    }

    /// An error with a message and a cause.
    pub fn with_source(
        message: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self { message: message.into(), source: Some(source.into()) }
    }
}

/// Identifies the kind of a watcher, for ignoring duplicate registrations under one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WatcherKind {
    type_id: TypeId,
    name: &'static str,
}

impl WatcherKind {
    /// The kind of watchers of type `W`.
    pub fn of<W: ?Sized + 'static>() -> Self {
        Self { type_id: TypeId::of::<W>(), name: std::any::type_name::<W>() }
    }

    /// A kind told apart by name, for two watchers of one type on one key.
    pub fn named(name: &'static str) -> Self {
        Self { type_id: TypeId::of::<Self>(), name }
    }

    /// A readable name for logs.
    pub fn name(&self) -> &'static str {
        self.name
    }
}

/// One dynamic setting of the service.
///
/// `notify` runs on the agent's task, not on the hot path; it should be quick and must not block.
pub trait Watcher: Send + Sync + 'static {
    /// The setting's key, e.g. `agent.sample_n_per_3_secs`.
    fn key(&self) -> &str;

    /// The current value as text, or `None` when the watcher holds no value. A DELETE is only
    /// delivered to a watcher that holds a value; a MODIFY only when the new value differs.
    fn value(&self) -> Option<String>;

    /// Applies a change. An error stops the command: the remaining watchers are skipped and the
    /// uuid is kept, so the next poll retries; a panic counts as an error. A value the watcher
    /// cannot parse is not an error by convention: log it and keep the current value, as the Java
    /// agent's watchers do.
    fn notify(&self, event: &ChangeEvent<'_>) -> Result<(), WatcherError>;

    /// The kind used to ignore a duplicate registration under the same key.
    fn kind(&self) -> WatcherKind {
        WatcherKind::of::<Self>()
    }
}

/// The watchers of one key.
pub(crate) type Holders = Vec<Arc<dyn Watcher>>;

#[derive(Default)]
struct Inner {
    /// In registration order, which is the order commands are applied in.
    keys: Vec<(String, Holders)>,
    holders: usize,
}

/// The registered watchers, shared between the service (which registers) and the agent (which
/// notifies). Cloning gives another handle to the same registry.
#[derive(Clone, Default)]
pub struct Registry {
    // Short critical sections only, never held across an await or while notifying.
    inner: Arc<Mutex<Inner>>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `watcher` under its key. Returns false, and ignores it, when a watcher of the
    /// same kind is already registered under that key.
    pub fn register(&self, watcher: Arc<dyn Watcher>) -> bool {
        let key = watcher.key().to_owned();
        let kind = watcher.kind();
        let mut inner = self.lock();
        let index = match inner.keys.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                inner.keys.push((key.clone(), Vec::new()));
                inner.keys.len() - 1
            }
        };
        if inner.keys[index].1.iter().any(|w| w.kind() == kind) {
            tracing::debug!(%key, kind = kind.name(), "Duplicate registration ignored.");
            return false;
        }
        inner.keys[index].1.push(watcher);
        inner.holders += 1;
        tracing::debug!(%key, kind = kind.name(), "Watcher registered.");
        true
    }

    /// The number of registered watchers, summed over all keys.
    pub fn watcher_count(&self) -> usize {
        self.lock().holders
    }

    /// The registered keys, in registration order.
    pub fn keys(&self) -> Vec<String> {
        self.lock().keys.iter().map(|(k, _)| k.clone()).collect()
    }

    /// A copy of the keys and their watchers, to notify without holding the lock (a watcher may
    /// register another from `notify`).
    pub(crate) fn snapshot(&self) -> Vec<(String, Holders)> {
        self.lock().keys.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic elsewhere cannot leave the list half-updated: every update is one push.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = self.lock();
        f.debug_map()
            .entries(inner.keys.iter().map(|(k, ws)| (k, ws.iter().map(|w| w.kind().name()).collect::<Vec<_>>())))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watchers::{StringWatcher, TypedWatcher};

    #[test]
    fn several_watchers_per_key_but_one_per_kind() {
        let registry = Registry::new();
        assert!(registry.register(Arc::new(StringWatcher::new("k"))));
        assert!(!registry.register(Arc::new(StringWatcher::new("k"))));
        assert!(registry.register(Arc::new(TypedWatcher::new("k", 1_i32))));
        assert!(registry.register(Arc::new(StringWatcher::new("other"))));
        assert!(registry.register(Arc::new(TypedWatcher::new("k", 2_i32).with_kind(WatcherKind::named("second")))));
        assert_eq!(registry.watcher_count(), 4);
        assert_eq!(registry.keys(), ["k", "other"]);
    }
}
