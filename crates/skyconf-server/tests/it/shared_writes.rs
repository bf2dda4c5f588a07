//! Writes through several replicas on one store (finding F4): every admin write is a
//! compare-and-swap on the store's own revision of the document, so no acknowledged write is
//! lost, an `If-Match` based on what a client saw is refused on every replica once the document
//! moved on, and release ids (the store's revisions) are the same on every replica. Real etcd
//! and ZooKeeper servers on loopback.

use std::time::Duration;

use serde_json::Value;
use skyconf_server::ServeConfig;
use skyconf_server::reload::Guard;
use skyconf_sources::etcd::{EtcdSettings, EtcdSource};
use skyconf_sources::{Backoff, Source};
use skyconf_testkit::fixtures::V5_DOCUMENT as GOOD;
use skyconf_testkit::server::{AdminClient, Server, eventually_async, loopback};
use skyconf_testkit::servers::etcd::EtcdServer;
use skyconf_testkit::servers::zookeeper::{ZkServer, namespace, upsert};

pub(crate) const ETCD_AGENT_KEY: &str = "/skywalking/configuration-discovery.default.agentConfigurations";

fn config() -> ServeConfig {
    ServeConfig { require_initial_load: false, reset_guard: Guard::OFF, ..loopback() }
}

async fn replicas<S: Source>(count: usize, source: impl Fn() -> S) -> Vec<Server> {
    let mut servers = Vec::new();
    for _ in 0..count {
        servers.push(Server::start(source(), config()).await);
    }
    servers
}

pub(crate) fn etcd_source(etcd: &EtcdServer) -> EtcdSource {
    EtcdSource::new(EtcdSettings { endpoints: etcd.url(), ..EtcdSettings::default() })
        .unwrap()
        .with_backoff(Backoff::new(Duration::from_millis(50), Duration::from_millis(500)))
}

/// The release a replica serves now, from `GET /api/v1/configurations`.
async fn served_release(admin: &AdminClient) -> Option<u64> {
    admin.get_json("/api/v1/configurations").await["release"].as_u64()
}

/// The services of the document a replica serves now.
async fn served_services(admin: &AdminClient) -> Vec<String> {
    let services = admin.get_json("/api/v1/services").await;
    let list = services["services"].as_array().cloned().unwrap_or_default();
    list.iter().filter_map(|s| s["name"].as_str().map(str::to_owned)).collect()
}

