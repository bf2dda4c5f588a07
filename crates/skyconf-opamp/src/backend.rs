//! The seam: what the host of this server (skyconf's store, fleet view and rollouts, or the
//! in-memory [`crate::MemoryBackend`]) provides and learns.
//!
//! The server owns the protocol — sessions, sequence numbers, hashes, holds, transports — and
//! asks the backend three things:
//!
//! - [`Backend::remote_config`]: the configuration an agent gets, given what it said it is.
//! - [`Backend::watch`]: a receiver that changes when that answer may have changed; held HTTP
//!   polls and WebSocket connections wait on it and answer or push at once.
//! - [`Backend::report`] and [`Backend::disconnected`]: what agents report, in order, as typed
//!   events, and the end of each session (a fact tied to a lifetime: a WebSocket connection,
//!   or an HTTP agent's silence past its idle timeout).
//!
//! Every method is synchronous and called on the request's task: implementations answer from
//! memory (an `ArcSwap` of targeting tables, a channel to a fleet task) and never block.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::bits::Capabilities;
use crate::config::{ConfigHash, RemoteConfig};
use crate::uid::InstanceUid;
use crate::wire;

/// A receiver whose value changes when remote configurations may have changed.
pub type Changes = watch::Receiver<u64>;

/// The host's side of the server. See the module docs.
pub trait Backend: Send + Sync + 'static {
    /// The remote configuration `agent` is offered now. `Ok(None)`: nothing is offered (the
    /// agent keeps what it has); an empty [`RemoteConfig`] withdraws what was offered.
    /// `Err`: the answer is unknown for now (the store is not ready); the agent is throttled
    /// ([`Unavailable`]).
    fn remote_config(&self, agent: &Agent) -> Result<Option<Arc<RemoteConfig>>, Unavailable>;

    /// A receiver that changes whenever [`Self::remote_config`] may answer `agent` differently.
    /// Asked again whenever the agent's description changes; a coarse receiver (one for all
    /// agents) is correct, a finer one wakes fewer held polls.
    fn watch(&self, agent: &Agent) -> Changes;

    /// What `agent` reported, one event per changed part, in the order of [`Report`]'s
    /// variants. `agent` already reflects the message (its new description, capabilities).
    fn report(&self, agent: &Agent, report: Report<'_>);

    /// `agent`'s session ended. Called once per session.
    fn disconnected(&self, agent: &Agent, why: Disconnect);
}

/// What the server knows about an agent, as handed to the backend.
#[derive(Debug, Clone)]
pub struct Agent {
    /// Its identity.
    pub uid: InstanceUid,
    /// What it says it is; empty until its first full report.
    pub description: Arc<Description>,
    /// Its capability bits.
    pub capabilities: Capabilities,
    /// How it is connected.
    pub transport: Transport,
}

/// How an agent is connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Plain HTTP polls.
    Http,
    /// A WebSocket connection.
    WebSocket,
}

/// One part of an agent's report.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Report<'a> {
    /// A session started: the agent's first message, or its first after its previous session
    /// ended.
    Connected,
    /// Its description (identifying and non-identifying attributes) changed or was resent.
    Description(&'a Description),
    /// Its capability bits changed.
    Capabilities(Capabilities),
    /// Its health.
    Health(&'a wire::ComponentHealth),
    /// Its effective configuration.
    EffectiveConfig(&'a wire::EffectiveConfig),
    /// The status of the remote configuration it last received.
    RemoteConfigStatus(&'a ConfigStatus),
    /// A message that reports none of the above (a heartbeat, a poll): the agent is alive.
    Heartbeat,
    /// Outside messages: a poll of it is held from now (`true`), or no longer (`false`; once
    /// per `true`, unless its session ended meanwhile). The agent is alive while one is held.
    Holding(bool),
}

/// Why a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disconnect {
    /// The agent said so (`AgentDisconnect`).
    Reported,
    /// Its WebSocket connection closed or failed without `AgentDisconnect`.
    Closed,
    /// It sent nothing for longer than the idle timeout.
    Expired,
    /// A newer WebSocket connection of the same agent took over; the older one was closed.
    Replaced,
    /// The server is stopping.
    Shutdown,
}

/// `RemoteConfigStatus`, typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigStatus {
    /// The `config_hash` of the configuration the agent last received.
    pub hash: ConfigHash,
    /// What became of it.
    pub status: ApplyStatus,
    /// Why it failed, if it did.
    pub error_message: String,
}

/// `RemoteConfigStatuses`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyStatus {
    /// Not set (the agent has nothing to say yet).
    Unset,
    /// Applied.
    Applied,
    /// Being applied.
    Applying,
    /// Applying failed; see the error message.
    Failed,
}

