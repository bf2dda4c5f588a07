//! Fleet status from implicit ACKs: which agent holds which configuration.
//!
//! A stock agent sends back, on every poll, the digest of the last configuration it applied (the
//! `uuid` of `ConfigurationSyncRequest`). So the CDS handler learns, per (service, peer address),
//! when the agent was last seen and what it holds, at no cost to the agent. From that and the
//! digest currently served, each agent is:
//!
//! - **applied**: it echoes the current digest;
//! - **behind**: it does not yet, but it has polled fewer than N times since the current digest
//!   was installed (after a change an agent first echoes the old digest, receives the new one, and
//!   echoes it on its next poll; a first contact or a Java agent's watcher-count reset sends no
//!   digest at all, which is the same re-sync);
//! - **stuck**: it still echoes another digest N or more polls after the change. A Java agent
//!   keeps its old digest when a watcher throws while applying a command, so stuck is how a failed
//!   apply (an implicit NACK) shows. N is [`FleetOptions::stuck_after_polls`].
//!
//! The hot path ([`Fleet::observe`]) takes one short lock on one of [`SHARDS`] shards (chosen by
//! the peer address), does two hash lookups keyed by borrowed data and updates a few integers: it
//! allocates only the first time a (service, peer) pair is seen or when an agent echoes a digest
//! it did not echo before. Memory is bounded: at most [`FleetOptions::max_agents`] pairs are
//! tracked, and [`Fleet::sweep`] forgets agents not seen for [`FleetOptions::expire_after`].
//!
//! Agents are told apart by peer address (IP and port of their gRPC connection). Behind a proxy
//! that pools connections, that is the proxy's connection, not the agent. Where agents also send
//! `ManagementService` calls to skyconf (see [`management`]), the instance name is shown too.

pub mod management;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use skyconf_core::Digest;

/// How many independently locked shards the table has.
pub const SHARDS: usize = 64;

/// The longest service name tracked; a longer one is answered but not tracked.
pub const MAX_TRACKED_NAME_BYTES: usize = 1024;

/// The longest echoed digest or instance name kept; longer ones are cut (a real digest is 128).
const MAX_KEPT_TEXT_BYTES: usize = 256;

/// Settings of fleet tracking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FleetOptions {
    /// An agent still echoing another digest this many polls after a change is stuck (at least 2:
    /// the first poll after a change always echoes the old digest).
    pub stuck_after_polls: u32,
    /// Agents not seen for this long are forgotten.
    pub expire_after: Duration,
    /// At most this many (service, peer) pairs are tracked; more are answered but not tracked.
    pub max_agents: usize,
}

impl Default for FleetOptions {
    fn default() -> Self {
        Self { stuck_after_polls: 3, expire_after: Duration::from_secs(600), max_agents: 100_000 }
    }
}

/// Where an agent stands with the digest currently served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentState {
    /// It echoes the current digest.
    Applied,
    /// It does not yet, within the allowed number of polls.
    Behind,
    /// It still echoes another digest N polls after the change: its apply failed.
    Stuck,
}

/// What an agent last echoed.
#[derive(Debug, Clone)]
enum Echo {
    /// No digest (first contact, or a re-sync).
    Nothing,
    /// A digest the server served (shared, not copied).
    Served(Digest),
    /// Any other text, cut to [`MAX_KEPT_TEXT_BYTES`].
    Other(Arc<str>),
}

impl Echo {
    fn as_str(&self) -> &str {
        match self {
            Self::Nothing => "",
            Self::Served(d) => d.as_str(),
            Self::Other(s) => s,
        }
    }

    fn is(&self, uuid: &str) -> bool {
        self.as_str() == cut(uuid)
    }
}

/// One (service, peer) pair.
#[derive(Debug, Clone)]
struct Entry {
    first_seen: u64,
    last_seen: u64,
    polls: u64,
    echoed: Echo,
    /// The digest served to this agent at its last poll.
    target: Digest,
    /// Consecutive polls, since `target` was first served to it, that did not echo `target`.
    polls_behind: u32,
}

