//! The etcd store against a real etcd (see `skyconf_testkit::servers::etcd`): the [`Source`] contract — load,
//! snapshot then one update per change, put and delete as compare-and-swaps, one failure per
//! outage and a fresh snapshot after it, re-listing after compaction, authentication — and the
//! OAP's key layout.

use std::time::Duration;

use skyconf_sources::etcd::{EtcdSettings, EtcdSource};
use skyconf_sources::{AGENT_CONFIGURATIONS_KEY, Backoff, Expect, KeySet, Source, SourceError, Update};
use skyconf_testkit::fixtures::OPENAPI_GROUP as GROUP;
use skyconf_testkit::probe::SourceProbe;
use skyconf_testkit::servers::etcd::{EtcdServer, TestCerts};

fn settings(server: &EtcdServer) -> EtcdSettings {
    EtcdSettings { endpoints: server.url(), ..EtcdSettings::default() }
}

fn source(settings: EtcdSettings) -> EtcdSource {
    EtcdSource::new(settings).unwrap().with_backoff(Backoff::new(Duration::from_millis(50), Duration::from_millis(500)))
}

fn key(k: &str) -> String {
    format!("/skywalking/{k}")
}

#[tokio::test]
async fn reports_the_namespace_then_every_change() {
    let Some(etcd) = EtcdServer::start().await else { return };
    let admin = etcd.admin().await;
    admin.put(&key(AGENT_CONFIGURATIONS_KEY), "configurations: {}\n").await;
    admin.put(&key("alarm.default.alarm-settings"), "rules: {}").await;
    admin.put(&key(&format!("{GROUP}/customerAPI-v1.yaml")), "a").await;
    admin.put(&key(&format!("{GROUP}/")), "the prefix key itself is skipped").await;
    admin.put(&key("test-module.default.testKey"), "unregistered keys are reported too").await;
    admin.put("/elsewhere/x", "outside the namespace").await;

    let source = std::sync::Arc::new(source(settings(&etcd)));
    let loaded = source.load(&KeySet::oap()).await.unwrap();
    assert_eq!(loaded.agent_configurations(), Some("configurations: {}\n"));
    assert_eq!(loaded.singles.len(), 3, "{loaded:?}");
    assert_eq!(loaded.groups[GROUP].len(), 1, "{loaded:?}");
    assert_eq!(loaded.groups[GROUP]["customerAPI-v1.yaml"], "a");

    let mut run = SourceProbe::spawn_shared(&source, KeySet::oap());
    assert_eq!(run.snapshot().await, loaded, "the first report is what load read");

    admin.put(&key(AGENT_CONFIGURATIONS_KEY), "configurations:\n  a: {k: v}\n").await;
    assert_eq!(
        run.single().await,
        (AGENT_CONFIGURATIONS_KEY.to_owned(), Some("configurations:\n  a: {k: v}\n".to_owned()))
    );

    admin.delete(&key("alarm.default.alarm-settings")).await;
    assert_eq!(run.single().await, ("alarm.default.alarm-settings".to_owned(), None));

    admin.put("/elsewhere/y", "not ours").await;
    admin.put(&key(&format!("{GROUP}/productAPI-v1.yaml")), "b").await;
    match run.next().await {
        Update::Group { key, items: Some(items) } => {
            assert_eq!(key, GROUP);
            assert_eq!(items.len(), 2);
            assert_eq!(items["productAPI-v1.yaml"], "b");
        }
        other => panic!("expected the group, got {other:?}"),
    }
    admin.delete(&key(&format!("{GROUP}/customerAPI-v1.yaml"))).await;
    admin.delete(&key(&format!("{GROUP}/productAPI-v1.yaml"))).await;
    assert!(matches!(run.next().await, Update::Group { items: Some(items), .. } if items.len() == 1));
    assert!(matches!(run.next().await, Update::Group { items: None, .. }), "a group without items is absent");

    // put writes {namespace}/{key}; the change comes back through the watch.
    source.put("core.default.apdexThreshold", Some("default: 500"), Expect::Seen).await.unwrap();
    assert_eq!(admin.get(&key("core.default.apdexThreshold")).await.as_deref(), Some(&b"default: 500"[..]));
    assert_eq!(run.single().await, ("core.default.apdexThreshold".to_owned(), Some("default: 500".to_owned())));
    source.put("core.default.apdexThreshold", None, Expect::Seen).await.unwrap();
    assert_eq!(admin.get(&key("core.default.apdexThreshold")).await, None);
    assert_eq!(run.single().await, ("core.default.apdexThreshold".to_owned(), None));
    assert!(matches!(source.put("a/b", Some("x"), Expect::Seen).await, Err(SourceError::Unsupported(_))));

    // Bytes that are not UTF-8 are decoded as the OAP's JVM decodes them.
    admin.put(&key("test-module.default.testKey"), vec![b'x', 0xff]).await;
    assert_eq!(run.single().await.1.as_deref(), Some("x\u{fffd}"));
    run.stop().await;
}

