//! The CDS service's metrics: fetches by outcome and their latency, held polls by how they
//! ended, refused holds by bound, and the held polls now (read at scrape time). The hot path
//! ([`CdsMetrics::record`]) touches only counters resolved at start-up and an atomic histogram:
//! no lock, no label lookup, no allocation.

use std::cell::Cell;
use std::sync::Arc;
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use skyconf_core::answer::FetchOutcome;

use super::histogram::{AtomicHistogram, FETCH_BUCKETS};
use super::hold::{HeldCount, Refusal, Release};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
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

    /// Registers the families in `registry`.
    pub fn register(&self, registry: &mut Registry) {
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
        crate::metrics::encode_gauge(
            &mut encoder,
            "skyconf_held_polls",
            "fetchConfigurations calls held now, waiting for a change",
            &held,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
        text.lines().find(|l| l.starts_with(prefix))
    }

    fn encode(registry: &Registry) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
        text
    }

    #[test]
    fn fetch_counters_and_the_histogram_are_exposed_from_the_start() {
        let (mut registry, cds) = (Registry::default(), CdsMetrics::default());
        cds.register(&mut registry);
        let text = encode(&registry);
        for outcome in FetchOutcome::ALL {
            let series = format!("skyconf_fetches_total{{outcome=\"{}\"}} 0", outcome.as_str());
            assert!(text.contains(&series), "{series} in\n{text}");
        }
        let timed = Some(Instant::now());
        cds.record(FetchOutcome::Changed, timed);
        cds.record(FetchOutcome::Unchanged, timed);
        cds.record(FetchOutcome::Unchanged, timed);
        cds.record(FetchOutcome::Unchanged, None);
        let text = encode(&registry);
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
}
