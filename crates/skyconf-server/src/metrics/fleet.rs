//! Fleet gauges: how many agents hold which digest, and how many are stuck; the fleet table's
//! own counts (pairs tracked, evicted, polls not tracked); and instance identity (connections
//! identified, anonymous pollers, properties cut). The fleet tracker owns the agent table, so the
//! numbers are pulled from it at scrape time, through [`FleetGauges::on_scrape`],
//! [`FleetGauges::on_scrape_table`] and [`FleetGauges::on_scrape_identities`]: a scrape sees one
//! complete, current set and nothing is kept here.

use std::sync::Arc;

use arc_swap::ArcSwap;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use crate::fleet::Fleet;

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

/// The fleet table's own counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FleetTable {
    /// (service, peer) pairs tracked now.
    pub tracked: u64,
    /// Of those, pairs of services without configuration.
    pub tracked_unconfigured: u64,
    /// Pairs of unconfigured services evicted to make room, since start.
    pub evictions: u64,
    /// Polls not tracked (table full of configured services, or a name too long), since start.
    pub untracked_polls: u64,
}

/// Instance identity in the fleet table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FleetIdentities {
    /// Connections with a known instance identity now.
    pub identified: u64,
    /// (service, peer) pairs polling from a connection that never said which instance it is,
    /// where every agent is expected to (0 otherwise).
    pub anonymous: u64,
    /// Reported properties dropped or shortened, since start.
    pub properties_cut: u64,
}

impl FleetIdentities {
    /// The counts of `fleet` now.
    pub fn of(fleet: &Fleet) -> Self {
        Self {
            identified: fleet.identified() as u64,
            anonymous: fleet.anonymous_pollers() as u64,
            properties_cut: fleet.properties_cut(),
        }
    }
}

/// What a scrape asks the fleet tracker for.
type Refresh = Arc<dyn Fn() -> (Vec<AgentsPerDigest>, Vec<StuckAgents>) + Send + Sync>;
/// What a scrape asks the fleet table for.
type RefreshTable = Arc<dyn Fn() -> FleetTable + Send + Sync>;
/// What a scrape asks the fleet table about identities.
type RefreshIdentities = Arc<dyn Fn() -> FleetIdentities + Send + Sync>;

/// Fleet gauges, computed on every scrape. Cheap to clone; every clone shares the source.
#[derive(Clone, Default)]
pub struct FleetGauges {
    refresh: Arc<ArcSwap<Option<Refresh>>>,
    table: Arc<ArcSwap<Option<RefreshTable>>>,
    identities: Arc<ArcSwap<Option<RefreshIdentities>>>,
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

    /// Reads the table's counts with `refresh` on every scrape: `skyconf_fleet_tracked{kind}`,
    /// `skyconf_fleet_evictions_total` and `skyconf_fleet_untracked_polls_total`.
    pub fn on_scrape_table(&self, refresh: impl Fn() -> FleetTable + Send + Sync + 'static) {
        self.table.store(Arc::new(Some(Arc::new(refresh))));
    }

    /// Reads `fleet`'s identity counts on every scrape: `skyconf_fleet_identified`,
    /// `skyconf_fleet_anonymous_pollers` and `skyconf_fleet_properties_cut_total`.
    pub fn on_scrape_identities(&self, fleet: Arc<Fleet>) {
        self.on_scrape_identities_with(move || FleetIdentities::of(&fleet));
    }

    /// [`Self::on_scrape_identities`] from any source (tests).
    pub fn on_scrape_identities_with(&self, refresh: impl Fn() -> FleetIdentities + Send + Sync + 'static) {
        self.identities.store(Arc::new(Some(Arc::new(refresh))));
    }

    fn encode_identities(&self, encoder: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let refresh = self.identities.load();
        let Some(refresh) = refresh.as_ref() else { return Ok(()) };
        let counts = refresh();
        let gauge = |encoder: &mut DescriptorEncoder<'_>, name: &str, help: &str, value: u64| {
            encoder.encode_descriptor(name, help, None, MetricType::Gauge)?.encode_gauge(&value)
        };
        gauge(
            encoder,
            "skyconf_fleet_identified",
            "Agent connections whose instance identity is known",
            counts.identified,
        )?;
        gauge(
            encoder,
            "skyconf_fleet_anonymous_pollers",
            "(service, peer) pairs polling from a connection that never said which instance it is, where every agent is expected to",
            counts.anonymous,
        )?;
        encoder
            .encode_descriptor(
                "skyconf_fleet_properties_cut",
                "Reported instance properties dropped (over the cap per instance) or shortened",
                None,
                MetricType::Counter,
            )?
            .encode_counter::<prometheus_client::encoding::NoLabelSet, _, u64>(&counts.properties_cut, None)
    }

    fn encode_table(&self, encoder: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let refresh = self.table.load();
        let Some(refresh) = refresh.as_ref() else { return Ok(()) };
        let table = refresh();
        let mut family = encoder.encode_descriptor(
            "skyconf_fleet_tracked",
            "(service, peer) pairs in the fleet table, by kind: of services with configuration or without",
            None,
            MetricType::Gauge,
        )?;
        let configured = table.tracked.saturating_sub(table.tracked_unconfigured);
        family.encode_family(&[("kind", "configured")])?.encode_gauge(&configured)?;
        family.encode_family(&[("kind", "unconfigured")])?.encode_gauge(&table.tracked_unconfigured)?;
        let counter = |encoder: &mut DescriptorEncoder<'_>, name: &str, help: &str, value: u64| {
            encoder
                .encode_descriptor(name, help, None, MetricType::Counter)?
                .encode_counter::<prometheus_client::encoding::NoLabelSet, _, u64>(&value, None)
        };
        counter(
            encoder,
            "skyconf_fleet_evictions",
            "Fleet-table pairs of services without configuration evicted to make room for new pairs",
            table.evictions,
        )?;
        counter(
            encoder,
            "skyconf_fleet_untracked_polls",
            "Polls answered but not tracked in the fleet table (full of configured services, or a name too long)",
            table.untracked_polls,
        )
    }
}

impl Collector for FleetGauges {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        self.encode_table(&mut encoder)?;
        self.encode_identities(&mut encoder)?;
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
