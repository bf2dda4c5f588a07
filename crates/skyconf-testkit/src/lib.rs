//! Test infrastructure shared by every skyconf crate's integration tests, used only as a
//! dev-dependency (never published):
//!
//! - [`servers`]: real etcd, ZooKeeper, rnacos and Prometheus processes on ephemeral loopback
//!   ports;
//! - [`probe::SourceProbe`]: a [`skyconf_sources::Source`]'s `run` in a task, its updates pulled
//!   one at a time with one timeout;
//! - [`server::Server`]: a skyconf server on ephemeral loopback ports with a CDS client
//!   ([`server::Cds`]) and an admin HTTP client ([`server::AdminClient`]);
//! - [`fixtures`]: synthetic agent-configurations documents;
//! - [`latency`]: percentiles of measured delays;
//! - [`upstream::Upstream`]: a recording OAP stand-in for the gateway's tests;
//! - [`tcp_proxy::TcpProxy`]: a TCP proxy that can fall silent (a partition that closes nothing);
//! - [`conformance`]: the [`skyconf_sources::Source`] contract, checked once for every store.

#![warn(missing_docs)]

pub mod conformance;
pub mod fixtures;
pub mod latency;
pub mod probe;
pub mod server;
pub mod servers;
pub mod tcp_proxy;
pub mod upstream;

use std::time::Duration;

/// How long a test waits for any one thing it expects (an update, a served digest, a condition)
/// before it fails. Generous: the machine is shared and real servers start slowly.
pub const PATIENCE: Duration = Duration::from_secs(30);
