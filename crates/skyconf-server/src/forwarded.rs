//! The gateway (`skyconf_gateway`) wired to this server: each forwarded call's agent connection
//! handed to the forwarder as its [`Agent`]: the connection's pin, and the fleet that records the
//! identity its management calls carry, against the connection (the identity ends with it).

use std::sync::Arc;

use skyconf_gateway::{Agent, Forwarder, ManagementCall, Pin, Upstreams};

use crate::fleet::{Caller, Fleet, InstanceIdentity};
use crate::socket::ConnectionState;

/// The gRPC router's fallback in gateway mode: forwards every call it gets to the OAPs.
#[derive(Debug, Clone)]
pub(crate) struct Forwarding {
    forwarder: Forwarder,
    fleet: Arc<Fleet>,
}

impl Forwarding {
    /// Forwarding to `upstreams`, recording identities in `fleet`.
    pub(crate) fn new(upstreams: Arc<Upstreams>, fleet: Arc<Fleet>) -> Self {
        Self { forwarder: Forwarder::new(upstreams), fleet }
    }

    /// Forwards `request`, pinned by the connection it came on.
    pub(crate) async fn forward(&self, request: axum::extract::Request) -> axum::response::Response {
        let agent = crate::socket::connection_of(request.extensions())
            .map(|c| ForwardedFrom { state: Arc::clone(&c.state), fleet: Arc::clone(&self.fleet) });
        self.forwarder.forward(request, agent).await
    }
}

/// The agent connection one forwarded call came on.
#[derive(Debug)]
pub(crate) struct ForwardedFrom {
    state: Arc<ConnectionState>,
    fleet: Arc<Fleet>,
}

/// The gateway's slot of an agent connection's state.
impl crate::socket::Slot for Pin {}

impl Agent for ForwardedFrom {
    fn pin(&self) -> Option<&Pin> {
        self.state.get::<Pin>()
    }

    fn identify(&self, call: ManagementCall, message: &[u8], agent_version: Option<String>) {
        let identity = match call {
            ManagementCall::ReportInstanceProperties => InstanceIdentity::of_properties(message, agent_version),
            ManagementCall::KeepAlive => InstanceIdentity::of_ping(message, agent_version),
        };
        if let Some(identity) = identity {
            self.fleet.identify(&Caller::Connection(Arc::clone(&self.state)), &identity);
        }
    }
}
