//! Choosing and opening the store `serve` watches.
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

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use serde::de::DeserializeOwned;
use skyconf_sources::dcs::{DcsSettings, DcsSource};
use skyconf_sources::etcd::{EtcdSettings, EtcdSource};
use skyconf_sources::file::FileSource;
use skyconf_sources::nacos::{NacosSettings, NacosSource};
use skyconf_sources::zookeeper::{ZookeeperSettings, ZookeeperSource};
use skyconf_sources::{Limits, NoStore};

use crate::settings::ConfigFile;

/// Each store's settings and the `SW_*` variable the OAP's application.yml reads them from
/// (behaviour reference §3.5).
const ENV: &[(&str, &[(&str, &str)])] = &[
    (
        "grpc",
        &[
            ("host", "SW_DCS_SERVER_HOST"),
            ("port", "SW_DCS_SERVER_PORT"),
            ("clusterName", "SW_DCS_CLUSTER_NAME"),
            ("period", "SW_DCS_PERIOD"),
            ("maxInboundMessageSize", "SW_DCS_MAX_INBOUND_MESSAGE_SIZE"),
        ],
    ),
    ("etcd", skyconf_sources::etcd::ENV_NAMES),
    (
        "zookeeper",
        &[
            ("period", "SW_CONFIG_ZK_PERIOD"),
            ("namespace", "SW_CONFIG_ZK_NAMESPACE"),
            ("hostPort", "SW_CONFIG_ZK_HOST_PORT"),
        ],
    ),
    ("nacos", NacosSettings::ENV),
];

/// `NAME=VALUE`.
pub(crate) fn parse_setting(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.trim().to_owned(), v.to_owned()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("expected NAME=VALUE, got `{text}`"))
}

/// The opened store.
#[derive(Debug)]
pub(crate) enum Store {
    File(FileSource),
    Dcs(DcsSource),
    Etcd(EtcdSource),
    Zookeeper(ZookeeperSource),
    Nacos(NacosSource),
    None(NoStore),
}

/// Where a store's settings come from.
pub(crate) struct Layers<'a> {
    pub(crate) file: Option<&'a ConfigFile>,
    pub(crate) overrides: &'a [(String, String)],
    pub(crate) env: &'a dyn Fn(&str) -> Option<String>,
}

impl Layers<'_> {
    /// The settings of `selector`, layered as the module header says.
    fn settings<T: DeserializeOwned>(&self, selector: &str) -> anyhow::Result<T> {
        let mut merged = serde_json::Map::new();
        let env_names = ENV.iter().find(|(s, _)| *s == selector).map_or(&[][..], |(_, names)| *names);
        for (name, variable) in env_names {
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
            .try_deserialize::<T>()
            .with_context(|| format!("invalid `{selector}` store settings"))
    }
}

/// Opens the store named by `selector` (canonical: see `settings::canonical_selector`).
pub(crate) fn open(
    selector: &str,
    file_path: Option<PathBuf>,
    limits: Limits,
    layers: &Layers<'_>,
) -> anyhow::Result<Store> {
    Ok(match selector {
        "file" => {
            let path = match file_path {
                Some(path) => path,
                None => {
                    #[derive(serde::Deserialize, Default)]
                    #[serde(default)]
                    struct FileSection {
                        path: Option<PathBuf>,
                    }
                    layers
                        .settings::<FileSection>("file")?
                        .path
                        .context("the file store needs a path: --file PATH or configuration.file.path")?
                }
            };
            Store::File(FileSource::open(path).with_limits(limits))
        }
        "grpc" => Store::Dcs(DcsSource::new(layers.settings::<DcsSettings>("grpc")?)?),
        "etcd" => Store::Etcd(EtcdSource::new(layers.settings::<EtcdSettings>("etcd")?)?),
        "zookeeper" => Store::Zookeeper(ZookeeperSource::new(layers.settings::<ZookeeperSettings>("zookeeper")?)?),
        "nacos" => Store::Nacos(NacosSource::new(layers.settings::<NacosSettings>("nacos")?)?),
        "none" => Store::None(NoStore),
        other => bail!("the `{other}` store is not built into this binary"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| (*v).to_owned())
    }

    #[test]
    fn later_layers_win_and_values_are_typed_leniently() {
        let e = env(&[("SW_CONFIG_ETCD_ENDPOINTS", "http://env:2379"), ("SW_CONFIG_ETCD_NAMESPACE", "/from-env")]);
        let file = ConfigFile::parse("configuration:\n  etcd:\n    namespace: /from-file\n", "f", &e).unwrap();
        let overrides = [("connectTimeoutMs".to_owned(), "1500".to_owned())];
        let layers = Layers { file: Some(&file), overrides: &overrides, env: &e };
        let etcd: EtcdSettings = layers.settings("etcd").unwrap();
        assert_eq!(etcd.endpoints, "http://env:2379", "environment over defaults");
        assert_eq!(etcd.namespace, "/from-file", "file over environment");
        assert_eq!(etcd.connect_timeout_ms, 1500, "flags over everything, typed from text");

        let nothing = env(&[]);
        let layers = Layers { file: None, overrides: &[], env: &nothing };
        let zk: ZookeeperSettings = layers.settings("zookeeper").unwrap();
        assert_eq!(zk, ZookeeperSettings::default());
    }

    #[test]
    fn a_misspelt_setting_is_an_error_not_a_default() {
        let nothing = env(&[]);
        let overrides = [("hostport".to_owned(), "x:1".to_owned())];
        let layers = Layers { file: None, overrides: &overrides, env: &nothing };
        assert!(layers.settings::<ZookeeperSettings>("zookeeper").is_err());
    }

    #[test]
    fn store_settings_parse_as_name_equals_value() {
        assert_eq!(parse_setting("a=b=c").unwrap(), ("a".into(), "b=c".into()));
        assert!(parse_setting("novalue").is_err());
        assert!(parse_setting("=x").is_err());
    }
}
