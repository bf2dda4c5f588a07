//! An OpAMP server: OpenTelemetry's Open Agent Management Protocol (spec v0.18.0), as a crate
//! that knows nothing of where configurations come from.
//!
//! - [`wire`]: the protocol's messages, generated from `proto/opamp/opamp.proto` (ours, written
//!   from the published field numbers); [`bits`]: the capability and flag bits.
//! - [`codec`]: request and response bodies (gzip both ways, bounded decompression) and the
//!   WebSocket framing (a varint header, then the message).
//! - [`uid`]: instance uids, 16 bytes or the older ULID/UUID text form.
//! - [`config`]: remote configurations and their `config_hash`.
//! - [`auth`]: [`Authorize`], the host's check of each request's credentials (401 when refused).
//! - [`backend`]: **the seam** — the [`Backend`] trait a control plane implements: which
//!   configuration an agent gets, when that may change, and what agents report.
//! - [`memory`]: a plain in-memory [`Backend`] for tests and examples.
//! - [`session`]: per-agent state — sequence numbers, capabilities, status compression,
//!   what was offered — and the answer to each message.
//! - [`server`]: [`Opamp`], the service: an axum [`Router`](axum::Router) with both transports on
//!   one path, and an accept loop ([`Opamp::serve`]) over any listener the host wraps (TLS,
//!   connection caps). [`limits`] holds every bound; [`hold`] the opt-in held HTTP poll.
//!
//! See `docs/opamp.md` for the transports, the bounds and the seam, and
//! `docs/opamp-long-poll.md` for the held-poll proposal.

pub mod auth;
pub mod backend;
pub mod bits;
pub mod codec;
pub mod config;
pub mod hold;
mod http;
pub mod limits;
pub mod memory;
pub mod server;
pub mod session;
pub mod uid;
mod ws;

/// The OpAMP messages, generated at build time from `proto/opamp/opamp.proto`.
#[allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic, clippy::use_self, missing_debug_implementations)]
pub mod wire {
    include!(concat!(env!("OUT_DIR"), "/opamp.proto.rs"));
}

pub use auth::{Authorize, Denied};
pub use backend::{Agent, Backend, Changes, ConfigStatus, Description, Disconnect, Report, Transport, Unavailable};
pub use bits::Capabilities;
pub use config::{ConfigFile, ConfigHash, RemoteConfig};
pub use limits::Limits;
pub use memory::MemoryBackend;
pub use server::{Opamp, OpampConfig, Stats};
pub use uid::InstanceUid;

/// The spec's default port.
pub const DEFAULT_PORT: u16 = 4320;

/// The spec's default path, for both transports.
pub const DEFAULT_PATH: &str = "/v1/opamp";
