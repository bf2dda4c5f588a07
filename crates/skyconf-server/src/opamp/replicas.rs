//! OpAMP agents across replicas. An OpAMP agent talks to one replica (a WebSocket stays on it;
//! a plain HTTP client's load balancer may move it between polls); to list every agent on every
//! replica's admin API and page, each replica that serves OpAMP publishes its live agents as a
//! session record `opamp/<replica id>` in the shared store, and every replica reads the others'
//! back — as [`crate::fleet::replicas`] does for SkyWalking agents, on the same period.
//!
//! - **Published**: every [`OpampReplicas::new`]'s period (the fleet summary's, 10 s by default),
//!   an [`OpampSummary`]: the replica, when it was computed, and its first
//!   [`MAX_PUBLISHED_AGENTS`] agent rows by uid, as `GET /api/v1/opamp/agents` lists them (no
//!   more than [`MAX_SUMMARY_BYTES`]: rows are dropped to fit). A summary that changed only in
//!   its report times is not written again for a while ([`crate::summaries`]), except while a
//!   rollout of `opamp:` groups is served: the driver, on any replica, judges these rows
//!   ([`super::rollout`]: the instance key, the `RemoteConfigStatus`, when each was last seen),
//!   so they are written every period then. At shutdown the record is deleted; a replica that
//!   dies leaves it to the store's session expiry.
//! - **Read**: on the same tick, from every replica (one without an OpAMP port too, so its page
//!   lists the others' agents). A peer's rows are as of its last publish (`as_of_ms`).
//!
//! The file store has no shared records: a replica serving a file is alone.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};
use skyconf_sources::SharedRecords;
use tokio_util::sync::CancellationToken;

use super::unmatched::Warnings;
use super::{OpampAgentRow, OpampFleet};
use crate::ServedTable;
use crate::summaries::{Board, MAX_SUMMARY_BYTES, Published};
use crate::unix_time::now_ms;

/// The record kind the summaries are kept under.
pub(crate) const OPAMP_KIND: &str = "opamp";

/// How many agent rows a summary carries at most.
pub(crate) const MAX_PUBLISHED_AGENTS: usize = 1000;

/// What one replica publishes of its OpAMP agents.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OpampSummary {
    /// The replica.
    pub replica: String,
    /// When it was computed (Unix milliseconds).
    pub updated_ms: u64,
    /// Its first agent rows by uid.
    pub agents: Vec<OpampAgentRow>,
    /// How many live agents it has in all.
    pub total: usize,
}

impl OpampSummary {
    fn of(fleet: &OpampFleet, replica: &str) -> Self {
        let mut agents = fleet.agents();
        let total = agents.len();
        agents.truncate(MAX_PUBLISHED_AGENTS);
        Self { replica: replica.to_owned(), updated_ms: now_ms(), agents, total }
    }

    /// Whether `other` says the same, report times aside.
    fn same(&self, other: &Self) -> bool {
        let stable = |s: &Self| {
            let mut rows = serde_json::to_value(&s.agents).unwrap_or_default();
            for row in rows.as_array_mut().into_iter().flatten() {
                if let Some(row) = row.as_object_mut() {
                    row.remove("last_report_ms");
                    row.remove("last_seen_ms");
                }
            }
            rows
        };
        self.total == other.total && stable(self) == stable(other)
    }

    /// The JSON written, at most `limit` bytes: rows are halved until it fits.
    fn encode(&mut self, limit: usize) -> Vec<u8> {
        loop {
            let bytes = serde_json::to_vec(&*self).unwrap_or_default();
            if bytes.len() <= limit || self.agents.is_empty() {
                return bytes;
            }
            let keep = self.agents.len() / 2;
            self.agents.truncate(keep);
        }
    }
}

impl Published for OpampSummary {
    const KIND: &'static str = OPAMP_KIND;
    const WHAT: &'static str = "OpAMP summary";

    fn replica(&self) -> &str {
        &self.replica
    }

    fn unchanged_from(&self, other: &Self) -> bool {
        self.same(other)
    }

    fn to_record(&mut self) -> Vec<u8> {
        self.encode(MAX_SUMMARY_BYTES)
    }
}

/// This replica's OpAMP summary and the others'.
#[derive(Debug)]
pub struct OpampReplicas {
    id: String,
    records: Option<Arc<dyn SharedRecords>>,
    every: Duration,
    peers: ArcSwap<Vec<OpampSummary>>,
}

