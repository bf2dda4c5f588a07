//! Fleet gauges: how many agents of each service are in each state, counted by the same
//! function the admin API counts with ([`Fleet::counts`]); the fleet table's own counts (rows
//! tracked, evicted, polls not tracked); and instance identity (connections identified, their
//! bytes, anonymous pollers, properties cut). The fleet tracker owns the agent table, so the
//! numbers are pulled from it at scrape time, through [`FleetGauges::on_scrape`],
//! [`FleetGauges::on_scrape_table`] and [`FleetGauges::on_scrape_identities`] (all three at once:
//! [`FleetGauges::count`]): a scrape sees one complete, current set and nothing is kept here.
//!
//! `skyconf_fleet_agents{service, state}` has one series per state of each service with rows;
//! services without configuration (typos, made-up names) are summed into `service=""`, so the
//! cardinality is bounded by the configured services, and no label value changes per release.

use std::collections::BTreeMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use super::encode_gauge;
use crate::fleet::{AgentState, Fleet, StateCounts};
use crate::served::ServedTable;

/// The agents of one service by state, as a scrape shows them (`service` is `""` for the
/// services without configuration, summed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceAgents {
    /// The service name, as agents send it; `""` for every service without configuration.
    pub service: String,
    /// Its rows by state.
    pub counts: StateCounts,
}

/// The series of `skyconf_fleet_agents` for `counts` (as [`Fleet::counts`] gives them): one
/// row per configured service, the others summed into `service=""`.
pub(crate) fn by_series(
    counts: BTreeMap<String, StateCounts>,
    configured: impl Fn(&str) -> bool,
) -> Vec<ServiceAgents> {
    let mut unconfigured: Option<StateCounts> = None;
    let mut rows: Vec<ServiceAgents> = Vec::with_capacity(counts.len());
    for (service, counts) in counts {
        if configured(&service) {
            rows.push(ServiceAgents { service, counts });
        } else {
            unconfigured.get_or_insert_default().merge(&counts);
        }
    }
    if let Some(counts) = unconfigured {
        rows.insert(0, ServiceAgents { service: String::new(), counts });
    }
    rows
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
    /// The bytes of text those identities hold.
    pub bytes: u64,
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
            bytes: fleet.identity_bytes() as u64,
            anonymous: fleet.anonymous_pollers() as u64,
            properties_cut: fleet.properties_cut(),
        }
    }
}

/// What a scrape asks the fleet tracker for.
type Refresh = Arc<dyn Fn() -> Vec<ServiceAgents> + Send + Sync>;
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
    /// Computes `skyconf_fleet_agents{service, state}` with `refresh` on every scrape: a series
    /// per state of each row it returns (others disappear). `refresh` must be quick and must not
    /// block on async work.
    pub fn on_scrape(&self, refresh: impl Fn() -> Vec<ServiceAgents> + Send + Sync + 'static) {
        self.refresh.store(Arc::new(Some(Arc::new(refresh))));
    }

    /// Every fleet gauge from `fleet`, each row judged against what `served` serves now: the
    /// agents by state ([`Fleet::counts`], the admin API's counting, with [`by_series`]), the
    /// table's counts and the identities'.
    pub fn count(&self, fleet: &Arc<Fleet>, served: &Arc<ServedTable>) {
        let (tracker, served) = (Arc::clone(fleet), Arc::clone(served));
        self.on_scrape(move || {
            let serving = served.serving();
            let table = &serving.snapshot.table;
            by_series(tracker.counts(&serving), |service| table.get(service).is_some())
        });
        self.on_scrape_identities(Arc::clone(fleet));
        let fleet = Arc::clone(fleet);
        self.on_scrape_table(move || FleetTable {
            tracked: fleet.tracked() as u64,
            tracked_unconfigured: fleet.tracked_unconfigured() as u64,
            evictions: fleet.evictions(),
            untracked_polls: fleet.untracked_polls(),
        });
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
        encode_gauge(
            encoder,
            "skyconf_fleet_identified",
            "Agent connections whose instance identity is known",
            &counts.identified,
        )?;
        encode_gauge(
            encoder,
            "skyconf_fleet_identity_bytes",
            "Bytes of text (names, properties, agent versions) the known instance identities hold",
            &counts.bytes,
        )?;
        encode_gauge(
            encoder,
            "skyconf_fleet_anonymous_pollers",
            "(service, peer) pairs polling from a connection that never said which instance it is, where every agent is expected to",
            &counts.anonymous,
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
        let rows = refresh();
        if !rows.is_empty() {
            let mut family = encoder.encode_descriptor(
                "skyconf_fleet_agents",
                "Agent rows (service, connection) by service and state, counted as the admin API counts them; services without configuration summed into service=\"\"",
                None,
                MetricType::Gauge,
            )?;
            for row in &rows {
                for state in AgentState::ALL {
                    let labels = [("service", row.service.as_str()), ("state", state.as_str())];
                    family.encode_family(&labels)?.encode_gauge(&(row.counts.of(state) as u64))?;
                }
            }
        }
        Ok(())
    }
}
