//! Held polls: a poll whose answer would be "unchanged" waits until the service's answer
//! changes, so a stock agent gets a change in milliseconds instead of at its next poll.
//!
//! A call is held only when the client can wait:
//! - **with a deadline** (`grpc-timeout`) of at least [`HoldOptions::min_deadline`]: until
//!   [`HoldOptions::margin`] before it, and at most [`HoldOptions::cap`] (30 s), so a long
//!   deadline never outlasts a proxy's read timeout. The Java agent sends 30 s
//!   (`collector.grpc_upstream_timeout`) and polls at a fixed rate of 20 s, so a held call ends
//!   after 28 s and the next one starts at once: a continuous long poll that never reaches the
//!   deadline. A one-off client's 5 s is answered at once.
//! - **without a deadline**: only the SkyWalking Go agent, or every client when
//!   [`NoDeadline::All`] is set, for at most [`HoldOptions::cap`]. The Go agent calls with
//!   `context.Background()` and then sleeps its interval. It is recognised by its `user-agent`:
//!   grpc-go's own `grpc-go/<version>`, which a program that does not name itself sends. Tools built
//!   on grpc-go name themselves first (`grpcurl/1.9 grpc-go/1.6`), and h2load, curl, grpcio and
//!   grpc-java send other names, so throughput benchmarks and one-off tools keep getting an
//!   immediate answer.
//! - never when the client sends `skyconf-hold: off` (`skyconf fetch` does), nor with
//!   `--disable-message-digest` (every answer is then a change anyway).
//!
//! A held call ends with the service's new command as soon as the table changes its answer, and
//! with "unchanged" at the end of its hold or when the server shuts down (before the port closes).
//! A hold is shortened by a random tenth at most ([`jittered`]): a change restarts every agent's
//! hold at once, and without it the whole fleet's holds would end in one burst 28 s later.
//! Held calls are bounded per connection, per source address (a share of the total, see
//! `crate::security::sources`) and in total; a call over any bound is answered at once, as
//! without holding.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http::HeaderName;
use http::header::USER_AGENT;
use tonic::metadata::MetadataMap;

use crate::security::connections::EdgeState;
use crate::security::sources::{Bound, default_share, increment_below};
use crate::socket::ConnectionState;

/// Which clients without a deadline are held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NoDeadline {
    /// None.
    Never,
    /// The SkyWalking Go agent (recognised by its `user-agent`).
    #[default]
    GoAgents,
    /// Every client.
    All,
}

impl<'de> serde::Deserialize<'de> for NoDeadline {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer)?.parse().map_err(serde::de::Error::custom)
    }
}

impl std::str::FromStr for NoDeadline {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "never" => Ok(Self::Never),
            "go-agents" => Ok(Self::GoAgents),
            "all" => Ok(Self::All),
            other => Err(format!("`{other}`: expected `never`, `go-agents` or `all`")),
        }
    }
}

/// When polls are held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldOptions {
    /// Whether unchanged polls are held at all.
    pub enabled: bool,
    /// The shortest deadline a call must carry to be held.
    pub min_deadline: Duration,
    /// How long before its deadline a held call is answered "unchanged".
    pub margin: Duration,
    /// Which clients without a deadline are held.
    pub without_deadline: NoDeadline,
    /// How long a call is held at most, whatever its deadline: holds must end before a proxy's
    /// read timeout (nginx: 60 s) would cut them.
    pub cap: Duration,
    /// Held calls at once, in all: a memory bound (a held call keeps about 3 KB of heap
    /// beside its connection, `tests/scale.rs`). Twice the largest fleet skyconf is sized for
    /// (100,000 agents, one held call each), so that such a fleet is held whole even while some
    /// agents briefly have a second call (a reconnect before the old connection is found dead).
    pub max_held: usize,
    /// Held calls at once on one connection (a proxy may carry many agents on one). Kept below
    /// half the connection's stream limit, so held polls never take every stream of a connection.
    pub max_held_per_connection: usize,
    /// Held calls at once from one source address ([`crate::security::sources`]); `None`: a
    /// quarter of [`Self::max_held`]. A proxy or NAT in front of many agents needs one per agent.
    pub max_held_per_source: Option<usize>,
}

