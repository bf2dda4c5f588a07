//! The server's settings: defaults, then a config file, then `SKYCONF_*` environment variables and
//! flags (clap), merged once into a validated [`ServePlan`].
//!
//! The config file is skyconf's own `skyconf.yaml` or an OAP `application.yml` as it is: skyconf
//! reads its `configuration:` and `configuration-discovery:` sections with the OAP's selector
//! names, setting names and `${SW_*:default}` placeholders (resolved from the environment, as the
//! OAP resolves them), and ignores every other module's section. skyconf's own settings live under
//! `skyconf:`.
//!
//! ```yaml
//! skyconf:
//!   grpcAddr: 0.0.0.0:11800
//!   adminAddr: 0.0.0.0:12800
//!   dataDir: /var/lib/skyconf
//! configuration:
//!   selector: ${SW_CONFIGURATION:etcd}
//!   etcd:
//!     endpoints: ${SW_CONFIG_ETCD_ENDPOINTS:http://localhost:2379}
//!     namespace: ${SW_CONFIG_ETCD_NAMESPACE:/skywalking}
//! configuration-discovery:
//!   selector: ${SW_CONFIGURATION_DISCOVERY:default}
//!   default:
//!     disableMessageDigest: ${SW_DISABLE_MESSAGE_DIGEST:false}
//! receiver-sharing-server:
//!   default:
//!     authentication: ${SW_AUTHENTICATION:""}
//! ```
//!
//! Held polls live under `skyconf.holdPolls` (`enabled`, `minDeadlineSecs`, `withoutDeadline`,
//! `capSecs`, `maxHeld`, `maxHeldPerConnection`, `maxHeldPerSource`).
//!
//! The OpAMP port lives under `skyconf.opamp` (`addr: 0.0.0.0:4320`; off without it).
//!
//! Gateway mode lives under `skyconf.gateway` (`upstreams: [oap-0:11800]`, `tls: {ca, cert, key,
//! serverName}`, `connectionsPerUpstream`, `maxConnectionsPerUpstream`, `maxQueuedCalls`,
//! `queueWaitSecs`).
//!
//! Security settings live under `skyconf.security` (tokens, TLS) and `skyconf.limits`; the agent
//! token can also come from the OAP's own `receiver-sharing-server.default.authentication`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use std::time::Duration;

use anyhow::{Context as _, bail};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use skyconf_core::suggest::did_you_mean;
use skyconf_server::security::{ClientAuth, ClientCerts, ConnectionLimits, GrpcLimits, Secret, TlsFiles};
use skyconf_sources::StoreEntry;

/// skyconf's own section.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub(crate) struct SkyconfSection {
    pub(crate) grpc_addr: Option<SocketAddr>,
    pub(crate) admin_addr: Option<SocketAddr>,
    pub(crate) data_dir: Option<PathBuf>,
    pub(crate) max_document_bytes: Option<u64>,
    /// Single keys to watch besides the OAP's own (stores that cannot list their keys).
    pub(crate) extra_keys: Vec<String>,
    /// How long a store change that would reset the fleet is held before it is installed
    /// anyway, in seconds (`0` turns the guard off).
    pub(crate) reset_grace_secs: Option<u64>,
    /// The share of served services (percent) a store change must drop to be held (`0`: off).
    pub(crate) reset_drop_percent: Option<u8>,
    /// This replica's id among the replicas sharing the store (`--replica-name`).
    pub(crate) replica_name: Option<String>,
    /// Tokens and TLS.
    pub(crate) security: SecuritySection,
    /// Connection limits of the gRPC port.
    pub(crate) limits: LimitsSection,
    /// Gateway mode: the OAPs behind skyconf.
    pub(crate) gateway: GatewaySection,
    /// Held polls.
    pub(crate) hold_polls: HoldSection,
    /// The OpAMP port.
    pub(crate) opamp: OpampSection,
}

/// `skyconf.opamp`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub(crate) struct OpampSection {
    /// Where OpAMP is served (`None`: off).
    pub(crate) addr: Option<SocketAddr>,
}

