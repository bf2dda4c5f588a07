//! Gateway mode: skyconf as the agents' one backend address, in front of the OAP cluster.
//!
//! Configuration discovery (CDS) and the DCS service are answered here; every other gRPC call
//! (trace segments, metrics, logs, management, profiling, events, and paths skyconf has never
//! heard of) is forwarded to an OAP unchanged: headers and metadata, every message, trailers,
//! statuses, deadlines and cancellation, with HTTP/2 flow control end to end.
//!
//! - [`upstream`]: the OAPs, their connections and health, and which agent connection is pinned
//!   to which OAP;
//! - [`connect`]: one HTTP/2 connection to an OAP, open once the OAP has spoken HTTP/2;
//! - [`admission`]: which connection's stream a call gets, and the bounded queue of calls that
//!   wait while every stream the OAP allows is in use;
//! - [`forward`]: one call, forwarded as bytes, and how failures reach the agent;
//! - [`identity`]: `ManagementService` calls read in passing, for fleet status by instance;
//! - [`coalesce`]: the writes to an OAP, gathered into one per round of work;
//! - [`metrics`]: the gateway's metric families, read from [`Upstreams`] at scrape time.
//!
//! The gateway knows nothing of the server it runs in: the server hands each forwarded call's
//! connection in as an [`Agent`] (its pin, and where the identities its management calls carry
//! go), builds the TLS client configuration, and passes the registry the metrics go into.
//!
//! The forwarder is the gRPC router's fallback: the locally answered services keep their routes,
//! and any other path goes to the OAP. One difference from talking to the OAP remains: tonic's
//! server applies the call's `grpc-timeout` to the wait for the OAP's response headers and ends
//! the call CANCELLED when it passes, where the OAP would end it DEADLINE_EXCEEDED a moment
//! later. A client has ended the call on its own deadline by then.

pub mod admission;
pub mod coalesce;
pub mod connect;
pub mod forward;
pub mod identity;
pub mod metrics;
pub mod upstream;

use std::path::PathBuf;
use std::time::Duration;

pub use forward::Forwarder;
pub use identity::ManagementCall;
pub use upstream::{Pin, Upstreams};

/// The agent connection a forwarded call came on, as the server that accepted it knows it: the
/// gateway's one seam to that server.
pub trait Agent: Send + Sync + Unpin + 'static {
    /// The connection's pin (which OAP its forwarded calls go to); `None`: the call is pinned on
    /// its own.
    fn pin(&self) -> Option<&Pin>;

    /// Records the instance identity in `message`, the first request message of a management
    /// `call` on the connection (uncompressed, at most [`identity::MAX_MESSAGE_BYTES`]), sent
    /// with `agent_version` as its `agent-version` metadata. A message that does not decode is
    /// not recorded.
    fn identify(&self, call: ManagementCall, message: &[u8], agent_version: Option<String>);
}

/// Whether the call at `path` is answered by skyconf itself in gateway mode (configuration
/// discovery and the DCS service); every other path is forwarded.
pub fn is_answered_here(path: &str) -> bool {
    use skyconf_proto::dcs::configuration_service_server::SERVICE_NAME as DCS;
    use skyconf_proto::v3::configuration_discovery_service_server::SERVICE_NAME as CDS;
    [CDS, DCS].iter().any(|service| {
        path.strip_prefix('/').and_then(|p| p.strip_prefix(service)).is_some_and(|rest| rest.starts_with('/'))
    })
}

/// Why the gateway cannot start, or cannot reach an OAP.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// `--upstream` named no OAP.
    #[error("the gateway needs at least one upstream OAP address")]
    NoUpstream,
    /// An upstream address is not `host:port`.
    #[error("upstream `{addr}`: expected HOST:PORT")]
    Address {
        /// The address as given.
        addr: String,
    },
    /// The name to check the OAPs' certificates against is not a DNS name or IP address.
    #[error("`{name}` is not a valid TLS server name")]
    ServerName {
        /// The name.
        name: String,
    },
    /// TLS towards the OAPs is set, but the server gave no client configuration for it.
    #[error("TLS towards the OAPs is set but has no client configuration")]
    NoClientTls,
    /// A TCP connection or TLS handshake to an OAP failed.
    #[error("cannot connect to {addr}: {cause}")]
    Connect {
        /// The OAP.
        addr: String,
        /// Why, in the message (not also its `source()`).
        cause: std::io::Error,
    },
    /// The HTTP/2 handshake with an OAP failed.
    #[error("HTTP/2 handshake with {addr}: {cause}")]
    Handshake {
        /// The OAP.
        addr: String,
        /// Why.
        cause: hyper::Error,
    },
    /// The OAP accepted the connection but sent no HTTP/2 SETTINGS allowing a stream in time.
    #[error("{addr} accepted the connection but did not speak HTTP/2 within {timeout:?}")]
    Silent {
        /// The OAP.
        addr: String,
        /// The connect deadline.
        timeout: Duration,
    },
}