impl Default for HoldOptions {
    fn default() -> Self {
        Self {
            enabled: true,
            min_deadline: Duration::from_secs(10),
            margin: Duration::from_secs(2),
            without_deadline: NoDeadline::GoAgents,
            cap: Duration::from_secs(30),
            max_held: 200_000,
            max_held_per_connection: 48,
            max_held_per_source: None,
        }
    }
}

/// The metadata key a client sends (`off`) to be answered at once.
pub const HOLD_HEADER: &str = "skyconf-hold";

impl HoldOptions {
    /// One source's share of the held calls: as configured (at most [`Self::max_held`]), or a
    /// quarter.
    pub fn source_share(&self) -> usize {
        self.max_held_per_source.map_or_else(|| default_share(self.max_held), |share| share.min(self.max_held))
    }

    /// How long a call with `metadata` may be held; `None`: answer at once.
    pub fn hold_for(&self, metadata: &MetadataMap) -> Option<Duration> {
        // Looked up by names made once: a name given as text is parsed and checked on each call.
        static HOLD: HeaderName = HeaderName::from_static(HOLD_HEADER);
        static GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");
        let headers: &http::HeaderMap = metadata.as_ref();
        if !self.enabled || headers.get(&HOLD).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"off")) {
            return None;
        }
        match headers.get(&GRPC_TIMEOUT) {
            Some(timeout) => {
                let deadline = parse_grpc_timeout(timeout.as_bytes())?;
                (deadline >= self.min_deadline).then(|| deadline.saturating_sub(self.margin).min(self.cap))
            }
            None => {
                let held = match self.without_deadline {
                    NoDeadline::Never => false,
                    NoDeadline::GoAgents => headers.get(USER_AGENT).is_some_and(|ua| is_go_agent(ua.as_bytes())),
                    NoDeadline::All => true,
                };
                held.then_some(self.cap)
            }
        }
    }
}

/// Whether `user_agent` is grpc-go's own, unnamed (see the module docs).
fn is_go_agent(user_agent: &[u8]) -> bool {
    user_agent.starts_with(b"grpc-go/")
}

