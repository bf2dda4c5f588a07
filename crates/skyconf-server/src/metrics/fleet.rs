//! Fleet gauges: how many agents hold which digest, and how many are stuck. The fleet tracker
//! owns the agent table, so the numbers are pulled from it at scrape time, through
//! [`FleetGauges::on_scrape`]: a scrape sees one complete, current set and nothing is kept here.

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

/// Fleet gauges, computed on every scrape. Cheap to clone; every clone shares the source.
#[derive(Clone, Default)]
pub struct FleetGauges {
    refresh: Arc<ArcSwap<Option<Refresh>>>,
}

impl std::fmt::Debug for FleetGauges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetGauges").field("on_scrape", &self.refresh.load().is_some()).finish()
    }
}

impl FleetGauges {
    /// Computes both gauges with `refresh` on every scrape: `skyconf_fleet_agents{service, digest}`
    /// and `skyconf_fleet_agents_stuck{service}` hold exactly the rows it returns (others
    /// disappear). `refresh` must be quick and must not block on async work.
    pub fn on_scrape(&self, refresh: impl Fn() -> (Vec<AgentsPerDigest>, Vec<StuckAgents>) + Send + Sync + 'static) {
        self.refresh.store(Arc::new(Some(Arc::new(refresh))));
    }
}

impl Collector for FleetGauges {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let refresh = self.refresh.load();
        let Some(refresh) = refresh.as_ref() else { return Ok(()) };
        let (per_digest, stuck) = refresh();
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
