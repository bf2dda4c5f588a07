//! skyconf-server's integration tests, one binary (`cargo test -p skyconf-server --test it`; a
//! module's tests alone with a filter, e.g. `-- etcd::`): the admin API and the CDS, DCS, fleet,
//! metrics, security and TLS behaviour over real sockets, the web page in a real browser, and
//! each remote store end to end against its real server (`skyconf_testkit::servers`), and the
//! rollout's Prometheus gate against a real Prometheus.

mod admin;
mod admin_held;
mod admin_history;
mod admin_refused;
mod admin_rollback;
mod agent_identity;
mod dcs;
mod etcd;
mod failover;
mod fleet;
mod gateway;
mod global;
mod h2conformance;
mod held;
mod metrics;
mod nacos;
mod opamp;
mod opamp_replicas;
mod opamp_rollout;
mod opamp_security;
mod replicas;
mod rollout_prometheus;
mod rollout_replicas;
mod rollouts;
mod security;
mod serve;
mod shared_writes;
mod shutdown;
mod tls;
mod web;
mod zookeeper;

/// `message` encoded with its gRPC header (uncompressed, its length), as one DATA frame carries it.
pub(crate) fn grpc_frame(message: &impl prost::Message) -> bytes::Bytes {
    let encoded = message.encode_to_vec();
    let mut frame = vec![0u8];
    frame.extend_from_slice(&u32::try_from(encoded.len()).unwrap().to_be_bytes());
    frame.extend_from_slice(&encoded);
    frame.into()
}

/// The `(a, b)` string fields of each object in the JSON array `rows`, in order.
pub(crate) fn pairs<'v>(rows: &'v serde_json::Value, a: &str, b: &str) -> Vec<(&'v str, &'v str)> {
    rows.as_array().unwrap().iter().map(|row| (row[a].as_str().unwrap(), row[b].as_str().unwrap())).collect()
}
