//! `skyconf_opamp_agents{status}`: live OpAMP agents by the status of the remote configuration
//! they last reported, counted as `GET /api/v1/opamp/agents` lists them. Registered with every
//! server's metrics; it says nothing until the OpAMP port runs.

use std::sync::Arc;

use arc_swap::ArcSwapOption;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use super::OpampFleet;

/// The gauge; cloning shares it.
#[derive(Debug, Clone, Default)]
pub struct OpampGauge(Arc<ArcSwapOption<OpampFleet>>);

impl OpampGauge {
    /// Counts `fleet`'s agents from now on.
    pub fn count(&self, fleet: &Arc<OpampFleet>) {
        self.0.store(Some(Arc::clone(fleet)));
    }
}

impl Collector for OpampGauge {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let fleet = self.0.load();
        let Some(fleet) = fleet.as_ref() else { return Ok(()) };
        let mut family = encoder.encode_descriptor(
            "skyconf_opamp_agents",
            "Live OpAMP agents by the status of the remote configuration they last reported (none: not reported yet)",
            None,
            MetricType::Gauge,
        )?;
        for (status, count) in fleet.counts() {
            family.encode_family(&[("status", status)])?.encode_gauge(&count)?;
        }
        Ok(())
    }
}
