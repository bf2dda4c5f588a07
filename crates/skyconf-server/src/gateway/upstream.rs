//! The OAPs behind the gateway: a few HTTP/2 connections to each, kept open and pinged, and
//! which agent connection is pinned to which OAP.
//!
//! Each OAP ([`Member`]) has [`GatewayConfig::connections_per_upstream`] connections, each kept
//! by a task of its own that connects (TCP, optionally TLS, the HTTP/2 handshake), serves until
//! the connection ends (the OAP closed it, a ping went unanswered), and connects again with a
//! backoff. An OAP is healthy while at least one of its connections is open.
//!
//! An agent's HTTP/2 connection is pinned to one OAP at its first forwarded call (the healthy
//! OAP with the fewest pinned agent connections) and stays there, as the OAP cluster expects of
//! an agent connected to it directly. When that OAP goes away, the calls in flight end with
//! UNAVAILABLE (see [`super::forward`]) and the next call is pinned afresh to a healthy OAP.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_util::sync::CancellationToken;

use super::coalesce::{CoalescedWrites, LendingBody, Lent, RoundExecutor, Rounds};
use super::{GatewayConfig, GatewayError};

/// A handle on one upstream HTTP/2 connection, to send calls on.
pub type Sender = SendRequest<LendingBody>;

/// One upstream HTTP/2 connection: where calls are sent, and where the payloads of their
/// request bodies are recorded so they are written without a copy ([`super::coalesce`]).
#[derive(Debug, Clone)]
pub struct Connection {
    /// Sends calls.
    pub sender: Sender,
    /// `None` on a TLS connection (rustls encrypts into buffers of its own).
    pub lent: Option<Lent>,
}

impl Connection {
    /// `body`, ready to be sent on this connection.
    pub fn body(&self, body: axum::body::Body) -> LendingBody {
        LendingBody::new(body, self.lent.clone())
    }
}

/// The receive windows of upstream connections. Responses on SkyWalking's paths are small
/// (`Commands`); the stream window bounds what one slow agent can hold of an OAP's answers, and
/// the connection window is large so that a few such agents never stall the others sharing it.
const STREAM_WINDOW: u32 = 256 * 1024;
const CONNECTION_WINDOW: u32 = 16 * 1024 * 1024;

/// How long a failed connection waits before the next attempt: doubling from the first to the
/// last.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(5));

/// One OAP.
#[derive(Debug)]
pub struct Member {
    /// `host:port`, as configured.
    pub addr: String,
    connections: Box<[ArcSwapOption<Connection>]>,
    /// Agent connections pinned to this OAP.
    pinned: AtomicUsize,
    /// Which connection the next pinned agent connection uses.
    next_connection: AtomicUsize,
    /// Whether any connection is open (logged on change).
    up: AtomicBool,
}

impl Member {
    fn new(addr: String, connections: usize) -> Self {
        Self {
            addr,
            connections: (0..connections.max(1)).map(|_| ArcSwapOption::empty()).collect(),
            pinned: AtomicUsize::new(0),
            next_connection: AtomicUsize::new(0),
            up: AtomicBool::new(false),
        }
    }

    /// Whether at least one connection to this OAP is open.
    pub fn is_healthy(&self) -> bool {
        self.connections.iter().any(|c| c.load().as_ref().is_some_and(|c| !c.sender.is_closed()))
    }

    /// Agent connections pinned here now.
    pub fn pinned(&self) -> usize {
        self.pinned.load(Ordering::Relaxed)
    }

    /// An open connection, starting with `preferred`.
    fn connection(&self, preferred: usize) -> Option<Connection> {
        let n = self.connections.len();
        (0..n).find_map(|i| {
            let slot = self.connections[(preferred + i) % n].load();
            slot.as_ref().filter(|c| !c.sender.is_closed()).map(|c| Connection::clone(c))
        })
    }
}

/// Every OAP and the connections to them.
pub struct Upstreams {
    members: Box<[Arc<Member>]>,
    tls: Option<(TlsConnector, Option<ServerName<'static>>)>,
    config: GatewayConfig,
    /// Told of every new connection, for calls waiting for one.
    connected: tokio::sync::Notify,
}

impl std::fmt::Debug for Upstreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstreams").field("members", &self.members).field("tls", &self.tls.is_some()).finish()
    }
}

/// Which OAP (and which of its connections) one agent connection uses. Dropped with the agent's
/// connection, which then no longer counts towards that OAP.
#[derive(Debug, Default)]
pub struct Pin {
    /// `member index + 1`, or 0 while not pinned.
    member: AtomicUsize,
    connection: AtomicUsize,
    upstreams: std::sync::OnceLock<Arc<Upstreams>>,
}

