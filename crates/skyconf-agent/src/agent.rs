//! The poll loop: ask the server for the service's configuration, apply what comes back to the
//! registered watchers, wait, repeat.
//!
//! One [`Agent`] per service. It remembers the digest (`uuid`) of the configuration it applied
//! and sends it with every poll, so an unchanged configuration costs the server a comparison and
//! an empty answer. [`Agent::poll_once`] is one poll; [`Agent::run`] and [`Agent::spawn`] loop.
//!
//! # Timing
//!
//! The first poll happens at once (the Java agent waits one interval first; the Go agent does not),
//! then one every `interval` (default 20 s), measured from the start of the previous poll. Each
//! call has a deadline (default 30 s, the Java agent's `collector.grpc_upstream_timeout`).
//!
//! # Failures
//!
//! Whatever fails, the agent keeps every current value and its uuid, never panics, and tries again:
//! after the `n`-th failure in a row it waits `min(interval × 2ⁿ⁻¹, max_backoff)`, half of it
//! fixed and half random (so a fleet does not return in step), then polls again. The first retry
//! therefore comes within one interval. What the gRPC status says:
//!
//! | status | meaning | logged |
//! |---|---|---|
//! | `UNAVAILABLE` | the server is down or unreachable: no connection, or it broke under the call (tonic says `UNKNOWN: transport error` for that; [`GrpcTransport`](crate::GrpcTransport) reports it as `UNAVAILABLE`) | WARN once, then DEBUG until it recovers |
//! | `DEADLINE_EXCEEDED` | no answer within the deadline: server overloaded or stuck | as above |
//! | `RESOURCE_EXHAUSTED`, `ABORTED`, `CANCELLED`, `INTERNAL`, `UNKNOWN`, `DATA_LOSS` | the server failed this call | as above |
//! | `UNIMPLEMENTED` | the server has no configuration discovery: an OAP without the module, or a proxy that routes it elsewhere | WARN on every failure |
//! | `UNAUTHENTICATED`, `PERMISSION_DENIED` | the OAP checks a token and ours is missing or wrong ([`GrpcTransport::with_authentication`](crate::GrpcTransport::with_authentication)) | WARN on every failure |
//! | `INVALID_ARGUMENT`, `OUT_OF_RANGE`, `FAILED_PRECONDITION` | the server refused the request itself (skyconf answers `OUT_OF_RANGE` above 64 KiB) | WARN on every failure |
//!
//! # Instance identity
//!
//! With [`AgentOptions::instance`] set, the agent also says which instance it is, as the Java
//! agent does: `reportInstanceProperties` before its first poll, `keepAlive` every
//! [`AgentOptions::keep_alive_interval`], on the same transport (see [`crate::identity`]).
//! [`Agent::run`] sends the keep-alives on their own schedule, beside the polls, on a clone of the
//! transport: a poll the server holds until its deadline never delays them, so a server that
//! forgets silent instances after less than a minute keeps this one. These calls never stop the
//! polls: a failure is logged and the report retried with the next poll.
//!
//! An answer the agent cannot use is not a poll failure; it is a [`CommandOutcome`]: a command
//! that repeats a setting is refused whole, a watcher error stops the command and keeps the uuid
//! (the server sends the command again on the next poll, with a new serial number).

use std::collections::VecDeque;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use indexmap::IndexMap;
use skyconf_core::backoff::Backoff;
use skyconf_core::codec::{DiscoveryCommand, DuplicateKey};
use skyconf_proto::v3::{Commands, ConfigurationSyncRequest};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::identity::{self, DEFAULT_KEEP_ALIVE_INTERVAL, ManagementCall, Schedule};
use crate::registry::{ChangeEvent, EventType, Holders, Registry, WatcherError};
use crate::transport::{PollError, Transport};

/// How often the agent polls by default: the Java and Go agents' default.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(20);
/// The default deadline of one call: the Java agent's `collector.grpc_upstream_timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// The default longest wait between polls while the server keeps failing.
pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(120);
/// How many serial numbers are remembered, as in the Java agent.
pub const SERIAL_CACHE_SIZE: usize = 64;

