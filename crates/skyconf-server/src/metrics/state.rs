//! Gauges read at scrape time from the served table and the store view: nothing to keep in
//! step, and the ages are exact at the moment Prometheus asks.

use std::sync::Arc;
use std::time::SystemTime;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeGaugeValue};
use prometheus_client::metrics::MetricType;

use crate::served::ServedTable;
use crate::store_view::StoreView;

type StoreLabels<'a> = [(&'static str, &'a str); 1];

/// Reads the table and the store on every scrape.
#[derive(Debug)]
pub(crate) struct StateCollector {
    pub(crate) served: Arc<ServedTable>,
    pub(crate) store: Arc<StoreView>,
}

fn age(since: SystemTime, now: SystemTime) -> f64 {
    // A clock stepped backwards reads as zero, not as a negative age.
    now.duration_since(since).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// One gauge family with at most one series.
fn gauge(
    encoder: &mut DescriptorEncoder<'_>,
    labels: Option<&StoreLabels<'_>>,
    name: &str,
    help: &str,
    value: &impl EncodeGaugeValue,
) -> Result<(), std::fmt::Error> {
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    match labels {
        Some(labels) => metric.encode_family(labels)?.encode_gauge(value),
        None => metric.encode_gauge(value),
    }
}

impl Collector for StateCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let now = SystemTime::now();
        let status = self.store.status();
        let labels: StoreLabels<'_> = [("store", status.store.as_str())];
        gauge(
            &mut encoder,
            Some(&labels),
            "skyconf_store_up",
            "1 while the last contact with the configuration store succeeded, 0 while it is failing",
            &i64::from(status.connected),
        )?;
        gauge(
            &mut encoder,
            Some(&labels),
            "skyconf_store_stale",
            "1 while the served configuration is not confirmed by the store: it cannot be reached, or the table is a persisted copy not yet confirmed in this run",
            &i64::from(status.stale),
        )?;
        if let Some(last) = status.last_update {
            gauge(
                &mut encoder,
                Some(&labels),
                "skyconf_store_last_report_age_seconds",
                "Seconds since the store last reported content (a snapshot or a change)",
                &age(last, now),
            )?;
        }

        let snapshot = self.served.snapshot();
        gauge(
            &mut encoder,
            None,
            "skyconf_table_ready",
            "1 once a table is served; 0 while every agent is answered \"no change\"",
            &i64::from(snapshot.ready()),
        )?;
        gauge(
            &mut encoder,
            None,
            "skyconf_table_version",
            "Version of the served table (+1 per install)",
            &i64::try_from(snapshot.version).unwrap_or(i64::MAX),
        )?;
        gauge(
            &mut encoder,
            None,
            "skyconf_table_services",
            "Services in the served table",
            &i64::try_from(snapshot.table.len()).unwrap_or(i64::MAX),
        )?;
        if snapshot.ready() {
            gauge(
                &mut encoder,
                None,
                "skyconf_table_age_seconds",
                "Seconds since the served table was installed (the last store write seen served)",
                &age(snapshot.installed_at, now),
            )?;
        }
        Ok(())
    }
}
