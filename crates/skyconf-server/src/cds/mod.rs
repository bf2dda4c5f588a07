//! The configuration discovery service agents poll:
//! `/skywalking.v3.ConfigurationDiscoveryService/fetchConfigurations`.
//!
//! A call is request → [`skyconf_core::answer::reply`] (the OAP handler's rule, over the answers
//! pre-encoded per reload) → bytes with a fresh serial number patched in. This module adds only
//! what sits at the edge: the fleet record of who polled, the metrics, the request limit and the
//! panic guard.
//!
//! A poll whose answer would be "unchanged" may be held until the service's answer changes
//! ([`hold`]): a stock agent then gets a change in milliseconds.
//!
//! The call never fails with a status that makes a Java agent drop its channel (UNKNOWN,
//! UNAVAILABLE, RESOURCE_EXHAUSTED, UNAUTHENTICATED, PERMISSION_DENIED): even a panic inside the
//! handler becomes a "no change" answer, which every agent handles by keeping what it has.

pub mod codec;
mod histogram;
pub mod hold;
pub mod metrics;
pub(crate) mod server;

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use skyconf_core::answer::{Answers, FetchOutcome, ReplyOptions, reply_to, reply_with};
use skyconf_proto::v3::ConfigurationSyncRequest;
use tokio::time::Instant;
use tonic::Request;

use crate::fleet::{Caller, Choice, Fleet};
use crate::served::ServedTable;
use crate::served::View;
use hold::{HeldCount, HoldOptions, Release, Slot};
use metrics::CdsMetrics;
pub use server::{CdsCall, CdsServer};
use tokio_util::sync::CancellationToken;

/// The largest request accepted. A real one is a service name and a 128-character digest; a
/// larger message ends with OUT_OF_RANGE, which agents treat as an ordinary error.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;

/// Settings of the CDS service: the reply rule's.
pub type CdsOptions = ReplyOptions;

/// The CDS service over a [`ServedTable`].
#[derive(Debug, Clone)]
pub struct CdsService {
    served: Arc<ServedTable>,
    options: CdsOptions,
    /// Where each poll is recorded (fleet status), if anywhere.
    fleet: Option<Arc<Fleet>>,
    metrics: CdsMetrics,
    /// When polls are held (off until [`Self::with_holding`]).
    hold: HoldOptions,
    held: Arc<HeldCount>,
    /// Releases every held poll ("unchanged") when cancelled.
    shutdown: CancellationToken,
}

impl CdsService {
    /// A service answering from `served`, holding no poll.
    pub fn new(served: Arc<ServedTable>, options: CdsOptions) -> Self {
        Self {
            served,
            options,
            fleet: None,
            metrics: CdsMetrics::default(),
            hold: HoldOptions { enabled: false, ..HoldOptions::default() },
            held: Arc::default(),
            shutdown: CancellationToken::new(),
        }
    }

    /// Holds unchanged polls as `hold` says, releasing them all ("unchanged") once `shutdown` is
    /// cancelled. Never with `disable_message_digest`: every answer is a change then.
    pub fn with_holding(mut self, hold: HoldOptions, shutdown: CancellationToken) -> Self {
        self.hold = HoldOptions { enabled: hold.enabled && !self.options.disable_message_digest, ..hold };
        self.shutdown = shutdown;
        self
    }

    /// The count of polls held now.
    pub fn held(&self) -> Arc<HeldCount> {
        Arc::clone(&self.held)
    }

