//! The agent port's edge: what its shared bounds refused, by bound, and (read at scrape time)
//! how much of them is taken now (see `crate::security::sources`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::drain::Drain;
use crate::metrics::encode_gauge;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabels {
    limit: &'static str,
}

/// Which bound refused a call waiting for its request message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PendingLimit {
    /// Its source's share.
    Source,
    /// The bound of all.
    Total,
}

/// The edge's metrics. Cheap to clone; [`EdgeMetrics::default`] counts into nothing that is
/// exposed.
#[derive(Debug, Clone)]
pub struct EdgeMetrics {
    connections_refused: Family<LimitLabels, Counter>,
    by_source: Counter,
    streams_refused: Family<LimitLabels, Counter>,
    /// Indexed by `PendingLimit as usize`.
    by_pending_limit: [Counter; 2],
    /// The gRPC port's sockets.
    connections: Arc<OnceLock<Drain>>,
    /// Calls waiting for their request message now.
    pending: Arc<OnceLock<Arc<AtomicUsize>>>,
}

impl Default for EdgeMetrics {
    fn default() -> Self {
        let connections_refused = Family::<LimitLabels, Counter>::default();
        let by_source = connections_refused.get_or_create_owned(&LimitLabels { limit: "source" });
        let streams_refused = Family::<LimitLabels, Counter>::default();
        let by_pending_limit =
            ["source", "total"].map(|limit| streams_refused.get_or_create_owned(&LimitLabels { limit }));
        Self {
            connections_refused,
            by_source,
            streams_refused,
            by_pending_limit,
            connections: Arc::default(),
            pending: Arc::default(),
        }
    }
}

impl EdgeMetrics {
    /// A connection closed at accept: its source held its share of the connections.
    pub fn connection_refused(&self) {
        self.by_source.inc();
    }

    /// Connections closed at accept so far.
    pub fn connections_refused(&self) -> u64 {
        self.by_source.get()
    }

    /// A call answered at once: `limit` was reached by the calls waiting for their message.
    pub fn stream_refused(&self, limit: PendingLimit) {
        self.by_pending_limit[limit as usize].inc();
    }

    /// Calls refused by `limit` so far.
    pub fn streams_refused(&self, limit: PendingLimit) -> u64 {
        self.by_pending_limit[limit as usize].get()
    }

    /// Reports the gRPC port's connections open (the sockets of `drain`) on every scrape.
    pub fn watch_connections(&self, drain: &Drain) {
        let _ = self.connections.set(drain.clone());
    }

    /// Reports `pending` (calls waiting for their message) on every scrape.
    pub fn watch_pending(&self, pending: &Arc<AtomicUsize>) {
        let _ = self.pending.set(Arc::clone(pending));
    }

    /// Registers the families in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "skyconf_grpc_connections_refused",
            "Connections to the gRPC port closed as soon as accepted, by the bound that refused them (source: their source address held its share of the connections)",
            self.connections_refused.clone(),
        );
        registry.register(
            "skyconf_grpc_streams_refused",
            "gRPC calls answered DEADLINE_EXCEEDED at once, before their request message arrived, because the calls waiting for theirs reached a bound (source: their source's share; total: the bound of all)",
            self.streams_refused.clone(),
        );
        let gauges = EdgeGauges { connections: Arc::clone(&self.connections), pending: Arc::clone(&self.pending) };
        registry.register_collector(Box::new(gauges));
    }
}

#[derive(Debug)]
struct EdgeGauges {
    connections: Arc<OnceLock<Drain>>,
    pending: Arc<OnceLock<Arc<AtomicUsize>>>,
}

impl Collector for EdgeGauges {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        if let Some(drain) = self.connections.get() {
            let open = drain.open_sockets() as u64;
            encode_gauge(
                &mut encoder,
                "skyconf_grpc_connections",
                "Connections to the gRPC port open now (closing ones included)",
                &open,
            )?;
        }
        if let Some(pending) = self.pending.get() {
            encode_gauge(
                &mut encoder,
                "skyconf_grpc_pending_streams",
                "gRPC calls whose request message has not arrived yet",
                &(pending.load(Ordering::Relaxed) as u64),
            )?;
        }
        Ok(())
    }
}
