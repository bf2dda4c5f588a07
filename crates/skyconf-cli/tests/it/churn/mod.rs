//! The fleet view against a fleet of real agent processes in motion, on real sockets: two
//! `skyconf serve` replicas on one real etcd, agents that are `skyconf agent` processes and
//! `tests/fleet/java_agent.py` processes (grpcio, with the Java agent's 30 s deadlines, held polls
//! and `ManagementService` calls), and a seeded random schedule of what fleets do: crashes
//! (SIGKILL) and graceful stops (SIGTERM) while polls are held, a silent partition (a proxy that
//! stops forwarding and closes nothing) and its healing, restarts under the same name and under a
//! new one, a move to the other replica, two processes claiming one name, a burst of new agents,
//! and a configuration change that one agent refuses to apply.
//!
//! After each step, a checkpoint reads every replica's `/api/v1/services/{name}`,
//! `/api/v1/services`, `/api/v1/instances` and `/metrics` until they agree with the reference
//! model ([`model`]) as of the step's bound (never a fixed sleep): a close within 1 s, a
//! partition within 31 s, the other replica's rows within one publish period and one read tick.
//! A checkpoint that is still wrong at its bound records what differs, and the run goes on, so
//! one run reports every disagreement; the test fails at the end with the schedule and the
//! differences. `SKYCONF_CHURN_SEED=N` replays a schedule.
//!
//! Needs etcd and python3 with grpcio and grpcio-tools: `scripts/test.sh` provides both and sets
//! `SKYCONF_REQUIRE_ETCD` and `SKYCONF_REQUIRE_INTEROP`, so CI fails instead of skipping.
//! `SKYCONF_TEST_PYTHON` names another interpreter (see [`crate::util::python`]).

mod model;
mod pods;
mod view;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use skyconf_testkit::server::AdminClient;
use skyconf_testkit::servers::etcd::EtcdServer;

use crate::util::{Server, grpcio_available, python, repo_root, serve_command};
use model::{CLOSE_BOUND, Conn, HEAL_BOUND, Model, PARTITION_BOUND, PUBLISH_BOUND, Problem, START_BOUND, STUCK_SETTLE};
use pods::{Kind, Pod, Spec};

/// The services the fleet polls.
const SERVICES: [&str; 2] = ["churn-a", "churn-b"];
/// The replicas' names.
const REPLICAS: [&str; 2] = ["replica-a", "replica-b"];
/// The key the replicas read, in etcd.
const KEY: &str = "/skywalking/configuration-discovery.default.agentConfigurations";
/// The schedule run unless `SKYCONF_CHURN_SEED` says otherwise.
const DEFAULT_SEED: u64 = 20_261_203;
/// At most this many Java simulators run at once (each is a Python process).
const MAX_JAVA: usize = 6;
/// How often a checkpoint reads the replicas.
const READ_EVERY: Duration = Duration::from_millis(250);
/// Past its bound, a checkpoint records what differs in this many reads in a row.
const FINAL_READS: usize = 3;

/// Revision `n` of the document: both services' values change with it.
fn document(revision: u64) -> String {
    format!(
        "configurations:\n  churn-a:\n    agent.sample_n_per_3_secs: {}\n  churn-b:\n    agent.sample_n_per_3_secs: {}\n",
        10 + revision,
        20 + revision
    )
}

/// splitmix64: a small seeded generator, so a schedule replays from its seed.
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i + 1));
        }
    }
}

/// What a step of the schedule does.
#[derive(Debug, Clone, Copy)]
enum Step {
    Crash,
    Stop,
    RestartSameName,
    RestartNewName,
    OtherReplica,
    NameReuse,
    Burst,
    Change,
}

/// The run: replicas, agents, the model and what was found.
struct Run {
    model: Model,
    pods: Vec<Pod>,
    admins: Vec<AdminClient>,
    grpc: Vec<SocketAddr>,
    stubs: PathBuf,
    etcd: EtcdServer,
    rng: Rng,
    seed: u64,
    revision: u64,
    names: usize,
    log: Vec<String>,
    /// (checkpoint, problem), each problem id once.
    found: Vec<(String, Problem)>,
    reported: BTreeSet<String>,
}

