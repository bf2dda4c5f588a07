//! The shared-records contract ([`SharedRecords`]) every store that has them meets, run by each
//! store's tests against its real server.

use std::sync::Arc;
use std::time::Duration;

use skyconf_sources::{Expect, KeySet, Lifetime, SharedRecords, Source, SourceError, Update};
use skyconf_testkit::probe::SourceProbe;
use skyconf_testkit::server::eventually_async;

/// The records of `source`, which every store but the file store has.
pub(crate) fn of<S: Source>(source: &S) -> Arc<dyn SharedRecords> {
    source.shared_records().expect("this store keeps shared records")
}

/// Put, get, list (sorted, by kind), delete; names the stores cannot hold are refused.
pub(crate) async fn basics(records: &dyn SharedRecords) {
    assert_eq!(records.get("releases", "b").await.unwrap(), None);
    assert!(records.list("releases").await.unwrap().is_empty());
    records.put("releases", "b", br#"{"n":2}"#, Lifetime::Durable).await.unwrap();
    records.put("releases", "a", br#"{"n":1}"#, Lifetime::Durable).await.unwrap();
    records.put("releases", "c", b"{}", Lifetime::Session).await.unwrap();
    records.put("fleet", "a", b"other kind", Lifetime::Durable).await.unwrap();
    assert_eq!(records.get("releases", "b").await.unwrap().as_deref(), Some(&br#"{"n":2}"#[..]));
    let listed = records.list("releases").await.unwrap();
    let names: Vec<&str> = listed.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"], "sorted by name, one kind only");
    assert_eq!(listed[0].1, br#"{"n":1}"#);
    records.put("releases", "b", b"replaced", Lifetime::Durable).await.unwrap();
    assert_eq!(records.get("releases", "b").await.unwrap().as_deref(), Some(&b"replaced"[..]));
    records.delete("releases", "b").await.unwrap();
    records.delete("releases", "b").await.unwrap();
    records.delete("releases", "c").await.unwrap();
    assert_eq!(records.get("releases", "b").await.unwrap(), None);
    assert_eq!(records.list("releases").await.unwrap().len(), 1);
    assert_eq!(records.list("fleet").await.unwrap().len(), 1);
    for (kind, name) in [("releases", "a/b"), ("Releases", "a"), ("releases", "")] {
        assert!(matches!(records.get(kind, name).await, Err(SourceError::Unsupported(_))), "{kind:?} {name:?}");
    }
    records.delete("releases", "a").await.unwrap();
    records.delete("fleet", "a").await.unwrap();
}

/// Of ten concurrent creates of one name, spread over `records` (one handle per replica), exactly
/// one reports that it created the record, and its value is the one kept.
pub(crate) async fn create_once(records: &[Arc<dyn SharedRecords>]) {
    let creates = (0..10).map(|i| {
        let records = Arc::clone(&records[i % records.len()]);
        async move { records.create("releases", "once", i.to_string().as_bytes()).await.unwrap() }
    });
    let created = futures_util::future::join_all(creates).await;
    assert_eq!(created.iter().filter(|c| **c).count(), 1, "{created:?}");
    let winner = created.iter().position(|c| *c).unwrap();
    assert_eq!(records[0].get("releases", "once").await.unwrap(), Some(winner.to_string().into_bytes()));
    assert!(!records[0].create("releases", "once", b"again").await.unwrap(), "it exists");
    records[0].delete("releases", "once").await.unwrap();
    assert!(records[0].create("releases", "once", b"anew").await.unwrap(), "deleted, it can be created again");
    records[0].delete("releases", "once").await.unwrap();
}

/// A session record written through `source` is gone, as seen by `observer`, once `source` and
/// every handle on its records are dropped; a durable one stays.
pub(crate) async fn session_records_go_with_their_source<S: Source>(source: S, observer: &dyn SharedRecords) {
    let records = of(&source);
    records.put("fleet", "leaving", b"{}", Lifetime::Session).await.unwrap();
    records.put("fleet", "staying", b"{}", Lifetime::Durable).await.unwrap();
    let names = |listed: Vec<(String, Vec<u8>)>| listed.into_iter().map(|(n, _)| n).collect::<Vec<_>>();
    assert_eq!(names(observer.list("fleet").await.unwrap()), ["leaving", "staying"]);
    drop(records);
    drop(source);
    eventually_async("the session record is gone", async || {
        names(observer.list("fleet").await.unwrap()) == ["staying"]
    })
    .await;
    observer.delete("fleet", "staying").await.unwrap();
}

/// Records never reach the source's updates nor its `load()`: a configuration write made after
/// them is the next update.
pub(crate) async fn records_are_not_configuration<S: Source>(source: Arc<S>, key: &str) {
    let records = of(&*source);
    let mut probe = SourceProbe::spawn_shared(&source, KeySet::oap());
    let before = probe.snapshot().await;
    records.put("fleet", "r1", b"{\"a\":1}", Lifetime::Session).await.unwrap();
    records.put("releases", "r1", b"{\"a\":1}", Lifetime::Durable).await.unwrap();
    assert!(records.create("releases", "r2", b"{}").await.unwrap());
    records.delete("releases", "r2").await.unwrap();
    source.put(key, Some("default: 1"), Expect::Seen).await.unwrap();
    assert_eq!(probe.single().await, (key.to_owned(), Some("default: 1".to_owned())));
    assert!(probe.next_within(Duration::from_millis(200)).await.is_none(), "nothing else was reported");
    let loaded = source.load(&KeySet::oap()).await.unwrap();
    let mut expected = before;
    expected.singles.insert(key.to_owned(), "default: 1".to_owned());
    assert_eq!(
        (loaded.singles, loaded.groups),
        (expected.singles, expected.groups),
        "load sees the configuration only"
    );
    if let Some(Update::Failed(error)) = probe.try_next() {
        panic!("{error}");
    }
    source.put(key, None, Expect::Seen).await.unwrap();
    records.delete("fleet", "r1").await.unwrap();
    records.delete("releases", "r1").await.unwrap();
    probe.stop().await;
}

#[test]
fn the_file_store_and_the_none_store_keep_no_shared_records() {
    let file = skyconf_sources::file::FileSource::new("/nonexistent/agent-configurations.yaml");
    assert!(file.shared_records().is_none(), "the file store serves a single replica");
    assert!(skyconf_sources::NoStore.shared_records().is_none());
    let boxed: Box<dyn skyconf_sources::DynSource> = Box::new(file);
    assert!(boxed.shared_records().is_none(), "forwarded through a boxed source");
}

#[test]
fn a_boxed_source_forwards_its_records() {
    let etcd = skyconf_sources::etcd::EtcdSource::new(skyconf_sources::etcd::EtcdSettings::default()).unwrap();
    let boxed: Box<dyn skyconf_sources::DynSource> = Box::new(etcd);
    let records = boxed.shared_records().expect("etcd keeps records");
    assert!(records.describe().contains("/skywalking/skyconf/"), "{}", records.describe());
}
