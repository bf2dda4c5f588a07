//! Writes and rollback over real sockets: a write through the admin API reaches the file by
//! atomic rename and is served; the release history survives a restart; a rollback restores
//! exactly the values (and digest) a tonic client fetched before.

use std::path::{Path, PathBuf};

use skyconf_server::ServeConfig;
use skyconf_sources::file::FileSource;
use skyconf_testkit::server::{Server, loopback};

const V1: &str = "# comments survive a rollback\nconfigurations:\n  svc:\n    agent.sample_n_per_3_secs: 010\n    agent.ignore_suffix: .jpg\n";

fn config(data: &Path) -> ServeConfig {
    ServeConfig { data_dir: Some(data.to_owned()), ..loopback() }
}

/// A temporary directory with `agents.yaml` holding `V1`, and the path of a data directory beside
/// it (not made).
fn v1_file_and_data() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let (path, data) = (dir.path().join("agents.yaml"), dir.path().join("data"));
    std::fs::write(&path, V1).unwrap();
    (dir, path, data)
}

#[tokio::test]
async fn a_rollback_after_a_restart_restores_what_agents_fetched_before() {
    let (_dir, path, data) = v1_file_and_data();
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

/// F10: a release file that cannot be written (here a file where the releases directory should
/// be, which stops even root) is not acknowledged as a plain success, and its id is never issued
/// again, not even after a restart.
#[tokio::test]
async fn a_write_whose_release_cannot_be_written_is_a_503_and_its_id_is_never_reissued() {
    let (_dir, path, data) = v1_file_and_data();
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("releases"), "in the way").unwrap();
    let running = Server::start(FileSource::new(&path), config(&data)).await;
    let cds = running.cds().await;
    let headers = [("Content-Type", "application/json")];
    let mut ids = Vec::new();
    for value in ["50", "60"] {
        let body = format!(r#"{{"config": {{"agent.sample_n_per_3_secs": "{value}"}}}}"#);
        let reply = running.admin().send("PUT", "/api/v1/services/svc", &headers, &body).await;
        let (status, answer) = (reply.status, reply.json());
        assert_eq!(status, 503, "{answer}");
        assert_eq!((answer["written"].as_bool(), answer["served"].as_bool()), (Some(true), Some(true)), "{answer}");
        assert_eq!(answer["durable"], false, "{answer}");
        assert!(answer["error"].is_string());
        assert_eq!(cds.fetch("svc", "").await.unwrap().config[0].1, value, "the change is in effect");
        ids.push(answer["release"]["id"].as_u64().unwrap());
    }
    assert!(ids[0] < ids[1], "{ids:?}");
    let status = running.admin().get("/api/v1/status").await.json();
    assert!(status["unsaved_releases"].as_u64().unwrap() >= 2, "{status}");
    running.stop().await.unwrap();

    std::fs::remove_file(data.join("releases")).unwrap();
    let running = Server::start(FileSource::new(&path), config(&data)).await;
    let body = r#"{"config": {"agent.sample_n_per_3_secs": "70"}}"#;
    let reply = running.admin().send("PUT", "/api/v1/services/svc", &headers, body).await;
    let (status, answer) = (reply.status, reply.json());
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["durable"], true, "{answer}");
    let id = answer["release"]["id"].as_u64().unwrap();
    assert!(id > ids[1], "release id {id} reissued after {ids:?}");
    running.stop().await.unwrap();
}

/// F19: a write the file store cannot make says it could not write (not "cannot read"), with a
/// 500: nothing was written, and the served table is unchanged.
#[tokio::test]
async fn a_write_the_store_cannot_make_says_it_could_not_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agents.yaml");
    std::fs::write(&path, V1).unwrap();
    // The staging file's name is taken by a directory (tests run as root, so permissions would not
    // stop the write): creating it fails as a read-only directory would.
    let staged = dir.path().join(format!(".agents.yaml.skyconf-{}.tmp", std::process::id()));
    std::fs::create_dir_all(staged.join("inside")).unwrap();
    let running = skyconf_testkit::server::Server::start(FileSource::new(&path), loopback()).await;
    let version = running.served.snapshot().version;
    let body = r#"{"config": {"agent.sample_n_per_3_secs": "50"}}"#;
    let reply =
        running.admin().send("PUT", "/api/v1/services/svc", &[("Content-Type", "application/json")], body).await;
    assert_eq!(reply.status, 500, "{}", reply.body);
    let error = reply.json()["error"].as_str().unwrap().to_owned();
    assert!(error.starts_with(&format!("cannot write {}: ", path.display())), "{error}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), V1, "nothing was written");
    assert_eq!(running.served.snapshot().version, version);
    running.stop().await.unwrap();
}

/// F19: a last good copy that cannot be written (a directory where `last-good.json` should be)
/// was only a warning in the log while the write answered 200 `"durable": true`; a restart with
/// the store away would then serve an older document. The answer says the copy was not written,
/// and why; once it can be written again, writes are durable again.
#[tokio::test]
async fn a_write_whose_last_good_copy_cannot_be_written_is_not_durable_and_says_why() {
    let (_dir, path, data) = v1_file_and_data();
    std::fs::create_dir_all(data.join("last-good.json").join("inside")).unwrap();
    let running = Server::start(FileSource::new(&path), config(&data)).await;
    let cds = running.cds().await;
    let headers = [("Content-Type", "application/json")];
    let body = r#"{"config": {"agent.sample_n_per_3_secs": "50"}}"#;
    let reply = running.admin().send("PUT", "/api/v1/services/svc", &headers, body).await;
    let (status, answer) = (reply.status, reply.json());
    assert_eq!(status, 503, "{answer}");
    assert_eq!((answer["written"].as_bool(), answer["served"].as_bool()), (Some(true), Some(true)), "{answer}");
    assert_eq!(answer["durable"], false, "{answer}");
    let error = answer["error"].as_str().unwrap();
    assert!(error.contains("last-good.json"), "the answer names the copy: {error}");
    assert_eq!(cds.fetch("svc", "").await.unwrap().config[0].1, "50", "the change is in effect");

    std::fs::remove_dir_all(data.join("last-good.json")).unwrap();
    let body = r#"{"config": {"agent.sample_n_per_3_secs": "60"}}"#;
    let reply = running.admin().send("PUT", "/api/v1/services/svc", &headers, body).await;
    let (status, answer) = (reply.status, reply.json());
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["durable"], true, "{answer}");
    let copy = std::fs::read_to_string(data.join("last-good.json")).unwrap();
    assert!(copy.contains("60"), "the copy holds the acknowledged write: {copy}");
    running.stop().await.unwrap();
}
