//! Sessions: the protocol's state per agent, and the answer to each message.
//!
//! A session is keyed by [`InstanceUid`] and holds what status compression lets an agent leave
//! out: its last sequence number, capabilities and description, the `config_hash` it last
//! reported and the one last sent to it. Each `AgentToServer` is answered from it:
//!
//! - **Sequence numbers.** A message whose `sequence_num` is neither the previous one plus 1
//!   nor a repeat of the previous one (a retried request), or the first message of a session,
//!   means the server may lack state: unless the message carries the agent's description (a
//!   full report), the answer sets `ReportFullState`. Until that full report arrives no
//!   configuration is offered, so an agent that already has the current one is not sent it
//!   again after a server restart.
//! - **Remote configuration.** Offered to agents with `AcceptsRemoteConfig` when its hash
//!   differs both from the hash the agent last reported and from the hash last sent in this
//!   session. A report of any other hash than the one sent (the offer did not arrive, or the
//!   agent went back) makes the current configuration eligible again, once.
//! - **Heartbeat interval.** Told once per session, in `connection_settings.opamp`, to agents
//!   with `ReportsHeartbeat` and without `AcceptsOpAMPConnectionSettings` (an agent with the
//!   latter would take the offer as new connection settings, and the offer carries no
//!   endpoint).
//! - **Instance uid.** An agent that sets `RequestInstanceUid` is given a new UUID v7 in
//!   `agent_identification`, and its session is kept under that uid.
//! - **End.** `AgentDisconnect`, the end of the WebSocket connection that owns the session, or
//!   (HTTP) no message for the idle timeout while no poll is held. A newer WebSocket connection
//!   of the same agent takes the session over and the older connection is closed; the session
//!   goes on.
//!
//! The map is behind one `std::sync::Mutex`, held for map operations only: the backend is
//! called after it is released.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backend::{Agent, Backend, ConfigStatus, Description, Disconnect, Report, Transport, Unavailable};
use crate::bits::{self, Capabilities};
use crate::config::ConfigHash;
use crate::uid::InstanceUid;
use crate::wire;

/// The protocol's settings (from [`crate::OpampConfig`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    pub(crate) heartbeat: Option<Duration>,
    pub(crate) retry_after: Duration,
    pub(crate) max_sessions: usize,
    pub(crate) idle_timeout: Duration,
}

/// The answer to one message.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The message to send back.
    pub message: wire::ServerToAgent,
    /// What kind of answer it is.
    pub outcome: Outcome,
}

/// What kind of answer a message got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Processed. `holdable`: the message was a bare heartbeat and the answer carries nothing
    /// for the agent, so a held HTTP poll may wait for something.
    Processed {
        /// The agent (its new uid if the server assigned one).
        uid: InstanceUid,
        /// See above.
        holdable: bool,
    },
    /// Processed, and the agent said it is leaving.
    Disconnected,
    /// Malformed; the message carries `BAD_REQUEST`.
    BadRequest,
    /// Not processed; the message carries `UNAVAILABLE` with `RetryInfo`.
    Unavailable {
        /// When to come back.
        retry_after: Duration,
    },
}

/// A WebSocket connection, as the sessions it owns know it.
#[derive(Debug, Clone)]
pub(crate) struct Connection {
    pub(crate) id: u64,
    /// Cancelled when a newer connection of the same agent takes its session over.
    pub(crate) evicted: CancellationToken,
}

/// Which parts of a session a message changed.
#[derive(Debug, Clone, Copy)]
struct Changed {
    connected: bool,
    description: bool,
    capabilities: bool,
}

struct Session {
    /// The `instance_uid` field as the agent sends it, for messages the server starts.
    wire_uid: Bytes,
    last_seq: Option<u64>,
    capabilities: Capabilities,
    description: Arc<Description>,
    reported: Option<ConfigHash>,
    sent: Option<ConfigHash>,
    heartbeat_told: bool,
    transport: Transport,
    connection: Option<Connection>,
    last_seen: Instant,
    holding: usize,
}

impl Session {
    fn agent(&self, uid: InstanceUid) -> Agent {
        Agent {
            uid,
            description: Arc::clone(&self.description),
            capabilities: self.capabilities,
            transport: self.transport,
        }
    }
}

