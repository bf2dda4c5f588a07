//! Times as the admin API shows them: milliseconds since the Unix epoch, in fields named `*_ms`.

use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// `time` in milliseconds since the Unix epoch (0 for a time before it).
pub(crate) fn unix_ms(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The current time in milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    unix_ms(SystemTime::now())
}

/// Now in milliseconds since the Unix epoch by a clock that never steps: the system clock read
/// once per process, moved on by the monotonic clock. Times that gate something (a rollout's
/// bake, an agent's disappearance) are measured with it, so a step of the system clock (an NTP
/// correction) neither stretches nor skips them; it stays within the process's drift of Unix
/// time, so it still reads as a date and compares with other replicas' records.
pub(crate) fn steady_now_ms() -> u64 {
    static ANCHOR: OnceLock<(Instant, u64)> = OnceLock::new();
    let (at, unix) = ANCHOR.get_or_init(|| (Instant::now(), now_ms()));
    unix.saturating_add(u64::try_from(at.elapsed().as_millis()).unwrap_or(u64::MAX))
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
