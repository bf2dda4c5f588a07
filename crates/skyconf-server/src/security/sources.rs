//! Fair shares of the agent port's shared bounds, by source address.
//!
//! Some bounds of the gRPC port are shared by every agent: the connection cap
//! ([`super::ConnectionLimits`]), the held polls (`crate::cds::hold`) and the calls waiting for
//! their request message ([`super::GrpcLimits::max_pending_streams`]). Without shares, one client
//! can take a whole bound and leave nothing to the fleet (findings F5, F6 and N10 in
//! RELIABILITY.md). So each bound is shared out by source, and one source holds at most its share
//! of each; what it asks beyond that is refused, counted and logged once, and every other source
//! is served within its own share.
//!
//! - **A source** is the peer's IP address: an IPv4 address, or an IPv6 /64 prefix (a host or a
//!   subnet is usually given a whole /64, so single IPv6 addresses would give one machine 2^64
//!   shares). An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) is its IPv4 address.
//! - **A share** is a quarter of each bound by default, so a source alone can never take more
//!   than a quarter of what the fleet needs, and settable per bound. A proxy (many agents behind
//!   one address: a NAT, an nginx or Envoy in front of skyconf) needs its agents' worth of each:
//!   raise its shares to fit, up to the bounds themselves.
//!
//! Each accepted connection holds its place in its source ([`SourceConnection`]) until the socket
//! is closed, and its calls reach the source's counters through the connection's state: a call
//! takes no lock, only atomic counters. The table holds only sources that have a connection open.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Where connections come from, as the shares count it (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SourceKey {
    /// An IPv4 address.
    V4(Ipv4Addr),
    /// The first 64 bits of an IPv6 address.
    V6Prefix(u64),
}

impl SourceKey {
    /// The source of a peer at `ip`.
    pub fn of(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => Self::V4(v4),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Self::V4(v4),
                None => Self::V6Prefix((u128::from(v6) >> 64) as u64),
            },
        }
    }
}

impl fmt::Display for SourceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::V4(v4) => write!(f, "{v4}"),
            Self::V6Prefix(prefix) => write!(f, "{}/64", Ipv6Addr::from(u128::from(*prefix) << 64)),
        }
    }
}

/// The shared bounds a source takes its shares of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// Connections to the gRPC port.
    Connections,
    /// Held polls.
    HeldPolls,
    /// Calls waiting for their request message.
    PendingStreams,
}

impl Bound {
    fn what(self) -> &'static str {
        match self {
            Self::Connections => "connections to the gRPC port",
            Self::HeldPolls => "held polls",
            Self::PendingStreams => "calls waiting for their request message",
        }
    }

    fn setting(self) -> &'static str {
        match self {
            Self::Connections => "skyconf.limits.grpcMaxConnectionsPerSource",
            Self::HeldPolls => "skyconf.holdPolls.maxHeldPerSource",
            Self::PendingStreams => "skyconf.limits.grpcMaxPendingStreamsPerSource",
        }
    }
}

/// A source's share of a bound of `bound` when none is set: a quarter, at least one.
pub fn default_share(bound: usize) -> usize {
    (bound / 4).max(1)
}

/// What one source holds now.
#[derive(Debug)]
pub struct Source {
    key: SourceKey,
    /// Its open connections; changed only under the table's lock, so that a source leaves the
    /// table exactly when its last connection closes.
    connections: AtomicUsize,
    /// Its held polls.
    pub held_polls: AtomicUsize,
    /// Its calls waiting for their request message.
    pub pending_streams: AtomicUsize,
    /// Whether reaching each share was logged (since the source came).
    warned: [AtomicBool; 3],
}

impl Source {
    fn new(key: SourceKey) -> Self {
        Self {
            key,
            connections: AtomicUsize::new(0),
            held_polls: AtomicUsize::new(0),
            pending_streams: AtomicUsize::new(0),
            warned: Default::default(),
        }
    }

    /// The source.
    pub fn key(&self) -> SourceKey {
        self.key
    }

