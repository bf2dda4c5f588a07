//! The fleet model suite: a simulated fleet, in process and in paused time, held against a
//! reference model of what the fleet view must show (`/work/notes`' fleet-view contract, the
//! README's Fleet section).
//!
//! Each schedule builds one or two replicas from the real parts: a [`ServedTable`], a [`Fleet`],
//! the [`CdsService`] with held polls on (the defaults: 30 s deadlines held 28 s less a random
//! tenth), the [`Management`] service, the metrics with the fleet gauges, the admin API's read
//! routes and the replica summaries over an in-memory shared-records store. Agents reach them
//! through simulated connections (a [`crate::socket::OpenConnection`] each, as the socket holds
//! it) with the Java agent's timing: polls at a fixed rate of 20 s with a 30 s deadline (so a held
//! poll is followed at once by the next), `reportInstanceProperties` at start and `keepAlive`
//! every 30 s on its own schedule (a report every tenth). A seeded schedule then does what fleets
//! do: crashes (calls and connection dropped at once), graceful stops (calls cancelled, then the
//! connection closed), silent partitions (nothing more arrives; the server's PING closes the
//! connection `PING_INTERVAL + PING_TIMEOUT` later), restarts under the same or a new name,
//! reconnects to the other replica, names reused by a second pod, bursts of new agents, a
//! connection renamed, a second service dropped by a connection that keeps polling its first,
//! configuration changes (targeting included) and agents that never apply them (stuck).
//!
//! The reference model is updated exactly where the server's state changes (a call's arrival and
//! end in the call's own task, every other event in the driver), so at every quiescent point the
//! two must agree, exactly: every row's state, polls, echoed digest and `last_seen_ms` (now
//! while held), the counts by state ([`Fleet::counts`]), the unpaged instances list the rollout
//! driver reads, and, every few steps, `/metrics` (`skyconf_fleet_agents{service,state}`),
//! `/api/v1/services` and every page of `/api/v1/instances`. Each replica summary written is
//! checked against the model at that instant, and each replica's merged counts against its own
//! model plus the summaries it read. Every answer an agent receives is checked against the
//! digest the model says it is served (targeting groups included).
//!
//! `SKYCONF_MODEL_SCHEDULES` (default [`DEFAULT_SCHEDULES`]) and `SKYCONF_MODEL_SEED` (the first
//! seed) run more, or one again: a failure names its seed.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use http_body_util::BodyExt;
use prost::Message;
use serde_json::Value;
use skyconf_core::Digest;
use skyconf_core::codec::DiscoveryCommand;
use skyconf_proto::v3::management_service_server::ManagementService;
use skyconf_proto::v3::{Commands, ConfigurationSyncRequest, InstancePingPkg, InstanceProperties, KeyStringValuePair};
use skyconf_sources::{Lifetime, SharedRecords};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use super::replicas::{FLEET_KIND, ReplicaOptions, Replicas, Summary};
use super::{AgentState, Fleet, FleetOptions, Link, StateCounts};
use crate::cds::hold::HoldOptions;
use crate::cds::{CdsOptions, CdsService};
use crate::management::Management;
use crate::metrics::Metrics;
use crate::security::limits::{PING_INTERVAL, PING_TIMEOUT};
use crate::served::ServedTable;
use crate::socket::{AgentConnection, ConnectionState, OpenConnection};

mod checks;
mod records;
mod reference;
mod rng;

use checks::{Listed, RowSet};
use records::Records;
use reference::{Conn, Model, Served};
use rng::Rng;

/// Schedules run by default: enough to meet every kind of event many times, within the CI budget.
const DEFAULT_SCHEDULES: u64 = 600;

/// The Java agent's poll period (`collector.get_agent_dynamic_config_interval`, fixed rate).
const POLL_EVERY: Duration = Duration::from_secs(20);

/// The Java agent's call deadline (`collector.grpc_upstream_timeout`).
const DEADLINE: &str = "30S";

/// The Java agent's heartbeat period: a `keepAlive`, and every tenth a `reportInstanceProperties`.
const KEEPALIVE_EVERY: Duration = Duration::from_secs(30);

/// Every how many steps the API and `/metrics` are read too (the fleet's own queries are
/// checked at every step).
const API_EVERY: u64 = 12;

/// How often the view is checked when nothing else happens.
const CHECK_EVERY: Duration = Duration::from_secs(7);

/// How long a schedule runs, in simulated time.
const RUN_FOR: Duration = Duration::from_secs(240);

