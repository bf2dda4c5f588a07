//! The ZooKeeper store's settings, named as in the OAP's `configuration.zookeeper` section so an
//! operator can carry them over unchanged, and their validation.

use std::time::Duration;

use super::ZookeeperSource;
use crate::{Backoff, DynSource, Limits, SettingsError, StoreConfig};

/// The OAP's ZooKeeper settings (`configuration: zookeeper:` in its `application.yml`), with its
/// defaults. Unknown names are refused so a typo does not silently fall back to a default.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ZookeeperSettings {
    /// `hostPort` (`SW_CONFIG_ZK_HOST_PORT`): the ensemble, `host:port` comma-separated. A
    /// trailing `/path` is a chroot, as in ZooKeeper's own connection strings.
    pub host_port: String,
    /// `namespace` (`SW_CONFIG_ZK_NAMESPACE`): the znode holding one child per key. Must be an
    /// absolute path; `/` means the keys are children of the root.
    pub namespace: String,
    /// `baseSleepTimeMs`: the first delay before a new session is attempted after one is lost.
    pub base_sleep_time_ms: u64,
    /// `maxRetries`: how many times that delay doubles at most. skyconf never gives up; the
    /// delay just stops growing.
    pub max_retries: u32,
    /// `period` (`SW_CONFIG_ZK_PERIOD`): the OAP's polling period in seconds. Accepted for
    /// compatibility and ignored: skyconf watches the namespace and sees changes at once.
    pub period: u64,
}

impl Default for ZookeeperSettings {
    fn default() -> Self {
        Self {
            host_port: "localhost:2181".to_owned(),
            namespace: "/default".to_owned(),
            base_sleep_time_ms: 1000,
            max_retries: 3,
            period: 60,
        }
    }
}

impl StoreConfig for ZookeeperSettings {
    const SELECTOR: &'static str = "zookeeper";
    const ENV: &'static [(&'static str, &'static str)] = &[
        ("period", "SW_CONFIG_ZK_PERIOD"),
        ("namespace", "SW_CONFIG_ZK_NAMESPACE"),
        ("hostPort", "SW_CONFIG_ZK_HOST_PORT"),
    ];

    /// ZooKeeper's own packet limit bounds the values; `limits` is not needed.
    fn open(self, _limits: Limits) -> Result<Box<dyn DynSource>, SettingsError> {
        Ok(Box::new(ZookeeperSource::new(self)?))
    }
}

impl ZookeeperSettings {
    /// The namespace as a path prefix: no trailing `/`, and empty for the root.
    pub(crate) fn namespace_prefix(&self) -> Result<String, SettingsError> {
        let namespace = self.namespace.trim();
        if namespace.is_empty() {
            return Err(Self::invalid("namespace must not be empty"));
        }
        if !namespace.starts_with('/') {
            return Err(Self::invalid(format!("namespace `{namespace}` must start with `/`")));
        }
        let prefix = namespace.trim_end_matches('/');
        let bad_segment = prefix.split('/').skip(1).any(|s| s.is_empty() || s == "." || s == "..");
        if bad_segment || prefix.contains('\0') {
            return Err(Self::invalid(format!("namespace `{namespace}` is not a valid znode path")));
        }
        Ok(prefix.to_owned())
    }

    /// The connection string, checked for content.
    pub(crate) fn connect_string(&self) -> Result<String, SettingsError> {
        let hosts = self.host_port.trim();
        if hosts.is_empty() || hosts.split(',').any(|h| h.trim().is_empty()) {
            return Err(Self::invalid(format!("hostPort `{hosts}` must list host:port pairs")));
        }
        Ok(hosts.split(',').map(str::trim).collect::<Vec<_>>().join(","))
    }

    /// The reconnect backoff: `baseSleepTimeMs`, doubling `maxRetries` times at most.
    pub(crate) fn backoff(&self) -> Backoff {
        let base = Duration::from_millis(self.base_sleep_time_ms.max(1));
        Backoff::new(base, base.saturating_mul(1 << self.max_retries.min(16)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_oap_ones() {
        let s = ZookeeperSettings::default();
        assert_eq!(s.host_port, "localhost:2181");
        assert_eq!(s.namespace, "/default");
        assert_eq!((s.base_sleep_time_ms, s.max_retries, s.period), (1000, 3, 60));
    }

    #[test]
    fn deserializes_the_oap_names_and_refuses_others() {
        let s: ZookeeperSettings =
            serde_json::from_str(r#"{"hostPort": "a:1,b:2", "namespace": "/sw", "baseSleepTimeMs": 50}"#).unwrap();
        assert_eq!(s.host_port, "a:1,b:2");
        assert_eq!(s.namespace, "/sw");
        assert_eq!(s.base_sleep_time_ms, 50);
        assert_eq!(s.max_retries, 3, "missing names keep their default");
        assert!(serde_json::from_str::<ZookeeperSettings>(r#"{"hostport": "a:1"}"#).is_err());
    }

    #[test]
    fn namespaces_are_normalised_or_refused() {
        let ns = |n: &str| ZookeeperSettings { namespace: n.to_owned(), ..Default::default() }.namespace_prefix();
        assert_eq!(ns("/default").unwrap(), "/default");
        assert_eq!(ns("/a/b/").unwrap(), "/a/b");
        assert_eq!(ns("/").unwrap(), "", "the root");
        for bad in ["", "  ", "default", "/a//b", "/a/../b", "/a/."] {
            assert!(ns(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn host_port_must_name_hosts() {
        let hp = |h: &str| ZookeeperSettings { host_port: h.to_owned(), ..Default::default() }.connect_string();
        assert_eq!(hp(" a:1, b:2 ").unwrap(), "a:1,b:2");
        assert!(hp("").is_err());
        assert!(hp("a:1,,b:2").is_err());
    }

    #[test]
    fn backoff_is_capped_by_max_retries() {
        let s = ZookeeperSettings { base_sleep_time_ms: 100, max_retries: 2, ..Default::default() };
        let mut b = s.backoff();
        let delays: Vec<_> = (0..6).map(|_| b.next_delay()).collect();
        assert!(delays.iter().all(|d| *d <= Duration::from_millis(400)), "{delays:?}");
    }
}
