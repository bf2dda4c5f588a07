//! Prometheus metrics, served at `GET /metrics` on the admin address in the OpenMetrics text
//! format (the route, behind the admin port's token check, is `crate::admin::app::scrape`).
//!
//! One explicit [`Registry`] per server, built once in [`Metrics::for_server`]: no globals, so
//! tests run servers side by side and read each one's numbers. The README lists every family.
//!
//! - Each component owns its metric handles and registers them into this registry: the CDS
//!   service (`crate::cds::metrics`), the edge (`crate::security::metrics`), the gateway
//!   (`skyconf_gateway::metrics`).
//! - Reloads, rejected documents, store failures and refused credentials are *named events*
//!   ([`events`]): one call logs the line and counts it.
//! - The table's and the store's state (up, stale, ages, version) is read at scrape time.
//! - The fleet's gauges ([`FleetGauges`]) are computed from the fleet table at scrape time.
//! - `process_*` and `skyconf_build_info` come from [`process`].

pub(crate) mod events;
mod fleet;
mod process;
mod state;

use std::sync::Arc;

use prometheus_client::encoding::{DescriptorEncoder, EncodeGaugeValue, EncodeLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

pub(crate) use events::{AdminDenial, BrowserRefusal, Events, GuardedService, OriginEvents};
pub(crate) use fleet::FleetGauges;
#[cfg(test)]
pub(crate) use fleet::by_series;

use crate::served::ServedTable;
use crate::store_view::StoreView;

/// The content type of the exposition.
pub(crate) const CONTENT_TYPE_OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Encodes gauge `name` with one unlabelled series of `value`, as a collector reads it at
/// scrape time.
pub(crate) fn encode_gauge(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: &impl EncodeGaugeValue,
) -> Result<(), std::fmt::Error> {
    encoder.encode_descriptor(name, help, None, MetricType::Gauge)?.encode_gauge(value)
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DcsLabels {
    method: &'static str,
    outcome: &'static str,
}

/// The DCS service's metrics. Cheap to clone.
#[derive(Debug, Clone)]
pub struct DcsMetrics {
    calls: Family<DcsLabels, Counter>,
    /// `call` changed/unchanged, then `callGroup` changed/unchanged.
    resolved: [Counter; 4],
}

impl Default for DcsMetrics {
    fn default() -> Self {
        let calls = Family::<DcsLabels, Counter>::default();
        let resolved =
            [("call", "changed"), ("call", "unchanged"), ("callGroup", "changed"), ("callGroup", "unchanged")]
                .map(|(method, outcome)| calls.get_or_create_owned(&DcsLabels { method, outcome }));
        Self { calls, resolved }
    }
}

impl DcsMetrics {
    /// Counts one `call` (`group: false`) or `callGroup`, and whether it carried a change.
    pub fn record(&self, group: bool, changed: bool) {
        let index = usize::from(group) * 2 + usize::from(!changed);
        self.resolved[index].inc();
    }

    fn register(&self, registry: &mut Registry) {
        registry.register(
            "skyconf_dcs_calls",
            "Dynamic configuration service calls from OAPs, by method (call, callGroup) and outcome (changed: the table was sent; unchanged: the OAP's uuid was current)",
            self.calls.clone(),
        );
    }
}

/// Every metric of one server, and the registry that exposes them.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    dcs: DcsMetrics,
    events: Events,
    fleet: FleetGauges,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::build(None)
    }
}

impl Metrics {
    /// The metrics of a server answering from `served`, fed by `store`.
    pub fn for_server(served: Arc<ServedTable>, store: Arc<StoreView>) -> Self {
        Self::build(Some(state::StateCollector { served, store }))
    }

    fn build(state: Option<state::StateCollector>) -> Self {
        let mut registry = Registry::default();
        let (dcs, events, fleet) = (DcsMetrics::default(), Events::default(), FleetGauges::default());
        dcs.register(&mut registry);
        events.register(&mut registry);
        if let Some(state) = state {
            events.watch_store(&state.store.status().store);
            registry.register_collector(Box::new(state));
        }
        registry.register_collector(Box::new(fleet.clone()));
        process::register(&mut registry);
        Self { registry, dcs, events, fleet }
    }

    /// The DCS handler's handle.
    pub fn dcs(&self) -> DcsMetrics {
        self.dcs.clone()
    }

    /// The named events' handle.
    pub fn events(&self) -> Events {
        self.events.clone()
    }

    /// The fleet tracker's handle.
    pub fn fleet(&self) -> FleetGauges {
        self.fleet.clone()
    }

    /// The registry, for a component that registers its own metric families (before the
    /// metrics are shared).
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// The exposition, in the OpenMetrics text format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        if let Err(error) = prometheus_client::encoding::text::encode(&mut text, &self.registry) {
            // Only a failing writer errs, and a String never fails; keep what was written.
            tracing::error!(%error, "Cannot encode the metrics.");
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::fleet::ServiceAgents;
    use super::*;

    #[test]
    fn events_count_by_origin() {
        let metrics = Metrics::default();
        let origin = metrics.events().for_origin("file a.yaml");
        origin.document_installed(2, 1);
        origin.document_rejected("line 1, column 1: bad", Some(1));
        origin.document_rejected("line 1, column 1: bad", Some(1));
        let text = metrics.encode();
        assert!(text.contains("skyconf_reloads_total{origin=\"file a.yaml\"} 1"), "{text}");
        assert!(text.contains("skyconf_documents_rejected_total{origin=\"file a.yaml\"} 2"), "{text}");
    }

