//! A small per-thread pseudo-random generator for back-off jitter and rate sampling, so the crate
//! needs no `rand`. Not for anything that must be unpredictable.

use std::cell::Cell;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

thread_local! {
    // Seeded from the process's hash keys, which the standard library draws from the OS.
    static STATE: Cell<u64> = Cell::new(RandomState::new().hash_one(0x5eed_u64) | 1);
}

/// The next value of a xorshift64* sequence.
pub(crate) fn next_u64() -> u64 {
    STATE.with(|state| {
        let mut x = state.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        state.set(x);
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    })
}

/// A value in `0..n` (`n > 0`); the modulo bias is irrelevant at these sizes.
pub(crate) fn below(n: u64) -> u64 {
    next_u64() % n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_spread_over_the_range() {
        let mut seen = [0_u32; 10];
        for _ in 0..10_000 {
            seen[below(10) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n > 800), "{seen:?}");
    }
}
