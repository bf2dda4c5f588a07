//! `/metrics` over a real socket: the families and their values after fetches of every kind, a
//! refused document, and a store outage.

use std::sync::Mutex;
use std::time::Duration;

use skyconf_core::digest::EMPTY_DIGEST;
use skyconf_core::store::{AGENT_CONFIGURATIONS_KEY, StoreContent};
use skyconf_sources::{Expect, KeySet, Revision, Source, SourceError, Update};
use skyconf_testkit::server::{Reply, Server, eventually, eventually_async, loopback};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const GOOD: &str = "configurations:\n  svc:\n    agent.sample_n_per_3_secs: 10\n";
const BAD: &str = "configurations:\n  svc:\n    agent.sample_n_per_3_secs:\n";

/// A store the test drives: it loads `initial` and then reports whatever the test sends.
struct Scripted {
    initial: StoreContent,
    updates: Mutex<Option<mpsc::Receiver<Update>>>,
}

impl Scripted {
    fn new(document: &str) -> (Self, mpsc::Sender<Update>) {
        let mut initial = StoreContent::default();
        initial.set_single(AGENT_CONFIGURATIONS_KEY, Some(document.to_owned()));
        let (tx, rx) = mpsc::channel(16);
        (Self { initial, updates: Mutex::new(Some(rx)) }, tx)
    }
}

impl Source for Scripted {
    fn describe(&self) -> String {
        "scripted".to_owned()
    }

    async fn load(&self, _keys: &KeySet) -> Result<StoreContent, SourceError> {
        Ok(self.initial.clone())
    }

    async fn run(&self, _keys: KeySet, updates: mpsc::Sender<Update>, shutdown: CancellationToken) {
        let taken = self.updates.lock().unwrap().take();
        let Some(mut script) = taken else { return shutdown.cancelled().await };
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                update = script.recv() => match update {
                    Some(update) => if updates.send(update).await.is_err() { return },
                    None => return shutdown.cancelled().await,
                },
            }
        }
    }

    async fn put(&self, _key: &str, _value: Option<&str>, _expect: Expect) -> Result<Option<Revision>, SourceError> {
        Err(SourceError::Unsupported("scripted".into()))
    }
}

/// The value of the one series whose line starts with `series` (its name and labels) in the
/// text of `/metrics`, if any.
pub(crate) fn value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// The value of `series` in what `running` exposes now, read in-process (no HTTP); 0 when it
/// is not there.
pub(crate) fn now(running: &skyconf_server::Running, series: &str) -> u64 {
    value(&running.metrics.encode(), series).map_or(0, |v| v as u64)
}