#[derive(Debug, Default)]
struct Peer {
    services: HashMap<Arc<str>, Entry>,
    instance: Option<Instance>,
}

#[derive(Debug, Clone)]
struct Instance {
    service: Arc<str>,
    name: Arc<str>,
    seen: u64,
}

#[derive(Debug, Default)]
struct Shard {
    peers: HashMap<SocketAddr, Peer>,
}

/// The fleet table. Cheap to share: wrap it in an `Arc`.
#[derive(Debug)]
pub struct Fleet {
    shards: Box<[Mutex<Shard>]>,
    options: FleetOptions,
    epoch: Instant,
    epoch_unix_ms: u64,
    tracked: AtomicUsize,
    untracked: AtomicU64,
}

/// One agent as operators see it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AgentStatus {
    /// The service it polls for.
    pub service: String,
    /// Its gRPC peer address.
    pub peer: String,
    /// Its instance name, once it sent a `ManagementService` call to this server.
    pub instance: Option<String>,
    /// First poll seen (Unix milliseconds).
    pub first_seen_ms: u64,
    /// Last poll seen (Unix milliseconds).
    pub last_seen_ms: u64,
    /// Polls seen.
    pub polls: u64,
    /// The digest it echoed last ("" for none).
    pub digest: String,
    /// Applied, behind or stuck.
    pub state: AgentState,
    /// Polls since the current digest was first served to it that did not echo it.
    pub polls_behind: u32,
}

/// Counts per state for one service.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct StateCounts {
    /// Agents seen.
    pub agents: usize,
    /// Agents holding the current digest.
    pub applied: usize,
    /// Agents not holding it yet.
    pub behind: usize,
    /// Agents that failed to apply it.
    pub stuck: usize,
}

impl StateCounts {
    fn add(&mut self, state: AgentState) {
        self.agents += 1;
        match state {
            AgentState::Applied => self.applied += 1,
            AgentState::Behind => self.behind += 1,
            AgentState::Stuck => self.stuck += 1,
        }
    }
}