    /// Counts every answer, and its latency, in `metrics`.
    pub fn with_metrics(mut self, metrics: CdsMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Records every poll's peer and echoed digest in `fleet`.
    pub fn with_fleet(mut self, fleet: Arc<Fleet>) -> Self {
        self.fleet = Some(fleet);
        self
    }

    /// The gRPC route of this service, with skyconf's request limit.
    pub fn into_server(self) -> CdsServer {
        CdsServer::new(self)
    }

    /// The encoded answer for one request: the command, or an empty `Commands` (zero bytes).
    pub fn answer(&self, request: &ConfigurationSyncRequest) -> Bytes {
        self.answer_from(request, None).0
    }

    /// [`Self::answer`] and what kind of answer it is (for the metrics), recording the poll of
    /// `caller` in the fleet table.
    pub fn answer_from(&self, request: &ConfigurationSyncRequest, caller: Option<&Caller>) -> (Bytes, FetchOutcome) {
        self.answer_to(request, caller, true)
    }

    /// The answer for `caller`: its instance's (targeting, a rollout's waves) where the service's
    /// answers vary per instance. `record`: the poll is recorded in the fleet table; when a held
    /// poll is looked up anew (`false`) it is not recorded again, but a command it is answered
    /// with is, so that the fleet knows what the agent was sent after its echo.
    fn answer_to(
        &self,
        request: &ConfigurationSyncRequest,
        caller: Option<&Caller>,
        record: bool,
    ) -> (Bytes, FetchOutcome) {
        // Read before the view: a choice decided from this view holds for this generation.
        let generation = self.served.answers_generation();
        self.served.with_view(|view| {
            let reply = match (&self.fleet, caller) {
                (Some(fleet), Some(caller)) if view.varies(&request.service) => {
                    let choice = choice_of(fleet, caller, view, generation, &request.service);
                    let answers = answers_of(view, choice);
                    reply_with(answers, answers.chosen(&request.service, choice.group).answer, request, self.options)
                }
                _ => reply_to(&view.snapshot.answers, request, None, self.options),
            };
            if let (Some(fleet), Some(caller), Some(current)) = (&self.fleet, caller, reply.current()) {
                if record {
                    let configured = view.snapshot.answers.has_entry(&request.service);
                    fleet.record(caller, &request.service, &request.uuid, &current.digest, configured);
                } else if reply.outcome() != FetchOutcome::Unchanged {
                    fleet.sent(&request.service, caller.key(), &current.digest);
                }
            }
            (reply.encode(), reply.outcome())
        })
    }
}

/// Which answers and group `caller`'s polls for `service` get from `view` (served at answers
/// generation `generation`): remembered on the connection, decided again only when the table,
/// the rollout or the connection's identity changed (N8: targeting patterns are matched once
/// per identity and table version, outside the fleet's locks).
fn choice_of(fleet: &Fleet, caller: &Caller, view: &View<'_>, generation: u64, service: &str) -> Choice {
    let link = caller.link();
    // Read before the identity: a change after it bumps it again.
    let identity_generation = link.map(crate::fleet::Link::identity_generation);
    if identity_generation == Some(0) {
        // The connection never said which instance it is (a proxy's, say): the service's own
        // answers, without a lookup.
        return Choice::default();
    }
    if let Some(choice) = link.and_then(|link| link.choice(service, generation)) {
        return choice;
    }
    let choice = fleet.with_instance(caller.key(), service, |instance| {
        let (answers, rollout) = view.answers_for(service, instance);
        Choice { candidate: rollout.is_some(), group: answers.group_index(service, instance) }
    });
    #[cfg(test)]
    tests::DECISIONS.with(|d| d.set(d.get() + 1));
    if let (Some(link), Some(identity_generation)) = (link, identity_generation) {
        link.remember(service, generation, identity_generation, choice);
    }
    choice
}

/// The answers `choice` picks from `view`.
fn answers_of<'a>(view: &View<'a>, choice: Choice) -> &'a Answers {
    match view.overlay {
        Some(overlay) if choice.candidate => &overlay.candidate,
        _ => &view.snapshot.answers,
    }
}

/// A poll that may be held, once its request is read and decided: all it keeps while it waits.
pub(crate) type Parked = Pin<Box<dyn Future<Output = http::Response<tonic::body::Body>> + Send>>;

impl CdsService {
    /// Answers `request`, a poll that is not to be held ([`HoldOptions::hold_for`] said so), now.
    fn answer_now(&self, request: &Request<ConfigurationSyncRequest>) -> Bytes {
        let started = self.metrics.start();
        let caller = Caller::of(request.extensions());
        let Some((bytes, outcome)) = self.lookup(request.get_ref(), caller.as_ref(), true) else {
            return Bytes::new();
        };
        self.metrics.record(outcome, started);
        bytes
    }

