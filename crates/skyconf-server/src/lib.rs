//! The skyconf server: the CDS gRPC service agents poll, the DCS service OAPs poll, the store
//! task and reloader that keep the table current from a store, and the admin HTTP endpoints.
//!
//! The parts are modules of their own; [`start_with`] (in `app`) wires them into a running
//! server, after `startup` decided what to serve first. It loads the configuration *before* it opens a port, so no agent ever sees the
//! empty table a freshly started OAP serves until its first store sync; when the store is down it
//! serves the persisted last good copy, and with nothing at all it answers "no change".
//!
//! # What is public
//!
//! The CLI's and the tests' surface, nothing more; every other module is `pub(crate)`.
//! - [`start_with`], [`ServeConfig`] and its option types, [`Running`], [`ServerError`]: how the
//!   CLI starts and stops a server.
//! - [`CdsService`], [`ServedTable`], [`Fleet`], [`StoreView`], [`ReleaseLog`], [`Reloader`],
//!   [`StoreTask`], [`Metrics`] and [`agent_slots`]: the parts the tests, the benches and `skyconf
//!   agent --self-test` wire by hand.
//! - Modules whose items the CLI or the tests name: [`admin`] (the router, for the tests),
//!   [`cds`] (the hold header and deadlines), [`fleet`] (agent states), [`publish`] (announced
//!   writes), [`reload`] (the fleet-reset guard's settings), [`rollout`] (the Prometheus gate),
//!   [`security`] (the settings the CLI parses), [`served`] (rejections), [`socket`] (the
//!   per-connection state), and [`gateway`] (the gateway crate's settings).

pub mod admin;
pub mod agent_port;
mod app;
pub mod cds;
mod chunked_text;
pub(crate) mod dcs;
mod error;
pub mod fleet;
pub(crate) mod forwarded;
pub(crate) mod management;
pub(crate) mod metrics;
pub(crate) mod opamp;
pub(crate) mod persist;
pub(crate) mod persister;
pub mod publish;
pub(crate) mod releases;
pub mod reload;
pub mod rollout;
pub mod security;
pub mod served;
pub(crate) mod shared_history;
pub mod socket;
mod startup;
pub(crate) mod store_task;
pub(crate) mod store_view;
pub(crate) mod summaries;
mod text;
mod unix_time;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use skyconf_sources::KeySet;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use admin::AdminOptions;
pub use app::{agent_slots, start_with};
pub use cds::hold::HoldOptions;
pub use cds::{CdsOptions, CdsService};
pub use error::ServerError;
pub use fleet::replicas::ReplicaOptions;
pub use fleet::{Fleet, FleetOptions, InstanceIdentity};
pub use metrics::Metrics;
use persist::LastGood;
use persister::Persister;
pub use releases::ReleaseLog;
pub use reload::Reloader;
pub use security::SecurityConfig;
pub use served::ServedTable;
/// The gateway's settings, as the CLI builds them.
pub use skyconf_gateway as gateway;
pub use skyconf_gateway::GatewayConfig;
pub use store_task::StoreTask;
pub use store_view::StoreView;

