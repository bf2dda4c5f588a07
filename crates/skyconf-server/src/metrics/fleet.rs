//! Fleet gauges: how many agents hold which digest, and how many are stuck. The fleet tracker
//! computes them (it owns the agent table) and sets them here whole; a scrape reads the last
//! complete set, so it never sees half of an update.

use std::sync::Arc;

use arc_swap::ArcSwap;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

/// The agents of one service that echo one digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentsPerDigest {
    /// The service name, as agents send it.
    pub service: String,
    /// The digest those agents echo (`""` for agents that sent none yet).
    pub digest: String,
    /// How many agents.
    pub agents: u64,
}

/// The stuck agents of one service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StuckAgents {
    /// The service name.
    pub service: String,
    /// How many of its agents are stuck (see `crate::fleet`).
    pub agents: u64,
}

/// Settable fleet gauges. Cheap to clone; every clone sets the same gauges.
#[derive(Debug, Clone, Default)]
pub struct FleetGauges {
    per_digest: Arc<ArcSwap<Vec<AgentsPerDigest>>>,
    stuck: Arc<ArcSwap<Vec<StuckAgents>>>,
}

impl FleetGauges {
    /// Replaces `skyconf_fleet_agents{service, digest}`: series not in `rows` disappear.
    pub fn set_agents_per_digest(&self, rows: Vec<AgentsPerDigest>) {
        self.per_digest.store(Arc::new(rows));
    }

    /// Replaces `skyconf_fleet_agents_stuck{service}`: series not in `rows` disappear.
    pub fn set_stuck_agents(&self, rows: Vec<StuckAgents>) {
        self.stuck.store(Arc::new(rows));
    }
}

impl Collector for FleetGauges {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let per_digest = self.per_digest.load();
        if !per_digest.is_empty() {
            let mut family = encoder.encode_descriptor(
                "skyconf_fleet_agents",
                "Agents seen lately, by service and the digest they echo",
                None,
                MetricType::Gauge,
            )?;
            for row in per_digest.iter() {
                let labels = [("service", row.service.as_str()), ("digest", row.digest.as_str())];
                family.encode_family(&labels)?.encode_gauge(&row.agents)?;
            }
        }
        let stuck = self.stuck.load();
        if !stuck.is_empty() {
            let mut family = encoder.encode_descriptor(
                "skyconf_fleet_agents_stuck",
                "Agents still echoing an older digest several polls after a change (a failed apply), by service",
                None,
                MetricType::Gauge,
            )?;
            for row in stuck.iter() {
                family.encode_family(&[("service", row.service.as_str())])?.encode_gauge(&row.agents)?;
            }
        }
        Ok(())
    }
}