#[tokio::test]
async fn fetches_are_counted_by_outcome() {
    let (source, _script) = Scripted::new(GOOD);
    let running = Server::start(source, loopback()).await;

    let digest = running.cds().await.fetch_digest("svc", "").await.expect("changed: the command");
    assert_eq!(running.cds().await.fetch_digest("svc", &digest).await, None, "unchanged");
    assert_eq!(
        running.cds().await.fetch_digest("svc", "stale").await.as_deref(),
        Some(digest.as_str()),
        "changed again"
    );
    assert_eq!(running.cds().await.fetch_digest("nobody", "").await.as_deref(), Some(EMPTY_DIGEST), "empty");
    assert_eq!(running.cds().await.fetch_digest("nobody", EMPTY_DIGEST).await, None, "unchanged");

    let Reply { status, content_type, body: text } = running.admin().get("/metrics").await;
    assert_eq!(status, 200);
    assert!(content_type.unwrap_or_default().to_ascii_lowercase().starts_with("application/openmetrics-text"));
    assert_eq!(value(&text, "skyconf_fetches_total{outcome=\"changed\"}"), Some(2.0), "{text}");
    assert_eq!(value(&text, "skyconf_fetches_total{outcome=\"unchanged\"}"), Some(2.0), "{text}");
    assert_eq!(value(&text, "skyconf_fetches_total{outcome=\"empty\"}"), Some(1.0), "{text}");
    assert_eq!(value(&text, "skyconf_fetches_total{outcome=\"not_ready\"}"), Some(0.0), "{text}");
    // Latency is sampled (one call in 8 per thread, starting with the first): at least one of
    // the five, never more than were answered.
    let timed = value(&text, "skyconf_fetch_duration_seconds_count").unwrap();
    assert!((1.0..=5.0).contains(&timed), "{text}");
    assert_eq!(value(&text, "skyconf_fetch_duration_seconds_bucket{le=\"+Inf\"}"), Some(timed), "{text}");
    assert!(value(&text, "skyconf_fetch_duration_seconds_sum").unwrap() > 0.0);
    assert_eq!(value(&text, "skyconf_table_services"), Some(1.0));
    assert_eq!(value(&text, "skyconf_table_ready"), Some(1.0));
    assert_eq!(value(&text, "skyconf_store_up{store=\"scripted\"}"), Some(1.0));
    assert!(value(&text, "skyconf_table_age_seconds").is_some());
    assert!(value(&text, "skyconf_store_last_report_age_seconds{store=\"scripted\"}").is_some());
    for family in ["skyconf_reloads", "skyconf_documents_rejected", "skyconf_dcs_calls", "skyconf_grpc_denied"] {
        assert!(text.contains(&format!("# TYPE {family} counter")), "{family} in\n{text}");
    }
    assert!(text.contains("# TYPE skyconf_fetch_duration_seconds histogram"));
    assert!(text.ends_with("# EOF\n"));
    running.stop().await.unwrap();
}

#[tokio::test]
async fn a_refused_document_and_a_store_outage_show() {
    let (source, script) = Scripted::new(GOOD);
    let running = Server::start(source, loopback()).await;
    let digest = running.cds().await.fetch_digest("svc", "").await.unwrap();

    script.send(Update::single(AGENT_CONFIGURATIONS_KEY, Some(BAD.into()))).await.unwrap();
    eventually("the refusal", || running.served.last_rejection().is_some()).await;
    let text = running.admin().get("/metrics").await.body;
    assert_eq!(value(&text, "skyconf_documents_rejected_total{origin=\"scripted\"}"), Some(1.0), "{text}");
    assert_eq!(value(&text, "skyconf_reloads_total{origin=\"scripted\"}"), Some(0.0), "{text}");
    assert_eq!(value(&text, "skyconf_table_version"), Some(1.0), "the last good table stays");

    let fixed = GOOD.replace("10", "20");
    let mut changes = running.served.subscribe();
    script.send(Update::single(AGENT_CONFIGURATIONS_KEY, Some(fixed))).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), changes.changed()).await.unwrap().unwrap();
    let text = running.admin().get("/metrics").await.body;
    assert_eq!(value(&text, "skyconf_reloads_total{origin=\"scripted\"}"), Some(1.0), "{text}");
    assert_eq!(value(&text, "skyconf_table_version"), Some(2.0));

    let outage = SourceError::Unavailable { store: "scripted".into(), message: "connection refused".into() };
    script.send(Update::Failed(outage)).await.unwrap();
    eventually("the outage", || !running.store.status().connected).await;
    let text = running.admin().get("/metrics").await.body;
    assert_eq!(value(&text, "skyconf_store_up{store=\"scripted\"}"), Some(0.0), "{text}");
    assert_eq!(value(&text, "skyconf_store_failures_total{store=\"scripted\"}"), Some(1.0), "{text}");
    assert!(value(&text, "skyconf_store_last_report_age_seconds{store=\"scripted\"}").is_some());
    assert_ne!(
        running.cds().await.fetch_digest("svc", &digest).await,
        None,
        "agents are still served during the outage"
    );

    let mut back = StoreContent::default();
    back.set_single(AGENT_CONFIGURATIONS_KEY, Some(GOOD.replace("10", "20")));
    script.send(Update::Snapshot(back)).await.unwrap();
    eventually("the recovery", || running.store.status().connected).await;
    let text = running.admin().get("/metrics").await.body;
    assert_eq!(value(&text, "skyconf_store_up{store=\"scripted\"}"), Some(1.0), "{text}");
    assert_eq!(value(&text, "skyconf_reloads_total{origin=\"scripted\"}"), Some(1.0), "the same text is no reload");
    running.stop().await.unwrap();
}