#[tokio::test]
async fn a_put_based_on_a_stale_revision_conflicts_and_writes_nothing() {
    let Some(etcd) = EtcdServer::start().await else { return };
    let admin = etcd.admin().await;
    let agent = key(AGENT_CONFIGURATIONS_KEY);
    admin.put(&agent, "v1").await;
    let source = source(settings(&etcd));
    assert_eq!(source.load(&KeySet::oap()).await.unwrap().agent_configurations(), Some("v1"));

    // Another client changes the key after the source read it: mod_revision differs.
    admin.put(&agent, "external").await;
    let error = source.put(AGENT_CONFIGURATIONS_KEY, Some("stale"), Expect::Seen).await.unwrap_err();
    assert!(matches!(&error, SourceError::Conflict { message, .. } if message.contains(&agent)), "{error}");
    assert_eq!(admin.get(&agent).await.as_deref(), Some(&b"external"[..]), "nothing was written");
    let error = source.put(AGENT_CONFIGURATIONS_KEY, None, Expect::Seen).await.unwrap_err();
    assert!(matches!(error, SourceError::Conflict { .. }), "a delete is a compare-and-swap too: {error}");
    assert_eq!(admin.get(&agent).await.as_deref(), Some(&b"external"[..]));

    // Another client deletes it.
    source.load(&KeySet::oap()).await.unwrap();
    admin.delete(&agent).await;
    let error = source.put(AGENT_CONFIGURATIONS_KEY, Some("stale"), Expect::Seen).await.unwrap_err();
    assert!(error.to_string().contains("deleted since"), "{error}");
    assert_eq!(admin.get(&agent).await, None);

    // A key the source saw absent (version == 0) that another client created meanwhile.
    let absent = key("x.y.absent");
    admin.put(&absent, "created elsewhere").await;
    let error = source.put("x.y.absent", Some("mine"), Expect::Seen).await.unwrap_err();
    assert!(error.to_string().contains("was absent when last seen"), "{error}");
    assert_eq!(admin.get(&absent).await.as_deref(), Some(&b"created elsewhere"[..]));
}

#[tokio::test]
async fn namespaces_map_as_the_oap_maps_them() {
    let Some(etcd) = EtcdServer::start().await else { return };
    let admin = etcd.admin().await;
    admin.put("/skywalking/a.b.c", "1").await;
    admin.put("top.level.key", "2").await;

    let with = |namespace: &str| EtcdSettings { namespace: namespace.to_owned(), ..settings(&etcd) };
    let slash = source(with("/skywalking/")).load(&KeySet::oap()).await.unwrap();
    assert_eq!(slash.singles["a.b.c"], "1", "a trailing slash is not doubled");
    assert_eq!(slash.singles.len(), 1);

    let none = source(with("")).load(&KeySet::oap()).await.unwrap();
    assert_eq!(none.singles["top.level.key"], "2", "an empty namespace is no prefix");
    assert!(!none.singles.contains_key("a.b.c"), "deeper keys are not single keys: {none:?}");

    source(with("")).put("written.at.root", Some("3"), Expect::Seen).await.unwrap();
    assert_eq!(admin.get("written.at.root").await.as_deref(), Some(&b"3"[..]));
}