    #[test]
    fn dcs_calls_count_by_method_and_outcome() {
        let metrics = Metrics::default();
        metrics.dcs().record(false, true);
        metrics.dcs().record(true, false);
        let text = metrics.encode();
        assert!(text.contains("skyconf_dcs_calls_total{method=\"call\",outcome=\"changed\"} 1"), "{text}");
        assert!(text.contains("skyconf_dcs_calls_total{method=\"callGroup\",outcome=\"unchanged\"} 1"), "{text}");
        assert!(text.contains("skyconf_dcs_calls_total{method=\"call\",outcome=\"unchanged\"} 0"), "{text}");
    }

    #[test]
    fn fleet_gauges_replace_their_series_whole() {
        let metrics = Metrics::default();
        let fleet = metrics.fleet();
        assert!(!metrics.encode().contains("skyconf_fleet_agents"), "no series before the tracker gives any");
        // What the fleet tracker would answer, changed between scrapes.
        let tracker: Arc<std::sync::Mutex<Vec<ServiceAgents>>> = Arc::default();
        let source = Arc::clone(&tracker);
        fleet.on_scrape(move || source.lock().unwrap().clone());
        let counts = |applied, stuck| crate::fleet::StateCounts {
            agents: applied + stuck,
            applied,
            stuck,
            ..Default::default()
        };
        *tracker.lock().unwrap() = vec![ServiceAgents { service: "a".into(), counts: counts(3, 1) }];
        let text = metrics.encode();
        assert!(text.contains("skyconf_fleet_agents{service=\"a\",state=\"applied\"} 3"), "{text}");
        assert!(text.contains("skyconf_fleet_agents{service=\"a\",state=\"stuck\"} 1"), "{text}");
        assert!(text.contains("skyconf_fleet_agents{service=\"a\",state=\"new\"} 0"), "every state: {text}");
        *tracker.lock().unwrap() = vec![ServiceAgents { service: "b".into(), counts: counts(0, 2) }];
        let text = metrics.encode();
        assert!(
            text.contains("skyconf_fleet_agents{service=\"b\",state=\"stuck\"} 2"),
            "pulled at scrape time: {text}"
        );
        assert!(!text.contains("service=\"a\""), "{text}");
        tracker.lock().unwrap().clear();
        assert!(!metrics.encode().contains("skyconf_fleet_agents{"));
    }

    #[test]
    fn services_without_configuration_are_summed_into_one_series() {
        let mut counts = std::collections::BTreeMap::new();
        let mut one = |name: &str, state| {
            counts.entry(name.to_owned()).or_insert_with(crate::fleet::StateCounts::default).add(state);
        };
        one("svc", crate::fleet::AgentState::Applied);
        one("typo-1", crate::fleet::AgentState::New);
        one("typo-2", crate::fleet::AgentState::New);
        one("typo-2", crate::fleet::AgentState::Behind);
        let rows = by_series(counts, |s| s == "svc");
        let names: Vec<_> = rows.iter().map(|r| r.service.as_str()).collect();
        assert_eq!(names, ["", "svc"]);
        assert_eq!((rows[0].counts.new, rows[0].counts.behind, rows[0].counts.agents), (2, 1, 1));
    }

    #[test]
    fn identity_gauges_are_read_from_the_fleet_at_scrape_time() {
        let metrics = Metrics::default();
        assert!(!metrics.encode().contains("skyconf_fleet_identified"), "no series before a fleet is given");
        let options = crate::fleet::FleetOptions { expect_identity: true, ..Default::default() };
        let fleet = Arc::new(crate::fleet::Fleet::new(options));
        metrics.fleet().on_scrape_identities(Arc::clone(&fleet));
        let digest = skyconf_core::Digest::of_text("v1");
        fleet.observe_instance("a", "pod-1", "10.0.0.1:1".parse().unwrap());
        fleet.observe("a", "", "10.0.0.1:1".parse().unwrap(), &digest, true);
        fleet.observe("a", "", "10.0.0.1:2".parse().unwrap(), &digest, true);
        fleet.observe("b", "", "10.0.0.1:2".parse().unwrap(), &digest, true);
        let text = metrics.encode();
        assert!(text.contains("skyconf_fleet_identified 1"), "{text}");
        assert!(text.contains("skyconf_fleet_anonymous_pollers 2"), "{text}");
        assert!(text.contains("skyconf_fleet_properties_cut_total 0"), "{text}");
    }

    #[test]
    fn state_gauges_follow_the_store_and_the_table() {
        let served = Arc::new(ServedTable::new(skyconf_core::read("configurations:\n  a: {k: v}\n").unwrap()));
        let store = Arc::new(StoreView::new("file x".into(), Default::default(), true, false));
        let metrics = Metrics::for_server(Arc::clone(&served), Arc::clone(&store));
        let text = metrics.encode();
        assert!(text.contains("skyconf_store_up{store=\"file x\"} 1"), "{text}");
        assert!(text.contains("skyconf_table_services 1"), "{text}");
        assert!(text.contains("skyconf_store_failures_total{store=\"file x\"} 0"), "{text}");
        store.mark_failed("down".into());
        assert!(metrics.encode().contains("skyconf_store_up{store=\"file x\"} 0"));
    }
}
