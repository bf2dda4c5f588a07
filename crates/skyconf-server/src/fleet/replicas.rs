//! The fleet across replicas. Each replica tracks the agents that poll *it* (see [`super`]); to
//! show every agent on every replica's admin API and page, each replica publishes a compact
//! summary of its fleet table as a session record in the shared store (see
//! [`skyconf_sources::shared`]), and reads the others' summaries back.
//!
//! - **Published**: every [`ReplicaOptions::publish_every`] (10 s), the record `fleet/<replica
//!   id>` holds a [`Summary`]: the replica id, its admin address, when it was computed, and per
//!   service the agent counts by state and by echoed digest (a 16-hex-digit prefix), plus the first
//!   [`MAX_PUBLISHED_AGENTS`] agent rows in (service, peer) order, without their properties, so a
//!   small fleet shows every agent everywhere. It is not a row per agent: a summary's size grows
//!   with the services, not the agents (about 85 bytes per service). A summary that changed only
//!   in times and poll counts is not written again for a while ([`crate::summaries`]), so
//!   `updated_ms` says how fresh it is. At shutdown the record is deleted; a replica that dies
//!   leaves it to the store's session expiry.
//! - **Read**: on the same tick, the replica lists the `fleet` records and keeps the others'
//!   summaries in memory; the admin API merges them with the local, live table. A peer's data is as
//!   of its last publish (`as_of_ms`), so up to one period (plus one of ours) old.
//!
//! The alternative, the admin API fanning out to every peer's admin API on each request, would
//! show live data but needs each replica to know a reachable address and token of the others, and
//! makes every admin request as slow as the slowest peer. The README compares the costs.
//!
//! The file store has no shared records: a replica serving a file is alone, and shows only its own
//! agents.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use skyconf_sources::SharedRecords;
use tokio_util::sync::CancellationToken;

use super::{AgentStatus, Fleet, StateCounts};
use crate::served::ServedTable;
use crate::summaries::{Board, MAX_SUMMARY_BYTES, Published};
use crate::unix_time::now_ms;

/// The record kind the summaries are kept under.
pub const FLEET_KIND: &str = "fleet";

/// How many agent rows a summary carries at most.
pub const MAX_PUBLISHED_AGENTS: usize = 1000;

/// How many hex digits of a digest a summary keeps.
pub const DIGEST_PREFIX: usize = 16;

/// Settings of the fleet summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaOptions {
    /// This replica's id in the shared store and on the page; by default the host name and a
    /// random suffix, new at each start. Letters, digits, `-`, `_` and `.` only.
    pub name: Option<String>,
    /// How often the summary is computed (and written, when it changed) and the others' are read.
    pub publish_every: Duration,
    /// The admin address other replicas' operators can reach this one at; by default the bound
    /// admin address, unless it is a wildcard.
    pub advertise_admin: Option<String>,
}

impl Default for ReplicaOptions {
    fn default() -> Self {
        Self { name: None, publish_every: Duration::from_secs(10), advertise_admin: None }
    }
}

/// One service in a summary; compact, as there is one per service polled:
/// `{"c": [agents, applied, behind, stuck, new, anonymous], "d": {"<digest prefix>": agents}}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ServiceSummary {
    /// Agents per state.
    #[serde(rename = "c", with = "counts_array")]
    pub counts: StateCounts,
    /// Agents per echoed digest: its first [`DIGEST_PREFIX`] hex digits (`""`: none echoed yet).
    #[serde(rename = "d")]
    pub digests: BTreeMap<String, usize>,
}

/// [`StateCounts`] as an array of six numbers, in field order.
mod counts_array {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::fleet::StateCounts;

    pub(super) fn serialize<S: Serializer>(c: &StateCounts, s: S) -> Result<S::Ok, S::Error> {
        [c.agents, c.applied, c.behind, c.stuck, c.new, c.anonymous].serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<StateCounts, D::Error> {
        let [agents, applied, behind, stuck, new, anonymous] = <[usize; 6]>::deserialize(d)?;
        Ok(StateCounts { agents, applied, behind, stuck, new, anonymous })
    }
}

/// What one replica publishes of its fleet table.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Summary {
    /// The replica.
    pub replica: String,
    /// Where its admin API is, when known.
    pub admin_addr: Option<String>,
    /// When the summary was computed (Unix milliseconds).
    pub updated_ms: u64,
    /// Its fleet members (applied, behind or stuck agents), all services.
    pub agents: usize,
    /// Every service its agents poll, by name.
    pub services: BTreeMap<String, ServiceSummary>,
    /// The first agent rows in (service, peer) order, without properties, digests cut to
    /// [`DIGEST_PREFIX`] hex digits.
    pub rows: Vec<AgentStatus>,
    /// How many (service, peer) pairs it tracks in all.
    pub rows_total: usize,
    /// Whether services were left out to keep it under [`MAX_SUMMARY_BYTES`].
    pub truncated: bool,
}

fn prefix(digest: &str) -> String {
    digest.chars().take(DIGEST_PREFIX).collect()
}