/// The services: one with a targeting group, one without, one name without configuration.
const TARGETED: &str = "svc-a";
const PLAIN: &str = "svc-b";
const TYPO: &str = "svc-typo";

/// The document of version `v`: the targeted service's group selects `canary-*` or, with
/// `flipped`, `pod-*`; `plain` says whether the plain service is configured.
fn document(v: u64, flipped: bool, plain: bool) -> String {
    let pattern = if flipped { "pod-*" } else { "canary-*" };
    let mut doc = format!("configurations:\n  {TARGETED}:\n    k: a{v}\n");
    if plain {
        doc.push_str(&format!("  {PLAIN}:\n    k: b{v}\n"));
    }
    doc.push_str(&format!(
        "targeting:\n  {TARGETED}:\n    - group: canary\n      instances: [\"{pattern}\"]\n      settings:\n        k: c{v}\n"
    ));
    doc
}

/// Everything the simulation and the model share, behind one lock (never held across an await).
#[derive(Debug, Default)]
struct World {
    served: Served,
    models: Vec<Model>,
    /// Each replica's fleet, to read its clock.
    fleets: Vec<Arc<Fleet>>,
    /// Summaries written, checked: (replica, services).
    summaries_checked: usize,
    failure: Option<String>,
}

impl World {
    fn now(&self, replica: usize) -> u64 {
        self.fleets[replica].now_unix_ms()
    }

    fn fail(&mut self, what: String) {
        if self.failure.is_none() {
            self.failure = Some(what);
        }
    }
}

type Shared = Arc<Mutex<World>>;

fn lock(world: &Shared) -> std::sync::MutexGuard<'_, World> {
    world.lock().unwrap_or_else(|p| p.into_inner())
}

/// One replica of a schedule.
struct Replica {
    served: Arc<ServedTable>,
    fleet: Arc<Fleet>,
    cds: Arc<CdsService>,
    management: Management,
    metrics: Metrics,
    admin: Router,
    replicas: Arc<Replicas>,
}

/// How a call ended, as its task reports it to the driver.
#[derive(Debug)]
struct Ended {
    agent: usize,
    poller: usize,
    /// The connection it was made on.
    conn: u64,
    /// The command received, if any (`None`: unchanged, or cancelled).
    command: Option<String>,
}

/// A call in flight: cancelling it drops its future, as the transport does.
struct InFlight {
    conn: u64,
    cancel: Option<oneshot::Sender<()>>,
}

/// One poll loop of an agent (a Java agent has one; a connection shared through a proxy may
/// carry a second service, which it may stop polling).
struct Poller {
    service: String,
    uuid: String,
    /// The fixed-rate schedule: the k-th poll is due at `first + k * POLL_EVERY`.
    first: Instant,
    k: u32,
    /// When the next poll starts (`None`: one is in flight, or this poller stopped).
    next: Option<Instant>,
    in_flight: Option<InFlight>,
    stopped: bool,
}

/// A connection the simulation opened.
struct SimConn {
    replica: usize,
    open: Option<OpenConnection>,
    connection: AgentConnection,
    id: u64,
    /// Partitioned: nothing more reaches the server; it closes the connection at this time.
    silent_until: Option<Instant>,
}

/// One simulated agent process.
struct Agent {
    name: String,
    service: String,
    /// Sends no `ManagementService` call (a poller behind a proxy, or not an agent).
    quiet: bool,
    /// Applies nothing after its first configuration (a watcher that throws).
    stuck: bool,
    pollers: Vec<Poller>,
    conn: Option<SimConn>,
    next_keepalive: Option<Instant>,
    heartbeats: u32,
    /// When a stopped agent starts again (restart), and under which name.
    restart: Option<(Instant, String)>,
    alive: bool,
}

/// A schedule: its replicas, agents, the model and the driver's clock.
struct Sim {
    seed: u64,
    rng: Rng,
    world: Shared,
    replicas: Vec<Replica>,
    agents: Vec<Agent>,
    ended_tx: mpsc::UnboundedSender<Ended>,
    ended_rx: mpsc::UnboundedReceiver<Ended>,
    next_port: u16,
    version: u64,
    flipped: bool,
    plain: bool,
    start: Instant,
    steps: u64,
    stop: CancellationToken,
    records: Arc<Records>,
    /// Global events: (when, what).
    events: Vec<(Instant, Event)>,
    next_sweep: Instant,
    sweep_every: Duration,
    next_name: u32,
    /// The next check with nothing else due: held rows are "seen now" as time passes.
    next_check: Instant,
    /// Connections of stopped agents that close at a time: (when, agent).
    closing: Vec<(Instant, usize)>,
    /// How many of each event kind ran.
    tally: BTreeMap<&'static str, u64>,
    /// Rows compared, and of those held, over the run (to see that the checks see something).
    rows_checked: u64,
    held_seen: u64,
}

