//! The configuration discovery service agents poll:
//! `/skywalking.v3.ConfigurationDiscoveryService/fetchConfigurations`.
//!
//! The answer follows the OAP's handler exactly: look the service up (unknown services get the
//! EMPTY answer), and send the command unless the agent's uuid already equals the digest (always
//! send it with `disable_message_digest`). Answers are pre-encoded per reload; a call copies them
//! and patches in a fresh serial number.
//!
//! The call never fails with a status that makes a Java agent drop its channel (UNKNOWN,
//! UNAVAILABLE, RESOURCE_EXHAUSTED, UNAUTHENTICATED, PERMISSION_DENIED): even a panic inside the
//! handler becomes a "no change" answer, which every agent handles by keeping what it has.

pub mod codec;

mod generated {
    #![allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic, missing_debug_implementations)]
    include!(concat!(env!("OUT_DIR"), "/skywalking.v3.ConfigurationDiscoveryService.rs"));
}

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use bytes::Bytes;
use skyconf_core::digest::EMPTY_DIGEST;
use skyconf_proto::v3::ConfigurationSyncRequest;
use tonic::{Request, Response, Status};

use crate::fleet::Fleet;
use crate::metrics::{CdsMetrics, FetchOutcome};
use crate::state::ServedTable;
use codec::EncodedCommands;
pub use generated::configuration_discovery_service_server::{
    ConfigurationDiscoveryService, ConfigurationDiscoveryServiceServer,
};

/// The largest request accepted. A real one is a service name and a 128-character digest; a
/// larger message ends with OUT_OF_RANGE, which agents treat as an ordinary error.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;

/// Settings of the CDS service.
#[derive(Debug, Clone, Copy, Default)]
pub struct CdsOptions {
    /// Always send the full command, as the OAP's `disableMessageDigest` does.
    pub disable_message_digest: bool,
}

/// The CDS service over a [`ServedTable`].
#[derive(Debug, Clone)]
pub struct CdsService {
    served: Arc<ServedTable>,
    options: CdsOptions,
    /// Where each poll is recorded (fleet status), if anywhere.
    fleet: Option<Arc<Fleet>>,
    metrics: CdsMetrics,
}

impl CdsService {
    /// A service answering from `served`.
    pub fn new(served: Arc<ServedTable>, options: CdsOptions) -> Self {
        Self { served, options, fleet: None, metrics: CdsMetrics::default() }
    }

