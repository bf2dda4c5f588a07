//! The OAPs behind the gateway: their HTTP/2 connections, their health, and which agent
//! connection is pinned to which OAP.
//!
//! Each OAP ([`Member`]) has [`GatewayConfig::connections_per_upstream`] connections kept open,
//! each by a task of its own that connects ([`super::connect`]), serves until the connection
//! ends (the OAP closed it, a ping went unanswered), and connects again with a backoff. When
//! every stream the OAP allows on its open connections is in use, another connection is opened
//! on demand, one at a time, up to [`GatewayConfig::max_connections_per_upstream`]; such a
//! connection is closed again once it has had no call in flight at two checks
//! [`GatewayConfig::on_demand_idle`] apart. An OAP is healthy while at least one of its
//! connections is open.
//!
//! An agent's HTTP/2 connection is pinned to one OAP at its first forwarded call (the healthy
//! OAP with the fewest pinned agent connections) and stays there, as the OAP cluster expects of
//! an agent connected to it directly. When that OAP goes away, the calls in flight end with
//! UNAVAILABLE (see [`super::forward`]), the calls waiting for a stream to it are re-pinned, and
//! the next call is pinned afresh to a healthy OAP.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::ClientConfig;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_util::sync::CancellationToken;

use super::admission::{Attempt, Queue, Stream, Unsent, UnsentCounts};
use super::connect::{self, Driver, Link, Tls};
use super::{GatewayConfig, GatewayError};

/// How long a failed connection waits before the next attempt: doubling from the first to the
/// last. A connection opened on demand that fails holds the next one off for the first.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(5));

/// One OAP.
#[derive(Debug)]
pub struct Member {
    /// `host:port`, as configured.
    pub addr: String,
    /// The open connections: the first `kept` always wanted, the rest opened on demand.
    links: Box<[ArcSwapOption<Link>]>,
    kept: usize,
    /// Agent connections pinned to this OAP.
    pinned: AtomicUsize,
    /// Which kept connection the next pinned agent connection starts with.
    next_connection: AtomicUsize,
    /// Whether any connection is open (logged on change).
    up: AtomicBool,
    /// Whether a connection is being opened on demand now.
    opening: AtomicBool,
    /// No connection is opened on demand before this (ms since `Upstreams::born`).
    open_again_at_ms: AtomicU64,
    /// The calls waiting for a stream.
    pub(super) queue: Queue,
    counts: CallCounts,
}

/// Calls and answers of one OAP, counted as they pass.
#[derive(Debug, Default)]
struct CallCounts {
    forwarded: AtomicU64,
    failed: AtomicU64,
    oversized: AtomicU64,
    malformed: AtomicU64,
}

/// What [`Member::stats`] reports (the admin API and the metrics read the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberStats {
    /// At least one connection is open.
    pub up: bool,
    /// Agent connections pinned to it.
    pub agent_connections: usize,
    /// Open HTTP/2 connections.
    pub connections: usize,
    /// Calls holding one of their streams.
    pub calls_in_flight: usize,
    /// Calls waiting for a stream.
    pub queued_calls: usize,
    /// The OAP's `SETTINGS_MAX_CONCURRENT_STREAMS` (the smallest over its open connections);
    /// `None`: no limit, or no connection.
    pub stream_limit: Option<usize>,
    /// Calls the OAP answered (whatever the status), so far.
    pub forwarded: u64,
    /// Calls that failed before the OAP answered (a reset, the connection lost), so far.
    pub failed: u64,
    /// Answers not passed on: a header block over `forward::MAX_ANSWER_HEADER_BYTES`.
    pub answers_oversized: u64,
    /// Answers not passed on: h2 refused them for the one stream (malformed, or a header block
    /// over `connect::MAX_HEADER_LIST_BYTES`).
    pub answers_malformed: u64,
    /// Calls never sent for want of a stream.
    pub unsent: UnsentCounts,
}

impl Member {
    fn new(addr: String, config: &GatewayConfig) -> Self {
        let kept = config.connections_per_upstream.max(1);
        Self {
            addr,
            links: (0..config.max_connections_per_upstream.max(kept)).map(|_| ArcSwapOption::empty()).collect(),
            kept,
            pinned: AtomicUsize::new(0),
            next_connection: AtomicUsize::new(0),
            up: AtomicBool::new(false),
            opening: AtomicBool::new(false),
            open_again_at_ms: AtomicU64::new(0),
            queue: Queue::new(config.max_queued_calls, config.queue_wait),
            counts: CallCounts::default(),
        }
    }

    /// Whether at least one connection to this OAP is open.
    pub fn is_healthy(&self) -> bool {
        self.links.iter().any(|l| l.load().as_ref().is_some_and(|l| l.is_open()))
    }

    /// Agent connections pinned here now.
    pub fn pinned(&self) -> usize {
        self.pinned.load(Ordering::Relaxed)
    }

