//! Prometheus metrics, served at `GET /metrics` on the admin address in the OpenMetrics text
//! format.
//!
//! One explicit [`Registry`] per server, built once in [`Metrics::for_server`]: no globals, so
//! tests run servers side by side and read each one's numbers. The README lists every family.
//!
//! - The CDS hot path ([`CdsMetrics::record`]) touches only counters resolved at start-up and
//!   an atomic histogram: no lock, no label lookup, no allocation.
//! - Reloads, rejected documents, store failures and refused credentials are *named events*
//!   ([`events`]): one call logs the line and counts it.
//! - The table's and the store's state (up, stale, ages, version) is read at scrape time.
//! - The fleet's gauges ([`FleetGauges`]) are computed from the fleet table at scrape time.
//! - `process_*` and `skyconf_build_info` come from [`process`].

pub mod edge;
pub mod events;
mod fleet;
mod gateway;
mod histogram;
mod process;
mod state;

use std::cell::Cell;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

pub use skyconf_core::answer::FetchOutcome;

use crate::cds::hold::{HeldCount, Refusal, Release};

pub use edge::{EdgeMetrics, PendingLimit};
pub use events::{AdminDenial, BrowserRefusal, Events, GuardedService, OriginEvents};
pub use fleet::{FleetGauges, FleetIdentities, FleetTable, ServiceAgents, by_series};
pub use gateway::GatewayMetrics;
use histogram::{AtomicHistogram, FETCH_BUCKETS};

use crate::served::ServedTable;
use crate::store_view::StoreView;

