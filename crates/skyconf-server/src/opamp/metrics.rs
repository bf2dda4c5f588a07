//! The OpAMP port's gauges: `skyconf_opamp_agents{status}`, live OpAMP agents by the status of
//! the remote configuration they last reported, counted as `GET /api/v1/opamp/agents` lists
//! them; `skyconf_opamp_held_polls` and `skyconf_opamp_websockets`; the counter
//! `skyconf_opamp_unauthorized_total` of requests refused for their token. Registered with every
//! server's metrics; they say nothing until the OpAMP port runs.

use std::sync::Arc;

use arc_swap::ArcSwapOption;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use skyconf_opamp::Opamp;

use super::OpampFleet;

/// The gauge; cloning shares it.
#[derive(Debug, Clone, Default)]
pub(crate) struct OpampGauge(Arc<ArcSwapOption<(Arc<OpampFleet>, Opamp)>>);

impl OpampGauge {
    /// Counts `fleet`'s agents and `opamp`'s connections from now on.
    pub(crate) fn count(&self, fleet: &Arc<OpampFleet>, opamp: &Opamp) {
        self.0.store(Some(Arc::new((Arc::clone(fleet), opamp.clone()))));
    }
}

impl Collector for OpampGauge {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let port = self.0.load();
        let Some((fleet, opamp)) = port.as_deref() else { return Ok(()) };
        let mut family = encoder.encode_descriptor(
            "skyconf_opamp_agents",
            "Live OpAMP agents by the status of the remote configuration they last reported (none: not reported yet)",
            None,
            MetricType::Gauge,
        )?;
        for (status, count) in fleet.counts() {
            family.encode_family(&[("status", status)])?.encode_gauge(&count)?;
        }
        let stats = opamp.stats();
        for (name, help, value) in [
            (
                "skyconf_opamp_held_polls",
                "OpAMP HTTP polls held now (clients that asked with OpAMP-Hold)",
                stats.held_polls,
            ),
            ("skyconf_opamp_websockets", "Open OpAMP WebSocket connections", stats.websockets),
        ] {
            encoder.encode_descriptor(name, help, None, MetricType::Gauge)?.encode_gauge(&(value as u64))?;
        }
        encoder
            .encode_descriptor(
                "skyconf_opamp_unauthorized",
                "OpAMP requests and WebSocket upgrades refused (401) for a missing or wrong agent token",
                None,
                MetricType::Counter,
            )?
            .encode_counter::<prometheus_client::encoding::NoLabelSet, _, u64>(&stats.unauthorized, None)?;
        Ok(())
    }
}