#[tokio::test]
async fn an_outage_is_one_failure_then_a_fresh_snapshot() {
    let Some(mut etcd) = EtcdServer::start().await else { return };
    let admin = etcd.admin().await;
    admin.put(&key(AGENT_CONFIGURATIONS_KEY), "v1").await;
    let source = std::sync::Arc::new(source(settings(&etcd)));
    let mut run = SourceProbe::spawn_shared(&source, KeySet::oap());
    assert_eq!(run.snapshot().await.agent_configurations(), Some("v1"));

    etcd.kill();
    match run.next().await {
        Update::Failed(SourceError::Unavailable { message, .. }) => assert!(!message.is_empty()),
        other => panic!("expected one failure, got {other:?}"),
    }
    let failed = run.try_next();
    assert!(failed.is_none(), "one failure per outage, not one per retry: {failed:?}");

    etcd.restart().await;
    let admin = etcd.admin().await;
    // Written right after the restart, possibly before the source is back: it must still arrive.
    admin.put(&key(AGENT_CONFIGURATIONS_KEY), "v2").await;
    let content = match run.next().await {
        Update::Snapshot(content) => content,
        Update::Failed(error) => panic!("a second failure in one outage: {error}"),
        other => panic!("expected the recovery snapshot, got {other:?}"),
    };
    let value = match content.agent_configurations() {
        Some("v2") => "v2".to_owned(),
        // The snapshot was read before the write: the write follows as a change.
        Some("v1") => run.single().await.1.unwrap(),
        other => panic!("unexpected {other:?}"),
    };
    assert_eq!(value, "v2");

    admin.put(&key(AGENT_CONFIGURATIONS_KEY), "v3").await;
    assert_eq!(run.single().await.1.as_deref(), Some("v3"), "watching again");
    run.stop().await;
}