impl Run {
    fn note(&mut self, text: impl AsRef<str>) {
        let line = format!("{} {}", self.model.at(Instant::now()), text.as_ref());
        eprintln!("churn: {line}");
        self.log.push(line);
    }

    fn fresh_name(&mut self) -> String {
        self.names += 1;
        format!("inst-{}", self.names)
    }

    fn live_java(&self) -> usize {
        self.pods.iter().filter(|p| !p.ended && p.spec.kind == Kind::Java).count()
    }

    /// A new agent of a random kind, service and replica (or the given replica), with a new name.
    fn random_spec(&mut self, replica: Option<usize>) -> Spec {
        let kind = if self.live_java() < MAX_JAVA && self.rng.chance(35) { Kind::Java } else { Kind::Rust };
        Spec {
            kind,
            service: SERVICES[self.rng.below(SERVICES.len())].to_owned(),
            instance: Some(self.fresh_name()),
            replica: replica.unwrap_or_else(|| self.rng.below(REPLICAS.len())),
            proxied: false,
            refuses: false,
        }
    }

    /// Starts an agent; returns its index.
    async fn start(&mut self, spec: Spec) -> usize {
        let id = self.pods.len();
        let mut pod = Pod::start(spec.clone(), id, self.grpc[spec.replica], &self.stubs).await;
        let now = Instant::now();
        pod.conn = self.model.open(Conn {
            key: model::Key { service: spec.service.clone(), instance: spec.instance.clone(), replica: spec.replica },
            label: pod.label.clone(),
            opened: now,
            shown_by: now + START_BOUND,
            answered: Some(pod.answered.clone()),
            refuses: spec.refuses.then(|| pod.applied.clone()),
            gone: None,
        });
        self.note(format!("started {} for {} on {}", pod.label, spec.service, REPLICAS[spec.replica]));
        self.pods.push(pod);
        id
    }

    /// A live, answered agent chosen at random among those `fits` accepts (never the one that
    /// refuses changes, which the change step needs).
    fn pick(&mut self, fits: impl Fn(&Pod) -> bool) -> Option<usize> {
        let live: Vec<usize> = (0..self.pods.len())
            .filter(|&i| {
                let pod = &self.pods[i];
                !pod.ended
                    && !pod.spec.refuses
                    && pod.answered.get().is_some()
                    && self.model.conns[pod.conn].gone.is_none()
                    && fits(pod)
            })
            .collect();
        (!live.is_empty()).then(|| live[self.rng.below(live.len())])
    }

    /// SIGKILL (a crash) or SIGTERM (a graceful stop); returns by when it must be gone.
    async fn end(&mut self, i: usize, crash: bool) -> Instant {
        let at = Instant::now();
        let gone = if crash { self.pods[i].kill().await } else { self.pods[i].terminate().await };
        let why = if crash { "killed (SIGKILL)" } else { "stopped (SIGTERM)" };
        self.model.close(self.pods[i].conn, at, gone + CLOSE_BOUND, why.to_owned());
        let label = self.pods[i].label.clone();
        self.note(format!("{why}: {label}, exited after {:.2} s", gone.duration_since(at).as_secs_f64()));
        gone + CLOSE_BOUND
    }

    /// Silences the agent's proxy; returns by when its connection must be gone.
    fn partition(&mut self, i: usize) -> Instant {
        let at = Instant::now();
        self.pods[i].proxy.as_ref().expect("a proxied agent").silence();
        self.model.close(self.pods[i].conn, at, at + PARTITION_BOUND, "partitioned".to_owned());
        let label = self.pods[i].label.clone();
        self.note(format!("partitioned {label}: its proxy forwards nothing and closes nothing"));
        at + PARTITION_BOUND
    }