    /// Answers `request` at its first poll, or holds it up to `hold_for` (see [`hold`]) and the
    /// client's `deadline`, whichever ends first.
    ///
    /// The request's metadata and extensions end here: the future keeps the message (the service
    /// and the echoed digest, for the lookup each change brings), the caller, and once held the
    /// watch of answer changes, one timer, the shutdown's waiter and its guards (its place among
    /// the held polls, its fleet row's hold), in one flat state: no future inside it keeps a copy.
    fn parked(
        self: Arc<Self>,
        request: Request<ConfigurationSyncRequest>,
        hold_for: Duration,
        deadline: Option<Instant>,
    ) -> Parked {
        let caller = Caller::of(request.extensions());
        let request = request.into_inner();
        // One timer: the hold's end, or the client's deadline when that comes first (its request
        // was slow to arrive).
        let hold_end = Instant::now() + hold::jittered(hold_for);
        let client_first = deadline.is_some_and(|deadline| deadline <= hold_end);
        let ends = if client_first { deadline.unwrap_or(hold_end) } else { hold_end };
        // What the block captures, and each local of it that lives across the wait, is part of
        // every held poll: the lookup's state is not (`started`, the answer's bytes).
        Box::pin(async move {
            let started = self.metrics.start();
            // Subscribed before the lookup: a change between the two is not missed.
            let mut changes = self.served.subscribe_answers();
            let Some((bytes, outcome)) = self.lookup(&request, caller.as_ref(), true) else {
                return server::answer(Bytes::new());
            };
            let holdable = matches!(outcome, FetchOutcome::Unchanged | FetchOutcome::NotReady);
            let Some(slot) = holdable.then(|| self.take_slot(caller.as_ref())).flatten() else {
                self.metrics.record(outcome, started);
                return server::answer(bytes);
            };
            drop(bytes);
            // The row is seen now while this guard lives: it ends with the hold, however the hold
            // ends (this future dropped at its `await` included).
            let holding = self.fleet.as_ref().zip(caller.as_ref()).map(|(f, c)| f.hold(c.key(), &request.service));
            let expired = tokio::time::sleep_until(ends);
            tokio::pin!(expired);
            // Counts the release however the hold ends, a cancelled call (this future dropped) too.
            let mut released = ReleaseCount { metrics: &self.metrics, release: Release::Cancelled };
            let (release, answer) = loop {
                tokio::select! {
                    () = &mut expired => break (if client_first { Release::Cancelled } else { Release::Expired }, None),
                    () = self.shutdown.cancelled() => break (Release::Shutdown, None),
                    changed = changes.changed() => {
                        if changed.is_err() {
                            break (Release::Shutdown, None);
                        }
                        // The poll was recorded in the fleet when it arrived; this is the same poll.
                        match self.lookup(&request, caller.as_ref(), false) {
                            Some((_, FetchOutcome::Unchanged | FetchOutcome::NotReady)) => {}
                            Some(answer) => break (Release::Changed, Some(answer)),
                            None => break (Release::Expired, None),
                        }
                    }
                }
            };
            drop(slot);
            drop(holding);
            released.release = release;
            if client_first && release == Release::Cancelled {
                // The client has given up on the call by now.
                return server::cancelled();
            }
            let (bytes, outcome) = answer.unwrap_or((Bytes::new(), outcome));
            self.metrics.record(outcome, None);
            server::answer(bytes)
        })
    }

    /// [`Self::answer_to`], with a panic answered "no change" (`None`).
    fn lookup(
        &self,
        request: &ConfigurationSyncRequest,
        caller: Option<&Caller>,
        record: bool,
    ) -> Option<(Bytes, FetchOutcome)> {
        let answered = std::panic::catch_unwind(AssertUnwindSafe(|| self.answer_to(request, caller, record)));
        if answered.is_err() {
            tracing::error!(service = %request.service, "The configuration lookup panicked; answering \"no change\" so the agent keeps its configuration.");
        }
        answered.ok()
    }

    /// A place among the held polls for a call of `caller`, or `None` (counted) when a bound is
    /// reached.
    fn take_slot(&self, caller: Option<&Caller>) -> Option<Slot<'_>> {
        let connection = match caller {
            Some(Caller::Connection(state)) => Some(state),
            _ => None,
        };
        let taken = Slot::take(&self.held, &self.hold, connection);
        taken.map_err(|refusal| self.metrics.hold_refused(refusal)).ok()
    }
}