#[tokio::test]
async fn resumes_after_the_last_revision_and_relists_after_compaction() {
    let Some(etcd) = EtcdServer::start().await else { return };
    let admin = etcd.admin().await;
    admin.put(&key(AGENT_CONFIGURATIONS_KEY), "v1").await;
    let source = std::sync::Arc::new(source(settings(&etcd)));

    let mut run = SourceProbe::spawn_shared(&source, KeySet::oap());
    assert_eq!(run.snapshot().await.agent_configurations(), Some("v1"));
    run.stop().await;

    // Changes while nobody watched arrive in the next run's snapshot, once.
    admin.put(&key(AGENT_CONFIGURATIONS_KEY), "v2").await;
    admin.put(&key("x.y.z"), "1").await;
    let mut run = SourceProbe::spawn_shared(&source, KeySet::oap());
    let content = run.snapshot().await;
    assert_eq!(content.agent_configurations(), Some("v2"));
    assert_eq!(content.singles["x.y.z"], "1");
    admin.put(&key("x.y.z"), "2").await;
    assert_eq!(
        run.single().await,
        ("x.y.z".to_owned(), Some("2".to_owned())),
        "replayed events are not reported again"
    );
    assert_eq!(source.relists(), 0, "a resume within the kept history needs no re-list");
    run.stop().await;

    // The revision to resume from is compacted away: the source re-lists instead of failing.
    admin.put(&key(AGENT_CONFIGURATIONS_KEY), "v3").await;
    admin.delete(&key("x.y.z")).await;
    let latest = admin.put(&key("a.b.c"), "new").await;
    admin.compact(latest).await;
    let mut run = SourceProbe::spawn_shared(&source, KeySet::oap());
    let mut content = run.snapshot().await;
    // etcd may cancel the resumed watch for compaction after that snapshot went out; whichever
    // way, the source's view converges on the store's and no failure is reported.
    run.follow(&mut content, |c| {
        c.agent_configurations() == Some("v3")
            && !c.singles.contains_key("x.y.z")
            && c.singles.get("a.b.c").is_some_and(|v| v == "new")
    })
    .await;
    let give_up = std::time::Instant::now() + Duration::from_secs(20);
    while source.relists() == 0 {
        assert!(std::time::Instant::now() < give_up, "the compaction never made the source re-list");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    admin.put(&key("a.b.c"), "newer").await;
    run.follow(&mut content, |c| c.singles.get("a.b.c").is_some_and(|v| v == "newer")).await;
    run.stop().await;
}

#[tokio::test]
async fn logs_in_and_refuses_a_wrong_password_clearly() {
    let Some(etcd) = EtcdServer::start().await else { return };
    let admin = etcd.admin().await.enable_auth("s3cret").await;
    admin.put(&key(AGENT_CONFIGURATIONS_KEY), "v1").await;

    let login = |password: &str| EtcdSettings {
        authentication: true,
        user: "root".into(),
        password: password.into(),
        ..settings(&etcd)
    };
    loads_runs_and_writes(&std::sync::Arc::new(source(login("s3cret"))), "v1", "v2").await;

    let wrong = std::sync::Arc::new(source(login("wrong")));
    match wrong.load(&KeySet::oap()).await {
        Err(SourceError::Refused { message, .. }) => assert!(message.contains("authentication failed"), "{message}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(matches!(
        wrong.put(AGENT_CONFIGURATIONS_KEY, Some("x"), Expect::Seen).await,
        Err(SourceError::Refused { .. })
    ));
    let mut run = SourceProbe::spawn_shared(&wrong, KeySet::oap());
    assert!(matches!(run.next().await, Update::Failed(SourceError::Refused { .. })));
    run.stop().await;

    let anonymous = source(settings(&etcd));
    assert!(matches!(anonymous.load(&KeySet::oap()).await, Err(SourceError::Refused { .. })), "no login, no read");
    assert_eq!(admin.get(&key(AGENT_CONFIGURATIONS_KEY)).await.as_deref(), Some(&b"v2"[..]));
}

#[tokio::test]
async fn speaks_tls_with_a_private_ca_and_a_client_certificate() {
    let Some(certs) = TestCerts::generate() else { return };
    let Some(etcd) = EtcdServer::start_tls(certs.clone()).await else { return };
    let tls = EtcdSettings {
        ca_file: Some(certs.ca.clone()),
        cert_file: Some(certs.client_cert.clone()),
        key_file: Some(certs.client_key.clone()),
        ..settings(&etcd)
    };
    assert!(etcd.url().starts_with("https://"));
    let source = std::sync::Arc::new(source(tls.clone()));
    // etcd listens before it serves: poll until it answers.
    let give_up = std::time::Instant::now() + Duration::from_secs(20);
    while let Err(error) = source.put(AGENT_CONFIGURATIONS_KEY, Some("over tls"), Expect::Seen).await {
        assert!(std::time::Instant::now() < give_up, "no TLS connection: {error}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    loads_runs_and_writes(&source, "over tls", "still tls").await;

    let no_client_certificate = EtcdSettings { cert_file: None, key_file: None, ..tls.clone() };
    assert!(source_err(no_client_certificate).await.contains("etcd"), "the server requires a client certificate");
    let system_roots = EtcdSettings { ca_file: None, ..tls };
    assert!(!source_err(system_roots).await.is_empty(), "a private CA is not trusted by default");
}

/// `source` loads `held` as the agent configurations, its run starts with the same, and a put of
/// `next` through it is reported as an update.
async fn loads_runs_and_writes(source: &std::sync::Arc<EtcdSource>, held: &str, next: &str) {
    assert_eq!(source.load(&KeySet::oap()).await.unwrap().agent_configurations(), Some(held));
    let mut run = SourceProbe::spawn_shared(source, KeySet::oap());
    assert_eq!(run.snapshot().await.agent_configurations(), Some(held));
    source.put(AGENT_CONFIGURATIONS_KEY, Some(next), Expect::Seen).await.unwrap();
    assert_eq!(run.single().await.1.as_deref(), Some(next));
    run.stop().await;
}

async fn source_err(settings: EtcdSettings) -> String {
    match source(settings).load(&KeySet::oap()).await {
        Ok(content) => panic!("expected a failure, read {content:?}"),
        Err(error) => error.to_string(),
    }
}

mod records {
    use std::sync::Arc;
    use std::time::Duration;

    use skyconf_sources::etcd::EtcdSource;
    use skyconf_testkit::servers::etcd::EtcdServer;

    use super::{settings, source};
    use crate::records as contract;

    fn namespace(etcd: &EtcdServer, namespace: &str) -> EtcdSource {
        source(skyconf_sources::etcd::EtcdSettings { namespace: namespace.to_owned(), ..settings(etcd) })
    }

    #[tokio::test]
    async fn records_put_get_list_delete() {
        let Some(etcd) = EtcdServer::start().await else { return };
        let source = namespace(&etcd, "/records-basics");
        contract::basics(&*contract::of(&source)).await;
        let admin = etcd.admin().await;
        contract::of(&source).put("fleet", "x", b"v", skyconf_sources::Lifetime::Durable).await.unwrap();
        assert_eq!(admin.get("/records-basics/skyconf/fleet/x").await.as_deref(), Some(&b"v"[..]), "the layout");
    }

    #[tokio::test]
    async fn create_is_once_across_replicas() {
        let Some(etcd) = EtcdServer::start().await else { return };
        let sources: Vec<EtcdSource> = (0..3).map(|_| namespace(&etcd, "/records-once")).collect();
        let records: Vec<_> = sources.iter().map(contract::of).collect();
        assert!(records[0].create_is_atomic());
        contract::create_once(&records).await;
    }

    #[tokio::test]
    async fn session_records_go_when_the_source_is_dropped() {
        let Some(etcd) = EtcdServer::start().await else { return };
        let observer = namespace(&etcd, "/records-session");
        contract::session_records_go_with_their_source(namespace(&etcd, "/records-session"), &*contract::of(&observer))
            .await;
    }

    #[tokio::test]
    async fn session_records_outlive_their_ttl_and_come_back_after_an_outage() {
        let Some(etcd) = EtcdServer::start().await else { return };
        let admin = etcd.admin().await;
        let proxy = skyconf_testkit::servers::etcd::Proxy::start(&etcd.url()).await;
        let through_proxy = skyconf_sources::etcd::EtcdSettings {
            endpoints: proxy.url(),
            namespace: "/records-lease".to_owned(),
            connect_timeout_ms: 500,
            ..settings(&etcd)
        };
        let source = source(through_proxy).with_session_ttl(Duration::from_secs(2));
        let records = contract::of(&source);
        records.put("fleet", "me", b"{}", skyconf_sources::Lifetime::Session).await.unwrap();
        let key = "/records-lease/skyconf/fleet/me";
        // Renewed every third of the TTL: still there after twice the TTL.
        let kept_until = tokio::time::Instant::now() + Duration::from_secs(4);
        while tokio::time::Instant::now() < kept_until {
            assert!(admin.get(key).await.is_some(), "kept alive");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        // An outage longer than the TTL: the lease expires in the store...
        proxy.cut();
        skyconf_testkit::server::eventually_async("the record expired", async || admin.get(key).await.is_none()).await;
        // ...and once the store is back, a new lease carries the record again.
        proxy.restore();
        skyconf_testkit::server::eventually_async("the record is written again", async || {
            admin.get(key).await.is_some()
        })
        .await;
    }

    #[tokio::test]
    async fn records_are_not_configuration() {
        let Some(etcd) = EtcdServer::start().await else { return };
        contract::records_are_not_configuration(
            Arc::new(namespace(&etcd, "/records-config")),
            "core.default.apdexThreshold",
        )
        .await;
    }
}