/// `skyconf.holdPolls`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub(crate) struct HoldSection {
    /// Whether unchanged polls are held [default: true].
    pub(crate) enabled: Option<bool>,
    /// The shortest deadline a poll must carry to be held, in seconds.
    pub(crate) min_deadline_secs: Option<u64>,
    /// `never`, `go-agents` or `all`.
    pub(crate) without_deadline: Option<skyconf_server::cds::hold::NoDeadline>,
    /// How long a poll is held at most, with or without a deadline, in seconds.
    pub(crate) cap_secs: Option<u64>,
    /// Held polls at once, in all.
    pub(crate) max_held: Option<usize>,
    /// Held polls at once on one connection.
    pub(crate) max_held_per_connection: Option<usize>,
    /// Held polls at once from one source address [default: a quarter of `maxHeld`].
    pub(crate) max_held_per_source: Option<usize>,
}

/// `skyconf.gateway`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub(crate) struct GatewaySection {
    /// The OAPs, as `host:port`.
    pub(crate) upstreams: Vec<String>,
    /// HTTP/2 connections kept open to each OAP [default: 2].
    pub(crate) connections_per_upstream: Option<usize>,
    /// The most HTTP/2 connections to one OAP, opened while every stream it allows on the open
    /// ones is in use [default: 16].
    pub(crate) max_connections_per_upstream: Option<usize>,
    /// The most calls waiting for a stream to one OAP [default: 1024].
    pub(crate) max_queued_calls: Option<usize>,
    /// How long a call waits for a stream at most, in seconds [default: 10].
    pub(crate) queue_wait_secs: Option<u64>,
    /// TLS towards the OAPs.
    pub(crate) tls: UpstreamTlsSettings,
}

/// `skyconf.gateway.tls`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub(crate) struct UpstreamTlsSettings {
    /// The CA bundle the OAPs' certificates chain to (turns TLS on).
    pub(crate) ca: Option<PathBuf>,
    /// skyconf's client certificate chain.
    pub(crate) cert: Option<PathBuf>,
    /// Its key.
    pub(crate) key: Option<PathBuf>,
    /// The name the OAPs' certificates are checked against.
    pub(crate) server_name: Option<String>,
}

/// `skyconf.security`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub(crate) struct SecuritySection {
    /// The agents' token (gRPC metadata `Authentication`); wins over the OAP's setting.
    pub(crate) agent_token: Option<Secret>,
    /// The token of the DCS service (stock OAPs send none: setting it locks them out).
    pub(crate) dcs_service_token: Option<Secret>,
    /// Admin API bearer tokens.
    pub(crate) admin: AdminSecuritySection,
    /// TLS per port.
    pub(crate) tls: TlsSection,
}

/// `skyconf.security.admin`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub(crate) struct AdminSecuritySection {
    /// Tokens that may read.
    pub(crate) read_tokens: Vec<Secret>,
    /// Tokens that may read and write.
    pub(crate) write_tokens: Vec<Secret>,
    /// Files of `read <token>` / `write <token>` lines.
    pub(crate) token_files: Vec<PathBuf>,
    /// `/metrics` without a token.
    pub(crate) metrics_open: bool,
    /// Host names the admin port answers to besides IP literals and `localhost`; `*`: any.
    pub(crate) allowed_hosts: Vec<String>,
}

/// `skyconf.security.tls`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub(crate) struct TlsSection {
    pub(crate) grpc: TlsSettings,
    pub(crate) admin: TlsSettings,
    pub(crate) opamp: TlsSettings,
}

/// The PEM files of one port.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub(crate) struct TlsSettings {
    pub(crate) cert: Option<PathBuf>,
    pub(crate) key: Option<PathBuf>,
    /// CA bundle client certificates must chain to.
    pub(crate) client_ca: Option<PathBuf>,
    /// `require` (default) or `request`.
    pub(crate) client_auth: Option<ClientAuth>,
}

impl TlsSettings {
    /// The files, once both the certificate and its key are given; `what` names the flags.
    pub(crate) fn resolve(&self, what: &str) -> anyhow::Result<Option<TlsFiles>> {
        let client_certs =
            self.client_ca.clone().map(|ca| ClientCerts { ca, auth: self.client_auth.unwrap_or_default() });
        match (&self.cert, &self.key) {
            (None, None) if client_certs.is_none() => Ok(None),
            (Some(cert), Some(key)) => Ok(Some(TlsFiles { cert: cert.clone(), key: key.clone(), client_certs })),
            _ => bail!("TLS on the {what} port needs both --{what}-tls-cert and --{what}-tls-key"),
        }
    }
}

