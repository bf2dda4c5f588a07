//! The rollout's Prometheus gate against a real Prometheus (Debian's `prometheus`, started by
//! `skyconf_testkit::servers::prometheus`) scraping a test exporter every second: the gate
//! follows the exporter's gauge, and a query Prometheus refuses is a clear error. Also the HTTP
//! errors of something that is not Prometheus.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use skyconf_server::rollout::prometheus::{GateReading, PrometheusError, PrometheusGate};
use skyconf_testkit::PATIENCE;
use skyconf_testkit::servers::prometheus::PrometheusServer;
use tokio::net::TcpListener;
use tokio::time::Instant;

pub(crate) const GAUGE: &str = "skyconf_test_error_ratio";

/// An exporter serving one gauge whose value the test sets.
pub(crate) struct Exporter {
    pub(crate) addr: SocketAddr,
    value: Arc<Mutex<f64>>,
    task: tokio::task::JoinHandle<()>,
}

impl Exporter {
    pub(crate) async fn start(value: f64) -> Self {
        let value = Arc::new(Mutex::new(value));
        let shared = Arc::clone(&value);
        let app = Router::new().route(
            "/metrics",
            get(move || {
                let value = *shared.lock().unwrap();
                async move {
                    (
                        [("content-type", "text/plain; version=0.0.4")],
                        format!("# HELP {GAUGE} Share of failed requests.\n# TYPE {GAUGE} gauge\n{GAUGE} {value}\n"),
                    )
                }
            }),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { addr, value, task }
    }

    pub(crate) fn set(&self, value: f64) {
        *self.value.lock().unwrap() = value;
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Checks the gate until `done` says the reading is the one expected, or fails after
/// [`PATIENCE`]; Prometheus sees a new value only at its next scrape (every second).
async fn read_until(
    gate: &PrometheusGate,
    client: &reqwest::Client,
    what: &str,
    done: impl Fn(&GateReading) -> bool,
) -> GateReading {
    let give_up = Instant::now() + PATIENCE;
    loop {
        let reading = gate.check(client).await.expect("the gate reads");
        if done(&reading) {
            return reading;
        }
        assert!(Instant::now() < give_up, "{what}: not within {PATIENCE:?}; last reading {reading:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_gate_follows_the_scraped_gauge() {
    let exporter = Exporter::start(0.01).await;
    let Some(prometheus) = PrometheusServer::start(exporter.addr).await else { return };
    let client = reqwest::Client::new();
    let gate = PrometheusGate::new(prometheus.url(), GAUGE, 0.05);

    // Before the first scrape the vector is empty; wait for the sample itself.
    let healthy = read_until(&gate, &client, "the first scrape", |r| !r.samples.is_empty()).await;
    assert!(healthy.passed, "{healthy:?}");
    assert_eq!(healthy.samples.len(), 1);
    assert_eq!(healthy.samples[0].value, 0.01);
    assert_eq!(healthy.samples[0].labels["job"], "skyconf-test");
    assert_eq!(healthy.summary, "1 sample, highest 0.01 <= 0.05");

    exporter.set(0.2);
    let failed = read_until(&gate, &client, "the scrape of 0.2", |r| r.samples.iter().any(|s| s.value == 0.2)).await;
    assert!(!failed.passed, "{failed:?}");
    assert!(failed.summary.contains("= 0.2 > 0.05"), "{}", failed.summary);

    // A query over a series that does not exist: no samples, which passes and says so.
    let absent = PrometheusGate::new(prometheus.url(), "skyconf_test_no_such_series", 0.05);
    let reading = absent.check(&client).await.unwrap();
    assert!(reading.passed && reading.samples.is_empty(), "{reading:?}");
    assert_eq!(reading.summary, "no samples");

    // A scalar.
    let scalar = PrometheusGate::new(prometheus.url(), "scalar(skyconf_test_error_ratio) * 0", 0.05);
    let reading = scalar.check(&client).await.unwrap();
    assert!(reading.passed && reading.samples.len() == 1 && reading.samples[0].labels.is_empty(), "{reading:?}");
}

#[tokio::test]
async fn a_broken_query_is_a_clear_error() {
    let exporter = Exporter::start(0.01).await;
    let Some(prometheus) = PrometheusServer::start(exporter.addr).await else { return };
    let gate = PrometheusGate::new(prometheus.url(), "sum(rate(skyconf_test_error_ratio[1m]", 0.05);
    let error = gate.check(&reqwest::Client::new()).await.unwrap_err();
    let PrometheusError::Query { error_type, error: message } = &error else {
        panic!("a refused query, not {error:?}");
    };
    assert_eq!(error_type, "bad_data");
    assert!(message.contains("parse error"), "{message}");
    assert!(error.to_string().starts_with("Prometheus refused the query (bad_data): "), "{error}");

    // A range vector has no single value to compare.
    let range = PrometheusGate::new(prometheus.url(), "skyconf_test_error_ratio[1m]", 0.05);
    let error = range.check(&reqwest::Client::new()).await.unwrap_err();
    assert!(matches!(&error, PrometheusError::UnsupportedResult(kind) if kind == "matrix"), "{error:?}");
}

#[tokio::test]
async fn something_that_is_not_prometheus_gives_its_http_status() {
    let app = Router::new().route("/api/v1/query", get(|| async { (http::StatusCode::BAD_GATEWAY, "upstream down") }));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let gate = PrometheusGate::new(format!("http://{addr}/"), "up", 1.0);
    let error = gate.check(&reqwest::Client::new()).await.unwrap_err();
    assert!(matches!(&error, PrometheusError::Http { status: 502, body } if body == "upstream down"), "{error:?}");
    assert_eq!(error.to_string(), "Prometheus answered HTTP 502: upstream down");
    server.abort();
}
