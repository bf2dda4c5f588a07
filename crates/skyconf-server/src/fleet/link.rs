//! A connection's place in the fleet view: what ties the fleet's rows and identity to the agent
//! connection they were learnt on, so that they end with it.
//!
//! Every agent connection's state ([`crate::socket::ConnectionState`]) holds one [`Link`] slot: a
//! connection id that the process never issues twice, the peer address, and, once a call on the
//! connection was recorded, the fleet it was recorded in. The connection's socket owns a guard
//! that closes the link when the socket is dropped (the peer sent FIN or RST, or HTTP/2 PING found
//! it silent, or the server shut down): [`Link::close`] removes the connection's rows and its
//! identity from the fleet at once, and nothing can be recorded on a closed link afterwards. The
//! rows are keyed by ([`ConnKey`]) the id and the address, so a later connection from the same
//! ip:port is another key, never removed by the earlier one's close.
//!
//! The link also keeps the connection's targeting choice ([`Link::choice`]): which answers (the
//! rollout's candidate or the table's) and which targeting group a service's polls on this
//! connection are served, decided once per table version (the served table's answers generation)
//! and identity generation ([`Link::identity_generation`], bumped whenever a `ManagementService`
//! call changes what the connection said it is), not matched again on every poll.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use super::Fleet;

/// Connection ids: 0 is never issued (it keys calls seen without a connection).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The fleet's key for the connection a call came on: its id and its peer address. A call seen
/// without a connection record (a test, or a call not made through the gRPC port) has id 0 and
/// is keyed by its peer address alone; its rows end only by expiry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnKey {
    /// The peer address (first: keys sort by it).
    pub peer: SocketAddr,
    /// The connection id (0: none).
    pub id: u64,
}

impl From<SocketAddr> for ConnKey {
    fn from(peer: SocketAddr) -> Self {
        Self { id: 0, peer }
    }
}

/// Which answers and which targeting group the polls for one service on one connection are
/// served, as decided for one table version and one identity (the default: the table's, the
/// service's own settings).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Choice {
    /// From the rollout's candidate (else from the served table).
    pub candidate: bool,
    /// The targeting group's index among the service's groups (`None`: the service's own).
    pub group: Option<usize>,
}

/// A [`Choice`] and what it was decided for.
#[derive(Debug)]
struct Decided {
    service: Arc<str>,
    answers_generation: u64,
    identity_generation: u64,
    choice: Choice,
}

/// One connection's place in the fleet view (see the module docs).
#[derive(Debug)]
pub struct Link {
    key: ConnKey,
    fleet: OnceLock<Weak<Fleet>>,
    closed: AtomicBool,
    identity_generation: AtomicU64,
    decided: Mutex<Option<Decided>>,
}

impl Link {
    /// The link of a new connection from `peer` (`None`: unknown, shown as `0.0.0.0:0`).
    pub fn new(peer: Option<SocketAddr>) -> Self {
        let peer = peer.unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
        Self {
            key: ConnKey { id: NEXT_ID.fetch_add(1, Ordering::Relaxed), peer },
            fleet: OnceLock::new(),
            closed: AtomicBool::new(false),
            identity_generation: AtomicU64::new(0),
            decided: Mutex::new(None),
        }
    }

    /// Its key in the fleet table.
    pub fn key(&self) -> ConnKey {
        self.key
    }

    /// Whether the connection has closed.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// The closed flag, read by the fleet under its shard lock before it records anything.
    pub(super) fn closed_flag(&self) -> &AtomicBool {
        &self.closed
    }

    /// Remembers the fleet the connection's calls are recorded in (the first one only).
    pub(super) fn attach(&self, fleet: &Arc<Fleet>) {
        if self.fleet.get().is_none() {
            let _ = self.fleet.set(Arc::downgrade(fleet));
        }
    }

    /// Changes with every change of the connection's identity; 0 while it has none.
    pub fn identity_generation(&self) -> u64 {
        self.identity_generation.load(Ordering::Acquire)
    }

    /// Says the connection's identity changed: choices made for the old one are stale.
    pub(super) fn identity_changed(&self) {
        self.identity_generation.fetch_add(1, Ordering::AcqRel);
    }

    /// The choice remembered for `service` at answers generation `answers_generation` and the
    /// current identity, if any.
    pub fn choice(&self, service: &str, answers_generation: u64) -> Option<Choice> {
        let identity_generation = self.identity_generation();
        let decided = self.decided.lock().unwrap_or_else(|p| p.into_inner());
        decided
            .as_ref()
            .filter(|d| {
                d.answers_generation == answers_generation
                    && d.identity_generation == identity_generation
                    && *d.service == *service
            })
            .map(|d| d.choice)
    }

    /// Remembers `choice` for `service`, decided at `answers_generation` for the identity of
    /// generation `identity_generation` (read before the identity was).
    pub fn remember(&self, service: &str, answers_generation: u64, identity_generation: u64, choice: Choice) {
        let mut decided = self.decided.lock().unwrap_or_else(|p| p.into_inner());
        match &mut *decided {
            Some(d) if *d.service == *service => {
                (d.answers_generation, d.identity_generation, d.choice) =
                    (answers_generation, identity_generation, choice);
            }
            other => {
                *other = Some(Decided { service: Arc::from(service), answers_generation, identity_generation, choice });
            }
        }
    }

    /// The connection closed: its rows and identity leave the fleet now, and nothing more is
    /// recorded for it. Idempotent.
    pub fn close(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(fleet) = self.fleet.get().and_then(Weak::upgrade) {
            fleet.close(self.key);
        }
        *self.decided.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

impl crate::socket::Slot for Link {
    fn close(&self) {
        Self::close(self);
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.close();
    }
}

/// Who made a call, as the fleet records it: a connection (its rows and identity end with it)
/// or, without a connection record, a bare peer address.
#[derive(Debug, Clone)]
pub enum Caller {
    /// A call on an agent connection.
    Connection(Arc<crate::socket::ConnectionState>),
    /// A call known only by its peer address.
    Peer(SocketAddr),
}

impl Caller {
    /// The caller of a request with these extensions: its connection, or its peer address.
    pub fn of(extensions: &http::Extensions) -> Option<Self> {
        match crate::socket::connection_of(extensions) {
            Some(connection) => Some(Self::Connection(Arc::clone(&connection.state))),
            None => crate::socket::peer_of(extensions).map(Self::Peer),
        }
    }

    /// Its key in the fleet table.
    pub fn key(&self) -> ConnKey {
        match self.link() {
            Some(link) => link.key(),
            None => ConnKey::from(self.peer()),
        }
    }

    /// Its connection's link, if it has one.
    pub fn link(&self) -> Option<&Link> {
        match self {
            Self::Connection(state) => state.get::<Link>(),
            Self::Peer(_) => None,
        }
    }

    /// Its peer address (`0.0.0.0:0` when unknown, as [`Link::new`] shows it).
    fn peer(&self) -> SocketAddr {
        match self {
            Self::Connection(state) => state.peer().unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0))),
            Self::Peer(peer) => *peer,
        }
    }
}

impl From<SocketAddr> for Caller {
    fn from(peer: SocketAddr) -> Self {
        Self::Peer(peer)
    }
}