/// `skyconf.limits`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub(crate) struct LimitsSection {
    /// HTTP/2 `SETTINGS_MAX_HEADER_LIST_SIZE` of the gRPC port, in bytes.
    pub(crate) grpc_max_header_list_bytes: Option<u32>,
    /// Concurrent calls per gRPC connection.
    pub(crate) grpc_max_concurrent_streams: Option<u32>,
    /// Seconds between keep-alive pings on an idle gRPC connection; 0: none.
    pub(crate) grpc_keepalive_interval_secs: Option<u64>,
    /// Seconds a keep-alive ping may go unanswered.
    pub(crate) grpc_keepalive_timeout_secs: Option<u64>,
    /// Milliseconds a gRPC call's request message may take to arrive after its headers.
    pub(crate) grpc_request_message_timeout_ms: Option<u64>,
    /// Milliseconds a new connection (either port) may take to send its opening bytes.
    pub(crate) handshake_timeout_ms: Option<u64>,
    /// Concurrent connections on the gRPC port (default: below the open-file limit).
    pub(crate) grpc_max_connections: Option<usize>,
    /// Concurrent connections on the gRPC port from one source address (default: a quarter).
    pub(crate) grpc_max_connections_per_source: Option<usize>,
    /// gRPC calls waiting for their request message at once, in all.
    pub(crate) grpc_max_pending_streams: Option<usize>,
    /// The same from one source address (default: a quarter).
    pub(crate) grpc_max_pending_streams_per_source: Option<usize>,
    /// Concurrent connections on the admin port.
    pub(crate) admin_max_connections: Option<usize>,
    /// The gRPC port's HTTP/2 server, `hyper` or `own` (default: `SKYCONF_AGENT_HTTP2`, else own).
    pub(crate) grpc_http2_server: Option<skyconf_server::agent_port::Http2Server>,
}

impl LimitsSection {
    /// The limits, defaults filled in.
    pub(crate) fn resolve(&self) -> GrpcLimits {
        let defaults = GrpcLimits::default();
        GrpcLimits {
            max_header_list_bytes: self.grpc_max_header_list_bytes.unwrap_or(defaults.max_header_list_bytes),
            max_concurrent_streams: self.grpc_max_concurrent_streams.unwrap_or(defaults.max_concurrent_streams),
            keepalive_interval: match self.grpc_keepalive_interval_secs {
                Some(0) => None,
                Some(secs) => Some(Duration::from_secs(secs)),
                None => defaults.keepalive_interval,
            },
            keepalive_timeout: self.grpc_keepalive_timeout_secs.map_or(defaults.keepalive_timeout, Duration::from_secs),
            request_message_timeout: self
                .grpc_request_message_timeout_ms
                .map_or(defaults.request_message_timeout, Duration::from_millis),
            max_pending_streams: self.grpc_max_pending_streams.unwrap_or(defaults.max_pending_streams),
            max_pending_streams_per_source: self
                .grpc_max_pending_streams_per_source
                .or(defaults.max_pending_streams_per_source),
            http2_server: self.grpc_http2_server.unwrap_or(defaults.http2_server),
            ..defaults
        }
    }

    /// The connection limits, defaults filled in.
    pub(crate) fn connections(&self) -> ConnectionLimits {
        let defaults = ConnectionLimits::default();
        ConnectionLimits {
            handshake_timeout: self.handshake_timeout_ms.map_or(defaults.handshake_timeout, Duration::from_millis),
            max_grpc_connections: self.grpc_max_connections.or(defaults.max_grpc_connections),
            max_grpc_connections_per_source: self
                .grpc_max_connections_per_source
                .or(defaults.max_grpc_connections_per_source),
            max_admin_connections: self.admin_max_connections.unwrap_or(defaults.max_admin_connections),
        }
    }
}

/// The OAP's `receiver-sharing-server.default` section: only its token is read.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct SharingServerSection {
    /// `SW_AUTHENTICATION`: the agents' token; empty means none.
    pub(crate) authentication: Option<Secret>,
}

/// The YAML reader's messages, but in the user's words where its own would name the reader's
/// options (a key written twice: "set DuplicateKeyPolicy in Options").
struct UserWords;

impl serde_saphyr::MessageFormatter for UserWords {
    fn format_message<'a>(&self, error: &'a serde_saphyr::Error) -> std::borrow::Cow<'a, str> {
        match error {
            serde_saphyr::Error::DuplicateMappingKey { key: Some(key), .. } => {
                format!("`{key}` is written twice in one section; keep one").into()
            }
            serde_saphyr::Error::DuplicateMappingKey { key: None, .. } => {
                "a key is written twice in one section; keep one".into()
            }
            other => serde_saphyr::DefaultMessageFormatter.format_message(other),
        }
    }
}