/// The sessions and the backend: the protocol without I/O.
pub(crate) struct Protocol {
    sessions: Mutex<HashMap<InstanceUid, Session>>,
    backend: Arc<dyn Backend>,
    settings: Settings,
}

impl std::fmt::Debug for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Protocol").field("sessions", &self.len()).field("settings", &self.settings).finish()
    }
}

impl Protocol {
    pub(crate) fn new(backend: Arc<dyn Backend>, settings: Settings) -> Self {
        Self { sessions: Mutex::new(HashMap::new()), backend, settings }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<InstanceUid, Session>> {
        // A panic while the lock is held leaves the map consistent (every update is a field
        // assignment), so a poisoned lock is still usable.
        self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Agents with a session.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    pub(crate) fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// The server's capability bits.
    pub(crate) fn capabilities(&self) -> u64 {
        let mut caps =
            bits::server::ACCEPTS_STATUS | bits::server::OFFERS_REMOTE_CONFIG | bits::server::ACCEPTS_EFFECTIVE_CONFIG;
        if self.settings.heartbeat.is_some() {
            caps |= bits::server::OFFERS_CONNECTION_SETTINGS;
        }
        caps
    }

    /// Answers one message that arrived over `transport` (on `connection` for a WebSocket).
    pub(crate) fn answer(
        &self,
        msg: &wire::AgentToServer,
        transport: Transport,
        connection: Option<&Connection>,
    ) -> Answer {
        let raw_uid = msg.instance_uid.clone();
        let uid = match InstanceUid::from_wire(&raw_uid) {
            Ok(uid) => uid,
            Err(error) => return bad_request(raw_uid, &error.to_string()),
        };
        let assigned = (msg.flags & bits::REQUEST_INSTANCE_UID != 0).then(InstanceUid::generate);
        let uid = assigned.unwrap_or(uid);
        let now = Instant::now();

        let carries_state = msg.agent_description.is_some()
            || msg.health.is_some()
            || msg.effective_config.is_some()
            || msg.remote_config_status.is_some()
            || msg.agent_disconnect.is_some()
            || msg.flags != 0;
        let status = msg.remote_config_status.as_ref().map(ConfigStatus::from_wire);
        let changes;
        let (agent, ask_full, reported, sent, tell_heartbeat) = {
            let mut map = self.lock();
            let new = !map.contains_key(&uid);
            if new && map.len() >= self.settings.max_sessions {
                drop(map);
                tracing::warn!(%uid, max_sessions = self.settings.max_sessions, "An OpAMP agent is throttled: the session limit is reached.");
                return unavailable(raw_uid, self.settings.retry_after, "the server has as many agents as it can hold");
            }
            let session = map.entry(uid).or_insert_with(|| Session {
                wire_uid: assigned.map_or_else(|| raw_uid.clone(), |a| Bytes::copy_from_slice(a.as_bytes())),
                last_seq: None,
                capabilities: Capabilities::default(),
                description: Arc::default(),
                reported: None,
                sent: None,
                heartbeat_told: false,
                transport,
                connection: None,
                last_seen: now,
                holding: 0,
            });
            if let Some(conn) = connection {
                match &session.connection {
                    Some(owner) if owner.id == conn.id => {}
                    Some(owner) => {
                        tracing::info!(%uid, "A newer WebSocket connection of an OpAMP agent takes its session over.");
                        owner.evicted.cancel();
                        session.connection = Some(conn.clone());
                    }
                    None => session.connection = Some(conn.clone()),
                }
            }
            session.transport = transport;
            session.last_seen = now;

            let full_report = msg.agent_description.is_some();
            let gap = session
                .last_seq
                .is_none_or(|last| msg.sequence_num != last.wrapping_add(1) && msg.sequence_num != last);
            let ask_full = gap && !full_report;
            session.last_seq = Some(msg.sequence_num);

            let mut description_changed = false;
            if let Some(description) = &msg.agent_description
                && (new || session.description.wire != *description)
            {
                session.description = Arc::new(Description { wire: description.clone() });
                description_changed = true;
            }
            let capabilities_changed = msg.capabilities != 0 && msg.capabilities != session.capabilities.0;
            if capabilities_changed {
                session.capabilities = Capabilities(msg.capabilities);
            }
            if let Some(status) = &status {
                if session.sent.as_ref() != Some(&status.hash) {
                    session.sent = None;
                }
                session.reported = Some(status.hash.clone());
            }
            let tell_heartbeat = self.settings.heartbeat.is_some()
                && !session.heartbeat_told
                && session.capabilities.has(bits::agent::REPORTS_HEARTBEAT)
                && !session.capabilities.has(bits::agent::ACCEPTS_OPAMP_CONNECTION_SETTINGS);
            if tell_heartbeat {
                session.heartbeat_told = true;
            }
            changes = Changed { connected: new, description: description_changed, capabilities: capabilities_changed };
            let agent = session.agent(uid);
            (agent, ask_full, session.reported.clone(), session.sent.clone(), tell_heartbeat)
        };

        // Reports, outside the lock, in the order `Report` lists them.
        if changes.connected {
            self.backend.report(&agent, Report::Connected);
        }
        if changes.description {
            self.backend.report(&agent, Report::Description(&agent.description));
        }
        if changes.capabilities {
            self.backend.report(&agent, Report::Capabilities(agent.capabilities));
        }
        if let Some(health) = &msg.health {
            self.backend.report(&agent, Report::Health(health));
        }
        if let Some(effective) = &msg.effective_config {
            self.backend.report(&agent, Report::EffectiveConfig(effective));
        }
        if let Some(status) = &status {
            self.backend.report(&agent, Report::RemoteConfigStatus(status));
        }
        let said_something = changes.connected
            || changes.description
            || changes.capabilities
            || msg.health.is_some()
            || msg.effective_config.is_some()
            || status.is_some();
        if !said_something && msg.agent_disconnect.is_none() {
            self.backend.report(&agent, Report::Heartbeat);
        }

        let mut message = wire::ServerToAgent {
            instance_uid: raw_uid,
            capabilities: self.capabilities(),
            flags: if ask_full { bits::REPORT_FULL_STATE } else { 0 },
            agent_identification: assigned
                .map(|a| wire::AgentIdentification { new_instance_uid: Bytes::copy_from_slice(a.as_bytes()) }),
            ..Default::default()
        };

        if msg.agent_disconnect.is_some() {
            self.end(uid, connection.map(|c| c.id), Disconnect::Reported);
            return Answer { message, outcome: Outcome::Disconnected };
        }

        if !ask_full {
            match self.offer(&agent, reported.as_ref(), sent.as_ref()) {
                Ok(Some(config)) => message.remote_config = Some(config),
                Ok(None) => {}
                Err(unavailable) => {
                    let retry_after = unavailable.retry_after.unwrap_or(self.settings.retry_after);
                    tracing::info!(%uid, reason = %unavailable.reason, "An OpAMP agent is throttled: the backend is unavailable.");
                    let mut answer =
                        crate::session::unavailable(message.instance_uid, retry_after, &unavailable.reason);
                    answer.message.capabilities = message.capabilities;
                    return answer;
                }
            }
        }
        if tell_heartbeat && let Some(interval) = self.settings.heartbeat {
            message.connection_settings = Some(heartbeat_offer(interval));
        }

        let holdable = !carries_state
            && message.remote_config.is_none()
            && message.connection_settings.is_none()
            && message.flags == 0
            && message.agent_identification.is_none();
        Answer { message, outcome: Outcome::Processed { uid, holdable } }
    }

    /// The remote configuration to send `agent` now, if any; records it as sent.
    fn offer(
        &self,
        agent: &Agent,
        reported: Option<&ConfigHash>,
        sent: Option<&ConfigHash>,
    ) -> Result<Option<wire::AgentRemoteConfig>, Unavailable> {
        if !agent.capabilities.has(bits::agent::ACCEPTS_REMOTE_CONFIG) {
            return Ok(None);
        }
        let Some(config) = self.backend.remote_config(agent)? else { return Ok(None) };
        let hash = config.hash();
        if reported == Some(hash) || sent == Some(hash) {
            return Ok(None);
        }
        if let Some(session) = self.lock().get_mut(&agent.uid) {
            session.sent = Some(hash.clone());
        }
        tracing::debug!(uid = %agent.uid, config_hash = %hash, "Offering an OpAMP agent its remote configuration.");
        Ok(Some(config.to_wire()))
    }

    /// A message for `uid` that the server starts (a held poll's answer, a WebSocket push):
    /// `Some` when there is a configuration to offer that the agent does not have.
    pub(crate) fn pending(&self, uid: InstanceUid) -> Option<wire::ServerToAgent> {
        let (agent, wire_uid, reported, sent) = {
            let map = self.lock();
            let session = map.get(&uid)?;
            (session.agent(uid), session.wire_uid.clone(), session.reported.clone(), session.sent.clone())
        };
        // While the backend is unavailable there is nothing to push; the agent's next message
        // is answered UNAVAILABLE.
        let config = self.offer(&agent, reported.as_ref(), sent.as_ref()).ok()??;
        Some(wire::ServerToAgent {
            instance_uid: wire_uid,
            capabilities: self.capabilities(),
            remote_config: Some(config),
            ..Default::default()
        })
    }

    /// The agent as the backend sees it, if it has a session.
    pub(crate) fn agent(&self, uid: InstanceUid) -> Option<Agent> {
        self.lock().get(&uid).map(|s| s.agent(uid))
    }

    /// Ends `uid`'s session if `connection` owns it (`None`: an HTTP session), and tells the
    /// backend.
    pub(crate) fn end(&self, uid: InstanceUid, connection: Option<u64>, why: Disconnect) {
        let ended = {
            let mut map = self.lock();
            match map.get(&uid) {
                Some(session) if session.connection.as_ref().map(|c| c.id) == connection || connection.is_none() => {
                    map.remove(&uid).map(|s| s.agent(uid))
                }
                _ => None,
            }
        };
        if let Some(agent) = ended {
            tracing::debug!(%uid, ?why, "An OpAMP agent's session ended.");
            self.backend.disconnected(&agent, why);
        }
    }

    /// Ends every HTTP session that sent nothing for the idle timeout and holds no poll.
    pub(crate) fn expire(&self, now: Instant) -> usize {
        let idle = self.settings.idle_timeout;
        let expired: Vec<Agent> = {
            let mut map = self.lock();
            let uids: Vec<InstanceUid> = map
                .iter()
                .filter(|(_, s)| s.connection.is_none() && s.holding == 0 && now.duration_since(s.last_seen) >= idle)
                .map(|(uid, _)| *uid)
                .collect();
            uids.into_iter().filter_map(|uid| map.remove(&uid).map(|s| s.agent(uid))).collect()
        };
        for agent in &expired {
            tracing::debug!(uid = %agent.uid, "An OpAMP agent's HTTP session expired.");
            self.backend.disconnected(agent, Disconnect::Expired);
        }
        expired.len()
    }

    /// Ends every session (the server is stopping).
    pub(crate) fn end_all(&self, why: Disconnect) {
        let all: Vec<Agent> = self.lock().drain().map(|(uid, s)| s.agent(uid)).collect();
        for agent in &all {
            self.backend.disconnected(agent, why);
        }
    }

    /// Marks a poll of `uid` as held until the guard drops, and tells the backend so.
    pub(crate) fn hold(self: &Arc<Self>, uid: InstanceUid) -> HoldGuard {
        let agent = self.lock().get_mut(&uid).map(|session| {
            session.holding += 1;
            session.agent(uid)
        });
        if let Some(agent) = &agent {
            self.backend.report(agent, Report::Holding(true));
        }
        HoldGuard { protocol: Arc::clone(self), uid, told: agent.is_some() }
    }
}

/// A held poll: its session does not expire while it exists, and counts as seen when it ends;
/// the backend hears its start and its end ([`Report::Holding`]).
pub(crate) struct HoldGuard {
    protocol: Arc<Protocol>,
    uid: InstanceUid,
    /// The backend was told of its start.
    told: bool,
}

impl Drop for HoldGuard {
    fn drop(&mut self) {
        let agent = self.protocol.lock().get_mut(&self.uid).map(|session| {
            session.holding = session.holding.saturating_sub(1);
            session.last_seen = Instant::now();
            session.agent(self.uid)
        });
        if let Some(agent) = agent.filter(|_| self.told) {
            self.protocol.backend.report(&agent, Report::Holding(false));
        }
    }
}

fn heartbeat_offer(interval: Duration) -> wire::ConnectionSettingsOffers {
    let seconds = interval.as_secs().max(1);
    let mut hash = b"heartbeat:".to_vec();
    hash.extend_from_slice(&seconds.to_be_bytes());
    wire::ConnectionSettingsOffers {
        hash: Bytes::from(hash),
        opamp: Some(wire::OpAmpConnectionSettings { heartbeat_interval_seconds: seconds, ..Default::default() }),
    }
}

/// A `BAD_REQUEST` answer.
pub(crate) fn bad_request(instance_uid: Bytes, why: &str) -> Answer {
    let kind = wire::ServerErrorResponseType::BadRequest;
    error_answer(instance_uid, kind, why, None, Outcome::BadRequest)
}

/// An `UNAVAILABLE` answer with `RetryInfo`.
pub(crate) fn unavailable(instance_uid: Bytes, retry_after: Duration, why: &str) -> Answer {
    let nanos = u64::try_from(retry_after.as_nanos()).unwrap_or(u64::MAX);
    let retry = wire::server_error_response::Details::RetryInfo(wire::RetryInfo { retry_after_nanoseconds: nanos });
    let kind = wire::ServerErrorResponseType::Unavailable;
    error_answer(instance_uid, kind, why, Some(retry), Outcome::Unavailable { retry_after })
}

/// An answer that carries only an `error_response`.
fn error_answer(
    instance_uid: Bytes,
    kind: wire::ServerErrorResponseType,
    why: &str,
    details: Option<wire::server_error_response::Details>,
    outcome: Outcome,
) -> Answer {
    let error = wire::ServerErrorResponse { r#type: kind as i32, error_message: why.to_owned(), details };
    Answer { message: wire::ServerToAgent { instance_uid, error_response: Some(error), ..Default::default() }, outcome }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::ApplyStatus;
    use crate::bits::agent;
    use crate::config::RemoteConfig;
    use crate::memory::{Event, MemoryBackend};
    use crate::wire::any_value::Value;

    const UID: [u8; 16] = [0x42; 16];
    const CAPS: u64 = agent::REPORTS_STATUS
        | agent::ACCEPTS_REMOTE_CONFIG
        | agent::REPORTS_REMOTE_CONFIG
        | agent::REPORTS_EFFECTIVE_CONFIG
        | agent::REPORTS_HEARTBEAT;

    fn protocol(backend: &MemoryBackend, max_sessions: usize) -> Arc<Protocol> {
        let settings = Settings {
            heartbeat: Some(Duration::from_secs(30)),
            retry_after: Duration::from_secs(30),
            max_sessions,
            idle_timeout: Duration::from_secs(90),
        };
        Arc::new(Protocol::new(Arc::new(backend.clone()), settings))
    }

    fn description(service: &str) -> wire::AgentDescription {
        wire::AgentDescription {
            identifying_attributes: vec![wire::KeyValue {
                key: "service.name".into(),
                value: Some(wire::AnyValue { value: Some(Value::StringValue(service.into())) }),
            }],
            non_identifying_attributes: vec![],
        }
    }

    fn full(seq: u64, status: Option<(&RemoteConfig, ApplyStatus)>) -> wire::AgentToServer {
        wire::AgentToServer {
            instance_uid: Bytes::from_static(&UID),
            sequence_num: seq,
            capabilities: CAPS,
            agent_description: Some(description("checkout")),
            remote_config_status: status.map(|(c, s)| status_of(c, s)),
            ..Default::default()
        }
    }

    fn heartbeat(seq: u64) -> wire::AgentToServer {
        wire::AgentToServer {
            instance_uid: Bytes::from_static(&UID),
            sequence_num: seq,
            capabilities: CAPS,
            ..Default::default()
        }
    }

    fn status_of(config: &RemoteConfig, status: ApplyStatus) -> wire::RemoteConfigStatus {
        let status = match status {
            ApplyStatus::Unset => wire::RemoteConfigStatuses::Unset,
            ApplyStatus::Applied => wire::RemoteConfigStatuses::Applied,
            ApplyStatus::Applying => wire::RemoteConfigStatuses::Applying,
            ApplyStatus::Failed => wire::RemoteConfigStatuses::Failed,
        };
        wire::RemoteConfigStatus {
            last_remote_config_hash: config.hash().as_bytes().clone(),
            status: status as i32,
            error_message: String::new(),
        }
    }

    fn with_status(mut msg: wire::AgentToServer, config: &RemoteConfig, status: ApplyStatus) -> wire::AgentToServer {
        msg.remote_config_status = Some(status_of(config, status));
        msg
    }

    fn offered(answer: &Answer) -> Option<Bytes> {
        answer.message.remote_config.as_ref().map(|c| c.config_hash.clone())
    }

    #[tokio::test]
    async fn a_configuration_is_offered_once_and_again_only_when_it_changes() {
        let backend = MemoryBackend::new();
        let v1 = RemoteConfig::single("app.json", "application/json", r#"{"level":"info"}"#);
        backend.set_default(Some(v1.clone()));
        let p = protocol(&backend, 10);

        let first = p.answer(&full(1, None), Transport::Http, None);
        assert_eq!(first.message.instance_uid.as_ref(), &UID);
        assert_eq!(first.message.flags, 0, "a full first report needs no ReportFullState");
        assert_eq!(offered(&first).as_ref(), Some(v1.hash().as_bytes()));
        assert_eq!(first.message.capabilities & bits::server::OFFERS_REMOTE_CONFIG, bits::server::OFFERS_REMOTE_CONFIG);
        assert_eq!(
            first
                .message
                .connection_settings
                .as_ref()
                .and_then(|c| c.opamp.as_ref())
                .map(|o| o.heartbeat_interval_seconds),
            Some(30),
            "the heartbeat interval is told once per session"
        );
        assert!(matches!(first.outcome, Outcome::Processed { holdable: false, .. }));

        // Heartbeats while the agent applies it: nothing is resent.
        let second = p.answer(&heartbeat(2), Transport::Http, None);
        assert_eq!(offered(&second), None);
        assert!(second.message.connection_settings.is_none());
        assert!(matches!(second.outcome, Outcome::Processed { holdable: true, .. }));
        let applied = p.answer(&with_status(heartbeat(3), &v1, ApplyStatus::Applied), Transport::Http, None);
        assert_eq!(offered(&applied), None);
        assert!(matches!(applied.outcome, Outcome::Processed { holdable: false, .. }), "a report is not held");
        assert_eq!(offered(&p.answer(&heartbeat(4), Transport::Http, None)), None);

        // A change is offered once.
        let v2 = RemoteConfig::single("app.json", "application/json", r#"{"level":"debug"}"#);
        backend.set_default(Some(v2.clone()));
        assert_eq!(offered(&p.answer(&heartbeat(5), Transport::Http, None)).as_ref(), Some(v2.hash().as_bytes()));
        assert_eq!(offered(&p.answer(&heartbeat(6), Transport::Http, None)), None);
        // FAILED for the new one: not resent (the agent has it, and said what became of it).
        assert_eq!(
            offered(&p.answer(&with_status(heartbeat(7), &v2, ApplyStatus::Failed), Transport::Http, None)),
            None
        );
        assert_eq!(offered(&p.answer(&heartbeat(8), Transport::Http, None)), None);

        let events = backend.events();
        let kinds: Vec<_> = events.iter().map(|(_, e)| std::mem::discriminant(e)).collect();
        assert_eq!(kinds[0], std::mem::discriminant(&Event::Connected));
        assert!(
            events
                .iter()
                .any(|(_, e)| matches!(e, Event::Description(d) if d[0] == ("service.name".into(), "checkout".into())))
        );
        assert!(events.iter().any(|(_, e)| *e == Event::Capabilities(CAPS)));
        assert!(events.iter().any(|(_, e)| matches!(e, Event::RemoteConfigStatus(s) if s.status == ApplyStatus::Failed && s.hash == *v2.hash())));
    }

    #[tokio::test]
    async fn a_report_of_another_hash_than_the_one_sent_makes_the_offer_eligible_again_once() {
        let backend = MemoryBackend::new();
        let v1 = RemoteConfig::single("a", "", "1");
        let v2 = RemoteConfig::single("a", "", "2");
        backend.set_default(Some(v1.clone()));
        let p = protocol(&backend, 10);
        p.answer(&full(1, Some((&v1, ApplyStatus::Applied))), Transport::Http, None);
        backend.set_default(Some(v2.clone()));
        assert!(offered(&p.answer(&heartbeat(2), Transport::Http, None)).is_some());
        // The agent still reports v1 (the offer was lost on the way): v2 again, once.
        let again = p.answer(&with_status(heartbeat(3), &v1, ApplyStatus::Applied), Transport::Http, None);
        assert_eq!(offered(&again).as_ref(), Some(v2.hash().as_bytes()));
        assert_eq!(offered(&p.answer(&heartbeat(4), Transport::Http, None)), None);
    }

    #[tokio::test]
    async fn a_gap_asks_for_the_full_state_before_offering_anything() {
        let backend = MemoryBackend::new();
        let v1 = RemoteConfig::single("a", "", "1");
        backend.set_default(Some(v1.clone()));
        let p = protocol(&backend, 10);
        // A server restart: the agent's first message here is a heartbeat with seq 57.
        let first = p.answer(&heartbeat(57), Transport::Http, None);
        assert_eq!(first.message.flags, bits::REPORT_FULL_STATE);
        assert_eq!(offered(&first), None, "the agent may have it already");
        // Its full report says it has v1: nothing to send.
        let full_report = p.answer(&full(58, Some((&v1, ApplyStatus::Applied))), Transport::Http, None);
        assert_eq!(full_report.message.flags, 0);
        assert_eq!(offered(&full_report), None);
        // A repeated sequence number (a retried request) is not a gap; a skipped one is.
        assert_eq!(p.answer(&heartbeat(58), Transport::Http, None).message.flags, 0);
        assert_eq!(p.answer(&heartbeat(59), Transport::Http, None).message.flags, 0);
        assert_eq!(p.answer(&heartbeat(61), Transport::Http, None).message.flags, bits::REPORT_FULL_STATE);
        assert_eq!(p.answer(&heartbeat(62), Transport::Http, None).message.flags, 0);
    }

    #[tokio::test]
    async fn the_heartbeat_offer_skips_agents_that_take_connection_settings() {
        let backend = MemoryBackend::new();
        let p = protocol(&backend, 10);
        let mut msg = full(1, None);
        msg.capabilities = CAPS | agent::ACCEPTS_OPAMP_CONNECTION_SETTINGS;
        assert!(p.answer(&msg, Transport::Http, None).message.connection_settings.is_none());
        let mut quiet = full(1, None);
        quiet.instance_uid = Bytes::from_static(&[1; 16]);
        quiet.capabilities = agent::REPORTS_STATUS;
        assert!(p.answer(&quiet, Transport::Http, None).message.connection_settings.is_none());
    }

    #[tokio::test]
    async fn malformed_uids_are_bad_requests_and_older_text_uids_are_echoed() {
        let backend = MemoryBackend::new();
        let p = protocol(&backend, 10);
        let mut bad = full(1, None);
        bad.instance_uid = Bytes::from_static(b"short");
        let answer = p.answer(&bad, Transport::Http, None);
        assert_eq!(answer.outcome, Outcome::BadRequest);
        assert_eq!(answer.message.error_response.unwrap().r#type, wire::ServerErrorResponseType::BadRequest as i32);

        let mut legacy = full(1, None);
        legacy.instance_uid = Bytes::from_static(b"01ARZ3NDEKTSV4RRFFQ69G5FAV");
        let answer = p.answer(&legacy, Transport::Http, None);
        assert_eq!(answer.message.instance_uid.as_ref(), b"01ARZ3NDEKTSV4RRFFQ69G5FAV");
        assert!(matches!(answer.outcome, Outcome::Processed { .. }));
    }

    #[tokio::test]
    async fn an_agent_that_asks_for_a_uid_gets_one_and_keeps_its_session_under_it() {
        let backend = MemoryBackend::new();
        let p = protocol(&backend, 10);
        let mut msg = full(1, None);
        msg.flags = bits::REQUEST_INSTANCE_UID;
        let answer = p.answer(&msg, Transport::Http, None);
        let new = answer.message.agent_identification.expect("a new uid").new_instance_uid;
        assert_eq!(new.len(), 16);
        assert_eq!(answer.message.instance_uid.as_ref(), &UID, "addressed to the temporary uid");
        let uid = InstanceUid::from_wire(&new).unwrap();
        assert!(p.agent(uid).is_some());
        let mut next = heartbeat(2);
        next.instance_uid = new;
        assert_eq!(p.answer(&next, Transport::Http, None).message.flags, 0, "the same session");
    }

    #[tokio::test]
    async fn the_session_limit_and_an_unavailable_backend_throttle() {
        let backend = MemoryBackend::new();
        let p = protocol(&backend, 1);
        p.answer(&full(1, None), Transport::Http, None);
        let mut other = full(1, None);
        other.instance_uid = Bytes::from_static(&[7; 16]);
        let answer = p.answer(&other, Transport::Http, None);
        assert_eq!(answer.outcome, Outcome::Unavailable { retry_after: Duration::from_secs(30) });
        let error = answer.message.error_response.unwrap();
        assert_eq!(error.r#type, wire::ServerErrorResponseType::Unavailable as i32);
        assert_eq!(
            error.details,
            Some(wire::server_error_response::Details::RetryInfo(wire::RetryInfo {
                retry_after_nanoseconds: 30_000_000_000
            }))
        );
        // A known agent is still answered at the limit.
        assert!(matches!(p.answer(&heartbeat(2), Transport::Http, None).outcome, Outcome::Processed { .. }));

        backend.set_unavailable(Some(Unavailable {
            reason: "store not ready".into(),
            retry_after: Some(Duration::from_secs(45)),
        }));
        let answer = p.answer(&heartbeat(3), Transport::Http, None);
        assert_eq!(answer.outcome, Outcome::Unavailable { retry_after: Duration::from_secs(45) });
    }

    #[tokio::test(start_paused = true)]
    async fn an_http_session_expires_when_silent_unless_a_poll_is_held() {
        let backend = MemoryBackend::new();
        let p = protocol(&backend, 10);
        p.answer(&full(1, None), Transport::Http, None);
        let uid = InstanceUid::from_bytes(UID);
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(p.expire(Instant::now()), 0);
        let held = p.hold(uid);
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(p.expire(Instant::now()), 0, "a held poll keeps the session");
        drop(held);
        tokio::time::advance(Duration::from_secs(89)).await;
        assert_eq!(p.expire(Instant::now()), 0, "the end of the hold counts as seen");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(p.expire(Instant::now()), 1);
        assert!(p.agent(uid).is_none());
        assert_eq!(backend.events().last().unwrap().1, Event::Disconnected(Disconnect::Expired));
    }

    #[tokio::test]
    async fn agent_disconnect_ends_the_session() {
        let backend = MemoryBackend::new();
        let p = protocol(&backend, 10);
        p.answer(&full(1, None), Transport::Http, None);
        let mut bye = heartbeat(2);
        bye.agent_disconnect = Some(wire::AgentDisconnect {});
        assert_eq!(p.answer(&bye, Transport::Http, None).outcome, Outcome::Disconnected);
        assert_eq!(p.len(), 0);
        assert_eq!(backend.events().last().unwrap().1, Event::Disconnected(Disconnect::Reported));
    }

    #[tokio::test]
    async fn a_newer_websocket_connection_takes_the_session_over() {
        let backend = MemoryBackend::new();
        let p = protocol(&backend, 10);
        let old = Connection { id: 1, evicted: CancellationToken::new() };
        let new = Connection { id: 2, evicted: CancellationToken::new() };
        p.answer(&full(1, None), Transport::WebSocket, Some(&old));
        p.answer(&full(1, None), Transport::WebSocket, Some(&new));
        assert!(old.evicted.is_cancelled());
        p.end(InstanceUid::from_bytes(UID), Some(1), Disconnect::Closed);
        assert_eq!(p.len(), 1, "the older connection no longer owns the session");
        p.end(InstanceUid::from_bytes(UID), Some(2), Disconnect::Closed);
        assert_eq!(p.len(), 0);
    }
}