/// Where the OAP cluster is and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayConfig {
    /// The OAPs, as `host:port`.
    pub upstreams: Vec<String>,
    /// TLS towards the OAPs; `None`: plaintext HTTP/2.
    pub tls: Option<UpstreamTls>,
    /// HTTP/2 connections kept open to each OAP; agents' calls are multiplexed over them.
    pub connections_per_upstream: usize,
    /// The most HTTP/2 connections to one OAP: more than `connections_per_upstream` are opened
    /// while every stream the OAP allows on the open ones is in use (its
    /// `SETTINGS_MAX_CONCURRENT_STREAMS`), and closed again once idle.
    pub max_connections_per_upstream: usize,
    /// The most calls waiting for a stream to one OAP (while every stream it allows on its open
    /// connections is in use); a call beyond it ends at once with DEADLINE_EXCEEDED.
    pub max_queued_calls: usize,
    /// How long a call waits for a stream at most before it ends with DEADLINE_EXCEEDED (a call
    /// whose own `grpc-timeout` is shorter ends at that instead).
    pub queue_wait: Duration,
    /// How often a connection opened beyond `connections_per_upstream` is checked for calls in
    /// flight; it is closed at the second check in a row that finds none.
    pub on_demand_idle: Duration,
    /// How long connecting to an OAP may take: TCP, TLS, and the HTTP/2 handshake up to the
    /// OAP's own SETTINGS frame. A connection that has not heard the OAP speak HTTP/2 by then is
    /// closed and never used (a hung OAP is down, not up).
    pub connect_timeout: Duration,
    /// How often an OAP connection is pinged to find a dead OAP.
    pub keepalive_interval: Duration,
    /// How long a ping may go unanswered before the OAP counts as gone.
    pub keepalive_timeout: Duration,
}

impl GatewayConfig {
    /// Forwarding to `upstreams` with the default settings.
    pub fn new(upstreams: Vec<String>) -> Self {
        Self {
            upstreams,
            tls: None,
            connections_per_upstream: 2,
            max_connections_per_upstream: 16,
            max_queued_calls: 1024,
            queue_wait: Duration::from_secs(10),
            on_demand_idle: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            keepalive_interval: Duration::from_secs(10),
            keepalive_timeout: Duration::from_secs(5),
        }
    }
}

/// TLS from skyconf to the OAPs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamTls {
    /// PEM bundle of the CAs the OAPs' certificates must chain to.
    pub ca: PathBuf,
    /// skyconf's client certificate chain (PEM), when the OAPs ask for one.
    pub cert: Option<PathBuf>,
    /// The private key of `cert`.
    pub key: Option<PathBuf>,
    /// The name the OAPs' certificates are checked against; `None`: the host of each upstream.
    pub server_name: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_configuration_discovery_and_dcs_are_answered_here() {
        assert!(is_answered_here("/skywalking.v3.ConfigurationDiscoveryService/fetchConfigurations"));
        assert!(is_answered_here("/ConfigurationService/call"));
        assert!(is_answered_here("/ConfigurationService/callGroup"));
        for forwarded in [
            "/skywalking.v3.ManagementService/reportInstanceProperties",
            "/skywalking.v3.TraceSegmentReportService/collect",
            "/skywalking.v3.ConfigurationDiscoveryServiceX/fetchConfigurations",
            "/ConfigurationServiceX/call",
            "/foo.Bar/baz",
            "/",
            "",
        ] {
            assert!(!is_answered_here(forwarded), "{forwarded}");
        }
    }
}