/// A parsed config file.
#[derive(Debug)]
pub(crate) struct ConfigFile {
    config: config::Config,
    origin: String,
}

impl ConfigFile {
    /// Reads `path`, resolving `${NAME:default}` placeholders from `env`.
    pub(crate) fn read(path: &Path, env: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        Self::parse(&text, &path.display().to_string(), env)
    }

    /// Parses config-file text.
    pub(crate) fn parse(text: &str, origin: &str, env: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<Self> {
        let mut tree: serde_json::Value = serde_saphyr::from_str(text).map_err(|e| {
            let mut options = serde_saphyr::RenderOptions::new(&UserWords);
            options.source_name = Some(origin);
            anyhow::anyhow!("{origin}: {}", e.render_with_options(options))
        })?;
        if tree.is_null() {
            tree = serde_json::json!({});
        }
        if !tree.is_object() {
            bail!("{origin}: the config file must be a mapping of sections");
        }
        resolve_placeholders(&mut tree, env);
        if let Some(own) = tree.get_mut("skyconf") {
            drop_empty(own);
        }
        if let Some(own) = tree.get("skyconf") {
            check_own_keys(own, "skyconf").map_err(|e| anyhow::anyhow!("{origin}: {e}"))?;
        }
        // Only skyconf's sections are read; an OAP application.yml has many others.
        let mut kept = serde_json::Map::new();
        for section in ["skyconf", "configuration", "configuration-discovery", "receiver-sharing-server"] {
            if let Some(value) = tree.get(section) {
                kept.insert(section.to_owned(), value.clone());
            }
        }
        let config = config::Config::builder()
            .add_source(config::Config::try_from(&serde_json::Value::Object(kept))?)
            .build()
            .with_context(|| format!("{origin}: cannot read the settings"))?;
        Ok(Self { config, origin: origin.to_owned() })
    }

    /// A section (dotted path), leniently typed as the OAP types it ("2379" is a port); `None`
    /// when absent.
    pub(crate) fn section<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<Option<T>> {
        match self.config.get::<T>(path) {
            Ok(value) => Ok(Some(value)),
            Err(config::ConfigError::NotFound(_)) => Ok(None),
            Err(e) => Err(anyhow::anyhow!("{}: `{path}`: {e}", self.origin)),
        }
    }

    /// A string setting.
    pub(crate) fn string(&self, path: &str) -> Option<String> {
        self.config.get_string(path).ok().filter(|s| !s.is_empty())
    }
}

/// skyconf's own sections that hold settings of their own, each with the keys it takes (the
/// names the derive gives the struct's fields, so the two cannot disagree). The structs also deny
/// unknown fields; [`check_own_keys`] comes first only to say which key was meant.
fn own_sections() -> [(&'static str, &'static [&'static str]); 12] {
    [
        ("skyconf", field_names::<SkyconfSection>()),
        ("skyconf.security", field_names::<SecuritySection>()),
        ("skyconf.security.admin", field_names::<AdminSecuritySection>()),
        ("skyconf.security.tls", field_names::<TlsSection>()),
        ("skyconf.security.tls.grpc", field_names::<TlsSettings>()),
        ("skyconf.security.tls.admin", field_names::<TlsSettings>()),
        ("skyconf.security.tls.opamp", field_names::<TlsSettings>()),
        ("skyconf.limits", field_names::<LimitsSection>()),
        ("skyconf.gateway", field_names::<GatewaySection>()),
        ("skyconf.gateway.tls", field_names::<UpstreamTlsSettings>()),
        ("skyconf.holdPolls", field_names::<HoldSection>()),
        ("skyconf.opamp", field_names::<OpampSection>()),
    ]
}

/// The keys the own section at `path` takes; `None` for anything else.
fn own_section_keys(path: &str) -> Option<&'static [&'static str]> {
    own_sections().into_iter().find(|(section, _)| *section == path).map(|(_, keys)| keys)
}

/// Refuses a key skyconf does not know anywhere under `skyconf:` (the OAP's sections stay
/// lenient, as the OAP is). A misspelt key ignored in silence would, under `security`, turn
/// authentication off (reliability finding F9: `agentTokn`, `writeToken`, `securty`).
fn check_own_keys(value: &serde_json::Value, path: &str) -> anyhow::Result<()> {
    let (Some(known), Some(map)) = (own_section_keys(path), value.as_object()) else {
        // A setting's value, or a section of the wrong type, which serde reports.
        return Ok(());
    };
    for (key, child) in map {
        if !known.contains(&key.as_str()) {
            let hint =
                did_you_mean(key, known.iter().copied()).map(|k| format!(" (did you mean `{k}`?)")).unwrap_or_default();
            bail!("unknown setting `{path}.{key}`{hint}; `{path}` takes {}", known.join(", "));
        }
        check_own_keys(child, &format!("{path}.{key}"))?;
    }
    Ok(())
}

/// The field names serde's derive gives `T` (after `rename_all`): asks `T` to deserialize from a
/// deserializer that only notes the names it is handed and then stops.
fn field_names<T: DeserializeOwned>() -> &'static [&'static str] {
    use serde::de::{Error as _, Visitor, value::Error};

    struct Names<'a>(&'a mut &'static [&'static str]);

    impl<'de> serde::Deserializer<'de> for Names<'_> {
        type Error = Error;

        fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Error> {
            Err(Error::custom("not a struct"))
        }

        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _name: &'static str,
            fields: &'static [&'static str],
            _visitor: V,
        ) -> Result<V::Value, Error> {
            *self.0 = fields;
            Err(Error::custom("only the field names were asked for"))
        }

        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option
            unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }

    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(Names(&mut fields));
    fields
}

