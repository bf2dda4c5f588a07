//! OpAMP in `skyconf serve` over real sockets: OpenTelemetry agents get the files of their
//! `opamp:` group from the served document, a document change reaches them, an unchanged
//! configuration is never resent, and `GET /api/v1/opamp/agents` and `skyconf_opamp_agents`
//! show what they reported until their session ends.
//!
//! Clients: two written here from the spec (plain HTTP with protobuf; WebSocket with its framing,
//! as no OpAMP WebSocket client is installable here), and the PyPI client
//! `opentelemetry-opamp-client`, from the virtualenv `scripts/deps/opamp.sh` installs in
//! skyconf-opamp's `tests/interop/` (skipped with a message when missing, unless
//! SKYCONF_REQUIRE_OPAMP_CLIENTS is set).

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use bytes::Bytes;
use prost::Message as _;
use serde_json::Value;
use skyconf_opamp::wire::{self, any_value::Value as AnyValue};
use skyconf_opamp::{bits, codec};
use skyconf_server::ServeConfig;
use skyconf_sources::file::FileSource;
use skyconf_testkit::fixtures::temp_file;
use skyconf_testkit::server::{AdminClient, Server, eventually_async, loopback};

/// A document whose `opamp:` group `svc` gives agents of `service` one JSON file.
pub(crate) fn document(service: &str, sampling: &str, rate: u32) -> String {
    format!(
        "configurations:\n  checkout:\n    agent.sample_n_per_3_secs: {rate}\nopamp:\n  - group: svc\n    match:\n      service.name: {service}\n    files:\n      {sampling}\n  - group: others\n    match:\n      service.name: other-*\n    files: {{}}\n"
    )
}

pub(crate) fn json_file(ratio: &str) -> String {
    format!("sampling.json:\n        body: '{{\"ratio\": {ratio}}}'")
}

pub(crate) fn config() -> ServeConfig {
    ServeConfig { opamp_addr: Some("127.0.0.1:0".parse().unwrap()), ..loopback() }
}

pub(crate) fn url(server: &Server) -> String {
    format!("http://{}/v1/opamp", server.opamp_addr.expect("the OpAMP port runs"))
}

/// A server with OpAMP on a file holding `text`: the file's directory and path, the server and
/// its admin client.
pub(crate) async fn serving(text: &str) -> (tempfile::TempDir, PathBuf, Server, AdminClient) {
    let (dir, path) = temp_file("agents.yaml", text);
    let server = Server::start(FileSource::new(&path), config()).await;
    let admin = server.admin();
    (dir, path, server, admin)
}

/// Writes `document` through the admin API; its answer.
pub(crate) async fn put(admin: &AdminClient, document: &str) -> Value {
    let reply = admin.send("PUT", "/api/v1/configurations", &[("content-type", "application/yaml")], document).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.json()
}

pub(crate) async fn agents(admin: &AdminClient) -> Vec<Value> {
    let listing = admin.get_json("/api/v1/opamp/agents").await;
    assert_eq!(listing["enabled"], true);
    listing["agents"].as_array().unwrap().clone()
}

/// Waits until the listing's row of `uid` satisfies `done`, and returns it.
pub(crate) async fn row(admin: &AdminClient, uid: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let mut found = Value::Null;
    eventually_async(what, async || {
        found = agents(admin).await.into_iter().find(|a| a["uid"] == uid).unwrap_or(Value::Null);
        done(&found)
    })
    .await;
    found
}

async fn gauge(admin: &AdminClient, status: &str) -> String {
    let metrics = admin.get("/metrics").await.body;
    let prefix = format!("skyconf_opamp_agents{{status=\"{status}\"}} ");
    metrics.lines().find(|l| l.starts_with(&prefix)).unwrap_or_default().to_owned()
}

const UID: [u8; 16] = [0x42; 16];

