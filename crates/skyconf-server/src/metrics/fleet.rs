//! Fleet gauges: how many agents hold which digest, and how many are stuck. The fleet tracker
//! owns the agent table, so it provides the numbers, either pushed whole with the `set_*`
//! methods (a scrape reads the last complete set, never half of an update) or pulled at scrape
//! time through [`FleetGauges::on_scrape`].

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

/// What a scrape asks the fleet tracker for.
type Refresh = Arc<dyn Fn() -> (Vec<AgentsPerDigest>, Vec<StuckAgents>) + Send + Sync>;

/// Settable fleet gauges. Cheap to clone; every clone sets the same gauges.
#[derive(Clone, Default)]
pub struct FleetGauges {
    per_digest: Arc<ArcSwap<Vec<AgentsPerDigest>>>,
    stuck: Arc<ArcSwap<Vec<StuckAgents>>>,
    refresh: Arc<ArcSwap<Option<Refresh>>>,
}

impl std::fmt::Debug for FleetGauges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetGauges")
            .field("per_digest", &self.per_digest.load().len())
            .field("stuck", &self.stuck.load().len())
            .field("on_scrape", &self.refresh.load().is_some())
            .finish()
    }
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

    /// Computes both gauges with `refresh` on every scrape (before they are encoded), so they
    /// are as fresh as the scrape; `refresh` must be quick and must not block on async work.
    pub fn on_scrape(&self, refresh: impl Fn() -> (Vec<AgentsPerDigest>, Vec<StuckAgents>) + Send + Sync + 'static) {
        self.refresh.store(Arc::new(Some(Arc::new(refresh))));
    }
}

impl Collector for FleetGauges {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        if let Some(refresh) = self.refresh.load().as_ref() {
            let (per_digest, stuck) = refresh();
            self.set_agents_per_digest(per_digest);
            self.set_stuck_agents(stuck);
        }
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