/// Counts one held call's release when dropped: [`Release::Cancelled`] unless told otherwise.
struct ReleaseCount<'a> {
    metrics: &'a CdsMetrics,
    release: Release,
}

impl Drop for ReleaseCount<'_> {
    fn drop(&mut self) {
        self.metrics.hold_released(self.release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// Targeting decisions made on this thread (cache misses of [`choice_of`]).
        pub(super) static DECISIONS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }
    use prost::Message;
    use skyconf_core::codec::DiscoveryCommand;
    use skyconf_core::digest::EMPTY_DIGEST;
    use skyconf_proto::v3::Commands;

    const V4: &str = "configurations:\n  svc:\n    agent.sample_n_per_3_secs: 10\n";

    fn ask(svc: &CdsService, service: &str, uuid: &str) -> Option<DiscoveryCommand> {
        let bytes = svc.answer(&ConfigurationSyncRequest { service: service.into(), uuid: uuid.into() });
        let commands = Commands::decode(bytes).unwrap();
        assert!(commands.commands.len() <= 1, "one command at most");
        commands.commands.first().map(|c| DiscoveryCommand::from_command(c).unwrap())
    }

    // The reply rule itself is tested in skyconf_core::answer; these check the service uses the
    // table it is given, as it changes.
    #[test]
    fn a_server_without_a_table_answers_no_change() {
        let svc = CdsService::new(Arc::new(ServedTable::waiting()), CdsOptions::default());
        assert!(ask(&svc, "svc", "").is_none());
    }

    #[test]
    fn a_delete_makes_everyone_empty() {
        let served = Arc::new(ServedTable::new(skyconf_core::read(V4).unwrap()));
        let svc = CdsService::new(Arc::clone(&served), CdsOptions::default());
        let digest = ask(&svc, "svc", "").unwrap().uuid.unwrap();
        assert!(ask(&svc, "svc", &digest).is_none());
        served.install(skyconf_core::AgentConfigurations::default());
        assert_eq!(ask(&svc, "svc", &digest).unwrap().uuid.as_deref(), Some(EMPTY_DIGEST));
    }

    /// N8: a connection's targeting group is decided once per identity and table version, not
    /// matched again on every poll; a new identity or a new table decides again.
    #[test]
    fn targeting_is_decided_once_per_identity_and_table_version() {
        const TARGETED: &str = "configurations:\n  svc:\n    k: base\ntargeting:\n  svc:\n    - group: canary\n      instances: [canary-*]\n      settings:\n        k: canary\n";
        let served = Arc::new(ServedTable::new(skyconf_core::read(TARGETED).unwrap()));
        let fleet = Arc::new(Fleet::new(crate::fleet::FleetOptions::default()));
        let svc = CdsService::new(Arc::clone(&served), CdsOptions::default()).with_fleet(Arc::clone(&fleet));
        let peer = Some(([10, 0, 0, 1], 9).into());
        let state = Arc::new(crate::socket::ConnectionState::new(peer).with(crate::fleet::Link::new(peer)));
        let caller = Caller::Connection(Arc::clone(&state));
        let name = |instance: &str| crate::fleet::InstanceIdentity {
            service: "svc".into(),
            instance: instance.into(),
            ..Default::default()
        };
        let value = |svc: &CdsService| {
            let request = ConfigurationSyncRequest { service: "svc".into(), uuid: String::new() };
            let (bytes, _) = svc.answer_from(&request, Some(&caller));
            let commands = Commands::decode(bytes).unwrap();
            DiscoveryCommand::from_command(&commands.commands[0]).unwrap().config[0].1.clone()
        };
        let decisions = || DECISIONS.with(std::cell::Cell::get);
        let before = decisions();
        fleet.identify(&caller, &name("canary-1"));
        for _ in 0..100 {
            assert_eq!(value(&svc), "canary");
        }
        assert_eq!(decisions() - before, 1, "decided once for 100 polls");
        // A keepAlive that says the same changes nothing.
        fleet.identify(&caller, &name("canary-1"));
        assert_eq!(value(&svc), "canary");
        assert_eq!(decisions() - before, 1);
        fleet.identify(&caller, &name("stable-1"));
        assert_eq!(value(&svc), "base", "another identity: decided again");
        assert_eq!(value(&svc), "base");
        assert_eq!(decisions() - before, 2);
        served.install(skyconf_core::read(&TARGETED.replace("canary-*", "stable-*")).unwrap());
        assert_eq!(value(&svc), "canary", "a new table: decided again");
        assert_eq!(decisions() - before, 3);
        // The connection closed: nothing is remembered, nothing recorded.
        state.close();
        assert_eq!(value(&svc), "base", "a closed connection has no identity");
        assert_eq!(fleet.tracked(), 0);
    }

    // Held polls, in virtual time: the service is called as tonic calls it.
    mod held {
        use super::*;
        use crate::socket::{AgentConnection, ConnectionState};

        /// An agent connection's state with the slots the CDS service reads: its fleet link and
        /// its held polls.
        fn agent_state() -> ConnectionState {
            ConnectionState::default().with(crate::fleet::Link::new(None)).with(crate::cds::hold::HeldPolls::default())
        }
        use std::time::Duration;
        use tokio::time::Instant;

        const V5: &str = "configurations:\n  svc:\n    agent.sample_n_per_3_secs: 20\n";
        const OTHER: &str = "configurations:\n  svc:\n    agent.sample_n_per_3_secs: 10\n  other:\n    k: v\n";

        /// The [`V4`] table, served.
        fn served_v4() -> Arc<ServedTable> {
            Arc::new(ServedTable::new(skyconf_core::read(V4).unwrap()))
        }

        /// The [`V4`] table served by a service holding polls with the default bounds.
        fn holding_v4() -> (Arc<ServedTable>, Arc<CdsService>, CancellationToken) {
            let served = served_v4();
            let (svc, stop) = holding(&served, HoldOptions::default());
            (served, svc, stop)
        }

        fn holding(served: &Arc<ServedTable>, hold: HoldOptions) -> (Arc<CdsService>, CancellationToken) {
            let stop = CancellationToken::new();
            let svc = CdsService::new(Arc::clone(served), CdsOptions::default()).with_holding(hold, stop.clone());
            (Arc::new(svc), stop)
        }

        /// A service holding polls with the default bounds that tells `fleet` of its agents.
        fn holding_for(
            served: &Arc<ServedTable>,
            fleet: &Arc<crate::fleet::Fleet>,
        ) -> (Arc<CdsService>, CancellationToken) {
            let stop = CancellationToken::new();
            let svc = CdsService::new(Arc::clone(served), CdsOptions::default())
                .with_holding(HoldOptions::default(), stop.clone())
                .with_fleet(Arc::clone(fleet));
            (Arc::new(svc), stop)
        }

        /// The connection of an agent at 10.0.0.1:`port`.
        fn connection(port: u16) -> AgentConnection {
            AgentConnection {
                tcp: tonic::transport::server::TcpConnectInfo {
                    local_addr: None,
                    remote_addr: Some(std::net::SocketAddr::from(([10, 0, 0, 1], port))),
                },
                state: Arc::new(agent_state()),
            }
        }

        fn request(
            uuid: &str,
            metadata: &[(&'static str, &'static str)],
            connection: Option<&AgentConnection>,
        ) -> Request<ConfigurationSyncRequest> {
            let mut request = Request::new(ConfigurationSyncRequest { service: "svc".into(), uuid: uuid.into() });
            for (k, v) in metadata {
                request.metadata_mut().insert(*k, v.parse().unwrap());
            }
            if let Some(connection) = connection {
                request.extensions_mut().insert(connection.clone());
            }
            request
        }

        /// Starts a call in a task; returns its handle once it is held (or answered).
        async fn start(
            svc: &Arc<CdsService>,
            request: Request<ConfigurationSyncRequest>,
        ) -> tokio::task::JoinHandle<Option<DiscoveryCommand>> {
            let before = svc.held().get();
            let svc2 = Arc::clone(svc);
            let call = tokio::spawn(async move {
                let bytes = server::testing::fetch(&svc2, request).await.unwrap();
                let commands = Commands::decode(bytes).unwrap();
                commands.commands.first().map(|c| DiscoveryCommand::from_command(c).unwrap())
            });
            for _ in 0..100 {
                if svc.held().get() > before || call.is_finished() {
                    break;
                }
                tokio::task::yield_now().await;
            }
            call
        }

        fn current(served: &ServedTable) -> String {
            served.snapshot().answer("svc").digest.as_str().to_owned()
        }

        #[tokio::test(start_paused = true)]
        async fn a_held_poll_gets_the_change_at_once_and_another_services_change_keeps_it_held() {
            let (served, svc, _stop) = holding_v4();
            let digest = current(&served);
            let started = Instant::now();
            let call = start(&svc, request(&digest, &[("grpc-timeout", "30S")], None)).await;
            assert_eq!(svc.held().get(), 1, "an unchanged poll with a 30 s deadline is held");

            tokio::time::sleep(Duration::from_secs(5)).await;
            served.install(skyconf_core::read(OTHER).unwrap());
            tokio::time::sleep(Duration::from_secs(5)).await;
            assert!(!call.is_finished(), "svc's answer did not change");

            served.install(skyconf_core::read(V5).unwrap());
            let command = call.await.unwrap().expect("the new command");
            assert_eq!(command.uuid.as_deref(), Some(current(&served).as_str()));
            assert_eq!(command.config, [("agent.sample_n_per_3_secs".to_owned(), "20".to_owned())]);
            assert_eq!(started.elapsed(), Duration::from_secs(10), "answered the moment it changed");
            assert_eq!(svc.held().get(), 0);
            assert_eq!(svc.metrics.fetches(FetchOutcome::Changed), 1);
        }

        #[tokio::test(start_paused = true)]
        async fn a_held_poll_is_answered_unchanged_the_margin_before_its_deadline() {
            let (served, svc, _stop) = holding_v4();
            let started = Instant::now();
            let call = start(&svc, request(&current(&served), &[("grpc-timeout", "30S")], None)).await;
            assert_eq!(call.await.unwrap(), None, "unchanged");
            let held = started.elapsed();
            let (end, tenth) = (Duration::from_secs(28), Duration::from_millis(2_800));
            assert!(held <= end && held >= end - tenth, "2 s before the 30 s deadline, less a random tenth: {held:?}");
            assert_eq!(svc.metrics.fetches(FetchOutcome::Unchanged), 1);
        }

        #[tokio::test(start_paused = true)]
        async fn the_java_agents_timing_becomes_a_continuous_long_poll_that_never_meets_its_deadline() {
            // Fixed rate of 20 s, a deadline of 30 s per call, as the Java agent schedules it.
            let (served, svc, _stop) = holding_v4();
            let (interval, deadline) = (Duration::from_secs(20), Duration::from_secs(30));
            let mut uuid = String::new();
            let mut next = Instant::now();
            let mut received = Vec::new();
            let changes_at = [61u64, 95, 200, 333];
            let mut changes = changes_at.iter().peekable();
            let origin = Instant::now();
            while origin.elapsed() < Duration::from_secs(400) {
                tokio::time::sleep_until(next).await;
                let started = Instant::now();
                let timeout = format!("{}S", deadline.as_secs());
                let call = Arc::clone(&svc);
                let mut req = Request::new(ConfigurationSyncRequest { service: "svc".into(), uuid: uuid.clone() });
                req.metadata_mut().insert("grpc-timeout", timeout.parse().unwrap());
                let answer = tokio::spawn(async move { server::testing::fetch(&call, req).await });
                // The store changes while calls are in flight.
                let mut answer = std::pin::pin!(answer);
                let bytes = loop {
                    let at = changes.peek().map(|s| origin + Duration::from_secs(**s));
                    tokio::select! {
                        done = &mut answer => break done.unwrap().unwrap(),
                        () = async { tokio::time::sleep_until(at.unwrap()).await }, if at.is_some() => {
                            let value = 100 + changes.next().unwrap();
                            let doc = format!("configurations:\n  svc:\n    agent.sample_n_per_3_secs: {value}\n");
                            served.install(skyconf_core::read(&doc).unwrap());
                        }
                    }
                };
                assert!(started.elapsed() < deadline, "no call meets its deadline");
                if let Some(c) = Commands::decode(bytes).unwrap().commands.first() {
                    let command = DiscoveryCommand::from_command(c).unwrap();
                    uuid = command.uuid.unwrap();
                    received.push(origin.elapsed().as_secs());
                }
                next = (started + interval).max(Instant::now());
            }
            // The first poll gets the configuration; every change made while a call was held
            // arrives that same second.
            assert_eq!(received, [0, 61, 95, 200, 333], "when each command arrived");
        }

        #[tokio::test(start_paused = true)]
        async fn without_a_deadline_only_the_go_agent_is_held_and_only_up_to_the_cap() {
            let (served, svc, _stop) = holding_v4();
            let digest = current(&served);
            let started = Instant::now();
            let call = start(&svc, request(&digest, &[("user-agent", "grpcurl/v1.9.1 grpc-go/1.61.0")], None)).await;
            assert_eq!(call.await.unwrap(), None);
            assert_eq!(started.elapsed(), Duration::ZERO, "a generic tool is answered at once");
            let call = start(&svc, request(&digest, &[("user-agent", "grpc-go/1.71.0")], None)).await;
            assert_eq!(call.await.unwrap(), None);
            let held = started.elapsed();
            assert!(
                held <= Duration::from_secs(30) && held >= Duration::from_secs(27),
                "the Go agent is held up to the cap: {held:?}"
            );
            let call = start(&svc, request(&digest, &[("grpc-timeout", "30S"), ("skyconf-hold", "off")], None)).await;
            let before = Instant::now();
            assert_eq!(call.await.unwrap(), None);
            assert_eq!(before.elapsed(), Duration::ZERO, "skyconf-hold: off is answered at once");
        }

        #[tokio::test(start_paused = true)]
        async fn shutdown_releases_every_held_poll_unchanged() {
            let (served, svc, stop) = holding_v4();
            let digest = current(&served);
            let mut calls = Vec::new();
            for _ in 0..5 {
                calls.push(start(&svc, request(&digest, &[("grpc-timeout", "30S")], None)).await);
            }
            assert_eq!(svc.held().get(), 5);
            let started = Instant::now();
            stop.cancel();
            for call in calls {
                assert_eq!(call.await.unwrap(), None);
            }
            assert_eq!(started.elapsed(), Duration::ZERO);
            assert_eq!(svc.held().get(), 0);
        }

        #[tokio::test(start_paused = true)]
        async fn a_held_poll_the_client_cancels_is_counted_and_gives_its_place_back() {
            let (served, svc, _stop) = holding_v4();
            let call = start(&svc, request(&current(&served), &[("grpc-timeout", "30S")], None)).await;
            assert_eq!(svc.held().get(), 1);
            call.abort();
            let _ = call.await;
            assert_eq!(svc.held().get(), 0);
            assert_eq!(svc.metrics.held_released(Release::Cancelled), 1);
            assert_eq!(svc.metrics.held_released(Release::Expired), 0);
        }

        /// The hold is a guard: a call dropped at its `await` (the client went away) is no
        /// longer held, so its row ages from that moment like any other.
        #[tokio::test(start_paused = true)]
        async fn a_held_poll_the_client_cancels_is_no_longer_held_in_the_fleet() {
            let served = served_v4();
            let fleet = Arc::new(crate::fleet::Fleet::new(crate::fleet::FleetOptions {
                expire_after: Duration::ZERO,
                ..crate::fleet::FleetOptions::default()
            }));
            let (svc, _stop) = holding_for(&served, &fleet);
            let connection = connection(7);
            let held = [("grpc-timeout", "30S")];
            assert!(start(&svc, request("", &held, Some(&connection))).await.await.unwrap().is_some());
            let call = start(&svc, request(&current(&served), &held, Some(&connection))).await;
            assert_eq!(svc.held().get(), 1);
            assert_eq!(fleet.sweep(), 0, "a held agent is not forgotten");
            call.abort();
            let _ = call.await;
            assert_eq!(svc.held().get(), 0);
            assert_eq!(fleet.sweep(), 1, "its hold ended with the call: it ages as any row does");
        }

        #[tokio::test(start_paused = true)]
        async fn held_polls_are_bounded_per_connection_and_in_total() {
            let served = served_v4();
            let hold = HoldOptions { max_held: 3, max_held_per_connection: 2, ..HoldOptions::default() };
            let (svc, _stop) = holding(&served, hold);
            let digest = current(&served);
            let (a, b) = (connection(1), connection(2));
            let held = [("grpc-timeout", "30S")];
            let _a1 = start(&svc, request(&digest, &held, Some(&a))).await;
            let _a2 = start(&svc, request(&digest, &held, Some(&a))).await;
            let a3 = start(&svc, request(&digest, &held, Some(&a))).await;
            assert_eq!(svc.held().get(), 2, "the connection's bound");
            assert!(a3.await.unwrap().is_none());
            let _b1 = start(&svc, request(&digest, &held, Some(&b))).await;
            let b2 = start(&svc, request(&digest, &held, Some(&b))).await;
            assert_eq!(svc.held().get(), 3, "the total bound");
            assert!(b2.await.unwrap().is_none());
        }

        #[tokio::test(start_paused = true)]
        async fn a_poll_before_any_table_is_held_until_the_first_one() {
            let served = Arc::new(ServedTable::waiting());
            let (svc, _stop) = holding(&served, HoldOptions::default());
            let call = start(&svc, request("", &[("grpc-timeout", "30S")], None)).await;
            assert_eq!(svc.held().get(), 1);
            served.install(skyconf_core::read(V4).unwrap());
            assert!(call.await.unwrap().is_some(), "the first table reaches the held agent");
        }

        /// The most one held poll keeps parked, in bytes (its [`Parked`] future): 568 on x86-64
        /// with tokio 1.54, with room for a dependency's growth but not for the request (whose
        /// headers alone are 96 bytes, its `tonic::Request` over 200).
        const PARKED_BYTES: usize = 640;

        /// A held poll keeps, beside its HTTP/2 stream, the route's call ([`server::CdsCall`], two
        /// pointers and a step) and its parked future: what it waits with (the service name and
        /// echoed digest, the caller, the watch receiver, one timer for the hold and the client's
        /// deadline, the shutdown's waiter and the guards), not the request, its headers, its
        /// decoding or the state of the lookup before it. A change that keeps more shows here.
        #[tokio::test(start_paused = true)]
        async fn a_held_poll_keeps_no_more_than_its_waiter_and_deadline() {
            let served = served_v4();
            let fleet = Arc::new(crate::fleet::Fleet::new(crate::fleet::FleetOptions::default()));
            let (svc, _stop) = holding_for(&served, &fleet);
            let connection = connection(7);
            let held = [("grpc-timeout", "30S"), ("user-agent", "grpc-java-netty/1.68.1")];
            let request = server::testing::http_request(request(&current(&served), &held, Some(&connection)));
            let mut call = tower::Service::call(&mut CdsServer::shared(&svc), request);
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            assert!(std::pin::Pin::new(&mut call).poll(&mut cx).is_pending());
            assert_eq!(svc.held().get(), 1, "held");
            assert!(std::mem::size_of_val(&call) <= 24, "the call is its step: {call:?}");
            let parked = call.parked_bytes().expect("parked");
            assert!(parked <= PARKED_BYTES, "a held poll's parked future is {parked} bytes, over {PARKED_BYTES}");
            drop(call);
            assert_eq!(svc.held().get(), 0, "its slot is given back with it");
        }

        #[tokio::test(start_paused = true)]
        async fn no_poll_is_held_when_every_answer_is_a_change() {
            let served = served_v4();
            let svc = CdsService::new(Arc::clone(&served), CdsOptions { disable_message_digest: true })
                .with_holding(HoldOptions::default(), CancellationToken::new());
            let svc = Arc::new(svc);
            let call = start(&svc, request(&current(&served), &[("grpc-timeout", "30S")], None)).await;
            assert!(call.await.unwrap().is_some(), "the whole configuration, at once");
            assert_eq!(svc.held().get(), 0);
        }
    }
}
