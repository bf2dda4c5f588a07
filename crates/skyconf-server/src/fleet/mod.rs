//! Fleet status from implicit ACKs: which agent holds which configuration.
//!
//! A stock agent sends back, on every poll, the digest of the last configuration it applied (the
//! `uuid` of `ConfigurationSyncRequest`). So the CDS handler learns, per (service, connection),
//! when the agent was last seen and what it holds, at no cost to the agent. From that and the
//! digest currently served, each row is:
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
//! **Lifetimes.** Every fact here is tied to the lifetime it describes (see the README's Fleet
//! section for the bounds):
//! - a **row** (service, connection) is created by the connection's first poll for the service and
//!   removed when the connection closes ([`link::Link::close`], run by a guard the connection's
//!   socket owns), or when the connection stays open but has not polled that service for
//!   [`FleetOptions::expire_after`], or after [`ONE_OFF_EXPIRY`] for an unidentified row seen once;
//! - a row is **seen now** exactly while one of its polls is held: the hold is a guard
//!   ([`Holding`]), whose end (answered, deadline, client cancel, connection lost, shutdown) makes
//!   that moment the row's last sight;
//! - an **identity** ([`identity`]) lives exactly as long as its connection: at most one per
//!   connection, its bytes bounded and counted.
//!
//! Rows are keyed by [`ConnKey`]: a connection id the process never issues twice, and the peer
//! address; so a connection's close never removes a later connection's rows from the same
//! ip:port.
//!
//! The hot path ([`Fleet::record`]) takes one short lock on one of [`SHARDS`] shards (chosen by
//! the connection), does two hash lookups keyed by borrowed data and updates a few integers: it
//! allocates only the first time a (service, connection) pair is seen or when an agent echoes a
//! digest it did not echo before. Memory is bounded: at most [`FleetOptions::max_agents`] rows
//! are tracked.
//!
//! Anyone who reaches the gRPC port can poll for any name, so names without configuration (typos,
//! or a flood of made-up names) are tracked within a quota of their own
//! ([`FleetOptions::max_unconfigured`]): when it or the whole table is full, the least recently
//! seen row of an unconfigured service is evicted to make room (approximately: each shard keeps
//! its unconfigured rows in a queue, and one seen again since it was queued gets a second
//! chance), and counted ([`Fleet::evictions`]). Rows of configured services are never evicted for
//! another row; the quota leaves them at least `max_agents - max_unconfigured` places.
//!
//! Behind a proxy that pools connections, a connection is the proxy's, not the agent's. Where
//! agents also send `ManagementService` calls to skyconf (answered here, see [`crate::management`], or
//! forwarded by the gateway), the connection's instance identity is kept too: name, properties,
//! agent version (see [`identity`]). In gateway mode every agent sends them, so
//! [`FleetOptions::expect_identity`] marks a connection that polls without one
//! [`AgentState::Anonymous`] instead of counting it as a fleet member.
//!
//! Counting is one function, [`Fleet::counts`]: the admin API and the `skyconf_fleet_agents`
//! metric both read it.

pub(crate) mod identity;
pub(crate) mod link;
pub mod replicas;

#[cfg(test)]
mod model;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use skyconf_core::Digest;
use skyconf_core::targeting::InstanceRef;
use tokio::time::Instant;

use identity::Instance;
pub use identity::{
    AnonymousPoller, InstanceService, InstanceStatus, Instances, MAX_IDENTITY_BYTES, MAX_PROPERTIES, Property,
};
pub use link::{Caller, Choice, ConnKey, Link};

/// What each agent is served now, to judge whether it holds it. A closure `Fn(&str) -> Digest`
/// (one digest per service) and a [`Digest`] (one for every agent) are ones.
pub trait CurrentDigest {
    /// The digest served now to an agent of `service` that is `instance` (`None`: unknown).
    fn current(&self, service: &str, instance: Option<&InstanceRef<'_>>) -> Digest;

    /// Whether agents of `service` may be served different digests (targeting, a rollout's
    /// waves); when not, [`Self::current`] is asked once per service.
    fn per_instance(&self, _service: &str) -> bool {
        false
    }
}

impl<F: Fn(&str) -> Digest> CurrentDigest for F {
    fn current(&self, service: &str, _instance: Option<&InstanceRef<'_>>) -> Digest {
        self(service)
    }
}

impl CurrentDigest for Digest {
    fn current(&self, _service: &str, _instance: Option<&InstanceRef<'_>>) -> Digest {
        self.clone()
    }
}

/// What is served now answers the fleet's question: its digest for the service and instance.
impl CurrentDigest for crate::served::Serving {
    fn current(&self, service: &str, instance: Option<&InstanceRef<'_>>) -> Digest {
        self.view().choose(service, instance).chosen.answer.digest.clone()
    }