fn message(seq: u64, service: Option<&str>) -> wire::AgentToServer {
    let attribute = |key: &str, value: &str| wire::KeyValue {
        key: key.into(),
        value: Some(wire::AnyValue { value: Some(AnyValue::StringValue(value.into())) }),
    };
    wire::AgentToServer {
        instance_uid: Bytes::copy_from_slice(&UID),
        sequence_num: seq,
        capabilities: bits::agent::REPORTS_STATUS
            | bits::agent::ACCEPTS_REMOTE_CONFIG
            | bits::agent::REPORTS_REMOTE_CONFIG
            | bits::agent::REPORTS_HEALTH,
        agent_description: service.map(|service| wire::AgentDescription {
            identifying_attributes: vec![attribute("service.name", service)],
            non_identifying_attributes: vec![attribute("host.name", "h1")],
        }),
        ..Default::default()
    }
}

fn with_status(mut msg: wire::AgentToServer, hash: &Bytes, status: wire::RemoteConfigStatuses) -> wire::AgentToServer {
    msg.remote_config_status = Some(wire::RemoteConfigStatus {
        last_remote_config_hash: hash.clone(),
        status: status as i32,
        error_message: if status == wire::RemoteConfigStatuses::Failed { "bad ratio".into() } else { String::new() },
    });
    msg
}

