//! Stores as data: each store's settings type implements [`StoreConfig`] (the OAP's selector name,
//! its `SW_*` variables, how to open the store), and [`REGISTRY`] lists the stores built into this
//! binary. Adding a store (Consul, Apollo) means a directory under `src/` and one line in the
//! `stores!` list below; the CLI layers settings and opens whatever the registry names.

use serde::de::DeserializeOwned;

use crate::{DynSource, Limits, NoStore, SettingsError};

/// A store's settings, and what the registry needs to know about the store.
pub trait StoreConfig: DeserializeOwned + Default {
    /// The OAP's selector name (`configuration.selector` in its `application.yml`).
    const SELECTOR: &'static str;
    /// Other names accepted for the selector.
    const ALIASES: &'static [&'static str] = &[];
    /// Each setting (by its name in the OAP's `configuration.<selector>` section) and the `SW_*`
    /// variable the OAP's `application.yml` reads it from.
    const ENV: &'static [(&'static str, &'static str)];
    /// Whether the server must read the store before it serves: a local file is there or it is a
    /// mistake, while a remote store may come back.
    const MUST_LOAD_AT_START: bool = false;

    /// Checks the settings and opens the store; nothing is contacted yet.
    fn open(self, limits: Limits) -> Result<Box<dyn DynSource>, SettingsError>;

    /// These settings cannot work, for the reason `message` gives.
    fn invalid(message: impl Into<String>) -> SettingsError {
        SettingsError::new(Self::SELECTOR, message)
    }
}

/// How a secret setting prints in a settings type's `Debug`: empty when unset, else hidden, so
/// that it stays out of logs and panics. Only the stores with secret settings use it.
#[cfg(any(feature = "etcd", feature = "nacos"))]
pub(crate) fn redacted(secret: &str) -> &'static str {
    if secret.is_empty() { "" } else { "<redacted>" }
}

/// A [`StoreConfig`] as data.
#[derive(Debug, Clone, Copy)]
pub struct StoreEntry {
    /// [`StoreConfig::SELECTOR`].
    pub selector: &'static str,
    /// [`StoreConfig::ALIASES`].
    pub aliases: &'static [&'static str],
    /// [`StoreConfig::ENV`].
    pub env: &'static [(&'static str, &'static str)],
    /// [`StoreConfig::MUST_LOAD_AT_START`].
    pub must_load_at_start: bool,
    /// Deserializes the settings from `settings` (`null`: the defaults), strictly typed, and opens
    /// the store.
    pub open_from: fn(settings: serde_json::Value, limits: Limits) -> Result<Box<dyn DynSource>, SettingsError>,
}

impl StoreEntry {
    /// The entry of `C`.
    pub const fn of<C: StoreConfig>() -> Self {
        Self {
            selector: C::SELECTOR,
            aliases: C::ALIASES,
            env: C::ENV,
            must_load_at_start: C::MUST_LOAD_AT_START,
            open_from: open_from::<C>,
        }
    }

    /// Whether `name` selects this store.
    pub fn is_named(&self, name: &str) -> bool {
        self.selector == name || self.aliases.contains(&name)
    }
}

fn open_from<C: StoreConfig>(settings: serde_json::Value, limits: Limits) -> Result<Box<dyn DynSource>, SettingsError> {
    let settings: C = if settings.is_null() {
        C::default()
    } else {
        serde_json::from_value(settings).map_err(|e| C::invalid(e.to_string()))?
    };
    settings.open(limits)
}

/// Something done with a store's settings type, whichever store is chosen at run time: how a
/// caller deserializes settings its own way (the CLI types them leniently, as the OAP does).
pub trait WithStore {
    /// What it gives.
    type Output;
    /// Does it with the settings type `C`.
    fn with<C: StoreConfig>(self) -> Self::Output;
}

