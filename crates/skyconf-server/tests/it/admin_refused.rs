//! Repairing a refused document from the admin API: a document put straight into the store
//! (the file, etcd) that the reader refuses leaves the last good table served. A per-service
//! write then replaces the refused document, built on the served table, and its answer says
//! which refused document it replaced; it is not a 409, since no concurrent write is lost.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;
use skyconf_server::ServeConfig;
use skyconf_server::reload::Guard;
use skyconf_sources::Backoff;
use skyconf_sources::etcd::{EtcdSettings, EtcdSource};
use skyconf_sources::file::FileSource;
use skyconf_testkit::server::{Server, eventually, loopback};
use skyconf_testkit::servers::etcd::EtcdServer;

const V1: &str =
    "configurations:\n  svc:\n    agent.sample_n_per_3_secs: 10\n  other:\n    agent.span_limit_per_segment: 300\n";
const REFUSED: &str = "configurations:\n  svc:\n    agent.sample_n_per_3_secs: [unclosed\n";
const AGENT_KEY: &str = "/skywalking/configuration-discovery.default.agentConfigurations";

fn config() -> ServeConfig {
    ServeConfig { reset_guard: Guard::OFF, ..loopback() }
}

/// The etcd store, retrying quickly once the refused document is in.
fn etcd_source(etcd: &EtcdServer) -> EtcdSource {
    let settings = EtcdSettings { endpoints: etcd.url(), ..EtcdSettings::default() };
    EtcdSource::new(settings).unwrap().with_backoff(Backoff::new(Duration::from_millis(50), Duration::from_millis(500)))
}

/// A server on a file that held `V1` when it started and holds `REFUSED` now.
async fn refused_in_the_file() -> (tempfile::TempDir, PathBuf, Server) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agents.yaml");
    std::fs::write(&path, V1).unwrap();
    let running = Server::start(FileSource::new(&path), config()).await;
    std::fs::write(&path, REFUSED).unwrap();
    (dir, path, running)
}

/// A server on an etcd that held `V1` when it started and holds `REFUSED` now, with the revision
/// `REFUSED` was put at; `None` without etcd.
async fn refused_in_etcd() -> Option<(EtcdServer, Server, i64)> {
    let etcd = EtcdServer::start().await?;
    let admin = etcd.admin().await;
    admin.put(AGENT_KEY, V1).await;
    let running = Server::start(etcd_source(&etcd), config()).await;
    let refused_at = admin.put(AGENT_KEY, REFUSED).await;
    Some((etcd, running, refused_at))
}

/// Refuses `REFUSED` (in the store of `refused_in_the_file` or `refused_in_etcd`), then repairs `svc` with a
/// per-service write: the answer, once served.
async fn repair(running: &Server) -> Value {
    eventually("the document put into the store is refused", || running.served.last_rejection().is_some()).await;
    let body = r#"{"config": {"agent.sample_n_per_3_secs": "20"}, "author": "ops", "message": "repair"}"#;
    let reply =
        running.admin().send("PUT", "/api/v1/services/svc", &[("Content-Type", "application/json")], body).await;
    let answer = reply.json();
    assert_eq!(reply.status, 200, "a per-service write repairs the refused document: {answer}");
    assert_eq!(answer["served"], true, "{answer}");
    assert!(
        // `FILE:LINE:COLUMN: message` for the file, `LINE:COLUMN: message` for etcd.
        answer["replaced_refused"]["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("4:1: ") || e.contains(".yaml:4:1: ")),
        "the answer says it replaced a refused document, and why that one was refused: {answer}"
    );
    let cds = running.cds().await;
    let served = cds.fetch("svc", "").await.unwrap();
    assert_eq!(served.config, [("agent.sample_n_per_3_secs".to_owned(), "20".to_owned())]);
    assert!(cds.fetch("other", "").await.is_some(), "the other services are kept from the served table");
    assert!(running.served.last_rejection().is_none(), "the store holds a good document again");
    answer
}

#[tokio::test]
async fn a_per_service_write_replaces_a_document_refused_in_the_file() {
    let (_dir, path, running) = refused_in_the_file().await;
    let answer = repair(&running).await;
    assert_eq!(answer["replaced_refused"]["revision"], Value::Null, "a file has no revisions: {answer}");
    assert!(std::fs::read_to_string(&path).unwrap().contains("\"20\""), "written through to the file");
    running.stop().await.unwrap();
}

#[tokio::test]
async fn a_per_service_write_replaces_a_document_refused_in_etcd() {
    let Some((_etcd, running, refused_at)) = refused_in_etcd().await else { return };
    let answer = repair(&running).await;
    assert_eq!(answer["replaced_refused"]["revision"], refused_at, "the refused document's revision: {answer}");
    running.stop().await.unwrap();
}

/// Writes the served text `V1` back as the whole document while the store holds `REFUSED`: a
/// write that replaces the refused document (the store holds the served text again), records no
/// release, and says which refused document it replaced. The answer.
async fn write_served_text(running: &Server) -> Value {
    let newest = running.releases.latest().map(|r| r.meta.id);
    eventually("the document put into the store is refused", || running.served.last_rejection().is_some()).await;
    let yaml = [("Content-Type", "application/yaml")];
    let reply = running.admin().send("PUT", "/api/v1/configurations", &yaml, V1).await;
    let answer = reply.json();
    assert_eq!(reply.status, 200, "{answer}");
    assert_eq!(answer["written"], true, "the served text replaces the refused document: {answer}");
    assert!(answer["unchanged"].is_null(), "{answer}");
    assert!(answer["replaced_refused"]["error"].as_str().is_some_and(|e| e.contains("4:1: ")), "{answer}");
    assert_eq!(answer["release"]["id"].as_u64(), newest, "the served release: {answer}");
    assert!(running.served.last_rejection().is_none(), "the refusal is over");
    assert_eq!(running.releases.latest().map(|r| r.meta.id), newest, "no release that changes nothing");
    answer
}

/// The served text written back over a document refused in the file (usability finding 16).
#[tokio::test]
async fn writing_the_served_text_replaces_a_document_refused_in_the_file() {
    let (_dir, path, running) = refused_in_the_file().await;
    write_served_text(&running).await;
    assert_eq!(std::fs::read_to_string(&path).unwrap(), V1, "the file holds the served text again");
    running.stop().await.unwrap();
}

/// The same in etcd: the key holds the served text again, at a newer revision.
#[tokio::test]
async fn writing_the_served_text_replaces_a_document_refused_in_etcd() {
    let Some((_etcd, running, refused_at)) = refused_in_etcd().await else { return };
    let answer = write_served_text(&running).await;
    assert_eq!(answer["replaced_refused"]["revision"], refused_at, "{answer}");
    running.wait_for_store("the served text", |c| c.agent_configurations() == Some(V1)).await;
    running.stop().await.unwrap();
}