#[derive(Debug, Clone, Copy)]
enum Event {
    Install,
    Crash,
    Stop,
    Partition,
    RestartSame,
    RestartNew,
    Elsewhere,
    Reuse,
    Burst,
    Stuck,
    Rename,
    DropSecond,
    Cancel,
}

const EVENTS: [Event; 13] = [
    Event::Install,
    Event::Crash,
    Event::Stop,
    Event::Partition,
    Event::RestartSame,
    Event::RestartNew,
    Event::Elsewhere,
    Event::Reuse,
    Event::Burst,
    Event::Stuck,
    Event::Rename,
    Event::DropSecond,
    Event::Cancel,
];

impl Sim {
    async fn new(seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        crate::cds::hold::seed_jitter(rng.next());
        let replica_count = if rng.chance(30) { 2 } else { 1 };
        let options = FleetOptions {
            expect_identity: rng.chance(25),
            expire_after: if rng.chance(40) { Duration::from_secs(90) } else { Duration::from_secs(600) },
            ..FleetOptions::default()
        };
        let world: Shared = Arc::default();
        let ids: Vec<String> = (0..replica_count).map(|i| format!("replica-{i}")).collect();
        let records = Arc::new(Records { records: Mutex::default(), world: Arc::clone(&world), ids: ids.clone() });
        let stop = CancellationToken::new();
        let doc = document(1, false, true);
        let mut replicas = Vec::new();
        for (index, id) in ids.iter().enumerate() {
            let served = Arc::new(ServedTable::new(skyconf_core::read(&doc).unwrap()));
            let fleet = Arc::new(Fleet::new(options));
            let cds = CdsService::new(Arc::clone(&served), CdsOptions::default())
                .with_holding(HoldOptions::default(), stop.clone())
                .with_fleet(Arc::clone(&fleet));
            let metrics = Metrics::default();
            metrics.fleet().count(&fleet, &served);
            let shared: Option<Arc<dyn SharedRecords>> =
                (replica_count > 1).then(|| Arc::clone(&records) as Arc<dyn SharedRecords>);
            let replica_options = ReplicaOptions { name: Some(id.clone()), ..ReplicaOptions::default() };
            let replicas_view = Arc::new(Replicas::new(replica_options, shared, "127.0.0.1:1".parse().unwrap()));
            let store = Arc::new(crate::store_view::StoreView::new("model".into(), Default::default(), true, false));
            let admin = crate::admin::Admin::new(Arc::clone(&served), store)
                .with_fleet(Arc::clone(&fleet))
                .with_replicas(Arc::clone(&replicas_view))
                .read_routes();
            {
                let mut world = lock(&world);
                world.models.push(Model { options: Some(fleet.options()), ..Model::default() });
                world.fleets.push(Arc::clone(&fleet));
            }
            // The replicas publish 5 s apart, so that no two ticks meet.
            let publishing = Arc::clone(&replicas_view).run(Arc::clone(&fleet), Arc::clone(&served), stop.clone());
            let delay = Duration::from_secs(5 * index as u64);
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                publishing.await;
            });
            let management = Management::new(Arc::clone(&fleet));
            replicas.push(Replica {
                served,
                fleet,
                cds: Arc::new(cds),
                management,
                metrics,
                admin,
                replicas: replicas_view,
            });
        }
        lock(&world).served = Served::of(&replicas[0].served, false);
        let (ended_tx, ended_rx) = mpsc::unbounded_channel();
        let start = Instant::now();
        let sweep_every = (options.expire_after / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
        let mut sim = Self {
            seed,
            rng,
            world,
            replicas,
            agents: Vec::new(),
            ended_tx,
            ended_rx,
            next_port: 1,
            version: 1,
            flipped: false,
            plain: true,
            start,
            steps: 0,
            stop,
            records,
            events: Vec::new(),
            next_sweep: start + sweep_every,
            sweep_every,
            next_name: 0,
            closing: Vec::new(),
            next_check: start + CHECK_EVERY,
            tally: BTreeMap::new(),
            rows_checked: 0,
            held_seen: 0,
        };
        let initial = 3 + sim.rng.below(6);
        for _ in 0..initial {
            let at = start + sim.rng.millis(Duration::from_secs(10));
            sim.spawn_agent(at, None);
        }
        let churn = 4 + sim.rng.below(8);
        for _ in 0..churn {
            let at = start + Duration::from_secs(15) + sim.rng.millis(RUN_FOR - Duration::from_secs(60));
            let event = EVENTS[sim.rng.below(EVENTS.len() as u64) as usize];
            sim.events.push((at, event));
        }
        sim.events.sort_by_key(|(at, _)| *at);
        sim
    }

    fn fresh_name(&mut self, service: &str) -> String {
        self.next_name += 1;
        let prefix = if service == TARGETED && self.rng.chance(40) { "canary" } else { "pod" };
        format!("{prefix}-{}", self.next_name)
    }

    /// Adds an agent starting at `at` (named `name`, or a fresh name).
    fn spawn_agent(&mut self, at: Instant, name: Option<(String, String)>) -> usize {
        let (service, name) = match name {
            Some(known) => known,
            None => {
                let service = match self.rng.below(10) {
                    0 => TYPO,
                    1..=5 => TARGETED,
                    _ => PLAIN,
                }
                .to_owned();
                let name = self.fresh_name(&service);
                (service, name)
            }
        };
        let quiet = self.rng.chance(15);
        let mut agent = Agent {
            name,
            service: service.clone(),
            quiet,
            stuck: false,
            pollers: Vec::new(),
            conn: None,
            next_keepalive: None,
            heartbeats: 0,
            restart: Some((at, String::new())),
            alive: false,
        };
        agent.restart = Some((at, agent.name.clone()));
        self.agents.push(agent);
        self.agents.len() - 1
    }

    /// Starts agent `a` now: a new connection to `replica`, a report, and its poll loops.
    fn boot(&mut self, a: usize, replica: usize, keep_uuid: bool) {
        let now = Instant::now();
        let conn = self.connect(replica);
        let second = (!keep_uuid && self.rng.chance(15)).then(|| if self.rng.chance(50) { PLAIN } else { TYPO });
        let agent = &mut self.agents[a];
        agent.alive = true;
        agent.conn = Some(conn);
        agent.heartbeats = 0;
        let offset = Duration::from_millis(self.rng.below(3000));
        let management_offset = Duration::from_millis(self.rng.below(3000));
        let agent = &mut self.agents[a];
        agent.next_keepalive = (!agent.quiet).then_some(now + management_offset);
        if keep_uuid {
            for poller in &mut agent.pollers {
                poller.first = now + offset;
                poller.k = 0;
                poller.next = (!poller.stopped).then_some(now + offset);
                poller.in_flight = None;
            }
        } else {
            let mut services = vec![agent.service.clone()];
            services.extend(second.map(str::to_owned));
            agent.pollers = services
                .into_iter()
                .map(|service| Poller {
                    service,
                    uuid: String::new(),
                    first: now + offset,
                    k: 0,
                    next: Some(now + offset),
                    in_flight: None,
                    stopped: false,
                })
                .collect();
        }
    }

    fn connect(&mut self, replica: usize) -> SimConn {
        let port = self.next_port;
        self.next_port += 1;
        let peer = SocketAddr::from(([10, 0, (port >> 8) as u8, port as u8], 40_000 + port));
        let open = OpenConnection::of(
            ConnectionState::new(Some(peer)).with(Link::new(Some(peer))).with(crate::cds::hold::HeldPolls::default()),
        );
        let state = Arc::clone(open.state());
        let id = state.get::<Link>().map(|link| link.key().id).unwrap_or_default();
        let connection = AgentConnection {
            tcp: tonic::transport::server::TcpConnectInfo { local_addr: None, remote_addr: Some(peer) },
            state,
        };
        lock(&self.world).models[replica].conns.insert(id, Conn { peer, identity: None, rows: BTreeMap::new() });
        SimConn { replica, open: Some(open), connection, id, silent_until: None }
    }

    /// Closes agent `a`'s connection now (the server saw FIN, RST or an unanswered PING).
    fn close(&mut self, a: usize) {
        let Some(mut conn) = self.agents[a].conn.take() else { return };
        let mut world = lock(&self.world);
        drop(conn.open.take());
        world.models[conn.replica].conns.remove(&conn.id);
    }

    /// Cancels agent `a`'s calls (their futures dropped, as when the client resets its streams).
    fn cancel_calls(&mut self, a: usize) {
        for poller in &mut self.agents[a].pollers {
            if let Some(mut call) = poller.in_flight.take()
                && let Some(cancel) = call.cancel.take()
            {
                let _ = cancel.send(());
            }
        }
    }

    /// The time of the next thing the driver must do.
    fn next_due(&self) -> Instant {
        let mut next = self.start + RUN_FOR;
        next = next.min(self.next_sweep);
        if let Some((at, _)) = self.events.first() {
            next = next.min(*at);
        }
        for (at, _) in &self.closing {
            next = next.min(*at);
        }
        next = next.min(self.next_check);
        for agent in &self.agents {
            if let Some((at, _)) = &agent.restart {
                next = next.min(*at);
            }
            if !agent.alive {
                continue;
            }
            if let Some(at) = agent.conn.as_ref().and_then(|c| c.silent_until) {
                next = next.min(at);
                continue;
            }
            if let Some(at) = agent.next_keepalive {
                next = next.min(at);
            }
            for poller in &agent.pollers {
                if let Some(at) = poller.next {
                    next = next.min(at);
                }
            }
        }
        next
    }

    /// Runs the schedule; what it found, and how many of each event ran.
    async fn run(mut self) -> (Result<(), String>, BTreeMap<&'static str, u64>) {
        let outcome = self.drive().await;
        (outcome, std::mem::take(&mut self.tally))
    }

    async fn drive(&mut self) -> Result<(), String> {
        loop {
            let due = self.next_due();
            tokio::select! {
                ended = self.ended_rx.recv() => {
                    if let Some(ended) = ended {
                        self.on_ended(ended);
                    }
                }
                () = tokio::time::sleep_until(due) => {}
            }
            if Instant::now() >= self.start + RUN_FOR {
                break;
            }
            self.act().await;
            self.settle().await;
            self.check().await?;
        }
        self.settle().await;
        self.check_api().await?;
        // Shutdown: every held poll answered, every summary deleted.
        self.stop.cancel();
        self.settle().await;
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let left = self.records.records.lock().unwrap().keys().filter(|(k, _)| k == FLEET_KIND).count();
        if left > 0 {
            return Err(format!("{left} fleet summaries left after shutdown"));
        }
        if std::env::var_os("SKYCONF_MODEL_VERBOSE").is_some() {
            let world = lock(&self.world);
            eprintln!(
                "seed {}: {} replicas, {} agents, {} steps, {} rows checked, {} held seen, {} summaries checked",
                self.seed,
                self.replicas.len(),
                self.agents.len(),
                self.steps,
                self.rows_checked,
                self.held_seen,
                world.summaries_checked
            );
        }
        Ok(())
    }

    /// Lets every task woken by what was just done run (no time passes).
    async fn settle(&mut self) {
        for _ in 0..16 {
            tokio::task::yield_now().await;
        }
        while let Ok(ended) = self.ended_rx.try_recv() {
            self.on_ended(ended);
            for _ in 0..4 {
                tokio::task::yield_now().await;
            }
        }
    }

    /// A call ended: the agent applies what it received and schedules its next poll.
    fn on_ended(&mut self, ended: Ended) {
        let now = Instant::now();
        let agent = &mut self.agents[ended.agent];
        let current = agent.conn.as_ref().is_some_and(|c| c.id == ended.conn && c.silent_until.is_none());
        let stuck = agent.stuck;
        let poller = &mut agent.pollers[ended.poller];
        if !current || poller.in_flight.as_ref().is_none_or(|c| c.conn != ended.conn) {
            // A call of a connection it no longer uses (cancelled, partitioned): nobody listens.
            return;
        }
        poller.in_flight = None;
        if let Some(uuid) = ended.command
            && (!stuck || poller.uuid.is_empty())
        {
            poller.uuid = uuid;
        }
        poller.k += 1;
        let scheduled = poller.first + POLL_EVERY * poller.k;
        poller.next = (!poller.stopped).then_some(scheduled.max(now));
    }

    /// Does everything due now, in a fixed order.
    async fn act(&mut self) {
        let now = Instant::now();
        self.steps += 1;
        while self.next_check <= now {
            self.next_check += CHECK_EVERY;
        }
        if now >= self.next_sweep {
            self.next_sweep += self.sweep_every;
            let mut world = lock(&self.world);
            for (r, replica) in self.replicas.iter().enumerate() {
                replica.fleet.sweep();
                let at = world.now(r);
                world.models[r].sweep(at);
            }
        }
        while self.events.first().is_some_and(|(at, _)| *at <= now) {
            let (_, event) = self.events.remove(0);
            *self.tally.entry(event.name()).or_default() += 1;
            self.churn(event);
        }
        let (due, later): (Vec<_>, Vec<_>) = self.closing.drain(..).partition(|(at, _)| *at <= now);
        self.closing = later;
        for (_, a) in due {
            self.close(a);
        }
        for a in 0..self.agents.len() {
            if let Some((at, name)) = self.agents[a].restart.clone()
                && at <= now
            {
                self.agents[a].restart = None;
                self.agents[a].name = name;
                let replica = self.rng.below(self.replicas.len() as u64) as usize;
                self.boot(a, replica, false);
            }
            if !self.agents[a].alive {
                continue;
            }
            if let Some(until) = self.agents[a].conn.as_ref().and_then(|c| c.silent_until) {
                if until <= now {
                    // The server's PING went unanswered: it closes the connection. The partition
                    // heals and the same process reconnects (it keeps its digests).
                    self.close(a);
                    let replica = self.rng.below(self.replicas.len() as u64) as usize;
                    self.boot(a, replica, true);
                } else {
                    continue;
                }
            }
            if self.agents[a].next_keepalive.is_some_and(|at| at <= now) {
                self.heartbeat(a).await;
            }
            for p in 0..self.agents[a].pollers.len() {
                if self.agents[a].pollers[p].next.is_some_and(|at| at <= now) {
                    self.poll(a, p);
                }
            }
        }
    }

    /// Agent `a`'s heartbeat: a report at start and every tenth, else a keepAlive.
    async fn heartbeat(&mut self, a: usize) {
        let agent = &mut self.agents[a];
        let Some(conn) = &agent.conn else { return };
        let report = agent.heartbeats.is_multiple_of(10);
        agent.heartbeats += 1;
        agent.next_keepalive = agent.next_keepalive.map(|at| at + KEEPALIVE_EVERY);
        let (service, name) = (agent.service.clone(), agent.name.clone());
        let replica = &self.replicas[conn.replica];
        let (id, r, connection) = (conn.id, conn.replica, conn.connection.clone());
        if report {
            let mut request = tonic::Request::new(InstanceProperties {
                service: service.clone(),
                service_instance: name.clone(),
                properties: vec![KeyStringValuePair { key: "hostname".into(), value: name.clone() }],
                layer: String::new(),
            });
            request.extensions_mut().insert(connection);
            replica.management.report_instance_properties(request).await.unwrap();
        } else {
            let mut request = tonic::Request::new(InstancePingPkg {
                service: service.clone(),
                service_instance: name.clone(),
                layer: String::new(),
            });
            request.extensions_mut().insert(connection);
            replica.management.keep_alive(request).await.unwrap();
        }
        lock(&self.world).models[r].identify(id, &service, &name);
    }

    /// Starts poll `p` of agent `a`: a call task on its connection.
    fn poll(&mut self, a: usize, p: usize) {
        let agent = &mut self.agents[a];
        let Some(conn) = &agent.conn else { return };
        let poller = &mut agent.pollers[p];
        poller.next = None;
        let (cancel, cancelled) = oneshot::channel();
        poller.in_flight = Some(InFlight { conn: conn.id, cancel: Some(cancel) });
        let mut request = tonic::Request::new(ConfigurationSyncRequest {
            service: poller.service.clone(),
            uuid: poller.uuid.clone(),
        });
        request.metadata_mut().insert("grpc-timeout", DEADLINE.parse().unwrap());
        request.extensions_mut().insert(conn.connection.clone());
        let cds = Arc::clone(&self.replicas[conn.replica].cds);
        let (world, tx, r, id) = (Arc::clone(&self.world), self.ended_tx.clone(), conn.replica, conn.id);
        let (service, uuid, seed) = (poller.service.clone(), poller.uuid.clone(), self.seed);
        // A dropped sender (the agent partitioned away) never cancels: the call goes on at the
        // server, unheard.
        let cancelled = async move {
            if cancelled.await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        tokio::spawn(async move {
            // The arrival, in the same poll of this task as the server's record of it.
            let expected = {
                let mut world = lock(&world);
                let now = world.now(r);
                let identity = world.models[r].conns.get(&id).and_then(|c| c.identity.clone());
                let current = world.served.current(&service, identity.as_ref());
                let held = world.models[r].arrive(id, &service, &uuid, &current, now);
                (current, held)
            };
            // The served route, as the agent port calls it.
            let call = crate::cds::server::testing::fetch(&cds, request);
            tokio::pin!(call);
            let answered = tokio::select! {
                biased;
                _ = cancelled => None,
                answer = &mut call => Some(answer),
            };
            let mut world = lock(&world);
            let now = world.now(r);
            let (current, held) = expected;
            let command = match answered {
                None => {
                    if held {
                        world.models[r].release(id, &service, None, now);
                    }
                    None
                }
                Some(answer) => {
                    let bytes = answer.unwrap();
                    let commands = Commands::decode(bytes).unwrap();
                    let command = commands.commands.first().map(|c| DiscoveryCommand::from_command(c).unwrap());
                    let received = command.as_ref().and_then(|c| c.uuid.clone());
                    if held {
                        // Held: answered by a change (the new digest) or at the hold's end.
                        let identity = world.models[r].conns.get(&id).and_then(|c| c.identity.clone());
                        let served_now = world.served.current(&service, identity.as_ref());
                        let sent = received.as_ref().map(|_| served_now.clone());
                        if let Some(got) = &received
                            && *got != served_now.as_str()
                        {
                            world.fail(format!(
                                "seed {seed}: a held poll of {service} was sent {got}, the model serves {served_now}"
                            ));
                        }
                        world.models[r].release(id, &service, sent.as_ref(), now);
                    } else if received.as_deref() != Some(current.as_str()) {
                        world.fail(format!(
                            "seed {seed}: a poll of {service} echoing `{uuid}` was answered {received:?}, the model serves {current}"
                        ));
                    }
                    received
                }
            };
            drop(world);
            let _ = tx.send(Ended { agent: a, poller: p, conn: id, command });
        });
    }

    /// A churn event.
    fn churn(&mut self, event: Event) {
        let now = Instant::now();
        let alive: Vec<usize> = (0..self.agents.len())
            .filter(|&a| self.agents[a].alive && self.agents[a].conn.as_ref().is_some_and(|c| c.silent_until.is_none()))
            .collect();
        let pick = |rng: &mut Rng| (!alive.is_empty()).then(|| alive[rng.below(alive.len() as u64) as usize]);
        match event {
            Event::Install => self.install(),
            Event::Crash => {
                if let Some(a) = pick(&mut self.rng) {
                    self.close(a);
                    self.cancel_calls(a);
                    self.agents[a].alive = false;
                }
            }
            Event::Stop => {
                if let Some(a) = pick(&mut self.rng) {
                    // Calls cancelled first; the connection closes a moment later.
                    self.cancel_calls(a);
                    self.agents[a].alive = false;
                    for poller in &mut self.agents[a].pollers {
                        poller.next = None;
                    }
                    self.agents[a].next_keepalive = None;
                    let after = self.rng.millis(Duration::from_secs(3));
                    self.agents[a].restart = None;
                    self.closing.push((now + after, a));
                }
            }
            Event::Partition => {
                if let Some(a) = pick(&mut self.rng) {
                    // Nothing more reaches the server; its PING closes the connection within
                    // PING_INTERVAL + PING_TIMEOUT.
                    let conn = self.agents[a].conn.as_mut().unwrap();
                    conn.silent_until = Some(now + PING_INTERVAL + PING_TIMEOUT);
                    for poller in &mut self.agents[a].pollers {
                        poller.next = None;
                        // The call in flight goes on at the server; the agent never hears of it.
                        if let Some(call) = &mut poller.in_flight {
                            call.cancel = None;
                        }
                        poller.in_flight = None;
                    }
                }
            }
            Event::RestartSame | Event::RestartNew => {
                if let Some(a) = pick(&mut self.rng) {
                    self.close(a);
                    self.cancel_calls(a);
                    self.agents[a].alive = false;
                    let name = if matches!(event, Event::RestartSame) {
                        self.agents[a].name.clone()
                    } else {
                        let service = self.agents[a].service.clone();
                        self.fresh_name(&service)
                    };
                    let after = self.rng.millis(Duration::from_secs(20));
                    self.agents[a].restart = Some((now + after, name));
                }
            }
            Event::Elsewhere => {
                if let Some(a) = pick(&mut self.rng) {
                    let replica = self.agents[a].conn.as_ref().map_or(0, |c| c.replica);
                    let other = (replica + 1) % self.replicas.len();
                    self.close(a);
                    self.cancel_calls(a);
                    self.boot(a, other, true);
                }
            }
            Event::Reuse => {
                if let Some(a) = pick(&mut self.rng) {
                    let known = (self.agents[a].service.clone(), self.agents[a].name.clone());
                    let after = self.rng.millis(Duration::from_secs(5));
                    self.spawn_agent(now + after, Some(known));
                }
            }
            Event::Burst => {
                for _ in 0..2 + self.rng.below(5) {
                    let after = self.rng.millis(Duration::from_secs(2));
                    self.spawn_agent(now + after, None);
                }
            }
            Event::Stuck => {
                if let Some(a) = pick(&mut self.rng) {
                    self.agents[a].stuck = true;
                }
            }
            Event::Rename => {
                if let Some(a) = pick(&mut self.rng)
                    && !self.agents[a].quiet
                {
                    // The connection names another instance (its next heartbeat says so).
                    let service = self.agents[a].service.clone();
                    self.agents[a].name = self.fresh_name(&service);
                    self.agents[a].heartbeats = 0;
                    self.agents[a].next_keepalive = Some(now);
                }
            }
            Event::Cancel => {
                if let Some(a) = pick(&mut self.rng) {
                    // The client resets its poll's stream and keeps the connection (a proxy's
                    // stream timeout, a context cancelled); it polls again in its next period.
                    self.cancel_calls(a);
                    for poller in &mut self.agents[a].pollers {
                        if poller.next.is_none() && !poller.stopped {
                            poller.k += 1;
                            let mut at = poller.first + POLL_EVERY * poller.k;
                            while at <= now {
                                poller.k += 1;
                                at = poller.first + POLL_EVERY * poller.k;
                            }
                            poller.next = Some(at);
                        }
                    }
                }
            }
            Event::DropSecond => {
                if let Some(a) = alive.iter().copied().find(|&a| self.agents[a].pollers.len() > 1) {
                    let poller = &mut self.agents[a].pollers[1];
                    poller.stopped = true;
                    poller.next = None;
                }
            }
        }
    }

    /// A new document, on every replica at once (they watch one store).
    fn install(&mut self) {
        self.version += 1;
        match self.rng.below(4) {
            0 => self.flipped = !self.flipped,
            1 => self.plain = !self.plain,
            _ => {}
        }
        let doc = document(self.version, self.flipped, self.plain);
        let table = skyconf_core::read(&doc).unwrap();
        let mut world = lock(&self.world);
        for replica in &self.replicas {
            replica.served.install(table.clone());
        }
        world.served = Served::of(&self.replicas[0].served, self.flipped);
    }
}

