//! End to end with a real Nacos-protocol server (rnacos on ephemeral loopback ports, see
//! `skyconf_testkit::servers::rnacos`): a server on `NacosSource`, polled over gRPC by a
//! tonic client as an agent polls it, and by a DCS client as an OAP polls it. Covers put, update,
//! delete, a malformed document, group keys, namespace isolation, the OAP's unit-test example, a
//! Nacos restart with a change made before skyconf is back, and how fast a Nacos publish reaches
//! agents.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use skyconf_core::digest::EMPTY_DIGEST;
use skyconf_server::ServeConfig;
use skyconf_server::reload::Guard;
use skyconf_sources::nacos::NacosSource;
use skyconf_sources::{AGENT_CONFIGURATIONS_KEY, Expect, KeySet, Source};
use skyconf_testkit::PATIENCE;
use skyconf_testkit::fixtures::{OPENAPI_GROUP as OPENAPI, V5_DIGEST as GOOD_DIGEST, V5_DOCUMENT as GOOD, numbered};
use skyconf_testkit::latency::percentiles;
use skyconf_testkit::server::{Cds, Server, dcs_request, loopback};
use skyconf_testkit::servers::rnacos::Rnacos;

const GROUP: &str = "skywalking";

/// Keeps the other tests' rnacos start-ups and restarts from running during the latency
/// measurement (the reference machine has two cores). A tokio mutex: it is held across awaits.
static QUIET: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn store(nacos: &Rnacos, namespace: &str) -> NacosSource {
    NacosSource::new(nacos.settings(GROUP, namespace)).expect("valid settings")
}

fn config(keys: KeySet) -> ServeConfig {
    // These tests check the OAP's behaviour (a delete serves EMPTY at once): the fleet-reset guard,
    // which would hold it, is tested on its own.
    ServeConfig { require_initial_load: false, keys, reset_guard: Guard::OFF, ..loopback() }
}

/// A server on `nacos`'s default namespace serving `keys`, and a CDS client.
async fn serve(nacos: &Rnacos, keys: KeySet) -> (Server, Cds) {
    let running = Server::start(store(nacos, ""), config(keys)).await;
    let client = running.cds().await;
    (running, client)
}

/// A fresh rnacos (`name` for its log) holding `entries` in the default namespace, and a writer
/// to that namespace; `None` when rnacos is not installed (and not required).
async fn nacos_holding(name: &str, entries: &[(&str, &str)]) -> Option<(Rnacos, NacosSource)> {
    let nacos = Rnacos::start(name).await?;
    let writer = store(&nacos, "");
    for (key, value) in entries {
        writer.put(key, Some(value), Expect::Seen).await.unwrap();
    }
    Some((nacos, writer))
}

fn items(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

#[tokio::test]
async fn put_update_delete_and_a_malformed_document_are_served_as_the_oap_would() {
    let _quiet = QUIET.lock().await;
    let Some((nacos, writer)) = nacos_holding("e2e-changes", &[(AGENT_CONFIGURATIONS_KEY, GOOD)]).await else { return };
    let (running, client) = serve(&nacos, KeySet::oap()).await;
    assert_eq!(client.digest("svc").await.as_deref(), Some(GOOD_DIGEST), "loaded before the port opened");

    let updated = "configurations:\n  svc:\n    agent.sample_n_per_3_secs: 20\n";
    writer.put(AGENT_CONFIGURATIONS_KEY, Some(updated), Expect::Seen).await.unwrap();
    let (new, _) = client.wait_for_digest("svc", "the update", |d| d.is_some_and(|d| d != GOOD_DIGEST)).await;

    writer.put(AGENT_CONFIGURATIONS_KEY, Some("configurations:\n  svc:\n    k:\n"), Expect::Seen).await.unwrap();
    let give_up = Instant::now() + PATIENCE;
    let mut changes = running.served.subscribe();
    while running.served.last_rejection().is_none() {
        let left = give_up.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "the malformed document was never noticed");
        let _ = tokio::time::timeout(left.min(Duration::from_millis(100)), changes.changed()).await;
    }
    let error = running.served.last_rejection().unwrap().error;
    assert!(error.starts_with("3:"), "LINE:COLUMN: message: {error}");
    assert_eq!(client.digest("svc").await, new, "the last good document is still served");

    writer.put(AGENT_CONFIGURATIONS_KEY, None, Expect::Seen).await.unwrap();
    client.wait_for_digest("svc", "the EMPTY answer", |d| d == Some(EMPTY_DIGEST)).await;
    assert!(running.store.status().connected);
    running.stop().await.unwrap();
}

