//! The agent scenarios against a real gRPC server: skyconf's CDS service in-process, or the
//! OAP-equivalent `RefServer` on grpc-java. Each step drives one poll with `Agent::poll_once`, so
//! nothing depends on timing; only the servers' own reloads are waited for (by asking them).
//!
//! Two scenarios of the fake-server tests have no counterpart here because neither server can
//! produce them: a command that repeats a key (skyconf refuses such documents, the OAP keys its
//! table by string) and a replayed SerialNumber (both draw a fresh random one per answer).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use skyconf_agent::watchers::{SAMPLE_N_PER_3_SECS, SPAN_LIMIT_PER_SEGMENT, SpanLimit};
use skyconf_agent::{Agent, AgentOptions, CommandOutcome, EventType, GrpcTransport, Registry};
use skyconf_proto::v3::ConfigurationSyncRequest;
use skyconf_proto::v3::configuration_discovery_service_client::ConfigurationDiscoveryServiceClient;

use super::{Log, Recorder, seen, without_uuids};

/// The service the scenarios poll as.
pub const SERVICE: &str = "svc";
/// The first configuration.
pub const V1: &str = "configurations:\n  svc:\n    agent.sample_n_per_3_secs: 10\n    agent.span_limit_per_segment: 400\n    agent.unwatched: x\n  other:\n    agent.sample_n_per_3_secs: 1\n";
/// V1 with a new span limit.
pub const V2: &str =
    "configurations:\n  svc:\n    agent.sample_n_per_3_secs: 10\n    agent.span_limit_per_segment: 500\n";
/// The span limit removed.
pub const V3: &str = "configurations:\n  svc:\n    agent.sample_n_per_3_secs: 10\n";
/// The service removed: it gets the EMPTY answer.
pub const V4: &str = "configurations:\n  other:\n    agent.sample_n_per_3_secs: 1\n";

/// A server the scenarios can reconfigure, stop and start again on the same address.
#[allow(async_fn_in_trait)]
pub trait Backend {
    /// Serves `yaml` from now on; returns once the server answers with it.
    async fn serve(&mut self, yaml: &str);
    /// Stops the server (the port closes).
    async fn stop(&mut self);
    /// Starts it again on the same address, serving the last document.
    async fn start(&mut self);
    /// The gRPC address.
    fn addr(&self) -> SocketAddr;
}

/// The digest the OAP serves `service` under `yaml`.
pub fn digest(yaml: &str, service: &str) -> String {
    let table = skyconf_core::read(yaml).expect("a valid document");
    match table.get(service) {
        Some(s) => s.digest().as_str().to_owned(),
        None => skyconf_core::Digest::empty().as_str().to_owned(),
    }
}

