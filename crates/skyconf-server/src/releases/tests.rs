//! The release log's tests: restarts, ids, durability, memory, import.

use std::time::Duration;

use super::*;

fn table(text: &str) -> AgentConfigurations {
    skyconf_core::read(text).unwrap()
}

const V1: &str = "configurations:\n  a: {k: 1, j: x}\n  b: {k: 2}\n";
const V2: &str = "configurations:\n  a: {k: 3}\n  c: {k: 4}\n";

#[test]
fn releases_survive_a_restart_and_old_ones_are_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let log = ReleaseLog::open(dir.path(), 2).unwrap();
    log.record(&AgentConfigurations::default(), &table(V1), Some(V1), 1, None, "file x");
    let ann = Attribution { author: Some("ann".into()), origin: "api".into(), ..Default::default() };
    log.record(&table(V1), &table(V2), Some(V2), 2, None, ann);
    log.record(&table(V2), &AgentConfigurations::default(), None, 3, None, "file x");
    assert_eq!(log.list().iter().map(|r| r.meta.id).collect::<Vec<_>>(), [3, 2]);
    log.flush();

    let reopened = ReleaseLog::open(dir.path(), 2).unwrap();
    let two = reopened.get(2).unwrap();
    assert_eq!((two.meta.author.as_deref(), two.meta.origin.as_str()), (Some("ann"), "api"));
    assert_eq!(reopened.document(2).unwrap(), Some(Some(V2.to_owned())));
    assert_eq!(reopened.document(3).unwrap(), Some(None), "a delete has no text");
    assert_eq!(reopened.document(1).unwrap(), None, "past retention");
    assert_eq!(std::fs::read_dir(dir.path().join("releases")).unwrap().count(), 2);
    assert_eq!(reopened.previous(3).unwrap().meta.id, 2);
    assert_eq!(reopened.last_change("c").unwrap().0, 3);
    assert_eq!(reopened.find_after(1, Some(&document_hash(V2))).unwrap().meta.id, 2);
    assert!(reopened.find_after(2, Some(&document_hash(V2))).is_none());

    reopened.record(&AgentConfigurations::default(), &table(V1), Some(V1), 1, None, "file x");
    let id = reopened.latest().unwrap().meta.id;
    assert!(id > 3, "ids keep increasing across restarts (with gaps up to RESERVE), got {id}");
    reopened.record_start(&table(V1), Some(V1), 1, None, "file x");
    assert_eq!(reopened.latest().unwrap().meta.id, id, "an unchanged start records nothing");
}

#[test]
fn an_unreadable_file_is_quarantined_and_its_id_never_reissued() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("releases")).unwrap();
    std::fs::write(dir.path().join("releases/00000000000000000009.json"), "{").unwrap();
    let log = ReleaseLog::open(dir.path(), 10).unwrap();
    assert!(log.list().is_empty());
    assert!(dir.path().join("releases/00000000000000000009.json.corrupt").exists(), "moved aside");
    let release = log.record(&AgentConfigurations::default(), &table(V1), Some(V1), 1, None, "file x");
    assert!(release.meta.id > 9, "above the corrupt file's id, got {}", release.meta.id);
}

/// F11: a release whose id was corrupted to u64::MAX made the next id wrap to 0, then 1, and
/// overwrite release 1's file.
#[test]
fn a_corrupt_id_is_quarantined_and_ids_never_wrap() {
    let dir = tempfile::tempdir().unwrap();
    let log = ReleaseLog::open(dir.path(), 10).unwrap();
    for version in 1..=3 {
        log.record(&AgentConfigurations::default(), &table(V1), Some(V1), version, None, "file x");
    }
    log.flush();
    drop(log);
    let newest = dir.path().join("releases/00000000000000000003.json");
    let text = std::fs::read_to_string(&newest).unwrap().replace("\"id\": 3", "\"id\": 18446744073709551615");
    std::fs::write(&newest, text).unwrap();
    // A stray file whose name claims a huge id is not trusted for allocation either.
    std::fs::write(dir.path().join("releases/99999999999999999999.json"), "{}").unwrap();
    let one = std::fs::read_to_string(dir.path().join("releases/00000000000000000001.json")).unwrap();

    let log = ReleaseLog::open(dir.path(), 10).unwrap();
    assert_eq!(log.list().iter().map(|r| r.meta.id).collect::<Vec<_>>(), [2, 1]);
    assert!(dir.path().join("releases/00000000000000000003.json.corrupt").exists());
    assert!(dir.path().join("releases/99999999999999999999.json.corrupt").exists());
    let next = log.record(&AgentConfigurations::default(), &table(V2), Some(V2), 1, None, "file x");
    assert!(next.meta.id > 3, "above every id in a file name, the corrupt one's included: {}", next.meta.id);
    log.flush();
    assert_eq!(std::fs::read_to_string(dir.path().join("releases/00000000000000000001.json")).unwrap(), one);
    let current = log.served_as(1).unwrap();
    assert_eq!(log.document(current).unwrap(), Some(Some(V2.to_owned())));
}