/// How the agent polls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentOptions {
    /// The service name, exactly as the server's configuration names it (see
    /// [`service_name`](crate::service_name()) for the Java agent's `name|namespace|cluster`).
    pub service: String,
    /// Time between the starts of two polls.
    pub interval: Duration,
    /// The deadline of one call.
    pub timeout: Duration,
    /// The longest wait between polls while the server keeps failing.
    pub max_backoff: Duration,
    /// The instance name sent with `ManagementService` calls (`serviceInstance`, the Java agent's
    /// `agent.instance_name`); none (or empty): the agent sends no such calls and stays
    /// anonymous to the server.
    pub instance: Option<String>,
    /// The properties `reportInstanceProperties` carries, in order (a key may repeat, as the
    /// Java agent's `ipv4` does); sent only with an [`instance`](Self::instance) name.
    pub properties: Vec<(String, String)>,
    /// Time between two `keepAlive` calls of a named instance.
    pub keep_alive_interval: Duration,
}

impl AgentOptions {
    /// The defaults for `service`: 20 s interval, 30 s deadline, back-off up to 2 minutes, no
    /// instance identity (keep-alive every 30 s once one is set).
    pub fn new(service: impl Into<String>) -> Self {
        Self {
            service: service.into(),
            interval: DEFAULT_INTERVAL,
            timeout: DEFAULT_TIMEOUT,
            max_backoff: DEFAULT_MAX_BACKOFF,
            instance: None,
            properties: Vec::new(),
            keep_alive_interval: DEFAULT_KEEP_ALIVE_INTERVAL,
        }
    }

    /// Names the instance: the agent then reports it, with its
    /// [properties](Self::property), before the first poll and keeps it alive.
    pub fn instance(mut self, name: impl Into<String>) -> Self {
        self.instance = Some(name.into());
        self
    }

    /// Adds a property to the instance's report (`zone`, `version`, `hostname`...).
    pub fn property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.push((key.into(), value.into()));
        self
    }

    /// Sets the time between two `keepAlive` calls.
    pub fn keep_alive_interval(mut self, interval: Duration) -> Self {
        self.keep_alive_interval = interval;
        self
    }

    /// The instance name, if one is set and not empty.
    fn instance_name(&self) -> Option<&str> {
        self.instance.as_deref().filter(|name| !name.is_empty())
    }

    /// Sets the poll interval.
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// Sets the deadline of one call.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the longest wait between polls while the server keeps failing.
    pub fn max_backoff(mut self, max_backoff: Duration) -> Self {
        self.max_backoff = max_backoff;
        self
    }
}

/// What became of one `ConfigurationDiscoveryCommand`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandOutcome {
    /// Every watcher applied it; the agent now holds its uuid.
    Applied {
        /// The command's uuid, now sent with every poll.
        uuid: Option<String>,
        /// How many MODIFY and DELETE events the watchers received.
        events: usize,
    },
    /// It carried the uuid the agent already holds: nothing to do.
    SameUuid,
    /// Its serial number is among the last 64 executed: ignored.
    Replayed {
        /// The repeated serial number.
        serial: String,
    },
    /// It repeats a setting: refused whole, nothing applied, the uuid kept.
    Rejected(DuplicateKey),
    /// A watcher refused its change: the watchers after it were skipped and the uuid kept, so the
    /// next poll delivers the command again.
    WatcherFailed {
        /// The setting whose watcher failed.
        key: String,
        /// The watcher's error, as text.
        error: String,
    },
}

/// What one successful poll brought.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PollReport {
    /// One outcome per `ConfigurationDiscoveryCommand` in the answer; empty when the server had
    /// nothing new.
    pub outcomes: Vec<CommandOutcome>,
}

impl PollReport {
    /// True when the server answered "no change".
    pub fn is_no_change(&self) -> bool {
        self.outcomes.is_empty()
    }

    /// The number of events delivered to watchers.
    pub fn events(&self) -> usize {
        self.outcomes
            .iter()
            .map(|o| match o {
                CommandOutcome::Applied { events, .. } => *events,
                _ => 0,
            })
            .sum()
    }
}

/// The agent's state, published after every poll.
#[derive(Debug, Clone, Default)]
pub struct AgentStatus {
    /// Polls completed, successful or not.
    pub polls: u64,
    /// Failed polls since the last successful one.
    pub failures_in_a_row: u32,
    /// The uuid the agent holds and sends.
    pub uuid: Option<String>,
    /// The last poll's result.
    pub last: Option<Result<PollReport, PollError>>,
}

