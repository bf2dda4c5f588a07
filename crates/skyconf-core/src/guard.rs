//! The fleet-reset guard: decides whether a new table would reset most of the fleet at once.
//!
//! A table "resets the fleet" when it has no services while the served one has some, or when it
//! drops at least `drop_percent` % of the served services (and at least `min_dropped` of them).
//! The server holds such a change when it comes from a store (a wiped or restored etcd, a
//! truncated file) instead of installing it silently; see `skyconf_server::reload`.

use std::fmt;

use crate::AgentConfigurations;

/// When a change counts as resetting the fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResetPolicy {
    /// Share of the served services (in percent) a change must drop to count; `0` turns the
    /// guard off.
    pub drop_percent: u8,
    /// A change must drop at least this many services to count (emptying always counts).
    pub min_dropped: usize,
}

impl Default for ResetPolicy {
    fn default() -> Self {
        Self { drop_percent: 50, min_dropped: 2 }
    }
}

impl ResetPolicy {
    /// A policy that never holds anything.
    pub const OFF: Self = Self { drop_percent: 0, min_dropped: 0 };

    /// Whether the guard is on.
    pub fn enabled(&self) -> bool {
        self.drop_percent > 0
    }
}

/// Why a change would reset the fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResetReason {
    /// The new table has no services; the served one has `before`.
    Emptied {
        /// Services served now.
        before: usize,
    },
    /// The new table drops `dropped` of the `before` served services.
    Shrunk {
        /// Services served now.
        before: usize,
        /// Services in the new table.
        after: usize,
        /// Served services missing from the new table.
        dropped: usize,
    },
}

impl fmt::Display for ResetReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Emptied { before } => write!(f, "the new document has no services (served: {before})"),
            Self::Shrunk { before, after, dropped } => {
                write!(f, "the new document drops {dropped} of the {before} served services ({after} left)")
            }
        }
    }
}

/// Whether installing `after` in place of `before` would reset most of the fleet at once.
pub fn would_reset_the_fleet(
    before: &AgentConfigurations,
    after: &AgentConfigurations,
    policy: ResetPolicy,
) -> Option<ResetReason> {
    if !policy.enabled() || before.is_empty() {
        return None;
    }
    if after.is_empty() {
        return Some(ResetReason::Emptied { before: before.len() });
    }
    let dropped = before.services().filter(|s| after.get(s.name()).is_none()).count();
    // dropped / before >= percent / 100, in integers.
    let share = dropped.saturating_mul(100) >= before.len().saturating_mul(usize::from(policy.drop_percent));
    (share && dropped >= policy.min_dropped.max(1)).then_some(ResetReason::Shrunk {
        before: before.len(),
        after: after.len(),
        dropped,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(services: &[&str]) -> AgentConfigurations {
        let mut text = String::from("configurations:\n");
        for s in services {
            text.push_str(&format!("  {s}: {{k: v}}\n"));
        }
        crate::read(&text).unwrap()
    }

    #[test]
    fn emptying_a_served_table_resets_the_fleet() {
        let reason = would_reset_the_fleet(&table(&["a"]), &table(&[]), ResetPolicy::default());
        assert_eq!(reason, Some(ResetReason::Emptied { before: 1 }));
    }

    #[test]
    fn dropping_half_and_at_least_two_services_resets_the_fleet() {
        let p = ResetPolicy::default();
        assert!(would_reset_the_fleet(&table(&["a", "b", "c", "d"]), &table(&["a", "b"]), p).is_some());
        assert!(would_reset_the_fleet(&table(&["a", "b", "c", "d"]), &table(&["a", "b", "c"]), p).is_none());
        assert!(would_reset_the_fleet(&table(&["a", "b"]), &table(&["a"]), p).is_none(), "only one dropped");
        // Renaming every service drops all of them, even though the count stays.
        assert!(would_reset_the_fleet(&table(&["a", "b"]), &table(&["x", "y"]), p).is_some());
    }

    #[test]
    fn nothing_is_held_from_an_empty_table_or_with_the_guard_off() {
        assert!(would_reset_the_fleet(&table(&[]), &table(&[]), ResetPolicy::default()).is_none());
        assert!(would_reset_the_fleet(&table(&["a", "b"]), &table(&[]), ResetPolicy::OFF).is_none());
    }
}
