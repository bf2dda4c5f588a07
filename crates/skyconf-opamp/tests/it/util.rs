//! A server on an ephemeral loopback port with an in-memory backend, and message builders.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use prost::Message as _;
use skyconf_opamp::wire::{self, any_value::Value};
use skyconf_opamp::{MemoryBackend, Opamp, OpampConfig, bits};
use tokio::sync::oneshot;

/// The capabilities the test agents declare.
pub(crate) const CAPS: u64 = bits::agent::REPORTS_STATUS
    | bits::agent::ACCEPTS_REMOTE_CONFIG
    | bits::agent::REPORTS_REMOTE_CONFIG
    | bits::agent::REPORTS_EFFECTIVE_CONFIG
    | bits::agent::REPORTS_HEALTH
    | bits::agent::REPORTS_HEARTBEAT;

/// A running server.
pub(crate) struct Server {
    pub(crate) addr: SocketAddr,
    pub(crate) opamp: Opamp,
    pub(crate) backend: MemoryBackend,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl Server {
    /// Serves the default configuration.
    pub(crate) async fn start() -> Self {
        Self::with(|_| {}).await
    }

    /// Serves the default configuration changed by `adjust`.
    pub(crate) async fn with(adjust: impl FnOnce(&mut OpampConfig)) -> Self {
        let mut config = OpampConfig::default();
        adjust(&mut config);
        let backend = MemoryBackend::new();
        let opamp = Opamp::new(config, Arc::new(backend.clone()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let serving = opamp.clone();
        let task = tokio::spawn(async move {
            serving
                .serve(listener, async {
                    let _ = stopped.await;
                })
                .await
        });
        Self { addr, opamp, backend, stop: Some(stop), task: Some(task) }
    }

    /// The plain HTTP URL.
    pub(crate) fn url(&self) -> String {
        format!("http://{}/v1/opamp", self.addr)
    }

    /// Stops the server and waits for its accept loop to end.
    pub(crate) async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(10), task).await.expect("the server stops").unwrap().unwrap();
        }
    }

    /// Waits until `condition` holds for the server's stats.
    pub(crate) async fn wait_stats(&self, condition: impl Fn(&skyconf_opamp::Stats) -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let stats = self.opamp.stats();
            if condition(&stats) {
                return;
            }
            assert!(tokio::time::Instant::now() < deadline, "stats never matched: {stats:?}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A full report: description (`service.name`), capabilities, optionally a status.
pub(crate) fn full(uid: [u8; 16], seq: u64, service: &str) -> wire::AgentToServer {
    wire::AgentToServer {
        instance_uid: Bytes::copy_from_slice(&uid),
        sequence_num: seq,
        capabilities: CAPS,
        agent_description: Some(wire::AgentDescription {
            identifying_attributes: vec![wire::KeyValue {
                key: "service.name".into(),
                value: Some(wire::AnyValue { value: Some(Value::StringValue(service.into())) }),
            }],
            non_identifying_attributes: vec![],
        }),
        ..Default::default()
    }
}

/// A heartbeat: uid, sequence number, capabilities.
pub(crate) fn heartbeat(uid: [u8; 16], seq: u64) -> wire::AgentToServer {
    wire::AgentToServer {
        instance_uid: Bytes::copy_from_slice(&uid),
        sequence_num: seq,
        capabilities: CAPS,
        ..Default::default()
    }
}

/// `msg` with a RemoteConfigStatus for `hash`.
pub(crate) fn with_status(
    mut msg: wire::AgentToServer,
    hash: &Bytes,
    status: wire::RemoteConfigStatuses,
) -> wire::AgentToServer {
    msg.remote_config_status = Some(wire::RemoteConfigStatus {
        last_remote_config_hash: hash.clone(),
        status: status as i32,
        error_message: String::new(),
    });
    msg
}

/// The hash of the configuration `msg` offers, if any.
pub(crate) fn offered(msg: &wire::ServerToAgent) -> Option<Bytes> {
    msg.remote_config.as_ref().map(|c| c.config_hash.clone())
}

/// Encodes a message.
pub(crate) fn encode(msg: &wire::AgentToServer) -> Vec<u8> {
    msg.encode_to_vec()
}