    /// Its open connections.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::Relaxed)
    }

    /// Logs, once per source, that it holds its whole `share` of `bound`.
    pub fn reached(&self, bound: Bound, share: usize) {
        if !self.warned[bound as usize].swap(true, Ordering::Relaxed) {
            tracing::warn!(
                source = %self.key,
                share,
                setting = bound.setting(),
                "A source holds its whole share of the {}; what it asks beyond that is refused while other sources are served. A proxy or NAT in front of many agents needs a larger share: raise the setting.",
                bound.what()
            );
        }
    }
}

/// Every source with a connection open, and the connection share.
#[derive(Debug)]
pub struct Sources {
    table: Mutex<HashMap<SourceKey, Arc<Source>>>,
    max_connections: usize,
}

impl Sources {
    /// Sources of at most `max_connections` connections each.
    pub fn new(max_connections: usize) -> Arc<Self> {
        Arc::new(Self { table: Mutex::default(), max_connections: max_connections.max(1) })
    }

    /// The connection share.
    pub fn max_connections(&self) -> usize {
        self.max_connections
    }

    /// A place for one more connection from `ip`, or `Err` with the source when it holds its
    /// whole share already.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<SourceConnection, Arc<Source>> {
        let key = SourceKey::of(ip);
        let mut table = self.table.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let source = Arc::clone(table.entry(key).or_insert_with(|| Arc::new(Source::new(key))));
        if source.connections.load(Ordering::Relaxed) >= self.max_connections {
            return Err(source);
        }
        source.connections.fetch_add(1, Ordering::Relaxed);
        Ok(SourceConnection { sources: Arc::clone(self), source })
    }

    /// Sources with a connection open now.
    pub fn len(&self) -> usize {
        self.table.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }

    /// Whether no source has a connection open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One connection's place in its source; given back when dropped (the socket closed).
#[derive(Debug)]
pub struct SourceConnection {
    sources: Arc<Sources>,
    source: Arc<Source>,
}

impl SourceConnection {
    /// The connection's source.
    pub fn source(&self) -> &Arc<Source> {
        &self.source
    }
}

impl Drop for SourceConnection {
    fn drop(&mut self) {
        let mut table = self.sources.table.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if self.source.connections.fetch_sub(1, Ordering::Relaxed) == 1 {
            table.remove(&self.source.key);
        }
    }
}

/// Takes a place in `counter` if it is below `max`.
pub fn increment_below(counter: &AtomicUsize, max: usize) -> bool {
    counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < max).then_some(n + 1)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_is_an_ipv4_address_or_an_ipv6_64_prefix() {
        let v4: IpAddr = "10.1.2.3".parse().unwrap();
        assert_eq!(SourceKey::of(v4), SourceKey::of("::ffff:10.1.2.3".parse().unwrap()), "IPv4-mapped");
        assert_ne!(SourceKey::of(v4), SourceKey::of("10.1.2.4".parse().unwrap()));
        let a = SourceKey::of("2001:db8:1:2::1".parse().unwrap());
        assert_eq!(a, SourceKey::of("2001:db8:1:2:ffff:ffff:ffff:ffff".parse().unwrap()), "one /64");
        assert_ne!(a, SourceKey::of("2001:db8:1:3::1".parse().unwrap()));
        assert_eq!(a.to_string(), "2001:db8:1:2::/64");
        assert_eq!(SourceKey::of(v4).to_string(), "10.1.2.3");
    }

    #[test]
    fn a_source_holds_at_most_its_connection_share_and_leaves_with_its_last_connection() {
        let sources = Sources::new(2);
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let a1 = sources.admit(a).unwrap();
        let a2 = sources.admit(a).unwrap();
        let refused = sources.admit(a).unwrap_err();
        assert_eq!(refused.connections(), 2);
        let b1 = sources.admit(b).unwrap();
        assert_eq!(sources.len(), 2);
        drop(a1);
        let a3 = sources.admit(a).expect("a place came free");
        assert!(Arc::ptr_eq(a2.source(), a3.source()), "the same source's counters");
        drop((a2, a3));
        assert_eq!(sources.len(), 1, "a source without connections leaves the table");
        drop(b1);
        assert!(sources.is_empty());
    }

    #[test]
    fn the_default_share_is_a_quarter_of_the_bound_and_never_zero() {
        assert_eq!(default_share(200_000), 50_000);
        assert_eq!(default_share(3), 1);
        assert_eq!(default_share(0), 1);
    }
}