/// The last serial numbers executed, oldest first.
#[derive(Debug, Default)]
struct SerialCache {
    recent: VecDeque<String>,
}

impl SerialCache {
    fn contains(&self, serial: &str) -> bool {
        self.recent.iter().any(|s| s == serial)
    }

    fn record(&mut self, serial: String) {
        if self.recent.len() == SERIAL_CACHE_SIZE {
            self.recent.pop_front();
        }
        self.recent.push_back(serial);
    }
}

/// The configuration-discovery client of one service.
pub struct Agent<T> {
    options: AgentOptions,
    registry: Registry,
    transport: T,
    uuid: Option<String>,
    watcher_count: usize,
    serials: SerialCache,
    failures_in_a_row: u32,
    backoff: Backoff,
    status: watch::Sender<AgentStatus>,
    /// When the instance's management calls are due; shared with the keep-alive loop of
    /// [`Agent::run`] (never locked across an `.await`).
    management: Arc<Mutex<Schedule>>,
    /// Tells the keep-alive loop that the properties were reported (its schedule starts again).
    reported: Arc<Notify>,
}

impl<T> std::fmt::Debug for Agent<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("options", &self.options)
            .field("registry", &self.registry)
            .field("uuid", &self.uuid)
            .finish_non_exhaustive()
    }
}

impl<T: Transport> Agent<T> {
    /// An agent for the watchers in `registry` (more may be registered at any time).
    pub fn new(options: AgentOptions, registry: Registry, transport: T) -> Self {
        // The first retry waits about one interval, doubling up to the cap.
        let backoff = Backoff::new(options.interval, options.max_backoff);
        Self {
            backoff,
            options,
            registry,
            transport,
            uuid: None,
            watcher_count: 0,
            serials: SerialCache::default(),
            failures_in_a_row: 0,
            status: watch::Sender::new(AgentStatus::default()),
            management: Arc::default(),
            reported: Arc::default(),
        }
    }

    /// The options.
    pub fn options(&self) -> &AgentOptions {
        &self.options
    }

    /// The uuid the agent holds and sends with its next poll.
    pub fn uuid(&self) -> Option<&str> {
        self.uuid.as_deref()
    }

    /// A receiver of the status published after every poll.
    pub fn status(&self) -> watch::Receiver<AgentStatus> {
        self.status.subscribe()
    }

    /// One poll: ask, apply, publish the status. Never panics on a bad answer. A named instance
    /// first sends the `ManagementService` call due, if any (its failure does not fail the poll).
    pub async fn poll_once(&mut self) -> Result<PollReport, PollError> {
        self.identify(Due::Any).await;
        self.poll().await
    }

    /// One poll, without management calls.
    async fn poll(&mut self) -> Result<PollReport, PollError> {
        let count = self.registry.watcher_count();
        if count != self.watcher_count {
            // A watcher registered since the last poll has not seen the current configuration;
            // without a uuid the server sends all of it.
            if self.uuid.is_some() {
                tracing::debug!(watchers = count, "Watchers changed; asking for the whole configuration.");
            }
            self.uuid = None;
            self.watcher_count = count;
        }
        let request = ConfigurationSyncRequest {
            service: self.options.service.clone(),
            uuid: self.uuid.clone().unwrap_or_default(),
        };
        let timeout = self.options.timeout;
        let result = match tokio::time::timeout(timeout, self.transport.fetch(request, timeout)).await {
            Ok(Ok(commands)) => Ok(self.handle(&commands)),
            Ok(Err(status)) => Err(PollError::Status(status)),
            Err(_) => Err(PollError::Timeout(timeout)),
        };
        if let Err(error) = &result
            && error.code() == tonic::Code::Unavailable
        {
            // The connection that comes back may be to a server that does not know us.
            lock(&self.management).forget();
        }
        self.record(&result);
        result
    }

    /// Sends the `ManagementService` call due now (only a report, with [`Due::Report`]), if the
    /// instance is named and one is due; logs a failure and carries on.
    async fn identify(&mut self, which: Due) {
        let Some(instance) = self.options.instance_name() else { return };
        let due = lock(&self.management).due(Instant::now(), self.options.keep_alive_interval);
        let ((Some(call @ ManagementCall::Report), _) | (Some(call), Due::Any)) = (due, which) else { return };
        let reported = send_identity(&mut self.transport, &self.options, instance, &self.management, call).await;
        if reported {
            self.reported.notify_one();
        }
    }