#[tokio::test]
async fn group_keys_reach_the_store_view_and_oaps_polling_the_dcs_service() {
    // §5.3 item 11's layout on the OAP's own group key: an index dataId listing sub-item dataIds.
    let entries = [("customerAPI-v1.yaml", "openapi: 3.0.0\n"), (OPENAPI, "customerAPI-v1.yaml\n productAPI-v1.yaml")];
    let Some((nacos, writer)) = nacos_holding("e2e-groups", &entries).await else { return };
    let (running, _) = serve(&nacos, KeySet::oap()).await;
    running
        .wait_for_store("customerAPI", |c| c.groups[OPENAPI] == items(&[("customerAPI-v1.yaml", "openapi: 3.0.0\n")]))
        .await;

    writer.put("productAPI-v1.yaml", Some("openapi: 3.0.1\n"), Expect::Seen).await.unwrap();
    let both = items(&[("customerAPI-v1.yaml", "openapi: 3.0.0\n"), ("productAPI-v1.yaml", "openapi: 3.0.1\n")]);
    running.wait_for_store("both sub-items", |c| c.groups[OPENAPI] == both).await;

    let mut dcs = running.dcs().await;
    let groups = dcs.call_group(dcs_request()).await.unwrap().into_inner();
    let group = groups.group_config_table.iter().find(|g| g.group_name == OPENAPI).expect("the group is served");
    let served: BTreeMap<_, _> = group.items.iter().map(|c| (c.name.clone(), c.value.clone())).collect();
    assert_eq!(served, both);

    writer.put("customerAPI-v1.yaml", None, Expect::Seen).await.unwrap();
    writer.put("productAPI-v1.yaml", Some("openapi: 3.1.0\n"), Expect::Seen).await.unwrap();
    running
        .wait_for_store("the delete and the update", |c| {
            c.groups[OPENAPI] == items(&[("productAPI-v1.yaml", "openapi: 3.1.0\n")])
        })
        .await;
    let after = dcs.call_group(dcs_request()).await.unwrap().into_inner();
    assert_ne!(after.uuid, groups.uuid, "a changed group has a new DCS uuid");
    running.stop().await.unwrap();
}

#[tokio::test]
async fn serves_the_oaps_unit_test_example_to_dcs_clients() {
    // §5.3 item 8: two configs in group `skywalking`, one of them a key no OAP module registers.
    let entries = [("agent-analyzer.default.slowDBAccessThreshold", "test"), ("testKey", "testVal")];
    let Some((nacos, _)) = nacos_holding("e2e-oap", &entries).await else { return };
    let (running, _) = serve(&nacos, KeySet::oap_with(["testKey".to_owned()])).await;
    let table = running.dcs().await.call(dcs_request()).await.unwrap().into_inner().config_table;
    let served: BTreeMap<_, _> = table.iter().map(|c| (c.name.as_str(), c.value.as_str())).collect();
    assert_eq!(served.get("agent-analyzer.default.slowDBAccessThreshold"), Some(&"test"));
    assert_eq!(served.get("testKey"), Some(&"testVal"));
    running.stop().await.unwrap();
}

