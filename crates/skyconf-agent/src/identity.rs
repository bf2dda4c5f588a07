//! Instance identity: who this agent says it is, with `skywalking.v3.ManagementService`, as the
//! Java agent does.
//!
//! When [`AgentOptions::instance`](crate::AgentOptions::instance) names the instance, the agent
//! sends `reportInstanceProperties` (service, instance name, the
//! [properties](crate::AgentOptions::property)) before its first poll, then `keepAlive` every
//! [`keep_alive_interval`](crate::AgentOptions::keep_alive_interval) (30 s by default, the Java
//! agent's `collector.heartbeat_period`), on the same transport as its polls. Over
//! [`GrpcTransport`](crate::GrpcTransport) that is the same gRPC channel, so the same connection:
//! a server that keys agents by peer address (an OAP, skyconf) ties the polls to the instance.
//!
//! The properties are reported again after [`REPORT_EVERY_KEEP_ALIVES`] keep-alives (as the Java
//! agent's `collector.properties_report_period_factor`), after a management call failed, and after
//! a poll found the server unreachable: the connection that comes back may be to a server, or a
//! server restarted, that does not know the instance.
//!
//! The keep-alives keep their own schedule, whatever the polls do (a poll the server holds until
//! its deadline included), as the Java agent's heartbeat does; the report goes before a poll, so
//! the poll after it is tied to the instance.
//!
//! A failing management call never stops or delays configuration discovery beyond its own
//! deadline: a server that refuses it is logged at WARN on the first failure in a row (DEBUG
//! after), one that cannot be reached at DEBUG (the polls say that once); the report is retried
//! with the next poll.

use std::time::Duration;

use skyconf_proto::v3::{InstancePingPkg, InstanceProperties, KeyStringValuePair};
use tokio::time::Instant;

/// How often a named agent sends `keepAlive` by default: the Java agent's
/// `collector.heartbeat_period`.
pub const DEFAULT_KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);

/// After this many keep-alives the properties are reported again: the Java agent's
/// `collector.properties_report_period_factor`.
pub const REPORT_EVERY_KEEP_ALIVES: u32 = 10;

/// One `ManagementService` call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ManagementCall {
    /// `reportInstanceProperties`: the instance and its properties.
    Report,
    /// `keepAlive`: the instance is still there.
    KeepAlive,
}

impl std::fmt::Display for ManagementCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Report => "reportInstanceProperties",
            Self::KeepAlive => "keepAlive",
        })
    }
}

/// When the next management call is due, and which.
#[derive(Debug, Default)]
pub(crate) struct Schedule {
    /// The server has the properties (the last report succeeded and nothing since suggests
    /// it lost them).
    reported: bool,
    /// When the last successful call was made.
    last: Option<Instant>,
    /// Keep-alives since the last report.
    keep_alives: u32,
    /// Failed calls since the last successful one.
    pub(crate) failures_in_a_row: u32,
}

impl Schedule {
    /// The call due at `now`, if any.
    pub(crate) fn due(&self, now: Instant, interval: Duration) -> Option<ManagementCall> {
        if !self.reported {
            return Some(ManagementCall::Report);
        }
        let last = self.last?;
        if now.saturating_duration_since(last) < interval {
            None
        } else if self.keep_alives >= REPORT_EVERY_KEEP_ALIVES {
            Some(ManagementCall::Report)
        } else {
            Some(ManagementCall::KeepAlive)
        }
    }

    /// The keep-alive (or periodic report) due at `now` to a server that has the properties;
    /// `None` when none is due or the properties are to be reported again first (the poll path
    /// does that, before its next poll).
    pub(crate) fn keep_alive_due(&self, now: Instant, interval: Duration) -> Option<ManagementCall> {
        if self.reported { self.due(now, interval) } else { None }
    }

    /// When a keep-alive (or a periodic report) falls due without a poll; `None` while the
    /// properties are not reported: that is retried with the next poll, not in a loop.
    pub(crate) fn next_keep_alive(&self, interval: Duration) -> Option<Instant> {
        self.last.filter(|_| self.reported).map(|last| last + interval)
    }