    fn per_instance(&self, service: &str) -> bool {
        self.view().varies(service)
    }
}

/// Asks a [`CurrentDigest`] once per service where it does not vary per instance.
struct Currents<'a, C: ?Sized> {
    of: &'a C,
    per_service: HashMap<Arc<str>, Option<Digest>>,
}

impl<'a, C: CurrentDigest + ?Sized> Currents<'a, C> {
    fn new(of: &'a C) -> Self {
        Self { of, per_service: HashMap::new() }
    }

    /// The digest served now to the agent of `service` on the connection of `peer`.
    fn of(&mut self, service: &Arc<str>, peer: &Peer) -> Digest {
        let of = self.of;
        let cached = self
            .per_service
            .entry(Arc::clone(service))
            .or_insert_with(|| (!of.per_instance(service)).then(|| of.current(service, None)));
        match cached {
            Some(digest) => digest.clone(),
            None => {
                let instance = peer.instance.as_deref().filter(|i| *i.service == **service);
                of.current(service, instance.map(Instance::as_ref).as_ref())
            }
        }
    }
}

/// How many independently locked shards the table has.
pub const SHARDS: usize = 64;

/// How long a row seen only once is kept. A stock agent polls again within 20 s (the Java and Go
/// agents' default interval), so a row not seen again within a minute was a one-off poll.
pub const ONE_OFF_EXPIRY: Duration = Duration::from_secs(60);

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
    /// A row of an open connection that has not polled its service for this long is removed
    /// (a proxy's pooled connection that no longer carries that agent). Rows of closed
    /// connections go at once, whatever this says.
    pub expire_after: Duration,
    /// At most this many (service, connection) rows are tracked; more are answered but not
    /// tracked. Twice the largest fleet skyconf is sized for (100,000 agents): a restarted agent's
    /// new connection may briefly be tracked beside its old one, until that one is found closed.
    pub max_agents: usize,
    /// At most this many of them are of services without configuration; beyond it, the least
    /// recently seen of those is evicted.
    pub max_unconfigured: usize,
    /// Every agent is expected to say which instance it is (`ManagementService` calls on its
    /// connection, as in gateway mode): a connection that polls without having done so is
    /// [`AgentState::Anonymous`], not a fleet member. Off where skyconf sees only the polls
    /// (behind a proxy that sends the rest to the OAP).
    pub expect_identity: bool,
}

impl Default for FleetOptions {
    fn default() -> Self {
        Self {
            stuck_after_polls: 3,
            expire_after: Duration::from_secs(600),
            max_agents: 200_000,
            max_unconfigured: 10_000,
            expect_identity: false,
        }
    }
}

/// Where an agent stands with the digest currently served.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum AgentState {
    /// It has polled once: a new agent, or a one-off poll (`skyconf fetch`, a probe). Not a fleet
    /// member until it polls again, and forgotten after [`ONE_OFF_EXPIRY`] if it does not.
    New,
    /// It echoes the current digest, and was sent nothing else since.
    Applied,
    /// It does not yet, within the allowed number of polls.
    Behind,
    /// It still echoes another digest N polls after the change: its apply failed.
    Stuck,
    /// Its connection polls but never said which instance it is, where every agent is expected
    /// to ([`FleetOptions::expect_identity`]): a client that is not a SkyWalking agent, or one
    /// whose other calls do not come here. Shown, not counted as a fleet member.
    Anonymous,
}

impl AgentState {
    /// Every state, in the order the metrics list them.
    pub const ALL: [Self; 5] = [Self::Applied, Self::Behind, Self::Stuck, Self::New, Self::Anonymous];

