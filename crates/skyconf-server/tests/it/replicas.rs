//! Several replicas on one store, one fleet view: two in-process servers on a real etcd (and on a
//! real ZooKeeper, and on rnacos), an agent polling replica A shows up in replica B's admin API labelled with
//! A's id, and disappears from it once A stops. The summaries are published every 100 ms here
//! (10 s by default), so nothing waits long; every wait polls the API.

use std::time::Duration;

use serde_json::Value;
use skyconf_server::reload::Guard;
use skyconf_server::{ReplicaOptions, ServeConfig};
use skyconf_sources::etcd::{EtcdSettings, EtcdSource};
use skyconf_sources::nacos::NacosSource;
use skyconf_sources::zookeeper::{ZookeeperSettings, ZookeeperSource};
use skyconf_sources::{AGENT_CONFIGURATIONS_KEY, Expect, Source};
use skyconf_testkit::fixtures::{V5_DIGEST as GOOD_DIGEST, V5_DOCUMENT as GOOD};
use skyconf_testkit::server::{Server, eventually_async, loopback};
use skyconf_testkit::servers::etcd::EtcdServer;
use skyconf_testkit::servers::rnacos::Rnacos;
use skyconf_testkit::servers::zookeeper::{ZkServer, namespace, upsert};

/// A replica named `name`, publishing its fleet summary every 100 ms.
pub(crate) fn config(name: &str) -> ServeConfig {
    ServeConfig {
        require_initial_load: false,
        reset_guard: Guard::OFF,
        replicas: ReplicaOptions {
            name: Some(name.to_owned()),
            publish_every: Duration::from_millis(100),
            advertise_admin: None,
        },
        ..loopback()
    }
}

fn rows<'a>(body: &'a Value, field: &str) -> &'a [Value] {
    body[field].as_array().map_or(&[], Vec::as_slice)
}

/// The contract, whatever the shared store: `a` and `b` serve [`GOOD`] from the same store.
async fn an_agent_of_one_replica_shows_on_the_other(a: Server, b: Server) {
    // An agent polls A: the first poll gets the digest, the second echoes it (applied).
    let agent = a.cds().await;
    assert_eq!(agent.fetch_digest("svc", "").await.as_deref(), Some(GOOD_DIGEST));
    assert!(agent.fetch("svc", GOOD_DIGEST).await.is_none());

    let (admin_a, admin_b) = (a.admin(), b.admin());
    eventually_async("B lists A's agent of svc, labelled with A", async || {
        let body = admin_b.get_json("/api/v1/services/svc").await;
        let agents = rows(&body, "agents");
        agents.len() == 1
            && agents[0]["replica"] == "replica-a"
            && agents[0]["state"] == "applied"
            && agents[0]["as_of_ms"].is_u64()
            && body["counts"]["applied"] == 1
    })
    .await;
    let detail = admin_b.get_json("/api/v1/services/svc").await;
    assert_eq!(detail["replicas"][0]["id"], "replica-b", "this replica first: {detail}");
    assert_eq!(detail["replicas"][1]["id"], "replica-a");
    assert_eq!(detail["replicas"][1]["counts"]["agents"], 1);
    assert!(GOOD_DIGEST.starts_with(detail["agents"][0]["digest"].as_str().unwrap()), "a digest prefix: {detail}");

    let instances = admin_b.get_json("/api/v1/instances").await;
    let anonymous = rows(&instances, "anonymous");
    assert_eq!(anonymous.len(), 1, "{instances}");
    assert_eq!((anonymous[0]["service"].as_str(), anonymous[0]["replica"].as_str()), (Some("svc"), Some("replica-a")));
    assert_eq!(instances["replica"], "replica-b");

    let services = admin_b.get_json("/api/v1/services").await;
    let svc = rows(&services, "services").iter().find(|s| s["name"] == "svc").expect("svc is configured");
    assert_eq!(
        (svc["agents"].as_u64(), svc["applied"].as_u64()),
        (Some(1), Some(1)),
        "summed over replicas: {services}"
    );

    let status = admin_b.get_json("/api/v1/status").await;
    assert_eq!(status["replica"], "replica-b");
    let ids: Vec<&str> = rows(&status, "replicas").iter().filter_map(|r| r["id"].as_str()).collect();
    assert_eq!(ids, ["replica-b", "replica-a"], "{status}");
    assert_eq!(
        (status["fleet"]["agents"].as_u64(), status["fleet"]["agents_all_replicas"].as_u64()),
        (Some(0), Some(1))
    );

    // A shows its own agent live, labelled with itself.
    let own = admin_a.get_json("/api/v1/services/svc").await;
    assert_eq!(
        (own["agents"][0]["replica"].as_str(), own["agents"][0]["as_of_ms"].is_null()),
        (Some("replica-a"), true)
    );
    assert_eq!(own["agents"][0]["digest"], GOOD_DIGEST, "live rows keep the whole digest");

    // A stops: its summary goes with it.
    a.stop().await.unwrap();
    eventually_async("A's agent is gone from B", async || {
        let body = admin_b.get_json("/api/v1/services/svc").await;
        rows(&body, "agents").is_empty() && rows(&admin_b.get_json("/api/v1/status").await, "replicas").len() == 1
    })
    .await;
    b.stop().await.unwrap();
}