    fn stopped(&self) {
        tracing::info!(service = %self.options.service, "Configuration discovery stopped.");
    }

    fn record(&mut self, result: &Result<PollReport, PollError>) {
        match result {
            Ok(_) => {
                if self.failures_in_a_row > 0 {
                    tracing::info!(failures = self.failures_in_a_row, "Configuration discovery recovered.");
                }
                self.failures_in_a_row = 0;
                self.backoff.reset();
            }
            Err(error) => {
                self.failures_in_a_row = self.failures_in_a_row.saturating_add(1);
                let code = error.code();
                if error.is_misconfiguration() || self.failures_in_a_row == 1 {
                    tracing::warn!(
                        ?code,
                        %error,
                        service = %self.options.service,
                        "Configuration discovery failed; keeping the current configuration."
                    );
                } else {
                    tracing::debug!(
                        ?code,
                        %error,
                        failures = self.failures_in_a_row,
                        "Configuration discovery still failing."
                    );
                }
            }
        }
        let (uuid, failures) = (self.uuid.clone(), self.failures_in_a_row);
        self.status.send_modify(|status| {
            status.polls += 1;
            status.failures_in_a_row = failures;
            status.uuid = uuid;
            status.last = Some(result.clone());
        });
    }

    fn handle(&mut self, commands: &Commands) -> PollReport {
        let outcomes =
            DiscoveryCommand::all(commands).into_iter().map(|command| self.handle_command(command)).collect();
        PollReport { outcomes }
    }

    fn handle_command(&mut self, command: DiscoveryCommand) -> CommandOutcome {
        if let Some(serial) = &command.serial_number
            && self.serials.contains(serial)
        {
            tracing::warn!(%serial, "Command already executed; ignored.");
            return CommandOutcome::Replayed { serial: serial.clone() };
        }
        let outcome = self.execute(&command);
        // Recorded whatever the outcome, as the Java agent does; a server sends a retry with a
        // fresh serial number.
        if let Some(serial) = command.serial_number {
            self.serials.record(serial);
        }
        outcome
    }

    fn execute(&mut self, command: &DiscoveryCommand) -> CommandOutcome {
        if command.uuid.is_some() && command.uuid == self.uuid {
            return CommandOutcome::SameUuid;
        }
        let config = match command.config_map() {
            Ok(config) => config,
            Err(duplicate) => {
                tracing::warn!(
                    key = %duplicate.0,
                    "Refused a command that repeats a setting; nothing applied."
                );
                return CommandOutcome::Rejected(duplicate);
            }
        };
        let keys = self.registry.snapshot();
        for key in config.keys() {
            if !keys.iter().any(|(k, _)| k == key) {
                tracing::debug!(%key, "No watcher for this setting; ignored.");
            }
        }
        match apply(&keys, &config, command.uuid.as_deref()) {
            Ok(events) => {
                self.uuid.clone_from(&command.uuid);
                tracing::debug!(uuid = ?self.uuid, events, "Configuration applied.");
                CommandOutcome::Applied { uuid: self.uuid.clone(), events }
            }
            Err((key, error)) => {
                tracing::warn!(
                    %key,
                    %error,
                    "A watcher refused its change; the next poll retries."
                );
                CommandOutcome::WatcherFailed { key, error: error.to_string() }
            }
        }
    }
}

impl<T: Transport + Clone> Agent<T> {
    /// Polls until `stop` completes: at once, then every interval, backing off while the server
    /// fails. A named instance reports itself before its first poll (and again before the poll
    /// after a failure or a lost connection), and sends its keep-alives on their own schedule on
    /// a clone of the transport, whatever the polls do (one held until its deadline included).
    pub async fn run(mut self, stop: impl Future<Output = ()>) {
        tokio::pin!(stop);
        tracing::info!(
            service = %self.options.service,
            interval = ?self.options.interval,
            instance = self.options.instance_name(),
            "Configuration discovery started."
        );
        let keep_alive = keep_alive_loop(
            self.transport.clone(),
            self.options.clone(),
            Arc::clone(&self.management),
            Arc::clone(&self.reported),
        );
        tokio::pin!(keep_alive);
        loop {
            let started = Instant::now();
            let result = tokio::select! {
                biased;
                () = &mut stop => break,
                () = &mut keep_alive => unreachable!("the keep-alive loop never ends"),
                result = async {
                    self.identify(Due::Report).await;
                    self.poll().await
                } => result,
            };
            let next = match result {
                Ok(_) => started + self.options.interval,
                Err(_) => Instant::now() + self.backoff.next_delay(),
            };
            tokio::select! {
                biased;
                () = &mut stop => break,
                () = &mut keep_alive => unreachable!("the keep-alive loop never ends"),
                () = tokio::time::sleep_until(next) => {}
            }
        }
        self.stopped();
    }

