//! OpAMP in `skyconf serve`: the [`skyconf_opamp`] server on a port of its own (`--opamp-addr`,
//! off unless set), answering OpenTelemetry agents from the same served document as the
//! SkyWalking agents (its `opamp:` section, [`skyconf_core::opamp`]).
//!
//! - [`backend`]: [`OpampFleet`], the [`skyconf_opamp::Backend`] over the served table, which
//!   also keeps the live agents for the fleet view (`GET /api/v1/opamp/agents`).
//! - [`metrics`]: the `skyconf_opamp_agents{status}` gauge.
//! - [`rollout`]: OpAMP agents in staged rollouts (which a wave reaches, what they are offered,
//!   what the gates read of them).

pub mod backend;
pub mod metrics;
pub mod rollout;

use std::net::SocketAddr;
use std::sync::Arc;

use skyconf_opamp::{Opamp, OpampConfig};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use backend::{OpampAgentRow, OpampFleet};

use crate::{ServedTable, ServerError};

/// The OpAMP port, bound and serving.
#[derive(Debug)]
pub struct OpampPort {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its agents.
    pub fleet: Arc<OpampFleet>,
    /// The server (its stats).
    pub opamp: Opamp,
}

/// Binds `addr` and serves OpAMP there (plain HTTP and WebSocket on `/v1/opamp`) from `served`
/// until `shutdown`, in a task of `tasks`.
pub async fn start(
    addr: SocketAddr,
    served: &Arc<ServedTable>,
    tasks: &mut JoinSet<Result<(), ServerError>>,
    shutdown: &CancellationToken,
) -> Result<OpampPort, ServerError> {
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|cause| ServerError::Bind { addr, cause })?;
    let addr = listener.local_addr().map_err(|cause| ServerError::Bind { addr, cause })?;
    let fleet = Arc::new(OpampFleet::new(Arc::clone(served)));
    let opamp = Opamp::new(OpampConfig::default(), Arc::clone(&fleet) as Arc<dyn skyconf_opamp::Backend>);
    let (serving, stop) = (opamp.clone(), shutdown.clone());
    tasks.spawn(async move { serving.serve(listener, stop.cancelled_owned()).await.map_err(ServerError::Opamp) });
    tracing::info!(%addr, path = skyconf_opamp::DEFAULT_PATH, "Serving OpAMP (plain HTTP and WebSocket).");
    Ok(OpampPort { addr, fleet, opamp })
}