impl Summary {
    /// The summary of `fleet`, each agent judged against what `served` serves now.
    pub fn of(fleet: &Fleet, served: &ServedTable, replica: &str, admin_addr: Option<&str>) -> Self {
        let current = served.serving();
        let mut services: BTreeMap<String, ServiceSummary> = fleet
            .counts(&current)
            .into_iter()
            .map(|(name, counts)| (name, ServiceSummary { counts, digests: BTreeMap::new() }))
            .collect();
        for ((service, digest), agents) in fleet.per_digest() {
            if let Some(summary) = services.get_mut(&service) {
                *summary.digests.entry(prefix(&digest)).or_default() += agents;
            }
        }
        let (mut rows, rows_total) = fleet.agents(MAX_PUBLISHED_AGENTS, &current);
        for row in &mut rows {
            row.properties.clear();
            row.digest = prefix(&row.digest);
        }
        Self {
            replica: replica.to_owned(),
            admin_addr: admin_addr.map(str::to_owned),
            updated_ms: now_ms(),
            agents: services.values().map(|s| s.counts.agents).sum(),
            services,
            rows,
            rows_total,
            truncated: false,
        }
    }

    /// Whether `other` says the same of the fleet, times and poll counts aside.
    pub fn same_fleet(&self, other: &Self) -> bool {
        let stable = |rows: &[AgentStatus]| -> Vec<(String, String, Option<String>, String, super::AgentState)> {
            rows.iter()
                .map(|r| (r.service.clone(), r.peer.clone(), r.instance.clone(), r.digest.clone(), r.state))
                .collect()
        };
        self.admin_addr == other.admin_addr
            && self.services == other.services
            && self.rows_total == other.rows_total
            && stable(&self.rows) == stable(&other.rows)
    }

    /// The JSON written, at most `limit` bytes: agent rows are dropped first, then the services
    /// with the fewest agents, until it fits.
    pub fn encode(&mut self, limit: usize) -> Vec<u8> {
        loop {
            let bytes = serde_json::to_vec(&*self).unwrap_or_default();
            if bytes.len() <= limit {
                return bytes;
            }
            if !self.rows.is_empty() {
                let keep = self.rows.len() / 2;
                self.rows.truncate(keep);
                continue;
            }
            if self.services.is_empty() {
                return bytes;
            }
            let mut by_size: Vec<(usize, String)> =
                self.services.iter().map(|(name, s)| (s.counts.agents + s.counts.new, name.clone())).collect();
            by_size.sort();
            let drop = by_size.len().div_ceil(4);
            for (_, name) in by_size.into_iter().take(drop) {
                self.services.remove(&name);
            }
            self.truncated = true;
        }
    }
}

impl Published for Summary {
    const KIND: &'static str = FLEET_KIND;
    const WHAT: &'static str = "fleet summary";

    fn replica(&self) -> &str {
        &self.replica
    }

    fn unchanged_from(&self, other: &Self) -> bool {
        self.same_fleet(other)
    }

    fn to_record(&mut self) -> Vec<u8> {
        self.encode(MAX_SUMMARY_BYTES)
    }
}

/// This replica's identity and the others' summaries.
#[derive(Debug)]
pub struct Replicas {
    id: String,
    admin_addr: Option<String>,
    records: Option<Arc<dyn SharedRecords>>,
    options: ReplicaOptions,
    peers: ArcSwap<Vec<Summary>>,
}

impl Replicas {
    /// This replica, publishing through `records` (`None`: a single-replica store) with admin
    /// address `admin_addr`.
    pub fn new(options: ReplicaOptions, records: Option<Arc<dyn SharedRecords>>, admin_addr: SocketAddr) -> Self {
        let id = options.name.clone().unwrap_or_else(default_id);
        let admin_addr = options
            .advertise_admin
            .clone()
            .or_else(|| (!admin_addr.ip().is_unspecified()).then(|| admin_addr.to_string()));
        Self { id, admin_addr, records, options, peers: ArcSwap::from_pointee(Vec::new()) }
    }

    /// This replica's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Its admin address, when known.
    pub fn admin_addr(&self) -> Option<&str> {
        self.admin_addr.as_deref()
    }

    /// Whether the store is shared (it keeps records), so other replicas can be seen.
    pub fn shared(&self) -> bool {
        self.records.is_some()
    }

    /// The other live replicas' summaries, by id, as last read.
    pub fn peers(&self) -> Arc<Vec<Summary>> {
        self.peers.load_full()
    }