/// F10: a release file that cannot be written is reported, and its id is never issued again,
/// not even after a restart.
#[tokio::test]
async fn a_release_that_cannot_be_written_is_reported_and_its_id_never_reissued() {
    let dir = tempfile::tempdir().unwrap();
    // A file where the releases directory should be: every release file write fails (even as
    // root, where a read-only mode would not).
    std::fs::write(dir.path().join("releases"), "not a directory").unwrap();
    let log = ReleaseLog::open(dir.path(), 10).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut ids = Vec::new();
    for version in 1..=3 {
        let text = format!("configurations:\n  a: {{k: {version}}}\n");
        let release = log.record(&AgentConfigurations::default(), &table(&text), Some(&text), version, None, "file x");
        assert!(
            matches!(log.durable(release.meta.id, deadline).await, Durability::Failed(why) if why.contains("file could not be written"))
        );
        assert_eq!(log.document(release.meta.id).unwrap(), Some(Some(text)), "kept in memory");
        ids.push(release.meta.id);
    }
    assert_eq!(log.unsaved(), 3);
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    log.flush();
    drop(log);

    std::fs::remove_file(dir.path().join("releases")).unwrap();
    let log = ReleaseLog::open(dir.path(), 10).unwrap();
    let release = log.record(&AgentConfigurations::default(), &table(V1), Some(V1), 1, None, "file x");
    assert!(release.meta.id > ids[2], "{} reissued after {ids:?}", release.meta.id);
    assert_eq!(log.durable(release.meta.id, deadline).await, Durability::Durable);
    assert_eq!(log.unsaved(), 0);
}

/// N11: where the server keeps a last good copy, a release is durable once its file is on
/// disk and a copy that holds its document (or a newer one) is too; a copy that cannot be
/// written fails it, with why, until a newer copy is written.
#[test]
fn with_a_last_good_copy_a_release_is_durable_once_a_copy_holds_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = ReleaseLog::open(dir.path(), 10).unwrap();
    log.keep_last_good();
    let one = log.record(&AgentConfigurations::default(), &table(V1), Some(V1), 1, None, "file x");
    log.flush();
    assert_eq!(log.durability(one.meta.id), Durability::Pending, "its file is on disk, no copy yet");
    log.last_good_written(one.meta.id, Ok(()));
    assert_eq!(log.durability(one.meta.id), Durability::Durable);
    let two = log.record(&table(V1), &table(V2), Some(V2), 2, None, "file x");
    log.flush();
    log.last_good_written(two.meta.id, Err("cannot write last-good.json: disk full".into()));
    assert_eq!(log.durability(two.meta.id), Durability::Failed("cannot write last-good.json: disk full".into()));
    assert_eq!(log.durability(one.meta.id), Durability::Durable);
    let three = log.record(&table(V2), &table(V1), Some(V1), 3, None, "file x");
    log.flush();
    assert_eq!(log.durability(three.meta.id), Durability::Pending, "an older failure is not this release's");
    log.last_good_written(three.meta.id, Ok(()));
    assert_eq!(
        (log.durability(two.meta.id), log.durability(three.meta.id)),
        (Durability::Durable, Durability::Durable)
    );
}

/// F7: with a data directory, memory keeps summaries only; the full release (digests and
/// key-level changes) comes from its file.
#[test]
fn with_a_data_dir_memory_keeps_summaries_and_details_come_from_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let log = ReleaseLog::open(dir.path(), 10).unwrap();
    let many: String = (0..200).map(|i| format!("  s{i}: {{k: v}}\n")).collect();
    let big = format!("configurations:\n{many}");
    let release = log.record(&AgentConfigurations::default(), &table(&big), Some(&big), 1, None, "file x");
    assert_eq!((release.services, release.changed, release.changes.len()), (200, 200, MAX_SUMMARY_CHANGES));
    log.flush();
    assert!(log.lock().documents.is_empty(), "nothing but the summary stays in memory");
    let (full, document) = log.full(release.meta.id).unwrap().unwrap();
    assert_eq!((full.digests.len(), full.changes.len(), document.as_deref()), (200, 200, Some(big.as_str())));
    assert_eq!(log.last_change("s7"), Some((release.meta.id, release.meta.at_ms)));
    let (page, total) = log.page(None, 5);
    assert_eq!((page.len(), total), (1, 1));
}

