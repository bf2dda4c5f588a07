//! Sampling and span-limit settings: the Java agent's `agent.sample_n_per_3_secs` (with a sampler
//! that admits n segments per 3-second window) and `agent.span_limit_per_segment`, and the Go
//! agent's `agent.sample_rate`.
//!
//! The decisions are made on the hot path: each reads atomics or an `ArcSwap`, never a lock.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::{SAMPLE_N_PER_3_SECS, SAMPLE_RATE, SPAN_LIMIT_PER_SEGMENT, TypedWatcher};

/// The sampling window of `agent.sample_n_per_3_secs`.
pub const SAMPLING_WINDOW: Duration = Duration::from_secs(3);

/// `agent.sample_n_per_3_secs`: at most n segments are sampled per 3 seconds; n ≤ 0 turns
/// sampling off (every segment is sampled). Java default `-1`.
#[derive(Debug)]
pub struct SampleNPer3Secs {
    rate: TypedWatcher<i32>,
    origin: Instant,
    /// The current window's index (high 32 bits) and the segments admitted in it (low 32 bits),
    /// in one word so a decision is one compare-and-swap.
    window: AtomicU64,
}

impl Default for SampleNPer3Secs {
    /// The Java agent's default, `-1`: sampling off.
    fn default() -> Self {
        Self::new(-1)
    }
}

fn pack(window: u32, count: u32) -> u64 {
    (u64::from(window) << 32) | u64::from(count)
}

fn unpack(word: u64) -> (u32, u32) {
    ((word >> 32) as u32, word as u32)
}

impl SampleNPer3Secs {
    /// A sampler with the local default `n`.
    pub fn new(default: i32) -> Self {
        Self {
            rate: TypedWatcher::new(SAMPLE_N_PER_3_SECS, default),
            origin: Instant::now(),
            window: AtomicU64::new(0),
        }
    }

    /// The current n; ≤ 0 means sampling is off.
    pub fn rate(&self) -> i32 {
        self.rate.with(|n| *n)
    }

    /// Whether to sample a new segment now.
    pub fn try_sample(&self) -> bool {
        // Off is the common case: no clock read then.
        self.rate() <= 0 || self.try_sample_at(Instant::now())
    }

    /// Whether to sample a new segment at `now` (for tests and callers with their own clock).
    pub fn try_sample_at(&self, now: Instant) -> bool {
        let Ok(limit) = u32::try_from(self.rate()) else {
            return true;
        };
        if limit == 0 {
            return true;
        }
        let index = self.window_index(now);
        let mut word = self.window.load(Ordering::Relaxed);
        loop {
            let (window, count) = unpack(word);
            let next = if window != index {
                pack(index, 1)
            } else if count < limit {
                pack(window, count + 1)
            } else {
                return false;
            };
            match self.window.compare_exchange_weak(word, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(actual) => word = actual,
            }
        }
    }

    /// Counts a segment sampled regardless of the limit (one continuing a sampled trace from
    /// another process), so it uses up the window as the Java agent's forced sampling does.
    pub fn force_sample(&self) {
        self.force_sample_at(Instant::now());
    }

    /// [`Self::force_sample`] at `now`.
    pub fn force_sample_at(&self, now: Instant) {
        if self.rate() <= 0 {
            return;
        }
        let index = self.window_index(now);
        let _ = self.window.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |word| {
            let (window, count) = unpack(word);
            Some(if window == index { pack(window, count.saturating_add(1)) } else { pack(index, 1) })
        });
    }

    fn window_index(&self, now: Instant) -> u32 {
        // Wrapping after 400 years of uptime is harmless: only equality matters.
        (now.saturating_duration_since(self.origin).as_secs() / SAMPLING_WINDOW.as_secs()) as u32
    }
}

watch_through!(SampleNPer3Secs => rate);

/// `agent.span_limit_per_segment`: the most spans one segment records. Java default `300`.
#[derive(Debug)]
pub struct SpanLimit {
    limit: TypedWatcher<i32>,
}

impl Default for SpanLimit {
    /// The Java agent's default, 300.
    fn default() -> Self {
        Self::new(300)
    }
}

impl SpanLimit {
    /// A limit with the local default `limit`.
    pub fn new(default: i32) -> Self {
        Self { limit: TypedWatcher::new(SPAN_LIMIT_PER_SEGMENT, default) }
    }

    /// The current limit.
    pub fn limit(&self) -> i32 {
        self.limit.with(|n| *n)
    }

    /// Whether a segment that already has `spans` spans may record another.
    pub fn allows(&self, spans: usize) -> bool {
        usize::try_from(self.limit()).is_ok_and(|limit| spans < limit)
    }
}

watch_through!(SpanLimit => limit);

/// A float printed as Go's `%f` prints it (six decimals), which is what the Go agent compares a
/// new `agent.sample_rate` with.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct GoFloat(pub f64);

impl fmt::Display for GoFloat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.6}", self.0)
    }
}