    /// Publishes this replica's summary and reads the others' until `stop`, then deletes its own.
    pub async fn run(self: Arc<Self>, fleet: Arc<Fleet>, served: Arc<ServedTable>, stop: CancellationToken) {
        let Some(records) = self.records.clone() else { return };
        let mut tick = tokio::time::interval(self.options.publish_every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tracing::info!(replica = %self.id, store = %records.describe(), every = ?self.options.publish_every, "Sharing this replica's fleet summary through the store.");
        let mut board = Board::new(&self.id, records, self.options.publish_every);
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = tick.tick() => {}
            }
            // While a rollout is served its driver, on any replica, reads when each agent was last seen:
            // the summary is written every period then.
            let rollout = served.overlay().is_some();
            board.publish(Summary::of(&fleet, &served, &self.id, self.admin_addr.as_deref()), rollout).await;
            if let Some(others) = board.others().await {
                self.peers.store(Arc::new(others));
            }
        }
        board.delete().await;
    }

    /// The other replicas' counts for each service, summed.
    pub fn peer_counts(&self) -> BTreeMap<String, StateCounts> {
        let mut counts: BTreeMap<String, StateCounts> = BTreeMap::new();
        for peer in self.peers().iter() {
            for (name, service) in &peer.services {
                counts.entry(name.clone()).or_default().merge(&service.counts);
            }
        }
        counts
    }
}

/// The host name (from `HOSTNAME` or `/etc/hostname`) and 8 random hex digits, in the characters
/// a record name allows.
fn default_id() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "skyconf".to_owned());
    let host: String = host
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '-' })
        .take(64)
        .collect();
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}-{}", &suffix[..8])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::AgentState;

    fn service(agents: usize, digests: usize) -> ServiceSummary {
        let counts = StateCounts { agents, applied: agents, ..StateCounts::default() };
        let digests = (0..digests).map(|d| (format!("{d:016x}"), agents / digests.max(1))).collect();
        ServiceSummary { counts, digests }
    }

    fn row(n: usize) -> AgentStatus {
        AgentStatus {
            service: format!("mall-service-{:04}", n % 2000),
            peer: format!("10.0.{}.{}:4{:04}", n / 256 % 256, n % 256, n % 10000),
            instance: Some(format!("instance-{n:06}@10.0.{}.{}", n / 256 % 256, n % 256)),
            properties: Vec::new(),
            agent_version: Some("9.4.0".to_owned()),
            first_seen_ms: 1_760_000_000_000,
            last_seen_ms: 1_760_000_020_000,
            polls: 1234,
            digest: "0123456789abcdef".to_owned(),
            state: AgentState::Applied,
            polls_behind: 0,
        }
    }

    /// The summary of a replica holding a third of 100,000 agents of 2,000 services.
    fn large() -> Summary {
        Summary {
            replica: "skyconf-7d9f8c-abcdef12".to_owned(),
            admin_addr: Some("10.0.0.1:12800".to_owned()),
            updated_ms: 1_760_000_000_000,
            agents: 33_334,
            services: (0..2000).map(|n| (format!("mall-service-{n:04}"), service(17, 2))).collect(),
            rows: (0..MAX_PUBLISHED_AGENTS).map(row).collect(),
            rows_total: 33_334,
            truncated: false,
        }
    }

    #[test]
    fn a_large_fleets_summary_grows_with_services_not_agents() {
        let mut summary = large();
        let bytes = summary.encode(MAX_SUMMARY_BYTES);
        // The figures the README quotes: about 170 KB of services and 270 KB of rows.
        let services = serde_json::to_vec(&summary.services).unwrap().len();
        let rows = serde_json::to_vec(&summary.rows).unwrap().len();
        println!("summary {} bytes: services {services}, rows {rows}", bytes.len());
        assert!(bytes.len() < MAX_SUMMARY_BYTES, "{}", bytes.len());
        assert!(!summary.truncated && summary.rows.len() == MAX_PUBLISHED_AGENTS);
        assert!(services / 2000 < 100, "{} bytes per service", services / 2000);
        assert!(
            serde_json::to_string(&summary.services["mall-service-0001"])
                .unwrap()
                .starts_with(r#"{"c":[17,17,0,0,0,0],"d":{"#)
        );
        let back: Summary = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(back, summary);
    }

    #[test]
    fn an_oversized_summary_drops_rows_then_the_smallest_services() {
        let mut summary = large();
        let bytes = summary.encode(300 * 1024);
        assert!(bytes.len() <= 300 * 1024);
        assert!(summary.rows.len() < MAX_PUBLISHED_AGENTS);
        assert!(!summary.truncated, "rows went first");
        let mut summary = large();
        summary.services.insert("big".to_owned(), service(5000, 1));
        let bytes = summary.encode(50 * 1024);
        assert!(bytes.len() <= 50 * 1024 && summary.rows.is_empty() && summary.truncated);
        assert!(summary.services.contains_key("big"), "the largest services stay");
    }

    #[test]
    fn times_and_poll_counts_alone_are_no_change() {
        let before = large();
        let mut after = large();
        after.updated_ms += 10_000;
        after.rows[0].last_seen_ms += 10_000;
        after.rows[0].polls += 1;
        assert!(before.same_fleet(&after));
        after.rows[0].state = AgentState::Stuck;
        assert!(!before.same_fleet(&after));
        let mut moved = large();
        moved.services.get_mut("mall-service-0001").unwrap().counts.behind += 1;
        assert!(!before.same_fleet(&moved));
    }

    #[test]
    fn ids_are_record_names() {
        let id = default_id();
        assert!(skyconf_sources::shared::check_name(FLEET_KIND, &id).is_ok(), "{id}");
        assert_ne!(default_id(), id, "random at each start");
    }
}