impl Drop for Pin {
    fn drop(&mut self) {
        if let (Some(upstreams), Some(member)) =
            (self.upstreams.get(), self.member.load(Ordering::Relaxed).checked_sub(1))
        {
            upstreams.members[member].pinned.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Upstreams {
    /// The OAPs of `config`, not yet connected ([`Self::spawn`] connects them). Reads the TLS
    /// files, so a bad one fails at start.
    pub fn new(config: &GatewayConfig) -> Result<Self, GatewayError> {
        if config.upstreams.is_empty() {
            return Err(GatewayError::NoUpstream);
        }
        for addr in &config.upstreams {
            split_host_port(addr)?;
        }
        let tls = match &config.tls {
            None => None,
            Some(tls) => {
                let server_name = match &tls.server_name {
                    None => None,
                    Some(name) => Some(
                        ServerName::try_from(name.clone())
                            .map_err(|_| GatewayError::ServerName { name: name.clone() })?,
                    ),
                };
                Some((TlsConnector::from(crate::security::tls::upstream_client_config(tls)?), server_name))
            }
        };
        let members = config
            .upstreams
            .iter()
            .map(|addr| Arc::new(Member::new(addr.clone(), config.connections_per_upstream)))
            .collect();
        Ok(Self { members, tls, config: config.clone(), connected: tokio::sync::Notify::new() })
    }

    /// The OAPs.
    pub fn members(&self) -> &[Arc<Member>] {
        &self.members
    }

    /// Whether calls go to the OAPs over TLS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Starts the tasks that keep every connection open, until `stop`.
    pub fn spawn(
        self: &Arc<Self>,
        tasks: &mut tokio::task::JoinSet<Result<(), crate::ServerError>>,
        stop: &CancellationToken,
    ) {
        for member in 0..self.members.len() {
            for connection in 0..self.members[member].connections.len() {
                let (upstreams, stop) = (Arc::clone(self), stop.clone());
                tasks.spawn(async move {
                    tokio::select! {
                        () = stop.cancelled() => {}
                        () = upstreams.keep_connected(member, connection) => {}
                    }
                    Ok(())
                });
            }
        }
    }

    /// Connects, serves the connection until it ends, and connects again: for ever.
    async fn keep_connected(&self, member: usize, connection: usize) {
        let m = &self.members[member];
        let mut backoff = BACKOFF.0;
        let mut failing = false;
        loop {
            match tokio::time::timeout(self.config.connect_timeout, self.connect(&m.addr)).await {
                Ok(Ok((opened, conn))) => {
                    m.connections[connection].store(Some(Arc::new(opened)));
                    self.connected.notify_waiters();
                    if !m.up.swap(true, Ordering::Relaxed) {
                        tracing::info!(upstream = %m.addr, "Connected to the OAP.");
                    }
                    failing = false;
                    backoff = BACKOFF.0;
                    let ended = conn.await;
                    m.connections[connection].store(None);
                    if !m.is_healthy() && m.up.swap(false, Ordering::Relaxed) {
                        match ended {
                            Ok(()) => {
                                tracing::warn!(upstream = %m.addr, "The OAP closed the connection; forwarded calls pinned to it end with UNAVAILABLE and new ones go to another OAP.")
                            }
                            Err(error) => {
                                tracing::warn!(upstream = %m.addr, %error, "Lost the connection to the OAP; forwarded calls pinned to it end with UNAVAILABLE and new ones go to another OAP.")
                            }
                        }
                    }
                }
                Ok(Err(error)) => {
                    if !failing {
                        tracing::warn!(upstream = %m.addr, %error, "Cannot connect to the OAP; retrying.");
                    }
                    failing = true;
                }
                Err(_) => {
                    if !failing {
                        tracing::warn!(upstream = %m.addr, timeout = ?self.config.connect_timeout, "Connecting to the OAP timed out; retrying.");
                    }
                    failing = true;
                }
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(BACKOFF.1);
        }
    }

    /// One HTTP/2 connection to `addr`: where calls are sent, and the future that drives it.
    async fn connect(
        &self,
        addr: &str,
    ) -> Result<(Connection, impl std::future::Future<Output = hyper::Result<()>> + use<>), GatewayError> {
        let io_error = |cause: std::io::Error| GatewayError::Connect { addr: addr.to_owned(), cause };
        let tcp = TcpStream::connect(addr).await.map_err(io_error)?;
        let _ = tcp.set_nodelay(true);
        // Writes go out once per round of the connection's tasks ([`super::coalesce`]).
        let rounds = Rounds::default();
        // Payloads are written from where they are, except under TLS.
        let lent = self.tls.is_none().then(Lent::default);
        let tcp = CoalescedWrites::new(tcp, rounds.clone(), lent.clone());
        let mut builder = hyper::client::conn::http2::Builder::new(RoundExecutor::new(rounds));
        builder
            .timer(TokioTimer::new())
            .initial_stream_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .keep_alive_interval(self.config.keepalive_interval)
            .keep_alive_timeout(self.config.keepalive_timeout)
            .keep_alive_while_idle(true);
        let handshake_error = |cause: hyper::Error| GatewayError::Handshake { addr: addr.to_owned(), cause };
        match &self.tls {
            None => {
                let (sender, conn) = builder.handshake(TokioIo::new(tcp)).await.map_err(handshake_error)?;
                Ok((Connection { sender, lent }, futures_util::future::Either::Left(conn)))
            }
            Some((connector, name)) => {
                let name = match name {
                    Some(name) => name.clone(),
                    None => {
                        let (host, _) = split_host_port(addr)?;
                        ServerName::try_from(host.to_owned())
                            .map_err(|_| GatewayError::ServerName { name: host.to_owned() })?
                    }
                };
                let tls = connector.connect(name, tcp).await.map_err(io_error)?;
                let (sender, conn) = builder.handshake(TokioIo::new(tls)).await.map_err(handshake_error)?;
                Ok((Connection { sender, lent }, futures_util::future::Either::Right(conn)))
            }
        }
    }

    /// The connection to send a call of the agent connection `pin` on: its OAP's, pinning it
    /// first (again, if its OAP went away). `None`: no OAP is reachable.
    pub fn connection_for(self: &Arc<Self>, pin: &Pin) -> Option<(Connection, &Member)> {
        if let Some(member) = pin.member.load(Ordering::Relaxed).checked_sub(1) {
            let m = &self.members[member];
            if let Some(connection) = m.connection(pin.connection.load(Ordering::Relaxed)) {
                return Some((connection, m));
            }
        }
        let chosen = self
            .members
            .iter()
            .enumerate()
            .filter(|(_, m)| m.is_healthy())
            .min_by_key(|(_, m)| m.pinned())
            .map(|(i, _)| i)?;
        let m = &self.members[chosen];
        let connection = m.next_connection.fetch_add(1, Ordering::Relaxed) % m.connections.len();
        m.pinned.fetch_add(1, Ordering::Relaxed);
        pin.connection.store(connection, Ordering::Relaxed);
        let previous = pin.member.swap(chosen + 1, Ordering::Relaxed);
        match previous.checked_sub(1) {
            Some(previous) => {
                self.members[previous].pinned.fetch_sub(1, Ordering::Relaxed);
            }
            None => {
                let _ = pin.upstreams.set(Arc::clone(self));
            }
        }
        Some((m.connection(connection)?, m))
    }
}

/// How long a call waits for a connection to an OAP when none is open (at start-up, or while
/// every OAP is coming back) before it ends with UNAVAILABLE.
pub const CONNECTION_WAIT: Duration = Duration::from_secs(1);

impl Upstreams {
    /// [`Self::connection_for`], waiting up to [`CONNECTION_WAIT`] for a connection when no OAP is
    /// reachable now.
    pub async fn wait_for_connection(self: &Arc<Self>, pin: &Pin) -> Option<(Connection, &Member)> {
        let waited = tokio::time::timeout(CONNECTION_WAIT, async {
            loop {
                let connected = self.connected.notified();
                if let Some((connection, member)) = self.connection_for(pin) {
                    return (connection, member);
                }
                connected.await;
            }
        });
        waited.await.ok()
    }
}

/// `host` and `port` of `host:port` (`[v6]:port` too).
pub fn split_host_port(addr: &str) -> Result<(&str, u16), GatewayError> {
    let invalid = || GatewayError::Address { addr: addr.to_owned() };
    let (host, port) = addr.rsplit_once(':').ok_or_else(invalid)?;
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    if host.is_empty() {
        return Err(invalid());
    }
    Ok((host, port.parse().map_err(|_| invalid())?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_host_and_port() {
        assert_eq!(split_host_port("oap-0.oap:11800").unwrap(), ("oap-0.oap", 11800));
        assert_eq!(split_host_port("[::1]:11800").unwrap(), ("::1", 11800));
        for bad in ["oap", "oap:", ":11800", "oap:port", "oap:70000"] {
            assert!(split_host_port(bad).is_err(), "{bad}");
        }
    }

    /// Pinning to a live OAP, re-pinning when it goes and unpinning are tested over real
    /// sockets (`tests/it/gateway.rs`); here, the case without any connection.
    #[test]
    fn without_an_open_connection_nothing_is_pinned() {
        let upstreams = Arc::new(Upstreams::new(&GatewayConfig::new(vec!["a:1".into(), "b:1".into()])).unwrap());
        let pin = Pin::default();
        assert!(upstreams.connection_for(&pin).is_none());
        assert_eq!(pin.member.load(Ordering::Relaxed), 0);
        assert!(upstreams.members.iter().all(|m| m.pinned() == 0));
    }
}