    /// Its state and counts now.
    pub fn stats(&self) -> MemberStats {
        let (mut connections, mut calls_in_flight, mut stream_limit) = (0, 0, None::<usize>);
        for link in self.links.iter() {
            if let Some(link) = link.load().as_ref().filter(|l| l.is_open()) {
                connections += 1;
                calls_in_flight += link.in_flight();
                let limit = link.stream_limit();
                if limit != usize::MAX {
                    stream_limit = Some(stream_limit.map_or(limit, |l| l.min(limit)));
                }
            }
        }
        MemberStats {
            up: connections > 0,
            agent_connections: self.pinned(),
            connections,
            calls_in_flight,
            queued_calls: self.queue.waiting(),
            stream_limit,
            forwarded: self.counts.forwarded.load(Ordering::Relaxed),
            failed: self.counts.failed.load(Ordering::Relaxed),
            answers_oversized: self.counts.oversized.load(Ordering::Relaxed),
            answers_malformed: self.counts.malformed.load(Ordering::Relaxed),
            unsent: self.queue.unsent(),
        }
    }

    /// Counts a call the OAP answered.
    pub fn count_forwarded(&self) {
        self.counts.forwarded.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a call that failed before the OAP answered.
    pub fn count_failed(&self) {
        self.counts.failed.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an answer not passed on because a header block is too large.
    pub fn count_oversized(&self) {
        self.counts.oversized.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an answer h2 refused for its stream.
    pub fn count_malformed(&self) {
        self.counts.malformed.fetch_add(1, Ordering::Relaxed);
    }

    /// A stream on an open connection with room, starting with the connection `preferred`.
    fn try_take(&self, preferred: usize) -> Option<Arc<Link>> {
        let n = self.links.len();
        (0..n).find_map(|i| {
            let slot = self.links[(preferred + i) % n].load();
            slot.as_ref().filter(|l| l.is_open() && l.try_take()).map(Arc::clone)
        })
    }
}

/// Every OAP and the connections to them.
pub struct Upstreams {
    members: Box<[Arc<Member>]>,
    tls: Option<Tls>,
    config: GatewayConfig,
    /// Told of every new connection, for calls waiting for one.
    connected: tokio::sync::Notify,
    /// Calls answered UNAVAILABLE because no OAP was reachable.
    no_upstream: AtomicU64,
    /// The shutdown signal, for the connections opened on demand.
    stop: OnceLock<CancellationToken>,
    born: tokio::time::Instant,
}

impl std::fmt::Debug for Upstreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstreams").field("members", &self.members).field("tls", &self.tls.is_some()).finish()
    }
}

/// Which OAP (and which of its kept connections first) one agent connection uses. Dropped with
/// the agent's connection, which then no longer counts towards that OAP.
#[derive(Debug, Default)]
pub struct Pin {
    /// `member index + 1`, or 0 while not pinned.
    member: AtomicUsize,
    connection: AtomicUsize,
    upstreams: OnceLock<Arc<Upstreams>>,
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

/// How long a call waits for a connection to an OAP when none is open (at start-up, or while
/// every OAP is coming back) before it ends with UNAVAILABLE.
pub const CONNECTION_WAIT: Duration = Duration::from_secs(1);

impl Upstreams {
    /// The OAPs of `config`, not yet connected ([`Self::spawn`] connects them). `client_tls` is
    /// the rustls configuration of the connections to the OAPs, built from `config.tls` by the
    /// server (which reads the files, so a bad one fails at start); it is required when
    /// `config.tls` is set.
    pub fn new(config: &GatewayConfig, client_tls: Option<Arc<ClientConfig>>) -> Result<Self, GatewayError> {
        if config.upstreams.is_empty() {
            return Err(GatewayError::NoUpstream);
        }
        for addr in &config.upstreams {
            split_host_port(addr)?;
        }
        let tls = match (&config.tls, client_tls) {
            (None, _) => None,
            (Some(_), None) => return Err(GatewayError::NoClientTls),
            (Some(tls), Some(client_tls)) => {
                let server_name = match &tls.server_name {
                    None => None,
                    Some(name) => Some(
                        ServerName::try_from(name.clone())
                            .map_err(|_| GatewayError::ServerName { name: name.clone() })?,
                    ),
                };
                Some((TlsConnector::from(client_tls), server_name))
            }
        };
        let members = config.upstreams.iter().map(|addr| Arc::new(Member::new(addr.clone(), config))).collect();
        Ok(Self {
            members,
            tls,
            config: config.clone(),
            connected: tokio::sync::Notify::new(),
            no_upstream: AtomicU64::new(0),
            stop: OnceLock::new(),
            born: tokio::time::Instant::now(),
        })
    }

    /// The OAPs.
    pub fn members(&self) -> &[Arc<Member>] {
        &self.members
    }