    /// Runs the loop on a new task, in the current tracing span (its fields, such as the server's
    /// address, are on every line the loop logs).
    pub fn spawn(self) -> AgentHandle {
        use tracing::Instrument as _;
        let status = self.status();
        let stop = Arc::new(Notify::new());
        let signal = Arc::clone(&stop);
        let join = tokio::spawn(self.run(async move { signal.notified().await }).in_current_span());
        AgentHandle { status, stop, join }
    }
}

/// Which management call the poll path may send before a poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Due {
    /// Whichever is due ([`Agent::poll_once`], which drives everything by hand).
    Any,
    /// Only a report the server lacks; the keep-alives are the keep-alive loop's.
    Report,
}

/// The schedule's lock; a poisoned one still holds a usable schedule.
fn lock(schedule: &Mutex<Schedule>) -> std::sync::MutexGuard<'_, Schedule> {
    schedule.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Sends the keep-alives (and the periodic report) of a named instance when they fall due, on
/// `transport`, for as long as it is polled. While the properties are not reported it waits for
/// the poll path to report them (`reported`). Never ends.
async fn keep_alive_loop<T: Transport>(
    mut transport: T,
    options: AgentOptions,
    schedule: Arc<Mutex<Schedule>>,
    reported: Arc<Notify>,
) {
    let Some(instance) = options.instance_name() else { return std::future::pending().await };
    let interval = options.keep_alive_interval;
    loop {
        let next = lock(&schedule).next_keep_alive(interval);
        match next {
            Some(at) => tokio::time::sleep_until(at).await,
            None => {
                reported.notified().await;
                continue;
            }
        }
        // The poll path may have sent a report meanwhile, or found the server gone: only a
        // call due to a server that has the properties is this loop's.
        let due = lock(&schedule).keep_alive_due(Instant::now(), interval);
        if let Some(call) = due {
            send_identity(&mut transport, &options, instance, &schedule, call).await;
        }
    }
}

/// Sends `call` for `instance` on `transport`, records it in `schedule` and logs a failure: a
/// server that refused it at WARN (the first time in a row), one that could not be reached at
/// DEBUG (the polls say so). Whether a report was accepted.
async fn send_identity<T: Transport>(
    transport: &mut T,
    options: &AgentOptions,
    instance: &str,
    schedule: &Mutex<Schedule>,
    call: ManagementCall,
) -> bool {
    let now = Instant::now();
    let (service, timeout) = (options.service.as_str(), options.timeout);
    let sent = match call {
        ManagementCall::Report => {
            let message = identity::properties_message(service, instance, &options.properties);
            tokio::time::timeout(timeout, transport.report_instance_properties(message, timeout)).await
        }
        ManagementCall::KeepAlive => {
            let message = identity::ping_message(service, instance);
            tokio::time::timeout(timeout, transport.keep_alive(message, timeout)).await
        }
    };
    let result = match sent {
        Ok(Ok(())) => Ok(()),
        Ok(Err(status)) => Err(PollError::Status(status)),
        Err(_) => Err(PollError::Timeout(timeout)),
    };
    let failures = {
        let mut schedule = lock(schedule);
        schedule.record(call, now, result.is_ok());
        schedule.failures_in_a_row
    };
    match result {
        Ok(()) => {
            tracing::debug!(%call, instance, "Instance identity sent.");
            return call == ManagementCall::Report;
        }
        Err(error) if error.is_unreachable() => tracing::debug!(
            %call,
            instance,
            %error,
            "Cannot send the instance identity: the server cannot be reached; the next poll reports it again."
        ),
        Err(error) if failures == 1 => tracing::warn!(
            %call,
            instance,
            code = ?error.code(),
            %error,
            "The server refused the instance identity; polling goes on, and the next poll reports it again."
        ),
        Err(error) => tracing::debug!(%call, failures, %error, "The server still refuses the instance identity."),
    }
    false
}

