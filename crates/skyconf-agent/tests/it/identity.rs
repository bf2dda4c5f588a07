//! Instance identity under paused tokio time, against the in-memory server: a named agent
//! reports its properties before its first poll and keeps alive every interval on the same
//! transport; an anonymous one sends nothing; failing management calls never stop the polls.

use std::time::Duration;

use crate::common::{FakeCds, Managed, ManagementMessage, after_polls};
use skyconf_agent::{Agent, AgentHandle, AgentOptions, AgentStatus, Registry};
use tokio::sync::watch;
use tokio::time::Instant;

const SVC: &str = "svc";

fn named() -> AgentOptions {
    AgentOptions::new(SVC)
        .interval(Duration::from_secs(20))
        .keep_alive_interval(Duration::from_secs(30))
        .instance("checkout-1")
        .property("zone", "eu-1")
        .property("ipv4", "10.0.0.1")
        .property("ipv4", "10.0.0.2")
}

/// The agent of `options` started on `fake`: the instant it started, its handle and its status.
fn start(options: AgentOptions, fake: &FakeCds) -> (Instant, AgentHandle, watch::Receiver<AgentStatus>) {
    let t0 = Instant::now();
    let handle = Agent::new(options, Registry::new(), fake.clone()).spawn();
    let status = handle.status();
    (t0, handle, status)
}

/// The calls as (seconds since `t0`, polls before, which).
fn calls(managed: &[Managed], t0: Instant) -> Vec<(u64, usize, &'static str)> {
    managed
        .iter()
        .map(|m| {
            let kind = match m.call {
                ManagementMessage::Report(_) => "report",
                ManagementMessage::KeepAlive(_) => "keepAlive",
            };
            ((m.at - t0).as_secs(), m.after_polls, kind)
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_named_agent_reports_before_its_first_poll_then_keeps_alive_every_interval() {
    let fake = FakeCds::default();
    let (t0, handle, mut status) = start(named(), &fake);
    after_polls(&mut status, 1).await;
    let ManagementMessage::Report(report) = &fake.management()[0].call else { panic!("a report first") };
    assert_eq!((report.service.as_str(), report.service_instance.as_str()), (SVC, "checkout-1"));
    let properties: Vec<(&str, &str)> = report.properties.iter().map(|p| (p.key.as_str(), p.value.as_str())).collect();
    assert_eq!(properties, [("zone", "eu-1"), ("ipv4", "10.0.0.1"), ("ipv4", "10.0.0.2")], "in order, repeats kept");

    // Polls at 0, 20, 40, 60 s; keep-alives at 30 s (between polls) and 60 s (before that poll).
    let last = after_polls(&mut status, 4).await;
    assert_eq!(Instant::now() - t0, Duration::from_secs(60));
    assert_eq!(calls(&fake.management(), t0), [(0, 0, "report"), (30, 2, "keepAlive"), (60, 3, "keepAlive")]);
    let ManagementMessage::KeepAlive(ping) = &fake.management()[1].call else { panic!("a keepAlive") };
    assert_eq!((ping.service.as_str(), ping.service_instance.as_str()), (SVC, "checkout-1"));
    assert_eq!(last.failures_in_a_row, 0);
    handle.stop().await;
}

/// As the Java agent's, the keep-alives keep their own schedule whatever the polls do: here every
/// poll is held 29 s. A keepAlive that waited behind a held poll would go out about every 56 s
/// instead of 30 s, and with an `--agent-expiry` under a minute a live agent would lose its
/// identity.
#[tokio::test(start_paused = true)]
async fn keep_alives_keep_their_schedule_while_polls_are_held() {
    let fake = FakeCds::default();
    fake.set_hold(Some(Duration::from_secs(29)));
    let (t0, handle, mut status) = start(named(), &fake);
    after_polls(&mut status, 5).await;
    assert_eq!(Instant::now() - t0, Duration::from_secs(145), "held polls, one after the other");
    let managed = calls(&fake.management(), t0);
    let keep_alives: Vec<u64> =
        managed.iter().filter(|(_, _, kind)| *kind == "keepAlive").map(|(at, ..)| *at).collect();
    assert_eq!(keep_alives, [30, 60, 90, 120], "{managed:?}");
    assert_eq!(managed[0], (0, 0, "report"), "the report still comes before the first poll");
    handle.stop().await;
}

#[tokio::test(start_paused = true)]
async fn after_ten_keep_alives_the_properties_are_reported_again() {
    let fake = FakeCds::default();
    let options = named().interval(Duration::from_secs(30));
    let (t0, handle, mut status) = start(options, &fake);
    after_polls(&mut status, 12).await;
    let kinds: Vec<&str> = calls(&fake.management(), t0).into_iter().map(|(_, _, kind)| kind).collect();
    let mut expected = vec!["report"];
    expected.extend(["keepAlive"; 10]);
    expected.push("report");
    assert_eq!(kinds, expected);
    handle.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_agent_without_an_instance_name_sends_no_management_calls() {
    for options in [AgentOptions::new(SVC).property("zone", "eu-1"), AgentOptions::new(SVC).instance("")] {
        let fake = FakeCds::default();
        let handle = Agent::new(options, Registry::new(), fake.clone()).spawn();
        after_polls(&mut handle.status(), 5).await;
        assert!(fake.management().is_empty(), "{:?}", fake.management());
        handle.stop().await;
    }
}

#[tokio::test(start_paused = true)]
async fn failing_management_calls_never_stop_the_polls_and_the_report_is_retried_with_each_poll() {
    let fake = FakeCds::default();
    fake.set_management_down(true);
    let (t0, handle, mut status) = start(named(), &fake);
    let after = after_polls(&mut status, 3).await;
    assert_eq!(Instant::now() - t0, Duration::from_secs(40), "polls keep their interval");
    assert_eq!(after.failures_in_a_row, 0);
    assert!(matches!(after.last, Some(Ok(_))), "{:?}", after.last);
    assert_eq!(
        calls(&fake.management(), t0),
        [(0, 0, "report"), (20, 1, "report"), (40, 2, "report")],
        "retried before each poll, not in a loop in between"
    );

    fake.set_management_down(false);
    after_polls(&mut status, 4).await;
    let managed = calls(&fake.management(), t0);
    assert_eq!(managed.last(), Some(&(60, 3, "report")));
    // Accepted now: the next call is a keep-alive one interval later, between the polls at 80
    // and 100 s.
    after_polls(&mut status, 6).await;
    assert_eq!(calls(&fake.management(), t0).last(), Some(&(90, 5, "keepAlive")), "30 s after the report at 60 s");
    handle.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_lost_connection_reports_the_properties_again_before_the_next_poll() {
    let fake = FakeCds::default();
    let (t0, handle, mut status) = start(named(), &fake);
    after_polls(&mut status, 1).await;
    fake.set_down(true);
    let failed = after_polls(&mut status, 2).await;
    assert_eq!(failed.failures_in_a_row, 1);
    fake.set_down(false);
    let recovered = after_polls(&mut status, 3).await;
    assert_eq!(recovered.failures_in_a_row, 0);
    let managed = calls(&fake.management(), t0);
    assert_eq!(managed.first(), Some(&(0, 0, "report")));
    let (_, polls_before, kind) = *managed.last().unwrap();
    assert_eq!((polls_before, kind), (2, "report"), "{managed:?}");
    handle.stop().await;
}
