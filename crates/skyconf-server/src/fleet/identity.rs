//! Instance identity: what `ManagementService` calls say about the instance behind a connection
//! (its service and name, the properties it reports, the agent version in the call's metadata),
//! kept per peer in the fleet table; and the operators' view of it, [`Fleet::instances`].
//!
//! An agent reports its properties (`reportInstanceProperties`: hostname, IPs, language, OS,
//! custom ones; a key may repeat, as `ipv4` does) when it starts and again now and then, and
//! sends `keepAlive` in between. So a `keepAlive` refreshes the identity and keeps the properties
//! known, and a report replaces them.
//!
//! None of this touches the poll path ([`Fleet::observe`]). Memory is bounded: at most
//! [`MAX_PROPERTIES`] properties per instance, each key and value cut to 256 bytes (what is
//! dropped or cut is counted); at most [`super::FleetOptions::max_agents`] identities (more are
//! not kept, and counted); and [`Fleet::sweep`] forgets an identity not refreshed for
//! [`super::FleetOptions::expire_after`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use skyconf_core::targeting::InstanceRef;

use super::{
    AgentState, CurrentDigest, Currents, Fleet, InstanceIdentity, MAX_KEPT_TEXT_BYTES, MAX_TRACKED_NAME_BYTES, cut,
};

/// The most properties kept per instance; later ones in a report are dropped (and counted).
pub const MAX_PROPERTIES: usize = 64;

/// Properties as kept: key and value, each cut.
type Kept = Box<[(Box<str>, Box<str>)]>;

/// The instance identity of one peer.
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
    /// Its last poll (Unix milliseconds).
    pub last_seen_ms: u64,
    /// The targeting group whose settings it is served (`null`: the service's own). Shown for
    /// this replica's instances only.
    pub group: Option<String>,
    /// The rollout whose candidate it is served, if one of its waves reached it.
    pub rollout: Option<String>,
    /// Why it is served what it is, where its service's answers vary per instance.
    pub reason: Option<String>,
}

/// One connection that said which instance it is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct InstanceStatus {
    /// The service the instance belongs to.
    pub service: String,
    /// The instance name.
    pub instance: String,
    /// Its gRPC peer address.
    pub peer: String,
    /// Its reported properties, in the order sent (empty until it reports them).
    pub properties: Vec<Property>,
    /// How many properties of its last report were dropped (over 64) or shortened (over 256
    /// bytes).
    pub properties_cut: u32,
    /// The agent version its connection sent as `agent-version` metadata.
    #[schema(required = true)]
    pub agent_version: Option<String>,
    /// Its last `reportInstanceProperties` (Unix milliseconds; `null`: only `keepAlive` so far).
    #[schema(required = true)]
    pub reported_ms: Option<u64>,
    /// Its last call of any kind seen here (Unix milliseconds).
    pub last_seen_ms: u64,
    /// The services its connection polls for, by name.
    pub services: Vec<InstanceService>,
}

/// One (service, peer) pair polling from a connection that never said which instance it is.
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
    /// Its last poll (Unix milliseconds).
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

impl Fleet {
    /// Records what a `ManagementService` call on the connection from `peer` says about its
    /// instance (a call answered here, or one the gateway forwards to the OAP): a `keepAlive`
    /// refreshes the identity and keeps its properties, a `reportInstanceProperties` replaces
    /// them. A call naming another instance than the connection's last one starts afresh.
    pub fn observe_identity(&self, peer: SocketAddr, identity: &InstanceIdentity) {
        let InstanceIdentity { service, instance, properties, agent_version, reported_properties } = identity;
        if instance.is_empty() || service.len() > MAX_TRACKED_NAME_BYTES {
            return;
        }
        let name = cut(instance);
        // Copied and cut before the lock is taken.
        let report = reported_properties.then(|| self.keep_properties(properties));
        let now = self.now();
        let mut shard = self.lock(&peer);
        let known = shard.peers.get(&peer).and_then(|p| p.instance.as_ref());
        if known.is_none() {
            if self.identified.load(Ordering::Relaxed) >= self.options.max_agents {
                self.unkept_identities.fetch_add(1, Ordering::Relaxed);
                return;
            }
            self.identified.fetch_add(1, Ordering::Relaxed);
        }
        let slot = &mut shard.peers.entry(peer).or_default().instance;
        let kept = match slot {
            Some(known) if &*known.name == name && *known.service == **service => known,
            slot => slot.insert(Box::new(Instance::new(service, name, now))),
        };
        kept.seen = now;
        if let Some((properties, dropped)) = report {
            kept.properties = properties;
            kept.properties_cut = dropped;
            kept.reported = Some(now);
        }
        if let Some(version) = agent_version.as_deref().map(cut)
            && kept.agent_version.as_deref() != Some(version)
        {
            kept.agent_version = Some(Box::from(version));
        }
    }

