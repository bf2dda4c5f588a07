//! The retry policy as a value: exponential back-off with equal jitter, and the small seeded
//! generator behind the jitter.
//!
//! Every loop that retries (a store session, the agent's poll, the bench's load) takes a
//! [`Backoff`] and asks it for the next wait; none computes a delay of its own. Equal jitter (half
//! of the ceiling fixed, half uniform) keeps a floor under every wait while still spreading a fleet
//! that failed at the same instant, so replicas and agents do not come back in step.

use std::cell::Cell;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::time::Duration;

/// A back-off whose bounds make no sense.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid back-off: {0}")]
pub struct InvalidBackoff(&'static str);

/// Exponential back-off with equal jitter: the `n`-th wait after a success (counting from 0) lies
/// in `[c/2, c]` where `c = min(max, min · 2ⁿ)`.
#[derive(Debug, Clone)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    attempt: u32,
    rng: Rng,
}

impl Backoff {
    /// A back-off from `min` doubling up to `max`; refuses `min > max` and a zero `max`.
    pub fn try_new(min: Duration, max: Duration) -> Result<Self, InvalidBackoff> {
        if min > max {
            return Err(InvalidBackoff("the maximum must not be less than the minimum"));
        }
        if max.is_zero() {
            return Err(InvalidBackoff("the maximum must be more than zero"));
        }
        Ok(Self { min, max, attempt: 0, rng: Rng::from_entropy() })
    }

    /// [`Self::try_new`] for bounds known to be valid; a `max` below `min` is raised to `min`.
    pub fn new(min: Duration, max: Duration) -> Self {
        Self { min, max: max.max(min), attempt: 0, rng: Rng::from_entropy() }
    }

    /// The same policy with a fixed seed, for reproducible tests.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.rng = Rng::from_seed(seed);
        self
    }

    /// The ceiling of the next wait, before jitter.
    pub fn ceiling(&self) -> Duration {
        self.min.saturating_mul(1 << self.attempt.min(16)).min(self.max)
    }

    /// The next wait, in `[ceiling/2, ceiling]`; each call doubles the ceiling up to the maximum.
    pub fn next_delay(&mut self) -> Duration {
        let ceiling = self.ceiling();
        self.attempt = self.attempt.saturating_add(1);
        let half = ceiling / 2;
        let spread = u64::try_from((ceiling - half).as_nanos()).unwrap_or(u64::MAX);
        half + Duration::from_nanos(self.rng.below(spread.saturating_add(1)))
    }

    /// How many waits were handed out since the last [`Self::reset`].
    pub fn attempts(&self) -> u32 {
        self.attempt
    }

    /// Back to the first wait, after a success.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

impl Default for Backoff {
    /// 200 ms doubling up to 30 s: the stores' reconnect policy.
    fn default() -> Self {
        Self::new(Duration::from_millis(200), Duration::from_secs(30))
    }
}

/// A xorshift64* generator: fast, seedable, and enough to spread retries and sample traces. Not
/// for anything that must be unpredictable.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator that always yields the same sequence for `seed`.
    pub fn from_seed(seed: u64) -> Self {
        // Zero is xorshift's fixed point.
        Self(if seed == 0 { 0x9E37_79B9_7F4A_7C15 } else { seed })
    }

    /// A generator seeded from the process's hash keys, which the standard library draws from the
    /// operating system.
    pub fn from_entropy() -> Self {
        Self::from_seed(RandomState::new().hash_one(0x5eed_u64))
    }

    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A value in `0..n`, or 0 when `n` is 0; the modulo bias is irrelevant at these sizes.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// A value in `[0, 1)`.
    pub fn fraction(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1_u64 << 53) as f64
    }
}

thread_local! {
    static THREAD_RNG: Cell<Option<Rng>> = const { Cell::new(None) };
}

/// A value in `0..n` from a per-thread generator seeded from entropy: for hot paths (trace
/// sampling) that cannot carry a generator of their own.
pub fn thread_below(n: u64) -> u64 {
    THREAD_RNG.with(|cell| {
        let mut rng = cell.take().unwrap_or_else(Rng::from_entropy);
        let value = rng.below(n);
        cell.set(Some(rng));
        value
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_within_equal_jitter_up_to_the_ceiling_and_reset() {
        let mut backoff = Backoff::new(Duration::from_secs(20), Duration::from_secs(120)).with_seed(7);
        for ceiling in [20, 40, 80, 120, 120, 120] {
            let ceiling = Duration::from_secs(ceiling);
            let wait = backoff.next_delay();
            assert!(wait >= ceiling / 2 && wait <= ceiling, "{ceiling:?}: {wait:?}");
        }
        assert_eq!(backoff.attempts(), 6);
        backoff.reset();
        assert_eq!(backoff.ceiling(), Duration::from_secs(20));
    }

    #[test]
    fn jitter_spreads_a_fleet_that_failed_together() {
        let waits: std::collections::BTreeSet<_> = (0..50)
            .map(|seed| Backoff::new(Duration::from_secs(1), Duration::from_secs(1)).with_seed(seed).next_delay())
            .collect();
        assert!(waits.len() > 40, "{} distinct waits of 50", waits.len());
        assert!(waits.iter().all(|w| *w >= Duration::from_millis(500)));
    }

    #[test]
    fn invalid_bounds_are_refused() {
        assert!(Backoff::try_new(Duration::from_secs(2), Duration::from_secs(1)).is_err());
        assert!(Backoff::try_new(Duration::ZERO, Duration::ZERO).is_err());
        assert!(Backoff::try_new(Duration::ZERO, Duration::from_secs(1)).is_ok());
    }

    #[test]
    fn a_seed_fixes_the_sequence_and_values_spread_over_the_range() {
        let (mut a, mut b) = (Rng::from_seed(42), Rng::from_seed(42));
        assert_eq!(
            (0..10).map(|_| a.next_u64()).collect::<Vec<_>>(),
            (0..10).map(|_| b.next_u64()).collect::<Vec<_>>()
        );
        let mut seen = [0_u32; 10];
        for _ in 0..10_000 {
            seen[thread_below(10) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n > 800), "{seen:?}");
        let f = a.fraction();
        assert!((0.0..1.0).contains(&f));
        assert_eq!(a.below(0), 0);
    }
}
