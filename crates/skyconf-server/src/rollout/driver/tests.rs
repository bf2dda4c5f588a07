//! Tests of the driver's record keeping and of which services a change rolls out.

use super::*;
use crate::rollout::plan::{Advance, Gates, WaveSpec};

#[test]
fn a_global_change_rolls_out_the_listed_services_it_changes_and_not_the_others() {
    let before = skyconf_core::read("global-configurations: {g: 1}\nconfigurations: {a: {k: 1}, b: {g: 5}}\n").unwrap();
    let after = skyconf_core::read("global-configurations: {g: 2}\nconfigurations: {a: {k: 1}, b: {g: 5}}\n").unwrap();
    assert_eq!(changed_services(&before, &after), ["a"]);
}

fn ended(id: &str, created_ms: u64, phase: Phase) -> Rollout {
    let mut rollout = Rollout {
        id: id.to_owned(),
        document: String::new(),
        base_release: 1,
        services: vec!["svc".into()],
        opamp_groups: Vec::new(),
        changes: Vec::new(),
        waves: vec![WaveSpec { share: Some("100%".into()), instances: None }],
        gates: Gates::default(),
        advance: Advance::Auto,
        ungated: false,
        author: None,
        message: None,
        created_ms,
        phase,
        wave_index: 0,
        wave_started_ms: created_ms,
        applied_ms: None,
        named: Default::default(),
        watched: Default::default(),
        release: None,
        events: Vec::new(),
        driver: "a".into(),
        driver_seen_ms: created_ms,
    };
    rollout.event(created_ms + 5, "reverted", format!("{id} ended"));
    rollout
}

#[tokio::test]
async fn a_data_directory_keeps_the_newest_ended_rollouts_and_reads_them_back() {
    let dir = tempfile::tempdir().unwrap();
    let keeper = Rollouts::keeper(None, Some(dir.path()));
    // Older ids are shorter numbers: the history sorts them by time, not as text.
    let ids: Vec<String> = (0..HISTORY_KEPT + 3).map(|i| format!("r{}", 900 + i * 10)).collect();
    for (i, id) in ids.iter().enumerate() {
        keeper.save(&ended(id, 900 + i as u64 * 10, Phase::Reverted)).await.unwrap();
    }
    // An active one is the current record only.
    keeper.save(&ended("r99999", 99_999, Phase::Running)).await.unwrap();

    let again = Rollouts::keeper(None, Some(dir.path()));
    assert_eq!(again.load().await.unwrap().unwrap().id, "r99999");
    let kept = again.ended_names().await.unwrap();
    assert_eq!(kept, ids[3..], "the oldest beyond {HISTORY_KEPT} are deleted");
    let history = again.history().await.unwrap();
    assert_eq!(history.len(), HISTORY_SHOWN);
    assert_eq!(history[0].id, *ids.last().unwrap(), "newest first");
    assert_eq!(
        (history[0].state.as_str(), history[0].outcome.clone()),
        ("reverted", format!("{} ended", history[0].id))
    );
    assert_eq!(history[0].ended_ms, history[0].created_ms + 5);
}

#[tokio::test]
async fn a_record_that_does_not_read_leaves_the_rest_of_the_history() {
    let dir = tempfile::tempdir().unwrap();
    let keeper = Rollouts::keeper(None, Some(dir.path()));
    keeper.save(&ended("r1000", 1000, Phase::Aborted)).await.unwrap();
    std::fs::write(dir.path().join(HISTORY_DIR).join("r2000.json"), b"{ torn").unwrap();
    let history = keeper.history().await.unwrap();
    assert_eq!(history.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), ["r1000"]);
    assert_eq!(history[0].state, "aborted");
}
