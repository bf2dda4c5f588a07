//! The etcd store's settings, named as in the OAP's `configuration.etcd` section so an operator
//! can carry them over unchanged, plus skyconf's own TLS and timeout settings; and their
//! validation into what the client needs.

use std::path::PathBuf;
use std::time::Duration;

use super::EtcdSource;
use crate::registry::redacted;
use crate::{DynSource, Limits, SettingsError, StoreConfig};

/// The OAP's etcd settings (`configuration: etcd:` in its `application.yml`) with its defaults,
/// plus TLS and a connect timeout. Unknown names are refused so a typo does not silently fall
/// back to a default.
#[derive(Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct EtcdSettings {
    /// `endpoints` (`SW_CONFIG_ETCD_ENDPOINTS`): comma-separated URLs, `http://` or `https://`.
    /// Tried in turn until one answers.
    pub endpoints: String,
    /// `namespace` (`SW_CONFIG_ETCD_NAMESPACE`): the prefix of every key; a key is stored at
    /// `{namespace}/{key}` (a trailing `/` on the namespace is not doubled). Empty: no prefix.
    pub namespace: String,
    /// `authentication` (`SW_CONFIG_ETCD_AUTHENTICATION`): log in with `user` and `password`.
    pub authentication: bool,
    /// `user` (`SW_CONFIG_ETCD_USER`).
    pub user: String,
    /// `password` (`SW_CONFIG_ETCD_password`, lower case as in the OAP).
    pub password: String,
    /// `period` (`SW_CONFIG_ETCD_PERIOD`): the OAP's polling period in seconds. Accepted for
    /// compatibility and ignored: skyconf watches the namespace and sees changes at once.
    pub period: u64,
    /// `authority`: the server name TLS verifies, when it differs from the endpoints' host
    /// (code-only in the OAP, where it sets the gRPC authority).
    pub authority: Option<String>,
    /// `caFile` (skyconf's own): PEM certificates that sign the servers'. Without it, `https://`
    /// endpoints are verified against the system's roots.
    pub ca_file: Option<PathBuf>,
    /// `certFile` (skyconf's own): a PEM client certificate, for servers that require one.
    pub cert_file: Option<PathBuf>,
    /// `keyFile` (skyconf's own): the PEM private key of `certFile`.
    pub key_file: Option<PathBuf>,
    /// `connectTimeoutMs` (skyconf's own): how long connecting to one endpoint, or one request,
    /// may take before the next endpoint is tried or the store counts as down.
    pub connect_timeout_ms: u64,
}

impl Default for EtcdSettings {
    fn default() -> Self {
        Self {
            endpoints: "http://localhost:2379".to_owned(),
            namespace: "/skywalking".to_owned(),
            authentication: false,
            user: String::new(),
            password: String::new(),
            period: 60,
            authority: None,
            ca_file: None,
            cert_file: None,
            key_file: None,
            connect_timeout_ms: 5000,
        }
    }
}

// The password stays out of logs and panics.
impl std::fmt::Debug for EtcdSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdSettings")
            .field("endpoints", &self.endpoints)
            .field("namespace", &self.namespace)
            .field("authentication", &self.authentication)
            .field("user", &self.user)
            .field("password", &redacted(&self.password))
            .field("period", &self.period)
            .field("authority", &self.authority)
            .field("ca_file", &self.ca_file)
            .field("cert_file", &self.cert_file)
            .field("key_file", &self.key_file)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .finish()
    }
}

impl StoreConfig for EtcdSettings {
    const SELECTOR: &'static str = "etcd";
    /// The last four are skyconf's own names for settings the OAP does not have.
    const ENV: &'static [(&'static str, &'static str)] = &[
        ("endpoints", "SW_CONFIG_ETCD_ENDPOINTS"),
        ("namespace", "SW_CONFIG_ETCD_NAMESPACE"),
        ("authentication", "SW_CONFIG_ETCD_AUTHENTICATION"),
        ("user", "SW_CONFIG_ETCD_USER"),
        ("password", "SW_CONFIG_ETCD_password"),
        ("period", "SW_CONFIG_ETCD_PERIOD"),
        ("caFile", "SW_CONFIG_ETCD_CA_FILE"),
        ("certFile", "SW_CONFIG_ETCD_CERT_FILE"),
        ("keyFile", "SW_CONFIG_ETCD_KEY_FILE"),
        ("connectTimeoutMs", "SW_CONFIG_ETCD_CONNECT_TIMEOUT_MS"),
    ];

    fn open(self, limits: Limits) -> Result<Box<dyn DynSource>, SettingsError> {
        Ok(Box::new(EtcdSource::new(self)?.with_limits(limits)))
    }
}