    /// Runs `f` with what is known of the instance polling for `service` from `peer`: `None`
    /// when its connection never said which instance it is, or said it is one of another service.
    /// Holds one shard's lock while `f` runs: `f` must not call into the fleet.
    pub fn with_instance<R>(
        &self,
        peer: SocketAddr,
        service: &str,
        f: impl FnOnce(Option<&InstanceRef<'_>>) -> R,
    ) -> R {
        let shard = self.lock(&peer);
        let instance = shard.peers.get(&peer).and_then(|p| p.instance.as_deref()).filter(|i| *i.service == *service);
        f(instance.map(Instance::as_ref).as_ref())
    }

    /// Records the instance name an agent at `peer` gave in a `ManagementService` call, as a
    /// `keepAlive` says it (no properties).
    pub fn observe_instance(&self, service: &str, instance: &str, peer: SocketAddr) {
        let identity = InstanceIdentity {
            service: service.to_owned(),
            instance: instance.to_owned(),
            ..InstanceIdentity::default()
        };
        self.observe_identity(peer, &identity);
    }

    /// The properties of a report as kept: at most [`MAX_PROPERTIES`], each key and value cut;
    /// with how many were dropped or shortened (also added to [`Self::properties_cut`]).
    fn keep_properties(&self, properties: &[(String, String)]) -> (Kept, u32) {
        let mut shortened = 0usize;
        let kept = properties
            .iter()
            .take(MAX_PROPERTIES)
            .map(|(key, value)| {
                if key.len() > MAX_KEPT_TEXT_BYTES || value.len() > MAX_KEPT_TEXT_BYTES {
                    shortened += 1;
                }
                (Box::from(cut(key)), Box::from(cut(value)))
            })
            .collect();
        let dropped = properties.len().saturating_sub(MAX_PROPERTIES) + shortened;
        if dropped > 0 {
            self.properties_cut.fetch_add(dropped as u64, Ordering::Relaxed);
        }
        (kept, u32::try_from(dropped).unwrap_or(u32::MAX))
    }

    /// Connections with a known instance identity.
    pub fn identified(&self) -> usize {
        self.identified.load(Ordering::Relaxed)
    }

    /// `ManagementService` calls whose identity was not kept because
    /// [`super::FleetOptions::max_agents`] identities were already known.
    pub fn unkept_identities(&self) -> u64 {
        self.unkept_identities.load(Ordering::Relaxed)
    }

    /// Properties dropped (over [`MAX_PROPERTIES`] in a report) or shortened, since start.
    pub fn properties_cut(&self) -> u64 {
        self.properties_cut.load(Ordering::Relaxed)
    }

    /// (service, peer) pairs polling from a connection without an identity, where every agent is
    /// expected to have one ([`super::FleetOptions::expect_identity`]; else 0, without a look).
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

    /// Every identified instance with the services its connection polls for, and every pair
    /// polling from a connection without an identity; each judged with `current_of(service)`.
    pub fn instances(&self, current_of: &(impl CurrentDigest + ?Sized)) -> Instances {
        let mut currents = Currents::new(current_of);
        let mut out = Instances::default();
        for shard in &*self.shards {
            let shard = shard.lock().unwrap_or_else(|p| p.into_inner());
            for (addr, peer) in &shard.peers {
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
                            last_seen_ms: self.unix_ms(entry.seen_at(self.now())),
                            group: None,
                            rollout: None,
                            reason: None,
                        }
                    })
                    .collect();
                let Some(instance) = &peer.instance else {
                    out.anonymous.extend(services.into_iter().map(|s| AnonymousPoller {
                        peer: addr.to_string(),
                        service: s.service,
                        state: s.state,
                        digest: s.digest,
                        polls: s.polls,
                        last_seen_ms: s.last_seen_ms,
                    }));
                    continue;
                };
                services.sort_by(|a, b| a.service.cmp(&b.service));
                let now = self.now();
                let last_poll = peer.services.values().map(|e| e.seen_at(now)).max().unwrap_or(0);
                out.instances.push(InstanceStatus {
                    service: instance.service.to_string(),
                    instance: instance.name.to_string(),
                    peer: addr.to_string(),
                    properties: instance.properties(),
                    properties_cut: instance.properties_cut,
                    agent_version: instance.agent_version.as_deref().map(str::to_owned),
                    reported_ms: instance.reported.map(|at| self.unix_ms(at)),
                    last_seen_ms: self.unix_ms(instance.seen.max(last_poll)),
                    services,
                });
            }
        }
        out.instances.sort_by(|a, b| (&a.service, &a.instance, &a.peer).cmp(&(&b.service, &b.instance, &b.peer)));
        out.anonymous.sort_by(|a, b| (&a.service, &a.peer).cmp(&(&b.service, &b.peer)));
        out
    }
}
