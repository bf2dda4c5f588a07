//! The `Source` contract of the ZooKeeper store, against a real ZooKeeper (Debian's package):
//! the OAP's znode layout, a snapshot after the watch, one update per change, one failure per
//! outage followed by a fresh snapshot, and writes as compare-and-swaps. Skips when ZooKeeper is not installed, unless
//! `SKYCONF_REQUIRE_ZOOKEEPER` is set.

use std::collections::BTreeMap;
use std::time::Duration;

use skyconf_sources::zookeeper::{ZookeeperSettings, ZookeeperSource};
use skyconf_sources::{AGENT_CONFIGURATIONS_KEY, Expect, KeySet, Source, SourceError, StoreContent, Update};
use skyconf_testkit::fixtures::OPENAPI_GROUP as OPENAPI;
use skyconf_testkit::probe::SourceProbe;
use skyconf_testkit::servers::zookeeper::{Proxy, ZkServer, delete_tree, namespace, upsert};
use zookeeper_client as zk;

fn source(host_port: &str, namespace: &str) -> ZookeeperSource {
    let settings = ZookeeperSettings {
        host_port: host_port.to_owned(),
        namespace: namespace.to_owned(),
        base_sleep_time_ms: 50,
        max_retries: 2,
        ..ZookeeperSettings::default()
    };
    ZookeeperSource::new(settings).unwrap().with_request_timeout(Duration::from_secs(5))
}

/// The shared ZooKeeper, a client of it and a fresh namespace for `test`; `None` when ZooKeeper
/// is not installed (and not required).
async fn shared_zookeeper(test: &str) -> Option<(&'static ZkServer, zk::Client, String)> {
    let server = ZkServer::shared()?;
    let client = server.client().await;
    Some((server, client, namespace(test)))
}

