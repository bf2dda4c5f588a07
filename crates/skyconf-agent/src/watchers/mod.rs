//! Ready-made watchers.
//!
//! - [`TypedWatcher`]: any `FromStr` setting with a local default; the hot path reads the current
//!   value without locks. A value that does not parse is logged and the current value kept.
//! - [`StringWatcher`]: the raw text, or nothing until the server sends a value.
//! - The Java and Go agents' settings, with their keys, types and defaults: [`SampleNPer3Secs`]
//!   (with its sampler), [`SpanLimit`], [`IgnoreSuffix`], [`IgnorePath`], and the Go agent's
//!   [`SampleRate`].
//!
//! Like the Java agent's watchers, a typed watcher always holds a value (the default to begin
//! with), so a command that does not carry its key delivers DELETE, which restores the default.

/// Implements [`Watcher`] for a built-in watcher by handing every call to its [`TypedWatcher`]
/// field, which knows the key, the value and how to parse a change.
macro_rules! watch_through {
    ($watcher:ty => $field:ident) => {
        impl crate::registry::Watcher for $watcher {
            fn key(&self) -> &str {
                crate::registry::Watcher::key(&self.$field)
            }
            fn value(&self) -> Option<String> {
                crate::registry::Watcher::value(&self.$field)
            }
            fn notify(&self, event: &crate::registry::ChangeEvent<'_>) -> Result<(), crate::registry::WatcherError> {
                crate::registry::Watcher::notify(&self.$field, event)
            }
        }
    };
}

mod ignore;
mod sampling;

use std::fmt::Display;
use std::str::FromStr;
use std::sync::Arc;

use arc_swap::{ArcSwap, ArcSwapOption};

pub use ignore::{DEFAULT_IGNORE_SUFFIX, IgnorePath, IgnoreSuffix, PathPatterns, SuffixList};
pub use sampling::{GoFloat, SAMPLING_WINDOW, SampleNPer3Secs, SampleRate, SpanLimit};
/// One `agent.trace.ignore_path` pattern, matched as the Java agent matches it.
pub use skyconf_core::ignore::PathPattern;

use crate::registry::{ChangeEvent, EventType, Watcher, WatcherError, WatcherKind};

// The keys and the known-key list of `skyconf validate` and the admin API's warnings are one
// list, in skyconf-core.
pub use skyconf_core::keys::{
    IGNORE_SUFFIX, JAVA_KEYS, JDBC_TRACE_SQL_PARAMETERS, SAMPLE_N_PER_3_SECS, SAMPLE_RATE, SPAN_LIMIT_PER_SEGMENT,
    TRACE_IGNORE_PATH,
};

/// A setting of type `T` with a local default.
///
/// `value()` is the current value's `Display` text, so a server value written differently
/// (`010` for 10) is delivered again on each new configuration and parses to the same value, as
/// with the Java agent's `String.valueOf(int)`.
#[derive(Debug)]
pub struct TypedWatcher<T> {
    key: String,
    default: Arc<T>,
    current: ArcSwap<T>,
    kind: WatcherKind,
}

impl<T> TypedWatcher<T>
where
    T: FromStr + Display + Send + Sync + 'static,
    T::Err: Display,
{
    /// A watcher of `key` holding `default` until the server says otherwise.
    pub fn new(key: impl Into<String>, default: T) -> Self {
        let default = Arc::new(default);
        Self { key: key.into(), current: ArcSwap::new(Arc::clone(&default)), default, kind: WatcherKind::of::<Self>() }
    }

    /// Sets the kind, so two watchers of this type can watch one key.
    pub fn with_kind(mut self, kind: WatcherKind) -> Self {
        self.kind = kind;
        self
    }

    /// The current value (lock-free).
    pub fn get(&self) -> Arc<T> {
        self.current.load_full()
    }

    /// Runs `f` on the current value without touching reference counts (lock-free).
    pub fn with<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        f(&self.current.load())
    }

    /// The local default, restored on DELETE.
    pub fn default_value(&self) -> &T {
        &self.default
    }

    fn set(&self, text: &str) {
        match text.parse::<T>() {
            Ok(value) => self.current.store(Arc::new(value)),
            Err(error) => tracing::warn!(
                key = %self.key,
                value = text,
                %error,
                "Cannot parse the new value; keeping the current one."
            ),
        }
    }
}

impl<T> Watcher for TypedWatcher<T>
where
    T: FromStr + Display + Send + Sync + 'static,
    T::Err: Display,
{
    fn key(&self) -> &str {
        &self.key
    }

    fn value(&self) -> Option<String> {
        Some(self.current.load().to_string())
    }

    fn notify(&self, event: &ChangeEvent<'_>) -> Result<(), WatcherError> {
        match (event.event, event.value) {
            (EventType::Modify, Some(text)) => self.set(text),
            _ => self.current.store(Arc::clone(&self.default)),
        }
        Ok(())
    }

    fn kind(&self) -> WatcherKind {
        self.kind
    }
}

/// A setting kept as raw text; `None` until the server sends a value and again after a DELETE.
#[derive(Debug)]
pub struct StringWatcher {
    key: String,
    current: ArcSwapOption<String>,
}

impl StringWatcher {
    /// A watcher of `key`, holding no value.
    pub fn new(key: impl Into<String>) -> Self {
        Self { key: key.into(), current: ArcSwapOption::empty() }
    }

    /// The current value (lock-free).
    pub fn get(&self) -> Option<Arc<String>> {
        self.current.load_full()
    }
}

impl Watcher for StringWatcher {
    fn key(&self) -> &str {
        &self.key
    }

    fn value(&self) -> Option<String> {
        self.current.load().as_deref().cloned()
    }

    fn notify(&self, event: &ChangeEvent<'_>) -> Result<(), WatcherError> {
        self.current.store(event.value.map(|v| Arc::new(v.to_owned())));
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn modify<'a>(key: &'a str, value: &'a str) -> ChangeEvent<'a> {
        ChangeEvent { key, event: EventType::Modify, value: Some(value), uuid: None }
    }

    pub(crate) fn delete(key: &str) -> ChangeEvent<'_> {
        ChangeEvent { key, event: EventType::Delete, value: None, uuid: None }
    }

    #[test]
    fn typed_watcher_parses_keeps_on_error_and_restores_the_default() {
        let w = TypedWatcher::new("k", 300_i32);
        assert_eq!(w.value().as_deref(), Some("300"));
        w.notify(&modify("k", "010")).unwrap();
        assert_eq!(*w.get(), 10);
        assert_eq!(w.value().as_deref(), Some("10"));
        // Not a number: logged, value kept, not an error.
        w.notify(&modify("k", "ten")).unwrap();
        assert_eq!(w.with(|v| *v), 10);
        w.notify(&delete("k")).unwrap();
        assert_eq!(*w.get(), 300);
        assert_eq!(*w.default_value(), 300);
    }

    #[test]
    fn string_watcher_holds_nothing_until_told() {
        let w = StringWatcher::new("k");
        assert_eq!(w.value(), None);
        w.notify(&modify("k", "v")).unwrap();
        assert_eq!(w.get().as_deref().map(String::as_str), Some("v"));
        w.notify(&delete("k")).unwrap();
        assert_eq!(w.value(), None);
    }
}