    /// Heals the agent's partition: it polls again, on a new connection when the server closed
    /// the old one. A new connection is named by the agent's next `keepAlive`, so until then its
    /// row may be one without a name.
    fn heal(&mut self, i: usize) -> Instant {
        let now = Instant::now();
        self.pods[i].proxy.as_ref().expect("a proxied agent").heal();
        let old = self.model.conns[self.pods[i].conn].clone();
        self.model.open(Conn {
            key: model::Key { instance: None, ..old.key.clone() },
            opened: now,
            shown_by: now + HEAL_BOUND,
            answered: None,
            refuses: None,
            gone: Some(model::Gone { at: now, by: now + HEAL_BOUND, why: "named by its keepAlive".to_owned() }),
            label: format!("{} reconnected, before its keepAlive", old.label),
        });
        self.pods[i].conn = self.model.open(Conn {
            opened: now,
            shown_by: now + HEAL_BOUND,
            answered: None,
            gone: None,
            label: format!("{} after the partition", old.label),
            ..old
        });
        let label = self.pods[i].label.clone();
        self.note(format!("healed the partition of {label}"));
        now + HEAL_BOUND
    }

    /// Writes the next revision of the document to etcd; returns by when every agent has it (or
    /// is stuck).
    async fn change(&mut self) -> Instant {
        self.revision += 1;
        let at = Instant::now();
        self.etcd.admin().await.put(KEY, document(self.revision)).await;
        for service in SERVICES {
            self.model.changes.push((service.to_owned(), at));
        }
        self.note(format!("wrote revision {} of the document to etcd (both services change)", self.revision));
        at + STUCK_SETTLE
    }

    /// One step; returns what it did, by when the view must show its effect, and the agents it
    /// started (which must be shown once they have their first answer).
    async fn step(&mut self, step: Step) -> (String, Instant, Vec<usize>) {
        let now = Instant::now();
        match step {
            Step::Crash | Step::Stop => {
                let crash = matches!(step, Step::Crash);
                let many = if crash { 1 + self.rng.below(2) } else { 1 };
                let mut by = now;
                for _ in 0..many {
                    if let Some(i) = self.pick(|_| true) {
                        by = by.max(self.end(i, crash).await);
                    }
                }
                (format!("{step:?}"), by, Vec::new())
            }
            Step::RestartSameName | Step::RestartNewName | Step::OtherReplica => {
                let named = |p: &Pod| p.spec.instance.is_some() && !p.spec.proxied;
                let Some(i) = self.pick(named) else { return (format!("{step:?} (no candidate)"), now, Vec::new()) };
                let crash = self.rng.chance(50);
                let by = self.end(i, crash).await;
                let mut spec = self.pods[i].spec.clone();
                if matches!(step, Step::RestartNewName) {
                    spec.instance = Some(self.fresh_name());
                }
                if matches!(step, Step::OtherReplica) {
                    spec.replica = 1 - spec.replica;
                }
                let started = self.start(spec).await;
                (format!("{step:?}"), by, vec![started])
            }
            Step::NameReuse => {
                let Some(i) = self.pick(|p| p.spec.instance.is_some() && !p.spec.proxied) else {
                    return ("NameReuse (no candidate)".to_owned(), now, Vec::new());
                };
                let mut spec = self.random_spec(None);
                spec.instance.clone_from(&self.pods[i].spec.instance);
                spec.service.clone_from(&self.pods[i].spec.service);
                spec.replica = self.pods[i].spec.replica;
                let started = self.start(spec).await;
                ("NameReuse: a second process claims a live name".to_owned(), now, vec![started])
            }
            Step::Burst => {
                let mut started = Vec::new();
                let java = self.live_java();
                for n in 0..4 {
                    let mut spec = self.random_spec(None);
                    if n > 0 || java >= MAX_JAVA {
                        spec.kind = Kind::Rust;
                    }
                    started.push(self.start(spec).await);
                }
                ("Burst of 4 new agents".to_owned(), now, started)
            }
            Step::Change => ("Change".to_owned(), self.change().await, Vec::new()),
        }
    }

    /// By when the agents `started` must be shown and settled: [`model::SETTLE`] after their
    /// first answer, or [`START_BOUND`] after their start if none came.
    fn settled_by(&self, started: &[usize]) -> Option<Instant> {
        started
            .iter()
            .map(|&i| {
                let pod = &self.pods[i];
                let opened = self.model.conns[pod.conn].opened;
                pod.answered.get().map_or(opened + START_BOUND, |at| *at + model::SETTLE)
            })
            .max()
    }