    /// Records the outcome of `call`, made at `at`.
    pub(crate) fn record(&mut self, call: ManagementCall, at: Instant, ok: bool) {
        if ok {
            self.failures_in_a_row = 0;
            self.last = Some(at);
            match call {
                ManagementCall::Report => {
                    self.reported = true;
                    self.keep_alives = 0;
                }
                ManagementCall::KeepAlive => self.keep_alives += 1,
            }
        } else {
            self.failures_in_a_row = self.failures_in_a_row.saturating_add(1);
            // Whatever failed, the server may not know us when it answers again.
            self.reported = false;
        }
    }

    /// The connection was lost: report the properties again before the next poll.
    pub(crate) fn forget(&mut self) {
        self.reported = false;
    }
}

/// The `reportInstanceProperties` message.
pub(crate) fn properties_message(service: &str, instance: &str, properties: &[(String, String)]) -> InstanceProperties {
    InstanceProperties {
        service: service.to_owned(),
        service_instance: instance.to_owned(),
        properties: properties
            .iter()
            .map(|(key, value)| KeyStringValuePair { key: key.clone(), value: value.clone() })
            .collect(),
        layer: String::new(),
    }
}

/// The `keepAlive` message.
pub(crate) fn ping_message(service: &str, instance: &str) -> InstancePingPkg {
    InstancePingPkg { service: service.to_owned(), service_instance: instance.to_owned(), layer: String::new() }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVERY: Duration = Duration::from_secs(30);

    #[tokio::test(start_paused = true)]
    async fn reports_first_then_keeps_alive_each_interval_then_reports_again() {
        let mut schedule = Schedule::default();
        let t0 = Instant::now();
        assert_eq!(schedule.due(t0, EVERY), Some(ManagementCall::Report));
        assert_eq!(schedule.next_keep_alive(EVERY), None);
        schedule.record(ManagementCall::Report, t0, true);
        assert_eq!(schedule.due(t0 + Duration::from_secs(29), EVERY), None);
        assert_eq!(schedule.next_keep_alive(EVERY), Some(t0 + EVERY));
        let mut at = t0;
        for _ in 0..REPORT_EVERY_KEEP_ALIVES {
            at += EVERY;
            assert_eq!(schedule.due(at, EVERY), Some(ManagementCall::KeepAlive));
            schedule.record(ManagementCall::KeepAlive, at, true);
        }
        at += EVERY;
        assert_eq!(schedule.due(at, EVERY), Some(ManagementCall::Report), "the periodic report");
        schedule.record(ManagementCall::Report, at, true);
        assert_eq!(schedule.due(at + EVERY, EVERY), Some(ManagementCall::KeepAlive));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_or_a_lost_connection_reports_again() {
        let mut schedule = Schedule::default();
        let t0 = Instant::now();
        schedule.record(ManagementCall::Report, t0, true);
        schedule.record(ManagementCall::KeepAlive, t0 + EVERY, false);
        assert_eq!(schedule.failures_in_a_row, 1);
        assert_eq!(schedule.due(t0 + EVERY, EVERY), Some(ManagementCall::Report));
        assert_eq!(schedule.next_keep_alive(EVERY), None, "retried with the next poll, not in a loop");
        schedule.record(ManagementCall::Report, t0 + EVERY, true);
        assert_eq!(schedule.failures_in_a_row, 0);
        schedule.forget();
        assert_eq!(schedule.due(t0 + EVERY, EVERY), Some(ManagementCall::Report));
    }

    #[test]
    fn messages_carry_the_service_the_instance_and_the_properties_in_order() {
        let properties = [("ipv4".to_owned(), "10.0.0.1".to_owned()), ("ipv4".to_owned(), "10.0.0.2".to_owned())];
        let report = properties_message("svc", "svc-1", &properties);
        assert_eq!((report.service.as_str(), report.service_instance.as_str()), ("svc", "svc-1"));
        assert_eq!(report.properties.iter().map(|p| p.value.as_str()).collect::<Vec<_>>(), ["10.0.0.1", "10.0.0.2"]);
        let ping = ping_message("svc", "svc-1");
        assert_eq!((ping.service.as_str(), ping.service_instance.as_str()), ("svc", "svc-1"));
    }
}