/// A source on `host_port`'s `namespace`, and a probe running a copy of it on the OAP's keys.
fn watched(host_port: &str, namespace: &str) -> (ZookeeperSource, SourceProbe) {
    let source = source(host_port, namespace);
    let watching = SourceProbe::spawn(source.clone(), KeySet::oap());
    (source, watching)
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

#[tokio::test]
async fn reads_the_oap_example_of_its_unit_test() {
    let Some(server) = ZkServer::shared() else { return };
    let client = server.client().await;
    // Behaviour reference §5.3 item 9: namespace /default, this key, this data.
    let key = "agent-analyzer.default.slowDBAccessThreshold";
    upsert(&client, &format!("/default/{key}"), "default:100,mongodb:50").await;
    let source = source(&server.addr(), "/default");
    assert_eq!(source.znode_of(key), format!("/default/{key}"));
    let content = source.load(&KeySet::oap()).await.unwrap();
    assert_eq!(content.singles.get(key).map(String::as_str), Some("default:100,mongodb:50"));
    delete_tree(&client, "/default").await;
}

#[tokio::test]
async fn reads_singles_groups_and_both_and_snapshots_after_the_watch() {
    let Some((server, client, ns)) = shared_zookeeper("layout").await else { return };
    upsert(&client, &format!("{ns}/{AGENT_CONFIGURATIONS_KEY}"), "configurations: {}\n").await;
    upsert(&client, &format!("{ns}/{OPENAPI}/customerAPI-v1.yaml"), "a").await;
    upsert(&client, &format!("{ns}/{OPENAPI}/productAPI-v1.yaml"), "b").await;
    upsert(&client, &format!("{ns}/both"), "v").await;
    upsert(&client, &format!("{ns}/both/item"), "1").await;
    upsert(&client, &format!("{ns}/deep/item/ignored"), "x").await;
    upsert(&client, &format!("{ns}/empty"), "").await;
    let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    client.create(&format!("{ns}/binary"), &[b'a', 0xff], &options).await.unwrap();

    let source = source(&server.addr(), &ns);
    let loaded = source.load(&KeySet::oap()).await.unwrap();
    let expected_singles =
        map(&[(AGENT_CONFIGURATIONS_KEY, "configurations: {}\n"), ("both", "v"), ("binary", "a\u{fffd}")]);
    assert_eq!(loaded.singles, expected_singles, "empty data is no value; bad UTF-8 is replaced");
    let mut expected_groups = BTreeMap::new();
    expected_groups.insert(OPENAPI.to_owned(), map(&[("customerAPI-v1.yaml", "a"), ("productAPI-v1.yaml", "b")]));
    expected_groups.insert("both".to_owned(), map(&[("item", "1")]));
    expected_groups.insert("deep".to_owned(), map(&[("item", "")]));
    assert_eq!(loaded.groups, expected_groups, "deeper znodes are ignored");

    let mut watching = SourceProbe::spawn(source.clone(), KeySet::oap());
    assert_eq!(watching.snapshot().await, loaded, "run starts with the same view");
    watching.stop().await;
    delete_tree(&client, &ns).await;
}

#[tokio::test]
async fn reports_each_change_to_singles_and_groups() {
    let Some((server, client, ns)) = shared_zookeeper("changes").await else { return };
    let (source, mut watching) = watched(&server.addr(), &ns);
    assert_eq!(watching.snapshot().await, StoreContent::default(), "a missing namespace is empty");

    // put creates the namespace and the key.
    source.put(AGENT_CONFIGURATIONS_KEY, Some("a"), Expect::Seen).await.unwrap();
    assert_eq!(watching.single().await, (AGENT_CONFIGURATIONS_KEY.to_owned(), Some("a".to_owned())));
    client.set_data(&format!("{ns}/{AGENT_CONFIGURATIONS_KEY}"), b"b", None).await.unwrap();
    assert_eq!(watching.single().await.1.as_deref(), Some("b"));

    // Group items: added, changed, removed; the registered group stays, empty, until its node goes.
    let group = format!("{ns}/{OPENAPI}");
    upsert(&client, &group, "").await;
    assert_eq!(watching.group().await, (OPENAPI.to_owned(), Some(BTreeMap::new())), "registered: empty, not absent");
    upsert(&client, &format!("{group}/item1"), "100").await;
    assert_eq!(watching.group().await, (OPENAPI.to_owned(), Some(map(&[("item1", "100")]))));
    upsert(&client, &format!("{group}/item2"), "200").await;
    assert_eq!(watching.group().await.1, Some(map(&[("item1", "100"), ("item2", "200")])));
    upsert(&client, &format!("{group}/item2"), "300").await;
    assert_eq!(watching.group().await.1, Some(map(&[("item1", "100"), ("item2", "300")])));
    client.delete(&format!("{group}/item1"), None).await.unwrap();
    assert_eq!(watching.group().await.1, Some(map(&[("item2", "300")])));
    client.delete(&format!("{group}/item2"), None).await.unwrap();
    assert_eq!(watching.group().await.1, Some(BTreeMap::new()));
    client.delete(&group, None).await.unwrap();
    assert_eq!(watching.group().await.1, None);

    // An unregistered key with children is a group, and gone with its last child.
    upsert(&client, &format!("{ns}/custom.group/x"), "1").await;
    assert_eq!(watching.group().await, ("custom.group".to_owned(), Some(map(&[("x", "1")]))));
    client.delete(&format!("{ns}/custom.group/x"), None).await.unwrap();
    assert_eq!(watching.group().await, ("custom.group".to_owned(), None));

    source.put(AGENT_CONFIGURATIONS_KEY, None, Expect::Seen).await.unwrap();
    assert_eq!(watching.single().await, (AGENT_CONFIGURATIONS_KEY.to_owned(), None));
    assert!(watching.try_next().is_none(), "nothing else was reported");
    watching.stop().await;
    delete_tree(&client, &ns).await;
}

#[tokio::test]
async fn put_writes_the_layout_and_refuses_what_it_cannot_write() {
    let Some((server, client, root)) = shared_zookeeper("put").await else { return };
    let ns = format!("{root}/nested/deeper");
    let source = source(&server.addr(), &ns);
    let path = source.znode_of("alarm.default.alarm-settings");
    source.put("alarm.default.alarm-settings", Some("rules: {}"), Expect::Seen).await.unwrap();
    assert_eq!(client.get_data(&path).await.unwrap().0, b"rules: {}", "namespace created on the way");
    source.put("alarm.default.alarm-settings", Some("rules: []"), Expect::Seen).await.unwrap();
    assert_eq!(client.get_data(&path).await.unwrap().0, b"rules: []");
    source.put("alarm.default.alarm-settings", None, Expect::Seen).await.unwrap();
    assert!(matches!(client.get_data(&path).await, Err(zk::Error::NoNode)));
    source.put("alarm.default.alarm-settings", None, Expect::Seen).await.expect("deleting a missing key is fine");

    upsert(&client, &format!("{ns}/{OPENAPI}/item"), "1").await;
    let error = source.put(OPENAPI, None, Expect::Seen).await.unwrap_err();
    assert!(matches!(&error, SourceError::Refused { message, .. } if message.contains("children")), "{error}");

    for bad in ["", "a/b", ".."] {
        assert!(matches!(source.put(bad, Some("x"), Expect::Seen).await, Err(SourceError::Unsupported(_))), "{bad:?}");
    }
    let huge = "x".repeat(2 << 20);
    assert!(matches!(source.put("k", Some(&huge), Expect::Seen).await, Err(SourceError::TooLarge { .. })));
    delete_tree(&client, &root).await;
}

#[tokio::test]
async fn a_put_based_on_a_stale_version_conflicts_and_writes_nothing() {
    let Some((server, client, ns)) = shared_zookeeper("cas-stale").await else { return };
    let source = source(&server.addr(), &ns);
    let path = source.znode_of(AGENT_CONFIGURATIONS_KEY);
    upsert(&client, &path, "v1").await;
    assert_eq!(source.load(&KeySet::oap()).await.unwrap().agent_configurations(), Some("v1"));

    // Another client changes the znode after the source read it.
    upsert(&client, &path, "external").await;
    let error = source.put(AGENT_CONFIGURATIONS_KEY, Some("stale"), Expect::Seen).await.unwrap_err();
    assert!(matches!(&error, SourceError::Conflict { message, .. } if message.contains(&path)), "{error}");
    assert_eq!(client.get_data(&path).await.unwrap().0, b"external", "nothing was written");
    let error = source.put(AGENT_CONFIGURATIONS_KEY, None, Expect::Seen).await.unwrap_err();
    assert!(matches!(error, SourceError::Conflict { .. }), "a delete is a compare-and-swap too: {error}");
    assert_eq!(client.get_data(&path).await.unwrap().0, b"external");

    // Another client deletes it.
    source.load(&KeySet::oap()).await.unwrap();
    client.delete(&path, None).await.unwrap();
    let error = source.put(AGENT_CONFIGURATIONS_KEY, Some("stale"), Expect::Seen).await.unwrap_err();
    assert!(error.to_string().contains("it was deleted"), "{error}");
    assert!(matches!(client.get_data(&path).await, Err(zk::Error::NoNode)));

    // A key the source saw absent that another client created meanwhile.
    let absent = source.znode_of("x.y.absent");
    upsert(&client, &absent, "created elsewhere").await;
    let error = source.put("x.y.absent", Some("mine"), Expect::Seen).await.unwrap_err();
    assert!(error.to_string().contains("was absent when last seen"), "{error}");
    assert_eq!(client.get_data(&absent).await.unwrap().0, b"created elsewhere");
    delete_tree(&client, &ns).await;
}

#[tokio::test]
async fn a_lost_connection_is_one_failure_then_a_snapshot_with_what_changed_meanwhile() {
    let Some((server, client, ns)) = shared_zookeeper("cut").await else { return };
    upsert(&client, &format!("{ns}/{AGENT_CONFIGURATIONS_KEY}"), "before").await;
    upsert(&client, &format!("{ns}/gone.key"), "x").await;
    let proxy = Proxy::start(server.socket_addr()).await;
    let (_, mut watching) = watched(&proxy.addr(), &ns);
    assert_eq!(watching.snapshot().await.singles.len(), 2);

    proxy.cut();
    assert!(matches!(watching.next().await, Update::Failed(SourceError::Unavailable { .. })));
    // Changes the source cannot see: ZooKeeper will not replay them as events.
    upsert(&client, &format!("{ns}/{AGENT_CONFIGURATIONS_KEY}"), "during").await;
    upsert(&client, &format!("{ns}/new.key"), "y").await;
    client.delete(&format!("{ns}/gone.key"), None).await.unwrap();
    proxy.restore();

    let content = watching.snapshot().await;
    assert_eq!(content.singles, map(&[(AGENT_CONFIGURATIONS_KEY, "during"), ("new.key", "y")]));
    // And the watch works again.
    upsert(&client, &format!("{ns}/{AGENT_CONFIGURATIONS_KEY}"), "after").await;
    assert_eq!(watching.single().await.1.as_deref(), Some("after"));
    watching.stop().await;
    delete_tree(&client, &ns).await;
}

#[tokio::test]
async fn a_restarted_server_is_watched_again() {
    let Some(mut server) = ZkServer::start() else { return };
    let ns = "/restart";
    {
        let client = server.client().await;
        upsert(&client, &format!("{ns}/{AGENT_CONFIGURATIONS_KEY}"), "before").await;
    }
    let (_, mut watching) = watched(&server.addr(), ns);
    assert_eq!(watching.snapshot().await.agent_configurations(), Some("before"));

    server.kill();
    assert!(matches!(watching.next().await, Update::Failed(_)));
    server.restart();
    // The session survives the restart (it is in the data directory); the view is read afresh.
    assert_eq!(watching.snapshot().await.agent_configurations(), Some("before"));
    let client = server.client().await;
    upsert(&client, &format!("{ns}/{AGENT_CONFIGURATIONS_KEY}"), "after").await;
    assert_eq!(watching.single().await.1.as_deref(), Some("after"));
    watching.stop().await;
}

#[tokio::test]
async fn an_expired_session_is_replaced_by_a_new_one() {
    let Some(mut server) = ZkServer::start() else { return };
    let ns = "/expiry";
    let (_, mut watching) = watched(&server.addr(), ns);
    assert_eq!(watching.snapshot().await, StoreContent::default());

    // A server that lost its data does not know the session: the client is told it expired.
    server.kill();
    assert!(matches!(watching.next().await, Update::Failed(_)));
    server.wipe_data();
    server.restart();
    let client = server.client().await;
    upsert(&client, &format!("{ns}/{AGENT_CONFIGURATIONS_KEY}"), "new").await;

    // One failure per outage: the next report is the new session's snapshot, or it is empty and the
    // write follows as an update.
    let content = watching.snapshot().await;
    if content.agent_configurations() != Some("new") {
        assert_eq!(watching.single().await.1.as_deref(), Some("new"));
    }
    watching.stop().await;
}

#[tokio::test]
async fn an_unreachable_store_fails_to_load_and_run_keeps_retrying() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let source = source(&format!("127.0.0.1:{port}"), "/default");
    assert!(matches!(source.load(&KeySet::oap()).await, Err(SourceError::Unavailable { .. })));
    let mut watching = SourceProbe::spawn(source.clone(), KeySet::oap());
    assert!(matches!(watching.next().await, Update::Failed(_)));
    // Retrying quietly: no second failure while it stays down.
    assert!(watching.next_within(Duration::from_millis(500)).await.is_none());
    watching.stop().await;
}

