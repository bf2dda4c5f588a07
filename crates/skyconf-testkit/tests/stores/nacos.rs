//! The Nacos store against a real Nacos-protocol server (rnacos on ephemeral loopback ports): the
//! `Source` contract, the OAP's key layout (behaviour reference §3.5 and §5.3 items 8 and 11),
//! namespace isolation, authentication, and an outage with a restart.

use std::collections::BTreeMap;

use skyconf_sources::nacos::{NacosSettings, NacosSource};
use skyconf_sources::{AGENT_CONFIGURATIONS_KEY, Expect, KeySet, Source, SourceError, StoreContent, Update};
use skyconf_testkit::probe::SourceProbe;
use skyconf_testkit::servers::rnacos::Rnacos;

const GROUP: &str = "skywalking";
const GROUP_KEY: &str = "test-module.default.testKeyGroup";

fn source(settings: NacosSettings) -> NacosSource {
    NacosSource::new(settings).expect("valid settings")
}

fn keys_with_test_group() -> KeySet {
    let mut keys = KeySet::oap_with(["test-module.default.testKey".to_owned()]);
    keys.groups.push(GROUP_KEY.to_owned());
    keys
}

fn single<'a>(content: &'a StoreContent, key: &str) -> Option<&'a str> {
    content.singles.get(key).map(String::as_str)
}