impl Event {
    fn name(self) -> &'static str {
        match self {
            Self::Install => "install",
            Self::Crash => "crash",
            Self::Stop => "stop",
            Self::Partition => "partition",
            Self::RestartSame => "restart-same-name",
            Self::RestartNew => "restart-new-name",
            Self::Elsewhere => "reconnect-elsewhere",
            Self::Reuse => "name-reuse",
            Self::Burst => "burst",
            Self::Stuck => "stuck",
            Self::Rename => "rename",
            Self::DropSecond => "drop-second-service",
            Self::Cancel => "cancel-call",
        }
    }
}

/// Thousands of schedules in CI time: each one a few minutes of a small fleet in paused time.
#[test]
fn the_fleet_view_agrees_with_the_model_under_churn() {
    let number = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let schedules = number("SKYCONF_MODEL_SCHEDULES").unwrap_or(DEFAULT_SCHEDULES);
    let first = number("SKYCONF_MODEL_SEED").unwrap_or(1);
    let mut tally: BTreeMap<&'static str, u64> = BTreeMap::new();
    let started = std::time::Instant::now();
    for seed in first..first + schedules {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
        let (outcome, events) = runtime.block_on(async { Sim::new(seed).await.run().await });
        if let Err(error) = outcome {
            panic!("{error}\nreplay: SKYCONF_MODEL_SEED={seed} SKYCONF_MODEL_SCHEDULES=1");
        }
        for (name, n) in events {
            *tally.entry(name).or_default() += n;
        }
    }
    eprintln!("{schedules} schedules in {:?}; events: {tally:?}", started.elapsed());
    if schedules >= DEFAULT_SCHEDULES {
        for event in EVENTS {
            assert!(tally.get(event.name()).copied().unwrap_or(0) >= 20, "too few {}: {tally:?}", event.name());
        }
    }
}