async fn post(http: &reqwest::Client, url: &str, msg: &wire::AgentToServer) -> wire::ServerToAgent {
    let response =
        http.post(url).header("content-type", codec::CONTENT_TYPE).body(msg.encode_to_vec()).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let gzipped = response.headers().get("content-encoding").is_some_and(|v| v == "gzip");
    let body = response.bytes().await.unwrap();
    let body = if gzipped { Bytes::from(codec::gunzip(&body, 1 << 20).unwrap()) } else { body };
    wire::ServerToAgent::decode(body).unwrap()
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_gets_its_group_files_changes_only_when_they_change_and_is_listed_until_it_leaves() {
    let (_dir, _, server, admin) = serving(&document("checkout", &json_file("0.5"), 10)).await;
    let (http, url) = (reqwest::Client::builder().no_gzip().build().unwrap(), url(&server));

    let first = post(&http, &url, &message(1, Some("checkout"))).await;
    let remote = first.remote_config.expect("its group's files are offered");
    let files = &remote.config.as_ref().unwrap().config_map;
    assert_eq!(&files["sampling.json"].body[..], br#"{"ratio": 0.5}"#);
    assert_eq!(files["sampling.json"].content_type, "application/json", "from the extension");
    let v1 = remote.config_hash.clone();
    let applied = with_status(message(2, None), &v1, wire::RemoteConfigStatuses::Applied);
    assert!(post(&http, &url, &applied).await.remote_config.is_none());

    let uid = hex(&UID);
    let listed =
        row(&admin, &uid, "the agent is listed as applied", |r| r["remote_config_status"]["status"] == "applied").await;
    assert_eq!(listed["transport"], "http");
    assert_eq!(listed["group"], "svc");
    assert_eq!(listed["offered_hash"], hex(&v1));
    assert_eq!(listed["remote_config_status"]["config_hash"], hex(&v1));
    assert_eq!(listed["current"], true);
    assert!(
        listed["attributes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["key"] == "service.name" && a["value"] == "checkout" && a["identifying"] == true)
    );
    assert_eq!(gauge(&admin, "applied").await, "skyconf_opamp_agents{status=\"applied\"} 1");

    // A change elsewhere in the document keeps the group's hash: nothing is resent.
    put(&admin, &document("checkout", &json_file("0.5"), 20)).await;
    eventually_async("the SkyWalking change is served", async || {
        server.served.snapshot().table.get("checkout").unwrap().entries()[0].1 == "20"
    })
    .await;
    assert!(post(&http, &url, &message(3, None)).await.remote_config.is_none(), "unchanged: not resent");

    // A change of the group's files is offered at the next poll; a FAILED report is shown.
    put(&admin, &document("checkout", &json_file("0.1"), 20)).await;
    let changed = post(&http, &url, &message(4, None)).await.remote_config.expect("the change is offered");
    assert_ne!(changed.config_hash, v1);
    assert_eq!(&changed.config.unwrap().config_map["sampling.json"].body[..], br#"{"ratio": 0.1}"#);
    let failed = with_status(message(5, None), &changed.config_hash, wire::RemoteConfigStatuses::Failed);
    assert!(post(&http, &url, &failed).await.remote_config.is_none(), "a failed configuration is not resent");
    let listed = row(&admin, &uid, "the failure is listed", |r| r["remote_config_status"]["status"] == "failed").await;
    assert_eq!(listed["remote_config_status"]["error_message"], "bad ratio");
    assert_eq!(listed["remote_config_status"]["config_hash"], hex(&changed.config_hash));
    assert_eq!(gauge(&admin, "failed").await, "skyconf_opamp_agents{status=\"failed\"} 1");

    // The agent leaves: its row goes with its session.
    let mut bye = message(6, None);
    bye.agent_disconnect = Some(wire::AgentDisconnect {});
    post(&http, &url, &bye).await;
    assert!(agents(&admin).await.is_empty());
    assert_eq!(gauge(&admin, "failed").await, "skyconf_opamp_agents{status=\"failed\"} 0");
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_poll_is_answered_by_the_document_change_that_changes_its_files() {
    let (_dir, _, server, admin) = serving(&document("checkout", &json_file("0.5"), 10)).await;
    let (http, url) = (reqwest::Client::builder().no_gzip().build().unwrap(), url(&server));
    let v1 = post(&http, &url, &message(1, Some("checkout"))).await.remote_config.unwrap().config_hash;
    post(&http, &url, &with_status(message(2, None), &v1, wire::RemoteConfigStatuses::Applied)).await;

    // A heartbeat that asks for a 20 s hold waits for the store.
    let held = {
        let (http, url) = (http.clone(), url.clone());
        tokio::spawn(async move {
            let response = http
                .post(&url)
                .header("content-type", codec::CONTENT_TYPE)
                .header(skyconf_opamp::hold::HEADER, "20")
                .body(message(3, None).encode_to_vec())
                .send()
                .await
                .unwrap();
            wire::ServerToAgent::decode(response.bytes().await.unwrap()).unwrap()
        })
    };
    eventually_async("the poll is held", async || {
        let metrics = admin.get("/metrics").await.body;
        metrics.lines().any(|l| l == "skyconf_opamp_held_polls 1")
    })
    .await;
    let changed = std::time::Instant::now();
    put(&admin, &document("checkout", &json_file("0.1"), 10)).await;
    let answer = tokio::time::timeout(Duration::from_secs(10), held).await.expect("answered by the change").unwrap();
    let remote = answer.remote_config.expect("the change");
    assert_eq!(&remote.config.unwrap().config_map["sampling.json"].body[..], br#"{"ratio": 0.1}"#);
    assert!(changed.elapsed() < Duration::from_secs(5), "{:?}", changed.elapsed());
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_agent_is_pushed_the_document_change_and_its_row_ends_with_the_connection() {
    use futures_util::SinkExt as _;
    use tokio_tungstenite::tungstenite::Message;
    let (_dir, _, server, admin) = serving(&document("checkout", &json_file("0.5"), 10)).await;
    let ws_url = format!("ws://{}/v1/opamp", server.opamp_addr.unwrap());
    let (mut socket, _) = tokio_tungstenite::connect_async(ws_url).await.unwrap();
    // The spec's framing: a varint header, 0, then the message.
    let frame = |msg: &wire::AgentToServer| {
        let mut frame = vec![0u8];
        msg.encode(&mut frame).unwrap();
        Message::Binary(frame.into())
    };

    socket.send(frame(&message(1, Some("checkout")))).await.unwrap();
    let first = next_message(&mut socket).await.remote_config.expect("its group's files");
    socket
        .send(frame(&with_status(message(2, None), &first.config_hash, wire::RemoteConfigStatuses::Applied)))
        .await
        .unwrap();
    let uid = hex(&UID);
    let listed = row(&admin, &uid, "listed as applied", |r| r["remote_config_status"]["status"] == "applied").await;
    assert_eq!(listed["transport"], "websocket");
    assert_eq!(gauge(&admin, "applied").await, "skyconf_opamp_agents{status=\"applied\"} 1");

    // The store changes: the server pushes the new files without being asked.
    put(&admin, &document("checkout", &json_file("0.1"), 10)).await;
    let pushed = loop {
        if let Some(remote) = next_message(&mut socket).await.remote_config {
            break remote;
        }
    };
    assert_ne!(pushed.config_hash, first.config_hash);
    assert_eq!(&pushed.config.unwrap().config_map["sampling.json"].body[..], br#"{"ratio": 0.1}"#);

    socket.close(None).await.unwrap();
    eventually_async("the row ends with the connection", async || agents(&admin).await.is_empty()).await;
    server.stop().await.unwrap();
}

/// The next OpAMP message on a WebSocket (pings skipped).
async fn next_message<S>(socket: &mut S) -> wire::ServerToAgent
where
    S: futures_util::Stream<
            Item = Result<tokio_tungstenite::tungstenite::Message, tokio_tungstenite::tungstenite::Error>,
        > + Unpin,
{
    use futures_util::StreamExt as _;
    loop {
        let next = tokio::time::timeout(Duration::from_secs(10), socket.next()).await.expect("a message in time");
        if let tokio_tungstenite::tungstenite::Message::Binary(bytes) = next.expect("open").unwrap() {
            assert_eq!(bytes[0], 0, "header 0");
            return wire::ServerToAgent::decode(&bytes[1..]).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_opamp_addr_there_is_no_port_and_the_listing_says_so_and_is_described() {
    let (_dir, path) = temp_file("agents.yaml", &document("checkout", &json_file("0.5"), 10));
    let server = Server::start(FileSource::new(&path), loopback()).await;
    assert!(server.opamp_addr.is_none());
    let listing = server.admin().get_json("/api/v1/opamp/agents").await;
    assert_eq!((&listing["enabled"], &listing["agents"]), (&serde_json::json!(false), &serde_json::json!([])));
    let openapi = server.admin().get_json("/api/v1/openapi.json").await;
    assert!(openapi["paths"]["/api/v1/opamp/agents"]["get"].is_object(), "the route is described");
    server.stop().await.unwrap();
}

pub(crate) fn interop_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../skyconf-opamp/tests/interop")
}

/// The PyPI client's Python, or `None` (with a message; a failure when required).
pub(crate) fn python() -> Option<PathBuf> {
    let program = interop_dir().join(".venv/bin/python");
    let runs = std::process::Command::new(&program)
        .args(["-c", "import opentelemetry._opamp.agent"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if runs {
        return Some(program);
    }
    let required = std::env::var_os("SKYCONF_REQUIRE_OPAMP_CLIENTS").is_some_and(|v| !v.is_empty() && v != "0");
    assert!(
        !required,
        "SKYCONF_REQUIRE_OPAMP_CLIENTS is set but the PyPI OpAMP client is not installed (scripts/deps/opamp.sh)"
    );
    eprintln!(
        "skipping: the PyPI client opentelemetry-opamp-client is not installed (scripts/deps/opamp.sh installs it)"
    );
    None
}

/// Starts one of the interop agents (`program script args`), with `env`; stdin piped (closing
/// it stops the agent, and so does dropping it when a test fails), stdout discarded.
pub(crate) fn spawn(program: &Path, script: &str, args: &[&str], env: &[(&str, PathBuf)]) -> Child {
    let mut command = std::process::Command::new(program);
    command.arg(interop_dir().join(script)).args(args).stdin(Stdio::piped()).stdout(Stdio::null());
    for (name, value) in env {
        command.env(name, value);
    }
    command.spawn().unwrap()
}

/// Closes the agent's stdin and waits for it to exit successfully.
pub(crate) async fn stop(mut child: Child) {
    drop(child.stdin.take());
    let exit = tokio::task::spawn_blocking(move || child.wait());
    let status = tokio::time::timeout(Duration::from_secs(30), exit).await.unwrap().unwrap().unwrap();
    assert!(status.success(), "{status}");
}

/// Whether a listed row applied what it is offered now.
pub(crate) fn applied(r: &Value) -> bool {
    r["remote_config_status"]["status"] == "applied" && r["current"] == true
}

/// Waits until an agent applies its group's file; its uid.
pub(crate) async fn first_applied(admin: &AdminClient) -> String {
    let mut uid = String::new();
    eventually_async("the client applies its group's file", async || {
        match agents(admin).await.into_iter().find(applied) {
            Some(row) => {
                uid = row["uid"].as_str().unwrap().to_owned();
                true
            }
            None => false,
        }
    })
    .await;
    uid
}

/// The agent `uid` of `service`, offered `v1` now, applies the next change of its group's file;
/// then a `file` its client cannot parse fails, and the listing says why.
pub(crate) async fn applies_the_next_change_and_lists_a_failure(
    admin: &AdminClient,
    uid: &str,
    service: &str,
    v1: &Value,
    file: &str,
) {
    put(admin, &document(service, &json_file("0.1"), 10)).await;
    let second = row(admin, uid, "the change is applied", |r| applied(r) && r["offered_hash"] != *v1).await;
    assert_eq!(second["remote_config_status"]["config_hash"], second["offered_hash"]);

    put(admin, &document(service, &format!("{file}:\n        body: 'ratio: 1'"), 10)).await;
    let failed = row(admin, uid, "the failure is listed", |r| r["remote_config_status"]["status"] == "failed").await;
    assert_eq!(failed["remote_config_status"]["config_hash"], failed["offered_hash"]);
    assert!(failed["remote_config_status"]["error_message"].as_str().unwrap().contains(file), "{failed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pypi_client_applies_its_group_gets_a_document_change_and_its_failure_is_listed() {
    let Some(python) = python() else { return };
    let (_dir, _, server, admin) = serving(&document("py-svc", &json_file("0.5"), 10)).await;
    let child = spawn(&python, "python_agent.py", &[&url(&server), "py-svc", "0.5"], &[]);

    let uid = first_applied(&admin).await;
    let first =
        row(&admin, &uid, "its effective configuration is listed", |r| r["effective_config_hash"].is_string()).await;
    assert_eq!(first["group"], "svc");
    // The client parses JSON only: a YAML file fails.
    applies_the_next_change_and_lists_a_failure(&admin, &uid, "py-svc", &first["offered_hash"], "sampling.yaml").await;

    stop(child).await;
    eventually_async("the row ends with the session", async || agents(&admin).await.is_empty()).await;
    server.stop().await.unwrap();
}

/// An agent written here that reports everything the fleet view shows: over plain HTTP to
/// `url`, agent `uid` of `service` (on host `host`) takes its remote configuration, then reports
/// its health, its effective configuration (when it applied) and `status` about that
/// configuration (`error` as the failure's message and the health's last error). Its session
/// stays until it expires or the server stops.
pub(crate) async fn reporting_agent(
    url: &str,
    uid: [u8; 16],
    service: &str,
    host: &str,
    status: wire::RemoteConfigStatuses,
    error: &str,
) {
    let http = reqwest::Client::builder().no_gzip().build().unwrap();
    let attribute = |key: &str, value: &str| wire::KeyValue {
        key: key.into(),
        value: Some(wire::AnyValue { value: Some(AnyValue::StringValue(value.into())) }),
    };
    let mut hello = message(1, None);
    hello.instance_uid = Bytes::copy_from_slice(&uid);
    hello.capabilities |= bits::agent::REPORTS_EFFECTIVE_CONFIG;
    hello.agent_description = Some(wire::AgentDescription {
        identifying_attributes: vec![attribute("service.name", service)],
        non_identifying_attributes: vec![attribute("host.name", host)],
    });
    let offered = post(&http, url, &hello).await.remote_config.expect("its group's files");
    let applied = status == wire::RemoteConfigStatuses::Applied;
    let mut report = with_status(message(2, None), &offered.config_hash, status);
    report.instance_uid = Bytes::copy_from_slice(&uid);
    report.capabilities = hello.capabilities;
    if let Some(remote) = &mut report.remote_config_status {
        remote.error_message = error.to_owned();
    }
    report.health = Some(wire::ComponentHealth {
        healthy: applied,
        last_error: error.to_owned(),
        status: if applied { "running".into() } else { "degraded".into() },
        ..Default::default()
    });
    if applied {
        report.effective_config = Some(wire::EffectiveConfig { config_map: offered.config });
    }
    post(&http, url, &report).await;
}
