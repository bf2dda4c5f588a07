//! The Nacos store's settings, named and defaulted as in the OAP's `configuration.nacos` section,
//! and the server URLs they make.

use std::time::Duration;

use super::NacosSource;
use crate::registry::redacted;
use crate::{DynSource, Limits, SettingsError, StoreConfig};

/// The Nacos store's settings: the OAP's `configuration.nacos` settings, with its names and
/// defaults (`application.yml`).
#[derive(Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct NacosSettings {
    /// The server's host (`SW_CONFIG_NACOS_SERVER_ADDR`, default `127.0.0.1`), joined with
    /// [`Self::port`] as `addr:port`. A comma-separated list names several servers, tried in turn;
    /// an entry with its own `:port` keeps it, and one starting with `https://` is reached over TLS.
    pub server_addr: String,
    /// The server's HTTP port (`SW_CONFIG_NACOS_SERVER_PORT`, default 8848).
    pub port: u16,
    /// The config group (`SW_CONFIG_NACOS_SERVER_GROUP`, default `skywalking`); must not be empty.
    pub group: String,
    /// The namespace id, Nacos' tenant (`SW_CONFIG_NACOS_SERVER_NAMESPACE`, default empty: the
    /// default namespace).
    pub namespace: String,
    /// A user to log in as (`SW_CONFIG_NACOS_USERNAME`); empty: no login.
    pub username: String,
    /// The user's password (`SW_CONFIG_NACOS_PASSWORD`).
    pub password: String,
    /// An Alibaba Cloud access key to sign requests with (`SW_CONFIG_NACOS_ACCESSKEY`); not
    /// together with a user name.
    pub access_key: String,
    /// The access key's secret (`SW_CONFIG_NACOS_SECRETKEY`).
    pub secret_key: String,
    /// The server's context path (the OAP reads it from its settings only, no variable); empty
    /// means Nacos' default, `nacos`.
    pub context_path: String,
    /// Seconds between full re-reads (`SW_CONFIG_NACOS_PERIOD`, default 60). The OAP polls at
    /// this period; skyconf is pushed every change and re-reads only as a safety net.
    pub period: u64,
}

// The password and the secret key stay out of logs and panics.
impl std::fmt::Debug for NacosSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NacosSettings")
            .field("server_addr", &self.server_addr)
            .field("port", &self.port)
            .field("group", &self.group)
            .field("namespace", &self.namespace)
            .field("username", &self.username)
            .field("password", &redacted(&self.password))
            .field("access_key", &self.access_key)
            .field("secret_key", &redacted(&self.secret_key))
            .field("context_path", &self.context_path)
            .field("period", &self.period)
            .finish()
    }
}

impl Default for NacosSettings {
    fn default() -> Self {
        Self {
            server_addr: "127.0.0.1".to_owned(),
            port: 8848,
            group: "skywalking".to_owned(),
            namespace: String::new(),
            username: String::new(),
            password: String::new(),
            access_key: String::new(),
            secret_key: String::new(),
            context_path: String::new(),
            period: 60,
        }
    }
}

impl StoreConfig for NacosSettings {
    const SELECTOR: &'static str = "nacos";
    /// `contextPath` has no variable.
    const ENV: &'static [(&'static str, &'static str)] = &[
        ("serverAddr", "SW_CONFIG_NACOS_SERVER_ADDR"),
        ("port", "SW_CONFIG_NACOS_SERVER_PORT"),
        ("group", "SW_CONFIG_NACOS_SERVER_GROUP"),
        ("namespace", "SW_CONFIG_NACOS_SERVER_NAMESPACE"),
        ("period", "SW_CONFIG_NACOS_PERIOD"),
        ("username", "SW_CONFIG_NACOS_USERNAME"),
        ("password", "SW_CONFIG_NACOS_PASSWORD"),
        ("accessKey", "SW_CONFIG_NACOS_ACCESSKEY"),
        ("secretKey", "SW_CONFIG_NACOS_SECRETKEY"),
    ];

    fn open(self, limits: Limits) -> Result<Box<dyn DynSource>, SettingsError> {
        Ok(Box::new(NacosSource::with_limits(self, &limits)?))
    }
}

impl NacosSettings {
    /// The base URL of each server: `http://addr:port/{contextPath}`.
    pub(super) fn bases(&self) -> Vec<String> {
        let context = match self.context_path.trim_matches('/') {
            "" => "nacos",
            path => path,
        };
        self.server_addr
            .split(',')
            .map(str::trim)
            .filter(|addr| !addr.is_empty())
            .map(|addr| {
                let (scheme, host) = match addr.split_once("://") {
                    Some((scheme, host)) => (scheme, host.trim_end_matches('/')),
                    None => ("http", addr),
                };
                // A bracketed IPv6 address has colons of its own; a port follows the bracket.
                let has_port = match host.rsplit_once(']') {
                    Some((_, rest)) => rest.starts_with(':'),
                    None => host.contains(':'),
                };
                let port = if has_port { String::new() } else { format!(":{}", self.port) };
                format!("{scheme}://{host}{port}/{context}")
            })
            .collect()
    }

    /// The safety-net period.
    pub(super) fn safety_net(&self) -> Duration {
        // The OAP would refuse 0 (a fixed-rate schedule needs a positive period); skyconf uses 1 s.
        Duration::from_secs(self.period.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_names_are_the_oaps() {
        let settings = NacosSettings::default();
        assert_eq!(settings.bases(), ["http://127.0.0.1:8848/nacos"]);
        assert_eq!(settings.group, "skywalking");
        assert_eq!(settings.safety_net(), Duration::from_secs(60));
        let yaml = r#"{"serverAddr": "nacos.local", "port": 9000, "group": "g", "namespace": "ns",
            "username": "u", "password": "p", "contextPath": "/ctx/", "period": 5}"#;
        let parsed: NacosSettings = serde_json::from_str(yaml).unwrap();
        assert_eq!(parsed.bases(), ["http://nacos.local:9000/ctx"]);
        assert_eq!((parsed.namespace.as_str(), parsed.period), ("ns", 5));
        let keys: NacosSettings = serde_json::from_str(r#"{"accessKey": "ak", "secretKey": "sk"}"#).unwrap();
        assert_eq!((keys.access_key.as_str(), keys.secret_key.as_str()), ("ak", "sk"));
        assert!(serde_json::from_str::<NacosSettings>(r#"{"serverAdr": "x"}"#).is_err(), "typos are refused");
        assert_eq!(NacosSettings::ENV.len(), 9);
    }

    #[test]
    fn server_lists_keep_their_own_ports_and_schemes() {
        let settings = NacosSettings {
            server_addr: "a, b:9, https://c, [::1], [::1]:7, http://d:1/".into(),
            ..NacosSettings::default()
        };
        assert_eq!(
            settings.bases(),
            [
                "http://a:8848/nacos",
                "http://b:9/nacos",
                "https://c:8848/nacos",
                "http://[::1]:8848/nacos",
                "http://[::1]:7/nacos",
                "http://d:1/nacos"
            ]
        );
    }
}
