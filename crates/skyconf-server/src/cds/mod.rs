//! The configuration discovery service agents poll:
//! `/skywalking.v3.ConfigurationDiscoveryService/fetchConfigurations`.
//!
//! A call is request → [`skyconf_core::answer::reply`] (the OAP handler's rule, over the answers
//! pre-encoded per reload) → bytes with a fresh serial number patched in. This module adds only
//! what sits at the edge: the fleet record of who polled, the metrics, the request limit and the
//! panic guard.
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
use skyconf_core::answer::{FetchOutcome, ReplyOptions, reply};
use skyconf_proto::v3::ConfigurationSyncRequest;
use tonic::{Request, Response, Status};

use crate::fleet::Fleet;
use crate::metrics::CdsMetrics;
use crate::served::ServedTable;
use codec::EncodedCommands;
pub use generated::configuration_discovery_service_server::{
    ConfigurationDiscoveryService, ConfigurationDiscoveryServiceServer,
};

/// The largest request accepted. A real one is a service name and a 128-character digest; a
/// larger message ends with OUT_OF_RANGE, which agents treat as an ordinary error.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;

/// Settings of the CDS service: the reply rule's.
pub type CdsOptions = ReplyOptions;

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
        self.answer_from(request, None).0
    }

    /// [`Self::answer`] and what kind of answer it is (for the metrics), recording the poll of the
    /// agent at `peer` in the fleet table.
    pub fn answer_from(
        &self,
        request: &ConfigurationSyncRequest,
        peer: Option<std::net::SocketAddr>,
    ) -> (Bytes, FetchOutcome) {
        self.served.with_snapshot(|snapshot| {
            let reply = reply(&snapshot.answers, request, self.options);
            if let (Some(fleet), Some(peer), Some(current)) = (&self.fleet, peer, reply.current()) {
                let configured = snapshot.table.get(&request.service).is_some();
                fleet.observe(&request.service, &request.uuid, peer, &current.digest, configured);
            }
            (reply.encode(), reply.outcome())
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
        let peer = crate::socket::peer_of(request.extensions());
        let request = request.into_inner();
        let answered = std::panic::catch_unwind(AssertUnwindSafe(|| self.answer_from(&request, peer)));
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

    const V4: &str = "configurations:\n  svc:\n    agent.sample_n_per_3_secs: 10\n";

    fn ask(svc: &CdsService, service: &str, uuid: &str) -> Option<DiscoveryCommand> {
        let bytes = svc.answer(&ConfigurationSyncRequest { service: service.into(), uuid: uuid.into() });
        let commands = Commands::decode(bytes).unwrap();
        assert!(commands.commands.len() <= 1, "one command at most");
        commands.commands.first().map(|c| DiscoveryCommand::from_command(c).unwrap())
    }

    // The reply rule itself is tested in skyconf_core::answer; these check the service uses the
    // table it is given, as it changes.
    #[test]
    fn a_server_without_a_table_answers_no_change() {
        let svc = CdsService::new(Arc::new(ServedTable::waiting()), CdsOptions::default());
        assert!(ask(&svc, "svc", "").is_none());
    }

    #[test]
    fn a_delete_makes_everyone_empty() {
        let served = Arc::new(ServedTable::new(skyconf_core::read(V4).unwrap()));
        let svc = CdsService::new(Arc::clone(&served), CdsOptions::default());
        let digest = ask(&svc, "svc", "").unwrap().uuid.unwrap();
        assert!(ask(&svc, "svc", &digest).is_none());
        served.install(skyconf_core::AgentConfigurations::default());
        assert_eq!(ask(&svc, "svc", &digest).unwrap().uuid.as_deref(), Some(EMPTY_DIGEST));
    }
}
