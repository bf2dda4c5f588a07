//! The poll loop under paused tokio time, against an in-memory CDS server: when it polls, what it
//! sends, what the watchers see, and how it survives a failing server.

use std::sync::Arc;
use std::time::Duration;

use crate::common::{FakeCds, Log, Recorder, after_polls, raw_command, seen, without_uuids};
use skyconf_agent::watchers::{
    IGNORE_SUFFIX, IgnorePath, SAMPLE_N_PER_3_SECS, SPAN_LIMIT_PER_SEGMENT, SampleNPer3Secs, SpanLimit,
    TRACE_IGNORE_PATH,
};
use skyconf_agent::{
    Agent, AgentHandle, AgentOptions, AgentStatus, CommandOutcome, DuplicateKey, EventType, PollError, Registry,
    Watcher as _,
};
use tokio::sync::watch;
use tokio::time::Instant;

use EventType::{Delete, Modify};

const SVC: &str = "svc";
const INTERVAL: Duration = Duration::from_secs(20);

struct Setup {
    fake: FakeCds,
    log: Log,
    registry: Registry,
    sample: Arc<Recorder>,
    span: Arc<Recorder>,
    sampler: Arc<SampleNPer3Secs>,
    limit: Arc<SpanLimit>,
}

/// A fake server serving `svc` two settings, and watchers for three keys: two recorders holding
/// no value, and the built-in typed watchers (which hold their defaults).
fn setup() -> Setup {
    let fake = FakeCds::default();
    fake.set(SVC, &[(SAMPLE_N_PER_3_SECS, "10"), (SPAN_LIMIT_PER_SEGMENT, "400"), ("agent.unwatched", "x")]);
    let log = Log::default();
    let registry = Registry::new();
    let sample = Recorder::new("sample", SAMPLE_N_PER_3_SECS, &log);
    let span = Recorder::new("span", SPAN_LIMIT_PER_SEGMENT, &log);
    let sampler = Arc::new(SampleNPer3Secs::default());
    let limit = Arc::new(SpanLimit::default());
    registry.register(sample.clone());
    registry.register(span.clone());
    registry.register(Recorder::new("suffix", IGNORE_SUFFIX, &log));
    registry.register(sampler.clone());
    registry.register(limit.clone());
    Setup { fake, log, registry, sample, span, sampler, limit }
}

fn spawn(s: &Setup) -> AgentHandle {
    Agent::new(AgentOptions::new(SVC), s.registry.clone(), s.fake.clone()).spawn()
}

/// An agent spawned on a fresh [`setup`], once it has polled `polls` times: the setup (its log
/// emptied), the handle, the status receiver and the status after those polls.
async fn spawned_after(polls: u64) -> (Setup, AgentHandle, watch::Receiver<AgentStatus>, AgentStatus) {
    let s = setup();
    let handle = spawn(&s);
    let mut status = handle.status();
    let after = after_polls(&mut status, polls).await;
    s.log.take();
    (s, handle, status, after)
}

#[tokio::test(start_paused = true)]
async fn first_sync_at_start_then_nothing_while_unchanged() {
    let s = setup();
    let t0 = Instant::now();
    let handle = spawn(&s);
    let mut status = handle.status();

    let first = after_polls(&mut status, 1).await;
    assert_eq!(Instant::now() - t0, Duration::ZERO, "the first poll is at start");
    let events = s.log.take();
    assert_eq!(
        without_uuids(events.clone()),
        [
            seen("sample", SAMPLE_N_PER_3_SECS, Modify, Some("10")),
            seen("span", SPAN_LIMIT_PER_SEGMENT, Modify, Some("400")),
        ]
    );
    let digest = s.fake.digest(SVC);
    assert!(events.iter().all(|e| e.uuid.as_deref() == Some(&digest)));
    assert_eq!(first.uuid.as_deref(), Some(digest.as_str()));
    assert_eq!(s.sampler.rate(), 10);
    assert_eq!(s.limit.limit(), 400);
    let report = first.last.unwrap().unwrap();
    assert_eq!(report.events(), 4);

    for n in 2..=4 {
        let status = after_polls(&mut status, n).await;
        assert_eq!(Instant::now() - t0, INTERVAL * (n as u32 - 1));
        assert!(status.last.unwrap().unwrap().is_no_change());
    }
    assert!(s.log.take().is_empty());
    let requests = s.fake.requests();
    assert_eq!(requests[0].1.uuid, "", "no uuid on the first poll");
    assert!(requests[1..].iter().all(|(_, r)| r.uuid == digest && r.service == SVC));
    handle.stop().await;
}

