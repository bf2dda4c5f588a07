//! The skyconf server: the CDS gRPC service agents poll, the DCS service OAPs poll, the hub and
//! reloader that keep the table current from a store, and the admin HTTP endpoints.
//!
//! [`start_with`] loads the configuration *before* it opens a port, so no agent ever sees the
//! empty table a freshly started OAP serves until its first store sync; when the store is down it
//! serves the persisted last good copy, and with nothing at all it answers "no change".

pub mod admin;
pub mod cds;
pub mod dcs;
pub mod fleet;
pub mod hub;
pub mod metrics;
pub mod persist;
pub mod releases;
pub mod reload;
pub mod security;
pub mod served;
pub mod socket;
pub mod store_view;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use skyconf_core::store::StoreContent;
use skyconf_sources::{KeySet, Source, SourceError};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use admin::AdminOptions;
pub use cds::{CdsOptions, CdsService};
pub use fleet::{Fleet, FleetOptions};
pub use hub::Hub;
pub use metrics::Metrics;
pub use persist::LastGood;
pub use releases::ReleaseLog;
pub use reload::Reloader;
pub use security::{SecurityConfig, SecurityError};
pub use served::ServedTable;
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
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            grpc_addr: "0.0.0.0:11800".parse().expect("valid address"),
            admin_addr: "0.0.0.0:12800".parse().expect("valid address"),
            cds: CdsOptions::default(),
            data_dir: None,
            keys: KeySet::oap(),
            initial_load_timeout: Duration::from_secs(10),
            require_initial_load: true,
            release_retention: releases::DEFAULT_RETENTION,
            fleet: FleetOptions::default(),
            admin: AdminOptions::default(),
            security: SecurityConfig::default(),
        }
    }
}

