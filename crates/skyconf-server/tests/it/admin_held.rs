//! Confirming and discarding a change held by the fleet-reset guard through the admin API, over
//! real sockets: a wiped file is held, `POST /api/v1/held/discard` keeps the last good table and
//! `POST /api/v1/held/confirm` installs the held change, both as admin writes (token, cross-site
//! rules), both 409 when nothing is held.

use skyconf_server::ServeConfig;
use skyconf_server::security::{Role, Secret};
use skyconf_sources::file::FileSource;
use skyconf_testkit::fixtures::temp_file;
use skyconf_testkit::server::{Server, eventually, loopback};

const TWO: &str = "configurations:\n  a:\n    k: v\n  b:\n    k: v\n";
const WIPED: &str = "configurations: {}\n";
const JSON: (&str, &str) = ("Content-Type", "application/json");

fn config() -> ServeConfig {
    let mut config = loopback();
    config.security.admin_tokens.add(Role::Read, Secret::new("reader"));
    config.security.admin_tokens.add(Role::Write, Secret::new("writer"));
    config
}

/// Wipes the file and waits until the guard holds the change; its `since_ms`.
async fn wipe(running: &Server, path: &std::path::Path, text: &str) -> u64 {
    std::fs::write(path, text).unwrap();
    eventually("the wipe is held", || running.served.held().is_some()).await;
    let status = running.admin().with_bearer("reader").get_json("/api/v1/status").await;
    status["held"]["since_ms"].as_u64().expect("held.since_ms")
}

#[tokio::test]
async fn a_held_change_is_discarded_or_confirmed_through_the_api() {
    let (_dir, path) = temp_file("agents.yaml", TWO);
    let running = Server::start(FileSource::new(&path), config()).await;
    let writer = running.admin().with_bearer("writer");

    let reply = writer.send("POST", "/api/v1/held/confirm", &[JSON], "").await;
    assert_eq!(reply.status, 409, "nothing is held: {}", reply.body);
    assert!(reply.json()["error"].as_str().unwrap().contains("nothing is held"), "{}", reply.body);
    assert_eq!(writer.send("POST", "/api/v1/held/discard", &[JSON], "").await.status, 409);

    let since = wipe(&running, &path, WIPED).await;
    let version = running.served.snapshot().version;
    // Writes: a read token, no token, a cross-site request and a form are refused.
    let reader = running.admin().with_bearer("reader");
    assert_eq!(reader.send("POST", "/api/v1/held/confirm", &[JSON], "").await.status, 403);
    assert_eq!(running.admin().send("POST", "/api/v1/held/confirm", &[JSON], "").await.status, 401);
    let cross_site = [JSON, ("Sec-Fetch-Site", "cross-site")];
    assert_eq!(writer.send("POST", "/api/v1/held/confirm", &cross_site, "").await.status, 403);
    assert_eq!(running.admin().send("POST", "/api/v1/held/confirm", &[], "").await.status, 403, "a form");
    let reply = writer.send("POST", "/api/v1/held/confirm?dry_run=true", &[JSON], "").await;
    assert_eq!(reply.status, 400, "a dry run must not confirm: {}", reply.body);
    let reply = writer.send("POST", "/api/v1/held/confirm", &[JSON], r#"{"since_ms": 1}"#).await;
    assert_eq!(reply.status, 409, "not the change the operator saw: {}", reply.body);
    assert!(running.served.held().is_some(), "still held after the refusals");
    assert_eq!(running.served.snapshot().version, version);

    // Discard: the last good table stays, and the same document is not held again.
    let reply = writer.send("POST", "/api/v1/held/discard", &[JSON], &format!(r#"{{"since_ms": {since}}}"#)).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["discarded"], true);
    assert_eq!(reply.json()["services"], 2);
    assert!(running.served.held().is_none());
    assert_eq!(running.served.snapshot().table.len(), 2, "the last good table is still served");
    assert_eq!(running.served.snapshot().version, version);
    assert_eq!(writer.send("POST", "/api/v1/held/discard", &[JSON], "").await.status, 409, "discarded once");

    // Another wipe (different text) is held again; confirm installs it now.
    wipe(&running, &path, "# wiped again\nconfigurations: {}\n").await;
    let reply = writer.send("POST", "/api/v1/held/confirm", &[("X-Skyconf-Author", "ops")], "").await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let answer = reply.json();
    assert_eq!(answer["confirmed"], true);
    assert_eq!(answer["services"], 0);
    assert_eq!(answer["version"], version + 1);
    assert!(answer["release"]["id"].is_u64(), "{answer}");
    assert!(running.served.held().is_none());
    assert!(running.served.snapshot().table.is_empty(), "the held change is installed");
    assert_eq!(writer.send("POST", "/api/v1/held/confirm", &[JSON], "").await.status, 409, "confirmed once");
    running.stop().await.unwrap();
}