/// Declares [`REGISTRY`] and [`with_store`] from one list of settings types.
macro_rules! stores {
    ($($(#[$cfg:meta])* $config:ty;)*) => {
        /// Every store built into this binary.
        pub const REGISTRY: &[StoreEntry] = &[$($(#[$cfg])* StoreEntry::of::<$config>(),)*];

        /// Runs `visitor` with the settings type of the store `name` selects (its selector or an
        /// alias); `None` when no store built into this binary has that name.
        pub fn with_store<V: WithStore>(name: &str, visitor: V) -> Option<V::Output> {
            $(
                $(#[$cfg])*
                if StoreEntry::of::<$config>().is_named(name) {
                    return Some(visitor.with::<$config>());
                }
            )*
            None
        }
    };
}

stores! {
    #[cfg(feature = "file")]
    crate::file::FileSettings;
    #[cfg(feature = "dcs")]
    crate::dcs::DcsSettings;
    #[cfg(feature = "etcd")]
    crate::etcd::EtcdSettings;
    #[cfg(feature = "zookeeper")]
    crate::zookeeper::ZookeeperSettings;
    #[cfg(feature = "nacos")]
    crate::nacos::NacosSettings;
    NoneSettings;
}

/// The entry of the store `name` selects (its selector or an alias).
pub fn entry(name: &str) -> Option<&'static StoreEntry> {
    REGISTRY.iter().find(|entry| entry.is_named(name))
}

/// The `none` selector's settings: there are none.
#[derive(Debug, Clone, Copy, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoneSettings {}

impl StoreConfig for NoneSettings {
    const SELECTOR: &'static str = "none";
    const ENV: &'static [(&'static str, &'static str)] = &[];

    fn open(self, _limits: Limits) -> Result<Box<dyn DynSource>, SettingsError> {
        tracing::warn!(
            "No store: every agent gets the EMPTY answer, as an OAP with `configuration: selector: none` gives."
        );
        Ok(Box::new(NoStore))
    }
}

// The tests name every store, so they need every store built in.
#[cfg(all(test, feature = "file", feature = "dcs", feature = "etcd", feature = "zookeeper", feature = "nacos"))]
mod tests {
    use super::*;
    use crate::{KeySet, Source, SourceError};

    #[test]
    fn every_store_is_registered_once_with_its_oap_name() {
        let selectors: Vec<_> = REGISTRY.iter().map(|e| e.selector).collect();
        assert_eq!(selectors, ["file", "grpc", "etcd", "zookeeper", "nacos", "none"]);
        assert_eq!(entry("dcs").map(|e| e.selector), Some("grpc"), "dcs is an alias of the OAP's grpc");
        assert!(entry("consul").is_none());
        let must_load: Vec<_> = REGISTRY.iter().filter(|e| e.must_load_at_start).map(|e| e.selector).collect();
        assert_eq!(must_load, ["file"]);
        for entry in REGISTRY {
            for (setting, variable) in entry.env {
                assert!(variable.starts_with("SW_"), "{}: {setting} from {variable}", entry.selector);
            }
        }
    }

    #[tokio::test]
    async fn opens_from_settings_and_refuses_bad_ones_with_one_error_type() {
        let none = (entry("none").unwrap().open_from)(serde_json::Value::Null, Limits::default()).unwrap();
        assert_eq!(none.describe(), "none");
        assert!(none.load(&KeySet::oap()).await.unwrap().singles.is_empty());
        assert!(matches!(none.put("k", None, crate::Expect::Seen).await, Err(SourceError::Unsupported(_))));

        let etcd = entry("etcd").unwrap();
        let error = (etcd.open_from)(serde_json::json!({"endpoints": ""}), Limits::default()).err().unwrap();
        assert_eq!(error.store, "etcd");
        let typo = (etcd.open_from)(serde_json::json!({"endpoint": "http://a:1"}), Limits::default()).err().unwrap();
        assert!(typo.message.contains("endpoint"), "{typo}");
        let opened = (etcd.open_from)(serde_json::json!({"endpoints": "http://a:1"}), Limits::default()).unwrap();
        assert_eq!(opened.describe(), "etcd http://a:1 namespace /skywalking/");
    }

    #[test]
    fn with_store_hands_over_the_settings_type() {
        struct Selector;
        impl WithStore for Selector {
            type Output = &'static str;
            fn with<C: StoreConfig>(self) -> &'static str {
                C::SELECTOR
            }
        }
        assert_eq!(with_store("zookeeper", Selector), Some("zookeeper"));
        assert_eq!(with_store("dcs", Selector), Some("grpc"));
        assert_eq!(with_store("apollo", Selector), None);
    }
}
