//! `skywalking.v3.ManagementService` (`reportInstanceProperties`, `keepAlive`), answered with an
//! empty `Commands` as the OAP answers it, so skyconf learns the instance behind a peer address:
//! its name, its reported properties and the agent version the call's metadata carries (the Java
//! agent sends `Agent-Version`; gRPC metadata keys arrive lowercase). Agents send these calls on
//! the same gRPC channel as their configuration polls, so the connection ties the two together,
//! and the identity ends with it.

use std::sync::Arc;

use skyconf_proto::v3::management_service_server::{ManagementService, ManagementServiceServer};
use skyconf_proto::v3::{Commands, InstancePingPkg, InstanceProperties};
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};

use super::{Caller, Fleet, InstanceIdentity};

/// The metadata key agents put their version in.
pub const AGENT_VERSION_KEY: &str = "agent-version";

/// The largest management request accepted (properties of one instance).
pub const MAX_REQUEST_BYTES: usize = 256 * 1024;

/// Records instance identities into a [`Fleet`].
#[derive(Debug, Clone)]
pub struct Management {
    fleet: Arc<Fleet>,
}

impl Management {
    /// A service feeding `fleet`.
    pub fn new(fleet: Arc<Fleet>) -> Self {
        Self { fleet }
    }

    /// The tonic server for this service.
    pub fn into_server(self) -> ManagementServiceServer<Self> {
        ManagementServiceServer::new(self).max_decoding_message_size(MAX_REQUEST_BYTES)
    }

    fn observe(&self, caller: Option<Caller>, identity: &InstanceIdentity) {
        if let Some(caller) = caller {
            self.fleet.identify(&caller, identity);
        }
    }
}

/// The `agent-version` a call's metadata carries, if it is printable text.
pub fn agent_version(metadata: &MetadataMap) -> Option<String> {
    metadata.get(AGENT_VERSION_KEY).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

#[tonic::async_trait]
impl ManagementService for Management {
    async fn report_instance_properties(
        &self,
        request: Request<InstanceProperties>,
    ) -> Result<Response<Commands>, Status> {
        let caller = Caller::of(request.extensions());
        let agent_version = agent_version(request.metadata());
        let report = request.into_inner();
        let identity = InstanceIdentity {
            service: report.service,
            instance: report.service_instance,
            properties: report.properties.into_iter().map(|p| (p.key, p.value)).collect(),
            agent_version,
            reported_properties: true,
        };
        self.observe(caller, &identity);
        Ok(Response::new(Commands::default()))
    }

    async fn keep_alive(&self, request: Request<InstancePingPkg>) -> Result<Response<Commands>, Status> {
        let caller = Caller::of(request.extensions());
        let agent_version = agent_version(request.metadata());
        let ping = request.into_inner();
        let identity = InstanceIdentity {
            service: ping.service,
            instance: ping.service_instance,
            properties: Vec::new(),
            agent_version,
            reported_properties: false,
        };
        self.observe(caller, &identity);
        Ok(Response::new(Commands::default()))
    }
}