/// A `grpc-timeout` value: at most 8 digits and a unit (`H`, `M`, `S`, `m`, `u`, `n`).
pub fn parse_grpc_timeout(value: &[u8]) -> Option<Duration> {
    let (&unit, digits) = value.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

/// `hold` shortened by up to a tenth, at random.
pub fn jittered(hold: Duration) -> Duration {
    let tenth = hold.as_millis() as u64 / 10;
    if tenth == 0 {
        return hold;
    }
    hold.saturating_sub(Duration::from_millis(random() % (tenth + 1)))
}

#[cfg(not(test))]
fn random() -> u64 {
    uuid::Uuid::new_v4().as_u128() as u64
}

#[cfg(test)]
thread_local! {
    /// The jitter's random state on this thread (tests seed it to replay a schedule).
    static JITTER: std::cell::Cell<u64> = std::cell::Cell::new(uuid::Uuid::new_v4().as_u128() as u64 | 1);
}

/// Makes this thread's jitter repeatable from `seed` (tests).
#[cfg(test)]
pub(crate) fn seed_jitter(seed: u64) {
    JITTER.with(|state| state.set(seed | 1));
}

#[cfg(test)]
fn random() -> u64 {
    // xorshift64*: enough to spread holds, repeatable per seed.
    JITTER.with(|state| {
        let mut x = state.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        state.set(x);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    })
}

/// The count of held calls, within the total bound.
#[derive(Debug, Default)]
pub struct HeldCount(AtomicUsize);

impl HeldCount {
    /// Held calls now.
    pub fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

/// One connection's held polls now, within its bound: the CDS slot of its
/// [`ConnectionState`].
#[derive(Debug, Default)]
pub struct HeldPolls(AtomicUsize);

impl HeldPolls {
    /// Held calls on the connection now.
    pub fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

impl crate::socket::Slot for HeldPolls {}

/// Why a poll was not held although it could have been.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Its connection holds the most it may.
    Connection,
    /// The server holds the most it may.
    Total,
    /// Its source address holds its whole share.
    Source,
}

/// One held call's place in every bound; given back when dropped.
#[derive(Debug)]
pub struct Slot<'a> {
    total: Option<&'a AtomicUsize>,
    /// The call's connection, while the slot counts in its held polls or its source's.
    connection: Option<Arc<ConnectionState>>,
    in_connection: bool,
    in_source: bool,
}

impl<'a> Slot<'a> {
    /// Takes a place in `connection`'s held polls, in its source's and in `total`, within the
    /// bounds of `options`, or says which bound is reached (the narrowest first).
    pub fn take(
        total: &'a HeldCount,
        options: &HoldOptions,
        connection: Option<&Arc<ConnectionState>>,
    ) -> Result<Self, Refusal> {
        // What is taken so far; given back by the drop if a later bound refuses.
        let mut slot = Self { total: None, connection: connection.cloned(), in_connection: false, in_source: false };
        if let Some(connection) = connection {
            if let Some(held) = connection.get::<HeldPolls>() {
                if !increment_below(&held.0, options.max_held_per_connection) {
                    return Err(Refusal::Connection);
                }
                slot.in_connection = true;
            }
            if let Some(source) = connection.get::<EdgeState>().and_then(EdgeState::source) {
                let share = options.source_share();
                if !increment_below(&source.held_polls, share) {
                    source.reached(Bound::HeldPolls, share);
                    return Err(Refusal::Source);
                }
                slot.in_source = true;
            }
        }
        if !increment_below(&total.0, options.max_held) {
            return Err(Refusal::Total);
        }
        slot.total = Some(&total.0);
        Ok(slot)
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if let Some(total) = self.total {
            total.fetch_sub(1, Ordering::Relaxed);
        }
        let Some(connection) = &self.connection else { return };
        if self.in_connection
            && let Some(held) = connection.get::<HeldPolls>()
        {
            held.0.fetch_sub(1, Ordering::Relaxed);
        }
        if self.in_source
            && let Some(source) = connection.get::<EdgeState>().and_then(EdgeState::source)
        {
            source.held_polls.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// How a held call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// The service's answer changed: the new command was sent.
    Changed,
    /// The hold ended (the deadline's margin, or the cap): "unchanged".
    Expired,
    /// The server is shutting down: "unchanged".
    Shutdown,
    /// The client cancelled the call (or its connection went) while it was held.
    Cancelled,
}

impl Release {
    /// Every release, in a fixed order.
    pub const ALL: [Self; 4] = [Self::Changed, Self::Expired, Self::Shutdown, Self::Cancelled];

    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Changed => "changed",
            Self::Expired => "expired",
            Self::Shutdown => "shutdown",
            Self::Cancelled => "cancelled",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(pairs: &[(&'static str, &'static str)]) -> MetadataMap {
        let mut map = MetadataMap::new();
        for (k, v) in pairs {
            map.insert(*k, v.parse().unwrap());
        }
        map
    }

    #[test]
    fn grpc_timeouts_are_read_in_every_unit() {
        assert_eq!(parse_grpc_timeout(b"30S"), Some(Duration::from_secs(30)));
        assert_eq!(parse_grpc_timeout(b"29999m"), Some(Duration::from_millis(29_999)));
        assert_eq!(parse_grpc_timeout(b"1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_grpc_timeout(b"2M"), Some(Duration::from_secs(120)));
        assert_eq!(parse_grpc_timeout(b"5000000u"), Some(Duration::from_secs(5)));
        assert_eq!(parse_grpc_timeout(b"7n"), Some(Duration::from_nanos(7)));
        for bad in [&b""[..], b"S", b"30", b"30s", b"123456789S", b"-1S", b"3 S"] {
            assert_eq!(parse_grpc_timeout(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn a_long_enough_deadline_is_held_until_the_margin_before_it() {
        let options = HoldOptions::default();
        assert_eq!(options.hold_for(&metadata(&[("grpc-timeout", "30S")])), Some(Duration::from_secs(28)));
        assert_eq!(options.hold_for(&metadata(&[("grpc-timeout", "1H")])), Some(Duration::from_secs(30)), "capped");
        assert_eq!(options.hold_for(&metadata(&[("grpc-timeout", "10S")])), Some(Duration::from_secs(8)));
        assert_eq!(options.hold_for(&metadata(&[("grpc-timeout", "9999m")])), None, "a one-off client's deadline");
        assert_eq!(options.hold_for(&metadata(&[("grpc-timeout", "5S")])), None);
        assert_eq!(options.hold_for(&metadata(&[("grpc-timeout", "nonsense")])), None);
        let off = metadata(&[("grpc-timeout", "30S"), ("skyconf-hold", "OFF")]);
        assert_eq!(options.hold_for(&off), None, "skyconf fetch asks for an immediate answer");
        let disabled = HoldOptions { enabled: false, ..options };
        assert_eq!(disabled.hold_for(&metadata(&[("grpc-timeout", "30S")])), None);
    }

    #[test]
    fn without_a_deadline_only_the_go_agent_is_held_by_default() {
        let options = HoldOptions::default();
        let go = metadata(&[("user-agent", "grpc-go/1.71.0")]);
        assert_eq!(options.hold_for(&go), Some(Duration::from_secs(30)));
        for tool in [
            "grpcurl/v1.9.1 grpc-go/1.61.0",
            "h2load nghttp2/1.64.0",
            "grpc-python/1.76.0 grpc-c/49.0.0",
            "grpc-java-netty/1.68.1",
        ] {
            let mut map = MetadataMap::new();
            map.insert("user-agent", tool.parse().unwrap());
            assert_eq!(options.hold_for(&map), None, "{tool}");
        }
        assert_eq!(options.hold_for(&MetadataMap::new()), None);
        let all = HoldOptions { without_deadline: NoDeadline::All, ..options };
        assert_eq!(all.hold_for(&MetadataMap::new()), Some(Duration::from_secs(30)));
        let never = HoldOptions { without_deadline: NoDeadline::Never, ..options };
        assert_eq!(never.hold_for(&go), None);
    }

    #[test]
    fn a_jittered_hold_loses_at_most_a_tenth() {
        let hold = Duration::from_secs(28);
        let holds: Vec<_> = (0..200).map(|_| jittered(hold)).collect();
        assert!(holds.iter().all(|h| *h <= hold && *h >= hold - hold / 10), "{holds:?}");
        assert!(holds.iter().any(|h| *h != holds[0]), "spread, not one value");
        assert_eq!(jittered(Duration::from_millis(5)), Duration::from_millis(5));
    }

    #[test]
    fn slots_are_bounded_per_connection_per_source_and_in_total_and_given_back() {
        use crate::security::sources::Sources;
        let total = HeldCount::default();
        let options = HoldOptions { max_held: 5, max_held_per_connection: 2, ..HoldOptions::default() };
        let state = |source: Option<&crate::security::sources::SourceConnection>| {
            Arc::new(
                ConnectionState::default()
                    .with(EdgeState::of(source.map(|s| Arc::clone(s.source()))))
                    .with(HeldPolls::default()),
            )
        };
        let sources = Sources::new(10);
        let (ip_a, ip_b) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let (place_a, place_a2, place_b) =
            (sources.admit(ip_a).unwrap(), sources.admit(ip_a).unwrap(), sources.admit(ip_b).unwrap());
        let (a, a2, b) = (state(Some(&place_a)), state(Some(&place_a2)), state(Some(&place_b)));
        assert_eq!(options.source_share(), 1, "a quarter of 5");
        let options = HoldOptions { max_held_per_source: Some(3), ..options };

        let first = Slot::take(&total, &options, Some(&a)).unwrap();
        let second = Slot::take(&total, &options, Some(&a)).unwrap();
        assert_eq!(Slot::take(&total, &options, Some(&a)).unwrap_err(), Refusal::Connection);
        let third = Slot::take(&total, &options, Some(&a2)).unwrap();
        assert_eq!(Slot::take(&total, &options, Some(&a2)).unwrap_err(), Refusal::Source, "10.0.0.1 holds its 3");
        assert_eq!(total.get(), 3, "a refused slot takes nothing");
        let fourth = Slot::take(&total, &options, Some(&b)).unwrap();
        let fifth = Slot::take(&total, &options, None).unwrap();
        assert_eq!(Slot::take(&total, &options, Some(&b)).unwrap_err(), Refusal::Total);
        drop((first, second, third, fourth, fifth));
        let counts = [
            a.get::<HeldPolls>().unwrap().get(),
            a2.get::<HeldPolls>().unwrap().get(),
            b.get::<HeldPolls>().unwrap().get(),
        ]
        .into_iter()
        .chain([&place_a.source().held_polls, &place_b.source().held_polls].map(|n| n.load(Ordering::Relaxed)))
        .collect::<Vec<_>>();
        assert_eq!((total.get(), counts), (0, vec![0; 5]));
    }
}
