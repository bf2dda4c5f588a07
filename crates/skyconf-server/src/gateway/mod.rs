//! Gateway mode: skyconf as the agents' one backend address, in front of the OAP cluster.
//!
//! Configuration discovery (CDS) and the DCS service are answered here; every other gRPC call
//! (trace segments, metrics, logs, management, profiling, events, and paths skyconf has never
//! heard of) is forwarded to an OAP unchanged: headers and metadata, every message, trailers,
//! statuses, deadlines and cancellation, with HTTP/2 flow control end to end.

use std::path::PathBuf;
use std::time::Duration;

/// Where the OAP cluster is and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayConfig {
    /// The OAPs, as `host:port`.
    pub upstreams: Vec<String>,
    /// TLS towards the OAPs; `None`: plaintext HTTP/2.
    pub tls: Option<UpstreamTls>,
    /// HTTP/2 connections kept open to each OAP; agents' calls are multiplexed over them.
    pub connections_per_upstream: usize,
    /// How long connecting to an OAP (TCP, TLS and the HTTP/2 handshake) may take.
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
