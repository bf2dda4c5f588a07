//! Every bound of the server: what one message, one connection, one agent and all of them
//! together may cost. Exceeding a bound never loses state; the agent is told to come back
//! later or to send less:
//!
//! | bound | over it |
//! |---|---|
//! | [`Limits::max_message_bytes`] (after decompression) | HTTP 413; WebSocket: the connection is closed (1009) |
//! | [`Limits::max_inflight_requests`] (HTTP bodies being read) | HTTP 429 + `Retry-After` |
//! | [`Limits::max_sessions`] (agents known at once) | a new agent: HTTP 503 + `Retry-After`; WebSocket: `UNAVAILABLE` + `RetryInfo` |
//! | [`Limits::max_websockets`] | the upgrade is answered 503 + `Retry-After` |
//! | [`Limits::max_connections`] (in [`crate::Opamp::serve`]) | the next connection waits in the kernel's backlog |
//! | [`Limits::max_held_polls`] | the poll is answered at once, not held |
//! | [`Limits::body_timeout`] | HTTP 408 |
//! | [`Limits::header_timeout`] | the connection is closed |

use std::time::Duration;

/// Agents one WebSocket connection may carry (a terminating proxy multiplexes several); a
/// message of one more is answered `BAD_REQUEST`.
pub const MAX_AGENTS_PER_CONNECTION: usize = 1024;

/// The server's bounds. [`Default`] suits one process serving tens of thousands of agents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest `AgentToServer`, in bytes, after gzip decompression; also the largest
    /// compressed body and WebSocket message.
    pub max_message_bytes: usize,
    /// HTTP request bodies read at once; with `max_message_bytes` this bounds the memory of
    /// requests in flight.
    pub max_inflight_requests: usize,
    /// Agents with a session at once (both transports).
    pub max_sessions: usize,
    /// WebSocket connections at once.
    pub max_websockets: usize,
    /// Connections at once, in [`crate::Opamp::serve`]'s accept loop.
    pub max_connections: usize,
    /// HTTP polls held at once.
    pub max_held_polls: usize,
    /// How long a request body may take to arrive.
    pub body_timeout: Duration,
    /// How long a connection may take to send a request's header block (also how long an idle
    /// HTTP/1 keep-alive connection stays open).
    pub header_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            // Effective configurations of large collectors run to hundreds of KiB.
            max_message_bytes: 4 << 20,
            max_inflight_requests: 256,
            max_sessions: 100_000,
            max_websockets: 50_000,
            max_connections: 60_000,
            max_held_polls: 50_000,
            body_timeout: Duration::from_secs(10),
            header_timeout: Duration::from_secs(10),
        }
    }
}