/// Removes keys without a value (YAML null) from the mappings under `value`: a section whose
/// settings are all commented out (`holdPolls:` and nothing under it) is an empty section, and an
/// empty setting is an unset one, not a type error.
fn drop_empty(value: &mut serde_json::Value) {
    if let serde_json::Value::Object(map) = value {
        map.retain(|_, child| !child.is_null());
        map.values_mut().for_each(drop_empty);
    }
}

/// Replaces `${NAME:default}` (and `${NAME}`) in every string with the environment variable or the
/// default, as the OAP does for its application.yml.
fn resolve_placeholders(value: &mut serde_json::Value, env: &dyn Fn(&str) -> Option<String>) {
    match value {
        serde_json::Value::String(text) if text.contains("${") => *text = substitute(text, env),
        serde_json::Value::Array(items) => items.iter_mut().for_each(|v| resolve_placeholders(v, env)),
        serde_json::Value::Object(map) => map.values_mut().for_each(|v| resolve_placeholders(v, env)),
        _ => {}
    }
}

fn substitute(text: &str, env: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return out;
        };
        let inner = &after[..end];
        let (name, default) = inner.split_once(':').unwrap_or((inner, ""));
        // The OAP writes an empty default as `""`.
        let default = match default {
            "\"\"" | "''" => "",
            d => d,
        };
        out.push_str(&env(name).unwrap_or_else(|| default.to_owned()));
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