#[tokio::test]
async fn serves_only_its_own_namespace() {
    let Some(nacos) = Rnacos::start("e2e-namespace").await else { return };
    store(&nacos, "").put(AGENT_CONFIGURATIONS_KEY, Some(GOOD), Expect::Seen).await.unwrap();
    store(&nacos, "staging")
        .put(AGENT_CONFIGURATIONS_KEY, Some("configurations:\n  svc: {k: s}\n"), Expect::Seen)
        .await
        .unwrap();
    let prod = store(&nacos, "prod");
    let running = Server::start(prod.clone(), config(KeySet::oap())).await;
    let client = running.cds().await;
    assert_eq!(client.digest("svc").await.as_deref(), Some(EMPTY_DIGEST), "nothing in prod yet");
    prod.put(AGENT_CONFIGURATIONS_KEY, Some("configurations:\n  svc: {k: p}\n"), Expect::Seen).await.unwrap();
    let (served, _) = client.wait_for_digest("svc", "prod's document", |d| d != Some(EMPTY_DIGEST)).await;
    let expected = skyconf_core::read("configurations:\n  svc: {k: p}\n").unwrap();
    assert_eq!(served.as_deref(), expected.get("svc").map(|s| s.digest().as_str()));
    running.stop().await.unwrap();
}

#[tokio::test]
async fn a_restarted_nacos_is_resumed_with_what_changed_meanwhile() {
    let _quiet = QUIET.lock().await;
    let Some((mut nacos, writer)) = nacos_holding("e2e-restart", &[(AGENT_CONFIGURATIONS_KEY, GOOD)]).await else {
        return;
    };
    let (running, client) = serve(&nacos, KeySet::oap()).await;
    assert_eq!(client.digest("svc").await.as_deref(), Some(GOOD_DIGEST));

    nacos.stop().await;
    let give_up = Instant::now() + PATIENCE;
    let mut changes = running.store.subscribe();
    while running.store.status().connected {
        let left = give_up.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "the outage was never noticed");
        let _ = tokio::time::timeout(left.min(Duration::from_millis(100)), changes.changed()).await;
    }
    assert_eq!(client.digest("svc").await.as_deref(), Some(GOOD_DIGEST), "the last good table is still served");

    nacos.restart().await;
    // Written as soon as Nacos is back, most likely before skyconf is (it backs off); the
    // restarted rnacos is empty (see `Rnacos::restart`), so this is what it holds.
    let changed = "configurations:\n  svc:\n    agent.sample_n_per_3_secs: 30\n";
    writer.put(AGENT_CONFIGURATIONS_KEY, Some(changed), Expect::Seen).await.unwrap();
    client.wait_for_digest("svc", "the change made during the outage", |d| d.is_some_and(|d| d != GOOD_DIGEST)).await;
    running.wait_for_store("the reconnection", |_| running.store.status().connected).await;
    running.stop().await.unwrap();
}

#[tokio::test]
async fn propagation_nacos_publish_reaches_agents_within_a_second() {
    let _quiet = QUIET.lock().await;
    let Some((nacos, writer)) = nacos_holding("e2e-propagation", &[(AGENT_CONFIGURATIONS_KEY, GOOD)]).await else {
        return;
    };
    let (running, client) = serve(&nacos, KeySet::oap()).await;
    let mut current = client.digest("svc").await;
    let mut delays = Vec::new();
    for n in 0..50 {
        let text = numbered(n);
        let published = Instant::now();
        writer.put(AGENT_CONFIGURATIONS_KEY, Some(&text), Expect::Seen).await.unwrap();
        let old = current.clone();
        let (digest, seen) = client.wait_for_digest("svc", "the publish", |d| d != old.as_deref()).await;
        delays.push(seen - published);
        current = digest;
    }
    let p = percentiles(&mut delays);
    eprintln!("nacos publish → served over gRPC, {} changes: {p}", delays.len());
    assert!(p.p99 <= Duration::from_secs(1), "publish → served delays: {delays:?}");
    running.stop().await.unwrap();
}
