//! Percentiles of measured delays, as the propagation tests report and judge them.

use std::fmt;
use std::time::Duration;

/// Nearest-rank percentiles of a set of delays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Percentiles {
    /// The median.
    pub p50: Duration,
    /// The 90th percentile.
    pub p90: Duration,
    /// The 99th percentile.
    pub p99: Duration,
    /// The largest.
    pub max: Duration,
}

/// Sorts `samples` and takes their percentiles; `samples` must not be empty.
pub fn percentiles(samples: &mut [Duration]) -> Percentiles {
    assert!(!samples.is_empty(), "no samples");
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1];
    Percentiles { p50: at(0.50), p90: at(0.90), p99: at(0.99), max: samples[samples.len() - 1] }
}

impl fmt::Display for Percentiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "p50 {:?}, p90 {:?}, p99 {:?}, max {:?}", self.p50, self.p90, self.p99, self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let mut samples: Vec<_> = (1..=50).rev().map(Duration::from_millis).collect();
        let p = percentiles(&mut samples);
        assert_eq!((p.p50, p.p90, p.p99, p.max), (ms(25), ms(45), ms(50), ms(50)));
        assert_eq!(percentiles(&mut [ms(7)]).p99, ms(7));
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }
}
