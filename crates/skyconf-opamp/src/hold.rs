//! Held HTTP polls, opt-in per client (see `docs/opamp-long-poll.md`).
//!
//! A client that can wait declares it with the request header `OpAMP-Hold: <seconds>`: it
//! promises that its HTTP timeout is longer than that. The server may then keep a poll that
//! carries nothing (a heartbeat) open until there is something for the agent — a changed
//! remote configuration — or until the hold ends, whichever comes first. Every response to a
//! request that asked carries `OpAMP-Hold: <seconds>` too: the longest hold this server grants
//! that client (0: none), so a client learns whether holding is understood at all. A client
//! without the header (the PyPI client, whose timeout is 1 s) is answered at once, as the spec
//! has it.

use std::time::Duration;

use http::HeaderMap;

/// The request and response header.
pub const HEADER: &str = "opamp-hold";

/// The longest hold a client may ask for; longer asks are read as this.
pub const MAX_ASK: Duration = Duration::from_secs(3600);

/// The hold a request asks for: `None` without the header or with a value that is not a whole
/// number of seconds above 0.
pub fn asked(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(HEADER)?.to_str().ok()?.trim();
    let seconds: u64 = value.parse().ok().filter(|&s| s > 0)?;
    Some(Duration::from_secs(seconds).min(MAX_ASK))
}

/// The hold granted: the ask, within the server's maximum (`None` or zero: holds are off).
pub fn granted(asked: Duration, server_max: Option<Duration>) -> Duration {
    server_max.map_or(Duration::ZERO, |max| asked.min(max))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(HEADER, value.parse().unwrap());
        h
    }

    #[test]
    fn the_ask_is_whole_seconds_above_zero() {
        assert_eq!(asked(&HeaderMap::new()), None);
        assert_eq!(asked(&with("20")), Some(Duration::from_secs(20)));
        assert_eq!(asked(&with(" 5 ")), Some(Duration::from_secs(5)));
        assert_eq!(asked(&with("0")), None);
        assert_eq!(asked(&with("1.5")), None);
        assert_eq!(asked(&with("-3")), None);
        assert_eq!(asked(&with("99999")), Some(MAX_ASK));
    }

    #[test]
    fn the_grant_is_within_the_server_maximum() {
        let thirty = Some(Duration::from_secs(30));
        assert_eq!(granted(Duration::from_secs(20), thirty), Duration::from_secs(20));
        assert_eq!(granted(Duration::from_secs(600), thirty), Duration::from_secs(30));
        assert_eq!(granted(Duration::from_secs(20), None), Duration::ZERO);
    }
}