    /// Its name in the API and in metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::New => "new",
            Self::Applied => "applied",
            Self::Behind => "behind",
            Self::Stuck => "stuck",
            Self::Anonymous => "anonymous",
        }
    }
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

/// One (service, connection) row.
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
    /// Whether the service had configuration at its last poll.
    configured: bool,
    /// Its polls held now (each counted by a [`Holding`] guard): a held agent is connected and
    /// waiting, so it counts as seen now.
    held: u16,
}

/// A map on every poll's path: hashed with foldhash, not SipHash. Its keys are connection ids
/// the process issues and service names within one connection's row, which no client can make
/// collide on purpose (the seed is the process's own), and two SipHash lookups were a tenth of a
/// poll's instructions in the handler.
type PollMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

#[derive(Debug, Default)]
struct Peer {
    services: PollMap<Arc<str>, Entry>,
    /// Boxed behind an `Arc`: most connections have none (behind a proxy), the poll path walks
    /// these maps, and a poll's targeting choice reads it outside the shard lock.
    instance: Option<Arc<Instance>>,
}

/// One poll, as [`Fleet::record`] records it.
#[derive(Debug, Clone, Copy)]
struct Poll<'a> {
    service: &'a str,
    uuid: &'a str,
    key: ConnKey,
    current: &'a Digest,
    configured: bool,
    now: u64,
    /// The connection's closed flag: nothing is inserted for a closed connection.
    closed: Option<&'a AtomicBool>,
}

/// A row of an unconfigured service, queued for eviction when it was last seen at `at`.
#[derive(Debug)]
struct Queued {
    key: ConnKey,
    service: Arc<str>,
    at: u64,
}

#[derive(Debug, Default)]
struct Shard {
    peers: PollMap<ConnKey, Peer>,
    /// The shard's rows of unconfigured services, oldest first; may hold stale items (rows
    /// forgotten or configured since), skipped when they come up.
    unconfigured: VecDeque<Queued>,
}

/// The fleet table. Cheap to share: wrap it in an `Arc`.
#[derive(Debug)]
pub struct Fleet {
    shards: Box<[Mutex<Shard>]>,
    options: FleetOptions,
    /// The fleet's clock: tokio's, so that tests in paused time move it.
    epoch: Instant,
    epoch_unix_ms: u64,
    /// Milliseconds added to the clock: tests move time on with it.
    skew_ms: AtomicU64,
    tracked: AtomicUsize,
    /// How many of the tracked rows are of unconfigured services.
    tracked_unconfigured: AtomicUsize,
    untracked: AtomicU64,
    evicted: AtomicU64,
    /// Where the next search for an evictable row in another shard starts.
    next_victim_shard: AtomicUsize,
    /// Connections with a known instance identity (bounded by [`FleetOptions::max_agents`] too).
    identified: AtomicUsize,
    /// The bytes the kept identities hold (names, properties, agent versions).
    identity_bytes: AtomicUsize,
    /// Identities not kept because that bound was reached.
    unkept_identities: AtomicU64,
    /// Properties dropped over [`MAX_PROPERTIES`] or [`MAX_IDENTITY_BYTES`], or shortened, over
    /// all reports.
    properties_cut: AtomicU64,
}

/// What one `ManagementService` call says about the instance behind a connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InstanceIdentity {
    /// The service the instance belongs to.
    pub service: String,
    /// The instance name.
    pub instance: String,
    /// `reportInstanceProperties`' properties, in the order sent (hostname, IPs, language, OS,
    /// custom ones); empty for `keepAlive`, which keeps the properties already known.
    pub properties: Vec<(String, String)>,
    /// The call's `agent-version` metadata, if sent.
    pub agent_version: Option<String>,
    /// Whether the call was `reportInstanceProperties` (else `keepAlive`).
    pub reported_properties: bool,
}