    /// Reads every replica until each agrees with the model as of `until` (or later, when the
    /// agents `started` settle later) — its own rows; the others' too when `published`, else the
    /// others' as of each read — or `until` passes. Past it, what still differs in
    /// [`FINAL_READS`] reads in a row is recorded (a difference between two answers read a moment
    /// apart, such as the services list and a service's detail, may be a change in between). A
    /// difference recorded before is not waited for again.
    async fn checkpoint(&mut self, name: &str, until: Instant, started: &[usize], published: bool) {
        let begun = Instant::now();
        // Problems past `until`, by id, with how many reads in a row found each.
        let mut persistent: BTreeMap<String, (usize, Problem)> = BTreeMap::new();
        let mut reads_past = 0;
        loop {
            let until = self.settled_by(started).map_or(until, |s| s.max(until));
            let t0 = Instant::now();
            let past = t0 >= until;
            let (own, others) = match (past, published) {
                (true, _) => (t0, t0),
                (false, true) => (until, until),
                (false, false) => (until, t0),
            };
            let mut new = Vec::new();
            for (observer, admin) in self.admins.iter().enumerate() {
                let seen = view::observe(observer, admin, &REPLICAS, &SERVICES).await;
                new.extend(self.model.check(&seen, own, others).into_iter().filter(|p| !self.reported.contains(&p.id)));
            }
            let took = begun.elapsed().as_secs_f64();
            if new.is_empty() {
                let known = if self.reported.is_empty() { "" } else { " but for differences recorded before" };
                self.note(format!("checkpoint `{name}`: agrees with the model{known} ({took:.1} s)"));
                return;
            }
            if past {
                reads_past += 1;
                let mut next = BTreeMap::new();
                for problem in new {
                    let seen_before = persistent.get(&problem.id).map_or(0, |(n, _)| *n);
                    if seen_before + 1 == reads_past {
                        next.insert(problem.id.clone(), (reads_past, problem));
                    }
                }
                persistent = next;
                if persistent.is_empty() || reads_past == FINAL_READS {
                    break;
                }
            }
            tokio::time::sleep(READ_EVERY).await;
        }
        let took = begun.elapsed().as_secs_f64();
        if persistent.is_empty() {
            self.note(format!("checkpoint `{name}`: agrees with the model after its bound ({took:.1} s)"));
            return;
        }
        self.note(format!("checkpoint `{name}`: {} new difference(s) at its bound ({took:.1} s)", persistent.len()));
        for (id, (_, problem)) in persistent {
            eprintln!("churn: DIFFERENCE at `{name}`: {}", problem.text);
            self.reported.insert(id);
            self.found.push((name.to_owned(), problem));
        }
    }

    fn report(&self) -> String {
        let mut out = format!(
            "the fleet view disagreed with the fleet {} time(s); seed {} (SKYCONF_CHURN_SEED={} replays the schedule)\n\nschedule:\n",
            self.found.len(),
            self.seed,
            self.seed
        );
        for line in &self.log {
            let _ = writeln!(out, "  {line}");
        }
        out.push_str("\ndifferences:\n");
        for (checkpoint, problem) in &self.found {
            let _ = writeln!(out, "- at `{checkpoint}`: {}", problem.text);
        }
        for pod in self.pods.iter().filter(|p| p.answered.get().is_none()) {
            let _ = writeln!(out, "- {} never got an answer; its stderr: {:?}", pod.label, pod.stderr_tail());
        }
        out
    }
}

/// Compiles the simulator's stubs once, for every Java agent of the run.
fn compile_stubs(dir: &std::path::Path) {
    let status = python()
        .arg(repo_root().join("tests/fleet/java_agent.py"))
        .arg("--generate-stubs")
        .arg(dir)
        .status()
        .expect("python runs");
    assert!(status.success(), "java_agent.py --generate-stubs failed");
}