fn cut(text: &str) -> &str {
    if text.len() <= MAX_KEPT_TEXT_BYTES {
        return text;
    }
    let mut end = MAX_KEPT_TEXT_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Spreads peers over shards: a multiplicative hash of the address and port.
fn shard_of(peer: &SocketAddr) -> usize {
    let ip = match peer.ip() {
        std::net::IpAddr::V4(v4) => u64::from(u32::from(v4)),
        std::net::IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            (bits as u64) ^ ((bits >> 64) as u64)
        }
    };
    let mixed = (ip ^ (u64::from(peer.port()) << 32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (mixed >> 58) as usize % SHARDS
}

impl Fleet {
    /// An empty table.
    pub fn new(options: FleetOptions) -> Self {
        let epoch_unix_ms = crate::unix_time::now_ms();
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            options: FleetOptions { stuck_after_polls: options.stuck_after_polls.max(2), ..options },
            epoch: Instant::now(),
            epoch_unix_ms,
            tracked: AtomicUsize::new(0),
            untracked: AtomicU64::new(0),
        }
    }

    /// The settings.
    pub fn options(&self) -> FleetOptions {
        self.options
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn unix_ms(&self, at: u64) -> u64 {
        self.epoch_unix_ms + at
    }

    fn lock(&self, peer: &SocketAddr) -> MutexGuard<'_, Shard> {
        self.shards[shard_of(peer)].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records one poll: `peer` asked for `service` echoing `uuid` and was served `current`.
    pub fn observe(&self, service: &str, uuid: &str, peer: SocketAddr, current: &Digest) {
        if service.len() > MAX_TRACKED_NAME_BYTES {
            self.untracked.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let now = self.now();
        let mut shard = self.lock(&peer);
        if let Some(entry) = shard.peers.get_mut(&peer).and_then(|p| p.services.get_mut(service)) {
            entry.update(uuid, current, now);
            return;
        }
        if self.tracked.load(Ordering::Relaxed) >= self.options.max_agents {
            self.untracked.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.tracked.fetch_add(1, Ordering::Relaxed);
        let mut entry = Entry {
            first_seen: now,
            last_seen: now,
            polls: 0,
            echoed: Echo::Nothing,
            target: current.clone(),
            polls_behind: 0,
        };
        entry.update(uuid, current, now);
        shard.peers.entry(peer).or_default().services.insert(Arc::from(service), entry);
    }

    /// Records the instance name an agent at `peer` gave in a `ManagementService` call.
    pub fn observe_instance(&self, service: &str, instance: &str, peer: SocketAddr) {
        if instance.is_empty() || service.len() > MAX_TRACKED_NAME_BYTES {
            return;
        }
        let now = self.now();
        let mut shard = self.lock(&peer);
        let peer_entry = match shard.peers.get_mut(&peer) {
            Some(p) => p,
            None => {
                if self.tracked.load(Ordering::Relaxed) >= self.options.max_agents {
                    return;
                }
                shard.peers.entry(peer).or_default()
            }
        };
        match &mut peer_entry.instance {
            Some(known) if &*known.name == cut(instance) && &*known.service == service => known.seen = now,
            slot => *slot = Some(Instance { service: Arc::from(service), name: Arc::from(cut(instance)), seen: now }),
        }
    }

    /// Forgets agents (and instance names) not seen for [`FleetOptions::expire_after`].
    pub fn sweep(&self) -> usize {
        let now = self.now();
        let horizon = self.options.expire_after.as_millis() as u64;
        let fresh = |seen: u64| now.saturating_sub(seen) < horizon;
        let mut removed = 0;
        for shard in &*self.shards {
            let mut shard = shard.lock().unwrap_or_else(|p| p.into_inner());
            shard.peers.retain(|_, peer| {
                let before = peer.services.len();
                peer.services.retain(|_, e| fresh(e.last_seen));
                removed += before - peer.services.len();
                if peer.instance.as_ref().is_some_and(|i| !fresh(i.seen)) {
                    peer.instance = None;
                }
                !peer.services.is_empty() || peer.instance.is_some()
            });
        }
        self.tracked.fetch_sub(removed, Ordering::Relaxed);
        removed
    }

    /// How many (service, peer) pairs are tracked.
    pub fn tracked(&self) -> usize {
        self.tracked.load(Ordering::Relaxed)
    }

    /// Polls not tracked because the table was full or the name too long.
    pub fn untracked_polls(&self) -> u64 {
        self.untracked.load(Ordering::Relaxed)
    }

    fn state(&self, entry: &Entry, current: &Digest) -> AgentState {
        if entry.echoed.as_str() == current.as_str() {
            AgentState::Applied
        } else if entry.target == *current && entry.polls_behind >= self.options.stuck_after_polls {
            AgentState::Stuck
        } else {
            AgentState::Behind
        }
    }

    /// Every agent polling `service`, judged against `current` (the digest served to it now).
    pub fn agents_of(&self, service: &str, current: &Digest) -> Vec<AgentStatus> {
        let mut out = Vec::new();
        for shard in &*self.shards {
            let shard = shard.lock().unwrap_or_else(|p| p.into_inner());
            for (addr, peer) in &shard.peers {
                if let Some(entry) = peer.services.get(service) {
                    out.push(self.status(service, *addr, peer, entry, current));
                }
            }
        }
        out.sort_by(|a, b| a.peer.cmp(&b.peer));
        out
    }

    fn status(&self, service: &str, addr: SocketAddr, peer: &Peer, entry: &Entry, current: &Digest) -> AgentStatus {
        AgentStatus {
            service: service.to_owned(),
            peer: addr.to_string(),
            instance: peer.instance.as_ref().filter(|i| &*i.service == service).map(|i| i.name.to_string()),
            first_seen_ms: self.unix_ms(entry.first_seen),
            last_seen_ms: self.unix_ms(entry.last_seen),
            polls: entry.polls,
            digest: entry.echoed.as_str().to_owned(),
            state: self.state(entry, current),
            polls_behind: if entry.target == *current { entry.polls_behind } else { 0 },
        }
    }

    /// Counts per service, judging each agent with `current_of(service)`.
    pub fn counts(&self, current_of: impl Fn(&str) -> Digest) -> BTreeMap<String, StateCounts> {
        let mut digests: HashMap<Arc<str>, Digest> = HashMap::new();
        let mut out: BTreeMap<String, StateCounts> = BTreeMap::new();
        for shard in &*self.shards {
            let shard = shard.lock().unwrap_or_else(|p| p.into_inner());
            for peer in shard.peers.values() {
                for (service, entry) in &peer.services {
                    let current = digests.entry(Arc::clone(service)).or_insert_with(|| current_of(service));
                    let state = self.state(entry, current);
                    match out.get_mut(&**service) {
                        Some(counts) => counts.add(state),
                        None => out.entry(service.to_string()).or_default().add(state),
                    }
                }
            }
        }
        out
    }
}

impl Fleet {
    /// How many agents of each service echo each digest (`""` for none yet), keyed by
    /// (service, digest): the rows of a per-digest gauge.
    pub fn per_digest(&self) -> BTreeMap<(String, String), usize> {
        let mut out: BTreeMap<(String, String), usize> = BTreeMap::new();
        for shard in &*self.shards {
            let shard = shard.lock().unwrap_or_else(|p| p.into_inner());
            for peer in shard.peers.values() {
                for (service, entry) in &peer.services {
                    *out.entry((service.to_string(), entry.echoed.as_str().to_owned())).or_default() += 1;
                }
            }
        }
        out
    }
}

impl Entry {
    fn update(&mut self, uuid: &str, current: &Digest, now: u64) {
        self.last_seen = now;
        self.polls += 1;
        let applied = *current == *uuid;
        if !self.echoed.is(uuid) {
            self.echoed = if applied {
                Echo::Served(current.clone())
            } else if uuid.is_empty() {
                Echo::Nothing
            } else {
                Echo::Other(Arc::from(cut(uuid)))
            };
        }
        if self.target != *current {
            self.target = current.clone();
            self.polls_behind = 0;
        }
        if applied {
            self.polls_behind = 0;
        } else {
            self.polls_behind = self.polls_behind.saturating_add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(port: u16) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, 1], port))
    }

    fn fleet() -> Fleet {
        Fleet::new(FleetOptions::default())
    }

    fn state(fleet: &Fleet, service: &str, port: u16, current: &Digest) -> AgentState {
        fleet.agents_of(service, current).into_iter().find(|a| a.peer == peer(port).to_string()).unwrap().state
    }

    #[test]
    fn an_agent_that_follows_is_behind_for_one_poll_then_applied() {
        let fleet = fleet();
        let v1 = Digest::of_text("v1");
        let v2 = Digest::of_text("v2");
        fleet.observe("svc", "", peer(1), &v1);
        assert_eq!(state(&fleet, "svc", 1, &v1), AgentState::Behind, "first contact");
        fleet.observe("svc", v1.as_str(), peer(1), &v1);
        assert_eq!(state(&fleet, "svc", 1, &v1), AgentState::Applied);
        assert_eq!(state(&fleet, "svc", 1, &v2), AgentState::Behind, "a change it has not polled since");
        fleet.observe("svc", v1.as_str(), peer(1), &v2);
        assert_eq!(state(&fleet, "svc", 1, &v2), AgentState::Behind);
        fleet.observe("svc", v2.as_str(), peer(1), &v2);
        assert_eq!(state(&fleet, "svc", 1, &v2), AgentState::Applied);
        let agent = &fleet.agents_of("svc", &v2)[0];
        assert_eq!((agent.polls, agent.digest.as_str(), agent.polls_behind), (4, v2.as_str(), 0));
    }

    #[test]
    fn an_agent_echoing_the_old_digest_n_polls_after_a_change_is_stuck() {
        let fleet = fleet();
        let v1 = Digest::of_text("v1");
        let v2 = Digest::of_text("v2");
        fleet.observe("svc", v1.as_str(), peer(1), &v1);
        fleet.observe("svc", v1.as_str(), peer(1), &v2);
        fleet.observe("svc", v1.as_str(), peer(1), &v2);
        assert_eq!(state(&fleet, "svc", 1, &v2), AgentState::Behind);
        fleet.observe("svc", v1.as_str(), peer(1), &v2);
        assert_eq!(state(&fleet, "svc", 1, &v2), AgentState::Stuck);
        let v3 = Digest::of_text("v3");
        assert_eq!(state(&fleet, "svc", 1, &v3), AgentState::Behind, "a newer change restarts the count");
        fleet.observe("svc", v3.as_str(), peer(1), &v3);
        assert_eq!(state(&fleet, "svc", 1, &v3), AgentState::Applied, "and it recovers");
    }

    #[test]
    fn counts_services_and_peers_separately_and_the_table_is_bounded() {
        let fleet = Fleet::new(FleetOptions { max_agents: 3, ..FleetOptions::default() });
        let v1 = Digest::of_text("v1");
        fleet.observe("a", v1.as_str(), peer(1), &v1);
        fleet.observe("a", "", peer(2), &v1);
        fleet.observe("b", "", peer(1), &v1);
        fleet.observe("c", "", peer(3), &v1);
        assert_eq!(fleet.tracked(), 3);
        assert_eq!(fleet.untracked_polls(), 1);
        let counts = fleet.counts(|_| v1.clone());
        assert_eq!(counts["a"], StateCounts { agents: 2, applied: 1, behind: 1, stuck: 0 });
        assert_eq!(counts["b"].agents, 1);
        assert!(!counts.contains_key("c"));
        assert_eq!(fleet.per_digest()[&("a".to_owned(), v1.to_string())], 1);
        assert_eq!(fleet.per_digest()[&("a".to_owned(), String::new())], 1);
        let long = "x".repeat(MAX_TRACKED_NAME_BYTES + 1);
        fleet.observe(&long, "", peer(9), &v1);
        assert_eq!(fleet.untracked_polls(), 2);
    }

    #[test]
    fn sweeping_forgets_agents_not_seen_lately() {
        let expiring = Fleet::new(FleetOptions { expire_after: Duration::ZERO, ..FleetOptions::default() });
        let v1 = Digest::of_text("v1");
        expiring.observe("a", "", peer(1), &v1);
        expiring.observe_instance("a", "inst-1", peer(1));
        assert_eq!(expiring.sweep(), 1);
        assert_eq!(expiring.tracked(), 0);
        assert!(expiring.agents_of("a", &v1).is_empty());
        let kept = fleet();
        kept.observe("a", "", peer(1), &v1);
        assert_eq!(kept.sweep(), 0);
    }

    #[test]
    fn instance_names_attach_to_the_peer_and_service() {
        let fleet = fleet();
        let v1 = Digest::of_text("v1");
        fleet.observe_instance("a", "pod-7@10.0.0.1", peer(1));
        fleet.observe("a", "", peer(1), &v1);
        fleet.observe("b", "", peer(1), &v1);
        assert_eq!(fleet.agents_of("a", &v1)[0].instance.as_deref(), Some("pod-7@10.0.0.1"));
        assert_eq!(fleet.agents_of("b", &v1)[0].instance, None);
    }

    #[test]
    fn odd_input_is_cut_not_refused() {
        let fleet = fleet();
        let v1 = Digest::of_text("v1");
        let uuid = "é".repeat(300);
        fleet.observe("a", &uuid, peer(1), &v1);
        fleet.observe("a", &uuid, peer(1), &v1);
        let agent = &fleet.agents_of("a", &v1)[0];
        assert!(agent.digest.len() <= MAX_KEPT_TEXT_BYTES);
        assert_eq!(agent.polls_behind, 2);
        let v6 = SocketAddr::from(([0xfe80, 0, 0, 0, 0, 0, 0, 1], 5));
        fleet.observe("a", "", v6, &v1);
        assert_eq!(fleet.agents_of("a", &v1).len(), 2);
    }
}
