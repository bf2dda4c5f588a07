//! Instance identity: what `ManagementService` calls say about the instance behind a connection
//! (its service and name, the properties it reports, the agent version in the call's metadata),
//! kept per connection in the fleet table; and the operators' view of it: the instances listing,
//! paged ([`Fleet::identified_keys`], [`Fleet::instance_rows`]), and the whole list the rollout
//! driver reads ([`Fleet::instances`]).
//!
//! An agent reports its properties (`reportInstanceProperties`: hostname, IPs, language, OS,
//! custom ones; a key may repeat, as `ipv4` does) when it starts and again now and then, and
//! sends `keepAlive` in between. So a `keepAlive` refreshes the identity and keeps the properties
//! known, and a report replaces them. A connection carries one identity at most: a call naming
//! another instance than the connection's last one starts afresh.
//!
//! An identity lives exactly as long as its connection (it goes with the connection's rows, see
//! [`super::link`]); one seen without a connection record is forgotten by [`Fleet::sweep`] once not
//! refreshed for [`super::FleetOptions::expire_after`]. None of this touches the poll path. Memory
//! is bounded and counted: names, keys and values cut to 256 bytes, at most [`MAX_PROPERTIES`]
//! properties and [`MAX_IDENTITY_BYTES`] of them per identity (what is dropped or cut is
//! counted), at most [`super::FleetOptions::max_agents`] identities (more are not kept, and
//! counted), and the bytes kept are summed ([`Fleet::identity_bytes`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use skyconf_core::targeting::InstanceRef;

use super::{
    AgentState, Caller, ConnKey, CurrentDigest, Currents, Fleet, InstanceIdentity, Link, MAX_KEPT_TEXT_BYTES,
    MAX_TRACKED_NAME_BYTES, cut,
};

/// The most properties kept per instance; later ones in a report are dropped (and counted).
pub const MAX_PROPERTIES: usize = 64;

/// The most bytes of properties (keys and values) kept per instance: 64 properties of 256 bytes.
/// Properties beyond it are dropped (and counted).
pub const MAX_IDENTITY_BYTES: usize = MAX_PROPERTIES * MAX_KEPT_TEXT_BYTES;

/// Properties as kept: key and value, each cut.
type Kept = Box<[(Box<str>, Box<str>)]>;

/// The instance identity of one connection.
#[derive(Debug, Clone)]
pub(super) struct Instance {
    pub(super) service: Arc<str>,
    pub(super) name: Arc<str>,
    /// The last `ManagementService` call.
    pub(super) seen: u64,
    /// The last `reportInstanceProperties` (`None`: only `keepAlive` so far).
    reported: Option<u64>,
    properties: Kept,
    /// How many properties of the last report were dropped or shortened.
    properties_cut: u32,
    pub(super) agent_version: Option<Box<str>>,
}

impl Instance {
    fn new(service: &str, name: &str, now: u64) -> Self {
        Self {
            service: Arc::from(service),
            name: Arc::from(name),
            seen: now,
            reported: None,
            properties: Box::default(),
            properties_cut: 0,
            agent_version: None,
        }
    }

    /// What targeting selectors judge it by.
    pub(super) fn as_ref(&self) -> InstanceRef<'_> {
        InstanceRef { name: &self.name, properties: &self.properties, agent_version: self.agent_version.as_deref() }
    }

    /// The properties, as the API shows them.
    pub(super) fn properties(&self) -> Vec<Property> {
        self.properties.iter().map(|(key, value)| Property { key: key.to_string(), value: value.to_string() }).collect()
    }

    /// The bytes of text it holds.
    pub(super) fn bytes(&self) -> usize {
        self.service.len()
            + self.name.len()
            + self.properties.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>()
            + self.agent_version.as_ref().map_or(0, |v| v.len())
    }
}

/// One reported property of an instance.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct Property {
    /// Its key (`hostname`, `ipv4`, `language`, `OS Name`, `Process No.`, custom ones...).
    pub key: String,
    /// Its value.
    pub value: String,
}