/// A source on `etcd`, with the default settings.
pub(crate) fn etcd_source(etcd: &EtcdServer) -> EtcdSource {
    EtcdSource::new(EtcdSettings { endpoints: etcd.url(), ..EtcdSettings::default() }).unwrap()
}

#[tokio::test]
async fn on_etcd_every_replica_shows_every_agent() {
    let Some(etcd) = EtcdServer::start().await else { return };
    etcd.admin().await.put("/skywalking/configuration-discovery.default.agentConfigurations", GOOD).await;
    let a = Server::start(etcd_source(&etcd), config("replica-a")).await;
    let b = Server::start(etcd_source(&etcd), config("replica-b")).await;
    an_agent_of_one_replica_shows_on_the_other(a, b).await;
}

#[tokio::test]
async fn on_zookeeper_every_replica_shows_every_agent() {
    let Some(server) = ZkServer::shared() else { return };
    let ns = namespace("replicas");
    upsert(&server.client().await, &format!("{ns}/configuration-discovery.default.agentConfigurations"), GOOD).await;
    let source = || {
        let settings =
            ZookeeperSettings { host_port: server.addr(), namespace: ns.clone(), ..ZookeeperSettings::default() };
        ZookeeperSource::new(settings).unwrap()
    };
    let a = Server::start(source(), config("replica-a")).await;
    let b = Server::start(source(), config("replica-b")).await;
    an_agent_of_one_replica_shows_on_the_other(a, b).await;
}

#[tokio::test]
async fn on_nacos_every_replica_shows_every_agent() {
    let Some(nacos) = Rnacos::start("replicas").await else { return };
    let source = || NacosSource::new(nacos.settings("skywalking", "")).unwrap();
    source().put(AGENT_CONFIGURATIONS_KEY, Some(GOOD), Expect::Seen).await.unwrap();
    let a = Server::start(source(), config("replica-a")).await;
    let b = Server::start(source(), config("replica-b")).await;
    an_agent_of_one_replica_shows_on_the_other(a, b).await;
}

#[tokio::test]
async fn a_file_store_replica_is_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agents.yaml");
    std::fs::write(&path, GOOD).unwrap();
    let source = skyconf_sources::file::FileSource::new(&path);
    assert!(source.shared_records().is_none());
    let running = Server::start(source, config("alone")).await;
    let agent = running.cds().await;
    agent.fetch("svc", "").await;
    let status = running.admin().get_json("/api/v1/status").await;
    assert_eq!(status["replica"], "alone");
    assert_eq!(rows(&status, "replicas").len(), 1, "{status}");
    let detail = running.admin().get_json("/api/v1/services/svc").await;
    assert_eq!(detail["agents"][0]["replica"], "alone");
    running.stop().await.unwrap();
}

/// A replica that loses the store (as one that crashed, or is cut off) drops out of the others'
/// view once its lease expires, without deleting anything; it comes back when the store does.
#[tokio::test]
async fn a_replica_cut_off_from_etcd_drops_out_with_its_lease_and_comes_back() {
    let Some(etcd) = EtcdServer::start().await else { return };
    etcd.admin().await.put("/skywalking/configuration-discovery.default.agentConfigurations", GOOD).await;
    let proxy = skyconf_testkit::servers::etcd::Proxy::start(&etcd.url()).await;
    let through_proxy = EtcdSettings { endpoints: proxy.url(), connect_timeout_ms: 500, ..EtcdSettings::default() };
    let a_source = EtcdSource::new(through_proxy).unwrap().with_session_ttl(Duration::from_secs(2));
    let a = Server::start(a_source, config("replica-a")).await;
    let b = Server::start(etcd_source(&etcd), config("replica-b")).await;
    let agent = a.cds().await;
    agent.fetch("svc", "").await;
    let admin_b = b.admin();
    let listed = async |admin: &skyconf_testkit::server::AdminClient| {
        rows(&admin.get_json("/api/v1/status").await, "replicas")
            .iter()
            .filter_map(|r| r["id"].as_str().map(str::to_owned))
            .collect::<Vec<_>>()
    };
    eventually_async("B sees A", async || listed(&admin_b).await == ["replica-b", "replica-a"]).await;
    proxy.cut();
    eventually_async("A's lease expired: B no longer sees A", async || listed(&admin_b).await == ["replica-b"]).await;
    proxy.restore();
    eventually_async("A is back with a new lease", async || listed(&admin_b).await == ["replica-b", "replica-a"]).await;
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}
