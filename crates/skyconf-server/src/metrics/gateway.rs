//! Gateway metrics: forwarded calls by OAP and outcome, and, read at scrape time from the
//! upstream pool, whether each OAP is reachable and how many agent connections are pinned to it.

use std::sync::{Arc, OnceLock};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::gateway::upstream::Upstreams;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    upstream: String,
    outcome: &'static str,
}

/// The gateway's metrics. Cheap to clone; [`GatewayMetrics::default`] counts into nothing that is
/// exposed.
#[derive(Debug, Clone, Default)]
pub struct GatewayMetrics {
    calls: Family<CallLabels, Counter>,
    upstreams: Arc<OnceLock<Arc<Upstreams>>>,
}

impl GatewayMetrics {
    /// A call the OAP answered (whatever its gRPC status).
    pub fn forwarded(&self, upstream: &str) {
        self.count(upstream, "forwarded");
    }

    /// A call that failed before the OAP answered (reset, or the connection lost).
    pub fn failed(&self, upstream: &str) {
        self.count(upstream, "failed");
    }

    /// A call answered UNAVAILABLE because no OAP was reachable.
    pub fn no_upstream(&self) {
        self.count("", "no_upstream");
    }

    fn count(&self, upstream: &str, outcome: &'static str) {
        self.calls.get_or_create(&CallLabels { upstream: upstream.to_owned(), outcome }).inc();
    }

    /// Reports the state of `upstreams` on every scrape.
    pub fn watch(&self, upstreams: &Arc<Upstreams>) {
        let _ = self.upstreams.set(Arc::clone(upstreams));
    }

    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "skyconf_gateway_calls",
            "Calls forwarded to the OAPs, by OAP and outcome (forwarded: the OAP answered; failed: reset or connection lost before it answered; no_upstream: no OAP was reachable)",
            self.calls.clone(),
        );
        registry.register_collector(Box::new(UpstreamGauges(Arc::clone(&self.upstreams))));
    }
}

#[derive(Debug)]
struct UpstreamGauges(Arc<OnceLock<Arc<Upstreams>>>);

impl Collector for UpstreamGauges {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let Some(upstreams) = self.0.get() else { return Ok(()) };
        let mut up = encoder.encode_descriptor(
            "skyconf_gateway_upstream_up",
            "Whether the gateway has an open connection to the OAP (1) or not (0)",
            None,
            MetricType::Gauge,
        )?;
        for member in upstreams.members() {
            up.encode_family(&[("upstream", member.addr.as_str())])?.encode_gauge(&u64::from(member.is_healthy()))?;
        }
        let mut pinned = encoder.encode_descriptor(
            "skyconf_gateway_agent_connections",
            "Agent connections whose forwarded calls go to the OAP",
            None,
            MetricType::Gauge,
        )?;
        for member in upstreams.members() {
            pinned.encode_family(&[("upstream", member.addr.as_str())])?.encode_gauge(&(member.pinned() as u64))?;
        }
        Ok(())
    }
}