/// One agent as operators see it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct AgentStatus {
    /// The service it polls for.
    pub service: String,
    /// Its gRPC peer address.
    pub peer: String,
    /// Its instance name, once its connection carried a `ManagementService` call for this
    /// service.
    pub instance: Option<String>,
    /// The instance's reported properties, in the order sent (empty until reported).
    pub properties: Vec<Property>,
    /// The agent version its connection sent as `agent-version` metadata.
    #[schema(required = true)]
    pub agent_version: Option<String>,
    /// First poll seen (Unix milliseconds).
    pub first_seen_ms: u64,
    /// Its last poll, or now while one of its polls is held (Unix milliseconds).
    pub last_seen_ms: u64,
    /// Polls seen.
    pub polls: u64,
    /// The digest it echoed last ("" for none).
    pub digest: String,
    /// Applied, behind, stuck, new or anonymous.
    pub state: AgentState,
    /// Polls since the current digest was first served to it that did not echo it.
    pub polls_behind: u32,
}

/// Counts per state for one service.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct StateCounts {
    /// Agents seen: applied, behind or stuck (pollers seen once are counted in `new` only, and
    /// anonymous ones in `anonymous` only).
    pub agents: usize,
    /// Agents holding the current digest.
    pub applied: usize,
    /// Agents not holding it yet.
    pub behind: usize,
    /// Agents that failed to apply it.
    pub stuck: usize,
    /// Pollers seen once so far: new agents, or one-off polls.
    pub new: usize,
    /// Pollers that never said which instance they are, where every agent is expected to.
    pub anonymous: usize,
}

impl StateCounts {
    /// Adds `other`'s counts (another replica's agents of the same service).
    pub fn merge(&mut self, other: &Self) {
        self.agents += other.agents;
        self.applied += other.applied;
        self.behind += other.behind;
        self.stuck += other.stuck;
        self.new += other.new;
        self.anonymous += other.anonymous;
    }

    /// Counts one agent in `state`.
    pub fn add(&mut self, state: AgentState) {
        // New and anonymous pollers are shown apart, not counted as fleet members.
        let count = match state {
            AgentState::New => &mut self.new,
            AgentState::Anonymous => &mut self.anonymous,
            AgentState::Applied => &mut self.applied,
            AgentState::Behind => &mut self.behind,
            AgentState::Stuck => &mut self.stuck,
        };
        *count += 1;
        if !matches!(state, AgentState::New | AgentState::Anonymous) {
            self.agents += 1;
        }
    }

    /// How many are in `state`.
    pub fn of(&self, state: AgentState) -> usize {
        match state {
            AgentState::New => self.new,
            AgentState::Anonymous => self.anonymous,
            AgentState::Applied => self.applied,
            AgentState::Behind => self.behind,
            AgentState::Stuck => self.stuck,
        }
    }
}

fn cut(text: &str) -> &str {
    if text.len() <= MAX_KEPT_TEXT_BYTES {
        return text;
    }
    &text[..crate::text::floor_char_boundary(text, MAX_KEPT_TEXT_BYTES)]
}

/// Spreads connections over shards: a multiplicative hash of the connection id, or of the
/// address and port for a call without a connection.
fn shard_of(key: &ConnKey) -> usize {
    let bits = if key.id != 0 {
        key.id
    } else {
        let ip = match key.peer.ip() {
            std::net::IpAddr::V4(v4) => u64::from(u32::from(v4)),
            std::net::IpAddr::V6(v6) => {
                let bits = u128::from(v6);
                (bits as u64) ^ ((bits >> 64) as u64)
            }
        };
        ip ^ (u64::from(key.peer.port()) << 32)
    };
    let mixed = bits.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (mixed >> 58) as usize % SHARDS
}

