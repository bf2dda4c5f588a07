//! Several replicas, one truth, when things fail: three in-process skyconf servers on one replicated store (a
//! three-member etcd cluster, a three-server ZooKeeper ensemble; see
//! `skyconf_testkit::servers`), each with its own source, as three pods behind a load balancer
//! would run. Covers an agent moving to another replica with the digest it holds, the store's
//! leader dying (no EMPTY answer, writes resume, acknowledged writes kept), a replica cut off
//! from the store (keeps serving, says it is stale), and concurrent per-service writes through
//! every replica (every acknowledged write is in the final document).
//!
//! The tests run one at a time: each starts three store processes and three servers, and the
//! reference machine has two cores.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use skyconf_core::digest::EMPTY_DIGEST;
use skyconf_sources::etcd::{EtcdSettings, EtcdSource};
use skyconf_sources::{AGENT_CONFIGURATIONS_KEY, Backoff, Source};
use skyconf_testkit::PATIENCE;
use skyconf_testkit::fixtures::{V5_DIGEST as GOOD_DIGEST, V5_DOCUMENT as GOOD};
use skyconf_testkit::server::{AdminClient, Cds, Server, eventually, eventually_async, loopback};
use skyconf_testkit::servers::MACHINE;
use skyconf_testkit::servers::etcd::{EtcdCluster, Proxy};
use skyconf_testkit::servers::zookeeper::{ZkEnsemble, namespace, upsert};

const AGENT_KEY: &str = "/skywalking/configuration-discovery.default.agentConfigurations";

/// One replica test at a time (a tokio mutex: held across awaits); each also holds the testkit's
/// [`MACHINE`] shared, so latency measurements that hold it exclusively do not run meanwhile.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Both locks a replica test holds while it runs.
async fn alone() -> (tokio::sync::MutexGuard<'static, ()>, tokio::sync::RwLockReadGuard<'static, ()>) {
    (ONE_AT_A_TIME.lock().await, MACHINE.read().await)
}

/// An etcd source on `endpoints`: quick retries, and a short per-endpoint timeout so a dead
/// member is passed over quickly.
fn etcd_source(endpoints: &str) -> EtcdSource {
    let settings =
        EtcdSettings { endpoints: endpoints.to_owned(), connect_timeout_ms: 1000, ..EtcdSettings::default() };
    EtcdSource::new(settings).unwrap().with_backoff(Backoff::new(Duration::from_millis(50), Duration::from_millis(500)))
}

/// A comma-separated `list` starting at its entry `first`: each replica prefers another store
/// member, so whichever member dies, one replica loses the member it was talking to.
fn rotated(list: &str, first: usize) -> String {
    let entries: Vec<&str> = list.split(',').collect();
    (0..entries.len()).map(|i| entries[(first + i) % entries.len()]).collect::<Vec<_>>().join(",")
}

/// Three servers, each on the source `make` builds, all serving [`GOOD`] to `svc`.
async fn replicas<S: Source>(mut make: impl FnMut() -> S) -> Vec<Server> {
    let mut servers = Vec::new();
    for _ in 0..3 {
        servers.push(Server::start(make(), loopback()).await);
    }
    for server in &servers {
        let cds = server.cds().await;
        cds.wait_for_digest("svc", "the store's document", |d| d == Some(GOOD_DIGEST)).await;
    }
    servers
}

/// A three-member etcd cluster holding [`GOOD`]; `None` when etcd is not installed.
async fn etcd_cluster_holding_good() -> Option<EtcdCluster> {
    let cluster = EtcdCluster::start().await?;
    cluster.admin().await.put(AGENT_KEY, GOOD).await;
    Some(cluster)
}

