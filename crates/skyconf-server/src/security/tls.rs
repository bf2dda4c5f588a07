//! TLS for every port (gRPC, admin, OpAMP), from PEM files: a certificate chain and its key, and optionally a CA
//! bundle that client certificates must chain to (required, or only requested).
//!
//! rustls with the *ring* provider throughout: no OpenSSL, no aws-lc-sys. Both ports complete
//! handshakes with tokio-rustls in their own tasks ([`handshakes`]), each bounded by
//! [`HANDSHAKE_TIMEOUT`], so one slow client never holds up the others. Then, below HTTP and above
//! TLS, the connection's opening bytes (the HTTP/2 preface, or an HTTP/1 header block) must follow
//! within the handshake deadline of [`super::connections`]: a client that completes TLS and then
//! says nothing is closed, as a plaintext one is. The admin port serves over a [`TlsListener`];
//! the gRPC port hands tonic the finished streams ([`super::GrpcLimits::incoming_tls`]), not to
//! tonic's own acceptor, under which the deadline would count bytes below TLS, where the
//! handshake hides a missing preface. The files are read and checked (the key must match the certificate)
//! before any port opens; an error names the file.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{RootCertStore, ServerConfig};
use tokio_rustls::server::TlsStream;

use super::SecurityError;
use super::connections::{Acceptor, Guarded, Opening, Socket};

/// How long a client may take to complete its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether a client certificate is required or only asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientAuth {
    /// A client without a certificate chaining to the CA fails the handshake.
    #[default]
    Require,
    /// A certificate is asked for and verified when sent; clients without one are let in.
    Request,
}

impl std::str::FromStr for ClientAuth {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "require" => Ok(Self::Require),
            "request" => Ok(Self::Request),
            other => Err(format!("`{other}`: expected `require` or `request`")),
        }
    }
}

impl<'de> serde::Deserialize<'de> for ClientAuth {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer)?.parse().map_err(serde::de::Error::custom)
    }
}

/// Client certificate verification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCerts {
    /// PEM bundle of the CAs client certificates must chain to.
    pub ca: PathBuf,
    /// Required or requested.
    pub auth: ClientAuth,
}

/// The PEM files of one port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// The private key of the leaf (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// Client certificates, if any are verified.
    pub client_certs: Option<ClientCerts>,
}

fn read(path: &Path) -> Result<Vec<u8>, SecurityError> {
    std::fs::read(path).map_err(|cause| SecurityError::Read { path: path.to_owned(), cause })
}

fn certificates(path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, SecurityError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| SecurityError::Pem { path: path.to_owned(), message: e.to_string() })?;
    if certs.is_empty() {
        return Err(SecurityError::Pem { path: path.to_owned(), message: "no CERTIFICATE block".into() });
    }
    Ok(certs)
}

fn private_key(path: &Path, pem: &[u8]) -> Result<PrivateKeyDer<'static>, SecurityError> {
    PrivateKeyDer::from_pem_slice(pem)
        .map_err(|e| SecurityError::Pem { path: path.to_owned(), message: format!("no usable private key: {e}") })
}

/// The rustls configuration of one port (`what`: `gRPC`, `admin` or `OpAMP`, for errors),
/// offering HTTP/2 and HTTP/1.1 by ALPN.
pub fn server_config(files: &TlsFiles, what: &'static str) -> Result<Arc<ServerConfig>, SecurityError> {
    let what = match what {
        "gRPC" => "the gRPC port",
        "OpAMP" => "the OpAMP port",
        _ => "the admin port",
    };
    let tls_error = |message: String| SecurityError::Tls { what, message };
    let chain = certificates(&files.cert, &read(&files.cert)?)?;
    let key = private_key(&files.key, &read(&files.key)?)?;
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_error(e.to_string()))?;
    let builder = match &files.client_certs {
        None => builder.with_no_client_auth(),
        Some(client) => {
            let mut roots = RootCertStore::empty();
            for ca in certificates(&client.ca, &read(&client.ca)?)? {
                roots.add(ca).map_err(|e| SecurityError::Pem { path: client.ca.clone(), message: e.to_string() })?;
            }
            let mut verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            if client.auth == ClientAuth::Request {
                verifier = verifier.allow_unauthenticated();
            }
            builder.with_client_cert_verifier(verifier.build().map_err(|e| tls_error(e.to_string()))?)
        }
    };
    let mut config = builder.with_single_cert(chain, key).map_err(|e| tls_error(e.to_string()))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The rustls configuration of the gRPC port: [`server_config`], offering only HTTP/2 by ALPN.