#[tokio::test(start_paused = true)]
async fn modify_then_delete_by_omission_then_unknown_service() {
    let (s, handle, mut status, _) = spawned_after(1).await;

    s.fake.set(SVC, &[(SAMPLE_N_PER_3_SECS, "10"), (SPAN_LIMIT_PER_SEGMENT, "500")]);
    after_polls(&mut status, 2).await;
    assert_eq!(without_uuids(s.log.take()), [seen("span", SPAN_LIMIT_PER_SEGMENT, Modify, Some("500"))]);
    assert_eq!(s.limit.limit(), 500);

    s.fake.set(SVC, &[(SAMPLE_N_PER_3_SECS, "10")]);
    after_polls(&mut status, 3).await;
    assert_eq!(without_uuids(s.log.take()), [seen("span", SPAN_LIMIT_PER_SEGMENT, Delete, None)]);
    assert_eq!(s.limit.limit(), 300, "back to the local default");
    assert_eq!(s.span.current(), None);

    // Unknown service: EMPTY; every watcher holding a value is reset.
    s.fake.remove(SVC);
    let after = after_polls(&mut status, 4).await;
    assert_eq!(without_uuids(s.log.take()), [seen("sample", SAMPLE_N_PER_3_SECS, Delete, None)]);
    assert_eq!(s.sampler.rate(), -1);
    assert_eq!(after.uuid.as_deref(), Some(skyconf_core::Digest::empty().as_str()));
    // And EMPTY is itself a digest: the next poll is "no change".
    let next = after_polls(&mut status, 5).await;
    assert!(next.last.unwrap().unwrap().is_no_change());
    handle.stop().await;
}

