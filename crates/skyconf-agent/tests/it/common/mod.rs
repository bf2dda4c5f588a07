//! Test doubles shared by the integration tests: a watcher that records its events, and an
//! in-memory CDS server (skyconf_core's reply rule over a table, plus scripted answers and failures)
//! that plugs in as a [`Transport`] so the poll loop can run under paused tokio time.

// `pub` for the test modules of this binary, which the lint counts as unreachable.
#![allow(unreachable_pub)]

pub mod scenarios;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prost::Message as _;
use skyconf_agent::{AgentStatus, ChangeEvent, EventType, Transport, Watcher, WatcherError, WatcherKind};
use skyconf_core::answer::{Answers, ReplyOptions, reply};
use skyconf_core::{AgentConfigurations, ServiceConfig};
use skyconf_proto::v3::{
    Command, Commands, ConfigurationSyncRequest, InstancePingPkg, InstanceProperties, KeyStringValuePair,
};
use tokio::sync::watch;
use tokio::time::Instant;

/// One event as a watcher saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub watcher: &'static str,
    pub key: String,
    pub event: EventType,
    pub value: Option<String>,
    pub uuid: Option<String>,
}

/// Events of every recorder sharing it, in order.
#[derive(Debug, Clone, Default)]
pub struct Log(Arc<Mutex<Vec<Seen>>>);

impl Log {
    /// The events since the last call.
    pub fn take(&self) -> Vec<Seen> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// A watcher that records what it is told and can be made to fail.
#[derive(Debug)]
pub struct Recorder {
    name: &'static str,
    key: String,
    value: Mutex<Option<String>>,
    log: Log,
    fail_next: AtomicBool,
}

impl Recorder {
    /// A recorder holding no value, kind `name`.
    pub fn new(name: &'static str, key: &str, log: &Log) -> Arc<Self> {
        Arc::new(Self {
            name,
            key: key.to_owned(),
            value: Mutex::new(None),
            log: log.clone(),
            fail_next: AtomicBool::new(false),
        })
    }

    /// Makes the next notification fail.
    pub fn fail_next(&self) {
        self.fail_next.store(true, Ordering::SeqCst);
    }

    /// The value held.
    pub fn current(&self) -> Option<String> {
        self.value.lock().unwrap().clone()
    }
}

impl Watcher for Recorder {
    fn key(&self) -> &str {
        &self.key
    }

    fn value(&self) -> Option<String> {
        self.current()
    }

    fn notify(&self, event: &ChangeEvent<'_>) -> Result<(), WatcherError> {
        if self.fail_next.swap(false, Ordering::SeqCst) {
            return Err(WatcherError::new("refused on purpose"));
        }
        *self.value.lock().unwrap() = event.value.map(str::to_owned);
        self.log.0.lock().unwrap().push(Seen {
            watcher: self.name,
            key: event.key.to_owned(),
            event: event.event,
            value: event.value.map(str::to_owned),
            uuid: event.uuid.map(str::to_owned),
        });
        Ok(())
    }

    fn kind(&self) -> WatcherKind {
        WatcherKind::named(self.name)
    }
}

/// Shorthand for an expected event.
pub fn seen(watcher: &'static str, key: &str, event: EventType, value: Option<&str>) -> Seen {
    Seen { watcher, key: key.to_owned(), event, value: value.map(str::to_owned), uuid: None }
}

/// Drops the uuids, for comparing with [`seen`].
pub fn without_uuids(events: Vec<Seen>) -> Vec<Seen> {
    events.into_iter().map(|e| Seen { uuid: None, ..e }).collect()
}

#[derive(Debug, Default)]
struct FakeState {
    services: HashMap<String, Vec<(String, String)>>,
    down: bool,
    hang: bool,
    hold: Option<Duration>,
    scripted: VecDeque<Commands>,
    requests: Vec<(Instant, ConfigurationSyncRequest)>,
    management_down: bool,
    management: Vec<Managed>,
}

/// One `ManagementService` call the fake received.
#[derive(Debug, Clone, PartialEq)]
pub struct Managed {
    /// When.
    pub at: Instant,
    /// How many polls it had received before this call.
    pub after_polls: usize,
    /// The call.
    pub call: ManagementMessage,
}

/// A `ManagementService` message.
#[derive(Debug, Clone, PartialEq)]
pub enum ManagementMessage {
    /// `reportInstanceProperties`.
    Report(InstanceProperties),
    /// `keepAlive`.
    KeepAlive(InstancePingPkg),
}

/// An in-memory CDS server answering as the OAP does.
#[derive(Debug, Clone, Default)]
pub struct FakeCds(Arc<Mutex<FakeState>>);

impl FakeCds {
    /// Sets a service's settings (document order).
    pub fn set(&self, service: &str, entries: &[(&str, &str)]) {
        let entries = entries.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        self.0.lock().unwrap().services.insert(service.to_owned(), entries);
    }