/// One `skyconf serve` replica on `etcd`.
fn replica(etcd: &EtcdServer, name: &str) -> Server {
    let mut command = serve_command();
    command.args(["--store", "etcd", "--store-setting", &format!("endpoints={}", etcd.url()), "--replica-name", name]);
    Server::spawn(command)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_view_follows_a_fleet_of_real_agents_in_motion() {
    if !grpcio_available() {
        return;
    }
    let Some(etcd) = EtcdServer::start().await else { return };
    etcd.admin().await.put(KEY, document(0)).await;
    let servers: Vec<Server> = REPLICAS.iter().map(|name| replica(&etcd, name)).collect();
    let stubs = tempfile::tempdir().unwrap();
    compile_stubs(stubs.path());
    let seed = std::env::var("SKYCONF_CHURN_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(DEFAULT_SEED);
    let mut run = Run {
        model: Model::new(REPLICAS.iter().map(|r| (*r).to_owned()).collect()),
        pods: Vec::new(),
        admins: servers.iter().map(|s| AdminClient::new(&s.admin_addr)).collect(),
        grpc: servers.iter().map(|s| s.grpc_addr.parse().unwrap()).collect(),
        stubs: stubs.path().to_owned(),
        etcd,
        rng: Rng(seed),
        seed,
        revision: 0,
        names: 0,
        log: Vec::new(),
        found: Vec::new(),
        reported: BTreeSet::new(),
    };
    run.note(format!("seed {seed}; replicas {REPLICAS:?} on one etcd"));

    // The first fleet: both kinds on both replicas, two behind proxies, one without a name, and
    // one Java agent that will refuse the configuration change.
    let mut first_fleet = Vec::new();
    let first = [
        (Kind::Rust, 0, true, false, false),
        (Kind::Rust, 0, true, false, false),
        (Kind::Rust, 0, false, false, false),
        (Kind::Rust, 0, true, true, false),
        (Kind::Java, 0, true, true, false),
        (Kind::Java, 0, true, false, false),
        (Kind::Java, 0, true, false, true),
        (Kind::Rust, 1, true, false, false),
        (Kind::Rust, 1, true, false, false),
        (Kind::Java, 1, true, false, false),
    ];
    for (kind, replica, named, proxied, refuses) in first {
        let mut spec = run.random_spec(Some(replica));
        spec.kind = kind;
        spec.proxied = proxied;
        spec.refuses = refuses;
        if !named {
            spec.instance = None;
        }
        first_fleet.push(run.start(spec).await);
    }
    run.checkpoint("the first fleet", Instant::now(), &first_fleet, false).await;

    // A partition first: its bound (31 s) runs while the other steps do. The Java agent's: a
    // reconnected agent is named again by its next keepAlive, which the simulator sends often.
    let partitioned = (0..run.pods.len()).find(|&i| run.pods[i].spec.proxied && run.pods[i].spec.kind == Kind::Java);
    let partitioned = partitioned.expect("a Java agent behind a proxy");
    let partition_by = run.partition(partitioned);
    run.checkpoint("just partitioned", Instant::now() + CLOSE_BOUND, &[], false).await;

    let mut steps = [
        Step::Crash,
        Step::Crash,
        Step::Stop,
        Step::RestartSameName,
        Step::RestartNewName,
        Step::OtherReplica,
        Step::NameReuse,
        Step::Burst,
        Step::Change,
    ];
    run.rng.shuffle(&mut steps);
    for step in steps {
        // Steps land anywhere in the agents' poll cycle.
        let pause = Duration::from_millis(run.rng.below(1500) as u64);
        tokio::time::sleep(pause).await;
        let (what, by, started) = run.step(step).await;
        run.checkpoint(&what, by, &started, false).await;
    }
    run.checkpoint("the partitioned agent is gone", partition_by, &[], false).await;
    let healed_by = run.heal(partitioned);
    run.checkpoint("the healed agent polls again", healed_by, &[], false).await;
    run.checkpoint("every replica shows the others' agents", Instant::now() + PUBLISH_BOUND, &[], true).await;

    let live = run.model.summary(Instant::now());
    run.note(format!("done: agents shown at the end {live:?}"));
    assert!(run.found.is_empty(), "{}", run.report());
    drop(servers);
}
