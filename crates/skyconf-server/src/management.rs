//! `skywalking.v3.ManagementService` (`reportInstanceProperties`, `keepAlive`), answered with an
//! empty `Commands` as the OAP answers it, so skyconf learns the instance behind a peer address:
//! its name, its reported properties and the agent version the call's metadata carries (the Java
//! agent sends `Agent-Version`; gRPC metadata keys arrive lowercase). Agents send these calls on
//! the same gRPC channel as their configuration polls, so the connection ties the two together,
//! and the identity ends with it.

use std::sync::Arc;

use prost::Message;
use skyconf_proto::v3::management_service_server::{ManagementService, ManagementServiceServer};
use skyconf_proto::v3::{Commands, InstancePingPkg, InstanceProperties};
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};

use crate::fleet::{Caller, Fleet, InstanceIdentity};

/// The metadata key agents put their version in.
pub(crate) const AGENT_VERSION_KEY: &str = "agent-version";

/// The largest management request accepted (properties of one instance): the largest message
/// the gateway reads for identity, too.
pub(crate) const MAX_REQUEST_BYTES: usize = skyconf_gateway::identity::MAX_MESSAGE_BYTES;

/// Records instance identities into a [`Fleet`].
#[derive(Debug, Clone)]
pub(crate) struct Management {
    fleet: Arc<Fleet>,
}

impl Management {
    /// A service feeding `fleet`.
    pub(crate) fn new(fleet: Arc<Fleet>) -> Self {
        Self { fleet }
    }

    /// The tonic server for this service.
    pub(crate) fn into_server(self) -> ManagementServiceServer<Self> {
        ManagementServiceServer::new(self).max_decoding_message_size(MAX_REQUEST_BYTES)
    }

    fn observe(&self, caller: Option<Caller>, identity: &InstanceIdentity) {
        if let Some(caller) = caller {
            self.fleet.identify(&caller, identity);
        }
    }
}

/// The `agent-version` a call's metadata carries, if it is printable text.
pub(crate) fn agent_version(metadata: &MetadataMap) -> Option<String> {
    metadata.get(AGENT_VERSION_KEY).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

impl InstanceIdentity {
    /// What a `reportInstanceProperties` call says, sent with `agent_version`.
    pub fn reported(report: InstanceProperties, agent_version: Option<String>) -> Self {
        Self {
            service: report.service,
            instance: report.service_instance,
            properties: report.properties.into_iter().map(|p| (p.key, p.value)).collect(),
            agent_version,
            reported_properties: true,
        }
    }

    /// What a `keepAlive` call says, sent with `agent_version`.
    pub fn pinged(ping: InstancePingPkg, agent_version: Option<String>) -> Self {
        Self {
            service: ping.service,
            instance: ping.service_instance,
            properties: Vec::new(),
            agent_version,
            reported_properties: false,
        }
    }

    /// The identity in an encoded `reportInstanceProperties` message, if it decodes.
    pub fn of_properties(message: &[u8], agent_version: Option<String>) -> Option<Self> {
        Some(Self::reported(InstanceProperties::decode(message).ok()?, agent_version))
    }

    /// The identity in an encoded `keepAlive` message, if it decodes.
    pub fn of_ping(message: &[u8], agent_version: Option<String>) -> Option<Self> {
        Some(Self::pinged(InstancePingPkg::decode(message).ok()?, agent_version))
    }
}

#[tonic::async_trait]
impl ManagementService for Management {
    async fn report_instance_properties(
        &self,
        request: Request<InstanceProperties>,
    ) -> Result<Response<Commands>, Status> {
        let caller = Caller::of(request.extensions());
        let agent_version = agent_version(request.metadata());
        let identity = InstanceIdentity::reported(request.into_inner(), agent_version);
        self.observe(caller, &identity);
        Ok(Response::new(Commands::default()))
    }

    async fn keep_alive(&self, request: Request<InstancePingPkg>) -> Result<Response<Commands>, Status> {
        let caller = Caller::of(request.extensions());
        let agent_version = agent_version(request.metadata());
        let identity = InstanceIdentity::pinged(request.into_inner(), agent_version);
        self.observe(caller, &identity);
        Ok(Response::new(Commands::default()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoding_keeps_every_property_in_order_and_the_agent_version() {
        let properties = skyconf_proto::fixtures::instance_properties();
        let identity = InstanceIdentity::of_properties(&properties.encode_to_vec(), Some("9.3.0".into())).unwrap();
        assert_eq!(identity.service, "order");
        assert_eq!(identity.properties.len(), 3);
        assert_eq!(identity.properties[2], ("ipv4".to_owned(), "172.17.0.1".to_owned()));
        assert_eq!(identity.agent_version.as_deref(), Some("9.3.0"));
        assert!(identity.reported_properties);
        let ping = InstancePingPkg { service: "order".into(), service_instance: "pod-1".into(), ..Default::default() };
        let identity = InstanceIdentity::of_ping(&ping.encode_to_vec(), None).unwrap();
        assert!(!identity.reported_properties && identity.properties.is_empty());
        assert_eq!(InstanceIdentity::of_ping(&[0xff, 0xff, 0xff], None), None, "undecodable: not recorded");
    }
}