/// One service an identified instance polls for.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct InstanceService {
    /// The service it polls for.
    pub service: String,
    /// Where it stands with the digest served for that service.
    pub state: AgentState,
    /// The digest it echoed last ("" for none).
    pub digest: String,
    /// Polls seen.
    pub polls: u64,
    /// Its last poll, or now while one of its polls is held (Unix milliseconds).
    pub last_seen_ms: u64,
    /// The targeting group whose settings it is served (`null`: the service's own). Shown for
    /// this replica's instances only.
    pub group: Option<String>,
    /// The rollout whose candidate it is served, if one of its waves reached it.
    pub rollout: Option<String>,
    /// Why it is served what it is, where its service's answers vary per instance.
    pub reason: Option<String>,
}

/// One live connection that said which instance it is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct InstanceStatus {
    /// The service the instance belongs to.
    pub service: String,
    /// The instance name.
    pub instance: String,
    /// Its gRPC peer address.
    pub peer: String,
    /// Another live connection names the same (service, instance): two processes claim one
    /// name (both are listed).
    pub duplicate_name: bool,
    /// Its reported properties, in the order sent (empty until it reports them).
    pub properties: Vec<Property>,
    /// How many properties of its last report were dropped (over 64, or over 16 KiB in all) or
    /// shortened (over 256 bytes).
    pub properties_cut: u32,
    /// The agent version its connection sent as `agent-version` metadata.
    #[schema(required = true)]
    pub agent_version: Option<String>,
    /// Its last `reportInstanceProperties` (Unix milliseconds; `null`: only `keepAlive` so far).
    #[schema(required = true)]
    pub reported_ms: Option<u64>,
    /// Its last call of any kind seen here, or now while one of its polls is held (Unix
    /// milliseconds).
    pub last_seen_ms: u64,
    /// The services its connection polls for, by name.
    pub services: Vec<InstanceService>,
}

/// One (service, connection) row polling from a connection that never said which instance it is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct AnonymousPoller {
    /// Its gRPC peer address.
    pub peer: String,
    /// The service it polls for.
    pub service: String,
    /// `anonymous` where identities are expected (gateway mode); else its usual state.
    pub state: AgentState,
    /// The digest it echoed last ("" for none).
    pub digest: String,
    /// Polls seen.
    pub polls: u64,
    /// Its last poll, or now while one of its polls is held (Unix milliseconds).
    pub last_seen_ms: u64,
}

/// Every identified instance and every anonymous poller, as [`Fleet::instances`] lists them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Instances {
    /// By service, instance name, then peer.
    pub instances: Vec<InstanceStatus>,
    /// By service, then peer.
    pub anonymous: Vec<AnonymousPoller>,
}

/// Where an identified connection sorts in the listing: (service, instance, peer), then the
/// connection. Cheap: shared names, no row built.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct InstanceKey {
    /// The service the instance belongs to.
    pub service: Arc<str>,
    /// The instance name.
    pub instance: Arc<str>,
    /// Its connection (peer address, then id).
    pub conn: ConnKey,
}

/// Where an anonymous (service, connection) row sorts: (service, peer), then the connection.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct AnonymousKey {
    /// The service it polls for.
    pub service: Arc<str>,
    /// Its connection.
    pub conn: ConnKey,
}

impl Fleet {
    /// Records what a `ManagementService` call of `caller` says about its instance (a call
    /// answered here, or one the gateway forwards to the OAP): a `keepAlive` refreshes the
    /// identity and keeps its properties, a `reportInstanceProperties` replaces them. A call
    /// naming another instance than the connection's last one starts afresh. Nothing is recorded
    /// for a closed connection.
    pub fn identify(self: &Arc<Self>, caller: &Caller, identity: &InstanceIdentity) {
        let link = caller.link();
        if let Some(link) = link {
            link.attach(self);
        }
        self.identify_key(caller.key(), link, identity);
    }

