//! Layering the settings of the store `serve` watches; which stores exist, their `SW_*` variables
//! and how each opens come from `skyconf_sources`' registry.
//!
//! Every store's settings carry the OAP's names (`configuration.<selector>` in an
//! `application.yml`) and are resolved the same way, later layers winning:
//! 1. the store's defaults (the OAP's);
//! 2. the OAP's `SW_*` environment variables for that store (so a container configured for an OAP
//!    configures skyconf too, with or without a config file);
//! 3. the config file's `configuration.<selector>` section (whose `${SW_*:default}` placeholders
//!    are already resolved);
//! 4. `--store-setting NAME=VALUE` flags, NAME being the OAP's setting name (`endpoints`,
//!    `namespace`, `hostPort`, `serverAddr`, ...).

use anyhow::Context as _;
use skyconf_sources::{DynSource, Limits, StoreConfig, WithStore};

use crate::settings::ConfigFile;

/// `NAME=VALUE`.
pub(crate) fn parse_setting(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.trim().to_owned(), v.to_owned()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("expected NAME=VALUE, got `{text}`"))
}

/// Where a store's settings come from.
pub(crate) struct Layers<'a> {
    pub(crate) file: Option<&'a ConfigFile>,
    pub(crate) overrides: &'a [(String, String)],
    pub(crate) env: &'a dyn Fn(&str) -> Option<String>,
}

impl Layers<'_> {
    /// The settings of the store `C`, layered as the module header says.
    fn settings<C: StoreConfig>(&self) -> anyhow::Result<C> {
        let selector = C::SELECTOR;
        let mut merged = serde_json::Map::new();
        for (name, variable) in C::ENV {
            if let Some(value) = (self.env)(variable) {
                merged.insert((*name).to_owned(), serde_json::Value::String(value));
            }
        }
        if let Some(file) = self.file
            && let Some(serde_json::Value::Object(section)) =
                file.section::<serde_json::Value>(&format!("configuration.{selector}"))?
        {
            merged.extend(section);
        }
        for (name, value) in self.overrides {
            merged.insert(name.clone(), serde_json::Value::String(value.clone()));
        }
        // The OAP types settings leniently ("2379" is a port, "true" a boolean): so does config-rs.
        config::Config::builder()
            .add_source(config::Config::try_from(&serde_json::Value::Object(merged))?)
            .build()?
            .try_deserialize::<C>()
            .with_context(|| format!("invalid `{selector}` store settings"))
    }
}

/// Opens the store `name` selects (a selector or an alias, see [`skyconf_sources::REGISTRY`]),
/// with its settings layered.
pub(crate) fn open(name: &str, limits: Limits, layers: &Layers<'_>) -> anyhow::Result<Box<dyn DynSource>> {
    /// Layers and opens whichever store's settings type it is handed.
    struct Open<'a, 'b> {
        layers: &'a Layers<'b>,
        limits: Limits,
    }

    impl WithStore for Open<'_, '_> {
        type Output = anyhow::Result<Box<dyn DynSource>>;

        fn with<C: StoreConfig>(self) -> Self::Output {
            Ok(self.layers.settings::<C>()?.open(self.limits)?)
        }
    }

    skyconf_sources::with_store(name, Open { layers, limits })
        .with_context(|| format!("the `{name}` store is not built into this binary"))?
}

#[cfg(test)]
mod tests {
    use skyconf_sources::etcd::EtcdSettings;
    use skyconf_sources::zookeeper::ZookeeperSettings;

    use super::*;
    use crate::settings::tests::env;

    #[test]
    fn later_layers_win_and_values_are_typed_leniently() {
        let e = env(&[("SW_CONFIG_ETCD_ENDPOINTS", "http://env:2379"), ("SW_CONFIG_ETCD_NAMESPACE", "/from-env")]);
        let file = ConfigFile::parse("configuration:\n  etcd:\n    namespace: /from-file\n", "f", &e).unwrap();
        let overrides = [("connectTimeoutMs".to_owned(), "1500".to_owned())];
        let layers = Layers { file: Some(&file), overrides: &overrides, env: &e };
        let etcd: EtcdSettings = layers.settings().unwrap();
        assert_eq!(etcd.endpoints, "http://env:2379", "environment over defaults");
        assert_eq!(etcd.namespace, "/from-file", "file over environment");
        assert_eq!(etcd.connect_timeout_ms, 1500, "flags over everything, typed from text");

        let nothing = env(&[]);
        let layers = Layers { file: None, overrides: &[], env: &nothing };
        let zk: ZookeeperSettings = layers.settings().unwrap();
        assert_eq!(zk, ZookeeperSettings::default());
    }

    #[test]
    fn a_misspelt_setting_is_an_error_not_a_default() {
        let nothing = env(&[]);
        let overrides = [("hostport".to_owned(), "x:1".to_owned())];
        let layers = Layers { file: None, overrides: &overrides, env: &nothing };
        assert!(layers.settings::<ZookeeperSettings>().is_err());
    }

    #[test]
    fn store_settings_parse_as_name_equals_value() {
        assert_eq!(parse_setting("a=b=c").unwrap(), ("a".into(), "b=c".into()));
        assert!(parse_setting("novalue").is_err());
        assert!(parse_setting("=x").is_err());
    }
}