pub fn grpc_config(files: &TlsFiles) -> Result<Arc<ServerConfig>, SecurityError> {
    let mut config = Arc::unwrap_or_clone(server_config(files, "gRPC")?);
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// The rustls client configuration of the gateway's connections to the OAPs: their certificates
/// must chain to `tls.ca`; skyconf presents `tls.cert` when given. Offers only HTTP/2 by ALPN.
pub fn upstream_client_config(
    tls: &skyconf_gateway::UpstreamTls,
) -> Result<Arc<tokio_rustls::rustls::ClientConfig>, SecurityError> {
    let what = "the connections to the OAPs";
    let tls_error = |message: String| SecurityError::Tls { what, message };
    let mut roots = RootCertStore::empty();
    for ca in certificates(&tls.ca, &read(&tls.ca)?)? {
        roots.add(ca).map_err(|e| SecurityError::Pem { path: tls.ca.clone(), message: e.to_string() })?;
    }
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let builder = tokio_rustls::rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_error(e.to_string()))?
        .with_root_certificates(roots);
    let mut config = match (&tls.cert, &tls.key) {
        (None, None) => builder.with_no_client_auth(),
        (Some(cert), Some(key)) => {
            let chain = certificates(cert, &read(cert)?)?;
            let key = private_key(key, &read(key)?)?;
            builder.with_client_auth_cert(chain, key).map_err(|e| tls_error(e.to_string()))?
        }
        _ => return Err(tls_error("a client certificate needs both its chain and its key".into())),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// A TLS stream whose opening bytes are due, with its peer.
pub type Handshaken<S> = (Guarded<TlsStream<S>>, SocketAddr);

/// Accepts on `acceptor` (capped, backing off on accept errors) and completes each TLS handshake
/// in a task of its own, bounded by [`HANDSHAKE_TIMEOUT`]; `prepare` readies the TCP stream
/// first (socket options, a wrapper). Each finished stream must then send its `opening` within
/// `opening_timeout`. Stops accepting (and closes the listening socket) once the receiver is
/// dropped; `port` names the port in logs.
pub fn handshakes<S, P>(
    acceptor: Acceptor,
    config: Arc<ServerConfig>,
    opening: Opening,
    opening_timeout: Duration,
    prepare: P,
    port: &'static str,
) -> (mpsc::Receiver<Handshaken<S>>, JoinHandle<()>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Socket + Unpin + Send + 'static,
    P: Fn(TcpStream) -> S + Send + 'static,
{
    let (tx, accepted) = mpsc::channel(64);
    let accepting =
        tokio::spawn(accept_loop(acceptor, TlsAcceptor::from(config), tx, opening, opening_timeout, prepare, port));
    (accepted, accepting)
}

/// A TCP listener that hands out TLS streams once their handshake is complete.
#[derive(Debug)]
pub struct TlsListener {
    accepted: mpsc::Receiver<(Guarded<TlsStream<TcpStream>>, SocketAddr)>,
    local_addr: SocketAddr,
    accepting: JoinHandle<()>,
}

impl TlsListener {
    /// Accepts on `acceptor`, handshaking with `config`; then the first request must arrive
    /// within `opening_timeout` ([`super::connections`]).
    pub fn new(acceptor: Acceptor, config: Arc<ServerConfig>, opening_timeout: Duration) -> io::Result<Self> {
        Self::for_port(acceptor, config, opening_timeout, "admin")
    }

    /// [`Self::new`] for the HTTP port `port` (named in logs).
    pub fn for_port(
        acceptor: Acceptor,
        config: Arc<ServerConfig>,
        opening_timeout: Duration,
        port: &'static str,
    ) -> io::Result<Self> {
        let local_addr = acceptor.listener().local_addr()?;
        let (accepted, accepting) =
            handshakes(acceptor, config, Opening::Http1OrHttp2, opening_timeout, |tcp| tcp, port);
        Ok(Self { accepted, local_addr, accepting })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        // Closes the listening socket with the server.
        self.accepting.abort();
    }
}

async fn accept_loop<S, P>(
    mut listener: Acceptor,
    acceptor: TlsAcceptor,
    tx: mpsc::Sender<Handshaken<S>>,
    opening: Opening,
    opening_timeout: Duration,
    prepare: P,
    port: &'static str,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Socket + Unpin + Send + 'static,
    P: Fn(TcpStream) -> S,
{
    loop {
        // Accept errors are logged and backed off inside.
        let (tcp, peer, admission) = tokio::select! {
            () = tx.closed() => return,
            accepted = listener.accept() => accepted,
        };
        let _ = tcp.set_nodelay(true);
        let stream = prepare(tcp);
        let (acceptor, tx) = (acceptor.clone(), tx.clone());
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(stream)) => {
                    let stream = Guarded::new(stream, opening, opening_timeout, admission);
                    let _ = tx.send((stream, peer)).await;
                }
                // Debug only: scanners and health probes without TLS would flood the log.
                Ok(Err(error)) => tracing::debug!(port, %peer, %error, "A TLS handshake failed."),
                Err(_) => tracing::debug!(port, %peer, "A TLS handshake timed out."),
            }
        });
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = Guarded<TlsStream<TcpStream>>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.accepted.recv().await {
            Some(accepted) => accepted,
            // The accept loop only ends when this listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local_addr)
    }
}