fn items(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

#[tokio::test]
async fn reads_the_keys_of_the_oaps_nacos_test() {
    let Some(nacos) = Rnacos::start("oap-test").await else { return };
    let store = source(nacos.settings(GROUP, ""));
    store.put("agent-analyzer.default.slowDBAccessThreshold", Some("test"), Expect::Seen).await.unwrap();
    store.put("testKey", Some("testVal"), Expect::Seen).await.unwrap();
    let content = store.load(&KeySet::oap_with(["testKey".to_owned()])).await.unwrap();
    assert_eq!(single(&content, "agent-analyzer.default.slowDBAccessThreshold"), Some("test"));
    assert_eq!(single(&content, "testKey"), Some("testVal"));
    assert_eq!(content.singles.len(), 2, "{content:?}");
    assert!(content.groups["core.default.endpoint-name-grouping-openapi"].is_empty());
}

#[tokio::test]
async fn sends_a_snapshot_then_every_change_as_it_happens() {
    let Some(nacos) = Rnacos::start("changes").await else { return };
    let store = source(nacos.settings(GROUP, ""));
    store.put("core.default.apdexThreshold", Some("default: 500"), Expect::Seen).await.unwrap();
    let mut watch = SourceProbe::started(store.clone(), KeySet::oap()).await;
    assert_eq!(single(watch.content(), "core.default.apdexThreshold"), Some("default: 500"));
    assert_eq!(watch.content().singles.len(), 1);

    for (n, value) in [Some("configurations: {}\n"), Some("configurations:\n  a: {k: v}\n"), None].iter().enumerate() {
        store.put(AGENT_CONFIGURATIONS_KEY, *value, Expect::Seen).await.unwrap();
        match watch.next().await {
            Update::Single { key, value: got, .. } => {
                assert_eq!(key, AGENT_CONFIGURATIONS_KEY);
                assert_eq!(got.as_deref(), *value, "change {n}");
            }
            other => panic!("change {n}: unexpected {other:?}"),
        }
    }
    // A value no OAP component could parse is still reported as it is: judging it is the server's job.
    store.put(AGENT_CONFIGURATIONS_KEY, Some("configurations:\n  a: {k: \n"), Expect::Seen).await.unwrap();
    watch.until("the malformed value", |c| c.agent_configurations() == Some("configurations:\n  a: {k: \n")).await;
    // Keys outside the watched set are not reported.
    store.put("not.watched.key", Some("x"), Expect::Seen).await.unwrap();
    store.put("core.default.apdexThreshold", Some("default: 600"), Expect::Seen).await.unwrap();
    watch.until("the second apdex", |c| single(c, "core.default.apdexThreshold") == Some("default: 600")).await;
    assert!(!watch.content().singles.contains_key("not.watched.key"));
    assert_eq!((watch.failures(), watch.snapshots()), (0, 1));
    watch.stop().await;
}

#[tokio::test]
async fn group_keys_follow_their_index_and_sub_items() {
    let Some(nacos) = Rnacos::start("groups").await else { return };
    let store = source(nacos.settings(GROUP, ""));
    let mut watch = SourceProbe::started(store.clone(), keys_with_test_group()).await;
    assert!(watch.content().groups[GROUP_KEY].is_empty(), "an absent index is an empty group");

    // §5.3 item 11: the index lists `item1\n item2`, each sub-item is its own dataId.
    store.put("item1", Some("100"), Expect::Seen).await.unwrap();
    store.put("item2", Some("200"), Expect::Seen).await.unwrap();
    store.put(GROUP_KEY, Some("item1\n item2"), Expect::Seen).await.unwrap();
    watch.until("item1 and item2", |c| c.groups[GROUP_KEY] == items(&[("item1", "100"), ("item2", "200")])).await;
    store.put("item1", None, Expect::Seen).await.unwrap();
    watch.until("item1 deleted", |c| c.groups[GROUP_KEY] == items(&[("item2", "200")])).await;
    store.put("item2", Some("300"), Expect::Seen).await.unwrap();
    watch.until("item2 modified", |c| c.groups[GROUP_KEY] == items(&[("item2", "300")])).await;

    // A new index names a new sub-item, which is then watched as well.
    store.put(GROUP_KEY, Some("item2\r\nitem3\r\n"), Expect::Seen).await.unwrap();
    store.put("item3", Some("3"), Expect::Seen).await.unwrap();
    watch.until("item3", |c| c.groups[GROUP_KEY] == items(&[("item2", "300"), ("item3", "3")])).await;
    store.put("item3", Some("33"), Expect::Seen).await.unwrap();
    watch.until("item3 modified", |c| c.groups[GROUP_KEY] == items(&[("item2", "300"), ("item3", "33")])).await;
    // A sub-item dropped from the index is no longer part of the group, though its config stays.
    store.put(GROUP_KEY, Some("item3"), Expect::Seen).await.unwrap();
    watch.until("item2 dropped", |c| c.groups[GROUP_KEY] == items(&[("item3", "33")])).await;
    store.put(GROUP_KEY, None, Expect::Seen).await.unwrap();
    watch.until("the group emptied", |c| c.groups[GROUP_KEY].is_empty()).await;
    assert_eq!(watch.failures(), 0);
    watch.stop().await;
}

#[tokio::test]
async fn namespaces_and_groups_are_isolated() {
    let Some(nacos) = Rnacos::start("isolation").await else { return };
    let tenant_a = source(nacos.settings(GROUP, "tenant-a"));
    let mut watch = SourceProbe::started(tenant_a.clone(), KeySet::oap()).await;
    let key = "alarm.default.alarm-settings";
    let default_ns = source(nacos.settings(GROUP, ""));
    let tenant_b = source(nacos.settings(GROUP, "tenant-b"));
    let other_group = source(nacos.settings("other", "tenant-a"));
    for (store, value) in [(&default_ns, "default"), (&tenant_b, "b"), (&other_group, "other group")] {
        store.put(key, Some(value), Expect::Seen).await.unwrap();
        let seen = store.load(&KeySet::oap()).await.unwrap();
        assert_eq!(single(&seen, key), Some(value), "each namespace and group holds its own value");
    }
    tenant_a.put(key, Some("a"), Expect::Seen).await.unwrap();
    watch.until("tenant-a's own value", |c| single(c, key).is_some()).await;
    assert_eq!(single(watch.content(), key), Some("a"), "only tenant-a's value was ever seen");
    assert_eq!(single(&tenant_a.load(&KeySet::oap()).await.unwrap(), key), Some("a"));
    watch.stop().await;
}

#[tokio::test]
async fn an_outage_is_reported_once_and_a_restarted_store_is_resumed() {
    let Some(mut nacos) = Rnacos::start("restart").await else { return };
    let store = source(nacos.settings(GROUP, ""));
    store.put(AGENT_CONFIGURATIONS_KEY, Some("configurations: {}\n"), Expect::Seen).await.unwrap();
    let mut watch = SourceProbe::started(store.clone(), KeySet::oap()).await;

    nacos.stop().await;
    let failed = watch.next().await;
    assert!(matches!(failed, Update::Failed(SourceError::Unavailable { .. })), "{failed:?}");
    assert!(store.load(&KeySet::oap()).await.is_err(), "load fails rather than returning a partial view");

    nacos.restart().await;
    // Written as soon as the store is back, most likely before the source is (it backs off):
    // the fresh snapshot or the change right after it carries the values.
    store.put(AGENT_CONFIGURATIONS_KEY, Some("configurations:\n  r: {k: v}\n"), Expect::Seen).await.unwrap();
    store.put("core.default.apdexThreshold", Some("default: 1"), Expect::Seen).await.unwrap();
    watch
        .until("the writes made after the restart", |c| {
            c.agent_configurations() == Some("configurations:\n  r: {k: v}\n")
                && single(c, "core.default.apdexThreshold").is_some()
        })
        .await;
    // The harness may start rnacos more than once (it restarts a broken start), and the source
    // may have caught one of those runs: each outage is one failure, each followed by a snapshot.
    assert!(watch.failures() >= 1);
    assert_eq!(watch.snapshots(), watch.failures() + 1, "a fresh snapshot after each outage, one failure each");

    store.put(AGENT_CONFIGURATIONS_KEY, Some("configurations:\n  s: {k: v}\n"), Expect::Seen).await.unwrap();
    watch
        .until("a change after recovery", |c| c.agent_configurations() == Some("configurations:\n  s: {k: v}\n"))
        .await;
    watch.stop().await;
}

#[tokio::test]
async fn logs_in_with_a_user_and_password() {
    let Some(nacos) = Rnacos::start_with_login("login", "skyconf", "s3cret").await else { return };
    let settings = NacosSettings { username: "skyconf".into(), password: "s3cret".into(), ..nacos.settings(GROUP, "") };
    let store = source(settings.clone());
    store.put(AGENT_CONFIGURATIONS_KEY, Some("configurations: {}\n"), Expect::Seen).await.unwrap();
    let mut watch = SourceProbe::started(store.clone(), KeySet::oap()).await;
    assert_eq!(watch.content().agent_configurations(), Some("configurations: {}\n"));
    store.put(AGENT_CONFIGURATIONS_KEY, None, Expect::Seen).await.unwrap();
    watch.until("the delete", |c| c.agent_configurations().is_none()).await;
    watch.stop().await;

    let anonymous = source(nacos.settings(GROUP, ""));
    let error = anonymous.load(&KeySet::oap()).await.unwrap_err();
    assert!(matches!(error, SourceError::Refused { .. }), "{error}");
    let wrong = source(NacosSettings { password: "wrong".into(), ..settings });
    let error = wrong.load(&KeySet::oap()).await.unwrap_err();
    assert!(matches!(error, SourceError::Refused { .. }), "{error}");
}

#[tokio::test]
async fn put_refuses_what_nacos_cannot_hold() {
    let store = source(NacosSettings { port: 1, ..NacosSettings::default() });
    assert!(matches!(
        store.put(AGENT_CONFIGURATIONS_KEY, Some(""), Expect::Seen).await,
        Err(SourceError::Unsupported(_))
    ));
    assert!(matches!(store.put("a/b", Some("x"), Expect::Seen).await, Err(SourceError::Unsupported(_))));
    assert!(matches!(store.put("", None, Expect::Seen).await, Err(SourceError::Unsupported(_))));
    // Nothing listens on port 1: an outage, not a panic or a refusal.
    assert!(matches!(store.load(&KeySet::oap()).await, Err(SourceError::Unavailable { .. })));
}

#[tokio::test]
async fn a_write_is_refused_when_the_config_changed_since_it_was_seen() {
    let Some(nacos) = Rnacos::start("compare").await else { return };
    let (first, second) = (source(nacos.settings(GROUP, "")), source(nacos.settings(GROUP, "")));
    let keys = KeySet::oap();
    first.put(AGENT_CONFIGURATIONS_KEY, Some("configurations: {}\n"), Expect::Seen).await.unwrap();
    first.load(&keys).await.unwrap();
    second.load(&keys).await.unwrap();
    first.put(AGENT_CONFIGURATIONS_KEY, Some("configurations:\n  a: {k: '1'}\n"), Expect::Seen).await.unwrap();
    let refused = second.put(AGENT_CONFIGURATIONS_KEY, Some("configurations:\n  b: {k: '2'}\n"), Expect::Seen).await;
    assert!(
        matches!(&refused, Err(SourceError::Conflict { message, .. }) if message.contains("when last seen")),
        "a write based on a config the other writer changed: {refused:?}"
    );
    assert!(matches!(
        second.put(AGENT_CONFIGURATIONS_KEY, None, Expect::Seen).await,
        Err(SourceError::Conflict { .. })
    ));
    // A config absent now (deleted, or a server back empty) is written whatever was seen.
    first.put("core.default.apdexThreshold", Some("default: 1"), Expect::Seen).await.unwrap();
    second.load(&keys).await.unwrap();
    first.put("core.default.apdexThreshold", None, Expect::Seen).await.unwrap();
    second.put("core.default.apdexThreshold", Some("default: 2"), Expect::Seen).await.unwrap();
    let content = second.load(&keys).await.unwrap();
    assert_eq!(single(&content, AGENT_CONFIGURATIONS_KEY), Some("configurations:\n  a: {k: '1'}\n"), "nothing written");
    second.put(AGENT_CONFIGURATIONS_KEY, Some("configurations:\n  b: {k: '2'}\n"), Expect::Seen).await.unwrap();
    assert!(matches!(first.put(AGENT_CONFIGURATIONS_KEY, None, Expect::Seen).await, Err(SourceError::Conflict { .. })));
    assert!(
        matches!(
            first.put(AGENT_CONFIGURATIONS_KEY, Some("x"), Expect::At(Some(1))).await,
            Err(SourceError::Unsupported(_))
        ),
        "Nacos has no revisions to write at"
    );
}

mod records {
    use std::sync::Arc;

    use skyconf_sources::{Lifetime, Source};
    use skyconf_testkit::servers::rnacos::Rnacos;

    use super::{GROUP, source};
    use crate::records as contract;

    #[tokio::test]
    async fn records_put_get_list_delete() {
        let Some(nacos) = Rnacos::start("records-basics").await else { return };
        let store = source(nacos.settings(GROUP, ""));
        contract::basics(&*contract::of(&store)).await;
        // The layout: dataId {kind}.{name} in the group {group}.skyconf, in an envelope.
        contract::of(&store).put("fleet", "x", b"{\"v\":1}", Lifetime::Durable).await.unwrap();
        let beside = source(nacos.settings("skywalking.skyconf", ""));
        let raw = beside.load(&skyconf_sources::KeySet::oap_with(["fleet.x".to_owned()])).await.unwrap();
        assert_eq!(raw.singles["fleet.x"], r#"{"expires_ms":null,"value":"{\"v\":1}"}"#);
    }

    #[tokio::test]
    async fn create_is_once_within_a_process() {
        let Some(nacos) = Rnacos::start("records-once").await else { return };
        let store = source(nacos.settings(GROUP, ""));
        let records = contract::of(&store);
        assert!(!records.create_is_atomic(), "Nacos has no compare-and-set");
        contract::create_once(&[records]).await;
    }

    #[tokio::test]
    async fn session_records_go_when_the_source_is_dropped() {
        let Some(nacos) = Rnacos::start("records-session").await else { return };
        let observer = source(nacos.settings(GROUP, ""));
        contract::session_records_go_with_their_source(source(nacos.settings(GROUP, "")), &*contract::of(&observer))
            .await;
    }

    #[tokio::test]
    async fn expired_records_are_not_listed_and_are_tidied_up() {
        let Some(nacos) = Rnacos::start("records-expiry").await else { return };
        let store = source(nacos.settings(GROUP, ""));
        let records = contract::of(&store);
        // As a replica that died long ago left it.
        let beside = source(nacos.settings("skywalking.skyconf", ""));
        beside
            .put("fleet.ghost", Some(r#"{"expires_ms":1,"value":"{}"}"#), skyconf_sources::Expect::Seen)
            .await
            .unwrap();
        records.put("fleet", "alive", b"{}", Lifetime::Session).await.unwrap();
        assert_eq!(records.get("fleet", "ghost").await.unwrap(), None, "expired");
        let listed = records.list("fleet").await.unwrap();
        assert_eq!(listed.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["alive"]);
        let keys = skyconf_sources::KeySet::oap_with(["fleet.ghost".to_owned()]);
        assert!(!beside.load(&keys).await.unwrap().singles.contains_key("fleet.ghost"), "deleted by the listing");
    }

    #[tokio::test]
    async fn records_are_not_configuration() {
        let Some(nacos) = Rnacos::start("records-config").await else { return };
        contract::records_are_not_configuration(
            Arc::new(source(nacos.settings(GROUP, ""))),
            "core.default.apdexThreshold",
        )
        .await;
    }
}