#[tokio::test(start_paused = true)]
async fn server_down_then_up_keeps_values_and_backs_off_with_jitter() {
    let (s, handle, mut status, first) = spawned_after(1).await;
    let digest = first.uuid;

    s.fake.set_down(true);
    let mut last = Instant::now();
    // Let the poll at 20 s fail, then watch the back-off grow: ≤ 1, ≤ 2, ≤ 4 intervals.
    let failed = after_polls(&mut status, 2).await;
    assert_eq!(failed.failures_in_a_row, 1);
    assert!(matches!(failed.last, Some(Err(PollError::Status(ref st))) if st.code() == tonic::Code::Unavailable));
    last += INTERVAL;
    for (n, base) in [(3, INTERVAL), (4, INTERVAL * 2), (5, INTERVAL * 4)] {
        let st = after_polls(&mut status, n).await;
        let waited = Instant::now() - last;
        assert!(waited >= base / 2 && waited <= base, "poll {n}: {waited:?}");
        assert_eq!(st.uuid, digest, "the uuid is kept");
        last = Instant::now();
    }
    assert!(s.log.take().is_empty(), "no events while the server is down");
    assert_eq!(s.sample.current().as_deref(), Some("10"));
    assert_eq!(s.limit.limit(), 400);

    s.fake.set_down(false);
    let back = after_polls(&mut status, 6).await;
    assert_eq!(back.failures_in_a_row, 0);
    assert!(back.last.unwrap().unwrap().is_no_change());
    assert!(s.log.take().is_empty());
    // Back on the normal interval.
    let t = Instant::now();
    after_polls(&mut status, 7).await;
    assert_eq!(Instant::now() - t, INTERVAL);
    handle.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_call_that_never_answers_ends_at_the_deadline() {
    let (s, handle, mut status, _) = spawned_after(1).await;
    s.fake.set_hang(true);
    let t = Instant::now();
    let st = after_polls(&mut status, 2).await;
    // Sent at 20 s, given up 30 s later.
    assert_eq!(Instant::now() - t, INTERVAL + Duration::from_secs(30));
    assert!(matches!(st.last, Some(Err(PollError::Timeout(_)))));
    assert_eq!(st.last.unwrap().unwrap_err().code(), tonic::Code::DeadlineExceeded);
    assert_eq!(s.limit.limit(), 400);
    assert!(s.log.take().is_empty());
    handle.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_late_watcher_gets_the_value_through_the_uuid_reset() {
    let (s, handle, mut status, _) = spawned_after(2).await;

    let late = Arc::new(IgnorePath::default());
    let late_sample = Recorder::new("late", SAMPLE_N_PER_3_SECS, &s.log);
    s.registry.register(late.clone());
    s.registry.register(late_sample.clone());
    after_polls(&mut status, 3).await;
    let requests = s.fake.requests();
    assert_eq!(requests[2].1.uuid, "", "the uuid is forgotten when the watchers change");
    // The late path watcher holds its default "", which is blank: no DELETE, no event.
    assert_eq!(late.value().as_deref(), Some(""));
    assert_eq!(without_uuids(s.log.take()), [seen("late", SAMPLE_N_PER_3_SECS, Modify, Some("10"))]);
    // And the server's value reaches it on a key it did not hold before.
    s.fake.set(SVC, &[(SAMPLE_N_PER_3_SECS, "10"), (SPAN_LIMIT_PER_SEGMENT, "400"), (TRACE_IGNORE_PATH, "/eureka/**")]);
    after_polls(&mut status, 4).await;
    assert!(late.is_ignored("/eureka/apps"));
    handle.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_watcher_error_keeps_the_uuid_and_the_next_poll_retries() {
    let (s, handle, mut status, first) = spawned_after(1).await;
    let v1 = first.uuid;

    s.span.fail_next();
    s.fake.set(SVC, &[(SAMPLE_N_PER_3_SECS, "20"), (SPAN_LIMIT_PER_SEGMENT, "500")]);
    let failed = after_polls(&mut status, 2).await;
    assert!(matches!(
        &failed.last.unwrap().unwrap().outcomes[..],
        [CommandOutcome::WatcherFailed { key, .. }] if key == SPAN_LIMIT_PER_SEGMENT
    ));
    assert_eq!(failed.uuid, v1, "the uuid is not stored");
    // The sample watcher (registered first) applied; the span watchers did not.
    assert_eq!(without_uuids(s.log.take()), [seen("sample", SAMPLE_N_PER_3_SECS, Modify, Some("20"))]);
    assert_eq!(s.limit.limit(), 400);

    let retried = after_polls(&mut status, 3).await;
    assert_eq!(s.fake.requests()[2].1.uuid, v1.clone().unwrap());
    assert_eq!(without_uuids(s.log.take()), [seen("span", SPAN_LIMIT_PER_SEGMENT, Modify, Some("500"))]);
    assert_eq!(s.limit.limit(), 500);
    assert_eq!(retried.uuid.as_deref(), Some(s.fake.digest(SVC).as_str()));
    handle.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_command_that_repeats_a_key_is_rejected_whole() {
    let (s, handle, mut status, first) = spawned_after(1).await;
    let v1 = first.uuid;

    s.fake.script(raw_command(&[
        ("SerialNumber", "s-dup"),
        ("UUID", "u-dup"),
        (SAMPLE_N_PER_3_SECS, "30"),
        (SPAN_LIMIT_PER_SEGMENT, "600"),
        (SAMPLE_N_PER_3_SECS, "30"),
    ]));
    let rejected = after_polls(&mut status, 2).await;
    assert_eq!(
        rejected.last.unwrap().unwrap().outcomes,
        [CommandOutcome::Rejected(DuplicateKey(SAMPLE_N_PER_3_SECS.to_owned()))]
    );
    assert!(s.log.take().is_empty(), "nothing applied");
    assert_eq!(s.limit.limit(), 400);
    assert_eq!(rejected.uuid, v1);
    handle.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_replayed_serial_number_is_ignored_among_the_last_64() {
    let (s, handle, mut status, _) = spawned_after(1).await;

    let command = |serial: &str, uuid: &str, limit: &str| {
        raw_command(&[
            ("SerialNumber", serial),
            ("UUID", uuid),
            (SAMPLE_N_PER_3_SECS, "10"),
            (SPAN_LIMIT_PER_SEGMENT, limit),
        ])
    };
    s.fake.script(command("s-0", "u-0", "401"));
    s.fake.script(command("s-0", "u-1", "402"));
    after_polls(&mut status, 3).await;
    assert_eq!(without_uuids(s.log.take()), [seen("span", SPAN_LIMIT_PER_SEGMENT, Modify, Some("401"))]);
    let replayed = status.borrow().clone();
    assert_eq!(replayed.last.unwrap().unwrap().outcomes, [CommandOutcome::Replayed { serial: "s-0".to_owned() }]);
    assert_eq!(replayed.uuid.as_deref(), Some("u-0"));

    // 64 other serials later, s-0 has been forgotten.
    for i in 1..=64 {
        s.fake.script(command(&format!("s-{i}"), &format!("u-{i}"), "401"));
    }
    s.fake.script(command("s-0", "u-again", "403"));
    after_polls(&mut status, 3 + 65).await;
    assert_eq!(without_uuids(s.log.take()), [seen("span", SPAN_LIMIT_PER_SEGMENT, Modify, Some("403"))]);
    assert_eq!(s.limit.limit(), 403);
    handle.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_command_with_the_held_uuid_is_not_applied_again() {
    let (s, handle, mut status, first) = spawned_after(1).await;
    let held = first.uuid.unwrap();
    // A server that always sends the command (the OAP's disableMessageDigest).
    s.fake.script(raw_command(&[("SerialNumber", "fresh"), ("UUID", &held), (SPAN_LIMIT_PER_SEGMENT, "999")]));
    let st = after_polls(&mut status, 2).await;
    assert_eq!(st.last.unwrap().unwrap().outcomes, [CommandOutcome::SameUuid]);
    assert!(s.log.take().is_empty());
    handle.stop().await;
}

#[tokio::test(start_paused = true)]
async fn stop_ends_the_loop_between_polls() {
    let s = setup();
    let handle = spawn(&s);
    let mut status = handle.status();
    after_polls(&mut status, 1).await;
    handle.stop().await;
    assert_eq!(s.fake.requests().len(), 1);
}