/// `writes` concurrent `PUT /api/v1/services/new-<i>`, spread over the replicas in turn; with
/// `if_match`, each names the release its replica served just before. The services whose write
/// was acknowledged (2xx), and how many were refused with 409.
async fn concurrent_writes(servers: &[Server], writes: usize, if_match: bool) -> (Vec<String>, usize) {
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..writes {
        // Each replica takes its writes one at a time, each a few store round trips: on a loaded
        // machine the last in line waits longer than the client's usual 5 s.
        let admin = servers[i % servers.len()].admin().with_timeout(Duration::from_secs(60));
        tasks.spawn(async move {
            let name = format!("new-{i}");
            let release = if if_match { served_release(&admin).await } else { None };
            let etag = release.map(|r| format!("\"{r}\""));
            let mut headers = vec![("content-type", "application/json")];
            if let Some(etag) = &etag {
                headers.push(("if-match", etag.as_str()));
            }
            let body = format!(r#"{{"config": {{"agent.sample_n_per_3_secs": "{i}"}}}}"#);
            let reply = admin.send("PUT", &format!("/api/v1/services/{name}"), &headers, &body).await;
            (name, reply.status, reply.body)
        });
    }
    let (mut acknowledged, mut conflicts) = (Vec::new(), 0);
    while let Some(done) = tasks.join_next().await {
        let (name, status, body) = done.unwrap();
        match status {
            200..=299 => acknowledged.push(name),
            409 => conflicts += 1,
            other => panic!("PUT {name}: unexpected {other}: {body}"),
        }
    }
    (acknowledged, conflicts)
}

/// Every replica serves every acknowledged service, and all show the same newest release.
async fn assert_nothing_lost(servers: &[Server], acknowledged: &[String]) {
    let admins: Vec<AdminClient> = servers.iter().map(Server::admin).collect();
    let newest = admins[0].clone();
    eventually_async("every replica serves the same newest release", async || {
        let want = served_release(&newest).await;
        for admin in &admins {
            if served_release(admin).await != want {
                return false;
            }
        }
        true
    })
    .await;
    for (i, admin) in admins.iter().enumerate() {
        let served = served_services(admin).await;
        let lost: Vec<&String> = acknowledged.iter().filter(|s| !served.contains(s)).collect();
        assert!(lost.is_empty(), "replica {i} lost acknowledged writes {lost:?}; it serves {served:?}");
    }
}

/// A replica's release list, newest first: every field but the local served `version`.
async fn history(admin: &AdminClient) -> Vec<Value> {
    let releases = admin.get_json("/api/v1/releases?limit=500").await;
    let mut list = releases["releases"].as_array().cloned().unwrap();
    for release in &mut list {
        release.as_object_mut().unwrap().remove("version");
    }
    list
}

/// Every replica shows the same history: same ids, order, times, authors, messages, origins.
pub(crate) async fn assert_one_history(admins: &[AdminClient]) {
    eventually_async("every replica shows the same release history", async || {
        let first = history(&admins[0]).await;
        for admin in &admins[1..] {
            if history(admin).await != first {
                return false;
            }
        }
        true
    })
    .await;
}

async fn writes_through_replicas_lose_nothing(servers: &[Server]) {
    let (acknowledged, conflicts) = concurrent_writes(servers, 15, false).await;
    assert_eq!(acknowledged.len(), 15, "without If-Match every write is built again on the newer document");
    assert_eq!(conflicts, 0);
    assert_nothing_lost(servers, &acknowledged).await;

    let (acknowledged_if_match, _) = concurrent_writes(servers, 15, true).await;
    assert!(!acknowledged_if_match.is_empty(), "at least the first conditional write passes");
    let mut all = acknowledged;
    all.extend(acknowledged_if_match);
    assert_nothing_lost(servers, &all).await;

    // A stale If-Match is refused on every replica, including one that has not seen the change.
    let stale = served_release(&servers[0].admin()).await.unwrap();
    let reply = servers[0]
        .admin()
        .send("PUT", "/api/v1/services/moved-on", &[("content-type", "application/json")], r#"{"config": {}}"#)
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    for server in servers {
        let reply = server
            .admin()
            .send(
                "PUT",
                "/api/v1/services/stale",
                &[("content-type", "application/json"), ("if-match", &format!("\"{stale}\""))],
                r#"{"config": {}}"#,
            )
            .await;
        assert_eq!(reply.status, 409, "a write based on release {stale} must be refused: {}", reply.body);
    }
    // One history: the same ids (the store's revisions), order, times, authors and messages on
    // every replica, whichever replica took the write.
    let reply = servers[2]
        .admin()
        .send(
            "PUT",
            "/api/v1/services/attributed",
            &[("content-type", "application/json")],
            r#"{"config": {"k": "v"}, "author": "alice", "message": "through the third replica"}"#,
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let admins: Vec<AdminClient> = servers.iter().map(Server::admin).collect();
    assert_one_history(&admins).await;
    let newest = &history(&admins[0]).await[0];
    assert_eq!(newest["author"], "alice", "{newest}");
    assert_eq!(newest["message"], "through the third replica");
}

/// A replica started after all that reads the shared history: it shows the same releases.
async fn a_new_replica_reads_the_shared_history(servers: &[Server], newcomer: Server) {
    let mut admins: Vec<AdminClient> = servers.iter().map(Server::admin).collect();
    admins.push(newcomer.admin());
    assert_one_history(&admins).await;
    // At least the 15 writes without If-Match, the stale-If-Match round's winner, `moved-on` and
    // `attributed`: releases the newcomer never saw.
    let releases = history(&newcomer.admin()).await.len();
    assert!(releases >= 18, "the newcomer imported the releases it never saw: {releases}");
}

#[tokio::test]
async fn etcd_replicas_lose_no_acknowledged_write() {
    let Some(etcd) = EtcdServer::start().await else { return };
    etcd.admin().await.put(ETCD_AGENT_KEY, GOOD).await;
    let servers = replicas(3, || etcd_source(&etcd)).await;
    writes_through_replicas_lose_nothing(&servers).await;
    a_new_replica_reads_the_shared_history(&servers, Server::start(etcd_source(&etcd), config()).await).await;
    // A change made in etcd directly is one release, with the same id everywhere.
    let revision = etcd.admin().await.put(ETCD_AGENT_KEY, GOOD).await;
    for server in &servers {
        let admin = server.admin();
        eventually_async("the direct edit is served", async || served_release(&admin).await == Some(revision as u64))
            .await;
    }
    let admins: Vec<AdminClient> = servers.iter().map(Server::admin).collect();
    assert_one_history(&admins).await;
    let newest = &history(&admins[0]).await[0];
    assert!(newest["origin"].as_str().unwrap().starts_with("etcd"), "{newest}");
}

#[tokio::test]
async fn zookeeper_replicas_lose_no_acknowledged_write() {
    let Some(zk) = ZkServer::shared() else { return };
    let namespace = namespace("shared-writes");
    let client = zk.client().await;
    upsert(&client, &format!("{namespace}/configuration-discovery.default.agentConfigurations"), GOOD).await;
    let servers = replicas(3, || crate::zookeeper::source(&zk.addr(), &namespace)).await;
    writes_through_replicas_lose_nothing(&servers).await;
    a_new_replica_reads_the_shared_history(
        &servers,
        Server::start(crate::zookeeper::source(&zk.addr(), &namespace), config()).await,
    )
    .await;
}
