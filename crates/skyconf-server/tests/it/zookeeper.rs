//! End to end with a real ZooKeeper (Debian's package, started by the tests on an ephemeral
//! loopback port, see `skyconf_testkit::servers::zookeeper`): a server on
//! `ZookeeperSource`, polled over gRPC by a tonic client as an agent polls it. Covers put, update,
//! delete, a malformed document, group keys, the OAP's unit-test example, a ZooKeeper restart with
//! changes made while skyconf could not see it, and how fast a ZooKeeper write reaches agents.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use skyconf_core::digest::EMPTY_DIGEST;
use skyconf_server::ServeConfig;
use skyconf_server::reload::Guard;
use skyconf_sources::AGENT_CONFIGURATIONS_KEY;
use skyconf_sources::zookeeper::{ZookeeperSettings, ZookeeperSource};
use skyconf_testkit::fixtures::{OPENAPI_GROUP as OPENAPI, V5_DIGEST as GOOD_DIGEST, V5_DOCUMENT as GOOD, numbered};
use skyconf_testkit::latency::percentiles;
use skyconf_testkit::server::{Cds, Server, loopback};
use skyconf_testkit::servers::zookeeper::{Proxy, ZkServer, delete_tree, namespace, upsert};

/// Keeps the JVM start of the restart test from running during the latency measurement (the
/// reference machine has two cores). A tokio mutex: it is held across awaits.
static QUIET: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A source on the ZooKeeper at `host_port`, under `namespace`, retrying every 50 ms at first.
pub(crate) fn source(host_port: &str, namespace: &str) -> ZookeeperSource {
    let settings = ZookeeperSettings {
        host_port: host_port.to_owned(),
        namespace: namespace.to_owned(),
        base_sleep_time_ms: 50,
        ..ZookeeperSettings::default()
    };
    ZookeeperSource::new(settings).unwrap()
}

/// A server on `host_port`'s `namespace` (not waiting for a first load) and a CDS client.
async fn serve(host_port: &str, namespace: &str) -> (Server, Cds) {
    // These tests check the OAP's behaviour (a delete serves EMPTY at once): the fleet-reset guard,
    // which would hold it, is tested on its own.
    let config = ServeConfig { require_initial_load: false, reset_guard: Guard::OFF, ..loopback() };
    let running = Server::start(source(host_port, namespace), config).await;
    let client = running.cds().await;
    (running, client)
}

