//! The agent side of SkyWalking's configuration discovery (CDS) for Rust services.
//!
//! A service registers [`Watcher`]s for the settings it can change at run time, then runs an
//! [`Agent`]: it polls `skywalking.v3.ConfigurationDiscoveryService/fetchConfigurations` on an
//! OAP (or on skyconf) and tells the watchers what changed, with the Java agent's semantics:
//!
//! - every poll sends the service name and the digest (`uuid`) of the last configuration applied;
//!   the server answers "no change" or one `ConfigurationDiscoveryCommand`;
//! - a command is applied to **every registered key**: the command's value, or blank when the
//!   command does not carry the key. Blank means DELETE (only to a watcher that holds a value, which
//!   then returns to its local default); a value that differs from the watcher's means MODIFY;
//! - the uuid is stored only once every watcher has applied the command; a watcher error leaves it
//!   unchanged so the next poll retries; a command that repeats a key is rejected whole;
//! - a command whose `SerialNumber` is among the last 64 seen is ignored;
//! - the uuid is forgotten when the number of registered watchers changes, so a watcher registered
//!   late still receives the current value although the configuration did not change.
//!
//! Two deliberate differences from the Java agent: the first poll happens when the agent starts
//! (the Java agent waits one interval, 20 s by default; the Go agent polls at once, as this crate
//! does), and a failing server is retried with exponential back-off and jitter instead of every
//! interval (see [`agent`] for what each gRPC status means).
//!
//! An agent may also say which instance it is ([`AgentOptions::instance`],
//! [`AgentOptions::property`]): it then sends `ManagementService/reportInstanceProperties` before
//! its first poll and `keepAlive` every 30 s, on the same gRPC channel as its polls, as the Java
//! agent does. A server that keys agents by connection (skyconf's fleet status, an OAP) then shows
//! the polls under the instance and its properties (see [`identity`]). A failing management call
//! is logged and never stops the polls.
//!
//! ```no_run
//! use std::sync::Arc;
//! use skyconf_agent::{Agent, AgentOptions, GrpcTransport, Registry};
//! use skyconf_agent::watchers::{IgnorePath, SampleNPer3Secs};
//!
//! # async fn example() -> Result<(), skyconf_agent::AgentError> {
//! let registry = Registry::new();
//! let sampler = Arc::new(SampleNPer3Secs::default());
//! let ignore = Arc::new(IgnorePath::default());
//! registry.register(sampler.clone());
//! registry.register(ignore.clone());
//!
//! let transport = GrpcTransport::lazy("oap:11800")?;
//! let options = AgentOptions::new("mall-order-service").instance("order-1").property("zone", "eu-1");
//! let agent = Agent::new(options, registry, transport).spawn();
//!
//! // On the hot path, lock-free:
//! if !ignore.is_ignored("/health") && sampler.try_sample() { /* trace it */ }
//! # agent.stop().await;
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

pub mod agent;
pub mod identity;
pub mod policy;
pub mod registry;
pub mod service_name;
pub mod transport;
pub mod watchers;

pub use agent::{Agent, AgentHandle, AgentOptions, AgentStatus, CommandOutcome, PollReport};
pub use identity::ManagementCall;
pub use policy::TracePolicy;
pub use registry::{ChangeEvent, EventType, Registry, Watcher, WatcherError, WatcherKind};
pub use service_name::service_name;
pub use skyconf_core::codec::{DiscoveryCommand, DuplicateKey};
pub use transport::{GrpcTransport, PollError, Transport};

/// Errors of this crate that are not per-poll outcomes.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The server address is not a valid URI.
    #[error("invalid server address `{addr}`")]
    InvalidAddress {
        /// The address as given.
        addr: String,
        /// Why tonic refused it.
        #[source]
        source: tonic::transport::Error,
    },
    /// The authentication token cannot be sent as gRPC metadata.
    #[error("the authentication token is not valid gRPC metadata")]
    InvalidToken,
    /// The agent version cannot be sent as gRPC metadata.
    #[error("the agent version is not valid gRPC metadata (printable ASCII only)")]
    InvalidAgentVersion,
}
