//! OpAMP in `skyconf serve`: the [`skyconf_opamp`] server on a port of its own (`--opamp-addr`,
//! off unless set), answering OpenTelemetry agents from the same served document as the
//! SkyWalking agents (its `opamp:` section, [`skyconf_core::opamp`]).
//!
//! - [`backend`]: [`OpampFleet`], the [`skyconf_opamp::Backend`] over the served table, which
//!   also keeps the live agents for the fleet view (`GET /api/v1/opamp/agents`).
//! - [`effective`]: the contents of the agents' effective configurations, bounded.
//! - [`metrics`]: the `skyconf_opamp_agents{status}` gauge.
//! - [`replicas`]: the agents of the other replicas, through the shared store.
//! - [`security`]: the agent token and TLS on the port, as on the other ports.
//! - [`unmatched`]: the groups no connected agent is in (listed, and warned about).
//! - [`rollout`]: OpAMP agents in staged rollouts (which a wave reaches, what they are offered,
//!   what the gates read of them).

pub(crate) mod backend;
pub(crate) mod effective;
pub(crate) mod metrics;
pub(crate) mod replicas;
pub(crate) mod rollout;
pub(crate) mod security;
pub(crate) mod unmatched;

use std::net::SocketAddr;
use std::sync::Arc;

use skyconf_opamp::{Authorize, Opamp, OpampConfig};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub(crate) use backend::{OpampAgentRow, OpampFleet};
pub(crate) use security::PortSecurity;

use self::security::AgentToken;
use crate::security::connections::Acceptor;
use crate::security::tls::TlsListener;
use crate::{ServedTable, ServerError};

/// The OpAMP port, bound and serving.
#[derive(Debug)]
pub(crate) struct OpampPort {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its agents.
    pub fleet: Arc<OpampFleet>,
    /// The server (its stats).
    pub opamp: Opamp,
}

/// Binds `addr` and serves OpAMP there (plain HTTP and WebSocket on `/v1/opamp`, over TLS and
/// behind the agent token when `security` says so) from `served` until `shutdown`, in a task of
/// `tasks`.
pub(crate) async fn start(
    addr: SocketAddr,
    served: &Arc<ServedTable>,
    security: PortSecurity,
    tasks: &mut JoinSet<Result<(), ServerError>>,
    shutdown: &CancellationToken,
) -> Result<OpampPort, ServerError> {
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|cause| ServerError::Bind { addr, cause })?;
    let addr = listener.local_addr().map_err(|cause| ServerError::Bind { addr, cause })?;
    let fleet = Arc::new(OpampFleet::new(Arc::clone(served)));
    let authorize = AgentToken::of(security.token.as_ref()).map(|check| Arc::new(check) as Arc<dyn Authorize>);
    let token = authorize.is_some();
    let config = OpampConfig { authorize, ..OpampConfig::default() };
    let cap = config.limits.max_connections;
    let opamp = Opamp::new(config, Arc::clone(&fleet) as Arc<dyn skyconf_opamp::Backend>);
    let (serving, stop) = (opamp.clone(), shutdown.clone());
    let tls = security.tls.is_some();
    match security.tls {
        None => {
            tasks.spawn(
                async move { serving.serve(listener, stop.cancelled_owned()).await.map_err(ServerError::Opamp) },
            );
        }
        Some(config) => {
            let acceptor = Acceptor::new(listener, cap, "OpAMP");
            let listener = TlsListener::for_port(acceptor, config, security.handshake_timeout, "OpAMP")
                .map_err(|cause| ServerError::Bind { addr, cause })?;
            tasks.spawn(
                async move { serving.serve(listener, stop.cancelled_owned()).await.map_err(ServerError::Opamp) },
            );
        }
    }
    tracing::info!(%addr, path = skyconf_opamp::DEFAULT_PATH, tls, token, "Serving OpAMP (plain HTTP and WebSocket).");
    Ok(OpampPort { addr, fleet, opamp })
}