/// `PUT /api/v1/services/{name}` with one key (the write waits up to 3 s to be served, within
/// the client's 5 s), conditioned on `if_match` when given; the status, 0 when nothing answered.
async fn put_service(admin: &AdminClient, name: &str, if_match: Option<&str>) -> u16 {
    let body = format!(r#"{{"config": {{"agent.sample_n_per_3_secs": "{}"}}}}"#, name.len());
    let mut headers = vec![("Content-Type", "application/json")];
    if let Some(tag) = if_match {
        headers.push(("If-Match", tag));
    }
    let path = format!("/api/v1/services/{name}?wait=3");
    admin.try_send("PUT", &path, &headers, &body).await.map_or(0, |reply| reply.status)
}

/// Writes `name` through `admin` until a write is answered 200 (an election or a reconnection
/// may refuse the first ones); fails after [`PATIENCE`].
async fn put_service_until_served(admin: &AdminClient, name: &str) {
    let give_up = Instant::now() + PATIENCE;
    loop {
        let status = put_service(admin, name, None).await;
        if status == 200 {
            return;
        }
        assert!(Instant::now() < give_up, "writing {name} never succeeded (last status {status})");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether the table `server` serves has `service`.
fn serves(server: &Server, service: &str) -> bool {
    server.served.snapshot().table.get(service).is_some()
}

/// What agents are told while the store changes under the replicas: a task that polls `svc` and
/// `before` on every replica, as an agent holding nothing would, until stopped.
struct Watchers {
    stop: Arc<AtomicBool>,
    polls: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<Vec<String>>,
}

impl Watchers {
    /// Polls every replica for each `(service, digest)`; any other answer is recorded.
    async fn start(servers: &[Server], expected: Vec<(&'static str, String)>) -> Self {
        let mut clients = Vec::new();
        for server in servers {
            clients.push(server.cds().await);
        }
        let (stop, polls) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
        let (stopped, counted) = (Arc::clone(&stop), Arc::clone(&polls));
        let task = tokio::spawn(async move {
            let mut wrong = Vec::new();
            while !stopped.load(Ordering::SeqCst) {
                for (i, client) in clients.iter().enumerate() {
                    for (service, digest) in &expected {
                        let got = client.digest(service).await;
                        counted.fetch_add(1, Ordering::SeqCst);
                        if got.as_deref() != Some(digest.as_str()) {
                            wrong.push(format!("replica {i} served {service} {got:?}"));
                        }
                    }
                }
                tokio::task::yield_now().await;
            }
            wrong
        });
        Self { stop, polls, task }
    }

    /// How many answers were checked so far.
    fn polls(&self) -> usize {
        self.polls.load(Ordering::SeqCst)
    }

    /// Stops polling; every answer that was not the expected digest, and how many polls ran.
    async fn finish(self) -> (Vec<String>, usize) {
        self.stop.store(true, Ordering::SeqCst);
        let wrong = self.task.await.unwrap();
        (wrong, self.polls.load(Ordering::SeqCst))
    }
}

/// A write acknowledged before the store loses a member, then `lose_member`: every replica
/// keeps answering the same digests meanwhile (never EMPTY), writes through every replica
/// resume, and the write acknowledged before is still in the document.
async fn replicas_ride_out_a_store_member_loss(servers: &[Server], lose_member: impl AsyncFnOnce()) {
    put_service_until_served(&servers[0].admin(), "before").await;
    for server in servers {
        eventually("every replica serves the write", || serves(server, "before")).await;
    }
    let before = servers[0].cds().await.digest("before").await.expect("a digest");
    assert_ne!(before, EMPTY_DIGEST);
    let watchers = Watchers::start(servers, vec![("svc", GOOD_DIGEST.to_owned()), ("before", before)]).await;

    lose_member().await;
    let at_loss = watchers.polls();
    for (i, server) in servers.iter().enumerate() {
        put_service_until_served(&server.admin(), &format!("after-{i}")).await;
    }
    // At least one more round over every replica after the loss.
    let round = 2 * servers.len();
    eventually_async("the watchers poll after the loss", async || watchers.polls() >= at_loss + round).await;
    for server in servers {
        eventually("every replica serves every write", || {
            ["before", "after-0", "after-1", "after-2"].iter().all(|name| serves(server, name))
        })
        .await;
    }

    let (wrong, polls) = watchers.finish().await;
    eprintln!(
        "{polls} answers checked, {} after the loss, {} not the digest served before",
        polls - at_loss,
        wrong.len()
    );
    let empty = wrong.iter().filter(|w| w.contains(EMPTY_DIGEST)).count();
    assert_eq!(empty, 0, "EMPTY answers while the store lost a member: {wrong:?}");
    assert!(wrong.is_empty(), "{} of {polls} answers were not the digest served before: {wrong:?}", wrong.len());
}

/// The services of the document `text`.
fn services_of(text: &str) -> BTreeSet<String> {
    let table = skyconf_core::read(text).expect("the store holds a valid document");
    table.services().map(|service| service.name().to_owned()).collect()
}

/// The `ETag` header of `GET /api/v1/configurations` (what a client conditions its write on), by
/// a plain HTTP/1.1 request: the admin client of the testkit returns bodies, not headers.
async fn etag(admin: std::net::SocketAddr) -> Option<String> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect(admin).await.expect("the admin port answers");
    let request = format!("GET /api/v1/configurations HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let head = response.split("\r\n\r\n").next().unwrap_or_default();
    assert!(head.starts_with("HTTP/1.1 200"), "GET /api/v1/configurations: {head}");
    head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("etag").then(|| value.trim().to_owned())
    })
}

/// What 100 concurrent writes were answered.
#[derive(Debug, Default)]
struct WriteOutcome {
    /// The names whose write was answered 2xx.
    acknowledged: Vec<String>,
    /// 409 answers (a conflict: not acknowledged).
    conflicts: usize,
    /// 503 answers (unavailable: not acknowledged).
    unavailable: usize,
    /// Any other answer (or none), with its status.
    other: Vec<(String, u16)>,
}

/// 100 concurrent `PUT /api/v1/services/{prefix}<i>` spread over the replicas (i mod 3), each
/// with If-Match set to the ETag its replica showed before any of them when `if_match`.
async fn concurrent_writes(servers: &[Server], prefix: &str, if_match: bool) -> WriteOutcome {
    let mut tags = Vec::new();
    for server in servers {
        tags.push(etag(server.admin_addr).await);
    }
    let mut writes = tokio::task::JoinSet::new();
    for i in 0..100 {
        let replica = i % servers.len();
        // Each replica takes its writes one at a time, each a few store round trips: on a loaded
        // machine the last in line waits longer than the client's usual 5 s.
        let admin = servers[replica].admin().with_timeout(Duration::from_secs(60));
        let tag = if if_match { Some(tags[replica].clone().expect("a replica shows an ETag")) } else { None };
        let name = format!("{prefix}{i}");
        writes.spawn(async move {
            let status = put_service(&admin, &name, tag.as_deref()).await;
            (name, status)
        });
    }
    let mut outcome = WriteOutcome::default();
    while let Some(write) = writes.join_next().await {
        let (name, status) = write.unwrap();
        match status {
            200..=299 => outcome.acknowledged.push(name),
            409 => outcome.conflicts += 1,
            503 => outcome.unavailable += 1,
            _ => outcome.other.push((name, status)),
        }
    }
    outcome
}

/// Waits until every replica serves exactly the services of the store's final document; the
/// writes acknowledged in `outcome` that are not in it, described.
async fn lost_writes(servers: &[Server], outcome: &WriteOutcome, store_document: impl AsyncFn() -> String) -> String {
    assert!(outcome.other.is_empty(), "unexpected answers: {outcome:?}");
    assert!(!outcome.acknowledged.is_empty(), "no write was acknowledged: {outcome:?}");
    let mut final_services = BTreeSet::new();
    eventually_async("every replica serves the store's final document", async || {
        final_services = services_of(&store_document().await);
        servers.iter().all(|server| {
            let snapshot = server.served.snapshot();
            snapshot.table.services().map(|s| s.name().to_owned()).collect::<BTreeSet<_>>() == final_services
        })
    })
    .await;
    let lost: Vec<&String> = outcome.acknowledged.iter().filter(|name| !final_services.contains(*name)).collect();
    let summary = format!(
        "{} of {} acknowledged writes are not in the final document ({} answered 409, {} answered 503): {lost:?}",
        lost.len(),
        outcome.acknowledged.len(),
        outcome.conflicts,
        outcome.unavailable
    );
    eprintln!("{summary}");
    if lost.is_empty() { String::new() } else { summary }
}

/// Both rounds of concurrent writes, without If-Match (`new-<i>`), then with (`new-if-<i>`):
/// every write acknowledged in either is in the final document on every replica.
async fn concurrent_writes_are_all_kept(servers: &[Server], store_document: impl AsyncFn() -> String) {
    let plain = concurrent_writes(servers, "new-", false).await;
    let plain_lost = lost_writes(servers, &plain, &store_document).await;
    let conditional = concurrent_writes(servers, "new-if-", true).await;
    let conditional_lost = lost_writes(servers, &conditional, &store_document).await;
    assert!(
        plain_lost.is_empty() && conditional_lost.is_empty(),
        "without If-Match: {plain_lost}; with If-Match: {conditional_lost}"
    );
    assert_eq!(plain.acknowledged.len(), 100, "without If-Match a write that lost a race is rebuilt: {plain:?}");
    // One history on every replica: ids, order, times, authors, origins.
    let admins: Vec<AdminClient> = servers.iter().map(Server::admin).collect();
    crate::shared_writes::assert_one_history(&admins).await;
}

#[tokio::test]
async fn an_agent_moving_to_another_replica_keeps_its_digest() {
    let _alone = alone().await;
    let Some(cluster) = etcd_cluster_holding_good().await else { return };
    let endpoints = cluster.endpoints();
    let mut servers = replicas(|| etcd_source(&endpoints)).await;

    let agent = servers[0].cds().await;
    let held = agent.digest("svc").await.expect("a digest");
    assert_eq!(held, GOOD_DIGEST);
    servers.remove(0).stop().await.unwrap();

    for server in &servers {
        let moved: Cds = server.cds().await;
        assert_eq!(moved.fetch_digest("svc", &held).await, None, "the digest the agent holds is current");
        assert_eq!(moved.fetch_digest("svc", EMPTY_DIGEST).await.as_deref(), Some(GOOD_DIGEST));
    }
    // The replicas left still follow the store.
    put_service_until_served(&servers[0].admin(), "later").await;
    eventually("the other replica serves the write", || serves(&servers[1], "later")).await;
    for server in servers {
        server.stop().await.unwrap();
    }
}

#[tokio::test]
async fn the_etcd_leader_dying_is_ridden_out_by_every_replica() {
    let _alone = alone().await;
    let Some(mut cluster) = etcd_cluster_holding_good().await else { return };
    let endpoints = cluster.endpoints();
    let mut made = 0;
    let servers = replicas(|| {
        made += 1;
        etcd_source(&rotated(&endpoints, made))
    })
    .await;

    let mut killed = None;
    replicas_ride_out_a_store_member_loss(&servers, async || killed = Some(cluster.kill_leader().await)).await;
    let killed = killed.unwrap();
    assert!(!cluster.is_running(killed));
    assert_ne!(cluster.leader().await, killed, "another member leads");
    let document = cluster.admin().await.get(AGENT_KEY).await.expect("the document");
    let services = services_of(&String::from_utf8(document).unwrap());
    for name in ["svc", "before", "after-0", "after-1", "after-2"] {
        assert!(services.contains(name), "{name} is in the store's document: {services:?}");
    }
    for server in servers {
        server.stop().await.unwrap();
    }
}

#[tokio::test]
async fn a_replica_cut_off_from_etcd_keeps_serving_and_says_it_is_stale() {
    let _alone = alone().await;
    let Some(cluster) = etcd_cluster_holding_good().await else { return };
    // Replica 2 reaches every member through a proxy the test cuts; the cluster keeps running.
    let mut proxies = Vec::new();
    for i in 0..EtcdCluster::SIZE {
        proxies.push(Proxy::start(&cluster.url(i)).await);
    }
    let (direct, proxied) = (cluster.endpoints(), proxies.iter().map(Proxy::url).collect::<Vec<_>>().join(","));
    let mut made = 0;
    let servers = replicas(|| {
        made += 1;
        etcd_source(if made == 3 { &proxied } else { &direct })
    })
    .await;
    let cut_off = &servers[2];
    let status = cut_off.admin().get_json("/api/v1/status").await;
    assert_eq!(status["store"]["stale"], false, "{status}");
    assert!(status["store"]["stale_since_ms"].is_null(), "{status}");

    proxies.iter().for_each(Proxy::cut);
    eventually("the outage is noticed", || cut_off.store.status().stale).await;
    put_service_until_served(&servers[0].admin(), "during-cut").await;
    eventually("the connected replica follows", || serves(&servers[1], "during-cut")).await;

    let cds = cut_off.cds().await;
    assert_eq!(cds.digest("svc").await.as_deref(), Some(GOOD_DIGEST), "the last good table is served");
    assert!(!serves(cut_off, "during-cut"), "a replica cut off cannot see the write");
    let status = cut_off.admin().get_json("/api/v1/status").await;
    assert_eq!(status["store"]["stale"], true, "{status}");
    assert_eq!(status["store"]["connected"], false, "{status}");
    assert!(status["store"]["last_error"].is_string(), "{status}");
    let since = status["store"]["stale_since_ms"].as_u64().expect("stale_since_ms");
    assert!(since >= status["store"]["last_update_ms"].as_u64().unwrap(), "stale after the last update: {status}");
    let ready = cut_off.admin().get("/readyz").await;
    assert_eq!(ready.status, 200, "a replica serving its last good table stays ready: {ready:?}");
    assert_eq!(ready.json()["stale"], true, "{ready:?}");
    assert_eq!(ready.json()["store"]["stale_since_ms"].as_u64(), Some(since), "{ready:?}");
    let connected = servers[0].admin().get_json("/api/v1/status").await;
    assert_eq!(connected["store"]["stale"], false, "{connected}");

    proxies.iter().for_each(Proxy::restore);
    eventually("the cut-off replica catches up", || serves(cut_off, "during-cut")).await;
    eventually("and is current again", || !cut_off.store.status().stale).await;
    let status = cut_off.admin().get_json("/api/v1/status").await;
    assert!(status["store"]["stale_since_ms"].is_null(), "{status}");
    for server in servers {
        server.stop().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_through_etcd_replicas_are_all_kept() {
    let _alone = alone().await;
    let Some(cluster) = etcd_cluster_holding_good().await else { return };
    let endpoints = cluster.endpoints();
    let servers = replicas(|| etcd_source(&endpoints)).await;
    let admin = cluster.admin().await;
    concurrent_writes_are_all_kept(&servers, async || {
        String::from_utf8(admin.get(AGENT_KEY).await.expect("the document")).unwrap()
    })
    .await;
    for server in servers {
        server.stop().await.unwrap();
    }
}

/// A ZooKeeper ensemble (started off the runtime: it waits with blocking sleeps) whose
/// namespace holds [`GOOD`], and that namespace; `None` when ZooKeeper is not installed.
async fn ensemble_holding_good() -> Option<(ZkEnsemble, String)> {
    let ensemble = tokio::task::spawn_blocking(ZkEnsemble::start).await.unwrap()?;
    let ns = namespace("replicas");
    upsert(&ensemble.client().await, &format!("{ns}/{AGENT_CONFIGURATIONS_KEY}"), GOOD).await;
    Some((ensemble, ns))
}

#[tokio::test]
async fn a_zookeeper_server_dying_is_ridden_out_by_every_replica() {
    let _alone = alone().await;
    let Some((mut ensemble, ns)) = ensemble_holding_good().await else { return };
    let connect = ensemble.connect_string();
    // The leader is found before any replica runs: the search waits with blocking sleeps.
    let leader = ensemble.leader();
    let mut made = 0;
    let servers = replicas(|| {
        made += 1;
        crate::zookeeper::source(&rotated(&connect, made), &ns)
    })
    .await;
    replicas_ride_out_a_store_member_loss(&servers, async || ensemble.kill(leader)).await;
    for server in servers {
        server.stop().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_through_zookeeper_replicas_are_all_kept() {
    let _alone = alone().await;
    let Some((ensemble, ns)) = ensemble_holding_good().await else { return };
    let connect = ensemble.connect_string();
    let servers = replicas(|| crate::zookeeper::source(&connect, &ns)).await;
    let zk = ensemble.client().await;
    let node = format!("{ns}/{AGENT_CONFIGURATIONS_KEY}");
    concurrent_writes_are_all_kept(&servers, async || {
        let (data, _) = zk.get_data(&node).await.expect("the document");
        String::from_utf8(data).unwrap()
    })
    .await;
    for server in servers {
        server.stop().await.unwrap();
    }
}