    /// [`Self::identify`] for a call seen without a connection record, from `peer`: the identity
    /// expires by [`Self::sweep`].
    pub fn observe_identity(&self, peer: SocketAddr, identity: &InstanceIdentity) {
        self.identify_key(ConnKey::from(peer), None, identity);
    }

    fn identify_key(&self, key: ConnKey, link: Option<&Link>, identity: &InstanceIdentity) {
        let InstanceIdentity { service, instance, properties, agent_version, reported_properties } = identity;
        if instance.is_empty() || service.len() > MAX_TRACKED_NAME_BYTES {
            return;
        }
        let (service, name) = (cut(service), cut(instance));
        // Copied and cut before the lock is taken.
        let report = reported_properties.then(|| self.keep_properties(properties));
        let version = agent_version.as_deref().map(cut);
        let now = self.now();
        let changed = {
            let mut shard = self.lock(&key);
            if link.is_some_and(|l| l.closed_flag().load(Ordering::Acquire)) {
                return;
            }
            let known = shard.peers.get(&key).and_then(|p| p.instance.as_ref());
            if known.is_none() {
                if self.identified.load(Ordering::Relaxed) >= self.options.max_agents {
                    self.unkept_identities.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                self.identified.fetch_add(1, Ordering::Relaxed);
            }
            let slot = &mut shard.peers.entry(key).or_default().instance;
            let before = slot.as_ref().map_or(0, |i| i.bytes());
            let same = slot.as_ref().is_some_and(|known| &*known.name == name && &*known.service == service);
            let mut changed = !same;
            let kept = Arc::make_mut(match slot {
                Some(known) if same => known,
                slot => slot.insert(Arc::new(Instance::new(service, name, now))),
            });
            kept.seen = now;
            if let Some((properties, dropped)) = report {
                changed |= kept.properties != properties;
                kept.properties = properties;
                kept.properties_cut = dropped;
                kept.reported = Some(now);
            }
            if let Some(version) = version
                && kept.agent_version.as_deref() != Some(version)
            {
                kept.agent_version = Some(Box::from(version));
                changed = true;
            }
            let after = kept.bytes();
            if after >= before {
                self.identity_bytes.fetch_add(after - before, Ordering::Relaxed);
            } else {
                self.identity_bytes.fetch_sub(before - after, Ordering::Relaxed);
            }
            changed
        };
        if changed && let Some(link) = link {
            link.identity_changed();
        }
    }

    /// Counts an identity as gone.
    pub(super) fn forget_identity(&self, instance: &Instance) {
        self.identified.fetch_sub(1, Ordering::Relaxed);
        self.identity_bytes.fetch_sub(instance.bytes(), Ordering::Relaxed);
    }

    /// Runs `f` with what is known of the instance polling for `service` on `caller`'s connection:
    /// `None` when its connection never said which instance it is, or said it is one of another
    /// service. `f` runs outside the fleet's locks.
    pub fn with_instance<R>(
        &self,
        caller: impl Into<ConnKey>,
        service: &str,
        f: impl FnOnce(Option<&InstanceRef<'_>>) -> R,
    ) -> R {
        let key = caller.into();
        let instance = {
            let shard = self.lock(&key);
            shard.peers.get(&key).and_then(|p| p.instance.clone()).filter(|i| *i.service == *service)
        };
        f(instance.as_deref().map(Instance::as_ref).as_ref())
    }

    /// Records the instance name an agent at `peer` gave in a `ManagementService` call, as a
    /// `keepAlive` says it (no properties), seen without a connection record.
    pub fn observe_instance(&self, service: &str, instance: &str, peer: SocketAddr) {
        let identity = InstanceIdentity {
            service: service.to_owned(),
            instance: instance.to_owned(),
            ..InstanceIdentity::default()
        };
        self.observe_identity(peer, &identity);
    }

    /// The properties of a report as kept: at most [`MAX_PROPERTIES`] and [`MAX_IDENTITY_BYTES`],
    /// each key and value cut; with how many were dropped or shortened (also added to
    /// [`Self::properties_cut`]).
    fn keep_properties(&self, properties: &[(String, String)]) -> (Kept, u32) {
        let (mut shortened, mut bytes) = (0usize, 0usize);
        let kept: Kept = properties
            .iter()
            .take(MAX_PROPERTIES)
            .map(|(key, value)| {
                if key.len() > MAX_KEPT_TEXT_BYTES || value.len() > MAX_KEPT_TEXT_BYTES {
                    shortened += 1;
                }
                (Box::from(cut(key)), Box::from(cut(value)))
            })
            .take_while(|(key, value): &(Box<str>, Box<str>)| {
                bytes += key.len() + value.len();
                bytes <= MAX_IDENTITY_BYTES
            })
            .collect();
        let dropped = properties.len() - kept.len() + shortened;
        if dropped > 0 {
            self.properties_cut.fetch_add(dropped as u64, Ordering::Relaxed);
        }
        (kept, u32::try_from(dropped).unwrap_or(u32::MAX))
    }

    /// Connections with a known instance identity.
    pub fn identified(&self) -> usize {
        self.identified.load(Ordering::Relaxed)
    }

    /// The bytes of text the kept identities hold.
    pub fn identity_bytes(&self) -> usize {
        self.identity_bytes.load(Ordering::Relaxed)
    }

    /// `ManagementService` calls whose identity was not kept because
    /// [`super::FleetOptions::max_agents`] identities were already known.
    pub fn unkept_identities(&self) -> u64 {
        self.unkept_identities.load(Ordering::Relaxed)
    }

    /// Properties dropped (over [`MAX_PROPERTIES`] or [`MAX_IDENTITY_BYTES`] in a report) or
    /// shortened, since start.
    pub fn properties_cut(&self) -> u64 {
        self.properties_cut.load(Ordering::Relaxed)
    }

    /// (service, connection) rows polling from a connection without an identity, where every
    /// agent is expected to have one ([`super::FleetOptions::expect_identity`]; else 0, without a
    /// look).
    pub fn anonymous_pollers(&self) -> usize {
        if !self.options.expect_identity {
            return 0;
        }
        let mut anonymous = 0;
        for shard in &*self.shards {
            let shard = shard.lock().unwrap_or_else(|p| p.into_inner());
            anonymous += shard.peers.values().filter(|p| p.instance.is_none()).map(|p| p.services.len()).sum::<usize>();
        }
        anonymous
    }

    /// The key of every identified connection, unsorted: what a page of the listing is chosen
    /// from without building a row.
    pub fn identified_keys(&self) -> Vec<InstanceKey> {
        let mut keys = Vec::new();
        for shard in &*self.shards {
            let shard = shard.lock().unwrap_or_else(|p| p.into_inner());
            keys.extend(shard.peers.iter().filter_map(|(conn, peer)| {
                let instance = peer.instance.as_ref()?;
                Some(InstanceKey {
                    service: Arc::clone(&instance.service),
                    instance: Arc::clone(&instance.name),
                    conn: *conn,
                })
            }));
        }
        keys
    }

    /// The key of every (service, connection) row of a connection without an identity, unsorted.
    pub fn anonymous_keys(&self) -> Vec<AnonymousKey> {
        let mut keys = Vec::new();
        for shard in &*self.shards {
            let shard = shard.lock().unwrap_or_else(|p| p.into_inner());
            for (conn, peer) in shard.peers.iter().filter(|(_, p)| p.instance.is_none()) {
                keys.extend(
                    peer.services.keys().map(|service| AnonymousKey { service: Arc::clone(service), conn: *conn }),
                );
            }
        }
        keys
    }

    /// The rows of the identified connections `keys` (in that order), each service judged with
    /// `current_of`; a connection gone since its key was read, or naming another instance now, is
    /// left out. `duplicate_name` is left false: the caller knows the whole listing.
    pub fn instance_rows(
        &self,
        keys: &[InstanceKey],
        current_of: &(impl CurrentDigest + ?Sized),
    ) -> Vec<InstanceStatus> {
        let mut currents = Currents::new(current_of);
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            let shard = self.lock(&key.conn);
            let Some(peer) = shard.peers.get(&key.conn) else { continue };
            let Some(instance) = peer.instance.as_ref().filter(|i| i.name == key.instance && i.service == key.service)
            else {
                continue;
            };
            let now = self.now();
            let mut services: Vec<InstanceService> = peer
                .services
                .iter()
                .map(|(service, entry)| {
                    let current = currents.of(service, peer);
                    InstanceService {
                        service: service.to_string(),
                        state: self.state(peer, entry, &current),
                        digest: entry.echoed.as_str().to_owned(),
                        polls: entry.polls,
                        last_seen_ms: self.unix_ms(entry.seen_at(now)),
                        group: None,
                        rollout: None,
                        reason: None,
                    }
                })
                .collect();
            services.sort_by(|a, b| a.service.cmp(&b.service));
            let last_poll = peer.services.values().map(|e| e.seen_at(now)).max().unwrap_or(0);
            out.push(InstanceStatus {
                service: instance.service.to_string(),
                instance: instance.name.to_string(),
                peer: key.conn.peer.to_string(),
                duplicate_name: false,
                properties: instance.properties(),
                properties_cut: instance.properties_cut,
                agent_version: instance.agent_version.as_deref().map(str::to_owned),
                reported_ms: instance.reported.map(|at| self.unix_ms(at)),
                last_seen_ms: self.unix_ms(instance.seen.max(last_poll)),
                services,
            });
        }
        out
    }

    /// The rows `keys` of connections without an identity (in that order), judged with
    /// `current_of`; a row gone since its key was read is left out.
    pub fn anonymous_rows(
        &self,
        keys: &[AnonymousKey],
        current_of: &(impl CurrentDigest + ?Sized),
    ) -> Vec<AnonymousPoller> {
        let mut currents = Currents::new(current_of);
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            let shard = self.lock(&key.conn);
            let Some(peer) = shard.peers.get(&key.conn).filter(|p| p.instance.is_none()) else { continue };
            let Some(entry) = peer.services.get(&key.service) else { continue };
            let current = currents.of(&key.service, peer);
            out.push(AnonymousPoller {
                peer: key.conn.peer.to_string(),
                service: key.service.to_string(),
                state: self.state(peer, entry, &current),
                digest: entry.echoed.as_str().to_owned(),
                polls: entry.polls,
                last_seen_ms: self.unix_ms(entry.seen_at(self.now())),
            });
        }
        out
    }

    /// Every identified instance with the services its connection polls for, and every row
    /// polling from a connection without an identity; each judged with `current_of(service)`.
    /// Unpaged: for the rollout driver, which judges every instance of the services it changes.
    pub fn instances(&self, current_of: &(impl CurrentDigest + ?Sized)) -> Instances {
        let mut keys = self.identified_keys();
        keys.sort_unstable();
        let mut instances = self.instance_rows(&keys, current_of);
        mark_duplicates(&mut instances);
        let mut anonymous = self.anonymous_keys();
        anonymous.sort_unstable_by(|a, b| (&a.service, a.conn).cmp(&(&b.service, b.conn)));
        let anonymous = self.anonymous_rows(&anonymous, current_of);
        Instances { instances, anonymous }
    }
}

/// Flags the rows of `sorted` (by service and instance) that share their (service, instance)
/// with another row.
pub(crate) fn mark_duplicates(sorted: &mut [InstanceStatus]) {
    let same = |a: &InstanceStatus, b: &InstanceStatus| a.service == b.service && a.instance == b.instance;
    for i in 1..sorted.len() {
        if same(&sorted[i - 1], &sorted[i]) {
            sorted[i - 1].duplicate_name = true;
            sorted[i].duplicate_name = true;
        }
    }
}