impl ConfigStatus {
    /// The typed form of the wire message (an unknown status value reads as `Unset`).
    pub fn from_wire(status: &wire::RemoteConfigStatus) -> Self {
        let apply = match wire::RemoteConfigStatuses::try_from(status.status) {
            Ok(wire::RemoteConfigStatuses::Applied) => ApplyStatus::Applied,
            Ok(wire::RemoteConfigStatuses::Applying) => ApplyStatus::Applying,
            Ok(wire::RemoteConfigStatuses::Failed) => ApplyStatus::Failed,
            Ok(wire::RemoteConfigStatuses::Unset) | Err(_) => ApplyStatus::Unset,
        };
        Self {
            hash: ConfigHash::from_wire(status.last_remote_config_hash.clone()),
            status: apply,
            error_message: status.error_message.clone(),
        }
    }
}

/// An agent's description: the attributes it identifies itself by, and those that describe
/// where it runs (OpenTelemetry resource conventions: `service.name`, `service.instance.id`,
/// `host.name`, …).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Description {
    /// The wire message.
    pub wire: wire::AgentDescription,
}

impl Description {
    /// The value of `key`, looked up among the identifying attributes first.
    pub fn get(&self, key: &str) -> Option<&wire::any_value::Value> {
        self.wire
            .identifying_attributes
            .iter()
            .chain(&self.wire.non_identifying_attributes)
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.as_ref()?.value.as_ref())
    }

    /// The value of `key` if it is a string.
    pub fn get_str(&self, key: &str) -> Option<&str> {
        match self.get(key)? {
            wire::any_value::Value::StringValue(s) => Some(s),
            _ => None,
        }
    }

    /// Whether the agent has described itself yet.
    pub fn is_empty(&self) -> bool {
        self.wire.identifying_attributes.is_empty() && self.wire.non_identifying_attributes.is_empty()
    }
}

/// The backend cannot answer now; the agent is asked to come back later (HTTP 503 with
/// `Retry-After`, or `ServerErrorResponse` UNAVAILABLE with `RetryInfo` on a WebSocket).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unavailable: {reason}")]
pub struct Unavailable {
    /// For the log and the error message.
    pub reason: String,
    /// When to come back; `None`: the server's default retry interval.
    pub retry_after: Option<Duration>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &str, value: wire::any_value::Value) -> wire::KeyValue {
        wire::KeyValue { key: key.into(), value: Some(wire::AnyValue { value: Some(value) }) }
    }

    #[test]
    fn attributes_are_found_identifying_first() {
        use wire::any_value::Value;
        let description = Description {
            wire: wire::AgentDescription {
                identifying_attributes: vec![kv("service.name", Value::StringValue("checkout".into()))],
                non_identifying_attributes: vec![
                    kv("service.name", Value::StringValue("shadowed".into())),
                    kv("host.name", Value::StringValue("h1".into())),
                    kv("cores", Value::IntValue(4)),
                ],
            },
        };
        assert_eq!(description.get_str("service.name"), Some("checkout"));
        assert_eq!(description.get_str("host.name"), Some("h1"));
        assert_eq!(description.get("cores"), Some(&Value::IntValue(4)));
        assert_eq!(description.get_str("cores"), None);
        assert_eq!(description.get("absent"), None);
        assert!(Description::default().is_empty());
    }

    #[test]
    fn a_status_reads_from_the_wire() {
        let status = wire::RemoteConfigStatus {
            last_remote_config_hash: bytes::Bytes::from_static(b"h"),
            status: wire::RemoteConfigStatuses::Failed as i32,
            error_message: "bad".into(),
        };
        let typed = ConfigStatus::from_wire(&status);
        assert_eq!(typed.status, ApplyStatus::Failed);
        assert_eq!(typed.error_message, "bad");
        let odd = wire::RemoteConfigStatus { status: 42, ..status };
        assert_eq!(ConfigStatus::from_wire(&odd).status, ApplyStatus::Unset);
    }
}
