//! The Java agent's trace decisions in one place, for a tracer to consult when a trace starts.
//!
//! The Java agent decides when a trace's first span is created, in this order: an operation name
//! ending in an ignored suffix is not traced; one matching an ignored path is not traced; otherwise
//! the sampler decides. A continued trace (a sampled parent in another process) is always traced
//! but counts against the sampler's window. The span limit applies while the segment grows.
//!
//! [`TracePolicy`] holds the four watchers and makes those decisions lock-free, so any tracer can
//! take them from the server. See the README for wiring it into the `skywalking` crate's reporter.

use std::sync::Arc;

use crate::registry::Registry;
use crate::watchers::{IgnorePath, IgnoreSuffix, SampleNPer3Secs, SpanLimit};

/// The Java agent's dynamic trace settings and the decisions they drive.
#[derive(Debug, Clone, Default)]
pub struct TracePolicy {
    /// `agent.sample_n_per_3_secs`.
    pub sampler: Arc<SampleNPer3Secs>,
    /// `agent.span_limit_per_segment`.
    pub span_limit: Arc<SpanLimit>,
    /// `agent.ignore_suffix`.
    pub ignore_suffix: Arc<IgnoreSuffix>,
    /// `agent.trace.ignore_path`.
    pub ignore_path: Arc<IgnorePath>,
}

impl TracePolicy {
    /// The Java agent's defaults (sampling off, 300 spans, its suffix list, no ignored paths).
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers the four watchers.
    pub fn register(&self, registry: &Registry) {
        registry.register(self.sampler.clone());
        registry.register(self.span_limit.clone());
        registry.register(self.ignore_suffix.clone());
        registry.register(self.ignore_path.clone());
    }

    /// Whether a new trace whose first operation is `operation_name` is recorded.
    pub fn should_trace(&self, operation_name: &str) -> bool {
        !self.is_ignored(operation_name) && self.sampler.try_sample()
    }

    /// Whether a trace continued from a sampled parent is recorded: yes unless its operation is
    /// ignored; it uses up the sampler's window.
    pub fn should_continue(&self, operation_name: &str) -> bool {
        if self.is_ignored(operation_name) {
            return false;
        }
        self.sampler.force_sample();
        true
    }

    /// Whether `operation_name` is ignored by suffix or by path, whatever the sampler says.
    pub fn is_ignored(&self, operation_name: &str) -> bool {
        self.ignore_suffix.is_ignored(operation_name) || self.ignore_path.is_ignored(operation_name)
    }

    /// Whether a segment that has `spans` spans may record another.
    pub fn allows_span(&self, spans: usize) -> bool {
        self.span_limit.allows(spans)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Watcher;
    use crate::watchers::tests::modify;
    use crate::watchers::{SAMPLE_N_PER_3_SECS, TRACE_IGNORE_PATH};

    #[test]
    fn ignores_then_samples() {
        let policy = TracePolicy::new();
        let registry = Registry::new();
        policy.register(&registry);
        assert_eq!(registry.watcher_count(), 4);
        assert!(policy.should_trace("/api/users"));
        assert!(!policy.should_trace("/logo.png"));
        policy.ignore_path.notify(&modify(TRACE_IGNORE_PATH, "/eureka/**")).unwrap();
        assert!(!policy.should_trace("/eureka/apps"));
        assert!(!policy.should_continue("/eureka/apps"));
        assert!(policy.should_trace("/consul/apps"));
        policy.sampler.notify(&modify(SAMPLE_N_PER_3_SECS, "1")).unwrap();
        // One per window: the first goes through (unless the window just turned), then no more.
        let admitted = (0..10).filter(|_| policy.should_trace("/api")).count();
        assert!((1..=2).contains(&admitted), "{admitted}");
        assert!(policy.allows_span(299) && !policy.allows_span(300));
    }
}