#[test]
fn in_memory_logs_keep_documents() {
    let log = ReleaseLog::in_memory(10);
    log.record(&AgentConfigurations::default(), &table(V1), Some(V1), 1, None, "mem");
    assert_eq!(log.document(1).unwrap(), Some(Some(V1.to_owned())));
    assert_eq!(log.table_of(1).unwrap(), table(V1));
}

/// Without a data directory, a history of near-identical large documents costs about one
/// text: the texts share their chunks and the digests are read again when asked for.
#[test]
fn in_memory_releases_share_their_texts_and_give_back_the_same_digests() {
    let document = |edit: usize| {
        let services: String =
            (0..2_000).map(|i| format!("  s{i}:\n    k: {}\n", if i == edit { edit + 7 } else { 1 })).collect();
        format!("configurations:\n{services}")
    };
    let log = ReleaseLog::in_memory(100);
    let mut previous = AgentConfigurations::default();
    let mut recorded = Vec::new();
    for edit in 0..50 {
        let text = document(edit * 37);
        let next = table(&text);
        let summary = log.record(&previous, &next, Some(&text), edit as u64 + 1, None, "mem");
        recorded.push((summary.meta.id, text, digests(&next)));
        previous = next;
    }
    for (id, text, digests) in &recorded {
        let (full, document) = log.full(*id).unwrap().unwrap();
        assert_eq!(document.as_ref(), Some(text));
        assert_eq!(&full.digests, digests, "release {id}'s digests, read again from its text");
        assert_eq!(log.document(*id).unwrap(), Some(Some(text.clone())));
    }
    // Every distinct chunk counted once: one text plus about a chunk per edit (whole texts
    // would be 50 of them).
    let state = log.lock();
    let mut seen = std::collections::HashSet::new();
    let held: usize = state
        .documents
        .values()
        .flat_map(|kept| kept.document.iter().flat_map(ChunkedText::chunks))
        .filter(|chunk| seen.insert(Arc::as_ptr(chunk) as *const u8 as usize))
        .map(|chunk| chunk.len())
        .sum();
    let one = recorded[0].1.len();
    assert!(held < one + 50 * 16 * 1024, "50 texts of {one} bytes hold {held} bytes");
    assert!(state.documents.values().all(|kept| kept.release.digests.is_empty()), "no digests kept");
}

#[test]
fn a_shared_release_missed_here_is_imported_in_its_place_on_disk_too() {
    let dir = tempfile::tempdir().unwrap();
    let log = ReleaseLog::open(dir.path(), 50).unwrap();
    let v3 = "configurations:\n  a: {k: 3}\n";
    log.record(&AgentConfigurations::default(), &table(V1), Some(V1), 1, Some(10), "etcd x");
    log.record(&table(V1), &table(V2), Some(V2), 2, Some(30), "etcd x");
    assert_eq!(log.get(30).unwrap().changed, 3, "a, b and c changed from V1 to V2");
    let shared = |id, document: &str| SharedRelease {
        id,
        at_ms: 7,
        author: Some("alice".into()),
        message: Some("missed".into()),
        origin: "api".into(),
        rollback_of: None,
        document: Some(document.into()),
    };
    assert!(log.import(&shared(20, v3)).unwrap(), "between two kept releases");
    assert!(!log.import(&shared(20, v3)).unwrap(), "once");
    assert!(!log.import(&shared(5, v3)).unwrap(), "older than every kept release: retention dropped it");
    assert_eq!(log.list().iter().map(|r| r.meta.id).collect::<Vec<_>>(), [30, 20, 10]);
    let missed = log.get(20).unwrap();
    assert_eq!((missed.meta.author.as_deref(), missed.meta.at_ms, missed.changed), (Some("alice"), 7, 2), "a and b");
    assert_eq!(log.get(30).unwrap().changed, 1, "from V3 to V2 only c is new (a's digest is V3's)");
    assert_eq!(log.last_change("b"), Some((20, 7)), "b last changed (went away) in the missed release");
    log.flush();
    let reopened = ReleaseLog::open(dir.path(), 50).unwrap();
    assert_eq!(reopened.list().iter().map(|r| r.meta.id).collect::<Vec<_>>(), [30, 20, 10]);
    assert_eq!(reopened.get(30).unwrap().changed, 1, "the next release's file was rewritten");
    assert!(log.amend(30, &shared(30, V2)));
    log.flush();
    assert_eq!(ReleaseLog::open(dir.path(), 50).unwrap().get(30).unwrap().meta.author.as_deref(), Some("alice"));
}