/// Blank as the Java agent tests it: empty or only whitespace.
fn is_blank(value: &str) -> bool {
    value.chars().all(char::is_whitespace)
}

/// Applies `config` to every registered key; returns the number of events, or the first failure.
fn apply(
    keys: &[(String, Holders)],
    config: &IndexMap<&str, &str>,
    uuid: Option<&str>,
) -> Result<usize, (String, WatcherError)> {
    let mut events = 0;
    for (key, holders) in keys {
        // A registered key the command does not carry is blank: it was removed on the server.
        let new = config.get(key.as_str()).copied().unwrap_or("");
        for watcher in holders {
            let current = watcher.value();
            let (event, value) = if is_blank(new) {
                if current.is_none() {
                    continue;
                }
                (EventType::Delete, None)
            } else if current.as_deref() == Some(new) {
                continue;
            } else {
                (EventType::Modify, Some(new))
            };
            let change = ChangeEvent { key, event, value, uuid };
            // A panicking watcher is a failing watcher, not the end of the poll loop.
            std::panic::catch_unwind(AssertUnwindSafe(|| watcher.notify(&change)))
                .unwrap_or_else(|_| Err(WatcherError::new("the watcher panicked")))
                .map_err(|e| (key.clone(), e))?;
            tracing::info!(%key, %event, value, "Configuration changed.");
            events += 1;
        }
    }
    Ok(events)
}

/// A running agent task.
///
/// Dropping the handle leaves the task running for the life of the runtime; [`Self::stop`] ends it.
#[derive(Debug)]
pub struct AgentHandle {
    status: watch::Receiver<AgentStatus>,
    stop: Arc<Notify>,
    join: JoinHandle<()>,
}

impl AgentHandle {
    /// A receiver of the status published after every poll.
    pub fn status(&self) -> watch::Receiver<AgentStatus> {
        self.status.clone()
    }

    /// Stops the loop (an in-flight call is abandoned) and waits for the task to end.
    pub async fn stop(self) {
        self.stop.notify_one();
        if let Err(error) = self.join.await
            && error.is_panic()
        {
            tracing::error!(%error, "Configuration discovery task panicked.");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_serial_cache_forgets_the_oldest_after_64() {
        let mut cache = SerialCache::default();
        for i in 0..=SERIAL_CACHE_SIZE {
            cache.record(i.to_string());
        }
        assert!(!cache.contains("0"));
        assert!(cache.contains("1"));
        assert!(cache.contains(&SERIAL_CACHE_SIZE.to_string()));
    }

    #[test]
    fn blank_is_empty_or_whitespace() {
        assert!(is_blank(""));
        assert!(is_blank(" \t\n"));
        assert!(!is_blank(" x "));
    }

    struct Never;
    impl Transport for Never {
        async fn fetch(&mut self, _: ConfigurationSyncRequest, _: Duration) -> Result<Commands, tonic::Status> {
            std::future::pending().await
        }
    }

    struct Panics;
    impl crate::Watcher for Panics {
        fn key(&self) -> &str {
            "k"
        }
        fn value(&self) -> Option<String> {
            None
        }
        fn notify(&self, _: &ChangeEvent<'_>) -> Result<(), WatcherError> {
            panic!("on purpose")
        }
    }

    #[test]
    fn a_panicking_watcher_is_a_failing_watcher() {
        let registry = Registry::new();
        registry.register(Arc::new(Panics));
        let config = IndexMap::from([("k", "v")]);
        let (key, error) = apply(&registry.snapshot(), &config, None).unwrap_err();
        assert_eq!((key.as_str(), error.to_string().as_str()), ("k", "the watcher panicked"));
    }

    #[test]
    fn back_off_doubles_from_one_interval_with_jitter_up_to_the_cap() {
        let options = AgentOptions::new("svc").interval(Duration::from_secs(20)).max_backoff(Duration::from_secs(120));
        for _ in 0..100 {
            let mut agent = Agent::new(options.clone(), Registry::new(), Never);
            for base in [20, 40, 80, 120, 120] {
                let base = Duration::from_secs(base);
                let wait = agent.backoff.next_delay();
                assert!(wait >= base / 2 && wait <= base, "{base:?}: {wait:?}");
            }
        }
    }
}