/// Asks the server at `addr` until it serves `expected` for `service` (a store reload), at most
/// for `limit`.
pub async fn wait_until_served(addr: SocketAddr, service: &str, expected: &str, limit: Duration) {
    let give_up = tokio::time::Instant::now() + limit;
    loop {
        if let Ok(mut client) = ConfigurationDiscoveryServiceClient::connect(format!("http://{addr}")).await {
            let request = ConfigurationSyncRequest { service: service.to_owned(), uuid: String::new() };
            if let Ok(answer) = client.fetch_configurations(request).await {
                let served =
                    skyconf_agent::DiscoveryCommand::all(&answer.into_inner()).into_iter().find_map(|c| c.uuid);
                if served.as_deref() == Some(expected) {
                    return;
                }
            }
        }
        assert!(tokio::time::Instant::now() < give_up, "the server never served {expected}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs every scenario in order against `backend`.
pub async fn run_all<B: Backend>(backend: &mut B) {
    use EventType::{Delete, Modify};
    backend.serve(V1).await;

    let log = Log::default();
    let registry = Registry::new();
    let sample = Recorder::new("sample", SAMPLE_N_PER_3_SECS, &log);
    let span = Recorder::new("span", SPAN_LIMIT_PER_SEGMENT, &log);
    let flaky = Recorder::new("flaky", SPAN_LIMIT_PER_SEGMENT, &log);
    let limit = Arc::new(SpanLimit::default());
    for w in [sample.clone(), span.clone(), flaky.clone()] {
        assert!(registry.register(w));
    }
    assert!(registry.register(limit.clone()));
    let transport = GrpcTransport::lazy(&backend.addr().to_string()).unwrap();
    let options = AgentOptions::new(SERVICE).timeout(Duration::from_secs(10));
    let mut agent = Agent::new(options, registry.clone(), transport);

    // First sync: every watched setting arrives; the unwatched one is ignored.
    let report = agent.poll_once().await.expect("first sync");
    assert_eq!(report.events(), 4, "{report:?}");
    assert_eq!(
        without_uuids(log.take()),
        [
            seen("sample", SAMPLE_N_PER_3_SECS, Modify, Some("10")),
            seen("span", SPAN_LIMIT_PER_SEGMENT, Modify, Some("400")),
            seen("flaky", SPAN_LIMIT_PER_SEGMENT, Modify, Some("400")),
        ]
    );
    assert_eq!(limit.limit(), 400);
    assert_eq!(agent.uuid(), Some(digest(V1, SERVICE).as_str()));

    // Unchanged: the server answers "no change", nothing happens.
    let report = agent.poll_once().await.expect("unchanged");
    assert!(report.is_no_change(), "{report:?}");
    assert!(log.take().is_empty());

    // Modify.
    backend.serve(V2).await;
    agent.poll_once().await.expect("modify");
    assert_eq!(
        without_uuids(log.take()),
        [
            seen("span", SPAN_LIMIT_PER_SEGMENT, Modify, Some("500")),
            seen("flaky", SPAN_LIMIT_PER_SEGMENT, Modify, Some("500")),
        ]
    );
    assert_eq!(limit.limit(), 500);
    assert_eq!(agent.uuid(), Some(digest(V2, SERVICE).as_str()));

    // Delete by omission: the setting returns to the local default.
    backend.serve(V3).await;
    agent.poll_once().await.expect("delete");
    assert_eq!(
        without_uuids(log.take()),
        [seen("span", SPAN_LIMIT_PER_SEGMENT, Delete, None), seen("flaky", SPAN_LIMIT_PER_SEGMENT, Delete, None),]
    );
    assert_eq!(limit.limit(), 300);

    // Unknown service: the EMPTY answer deletes every setting a watcher holds.
    backend.serve(V4).await;
    agent.poll_once().await.expect("unknown service");
    let events = log.take();
    assert_eq!(without_uuids(events.clone()), [seen("sample", SAMPLE_N_PER_3_SECS, Delete, None)]);
    let empty = skyconf_core::Digest::empty().as_str().to_owned();
    assert_eq!(events[0].uuid.as_deref(), Some(empty.as_str()));
    assert_eq!(agent.uuid(), Some(empty.as_str()));

    // Back to V1.
    backend.serve(V1).await;
    agent.poll_once().await.expect("restore");
    assert_eq!(log.take().len(), 3);
    assert_eq!(limit.limit(), 400);
    let v1 = digest(V1, SERVICE);

    // Server down, then up: values and uuid kept, no events.
    backend.stop().await;
    let error = agent.poll_once().await.expect_err("the server is down");
    assert_eq!(error.code(), tonic::Code::Unavailable, "{error}");
    assert!(log.take().is_empty());
    assert_eq!(sample.current().as_deref(), Some("10"));
    assert_eq!(limit.limit(), 400);
    assert_eq!(agent.uuid(), Some(v1.as_str()));
    backend.start().await;
    let report = agent.poll_once().await.expect("the server is back");
    assert!(report.is_no_change(), "{report:?}");
    assert!(log.take().is_empty());

    // Late registration: the uuid reset brings the whole configuration; only the newcomer gets
    // an event.
    let late = Recorder::new("late", SAMPLE_N_PER_3_SECS, &log);
    assert!(registry.register(late.clone()));
    let report = agent.poll_once().await.expect("late watcher");
    assert!(!report.is_no_change());
    assert_eq!(without_uuids(log.take()), [seen("late", SAMPLE_N_PER_3_SECS, Modify, Some("10"))]);
    assert_eq!(agent.uuid(), Some(v1.as_str()));

    // A watcher error: the command stops there and the uuid is kept; the next poll retries and
    // only what is still different is delivered.
    flaky.fail_next();
    backend.serve(V2).await;
    let report = agent.poll_once().await.expect("watcher error");
    assert!(
        matches!(&report.outcomes[..], [CommandOutcome::WatcherFailed { key, .. }] if key == SPAN_LIMIT_PER_SEGMENT),
        "{report:?}"
    );
    assert_eq!(without_uuids(log.take()), [seen("span", SPAN_LIMIT_PER_SEGMENT, Modify, Some("500"))]);
    assert_eq!(limit.limit(), 400, "watchers after the failing one are skipped");
    assert_eq!(agent.uuid(), Some(v1.as_str()));
    agent.poll_once().await.expect("retry");
    assert_eq!(without_uuids(log.take()), [seen("flaky", SPAN_LIMIT_PER_SEGMENT, Modify, Some("500"))]);
    assert_eq!(limit.limit(), 500);
    assert_eq!(agent.uuid(), Some(digest(V2, SERVICE).as_str()));
}
