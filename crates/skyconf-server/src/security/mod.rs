//! Who may talk to skyconf, over what, and how much they may send.
//!
//! - [`auth`]: the agent token, checked exactly as the OAP checks it (gRPC metadata
//!   `Authentication`, exact match, `PERMISSION_DENIED`), and bearer tokens with read and write
//!   roles on the admin API.
//! - [`tls`]: rustls (ring provider) for the gRPC and admin ports, from PEM files, with optional
//!   client certificates.
//! - [`limits`]: HTTP/2 limits of the gRPC port and request body limits of the admin API.
//! - [`connections`]: handshake deadlines, connection caps and accept backoff on both ports.
//! - [`sources`]: fair shares of the gRPC port's shared bounds by source address.
//! - [`drain`]: how the gRPC port's connections close, at shutdown and otherwise, without a reset.
//! - [`browser`]: the admin port against browsers: cross-site writes, DNS rebinding, CSP.
//!
//! Everything is off by default, as on an OAP. Secrets are [`Secret`]s: their `Debug` is
//! redacted and they have no `Display`, so none can reach a log line by accident.

pub mod auth;
pub mod browser;
pub mod connections;
pub mod drain;
pub mod limits;
pub mod metrics;
pub mod sources;
pub mod tls;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use tokio::net::TcpListener;
use tokio_rustls::rustls::ServerConfig;

pub use auth::{AdminTokens, Role, Secret};
pub use browser::AllowedHosts;
pub use connections::ConnectionLimits;
pub use limits::{GrpcLimits, Http2Server, SERVER_ENV};
pub use tls::{ClientAuth, ClientCerts, TlsFiles};

/// The security settings of one server; [`Default`] is everything off.
#[derive(Debug, Clone, Default)]
pub struct SecurityConfig {
    /// The token agents must send as gRPC metadata `Authentication` to the CDS service (the
    /// OAP's `receiver-sharing-server.default.authentication`); `None`: not checked. The OpAMP
    /// port checks it too ([`crate::opamp::security`]).
    pub agent_token: Option<Secret>,
    /// The token OAPs must send to the DCS service. A stock OAP's DCS client sends no metadata,
    /// so setting this locks stock OAPs out; for DCS clients that can send it.
    pub dcs_token: Option<Secret>,
    /// Bearer tokens of the admin API; none: the API is open.
    pub admin_tokens: AdminTokens,
    /// `/metrics` without a token even when admin tokens are configured.
    pub metrics_open: bool,
    /// TLS on the gRPC port.
    pub grpc_tls: Option<TlsFiles>,
    /// TLS on the admin port.
    pub admin_tls: Option<TlsFiles>,
    /// TLS on the OpAMP port (`--opamp-addr`).
    pub opamp_tls: Option<TlsFiles>,
    /// HTTP/2 limits of the gRPC port.
    pub grpc_limits: GrpcLimits,
    /// Connection caps and the handshake deadline of both ports.
    pub connections: ConnectionLimits,
    /// Host names the admin port answers to besides IP literals and `localhost` ([`browser`]).
    pub allowed_hosts: AllowedHosts,
}

/// Why a security setting cannot be used. Raised at start-up: the server does not open a port
/// with half of its security.
#[derive(Debug, thiserror::Error)]
pub enum SecurityError {
    /// A file could not be read.
    #[error("cannot read {path}: {cause}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause, in the message (so logs of the error alone keep it); not also its
        /// `source()`, which would print it twice in a chain.
        cause: std::io::Error,
    },
    /// A PEM file holds nothing usable.
    #[error("{path}: {message}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// rustls refused the certificate, key or CA bundle.
    #[error("TLS setup of {what}: {message}")]
    Tls {
        /// `the gRPC port`, `the admin port` or `the connections to the OAPs`.
        what: &'static str,
        /// rustls' or tonic's reason.
        message: String,
    },
    /// A token file line is not `read <token>` or `write <token>`.
    #[error("{path}:{line}: expected `read <token>` or `write <token>`")]
    TokenFile {
        /// The file.
        path: PathBuf,
        /// The 1-based line (its text is not repeated: it may hold a token).
        line: usize,
    },
}

/// Serves `app` on `listener`, over TLS when `tls` is given, until `stop` completes, within
/// the connection cap and handshake deadline of `limits` ([`connections`]). The deadline also
/// bounds every later HTTP/1 request's header block, counted from when the connection starts
/// waiting for it: a keep-alive connection left idle after a request is closed after it.
pub async fn serve_admin(
    listener: TcpListener,
    app: Router,
    tls: Option<Arc<ServerConfig>>,
    limits: ConnectionLimits,
    stop: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let acceptor = connections::Acceptor::new(listener, limits.max_admin_connections, "admin");
    let timeout = limits.handshake_timeout;
    match tls {
        None => serve_http(AdminListener { acceptor, timeout }, app, timeout, stop).await,
        Some(config) => serve_http(tls::TlsListener::new(acceptor, config, timeout)?, app, timeout, stop).await,
    }
}

/// What `axum::serve(..).with_graceful_shutdown(stop)` does — HTTP/1.1 and HTTP/2 on each
/// accepted connection, in a task of its own; on `stop`, no new connections and the open ones
/// finish what they are answering — with an HTTP/1 header-read timeout, which `axum::serve`
/// cannot be given.
async fn serve_http<L>(
    mut listener: L,
    app: Router,
    header_read_timeout: std::time::Duration,
    stop: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()>
where
    L: axum::serve::Listener,
{
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(header_read_timeout);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut stop = std::pin::pin!(stop);
    loop {
        let (io, _peer) = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut stop => break,
        };
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        let connection = graceful.watch(builder.serve_connection(TokioIo::new(io), service).into_owned());
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                // Debug only: timeouts and resets by clients are routine.
                tracing::debug!(%error, "An admin connection ended with an error.");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// The admin port's plain listener: capped, backing off on accept errors, each connection with
/// its opening deadline.
#[derive(Debug)]
struct AdminListener {
    acceptor: connections::Acceptor,
    timeout: std::time::Duration,
}

impl axum::serve::Listener for AdminListener {
    type Io = connections::Guarded<tokio::net::TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (stream, peer, admission) = self.acceptor.accept().await;
        let _ = stream.set_nodelay(true);
        (connections::Guarded::new(stream, connections::Opening::Http1OrHttp2, self.timeout, admission), peer)
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.acceptor.listener().local_addr()
    }
}