#[test]
fn refuses_settings_that_cannot_work() {
    let bad_namespace = ZookeeperSettings { namespace: String::new(), ..ZookeeperSettings::default() };
    assert!(ZookeeperSource::new(bad_namespace).unwrap_err().to_string().contains("namespace"));
    let bad_hosts = ZookeeperSettings { host_port: " ".to_owned(), ..ZookeeperSettings::default() };
    assert!(ZookeeperSource::new(bad_hosts).is_err());
    let source = ZookeeperSource::new(ZookeeperSettings::default()).unwrap();
    assert_eq!(source.describe(), "zookeeper localhost:2181 namespace /default");
}

mod records {
    use std::sync::Arc;

    use skyconf_sources::Lifetime;

    use super::{shared_zookeeper, source};
    use crate::records as contract;

    #[tokio::test]
    async fn records_put_get_list_delete() {
        let Some((server, client, namespace)) = shared_zookeeper("records-basics").await else { return };
        let source = source(&server.addr(), &namespace);
        contract::basics(&*contract::of(&source)).await;
        let records = contract::of(&source);
        records.put("fleet", "d", b"v", Lifetime::Durable).await.unwrap();
        records.put("fleet", "s", b"v", Lifetime::Session).await.unwrap();
        let (data, durable) = client.get_data(&format!("{namespace}/skyconf/fleet/d")).await.unwrap();
        assert_eq!((data.as_slice(), durable.ephemeral_owner), (&b"v"[..], 0), "the layout; persistent");
        let (_, session) = client.get_data(&format!("{namespace}/skyconf/fleet/s")).await.unwrap();
        assert_ne!(session.ephemeral_owner, 0, "a session record is an ephemeral znode");
        records.put("fleet", "s", b"now durable", Lifetime::Durable).await.unwrap();
        let (data, now) = client.get_data(&format!("{namespace}/skyconf/fleet/s")).await.unwrap();
        assert_eq!((data.as_slice(), now.ephemeral_owner), (&b"now durable"[..], 0), "the lifetime changed");
    }

    #[tokio::test]
    async fn create_is_once_across_replicas() {
        let Some((server, _, namespace)) = shared_zookeeper("records-once").await else { return };
        let sources: Vec<_> = (0..3).map(|_| source(&server.addr(), &namespace)).collect();
        let records: Vec<_> = sources.iter().map(contract::of).collect();
        assert!(records[0].create_is_atomic());
        contract::create_once(&records).await;
    }

    #[tokio::test]
    async fn session_records_go_when_the_source_is_dropped() {
        let Some((server, _, namespace)) = shared_zookeeper("records-session").await else { return };
        let observer = source(&server.addr(), &namespace);
        contract::session_records_go_with_their_source(source(&server.addr(), &namespace), &*contract::of(&observer))
            .await;
    }

    #[tokio::test]
    async fn records_are_not_configuration() {
        let Some((server, _, namespace)) = shared_zookeeper("records-config").await else { return };
        contract::records_are_not_configuration(
            Arc::new(source(&server.addr(), &namespace)),
            "core.default.apdexThreshold",
        )
        .await;
    }
}