/// How the server runs, whatever the store.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Where agents connect (gRPC). The DCS service for OAPs is on the same port.
    pub grpc_addr: SocketAddr,
    /// Where operators and orchestrators connect (HTTP).
    pub admin_addr: SocketAddr,
    /// CDS behaviour.
    pub cds: CdsOptions,
    /// When unchanged polls are held until a change (see [`cds::hold`]).
    pub hold: HoldOptions,
    /// Where the last good configuration is persisted; none: not persisted.
    pub data_dir: Option<PathBuf>,
    /// The keys to ask the store about.
    pub keys: KeySet,
    /// How long the first read of the store may take before the server starts without it.
    pub initial_load_timeout: Duration,
    /// Refuse to start when the store cannot be read or holds a refused document and nothing is
    /// persisted (right for a local file; a remote store may come back, so the server then starts
    /// not ready and answers "no change").
    pub require_initial_load: bool,
    /// How many releases the release log keeps (in `data_dir/releases`, or in memory without a
    /// data directory).
    pub release_retention: usize,
    /// Fleet tracking: when an agent counts as stuck, when it is forgotten.
    pub fleet: FleetOptions,
    /// Limits of the admin API.
    pub admin: AdminOptions,
    /// Tokens, TLS and connection limits; everything off by default.
    pub security: SecurityConfig,
    /// Holds store changes that would reset the fleet (see [`reload`]).
    pub reset_guard: reload::Guard,
    /// Gateway mode: every call but CDS and DCS is forwarded to these OAPs; `None`: the server
    /// answers `ManagementService` itself and refuses other calls (UNIMPLEMENTED).
    pub gateway: Option<GatewayConfig>,
    /// The replica's id and how often its fleet summary is shared with the other replicas through
    /// the store (see [`fleet::replicas`]).
    pub replicas: ReplicaOptions,
    /// The OpAMP port (`--opamp-addr`; `None`: off).
    pub opamp_addr: Option<SocketAddr>,
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            grpc_addr: "0.0.0.0:11800".parse().expect("valid address"),
            admin_addr: "0.0.0.0:12800".parse().expect("valid address"),
            cds: CdsOptions::default(),
            hold: HoldOptions::default(),
            data_dir: None,
            keys: KeySet::oap(),
            initial_load_timeout: Duration::from_secs(10),
            require_initial_load: true,
            release_retention: releases::DEFAULT_RETENTION,
            fleet: FleetOptions::default(),
            admin: AdminOptions::default(),
            security: SecurityConfig::default(),
            reset_guard: reload::Guard::default(),
            gateway: None,
            replicas: ReplicaOptions::default(),
            opamp_addr: None,
        }
    }
}

/// A started server.
#[derive(Debug)]
pub struct Running {
    /// The bound gRPC address (the real port when 0 was asked for).
    pub grpc_addr: SocketAddr,
    /// The bound admin address.
    pub admin_addr: SocketAddr,
    /// The served table.
    pub served: Arc<ServedTable>,
    /// The store's content and status.
    pub store: Arc<StoreView>,
    /// Every accepted document.
    pub releases: Arc<ReleaseLog>,
    /// Which agent holds which configuration.
    pub fleet: Arc<Fleet>,
    /// This replica's id, and the other replicas' fleet summaries.
    pub replicas: Arc<fleet::replicas::Replicas>,
    /// The server's metrics, as `/metrics` exposes them.
    pub metrics: Arc<Metrics>,
    /// Where the OpAMP port listens, when it runs.
    pub opamp_addr: Option<SocketAddr>,
    pub(crate) persister: Persister,
    pub(crate) shutdown: CancellationToken,
    pub(crate) tasks: JoinSet<Result<(), ServerError>>,
}

impl Running {
    /// A token that stops the server when cancelled.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Waits until the server stops (after [`Self::shutdown_token`] is cancelled, or a failure)
    /// and every release file and last good copy is on disk; then logs that it stopped, and how
    /// long the stop took.
    pub async fn wait(mut self) -> Result<(), ServerError> {
        let mut result = Ok(());
        let mut began = None;
        loop {
            let joined = tokio::select! {
                () = self.shutdown.cancelled(), if began.is_none() => {
                    began = Some(std::time::Instant::now());
                    continue;
                }
                joined = self.tasks.join_next() => joined,
            };
            let Some(joined) = joined else { break };
            // The first failure stops the others.
            if let Ok(Err(e)) = joined {
                self.shutdown.cancel();
                if result.is_ok() {
                    result = Err(e);
                }
            }
        }
        let persister = self.persister.clone();
        let _ = tokio::task::spawn_blocking(move || persister.flush()).await;
        let took_ms = began.map_or(0, |began| began.elapsed().as_millis() as u64);
        tracing::info!(took_ms, "Stopped.");
        result
    }

    /// Stops the server and waits for it.
    pub async fn stop(self) -> Result<(), ServerError> {
        self.shutdown.cancel();
        self.wait().await
    }
}