/// Why the server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The store could not be read at start-up and nothing was persisted.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// The store did not answer in time at start-up and nothing was persisted.
    #[error("{store} did not answer within {timeout:?}")]
    SourceTimeout {
        /// The store.
        store: String,
        /// The limit.
        timeout: Duration,
    },
    /// The document at start-up was refused and there is no last good table to fall back to.
    #[error("{origin}: {error}")]
    Document {
        /// Where the document came from.
        origin: String,
        /// Why it was refused.
        #[source]
        error: skyconf_core::ReadError,
    },
    /// A listening socket could not be opened.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The gRPC server failed.
    #[error("gRPC server: {0}")]
    Grpc(#[from] tonic::transport::Error),
    /// The admin server failed.
    #[error("admin server: {0}")]
    Admin(std::io::Error),
    /// A token file, certificate or key cannot be used.
    #[error(transparent)]
    Security(#[from] SecurityError),
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
    /// The server's metrics, as `/metrics` exposes them.
    pub metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    tasks: JoinSet<Result<(), ServerError>>,
}

impl Running {
    /// A token that stops the server when cancelled.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Waits until the server stops (after [`Self::shutdown_token`] is cancelled, or a failure).
    pub async fn wait(mut self) -> Result<(), ServerError> {
        let mut result = Ok(());
        while let Some(joined) = self.tasks.join_next().await {
            // The first failure stops the others.
            if let Ok(Err(e)) = joined {
                self.shutdown.cancel();
                if result.is_ok() {
                    result = Err(e);
                }
            }
        }
        result
    }

    /// Stops the server and waits for it.
    pub async fn stop(self) -> Result<(), ServerError> {
        self.shutdown.cancel();
        self.wait().await
    }
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, ServerError> {
    TcpListener::bind(addr).await.map_err(|source| ServerError::Bind { addr, source })
}

/// What the server starts with: the table, the text it came from, the store content, and
/// whether that content is current.
struct Initial {
    served: ServedTable,
    accepted: Option<String>,
    content: StoreContent,
    connected: bool,
    stale: bool,
    rejection: Option<served::Rejection>,
    failure: Option<String>,
}

/// Reads the store once, falling back to the persisted copy.
async fn initial_state<S: Source>(
    source: &S,
    config: &ServeConfig,
    last_good: Option<&LastGood>,
) -> Result<Initial, ServerError> {
    let store = source.describe();
    let persisted = last_good.and_then(|copy| match copy.load() {
        Ok(p) => p,
        Err(error) => {
            tracing::warn!(%error, "Ignoring the persisted configuration.");
            None
        }
    });
    let from_persisted = |connected: bool, content: StoreContent, rejection, failure| {
        let p = persisted.as_ref()?;
        let text = p.content.agent_configurations().map(str::to_owned);
        let table = skyconf_core::read(text.as_deref().unwrap_or("")).ok()?;
        tracing::warn!(store = %store, saved_at = p.saved_at, services = table.len(), "Serving the persisted last good configuration.");
        let (content, stale) = if connected { (content, false) } else { (p.content.clone(), true) };
        Some(Initial { served: ServedTable::new(table), accepted: text, content, connected, stale, rejection, failure })
    };
    let loaded = tokio::time::timeout(config.initial_load_timeout, source.load(&config.keys)).await;
    let failure = match loaded {
        Ok(Ok(content)) => {
            let text = content.agent_configurations().map(str::to_owned);
            return match skyconf_core::read(text.as_deref().unwrap_or("")) {
                Ok(table) => Ok(Initial {
                    served: ServedTable::new(table),
                    accepted: text,
                    content,
                    connected: true,
                    stale: false,
                    rejection: None,
                    failure: None,
                }),
                Err(error) => {
                    let rejection = served::Rejection {
                        origin: store.clone(),
                        error: error.to_string(),
                        at: std::time::SystemTime::now(),
                    };
                    if let Some(initial) = from_persisted(true, content.clone(), Some(rejection.clone()), None) {
                        return Ok(initial);
                    }
                    if config.require_initial_load {
                        return Err(ServerError::Document { origin: store, error });
                    }
                    tracing::error!(store = %store, %error, "Refused the store's agent configurations and nothing is persisted; answering \"no change\" until a good document arrives.");
                    Ok(Initial {
                        served: ServedTable::waiting(),
                        accepted: None,
                        content,
                        connected: true,
                        stale: false,
                        rejection: Some(rejection),
                        failure: None,
                    })
                }
            };
        }
        Ok(Err(error)) => error,
        Err(_) => {
            if persisted.is_none() && config.require_initial_load {
                return Err(ServerError::SourceTimeout { store, timeout: config.initial_load_timeout });
            }
            SourceError::Unavailable {
                store: store.clone(),
                message: format!("no answer within {:?}", config.initial_load_timeout),
            }
        }
    };
    if let Some(initial) = from_persisted(false, StoreContent::default(), None, Some(failure.to_string())) {
        return Ok(initial);
    }
    if config.require_initial_load {
        return Err(failure.into());
    }
    tracing::error!(store = %store, error = %failure, "The store is unreachable and nothing is persisted; answering \"no change\" until it is back.");
    Ok(Initial {
        served: ServedTable::waiting(),
        accepted: None,
        content: StoreContent::default(),
        connected: false,
        stale: false,
        rejection: None,
        failure: Some(failure.to_string()),
    })
}

/// Loads the configuration from `source` (or the persisted copy), then opens the ports and
/// serves until shut down, applying every change the source reports.
pub async fn start_with<S: Source>(source: S, config: ServeConfig) -> Result<Running, ServerError> {
    let store_name = source.describe();
    // Certificates and keys are checked before anything else: no port opens with half its security.
    let grpc_tls = config.security.grpc_tls.as_ref().map(security::tls::grpc_config).transpose()?;
    let admin_tls = config.security.admin_tls.as_ref().map(|f| security::tls::server_config(f, "admin")).transpose()?;
    let last_good = config.data_dir.as_deref().map(LastGood::in_dir);
    let initial = initial_state(&source, &config, last_good.as_ref()).await?;
    tracing::info!(store = %store_name, services = initial.served.snapshot().table.len(), ready = initial.served.snapshot().ready(), stale = initial.stale, "Loaded agent configurations.");
    let served = Arc::new(initial.served);
    let releases = Arc::new(open_releases(&config));
    if served.snapshot().ready() {
        let snapshot = served.snapshot();
        releases.record_start(&snapshot.table, initial.accepted.as_deref(), snapshot.version, &store_name);
    }
    if let Some(rejection) = initial.rejection {
        releases.record_rejection(
            &rejection.origin,
            &rejection.error,
            initial.content.agent_configurations().unwrap_or_default(),
        );
        served.record_rejection(rejection);
    }
    let store = Arc::new(StoreView::new(store_name.clone(), initial.content, initial.connected, initial.stale));
    if let Some(failure) = initial.failure {
        store.mark_failed(failure);
    }
    let metrics = Arc::new(Metrics::for_server(Arc::clone(&served), Arc::clone(&store)));
    if let Some(rejection) = served.last_rejection() {
        metrics.events().for_origin(&rejection.origin).document_rejected(&rejection.error);
    }

    let shutdown = CancellationToken::new();
    let mut tasks = JoinSet::new();

    let grpc_listener = bind(config.grpc_addr).await?;
    let admin_listener = bind(config.admin_addr).await?;
    let grpc_addr =
        grpc_listener.local_addr().map_err(|source| ServerError::Bind { addr: config.grpc_addr, source })?;
    let admin_addr =
        admin_listener.local_addr().map_err(|source| ServerError::Bind { addr: config.admin_addr, source })?;

    let (updates_tx, updates_rx) = mpsc::channel(64);
    let source = Arc::new(source);
    let (watched, keys, stop) = (Arc::clone(&source), config.keys.clone(), shutdown.clone());
    tasks.spawn(async move {
        watched.run(keys, updates_tx, stop).await;
        Ok(())
    });
    let reloader = Reloader::new(Arc::clone(&served), store_name, initial.accepted.as_deref())
        .with_releases(Arc::clone(&releases))
        .with_events(&metrics.events());
    let hub = Hub::new(Arc::clone(&store), reloader, last_good).with_events(metrics.events());
    tasks.spawn(async move {
        hub.run(updates_rx).await;
        Ok(())
    });

    let fleet = Arc::new(Fleet::new(config.fleet));
    publish_fleet_gauges(&metrics, &fleet, &served);
    tasks.spawn(sweep_fleet(Arc::clone(&fleet), shutdown.clone()));
    let cds = CdsService::new(Arc::clone(&served), config.cds)
        .with_fleet(Arc::clone(&fleet))
        .with_metrics(metrics.cds())
        .into_server();
    let management = fleet::management::Management::new(Arc::clone(&fleet)).into_server();
    let dcs = dcs::DcsService::new(Arc::clone(&store)).with_metrics(metrics.dcs()).into_server();
    // Each service is added either as it is or behind its token check (no cost when off).
    use security::auth::guard;
    let (agent_token, dcs_token, events) =
        (config.security.agent_token.as_ref(), config.security.dcs_token.as_ref(), metrics.events());
    let (cds, cds_guarded) = guard(cds, agent_token, metrics::GuardedService::Cds, &events);
    let (management, management_guarded) = guard(management, agent_token, metrics::GuardedService::Management, &events);
    let (dcs, dcs_guarded) = guard(dcs, dcs_token, metrics::GuardedService::Dcs, &events);
    let limits = config.security.grpc_limits;
    let mut grpc = tonic::transport::Server::builder();
    if let Some(tls) = grpc_tls {
        grpc = grpc.tls_config(tls).map_err(|e| SecurityError::Tls { what: "gRPC", message: e.to_string() })?;
    }
    let mut grpc = limits.apply(grpc);
    let stop = shutdown.clone();
    tasks.spawn(async move {
        grpc.add_optional_service(cds)
            .add_optional_service(cds_guarded)
            .add_optional_service(management)
            .add_optional_service(management_guarded)
            .add_optional_service(dcs)
            .add_optional_service(dcs_guarded)
            .serve_with_incoming_shutdown(limits.incoming(grpc_listener), stop.cancelled_owned())
            .await
            .map_err(ServerError::Grpc)
    });

    let admin = admin::Admin::new(Arc::clone(&served), Arc::clone(&store))
        .with_releases(Arc::clone(&releases))
        .with_fleet(Arc::clone(&fleet))
        .with_writer(source as Arc<dyn admin::StoreWriter>)
        .with_options(config.admin);
    let admin = security::admin_app(&admin, &metrics, &config.security, config.admin.max_document_bytes);
    let stop = shutdown.clone();
    tasks.spawn(async move {
        security::serve_admin(admin_listener, admin, admin_tls, stop.cancelled_owned())
            .await
            .map_err(ServerError::Admin)
    });

    tracing::info!(%grpc_addr, %admin_addr, "Serving configuration discovery.");
    Ok(Running { grpc_addr, admin_addr, served, store, releases, fleet, metrics, shutdown, tasks })
}

/// The release log in the data directory, or in memory without one (or when it cannot be read).
fn open_releases(config: &ServeConfig) -> ReleaseLog {
    let Some(dir) = &config.data_dir else {
        tracing::info!("No data directory: the release history is kept in memory and lost on restart.");
        return ReleaseLog::in_memory(config.release_retention);
    };
    ReleaseLog::open(dir, config.release_retention).unwrap_or_else(|error| {
        tracing::error!(%error, "Cannot read the release history; keeping releases in memory.");
        ReleaseLog::in_memory(config.release_retention)
    })
}

/// The fleet gauges, counted from the fleet table on every scrape.
fn publish_fleet_gauges(metrics: &Metrics, fleet: &Arc<Fleet>, served: &Arc<ServedTable>) {
    use metrics::{AgentsPerDigest, StuckAgents};
    let (fleet, served) = (Arc::clone(fleet), Arc::clone(served));
    metrics.fleet().on_scrape(move || {
        let per_digest = fleet
            .per_digest()
            .into_iter()
            .map(|((service, digest), agents)| AgentsPerDigest { service, digest, agents: agents as u64 })
            .collect();
        let snapshot = served.snapshot();
        let stuck = fleet
            .counts(|service| snapshot.answer(service).digest.clone())
            .into_iter()
            .map(|(service, counts)| StuckAgents { service, agents: counts.stuck as u64 })
            .collect();
        (per_digest, stuck)
    });
}

/// Forgets agents not seen lately, until `stop`.
async fn sweep_fleet(fleet: Arc<Fleet>, stop: CancellationToken) -> Result<(), ServerError> {
    let period = (fleet.options().expire_after / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
    let mut tick = tokio::time::interval(period);
    loop {
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            _ = tick.tick() => {
                let forgotten = fleet.sweep();
                if forgotten > 0 {
                    tracing::debug!(forgotten, tracked = fleet.tracked(), "Forgot agents not seen lately.");
                }
            }
        }
    }
}