impl FromStr for GoFloat {
    type Err = std::num::ParseFloatError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse().map(Self)
    }
}

/// `agent.sample_rate`, the Go agent's setting: the fraction of traces sampled. ≤ 0 samples
/// none, ≥ 1 samples all, anything between samples `⌊rate × 100⌋` in 100 at random. Go default
/// `1`. Its `value()` prints six decimals as Go does, so `0.5` from the server differs from the
/// held `0.500000` and is delivered again with every new configuration (harmless).
#[derive(Debug)]
pub struct SampleRate {
    rate: TypedWatcher<GoFloat>,
}

impl Default for SampleRate {
    /// The Go agent's default, 1: sample everything.
    fn default() -> Self {
        Self::new(1.0)
    }
}

impl SampleRate {
    /// A sampler with the local default `rate`.
    pub fn new(default: f64) -> Self {
        Self { rate: TypedWatcher::new(SAMPLE_RATE, GoFloat(default)) }
    }

    /// The current rate.
    pub fn rate(&self) -> f64 {
        self.rate.with(|r| r.0)
    }

    /// Whether to sample a new trace.
    pub fn try_sample(&self) -> bool {
        let rate = self.rate();
        if rate >= 1.0 {
            true
        } else if rate > 0.0 {
            // Truncated, as Go's int() truncates.
            let threshold = (rate * 100.0) as u64;
            skyconf_core::backoff::thread_below(100) < threshold
        } else {
            // ≤ 0, and NaN.
            false
        }
    }
}

watch_through!(SampleRate => rate);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Watcher;
    use crate::watchers::tests::{delete, modify};

    #[test]
    fn n_per_window_then_a_new_window() {
        let s = SampleNPer3Secs::default();
        let t0 = s.origin;
        // Off by default (-1): everything sampled.
        assert!((0..100).all(|_| s.try_sample_at(t0)));
        s.notify(&modify(SAMPLE_N_PER_3_SECS, "2")).unwrap();
        assert_eq!(s.rate(), 2);
        let t = t0 + Duration::from_secs(3);
        assert!(s.try_sample_at(t));
        assert!(s.try_sample_at(t + Duration::from_millis(2999)));
        assert!(!s.try_sample_at(t + Duration::from_millis(2999)));
        // The next window admits two more.
        let t = t + SAMPLING_WINDOW;
        assert!(s.try_sample_at(t));
        s.force_sample_at(t);
        assert!(!s.try_sample_at(t));
        // 0 turns sampling off again; DELETE restores the local default.
        s.notify(&modify(SAMPLE_N_PER_3_SECS, "0")).unwrap();
        assert!(s.try_sample_at(t));
        s.notify(&modify(SAMPLE_N_PER_3_SECS, "1")).unwrap();
        s.notify(&delete(SAMPLE_N_PER_3_SECS)).unwrap();
        assert_eq!(s.rate(), -1);
        assert_eq!(s.value().as_deref(), Some("-1"));
    }

    #[test]
    fn concurrent_sampling_admits_exactly_n() {
        let s = std::sync::Arc::new(SampleNPer3Secs::new(1000));
        let now = s.origin + Duration::from_secs(1);
        let admitted: usize = std::thread::scope(|scope| {
            let handles: Vec<_> =
                (0..4).map(|_| scope.spawn(|| (0..1000).filter(|_| s.try_sample_at(now)).count())).collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(admitted, 1000);
    }

    #[test]
    fn span_limit_follows_the_server_and_its_default() {
        let l = SpanLimit::default();
        assert_eq!(l.limit(), 300);
        l.notify(&modify(SPAN_LIMIT_PER_SEGMENT, "400")).unwrap();
        assert_eq!(l.limit(), 400);
        assert!(l.allows(399) && !l.allows(400));
        l.notify(&modify(SPAN_LIMIT_PER_SEGMENT, "4.5")).unwrap();
        assert_eq!(l.limit(), 400);
        l.notify(&delete(SPAN_LIMIT_PER_SEGMENT)).unwrap();
        assert_eq!(l.limit(), 300);
    }

    #[test]
    fn sample_rate_has_go_semantics() {
        let r = SampleRate::default();
        assert_eq!(r.value().as_deref(), Some("1.000000"));
        assert!((0..100).all(|_| r.try_sample()));
        r.notify(&modify(SAMPLE_RATE, "0")).unwrap();
        assert!((0..100).all(|_| !r.try_sample()));
        r.notify(&modify(SAMPLE_RATE, "0.5")).unwrap();
        assert_eq!(r.value().as_deref(), Some("0.500000"));
        let sampled = (0..10_000).filter(|_| r.try_sample()).count();
        assert!((4_000..6_000).contains(&sampled), "{sampled}");
        r.notify(&modify(SAMPLE_RATE, "half")).unwrap();
        assert_eq!(r.rate(), 0.5);
        r.notify(&delete(SAMPLE_RATE)).unwrap();
        assert_eq!(r.rate(), 1.0);
    }
}