    /// Counts every answer, and its latency, in `metrics`.
    pub fn with_metrics(mut self, metrics: CdsMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Records every poll's peer and echoed digest in `fleet`.
    pub fn with_fleet(mut self, fleet: Arc<Fleet>) -> Self {
        self.fleet = Some(fleet);
        self
    }

    /// The tonic server for this service, with skyconf's request limit.
    pub fn into_server(self) -> ConfigurationDiscoveryServiceServer<Self> {
        ConfigurationDiscoveryServiceServer::new(self).max_decoding_message_size(MAX_REQUEST_BYTES)
    }

    /// The encoded answer for one request: the command, or an empty `Commands` (zero bytes).
    pub fn answer(&self, request: &ConfigurationSyncRequest) -> Bytes {
        self.answer_from(request, None)
    }

    /// [`Self::answer`], recording the poll of the agent at `peer` in the fleet table.
    pub fn answer_from(&self, request: &ConfigurationSyncRequest, peer: Option<std::net::SocketAddr>) -> Bytes {
        self.answer_with_outcome(request, peer).0
    }

    /// [`Self::answer_from`], and what kind of answer it is (for the metrics).
    pub fn answer_with_outcome(
        &self,
        request: &ConfigurationSyncRequest,
        peer: Option<std::net::SocketAddr>,
    ) -> (Bytes, FetchOutcome) {
        self.served.with_snapshot(|snapshot| {
            if !snapshot.ready {
                // No table known yet: "no change" keeps every agent as it is.
                return (Bytes::new(), FetchOutcome::NotReady);
            }
            let answer = snapshot.answer(&request.service);
            if let (Some(fleet), Some(peer)) = (&self.fleet, peer) {
                fleet.observe(&request.service, &request.uuid, peer, &answer.digest);
            }
            if !self.options.disable_message_digest && answer.digest == *request.uuid.as_str() {
                (Bytes::new(), FetchOutcome::Unchanged)
            } else {
                let outcome = if answer.digest == *EMPTY_DIGEST { FetchOutcome::Empty } else { FetchOutcome::Changed };
                (answer.encoded.with_fresh_serial(), outcome)
            }
        })
    }
}

#[tonic::async_trait]
impl ConfigurationDiscoveryService for CdsService {
    async fn fetch_configurations(
        &self,
        request: Request<ConfigurationSyncRequest>,
    ) -> Result<Response<EncodedCommands>, Status> {
        let started = self.metrics.start();
        let peer = request.remote_addr();
        let request = request.into_inner();
        let answered = std::panic::catch_unwind(AssertUnwindSafe(|| self.answer_with_outcome(&request, peer)));
        let bytes = match answered {
            Ok((bytes, outcome)) => {
                self.metrics.record(outcome, started);
                bytes
            }
            Err(_) => {
                tracing::error!(service = %request.service, "The configuration lookup panicked; answering \"no change\" so the agent keeps its configuration.");
                Bytes::new()
            }
        };
        Ok(Response::new(EncodedCommands(bytes)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use skyconf_core::codec::DiscoveryCommand;
    use skyconf_core::digest::EMPTY_DIGEST;
    use skyconf_proto::v3::Commands;

    const V4: &str = "configurations:\n  svc:\n    agent.sample_n_per_3_secs: 10\n    agent.span_limit_per_segment: 400\n    agent.ignore_suffix: .txt,.log\n    agent.trace.ignore_path: /eureka/**,/actuator/**\n    plugin.jdbc.trace_sql_parameters: true\n";
    const V4_DIGEST: &str = "3ad183c6f10d83a93105e869ea7ed8ad1373d4fbe13b9c4c0efc4a42ee9ac2f9952c1b9e39ccdc76b465fe1d9b960d4bdeb68102103a91931bb3e74c68772838";

    fn service(text: &str, disable_message_digest: bool) -> (Arc<ServedTable>, CdsService) {
        let served = Arc::new(ServedTable::new(skyconf_core::read(text).unwrap()));
        (Arc::clone(&served), CdsService::new(served, CdsOptions { disable_message_digest }))
    }

    fn ask(svc: &CdsService, service: &str, uuid: &str) -> Option<DiscoveryCommand> {
        let bytes = svc.answer(&ConfigurationSyncRequest { service: service.into(), uuid: uuid.into() });
        let commands = Commands::decode(bytes).unwrap();
        assert!(commands.commands.len() <= 1, "one command at most");
        commands.commands.first().map(|c| DiscoveryCommand::from_command(c).unwrap())
    }

    // The OAP handler's acceptance cases (behaviour reference §5.1, item 3).
    #[test]
    fn unknown_service_gets_the_empty_command_until_it_echoes_it() {
        let (_, svc) = service(V4, false);
        let cmd = ask(&svc, "other", "").unwrap();
        assert_eq!(cmd.uuid.as_deref(), Some(EMPTY_DIGEST));
        assert!(cmd.config.is_empty());
        assert!(cmd.serial_number.is_some());
        assert!(ask(&svc, "other", EMPTY_DIGEST).is_none());
    }

    #[test]
    fn known_service_full_then_empty_then_full_on_stale_uuid() {
        let (_, svc) = service(V4, false);
        let cmd = ask(&svc, "svc", "").unwrap();
        assert_eq!(cmd.uuid.as_deref(), Some(V4_DIGEST));
        assert_eq!(cmd.config.len(), 5);
        assert!(ask(&svc, "svc", V4_DIGEST).is_none());
        assert!(ask(&svc, "svc", "stale").is_some());
        assert!(ask(&svc, "SVC", V4_DIGEST).unwrap().config.is_empty(), "lookup is case-sensitive");
    }

    #[test]
    fn disabled_digest_always_answers_with_a_fresh_serial() {
        let (_, svc) = service(V4, true);
        let a = ask(&svc, "svc", V4_DIGEST).unwrap();
        let b = ask(&svc, "svc", V4_DIGEST).unwrap();
        assert_ne!(a.serial_number, b.serial_number);
    }

    #[test]
    fn a_server_without_a_table_answers_no_change() {
        let svc = CdsService::new(Arc::new(ServedTable::waiting()), CdsOptions::default());
        assert!(ask(&svc, "svc", "").is_none());
    }

    #[test]
    fn a_delete_makes_everyone_empty() {
        let (served, svc) = service(V4, false);
        served.install(skyconf_core::AgentConfigurations::default());
        assert_eq!(ask(&svc, "svc", V4_DIGEST).unwrap().uuid.as_deref(), Some(EMPTY_DIGEST));
    }
}