/// One held poll's mark on its row: the row is seen now while this lives, and its end is the
/// row's last sight. Dropped however the hold ends, a cancelled call's future dropped at its
/// `await` included.
#[derive(Debug)]
#[must_use = "the row is held only while the guard lives"]
pub struct Holding<'a> {
    fleet: &'a Fleet,
    key: ConnKey,
    /// The row's service name (shared with the row), `None` when the row is not tracked.
    service: Option<Arc<str>>,
}

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        let Some(service) = &self.service else { return };
        let now = self.fleet.now();
        let mut shard = self.fleet.lock(&self.key);
        // Gone with its connection, or evicted: nothing to release.
        if let Some(entry) = shard.peers.get_mut(&self.key).and_then(|p| p.services.get_mut(&**service)) {
            entry.held = entry.held.saturating_sub(1);
            entry.last_seen = now;
        }
    }
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
            skew_ms: AtomicU64::new(0),
            tracked: AtomicUsize::new(0),
            tracked_unconfigured: AtomicUsize::new(0),
            untracked: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
            next_victim_shard: AtomicUsize::new(0),
            identified: AtomicUsize::new(0),
            identity_bytes: AtomicUsize::new(0),
            unkept_identities: AtomicU64::new(0),
            properties_cut: AtomicU64::new(0),
        }
    }

    /// The settings.
    pub fn options(&self) -> FleetOptions {
        self.options
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64 + self.skew_ms.load(Ordering::Relaxed)
    }

    /// Now, in Unix milliseconds by the fleet's clock (what `last_seen_ms` of a held row says).
    pub fn now_unix_ms(&self) -> u64 {
        self.unix_ms(self.now())
    }

    /// Moves the fleet's clock on by `by` (for tests of expiry).
    #[cfg(test)]
    fn advance(&self, by: Duration) {
        self.skew_ms.fetch_add(by.as_millis() as u64, Ordering::Relaxed);
    }

    fn unix_ms(&self, at: u64) -> u64 {
        self.epoch_unix_ms + at
    }

    fn lock(&self, key: &ConnKey) -> MutexGuard<'_, Shard> {
        self.shards[shard_of(key)].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks a poll of `caller` for `service` held until the returned guard is dropped: the row
    /// is seen now meanwhile and never forgotten, and the guard's end is its last sight. A row
    /// not tracked is not marked.
    pub fn hold(&self, caller: impl Into<ConnKey>, service: &str) -> Holding<'_> {
        let key = caller.into();
        let mut shard = self.lock(&key);
        let held = shard.peers.get_mut(&key).and_then(|peer| {
            let name = Arc::clone(peer.services.get_key_value(service)?.0);
            let entry = peer.services.get_mut(service)?;
            entry.held = entry.held.saturating_add(1);
            Some(name)
        });
        Holding { fleet: self, key, service: held }
    }

    /// Records that a held poll of `caller` for `service` was answered with `sent`'s command,
    /// after the poll was recorded: the agent holds `sent` from now on, whatever it echoed before
    /// (so a rollout reverted and started again does not count an agent as applied by a stale
    /// echo).
    pub fn sent(&self, service: &str, caller: impl Into<ConnKey>, sent: &Digest) {
        let key = caller.into();
        let mut shard = self.lock(&key);
        if let Some(entry) = shard.peers.get_mut(&key).and_then(|p| p.services.get_mut(service))
            && entry.target != *sent
        {
            entry.target = sent.clone();
            entry.polls_behind = 0;
        }
    }

    /// Records one poll of `caller`: it asked for `service` (`configured`: it has configuration)
    /// echoing `uuid` and was served `current`. Nothing is recorded for a closed connection.
    pub fn record(self: &Arc<Self>, caller: &Caller, service: &str, uuid: &str, current: &Digest, configured: bool) {
        let closed = caller.link().map(|link| {
            link.attach(self);
            link.closed_flag()
        });
        self.observe_key(caller.key(), closed, service, uuid, current, configured);
    }

    /// Records one poll seen without a connection record: `peer` asked for `service`
    /// (`configured`: it has configuration) echoing `uuid` and was served `current`. Its row ends
    /// only by expiry.
    pub fn observe(&self, service: &str, uuid: &str, peer: SocketAddr, current: &Digest, configured: bool) {
        self.observe_key(ConnKey::from(peer), None, service, uuid, current, configured);
    }

    fn observe_key(
        &self,
        key: ConnKey,
        closed: Option<&AtomicBool>,
        service: &str,
        uuid: &str,
        current: &Digest,
        configured: bool,
    ) {
        if service.len() > MAX_TRACKED_NAME_BYTES {
            self.untracked.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let poll = Poll { service, uuid, key, current, configured, now: self.now(), closed };
        {
            let mut shard = self.lock(&key);
            if self.update(&mut shard, &poll) {
                return;
            }
            if poll.closed.is_some_and(|c| c.load(Ordering::Acquire)) {
                return;
            }
            if self.has_room(configured) || (self.may_evict(configured) && self.evict_from(&mut shard)) {
                self.insert(&mut shard, &poll);
                return;
            }
        }
        // Full, and nothing to evict in this shard: evict in another (never two locks at once).
        if !self.may_evict(configured) || !self.evict_elsewhere() {
            self.untracked.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut shard = self.lock(&key);
        if !self.update(&mut shard, &poll) && !poll.closed.is_some_and(|c| c.load(Ordering::Acquire)) {
            self.insert(&mut shard, &poll);
        }
    }

    /// Updates the row if it is tracked; whether it was.
    fn update(&self, shard: &mut Shard, poll: &Poll<'_>) -> bool {
        let Poll { service, uuid, key, current, configured, now, .. } = *poll;
        let Some(entry) = shard.peers.get_mut(&key).and_then(|p| p.services.get_mut(service)) else {
            return false;
        };
        entry.update(uuid, current, now);
        if entry.configured != configured {
            entry.configured = configured;
            if configured {
                self.tracked_unconfigured.fetch_sub(1, Ordering::Relaxed);
            } else {
                self.tracked_unconfigured.fetch_add(1, Ordering::Relaxed);
                // Rare (the service lost its configuration): a new name allocation is fine.
                shard.unconfigured.push_back(Queued { key, service: Arc::from(service), at: now });
            }
        }
        true
    }

    /// Whether a new row fits without evicting one.
    fn has_room(&self, configured: bool) -> bool {
        self.tracked.load(Ordering::Relaxed) < self.options.max_agents
            && (configured || self.tracked_unconfigured.load(Ordering::Relaxed) < self.options.max_unconfigured)
    }

    /// Whether evicting an unconfigured row can make room for a new row.
    fn may_evict(&self, configured: bool) -> bool {
        (configured || self.options.max_unconfigured > 0) && self.tracked_unconfigured.load(Ordering::Relaxed) > 0
    }

    fn insert(&self, shard: &mut Shard, poll: &Poll<'_>) {
        let Poll { service, uuid, key, current, configured, now, .. } = *poll;
        self.tracked.fetch_add(1, Ordering::Relaxed);
        let service: Arc<str> = Arc::from(service);
        if !configured {
            self.tracked_unconfigured.fetch_add(1, Ordering::Relaxed);
            shard.unconfigured.push_back(Queued { key, service: Arc::clone(&service), at: now });
        }
        let mut entry = Entry {
            first_seen: now,
            last_seen: now,
            polls: 0,
            echoed: Echo::Nothing,
            target: current.clone(),
            polls_behind: 0,
            configured,
            held: 0,
        };
        entry.update(uuid, current, now);
        shard.peers.entry(key).or_default().services.insert(service, entry);
    }

    /// Evicts the shard's least recently seen row of an unconfigured service (a row seen again
    /// since it was queued is queued again instead); whether one was evicted.
    fn evict_from(&self, shard: &mut Shard) -> bool {
        // Two passes at most: after one, every live item is queued at its row's last poll.
        for _ in 0..shard.unconfigured.len().saturating_mul(2) {
            let Some(item) = shard.unconfigured.pop_front() else { return false };
            let Some(peer) = shard.peers.get_mut(&item.key) else { continue };
            let Some(entry) = peer.services.get(&item.service) else { continue };
            if entry.configured {
                continue;
            }
            if entry.last_seen > item.at {
                let at = entry.last_seen;
                shard.unconfigured.push_back(Queued { at, ..item });
                continue;
            }
            peer.services.remove(&item.service);
            if peer.services.is_empty() && peer.instance.is_none() {
                shard.peers.remove(&item.key);
            }
            self.tracked.fetch_sub(1, Ordering::Relaxed);
            self.tracked_unconfigured.fetch_sub(1, Ordering::Relaxed);
            self.evicted.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        false
    }

    /// [`Self::evict_from`] the first shard that has a row to evict, locking one at a time.
    fn evict_elsewhere(&self) -> bool {
        let start = self.next_victim_shard.fetch_add(1, Ordering::Relaxed);
        (0..SHARDS).any(|i| {
            let mut shard = self.shards[(start + i) % SHARDS].lock().unwrap_or_else(|p| p.into_inner());
            self.evict_from(&mut shard)
        })
    }

    /// Removes every row and the identity of the connection `key` (it closed).
    fn close(&self, key: ConnKey) {
        let removed = self.lock(&key).peers.remove(&key);
        let Some(peer) = removed else { return };
        let unconfigured = peer.services.values().filter(|e| !e.configured).count();
        self.tracked.fetch_sub(peer.services.len(), Ordering::Relaxed);
        self.tracked_unconfigured.fetch_sub(unconfigured, Ordering::Relaxed);
        if let Some(instance) = &peer.instance {
            self.forget_identity(instance);
        }
    }

    /// Forgets rows of open connections that have not polled for [`FleetOptions::expire_after`]
    /// (and unidentified rows seen once, after [`ONE_OFF_EXPIRY`]); a held row is never
    /// forgotten. Identities live as long as their connection; only those seen without a
    /// connection record expire here, after `expire_after` without a `ManagementService` call.
    pub fn sweep(&self) -> usize {
        let now = self.now();
        let horizon = self.options.expire_after.as_millis() as u64;
        let one_off_horizon = horizon.min(ONE_OFF_EXPIRY.as_millis() as u64);
        let fresh = |seen: u64| now.saturating_sub(seen) < horizon;
        let (mut removed, mut removed_unconfigured) = (0, 0);
        let mut forgotten: Vec<Arc<Instance>> = Vec::new();
        for shard in &*self.shards {
            let mut shard = shard.lock().unwrap_or_else(|p| p.into_inner());
            shard.peers.retain(|key, peer| {
                let before = peer.services.len();
                let identified = peer.instance.is_some();
                peer.services.retain(|_, e| {
                    let keep = if e.held > 0 {
                        true
                    } else if e.polls <= 1 && !identified {
                        now.saturating_sub(e.last_seen) < one_off_horizon
                    } else {
                        fresh(e.last_seen)
                    };
                    if !keep && !e.configured {
                        removed_unconfigured += 1;
                    }
                    keep
                });
                removed += before - peer.services.len();
                if key.id == 0
                    && let Some(instance) = peer.instance.take_if(|i| !fresh(i.seen))
                {
                    forgotten.push(instance);
                }
                !peer.services.is_empty() || peer.instance.is_some()
            });
            let Shard { peers, unconfigured } = &mut *shard;
            unconfigured.retain(|item| {
                peers.get(&item.key).and_then(|p| p.services.get(&item.service)).is_some_and(|e| !e.configured)
            });
        }
        self.tracked.fetch_sub(removed, Ordering::Relaxed);
        self.tracked_unconfigured.fetch_sub(removed_unconfigured, Ordering::Relaxed);
        for instance in &forgotten {
            self.forget_identity(instance);
        }
        removed
    }

    /// How many (service, connection) rows are tracked.
    pub fn tracked(&self) -> usize {
        self.tracked.load(Ordering::Relaxed)
    }

    /// How many of the tracked rows are of services without configuration.
    pub fn tracked_unconfigured(&self) -> usize {
        self.tracked_unconfigured.load(Ordering::Relaxed)
    }

    /// Polls not tracked because the table was full or the name too long.
    pub fn untracked_polls(&self) -> u64 {
        self.untracked.load(Ordering::Relaxed)
    }

    /// Rows of unconfigured services evicted to make room for new rows.
    pub fn evictions(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    /// The one rule that judges a row: every count, listing and metric goes through it.
    fn state(&self, peer: &Peer, entry: &Entry, current: &Digest) -> AgentState {
        if self.options.expect_identity && peer.instance.is_none() {
            AgentState::Anonymous
        } else if entry.is_one_off(peer) {
            AgentState::New
        } else if entry.echoed.as_str() == current.as_str() && entry.target == *current {
            // It echoed what it is served now, and was not sent anything else since.
            AgentState::Applied
        } else if entry.target == *current && entry.polls_behind >= self.options.stuck_after_polls {
            AgentState::Stuck
        } else {
            AgentState::Behind
        }
    }

    /// Every agent polling `service`, judged against `current` (the digest served to it now).
    pub fn agents_of(&self, service: &str, current: &(impl CurrentDigest + ?Sized)) -> Vec<AgentStatus> {
        let mut out = Vec::new();
        let mut currents = Currents::new(current);
        let name: Arc<str> = Arc::from(service);
        for shard in &*self.shards {
            let shard = shard.lock().unwrap_or_else(|p| p.into_inner());
            for (key, peer) in &shard.peers {
                if let Some(entry) = peer.services.get(service) {
                    let current = currents.of(&name, peer);
                    out.push((key.peer, key.id, self.status(service, key.peer, peer, entry, &current)));
                }
            }
        }
        out.sort_by_key(|row| (row.0, row.1));
        out.into_iter().map(|(_, _, status)| status).collect()
    }

    fn status(&self, service: &str, addr: SocketAddr, peer: &Peer, entry: &Entry, current: &Digest) -> AgentStatus {
        let instance = peer.instance.as_ref().filter(|i| &*i.service == service);
        AgentStatus {
            service: service.to_owned(),
            peer: addr.to_string(),
            instance: instance.map(|i| i.name.to_string()),
            properties: instance.map(|i| i.properties()).unwrap_or_default(),
            agent_version: instance.and_then(|i| i.agent_version.as_deref().map(str::to_owned)),
            first_seen_ms: self.unix_ms(entry.first_seen),
            last_seen_ms: self.unix_ms(entry.seen_at(self.now())),
            polls: entry.polls,
            digest: entry.echoed.as_str().to_owned(),
            state: self.state(peer, entry, current),
            polls_behind: if entry.target == *current { entry.polls_behind } else { 0 },
        }
    }

    /// The first `limit` rows of every service in (service, peer address) order, judged with
    /// `current_of(service)`, and how many rows there are. Only the keys are collected from the
    /// whole table; rows are built for the `limit` kept.
    pub fn agents(&self, limit: usize, current_of: &(impl CurrentDigest + ?Sized)) -> (Vec<AgentStatus>, usize) {
        let mut pairs: Vec<(Arc<str>, SocketAddr, ConnKey)> = Vec::new();
        for shard in &*self.shards {
            let shard = shard.lock().unwrap_or_else(|p| p.into_inner());
            for (key, peer) in &shard.peers {
                pairs.extend(peer.services.keys().map(|service| (Arc::clone(service), key.peer, *key)));
            }
        }
        let total = pairs.len();
        if pairs.len() > limit && limit > 0 {
            pairs.select_nth_unstable(limit - 1);
        }
        pairs.truncate(limit);
        pairs.sort_unstable();
        let mut currents = Currents::new(current_of);
        let mut out = Vec::with_capacity(pairs.len());
        for (service, addr, key) in pairs {
            let shard = self.lock(&key);
            // Forgotten since the first pass: left out.
            if let Some((peer, entry)) = shard.peers.get(&key).and_then(|p| p.services.get(&*service).map(|e| (p, e))) {
                let current = currents.of(&service, peer);
                out.push(self.status(&service, addr, peer, entry, &current));
            }
        }
        (out, total)
    }

    /// Counts per service, judging each row with `current_of(service)`: the one counting
    /// function, read by the admin API, the replica summaries and the `skyconf_fleet_agents`
    /// metric alike.
    pub fn counts(&self, current_of: &(impl CurrentDigest + ?Sized)) -> BTreeMap<String, StateCounts> {
        let mut currents = Currents::new(current_of);
        let mut out: BTreeMap<String, StateCounts> = BTreeMap::new();
        for shard in &*self.shards {
            let shard = shard.lock().unwrap_or_else(|p| p.into_inner());
            for peer in shard.peers.values() {
                for (service, entry) in &peer.services {
                    let current = currents.of(service, peer);
                    let state = self.state(peer, entry, &current);
                    match out.get_mut(&**service) {
                        Some(counts) => counts.add(state),
                        None => out.entry(service.to_string()).or_default().add(state),
                    }
                }
            }
        }
        out
    }

    /// How many rows of each service echo each digest (`""` for none yet), keyed by
    /// (service, digest): what a replica summary says of its digests.
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
    /// When it was last seen: now while one of its polls is held.
    fn seen_at(&self, now: u64) -> u64 {
        if self.held > 0 { now } else { self.last_seen }
    }

    /// Seen once, from a connection that never said which instance it is: a new agent, or a
    /// one-off poll, not yet a fleet member.
    fn is_one_off(&self, peer: &Peer) -> bool {
        self.polls <= 1 && peer.instance.is_none()
    }

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
mod tests;