/// The store a selector names (the OAP's selector, or an alias such as `dcs` for `grpc`), from the
/// stores built into this binary.
pub(crate) fn canonical_selector(name: &str) -> anyhow::Result<&'static StoreEntry> {
    let name = name.trim();
    if let Some(entry) = skyconf_sources::entry(name) {
        return Ok(entry);
    }
    let supported: Vec<String> = skyconf_sources::REGISTRY
        .iter()
        .map(|entry| match entry.aliases {
            [] => entry.selector.to_owned(),
            aliases => format!("{} ({})", entry.selector, aliases.join(", ")),
        })
        .collect();
    let supported = supported.join(", ");
    if name == "k8s-configmap" {
        // The OAP's selector reads the ConfigMap through the Kubernetes API; mounted as a volume,
        // the same ConfigMap is the file store's directory form, which skyconf serves and follows.
        bail!(
            "the `k8s-configmap` store is not supported yet; mount the ConfigMap as a volume and serve \
             the mount with the file store: `skyconf serve --store file --file /MOUNT/DIR` (or \
             `configuration: {{selector: file, file: {{path: /MOUNT/DIR}}}}`); the document is its \
             `configuration-discovery.default.agentConfigurations` key; supported: {supported}"
        );
    }
    if matches!(name, "consul" | "apollo") {
        bail!("the `{name}` store is not supported yet; supported: {supported}");
    }
    bail!("unknown store `{name}`; supported: {supported}")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An environment that holds `pairs` and nothing else, for [`ConfigFile::parse`].
    pub(crate) fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| (*v).to_owned())
    }

    #[test]
    fn placeholders_resolve_from_the_environment_or_their_default() {
        let e = env(&[("SW_A", "x")]);
        assert_eq!(substitute("${SW_A:d}", &e), "x");
        assert_eq!(substitute("${SW_B:http://localhost:2379}", &e), "http://localhost:2379");
        assert_eq!(substitute("a-${SW_A}-${SW_B:}-b", &e), "a-x--b");
        assert_eq!(substitute("${unclosed", &e), "${unclosed");
        assert_eq!(substitute(r#"${SW_B:""}"#, &e), "");
    }

    #[test]
    fn reads_an_oap_application_yml_as_it_is() {
        let text = r#"
cluster:
  selector: ${SW_CLUSTER:standalone}
  standalone:
core:
  default:
    role: ${SW_CORE_ROLE:Mixed}
configuration:
  selector: ${SW_CONFIGURATION:none}
  none:
  grpc:
    host: ${SW_DCS_SERVER_HOST:""}
    port: ${SW_DCS_SERVER_PORT:80}
    clusterName: ${SW_DCS_CLUSTER_NAME:SkyWalking}
    period: ${SW_DCS_PERIOD:20}
    maxInboundMessageSize: ${SW_DCS_MAX_INBOUND_MESSAGE_SIZE:4194304}
configuration-discovery:
  selector: ${SW_CONFIGURATION_DISCOVERY:default}
  default:
    disableMessageDigest: ${SW_DISABLE_MESSAGE_DIGEST:false}
"#;
        let e = env(&[
            ("SW_CONFIGURATION", "grpc"),
            ("SW_DCS_SERVER_HOST", "dcs.local"),
            ("SW_DISABLE_MESSAGE_DIGEST", "true"),
        ]);
        let file = ConfigFile::parse(text, "application.yml", &e).unwrap();
        assert_eq!(file.string("configuration.selector").as_deref(), Some("grpc"));
        let dcs: skyconf_sources::dcs::DcsSettings = file.section("configuration.grpc").unwrap().unwrap();
        assert_eq!((dcs.host.as_str(), dcs.port, dcs.period), ("dcs.local", 80, 20));
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Discovery {
            disable_message_digest: bool,
        }
        let d: Discovery = file.section("configuration-discovery.default").unwrap().unwrap();
        assert!(d.disable_message_digest);
        assert!(file.section::<SkyconfSection>("skyconf").unwrap().is_none());
    }

    #[test]
    fn reads_the_oap_token_and_skyconf_security_sections() {
        let text = r#"
receiver-sharing-server:
  selector: ${SW_RECEIVER_SHARING_SERVER:default}
  default:
    gRPCPort: ${SW_RECEIVER_GRPC_PORT:0}
    authentication: ${SW_AUTHENTICATION:""}
skyconf:
  security:
    admin:
      readTokens: [r1]
      writeTokens: ["${ADMIN_W:}"]
      allowedHosts: [skyconf.internal]
    tls:
      grpc: {cert: /c.pem, key: /k.pem, clientCa: /ca.pem, clientAuth: request}
  limits:
    grpcMaxConcurrentStreams: 8
    grpcKeepaliveIntervalSecs: 0
    handshakeTimeoutMs: 2500
    grpcRequestMessageTimeoutMs: 3000
    grpcMaxConnections: 900
    grpcMaxConnectionsPerSource: 300
    grpcMaxPendingStreams: 2000
    grpcMaxPendingStreamsPerSource: 700
    grpcHttp2Server: own
"#;
        let file = ConfigFile::parse(text, "application.yml", &env(&[("SW_AUTHENTICATION", "agent-s3cret")])).unwrap();
        let sharing: SharingServerSection = file.section("receiver-sharing-server.default").unwrap().unwrap();
        assert!(sharing.authentication.unwrap().matches(b"agent-s3cret"));
        let own: SkyconfSection = file.section("skyconf").unwrap().unwrap();
        assert!(!format!("{own:?}").contains("r1"), "tokens never print");
        assert_eq!(own.security.admin.read_tokens.len(), 1);
        assert_eq!(own.security.admin.allowed_hosts, ["skyconf.internal"]);
        assert!(own.security.admin.write_tokens[0].is_empty(), "an unset placeholder is no token");
        let grpc = own.security.tls.grpc.resolve("grpc").unwrap().unwrap();
        assert_eq!(grpc.client_certs.unwrap().auth, ClientAuth::Request);
        assert!(own.security.tls.admin.resolve("admin").unwrap().is_none());
        let limits = own.limits.resolve();
        assert_eq!((limits.max_concurrent_streams, limits.keepalive_interval), (8, None));
        assert_eq!(limits.request_message_timeout, Duration::from_secs(3));
        assert_eq!((limits.max_pending_streams, limits.max_pending_streams_per_source), (2000, Some(700)));
        assert_eq!(limits.http2_server, skyconf_server::agent_port::Http2Server::Own);
        let connections = own.limits.connections();
        assert_eq!(connections.handshake_timeout, Duration::from_millis(2500));
        assert_eq!(connections.max_grpc_connections, Some(900));
        assert_eq!(connections.max_grpc_connections_per_source, Some(300));
        assert_eq!(connections.max_admin_connections, ConnectionLimits::default().max_admin_connections);

        let empty = ConfigFile::parse(text, "application.yml", &env(&[])).unwrap();
        let sharing: SharingServerSection = empty.section("receiver-sharing-server.default").unwrap().unwrap();
        assert!(sharing.authentication.unwrap().is_empty(), "the OAP's default is no token");
        let half = TlsSettings { cert: Some("/c.pem".into()), ..TlsSettings::default() };
        assert!(half.resolve("admin").unwrap_err().to_string().contains("--admin-tls-key"));
    }

    #[test]
    fn a_key_written_twice_is_refused_in_the_users_words() {
        // F19: the YAML library's hint ("set DuplicateKeyPolicy in Options") reached the user.
        for (text, key) in [
            ("skyconf:\n  grpcAddr: 127.0.0.1:0\n  grpcAddr: 127.0.0.1:1\n", "grpcAddr"),
            ("configuration:\n  selector: etcd\n  selector: file\n", "selector"),
        ] {
            let err = ConfigFile::parse(text, "c.yaml", &env(&[])).unwrap_err().to_string();
            assert!(!err.contains("DuplicateKeyPolicy") && !err.contains("Options"), "{err}");
            assert!(err.starts_with("c.yaml: "), "{err}");
            assert!(err.contains(&format!("`{key}` is written twice in one section")), "{err}");
            assert!(err.contains("c.yaml:3:3"), "the place, by file name: {err}");
        }
    }

    #[test]
    fn unknown_keys_in_skyconf_sections_are_refused_with_the_nearest_valid_one() {
        // Reliability finding F9: each of these, ignored, would start the server with authentication off.
        for (text, key, meant) in [
            ("skyconf:\n  security:\n    agentTokn: T0k\n", "skyconf.security.agentTokn", "agentToken"),
            (
                "skyconf:\n  security:\n    admin:\n      writeToken: [W0k]\n",
                "skyconf.security.admin.writeToken",
                "writeTokens",
            ),
            ("skyconf:\n  securty:\n    agentToken: T0k\n", "skyconf.securty", "security"),
            (
                "skyconf:\n  security:\n    tls:\n      grpc: {cert: /c, kye: /k}\n",
                "skyconf.security.tls.grpc.kye",
                "key",
            ),
            (
                "skyconf:\n  limits:\n    grpcMaxConcurrentStream: 8\n",
                "skyconf.limits.grpcMaxConcurrentStream",
                "grpcMaxConcurrentStreams",
            ),
            ("skyconf:\n  GrpcAddr: 0.0.0.0:1\n", "skyconf.GrpcAddr", "grpcAddr"),
            ("skyconf:\n  gateway:\n    upstream: [oap:11800]\n", "skyconf.gateway.upstream", "upstreams"),
            (
                "skyconf:\n  gateway:\n    tls: {ca: /ca.pem, serverNam: oap}\n",
                "skyconf.gateway.tls.serverNam",
                "serverName",
            ),
            ("skyconf:\n  holdPolls:\n    capSec: 30\n", "skyconf.holdPolls.capSec", "capSecs"),
            ("skyconf:\n  opamp:\n    adr: 0.0.0.0:4320\n", "skyconf.opamp.adr", "addr"),
        ] {
            let err = ConfigFile::parse(text, "c.yaml", &env(&[])).unwrap_err().to_string();
            assert!(err.starts_with("c.yaml: "), "{err}");
            assert!(err.contains(&format!("unknown setting `{key}`")), "{err}");
            assert!(err.contains(&format!("did you mean `{meant}`?")), "{err}");
        }
        // The correct spellings are read, and the OAP's own sections stay lenient.
        let text = "skyconf:\n  security:\n    agentToken: T0k\n    admin: {writeTokens: [W0k]}\nconfiguration:\n  selector: file\n  file: {path: a.yaml, notASetting: 1}\nconfiguration-discovery:\n  default: {somethingNew: true}\n";
        let file = ConfigFile::parse(text, "c.yaml", &env(&[])).unwrap();
        let own: SkyconfSection = file.section("skyconf").unwrap().unwrap();
        assert!(own.security.agent_token.unwrap().matches(b"T0k"));
        assert_eq!(own.security.admin.write_tokens.len(), 1);
        assert!(ConfigFile::parse("skyconf:\n", "c.yaml", &env(&[])).is_ok(), "an empty section");
    }

    #[test]
    fn every_own_section_is_checked_and_denies_unknown_fields_itself() {
        assert!(field_names::<SkyconfSection>().contains(&"maxDocumentBytes"));
        assert!(field_names::<TlsSettings>().contains(&"clientCa"));
        // Behind the check, serde refuses an unknown key too.
        let file = ConfigFile {
            config: config::Config::builder()
                .add_source(
                    config::Config::try_from(&serde_json::json!({"skyconf": {"security": {"agentTokn": "x"}}}))
                        .unwrap(),
                )
                .build()
                .unwrap(),
            origin: "c.yaml".into(),
        };
        assert!(file.section::<SkyconfSection>("skyconf").unwrap_err().to_string().contains("agentTokn"));
    }

    #[test]
    fn a_section_whose_settings_are_all_commented_out_is_an_empty_section() {
        // `holdPolls:` with every line under it commented out is YAML null, not a mapping.
        let text = "skyconf:\n  grpcAddr: 127.0.0.1:1\n  holdPolls:\n    #capSecs: 30\n  gateway:\n    tls:\n  security:\n    admin:\n    tls:\n      grpc:\n      admin:\n";
        let file = ConfigFile::parse(text, "c.yaml", &env(&[])).unwrap();
        let own: SkyconfSection = file.section("skyconf").unwrap().unwrap();
        assert_eq!(own.hold_polls.cap_secs, None);
        assert!(own.security.tls.grpc.resolve("grpc").unwrap().is_none());
        let empty = ConfigFile::parse("skyconf:\n  grpcAddr:\n", "c.yaml", &env(&[])).unwrap();
        let own: Option<SkyconfSection> = empty.section("skyconf").unwrap();
        assert_eq!(own.and_then(|own| own.grpc_addr), None, "an empty setting is no setting");
    }

    #[test]
    fn the_example_settings_file_parses_and_names_every_setting() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/skyconf.yaml");
        let text = std::fs::read_to_string(&path).unwrap();
        let file = ConfigFile::parse(&text, "examples/skyconf.yaml", &env(&[])).unwrap();
        let own: SkyconfSection = file.section("skyconf").unwrap().unwrap();
        assert_eq!(own.grpc_addr, Some("0.0.0.0:11800".parse().unwrap()));
        assert_eq!(file.string("configuration.selector").as_deref(), Some("file"));
        // Every key, set or shown switched off (`#key:`), so the file documents each setting.
        let stores: [(&str, &[&str]); 6] = [
            ("configuration.file", field_names::<skyconf_sources::file::FileSettings>()),
            ("configuration.etcd", field_names::<skyconf_sources::etcd::EtcdSettings>()),
            ("configuration.zookeeper", field_names::<skyconf_sources::zookeeper::ZookeeperSettings>()),
            ("configuration.nacos", field_names::<skyconf_sources::nacos::NacosSettings>()),
            ("configuration.grpc", field_names::<skyconf_sources::dcs::DcsSettings>()),
            ("receiver-sharing-server.default", &["authentication"]),
        ];
        let mentioned = |key: &str| {
            text.lines().any(|line| {
                let line = line.trim_start().trim_start_matches('#');
                line.starts_with(&format!("{key}:"))
            })
        };
        for (section, keys) in own_sections().into_iter().chain(stores) {
            assert!(!keys.is_empty(), "{section}");
            for key in keys {
                assert!(mentioned(key), "examples/skyconf.yaml does not show `{section}.{key}`");
            }
        }
    }

    #[test]
    fn selectors_use_the_oap_names() {
        assert_eq!(canonical_selector("dcs").unwrap().selector, "grpc");
        assert_eq!(canonical_selector("etcd").unwrap().selector, "etcd");
        assert!(canonical_selector("consul").unwrap_err().to_string().contains("not supported yet"));
        let k8s = canonical_selector("k8s-configmap").unwrap_err().to_string();
        assert!(
            k8s.contains("not supported yet") && k8s.contains("`skyconf serve --store file --file /MOUNT/DIR`"),
            "{k8s}"
        );
        assert!(canonical_selector("nope").is_err());
    }
}