    /// The settings.
    pub fn config(&self) -> &GatewayConfig {
        &self.config
    }

    /// Whether calls go to the OAPs over TLS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Calls answered UNAVAILABLE because no OAP was reachable, so far.
    pub fn no_upstream(&self) -> u64 {
        self.no_upstream.load(Ordering::Relaxed)
    }

    /// Starts the tasks that keep every connection open, until `stop`.
    pub fn spawn<E: Send + 'static>(
        self: &Arc<Self>,
        tasks: &mut tokio::task::JoinSet<Result<(), E>>,
        stop: &CancellationToken,
    ) {
        let _ = self.stop.set(stop.clone());
        for member in 0..self.members.len() {
            for connection in 0..self.members[member].kept {
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
    async fn keep_connected(&self, member: usize, slot: usize) {
        let m = &self.members[member];
        let mut backoff = BACKOFF.0;
        let mut failing = false;
        loop {
            match connect::open(&m.addr, self.tls.as_ref(), &self.config).await {
                Ok((link, driver)) => {
                    failing = false;
                    backoff = BACKOFF.0;
                    self.opened(m, slot, link);
                    let ended = driver.await;
                    self.closed(m, slot, ended);
                }
                Err(error) => {
                    if !failing {
                        tracing::warn!(upstream = %m.addr, %error, "Cannot connect to the OAP; retrying.");
                    }
                    failing = true;
                }
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(BACKOFF.1);
        }
    }

    /// `link` is open in `slot` of `m`.
    fn opened(&self, m: &Member, slot: usize, link: Arc<Link>) {
        m.links[slot].store(Some(link));
        self.connected.notify_waiters();
        m.queue.wake_all();
        if !m.up.swap(true, Ordering::Relaxed) {
            tracing::info!(upstream = %m.addr, "Connected to the OAP.");
        }
    }

    /// The connection in `slot` of `m` has ended.
    fn closed(&self, m: &Member, slot: usize, ended: hyper::Result<()>) {
        m.links[slot].store(None);
        if m.is_healthy() || !m.up.swap(false, Ordering::Relaxed) {
            return;
        }
        // The calls waiting for a stream go to another OAP.
        m.queue.wake_all();
        match ended {
            Ok(()) => {
                tracing::warn!(upstream = %m.addr, "The OAP closed the connection; forwarded calls pinned to it end with UNAVAILABLE and new ones go to another OAP.")
            }
            Err(error) => {
                tracing::warn!(upstream = %m.addr, %error, "Lost the connection to the OAP; forwarded calls pinned to it end with UNAVAILABLE and new ones go to another OAP.")
            }
        }
    }

    /// Opens another connection to `m` in the background, unless one is being opened, every
    /// connection allowed is open, or a connection opened on demand failed a moment ago.
    fn grow(self: &Arc<Self>, member: usize) {
        let m = &self.members[member];
        if m.opening.swap(true, Ordering::AcqRel) {
            return;
        }
        let now_ms = self.born.elapsed().as_millis() as u64;
        let free = (m.kept..m.links.len()).find(|&slot| m.links[slot].load().is_none());
        let (Some(slot), Some(stop), true) =
            (free, self.stop.get(), now_ms >= m.open_again_at_ms.load(Ordering::Relaxed))
        else {
            m.opening.store(false, Ordering::Release);
            return;
        };
        let (upstreams, stop) = (Arc::clone(self), stop.clone());
        tokio::spawn(async move {
            tokio::select! {
                () = stop.cancelled() => {}
                () = upstreams.open_on_demand(member, slot) => {}
            }
        });
    }

    /// A connection opened on demand in `slot`: served until it ends or idles.
    async fn open_on_demand(&self, member: usize, slot: usize) {
        let m = &self.members[member];
        let opened = connect::open(&m.addr, self.tls.as_ref(), &self.config).await;
        let (link, driver) = match opened {
            Ok(opened) => opened,
            Err(error) => {
                tracing::debug!(upstream = %m.addr, %error, "Cannot open another connection to the OAP.");
                let again = self.born.elapsed() + BACKOFF.0;
                m.open_again_at_ms.store(again.as_millis() as u64, Ordering::Relaxed);
                m.opening.store(false, Ordering::Release);
                return;
            }
        };
        tracing::debug!(upstream = %m.addr, slot, "Opened another connection to the OAP: every stream it allows on the others is in use.");
        self.opened(m, slot, Arc::clone(&link));
        m.opening.store(false, Ordering::Release);
        let idle = self.serve_until_idle(&link, driver).await;
        match idle {
            Err(ended) => self.closed(m, slot, ended),
            Ok(driver) => {
                tracing::debug!(upstream = %m.addr, slot, "Closing a connection to the OAP opened on demand: idle.");
                m.links[slot].store(None);
                drop(link);
                // The calls still holding it end first.
                let _ = driver.await;
            }
        }
    }

    /// Drives `link` until it ends (`Err`: how) or has had no call in flight at two checks in a
    /// row (`Ok`: its driver, still to be driven to its end).
    async fn serve_until_idle(&self, link: &Link, mut driver: Driver) -> Result<Driver, hyper::Result<()>> {
        let mut idle_checks = 0;
        loop {
            tokio::select! {
                ended = &mut driver => return Err(ended),
                () = tokio::time::sleep(self.config.on_demand_idle) => {
                    idle_checks = if link.in_flight() == 0 { idle_checks + 1 } else { 0 };
                    if idle_checks >= 2 {
                        return Ok(driver);
                    }
                }
            }
        }
    }

    /// The OAP the agent connection of `pin` uses, pinning it first (again, if its OAP went
    /// away), and its kept connection to start with. `None`: no OAP is reachable.
    fn member_for(self: &Arc<Self>, pin: &Pin) -> Option<(usize, usize)> {
        if let Some(member) = pin.member.load(Ordering::Relaxed).checked_sub(1)
            && self.members[member].is_healthy()
        {
            return Some((member, pin.connection.load(Ordering::Relaxed)));
        }
        let chosen = self
            .members
            .iter()
            .enumerate()
            .filter(|(_, m)| m.is_healthy())
            .min_by_key(|(_, m)| m.pinned())
            .map(|(i, _)| i)?;
        let m = &self.members[chosen];
        let connection = m.next_connection.fetch_add(1, Ordering::Relaxed) % m.kept;
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
        Some((chosen, connection))
    }

    /// [`Self::member_for`], waiting up to [`CONNECTION_WAIT`] for a connection when no OAP is
    /// reachable now.
    async fn wait_for_member(self: &Arc<Self>, pin: &Pin) -> Option<(usize, usize)> {
        let waited = tokio::time::timeout(CONNECTION_WAIT, async {
            loop {
                let connected = self.connected.notified();
                if let Some(found) = self.member_for(pin) {
                    return found;
                }
                connected.await;
            }
        });
        waited.await.ok()
    }

    /// A stream for one call of the agent connection of `pin`, on a connection to its OAP (see
    /// [`super::admission`]).
    pub async fn stream_for(self: &Arc<Self>, pin: &Pin) -> Result<Stream, Unsent> {
        // The common case: the pinned OAP has room and no call is waiting for it.
        if let Some(member) = pin.member.load(Ordering::Relaxed).checked_sub(1) {
            let m = &self.members[member];
            if m.queue.waiting() == 0
                && let Some(link) = m.try_take(pin.connection.load(Ordering::Relaxed))
            {
                return Ok(Stream::new(link, m));
            }
        }
        // A call whose OAP goes down while it waits is pinned to another one, once.
        for _ in 0..2 {
            let Some((member, preferred)) = self.wait_for_member(pin).await else { break };
            let m = &self.members[member];
            if m.queue.waiting() == 0
                && let Some(link) = m.try_take(preferred)
            {
                return Ok(Stream::new(link, m));
            }
            self.grow(member);
            let waited = m
                .queue
                .wait(|| {
                    if let Some(link) = m.try_take(preferred) {
                        return Attempt::Taken(link);
                    }
                    if !m.is_healthy() {
                        return Attempt::Down;
                    }
                    self.grow(member);
                    Attempt::Retry
                })
                .await;
            match waited {
                Ok(link) => return Ok(Stream::new(link, m)),
                Err(Unsent::Down) => {}
                Err(unsent) => return Err(unsent),
            }
        }
        self.no_upstream.fetch_add(1, Ordering::Relaxed);
        Err(Unsent::NoUpstream)
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
        let upstreams = Arc::new(Upstreams::new(&GatewayConfig::new(vec!["a:1".into(), "b:1".into()]), None).unwrap());
        let pin = Pin::default();
        assert!(upstreams.member_for(&pin).is_none());
        assert_eq!(pin.member.load(Ordering::Relaxed), 0);
        assert!(upstreams.members.iter().all(|m| m.pinned() == 0));
    }

    /// With no OAP reachable, a call waits a moment for a connection, then gets none, and is
    /// counted.
    #[tokio::test(start_paused = true)]
    async fn without_an_oap_a_call_gets_no_stream_after_the_connection_wait() {
        let upstreams = Arc::new(Upstreams::new(&GatewayConfig::new(vec!["a:1".into()]), None).unwrap());
        let started = tokio::time::Instant::now();
        assert_eq!(upstreams.stream_for(&Pin::default()).await.unwrap_err(), Unsent::NoUpstream);
        assert_eq!(started.elapsed(), CONNECTION_WAIT);
        assert_eq!(upstreams.no_upstream(), 1);
    }
}