impl OpampReplicas {
    /// Replica `id`, publishing through `records` (`None`: a single-replica store) every `every`.
    pub fn new(id: &str, records: Option<Arc<dyn SharedRecords>>, every: Duration) -> Self {
        Self { id: id.to_owned(), records, every, peers: ArcSwap::from_pointee(Vec::new()) }
    }

    /// This replica's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The other live replicas' summaries, as last read.
    pub fn peers(&self) -> Arc<Vec<OpampSummary>> {
        self.peers.load_full()
    }

    /// Publishes `fleet`'s agents (when this replica serves OpAMP) and reads the others' until
    /// `stop`, then deletes its own record. A replica that serves OpAMP also warns about the
    /// groups of `served`'s `opamp:` section no agent is in ([`super::unmatched`]), alone too.
    pub async fn run(
        self: Arc<Self>,
        fleet: Option<Arc<OpampFleet>>,
        served: Arc<ServedTable>,
        stop: CancellationToken,
    ) {
        let mut tick = tokio::time::interval(self.every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut warnings = Warnings::default();
        let Some(records) = self.records.clone() else {
            let Some(fleet) = fleet else { return };
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    _ = tick.tick() => self.warn_unmatched(&mut warnings, &fleet, &served),
                }
            }
        };
        let mut board = Board::new(&self.id, records, self.every);
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = tick.tick() => {}
            }
            if let Some(fleet) = &fleet {
                // While a rollout of `opamp:` groups is served, its driver judges these rows (when
                // each agent was last seen too): written every period.
                let judged = served.overlay().is_some_and(|o| o.opamp.is_some());
                board.publish(OpampSummary::of(fleet, &self.id), judged).await;
            }
            if let Some(others) = board.others().await {
                self.peers.store(Arc::new(others));
            }
            if let Some(fleet) = &fleet {
                self.warn_unmatched(&mut warnings, fleet, &served);
            }
        }
        if fleet.is_some() {
            board.delete().await;
        }
    }

    /// Warns about the groups that have matched no agent, here or on the others, for the grace.
    fn warn_unmatched(&self, warnings: &mut Warnings, fleet: &OpampFleet, served: &ServedTable) {
        let (own, peers) = (fleet.agents(), self.peers());
        let groups = own.iter().chain(peers.iter().flat_map(|p| &p.agents)).filter_map(|a| a.group.as_deref());
        let unmatched = super::unmatched::unmatched(served.snapshot().table.opamp(), groups);
        for group in warnings.observe(&unmatched, Instant::now()) {
            tracing::warn!(
                group,
                grace = ?super::unmatched::UNMATCHED_GRACE,
                "No connected OpAMP agent is in this opamp: group: check its match against the agents' attributes (GET /api/v1/opamp/agents)."
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::opamp::backend::{AttributeView, ConfigStatusView};

    fn row(n: usize) -> OpampAgentRow {
        OpampAgentRow {
            uid: format!("{n:032x}"),
            transport: "http".into(),
            attributes: vec![AttributeView {
                key: "service.name".into(),
                value: format!("checkout-{n}"),
                identifying: true,
                string: true,
            }],
            instance: format!("{n:032x}"),
            accepts_remote_config: true,
            health: None,
            remote_config_status: Some(ConfigStatusView {
                status: "applied".into(),
                config_hash: "ab".repeat(32),
                error_message: String::new(),
            }),
            effective_config_hash: None,
            group: Some("svc".into()),
            offered_hash: Some("ab".repeat(32)),
            current: true,
            connected_ms: 1,
            last_report_ms: 2,
            last_seen_ms: 2,
        }
    }

    #[test]
    fn a_summary_fits_its_bound_and_report_times_alone_are_no_change() {
        let mut big = OpampSummary {
            replica: "r".into(),
            updated_ms: 0,
            agents: (0..MAX_PUBLISHED_AGENTS).map(row).collect(),
            total: 5000,
        };
        let bytes = big.encode(64 * 1024);
        assert!(bytes.len() <= 64 * 1024 && !big.agents.is_empty() && big.agents.len() < MAX_PUBLISHED_AGENTS);
        let back: OpampSummary = serde_json::from_slice(&bytes).unwrap();
        assert_eq!((back.total, back.agents.len()), (5000, big.agents.len()));
        assert_eq!(back.agents[0].remote_config_status.as_ref().unwrap().status, "applied");

        let mut later = big.clone();
        later.updated_ms = 10_000;
        later.agents[0].last_report_ms = 10_000;
        later.agents[0].last_seen_ms = 10_000;
        assert!(big.same(&later));
        later.agents[0].current = false;
        assert!(!big.same(&later));
    }
}
