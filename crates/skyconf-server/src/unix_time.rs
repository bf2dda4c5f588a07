//! Times as the admin API shows them: milliseconds since the Unix epoch, in fields named `*_ms`.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// `time` in milliseconds since the Unix epoch (0 for a time before it).
pub(crate) fn unix_ms(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The current time in milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    unix_ms(SystemTime::now())
}

/// Milliseconds since the Unix epoch by a clock that never steps: the system clock read once,
/// when it is made, moved on by the monotonic clock. Times that gate something (a rollout's
/// bake, an agent's disappearance) are measured with it, so a step of the system clock (an NTP
/// correction) neither stretches nor skips them; it stays within the drift of Unix time since it
/// was made, so it still reads as a date and compares with other replicas' records.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SteadyClock {
    at: Instant,
    unix_ms: u64,
}

impl SteadyClock {
    /// A clock that reads the system clock's time now.
    pub(crate) fn new() -> Self {
        Self { at: Instant::now(), unix_ms: now_ms() }
    }

    /// Now, in milliseconds since the Unix epoch.
    pub(crate) fn now_ms(&self) -> u64 {
        self.unix_ms.saturating_add(u64::try_from(self.at.elapsed().as_millis()).unwrap_or(u64::MAX))
    }
}

/// `#[serde(serialize_with = "...")]` for a `SystemTime` field, as milliseconds.
pub(crate) fn serialize_ms<S: serde::Serializer>(time: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(unix_ms(*time))
}

/// `#[serde(serialize_with = "...")]` for an optional `SystemTime` field, as milliseconds.
pub(crate) fn serialize_ms_opt<S: serde::Serializer>(time: &Option<SystemTime>, s: S) -> Result<S::Ok, S::Error> {
    match time {
        Some(time) => s.serialize_some(&unix_ms(*time)),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_steady_clock_reads_as_unix_time_and_never_goes_back() {
        let clock = SteadyClock::new();
        let first = clock.now_ms();
        assert!(first.abs_diff(now_ms()) < 1000, "{first} is a Unix time");
        let mut last = first;
        for _ in 0..1000 {
            let now = clock.now_ms();
            assert!(now >= last);
            last = now;
        }
    }
}
