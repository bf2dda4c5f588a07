//! Writes and rollback over real sockets: a write through the admin API reaches the file by
//! atomic rename and is served; the release history survives a restart; a rollback restores
//! exactly the values (and digest) a tonic client fetched before.

use std::path::Path;

use skyconf_server::ServeConfig;
use skyconf_sources::file::FileSource;
use skyconf_testkit::server::{Server, loopback};

const V1: &str = "# comments survive a rollback\nconfigurations:\n  svc:\n    agent.sample_n_per_3_secs: 010\n    agent.ignore_suffix: .jpg\n";

fn config(data: &Path) -> ServeConfig {
    ServeConfig { data_dir: Some(data.to_owned()), ..loopback() }
}

#[tokio::test]
async fn a_rollback_after_a_restart_restores_what_agents_fetched_before() {
    let dir = tempfile::tempdir().unwrap();
    let (path, data) = (dir.path().join("agents.yaml"), dir.path().join("data"));
    std::fs::write(&path, V1).unwrap();
    let running = Server::start(FileSource::new(&path), config(&data)).await;
    let cds = running.cds().await;
    let before = cds.fetch("svc", "").await.unwrap();

    let body = r#"{"config": {"agent.sample_n_per_3_secs": "50"}, "author": "eve", "message": "more samples"}"#;
    let headers = [("Content-Type", "application/json")];
    let reply = running.admin().send("PUT", "/api/v1/services/svc", &headers, body).await;
    let (status, answer) = (reply.status, reply.json());
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["served"], true);
    let changed = cds.fetch("svc", "").await.unwrap();
    assert_eq!(changed.config, [("agent.sample_n_per_3_secs".to_owned(), "50".to_owned())]);
    assert!(std::fs::read_to_string(&path).unwrap().contains("\"50\""), "written through to the file");
    running.stop().await.unwrap();

    let running = Server::start(FileSource::new(&path), config(&data)).await;
    let cds = running.cds().await;
    let admin = running.admin();
    let reply = admin.get("/api/v1/releases").await;
    let (status, list) = (reply.status, reply.json());
    assert_eq!(status, 200);
    let ids: Vec<u64> = list["releases"].as_array().unwrap().iter().map(|r| r["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, [2, 1], "the history survived the restart, and the restart added no release");
    assert_eq!(list["releases"][0]["author"], "eve");

    // A write must be one a browser form cannot send (security::browser).
    let reply = admin
        .send("POST", "/api/v1/releases/1/rollback?dry_run=true", &[("Content-Type", "application/json")], "")
        .await;
    let (status, dry) = (reply.status, reply.json());
    assert_eq!(status, 200, "{dry}");
    assert_eq!(dry["changes"][0]["digest_after"], before.uuid.clone().unwrap());
    assert_eq!(cds.fetch("svc", "").await.unwrap().uuid, changed.uuid, "a dry run changes nothing");

    let reply = admin.send("POST", "/api/v1/releases/1/rollback", &[("X-Skyconf-Author", "frank")], "").await;
    let (status, answer) = (reply.status, reply.json());
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["release"]["rollback_of"], 1);
    let after = cds.fetch("svc", "").await.unwrap();
    assert_eq!(after.uuid, before.uuid);
    assert_eq!(after.config, before.config);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), V1, "the exact text, comments included");

    let reply = admin.get("/api/v1/services/nope").await;
    let (status, missing) = (reply.status, reply.json());
    assert_eq!((status, missing["error"].is_string()), (404, true));
    running.stop().await.unwrap();
}
