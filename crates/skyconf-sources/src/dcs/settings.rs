//! The DCS store's settings, named and defaulted as in the OAP's `configuration.grpc` section.

use serde::Deserialize;

use super::DcsSource;
use crate::{DynSource, Limits, SettingsError, StoreConfig};

/// Settings of the `grpc` selector, named as in the OAP's `application.yml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct DcsSettings {
    /// The DCS server's host (`SW_DCS_SERVER_HOST`); required.
    pub host: String,
    /// Its port (`SW_DCS_SERVER_PORT`, default 80).
    pub port: u16,
    /// The cluster name sent with every request (`SW_DCS_CLUSTER_NAME`, default `SkyWalking`).
    pub cluster_name: String,
    /// Seconds between polls (`SW_DCS_PERIOD`, default 20).
    pub period: u64,
    /// The largest response accepted, in bytes (`SW_DCS_MAX_INBOUND_MESSAGE_SIZE`, default 4 MiB).
    pub max_inbound_message_size: usize,
}

impl Default for DcsSettings {
    fn default() -> Self {
        Self {
            host: String::new(),
            port: 80,
            cluster_name: "SkyWalking".to_owned(),
            period: 20,
            max_inbound_message_size: 4 * 1024 * 1024,
        }
    }
}

impl StoreConfig for DcsSettings {
    const SELECTOR: &'static str = "grpc";
    const ALIASES: &'static [&'static str] = &["dcs"];
    const ENV: &'static [(&'static str, &'static str)] = &[
        ("host", "SW_DCS_SERVER_HOST"),
        ("port", "SW_DCS_SERVER_PORT"),
        ("clusterName", "SW_DCS_CLUSTER_NAME"),
        ("period", "SW_DCS_PERIOD"),
        ("maxInboundMessageSize", "SW_DCS_MAX_INBOUND_MESSAGE_SIZE"),
    ];

    /// `maxInboundMessageSize` bounds what is read; `limits` is not needed.
    fn open(self, _limits: Limits) -> Result<Box<dyn DynSource>, SettingsError> {
        Ok(Box::new(DcsSource::new(self)?))
    }
}
