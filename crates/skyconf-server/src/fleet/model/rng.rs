//! The model suite's seeded random source, so that a schedule replays from its seed.

use std::time::Duration;

/// A seeded random source (core's xorshift64*), so that a schedule replays from its seed.
pub(super) struct Rng(skyconf_core::backoff::Rng);

impl Rng {
    pub(super) fn new(seed: u64) -> Self {
        Self(skyconf_core::backoff::Rng::from_seed(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1))
    }

    pub(super) fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.0.below(n.max(1))
    }

    pub(super) fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub(super) fn millis(&mut self, up_to: Duration) -> Duration {
        Duration::from_millis(self.below(up_to.as_millis() as u64 + 1))
    }
}
