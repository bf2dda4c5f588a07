//! `skywalking.v3.ManagementService` (`reportInstanceProperties`, `keepAlive`), answered with an
//! empty `Commands` as the OAP answers it, so skyconf learns the instance name behind a peer
//! address. Agents send these calls on the same gRPC channel as their configuration polls, so the
//! peer address ties the two together. Nothing else is done with the properties.

use std::sync::Arc;

use skyconf_proto::v3::management_service_server::{ManagementService, ManagementServiceServer};
use skyconf_proto::v3::{Commands, InstancePingPkg, InstanceProperties};
use tonic::{Request, Response, Status};

use super::Fleet;

/// The largest management request accepted (properties of one instance).
pub const MAX_REQUEST_BYTES: usize = 256 * 1024;

/// Records instance names into a [`Fleet`].
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

    fn observe(&self, peer: Option<std::net::SocketAddr>, service: &str, instance: &str) {
        if let Some(peer) = peer {
            self.fleet.observe_instance(service, instance, peer);
        }
    }
}

#[tonic::async_trait]
impl ManagementService for Management {
    async fn report_instance_properties(
        &self,
        request: Request<InstanceProperties>,
    ) -> Result<Response<Commands>, Status> {
        let peer = crate::socket::peer_of(request.extensions());
        let properties = request.into_inner();
        self.observe(peer, &properties.service, &properties.service_instance);
        Ok(Response::new(Commands::default()))
    }

    async fn keep_alive(&self, request: Request<InstancePingPkg>) -> Result<Response<Commands>, Status> {
        let peer = crate::socket::peer_of(request.extensions());
        let ping = request.into_inner();
        self.observe(peer, &ping.service, &ping.service_instance);
        Ok(Response::new(Commands::default()))
    }
}