    /// Removes a service: it gets the EMPTY answer.
    pub fn remove(&self, service: &str) {
        self.0.lock().unwrap().services.remove(service);
    }

    /// Makes every call fail with UNAVAILABLE (true) or answer again (false).
    pub fn set_down(&self, down: bool) {
        self.0.lock().unwrap().down = down;
    }

    /// Makes every call hang forever (true) or answer again (false).
    pub fn set_hang(&self, hang: bool) {
        self.0.lock().unwrap().hang = hang;
    }

    /// Holds every poll this long before answering, as a server holds a poll whose answer does
    /// not change (skyconf answers it at the deadline); `None`: answers at once.
    pub fn set_hold(&self, hold: Option<Duration>) {
        self.0.lock().unwrap().hold = hold;
    }

    /// Answers the next call with `commands` instead of the table.
    pub fn script(&self, commands: Commands) {
        self.0.lock().unwrap().scripted.push_back(commands);
    }

    /// Makes every `ManagementService` call fail with UNAVAILABLE (true) or succeed (false);
    /// polls are not affected.
    pub fn set_management_down(&self, down: bool) {
        self.0.lock().unwrap().management_down = down;
    }

    /// The `ManagementService` calls received, failed ones included.
    pub fn management(&self) -> Vec<Managed> {
        self.0.lock().unwrap().management.clone()
    }

    /// The requests received, with when.
    pub fn requests(&self) -> Vec<(Instant, ConfigurationSyncRequest)> {
        self.0.lock().unwrap().requests.clone()
    }

    /// The digest served for `service`.
    pub fn digest(&self, service: &str) -> String {
        let state = self.0.lock().unwrap();
        answers(&state.services).answer(service).digest.as_str().to_owned()
    }
}

/// The answers a server holding `services` gives.
fn answers(services: &HashMap<String, Vec<(String, String)>>) -> Answers {
    let services =
        services.iter().map(|(name, entries)| (name.clone(), ServiceConfig::new(name.clone(), entries.clone())));
    Answers::new(&AgentConfigurations::from_services(services.collect()))
}

impl Transport for FakeCds {
    async fn fetch(
        &mut self,
        request: ConfigurationSyncRequest,
        _timeout: Duration,
    ) -> Result<Commands, tonic::Status> {
        let (answer, hang) = {
            let mut state = self.0.lock().unwrap();
            state.requests.push((Instant::now(), request.clone()));
            let answer = if state.down {
                Err(tonic::Status::unavailable("connection refused"))
            } else if let Some(scripted) = state.scripted.pop_front() {
                Ok(scripted)
            } else {
                let answers = answers(&state.services);
                let bytes = reply(&answers, &request, ReplyOptions::default()).encode();
                Ok(Commands::decode(bytes).expect("core encodes valid Commands"))
            };
            (answer, (state.hang, state.hold))
        };
        match hang {
            (true, _) => std::future::pending::<()>().await,
            (false, Some(hold)) => tokio::time::sleep(hold).await,
            (false, None) => {}
        }
        answer
    }

    async fn report_instance_properties(
        &mut self,
        properties: InstanceProperties,
        _timeout: Duration,
    ) -> Result<(), tonic::Status> {
        self.manage(ManagementMessage::Report(properties))
    }

    async fn keep_alive(&mut self, ping: InstancePingPkg, _timeout: Duration) -> Result<(), tonic::Status> {
        self.manage(ManagementMessage::KeepAlive(ping))
    }
}

impl FakeCds {
    fn manage(&self, call: ManagementMessage) -> Result<(), tonic::Status> {
        let mut state = self.0.lock().unwrap();
        let after_polls = state.requests.len();
        state.management.push(Managed { at: Instant::now(), after_polls, call });
        if state.management_down || state.down { Err(tonic::Status::unavailable("connection refused")) } else { Ok(()) }
    }
}

/// A raw `ConfigurationDiscoveryCommand`, for answers no honest server sends.
pub fn raw_command(args: &[(&str, &str)]) -> Commands {
    Commands {
        commands: vec![Command {
            command: "ConfigurationDiscoveryCommand".to_owned(),
            args: args
                .iter()
                .map(|(k, v)| KeyStringValuePair { key: (*k).to_owned(), value: (*v).to_owned() })
                .collect(),
        }],
    }
}

/// Waits until the agent has completed `n` polls and returns its status then.
pub async fn after_polls(status: &mut watch::Receiver<AgentStatus>, n: u64) -> AgentStatus {
    status.wait_for(|s| s.polls >= n).await.expect("the agent is running").clone()
}