#[tokio::test]
async fn agents_get_what_zookeeper_holds_and_every_change() {
    let Some(server) = ZkServer::shared() else { return };
    let zk = server.client().await;
    let ns = namespace("e2e");
    let agent_node = format!("{ns}/{AGENT_CONFIGURATIONS_KEY}");
    let (running, client) = serve(&server.addr(), &ns).await;
    assert_eq!(client.digest("svc").await.as_deref(), Some(EMPTY_DIGEST), "an empty namespace is an empty table");

    // put → served.
    upsert(&zk, &agent_node, GOOD).await;
    client.wait_for_digest("svc", "the first document", |d| d == Some(GOOD_DIGEST)).await;

    // update → served.
    upsert(&zk, &agent_node, &numbered(20)).await;
    let (updated, _) = client.wait_for_digest("svc", "the update", |d| d.is_some_and(|d| d != GOOD_DIGEST)).await;

    // malformed → refused, the last good table stays.
    upsert(&zk, &agent_node, "configurations:\n  svc:\n    agent.sample_n_per_3_secs: [unclosed\n").await;
    let give_up = Instant::now() + Duration::from_secs(30);
    while running.served.last_rejection().is_none() {
        assert!(Instant::now() < give_up, "the malformed document was never noticed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(client.digest("svc").await, updated, "the last good table is still served");

    // delete → EMPTY for everyone.
    zk.delete(&agent_node, None).await.unwrap();
    client.wait_for_digest("svc", "the delete", |d| d == Some(EMPTY_DIGEST)).await;

    // Group keys: children added, changed, removed (carried for the DCS server).
    let group = format!("{ns}/{OPENAPI}");
    upsert(&zk, &format!("{group}/customerAPI-v1.yaml"), "a").await;
    upsert(&zk, &format!("{group}/productAPI-v1.yaml"), "b").await;
    let two: BTreeMap<String, String> =
        [("customerAPI-v1.yaml", "a"), ("productAPI-v1.yaml", "b")].map(|(k, v)| (k.to_owned(), v.to_owned())).into();
    running.wait_for_store("two items", |c| c.groups.get(OPENAPI) == Some(&two)).await;
    upsert(&zk, &format!("{group}/productAPI-v1.yaml"), "c").await;
    running.wait_for_store("a changed item", |c| c.groups[OPENAPI]["productAPI-v1.yaml"] == "c").await;
    zk.delete(&format!("{group}/customerAPI-v1.yaml"), None).await.unwrap();
    running.wait_for_store("a removed item", |c| c.groups[OPENAPI].len() == 1).await;

    // The OAP unit test's example (behaviour reference §5.3 item 9).
    let key = "agent-analyzer.default.slowDBAccessThreshold";
    upsert(&zk, &format!("{ns}/{key}"), "default:100,mongodb:50").await;
    running.wait_for_store(key, |c| c.singles.get(key).map(String::as_str) == Some("default:100,mongodb:50")).await;

    running.stop().await.unwrap();
    delete_tree(&zk, &ns).await;
}

#[tokio::test]
async fn serves_changes_made_while_zookeeper_was_down() {
    let _quiet = QUIET.lock().await;
    let Some(mut server) = ZkServer::start() else { return };
    let ns = "/skywalking";
    let agent_node = format!("{ns}/{AGENT_CONFIGURATIONS_KEY}");
    upsert(&server.client().await, &agent_node, GOOD).await;
    // skyconf reaches ZooKeeper through a proxy, so the test decides when it can see it again.
    let proxy = Proxy::start(server.socket_addr()).await;
    let (running, client) = serve(&proxy.addr(), ns).await;
    assert_eq!(client.digest("svc").await.as_deref(), Some(GOOD_DIGEST));

    proxy.cut();
    server.kill();
    let give_up = Instant::now() + Duration::from_secs(30);
    while running.store.status().connected {
        assert!(Instant::now() < give_up, "the outage was never noticed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(client.digest("svc").await.as_deref(), Some(GOOD_DIGEST), "the last good table is still served");

    // Back on the same port and data directory; a change is made before skyconf can reconnect.
    server.restart();
    let zk = server.client().await;
    upsert(&zk, &agent_node, &numbered(30)).await;
    proxy.restore();
    let (during, _) = client.wait_for_digest("svc", "the change made while down", |d| d != Some(GOOD_DIGEST)).await;
    assert!(running.store.status().connected);

    // And the watch works again.
    upsert(&zk, &agent_node, &numbered(31)).await;
    client.wait_for_digest("svc", "a change after the restart", |d| d.is_some() && d != during.as_deref()).await;
    running.stop().await.unwrap();
}

/// 200 ZooKeeper writes, each timed from the start of the write to the first `fetchConfigurations`
/// answer carrying the new digest (polled in a tight loop); their p99 (two may be slower, as a
/// loaded machine makes a few) is within 100 ms. The time ZooKeeper takes to commit the write (its
/// answer to `setData`) is printed too: it is part of the delay but not skyconf's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn propagation_zookeeper_write_reaches_agents_within_100_ms() {
    let Some(server) = ZkServer::shared() else { return };
    let _quiet = QUIET.lock().await;
    let zk = server.client().await;
    let ns = namespace("propagation");
    let agent_node = format!("{ns}/{AGENT_CONFIGURATIONS_KEY}");
    upsert(&zk, &agent_node, &numbered(0)).await;
    let (running, client) = serve(&server.addr(), &ns).await;
    let mut current = client.digest("svc").await;
    assert!(current.is_some());

    // A few writes first, so the JVM's JIT warm-up is not counted as skyconf's delay.
    for n in 1..=5 {
        zk.set_data(&agent_node, numbered(n).as_bytes(), None).await.unwrap();
        current = client.wait_for_digest("svc", "a warm-up write", |d| d != current.as_deref()).await.0;
    }
    let (mut delays, mut commits) = (Vec::new(), Vec::new());
    for n in 100..300 {
        let written = Instant::now();
        zk.set_data(&agent_node, numbered(n).as_bytes(), None).await.unwrap();
        commits.push(written.elapsed());
        let (now, seen) = client.wait_for_digest("svc", "a write", |d| d != current.as_deref()).await;
        delays.push(seen - written);
        current = now;
    }
    let served = percentiles(&mut delays);
    println!("ZooKeeper setData → new digest served, {} writes: {served}", delays.len());
    println!("ZooKeeper setData → acknowledged (commit), {} writes: {}", commits.len(), percentiles(&mut commits));
    assert!(served.p99 <= Duration::from_millis(100), "p99 over 100 ms: {delays:?}");
    running.stop().await.unwrap();
    delete_tree(&zk, &ns).await;
}