/// The content type of the exposition.
pub const CONTENT_TYPE_OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DcsLabels {
    method: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabels {
    limit: &'static str,
}

/// One call in this many (per thread) is timed for `skyconf_fetch_duration_seconds`.
pub const LATENCY_SAMPLE_EVERY: u32 = 8;

/// The CDS handler's metrics. Cheap to clone; [`CdsMetrics::default`] counts into nothing that
/// is exposed.
#[derive(Debug, Clone)]
pub struct CdsMetrics {
    fetches: Family<OutcomeLabels, Counter>,
    /// Indexed by `FetchOutcome as usize`; the same atomics as the family's children.
    by_outcome: [Counter; 4],
    latency: AtomicHistogram,
    /// Held polls by how they ended (indexed by `Release as usize`).
    released: Family<ReasonLabels, Counter>,
    by_release: [Counter; 4],
    /// Polls answered at once because a bound on held polls was reached.
    refused: Family<LimitLabels, Counter>,
    by_refusal: [Counter; 3],
    /// The count of held polls, read at scrape time.
    held: Arc<std::sync::OnceLock<Arc<HeldCount>>>,
}

impl Default for CdsMetrics {
    fn default() -> Self {
        let fetches = Family::<OutcomeLabels, Counter>::default();
        let by_outcome = FetchOutcome::ALL.map(|o| fetches.get_or_create_owned(&OutcomeLabels { outcome: o.as_str() }));
        let released = Family::<ReasonLabels, Counter>::default();
        let by_release = Release::ALL.map(|r| released.get_or_create_owned(&ReasonLabels { reason: r.as_str() }));
        let refused = Family::<LimitLabels, Counter>::default();
        let by_refusal =
            ["connection", "total", "source"].map(|limit| refused.get_or_create_owned(&LimitLabels { limit }));
        Self {
            fetches,
            by_outcome,
            latency: AtomicHistogram::new(&FETCH_BUCKETS),
            released,
            by_release,
            refused,
            by_refusal,
            held: Arc::default(),
        }
    }
}

impl CdsMetrics {
    /// When to start timing a call: now for one call in [`LATENCY_SAMPLE_EVERY`] on each
    /// thread, `None` for the others. Reading the clock costs more than the rest of the metrics
    /// (about 60 ns per read on a virtual machine), so the latency is sampled; the outcomes are
    /// all counted.
    #[inline]
    pub fn start(&self) -> Option<Instant> {
        thread_local! {
            static CALLS: Cell<u32> = const { Cell::new(0) };
        }
        let timed = CALLS.with(|calls| {
            let n = calls.get();
            calls.set(n.wrapping_add(1));
            n % LATENCY_SAMPLE_EVERY == 0
        });
        timed.then(Instant::now)
    }

    /// Counts one answered call, and its latency when [`Self::start`] timed it.
    #[inline]
    pub fn record(&self, outcome: FetchOutcome, started: Option<Instant>) {
        self.by_outcome[outcome as usize].inc();
        if let Some(started) = started {
            self.latency.observe(started.elapsed());
        }
    }

    /// Calls answered with `outcome` so far.
    pub fn fetches(&self, outcome: FetchOutcome) -> u64 {
        self.by_outcome[outcome as usize].get()
    }

    /// Counts a held poll's end.
    pub fn hold_released(&self, release: Release) {
        self.by_release[release as usize].inc();
    }

    /// Held polls released with `release` so far.
    pub fn held_released(&self, release: Release) -> u64 {
        self.by_release[release as usize].get()
    }

    /// Counts a poll answered at once because a bound on held polls was reached.
    pub fn hold_refused(&self, refusal: Refusal) {
        self.by_refusal[refusal as usize].inc();
    }

    /// Polls answered at once because of `refusal` so far.
    pub fn held_refused(&self, refusal: Refusal) -> u64 {
        self.by_refusal[refusal as usize].get()
    }

    /// Exposes `held` as `skyconf_held_polls`.
    pub fn watch_held(&self, held: &Arc<HeldCount>) {
        let _ = self.held.set(Arc::clone(held));
    }

    fn register(&self, registry: &mut Registry) {
        registry.register(
            "skyconf_held_polls_released",
            "Held fetchConfigurations calls, by how they ended: changed (the new command was sent), expired (the hold ended: unchanged), shutdown (unchanged), cancelled (by the client, or its connection went)",
            self.released.clone(),
        );
        registry.register(
            "skyconf_held_polls_refused",
            "Polls answered at once although they could have been held, because a bound on held polls was reached: the connection's, the server's (total) or the share of the poll's source address",
            self.refused.clone(),
        );
        registry.register_collector(Box::new(HeldGauge(Arc::clone(&self.held))));
        registry.register(
            "skyconf_fetches",
            "fetchConfigurations calls answered, by outcome: changed (the service's command), unchanged (empty Commands), empty (the EMPTY command), not_ready (no table yet)",
            self.fetches.clone(),
        );
        registry.register(
            "skyconf_fetch_duration_seconds",
            "Time the server spent answering one fetchConfigurations call (lookup, digest comparison, serial number), excluding network and HTTP/2; one call in 8 per thread is timed",
            self.latency.clone(),
        );
    }
}

/// `skyconf_held_polls`, read from the CDS service's count at scrape time.
#[derive(Debug)]
struct HeldGauge(Arc<std::sync::OnceLock<Arc<HeldCount>>>);

impl prometheus_client::collector::Collector for HeldGauge {
    fn encode(&self, mut encoder: prometheus_client::encoding::DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let held = self.0.get().map_or(0, |count| count.get() as u64);
        encoder
            .encode_descriptor(
                "skyconf_held_polls",
                "fetchConfigurations calls held now, waiting for a change",
                None,
                prometheus_client::metrics::MetricType::Gauge,
            )?
            .encode_gauge(&held)
    }
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
    cds: CdsMetrics,
    dcs: DcsMetrics,
    events: Events,
    fleet: FleetGauges,
    gateway: GatewayMetrics,
    edge: EdgeMetrics,
    opamp: crate::opamp::metrics::OpampGauge,
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
        let (cds, dcs, events, fleet) =
            (CdsMetrics::default(), DcsMetrics::default(), Events::default(), FleetGauges::default());
        cds.register(&mut registry);
        dcs.register(&mut registry);
        events.register(&mut registry);
        if let Some(state) = state {
            events.watch_store(&state.store.status().store);
            registry.register_collector(Box::new(state));
        }
        registry.register_collector(Box::new(fleet.clone()));
        let gateway = GatewayMetrics::default();
        gateway.register(&mut registry);
        let edge = EdgeMetrics::default();
        edge.register(&mut registry);
        process::register(&mut registry);
        let opamp = crate::opamp::metrics::OpampGauge::default();
        registry.register_collector(Box::new(opamp.clone()));
        Self { registry, cds, dcs, events, fleet, gateway, edge, opamp }
    }

    /// The CDS handler's handle.
    pub fn cds(&self) -> CdsMetrics {
        self.cds.clone()
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

    /// The gateway's handle.
    pub fn gateway(&self) -> GatewayMetrics {
        self.gateway.clone()
    }

    /// The agent port's edge's handle.
    pub fn edge(&self) -> EdgeMetrics {
        self.edge.clone()
    }

    /// The OpAMP port's handle.
    pub fn opamp(&self) -> crate::opamp::metrics::OpampGauge {
        self.opamp.clone()
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

    /// `GET /metrics`.
    pub fn router(self: &Arc<Self>) -> Router {
        Router::new().route("/metrics", get(scrape)).with_state(Arc::clone(self))
    }
}

/// `GET /metrics`.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "health",
    operation_id = "metrics",
    security(("bearer" = []), ()),
    responses(
        (status = 200, description = "Prometheus / OpenMetrics text. Needs a read token when the \
            server has admin tokens, unless `metricsOpen` is set.", body = String,
            content_type = "application/openmetrics-text"),
        (status = 401, description = "No token, or an unknown one.", body = crate::admin::openapi::ErrorBody),
    ),
)]
pub(crate) async fn scrape(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    ([(CONTENT_TYPE, CONTENT_TYPE_OPENMETRICS)], metrics.encode())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
        text.lines().find(|l| l.starts_with(prefix))
    }

    #[test]
    fn fetch_counters_and_the_histogram_are_exposed_from_the_start() {
        let metrics = Metrics::default();
        let text = metrics.encode();
        for outcome in FetchOutcome::ALL {
            let series = format!("skyconf_fetches_total{{outcome=\"{}\"}} 0", outcome.as_str());
            assert!(text.contains(&series), "{series} in\n{text}");
        }
        let timed = Some(Instant::now());
        metrics.cds().record(FetchOutcome::Changed, timed);
        metrics.cds().record(FetchOutcome::Unchanged, timed);
        metrics.cds().record(FetchOutcome::Unchanged, timed);
        metrics.cds().record(FetchOutcome::Unchanged, None);
        let text = metrics.encode();
        assert_eq!(
            line(&text, "skyconf_fetches_total{outcome=\"unchanged\"}"),
            Some("skyconf_fetches_total{outcome=\"unchanged\"} 3")
        );
        assert_eq!(
            line(&text, "skyconf_fetch_duration_seconds_count"),
            Some("skyconf_fetch_duration_seconds_count 3"),
            "only timed calls"
        );
        assert!(text.contains("skyconf_fetch_duration_seconds_bucket{le=\"+Inf\"} 3"), "{text}");
        assert!(text.ends_with("# EOF\n"));
    }

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