impl EtcdSettings {
    /// The endpoint URLs, trimmed, in order. Fails like the OAP on an empty list.
    pub(crate) fn endpoint_list(&self) -> Result<Vec<String>, SettingsError> {
        let list: Vec<String> =
            self.endpoints.split(',').map(str::trim).filter(|e| !e.is_empty()).map(str::to_owned).collect();
        if list.is_empty() {
            return Err(Self::invalid("endpoints must not be empty"));
        }
        for endpoint in &list {
            let Some((scheme, rest)) = endpoint.split_once("://") else {
                return Err(Self::invalid(format!("endpoint `{endpoint}` must start with http:// or https://")));
            };
            if !matches!(scheme, "http" | "https") || rest.is_empty() {
                return Err(Self::invalid(format!("endpoint `{endpoint}` must start with http:// or https://")));
            }
        }
        Ok(list)
    }

    /// The prefix every key is stored under: the namespace with exactly one `/` after it, or
    /// nothing when the namespace is empty (as the OAP appends a missing `/`).
    pub(crate) fn key_prefix(&self) -> String {
        let namespace = self.namespace.trim();
        if namespace.is_empty() || namespace.ends_with('/') { namespace.to_owned() } else { format!("{namespace}/") }
    }

    /// Checks everything that can be checked without contacting the store.
    pub(crate) fn validate(&self) -> Result<(), SettingsError> {
        self.endpoint_list()?;
        if self.authentication && self.user.is_empty() {
            return Err(Self::invalid("authentication is on but no user is set"));
        }
        if self.cert_file.is_some() != self.key_file.is_some() {
            return Err(Self::invalid("certFile and keyFile go together"));
        }
        if self.connect_timeout_ms == 0 {
            return Err(Self::invalid("connectTimeoutMs must be positive"));
        }
        Ok(())
    }

    /// The connect and request timeout.
    pub(crate) fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_timeout_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_oaps() {
        let s = EtcdSettings::default();
        assert_eq!(s.endpoint_list().unwrap(), ["http://localhost:2379"]);
        assert_eq!(s.key_prefix(), "/skywalking/");
        assert!(!s.authentication);
        assert_eq!(s.period, 60);
        assert!(s.validate().is_ok());
    }

    #[test]
    fn the_namespace_gets_one_slash() {
        let with = |namespace: &str| EtcdSettings { namespace: namespace.to_owned(), ..Default::default() };
        assert_eq!(with("/skywalking/").key_prefix(), "/skywalking/", "the OAP's IT writes it with the slash");
        assert_eq!(with("sw").key_prefix(), "sw/");
        assert_eq!(with("").key_prefix(), "", "empty: no namespace");
        assert_eq!(with("/").key_prefix(), "/");
    }

    #[test]
    fn refuses_what_cannot_work() {
        let bad = |s: EtcdSettings| s.validate().unwrap_err().message;
        assert!(bad(EtcdSettings { endpoints: " , ".into(), ..Default::default() }).contains("empty"));
        assert!(bad(EtcdSettings { endpoints: "localhost:2379".into(), ..Default::default() }).contains("http"));
        assert!(bad(EtcdSettings { authentication: true, ..Default::default() }).contains("user"));
        assert!(bad(EtcdSettings { cert_file: Some("c.pem".into()), ..Default::default() }).contains("keyFile"));
        let two = EtcdSettings { endpoints: "http://a:1, https://b:2".into(), ..Default::default() };
        assert_eq!(two.endpoint_list().unwrap(), ["http://a:1", "https://b:2"]);
    }

    #[test]
    fn reads_the_oaps_names_and_refuses_unknown_ones() {
        let s: EtcdSettings = serde_json::from_str(
            r#"{"endpoints": "http://a:1", "namespace": "/sw/", "authentication": true, "user": "u",
                "password": "p", "period": 1, "caFile": "/ca.pem", "connectTimeoutMs": 100}"#,
        )
        .unwrap();
        assert_eq!(s.key_prefix(), "/sw/");
        assert_eq!(s.ca_file.as_deref(), Some(std::path::Path::new("/ca.pem")));
        assert_eq!(s.connect_timeout(), Duration::from_millis(100));
        assert!(serde_json::from_str::<EtcdSettings>(r#"{"endpoint": "http://a:1"}"#).is_err());
    }

    #[test]
    fn debug_hides_the_password() {
        let s = EtcdSettings { password: "hunter2".into(), ..Default::default() };
        assert!(!format!("{s:?}").contains("hunter2"));
    }
}
