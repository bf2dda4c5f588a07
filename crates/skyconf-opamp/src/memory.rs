//! A plain in-memory [`Backend`]: configurations by `service.name` with a default, one change
//! channel for all agents, and a log of everything agents reported, which tests wait on.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;

use crate::backend::{Agent, ApplyStatus, Backend, Changes, ConfigStatus, Disconnect, Report, Unavailable};
use crate::config::RemoteConfig;
use crate::uid::InstanceUid;

/// One thing an agent reported, owned.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A session started.
    Connected,
    /// The description, as `(key, value as text)` pairs, identifying first.
    Description(Vec<(String, String)>),
    /// The capability bits.
    Capabilities(u64),
    /// Health: whether healthy, and the last error.
    Health {
        /// `healthy`.
        healthy: bool,
        /// `last_error`.
        last_error: String,
    },
    /// The effective configuration's file names and bodies.
    EffectiveConfig(Vec<(String, Vec<u8>)>),
    /// A remote configuration status.
    RemoteConfigStatus(ConfigStatus),
    /// The session ended.
    Disconnected(Disconnect),
}

/// What [`MemoryBackend`] serves and records.
#[derive(Debug, Default)]
struct State {
    default: Option<Arc<RemoteConfig>>,
    by_service: HashMap<String, Arc<RemoteConfig>>,
    unavailable: Option<Unavailable>,
    events: Vec<(InstanceUid, Event)>,
}

/// An in-memory [`Backend`]. Cloning shares it.
#[derive(Debug, Clone)]
pub struct MemoryBackend {
    state: Arc<Mutex<State>>,
    changes: Arc<watch::Sender<u64>>,
    recorded: Arc<watch::Sender<usize>>,
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryBackend {
    /// A backend that offers nothing.
    pub fn new() -> Self {
        Self { state: Arc::default(), changes: Arc::new(watch::channel(0).0), recorded: Arc::new(watch::channel(0).0) }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn changed(&self) {
        self.changes.send_modify(|generation| *generation += 1);
    }

    /// Offers `config` to every agent without a configuration of its own (`None`: nothing).
    pub fn set_default(&self, config: Option<RemoteConfig>) {
        self.lock().default = config.map(Arc::new);
        self.changed();
    }

    /// Offers `config` to agents whose `service.name` is `service` (`None`: the default again).
    pub fn set_service(&self, service: &str, config: Option<RemoteConfig>) {
        let mut state = self.lock();
        match config {
            Some(config) => state.by_service.insert(service.to_owned(), Arc::new(config)),
            None => state.by_service.remove(service),
        };
        drop(state);
        self.changed();
    }

    /// Makes every configuration lookup fail with `unavailable` (`None`: answer again).
    pub fn set_unavailable(&self, unavailable: Option<Unavailable>) {
        self.lock().unavailable = unavailable;
        self.changed();
    }

    /// Everything reported so far, in order.
    pub fn events(&self) -> Vec<(InstanceUid, Event)> {
        self.lock().events.clone()
    }

    /// Waits until `done` holds for the events, or `deadline` passes (then the error says
    /// what was recorded).
    pub async fn wait_for(
        &self,
        deadline: Duration,
        mut done: impl FnMut(&[(InstanceUid, Event)]) -> bool,
    ) -> Result<Vec<(InstanceUid, Event)>, String> {
        let mut recorded = self.recorded.subscribe();
        let wait = async {
            loop {
                {
                    let state = self.lock();
                    if done(&state.events) {
                        return state.events.clone();
                    }
                }
                if recorded.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::time::timeout(deadline, wait)
            .await
            .map_err(|_| format!("not seen within {deadline:?}; recorded: {:#?}", self.events()))
    }

    /// Waits until some agent reports `status` for the configuration `config`.
    pub async fn wait_for_status(
        &self,
        deadline: Duration,
        config: &RemoteConfig,
        status: ApplyStatus,
    ) -> Result<InstanceUid, String> {
        let events = self
            .wait_for(deadline, |events| {
                events.iter().any(|(_, e)| matches!(e, Event::RemoteConfigStatus(s) if s.hash == *config.hash() && s.status == status))
            })
            .await?;
        Ok(events
            .iter()
            .find(|(_, e)| matches!(e, Event::RemoteConfigStatus(s) if s.hash == *config.hash() && s.status == status))
            .map(|(uid, _)| *uid)
            .expect("found by the wait"))
    }

    fn record(&self, uid: InstanceUid, event: Event) {
        self.lock().events.push((uid, event));
        self.recorded.send_modify(|n| *n += 1);
    }
}

fn text(value: Option<&crate::wire::AnyValue>) -> String {
    use crate::wire::any_value::Value;
    match value.and_then(|v| v.value.as_ref()) {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        Some(Value::BytesValue(b)) => format!("{b:?}"),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

impl Backend for MemoryBackend {
    fn remote_config(&self, agent: &Agent) -> Result<Option<Arc<RemoteConfig>>, Unavailable> {
        let state = self.lock();
        if let Some(unavailable) = &state.unavailable {
            return Err(unavailable.clone());
        }
        let own = agent.description.get_str("service.name").and_then(|service| state.by_service.get(service));
        Ok(own.or(state.default.as_ref()).cloned())
    }

    fn watch(&self, _agent: &Agent) -> Changes {
        self.changes.subscribe()
    }

    fn report(&self, agent: &Agent, report: Report<'_>) {
        let event = match report {
            Report::Connected => Event::Connected,
            Report::Description(d) => Event::Description(
                d.wire
                    .identifying_attributes
                    .iter()
                    .chain(&d.wire.non_identifying_attributes)
                    .map(|kv| (kv.key.clone(), text(kv.value.as_ref())))
                    .collect(),
            ),
            Report::Capabilities(c) => Event::Capabilities(c.0),
            Report::Health(h) => Event::Health { healthy: h.healthy, last_error: h.last_error.clone() },
            Report::EffectiveConfig(e) => Event::EffectiveConfig(
                e.config_map
                    .as_ref()
                    .map(|m| m.config_map.iter().map(|(name, f)| (name.clone(), f.body.to_vec())).collect())
                    .unwrap_or_default(),
            ),
            Report::RemoteConfigStatus(s) => Event::RemoteConfigStatus(s.clone()),
            // Not recorded: the events say what changed.
            Report::Heartbeat | Report::Holding(_) => return,
        };
        self.record(agent.uid, event);
    }

    fn disconnected(&self, agent: &Agent, why: Disconnect) {
        self.record(agent.uid, Event::Disconnected(why));
    }
}