#[tokio::test]
async fn dcs_calls_are_counted() {
    use skyconf_proto::dcs::ConfigurationRequest;
    let (source, _script) = Scripted::new(GOOD);
    let running = Server::start(source, loopback()).await;
    let mut client = running.dcs().await;
    let request = |uuid: &str| ConfigurationRequest { cluster_name: "oap".into(), uuid: uuid.into() };
    let first = client.call(request("")).await.unwrap().into_inner();
    client.call(request(&first.uuid)).await.unwrap();
    client.call_group(request("")).await.unwrap();
    let text = running.admin().get("/metrics").await.body;
    assert_eq!(value(&text, "skyconf_dcs_calls_total{method=\"call\",outcome=\"changed\"}"), Some(1.0), "{text}");
    assert_eq!(value(&text, "skyconf_dcs_calls_total{method=\"call\",outcome=\"unchanged\"}"), Some(1.0), "{text}");
    assert_eq!(value(&text, "skyconf_dcs_calls_total{method=\"callGroup\",outcome=\"changed\"}"), Some(1.0), "{text}");
    running.stop().await.unwrap();
}

/// `skyconf_fleet_agents{service, state}` counts exactly what the API counts: one series per
/// state of each service polled, no digest label, the names without configuration summed into
/// `service=""`; and the rows go with their connections.
#[tokio::test]
async fn fleet_agents_are_counted_by_state_as_the_api_counts_them() {
    let (source, _script) = Scripted::new(GOOD);
    let running = Server::start(source, loopback()).await;
    // A member (two polls), a one-off poll, and two pollers of names without configuration.
    let (member, one_off, typo) = (running.cds().await, running.cds().await, running.cds().await);
    let digest = member.fetch_digest("svc", "").await.unwrap();
    assert_eq!(member.fetch_digest("svc", &digest).await, None);
    one_off.fetch_digest("svc", "").await.unwrap();
    typo.fetch_digest("svx", "").await.unwrap();
    typo.fetch_digest("nobody", "").await.unwrap();

    let text = running.admin().get("/metrics").await.body;
    let api = running.admin().get_json("/api/v1/services").await;
    let svc = &api["services"][0];
    for state in ["applied", "behind", "stuck", "new", "anonymous"] {
        let series = format!("skyconf_fleet_agents{{service=\"svc\",state=\"{state}\"}}");
        assert_eq!(value(&text, &series), svc[state].as_f64(), "{series} as the API says: {text}");
    }
    assert_eq!(value(&text, "skyconf_fleet_agents{service=\"svc\",state=\"applied\"}"), Some(1.0), "{text}");
    assert_eq!(value(&text, "skyconf_fleet_agents{service=\"svc\",state=\"new\"}"), Some(1.0), "{text}");
    assert_eq!(value(&text, "skyconf_fleet_agents{service=\"\",state=\"new\"}"), Some(2.0), "summed: {text}");
    assert!(!text.contains("svx") && !text.contains("nobody"), "no series per unconfigured name: {text}");
    assert!(!text.contains("digest=\""), "no digest label: {text}");

    drop((member, one_off, typo));
    eventually_async("the rows go with their connections", async || {
        let text = running.admin().get("/metrics").await.body;
        !text.contains("skyconf_fleet_agents{")
    })
    .await;
    running.stop().await.unwrap();
}
