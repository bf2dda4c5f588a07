//! The skyconf server: the CDS gRPC service agents poll, the reloader that keeps its table
//! current, and the admin HTTP endpoints.
//!
//! [`start`] loads the configuration *before* it opens a port, so no agent ever sees the empty
//! table a freshly started OAP serves until its first store sync.

pub mod admin;
pub mod cds;
pub mod reload;
pub mod state;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use skyconf_sources::file::FileSource;
use skyconf_sources::{Limits, SourceError};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use cds::{CdsOptions, CdsService};
pub use reload::Reloader;
pub use state::ServedTable;

/// Everything `skyconf serve` needs.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The agent-configurations file.
    pub file: PathBuf,
    /// Where agents connect (gRPC).
    pub grpc_addr: SocketAddr,
    /// Where operators and orchestrators connect (HTTP).
    pub admin_addr: SocketAddr,
    /// CDS behaviour.
    pub cds: CdsOptions,
    /// Size limits for documents.
    pub limits: Limits,
}

/// Why the server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The store could not be read at start-up.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// The document at start-up was refused; there is no last good table to fall back to.
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
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind { addr, source })
}

/// Loads the configuration, then opens the ports and serves until shut down.
pub async fn start(config: ServeConfig) -> Result<Running, ServerError> {
    let source = FileSource::new(&config.file).with_limits(config.limits.clone());
    let origin = config.file.display().to_string();
    let text = source.read()?;
    let table = skyconf_core::read(&text).map_err(|error| ServerError::Document {
        origin: origin.clone(),
        error,
    })?;
    tracing::info!(file = %origin, services = table.len(), "Loaded agent configurations.");
    let served = Arc::new(ServedTable::new(table));

    let shutdown = CancellationToken::new();
    let mut tasks = JoinSet::new();

    let (updates_tx, updates_rx) = mpsc::channel(16);
    let watch = source.watch(Some(&text), updates_tx, shutdown.clone())?;
    tasks.spawn(async move {
        watch.await;
        Ok(())
    });
    let reloader = Reloader::new(Arc::clone(&served), origin, Some(&text));
    tasks.spawn(async move {
        reloader.run(updates_rx).await;
        Ok(())
    });

    let grpc_listener = bind(config.grpc_addr).await?;
    let admin_listener = bind(config.admin_addr).await?;
    let grpc_addr = grpc_listener
        .local_addr()
        .map_err(|source| ServerError::Bind {
            addr: config.grpc_addr,
            source,
        })?;
    let admin_addr = admin_listener
        .local_addr()
        .map_err(|source| ServerError::Bind {
            addr: config.admin_addr,
            source,
        })?;

    let cds = CdsService::new(Arc::clone(&served), config.cds).into_server();
    let stop = shutdown.clone();
    tasks.spawn(async move {
        let incoming =
            tonic::transport::server::TcpIncoming::from(grpc_listener).with_nodelay(Some(true));
        tonic::transport::Server::builder()
            .add_service(cds)
            .serve_with_incoming_shutdown(incoming, stop.cancelled_owned())
            .await
            .map_err(ServerError::Grpc)
    });

    let admin = admin::router(Arc::clone(&served));
    let stop = shutdown.clone();
    tasks.spawn(async move {
        axum::serve(admin_listener, admin)
            .with_graceful_shutdown(stop.cancelled_owned())
            .await
            .map_err(ServerError::Admin)
    });

    tracing::info!(%grpc_addr, %admin_addr, "Serving configuration discovery.");
    Ok(Running {
        grpc_addr,
        admin_addr,
        served,
        shutdown,
        tasks,
    })
}
