//! The independent OpAMP clients from the registries, against the server over real sockets:
//! PyPI `opentelemetry-opamp-client` (HTTP; remote config, its status, effective config,
//! heartbeats, its default 1 s request timeout) and npm `@elastic/opamp-client-node` (HTTP;
//! status, heartbeats, remote config, with and without an opt-in held poll). Each gets a
//! configuration, reports APPLIED, gets a change, and reports FAILED for one it cannot apply.
//!
//! The clients live in `tests/interop/` (a virtualenv and node_modules that
//! `scripts/deps/opamp.sh` installs from pinned files). Without them these tests print why
//! and pass, unless SKYCONF_REQUIRE_OPAMP_CLIENTS is set (scripts/test.sh sets it), when they fail.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use skyconf_opamp::backend::ApplyStatus;
use skyconf_opamp::memory::Event;
use skyconf_opamp::{Disconnect, InstanceUid, RemoteConfig, bits};
use tokio::io::AsyncBufReadExt as _;

use crate::util::Server;

const DEADLINE: Duration = Duration::from_secs(30);

fn interop_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop")
}

fn required() -> bool {
    std::env::var_os("SKYCONF_REQUIRE_OPAMP_CLIENTS").is_some_and(|v| !v.is_empty() && v != "0")
}

/// `Some(program)` when the client can run; otherwise says why (and fails when required).
fn client(what: &str, program: PathBuf, probe: &[&str]) -> Option<PathBuf> {
    let runs = std::process::Command::new(&program)
        .args(probe)
        .current_dir(interop_dir())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !runs {
        assert!(
            !required(),
            "SKYCONF_REQUIRE_OPAMP_CLIENTS is set but {what} cannot run (scripts/deps/opamp.sh installs it)"
        );
        eprintln!("skipping: {what} is not installed (scripts/deps/opamp.sh installs it)");
        return None;
    }
    Some(program)
}

fn python() -> Option<PathBuf> {
    client(
        "the PyPI client opentelemetry-opamp-client",
        interop_dir().join(".venv/bin/python"),
        &["-c", "import opentelemetry._opamp.agent"],
    )
}

fn node() -> Option<PathBuf> {
    client(
        "the npm client @elastic/opamp-client-node",
        PathBuf::from("node"),
        &["-e", "require('@elastic/opamp-client-node')"],
    )
}

/// A client process: its stdout's JSON lines, collected as they come.
struct Agent {
    child: tokio::process::Child,
    lines: Arc<Mutex<Vec<serde_json::Value>>>,
}

impl Agent {
    fn spawn(program: &Path, args: &[&str]) -> Self {
        let mut child = tokio::process::Command::new(program)
            .args(args)
            .current_dir(interop_dir())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the client starts");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let mut reader = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let sink = Arc::clone(&lines);
        tokio::spawn(async move {
            while let Ok(Some(line)) = reader.next_line().await {
                let value = serde_json::from_str(&line).unwrap_or(serde_json::Value::String(line));
                sink.lock().unwrap().push(value);
            }
        });
        Self { child, lines }
    }

    fn events(&self, name: &str) -> Vec<serde_json::Value> {
        self.lines.lock().unwrap().iter().filter(|l| l["event"] == name).cloned().collect()
    }

    /// The uid the client printed when it started.
    async fn uid(&self) -> InstanceUid {
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(started) = self.events("started").first() {
                let hex = started["instance_uid"].as_str().unwrap();
                let bytes: Vec<u8> =
                    (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
                assert_eq!(bytes.len(), 16, "the client's uid is 16 bytes");
                return InstanceUid::from_wire(&bytes).unwrap();
            }
            assert!(Instant::now() < deadline, "the client never started: {:?}", self.lines.lock().unwrap());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Closes stdin (the client disconnects and exits) and waits for the exit.
    async fn stop(mut self) -> Vec<serde_json::Value> {
        drop(self.child.stdin.take());
        let status = tokio::time::timeout(DEADLINE, self.child.wait()).await.expect("the client exits").unwrap();
        assert!(status.success(), "{status}: {:?}", self.lines.lock().unwrap());
        self.lines.lock().unwrap().clone()
    }
}

fn json(text: &str) -> RemoteConfig {
    RemoteConfig::single("sampling.json", "application/json", text.to_owned())
}

/// Waits for the agent's status for `config` and returns the recorded status.
async fn status(
    server: &Server,
    uid: InstanceUid,
    config: &RemoteConfig,
    status: ApplyStatus,
) -> skyconf_opamp::ConfigStatus {
    let events = server
        .backend
        .wait_for(DEADLINE, |events| {
            events.iter().any(|(u, e)| {
                *u == uid && matches!(e, Event::RemoteConfigStatus(s) if s.hash == *config.hash() && s.status == status)
            })
        })
        .await
        .unwrap();
    events
        .into_iter()
        .find_map(|(u, e)| match e {
            Event::RemoteConfigStatus(s) if u == uid && s.hash == *config.hash() && s.status == status => Some(s),
            _ => None,
        })
        .unwrap()
}

/// A server whose default configuration is `{"ratio": 0.5}`, and the npm client of service
/// `node-svc` on it (`hold`: the held poll it asks for, in seconds, if any), once it has
/// reported that configuration applied: the server, the client and its uid.
async fn npm_client_applied(node: &Path, hold: Option<&str>) -> (Server, Agent, InstanceUid) {
    let server = Server::start().await;
    let v1 = json(r#"{"ratio": 0.5}"#);
    server.backend.set_default(Some(v1.clone()));
    let url = server.url();
    let mut args = vec!["node_agent.js", &url, "node-svc", "0.5"];
    args.extend(hold);
    let agent = Agent::spawn(node, &args);
    let uid = agent.uid().await;
    status(&server, uid, &v1, ApplyStatus::Applied).await;
    (server, agent, uid)
}

/// Stops the npm client, which must not have failed a send, then the server.
async fn stop_npm_client(server: Server, agent: Agent) {
    let lines = agent.stop().await;
    let failures: Vec<_> = lines.iter().filter(|l| l["event"] == "send_failed").collect();
    assert!(failures.is_empty(), "{failures:?}");
    server.stop().await;
}

fn capabilities_of(server: &Server, uid: InstanceUid) -> Option<u64> {
    server.backend.events().into_iter().find_map(|(u, e)| match e {
        Event::Capabilities(c) if u == uid => Some(c),
        _ => None,
    })
}

#[tokio::test]
async fn the_pypi_client_applies_a_configuration_its_changes_and_reports_a_failure() {
    let Some(python) = python() else { return };
    // The default configuration: held polls are allowed, but this client does not ask for
    // them, so its 1 s request timeout is never reached.
    let server = Server::start().await;
    let v1 = json(r#"{"ratio": 0.5}"#);
    server.backend.set_service("py-svc", Some(v1.clone()));
    let script = interop_dir().join("python_agent.py");
    let agent = Agent::spawn(&python, &[script.to_str().unwrap(), &server.url(), "py-svc", "0.5"]);
    let uid = agent.uid().await;

    status(&server, uid, &v1, ApplyStatus::Applied).await;
    server
        .backend
        .wait_for(DEADLINE, |events| {
            events.iter().any(|(u, e)| {
                *u == uid
                    && matches!(e, Event::EffectiveConfig(files)
                        if files.iter().any(|(name, body)| name == "sampling.json" && body == br#"{"ratio": 0.5}"#))
            })
        })
        .await
        .unwrap();
    let caps = capabilities_of(&server, uid).unwrap();
    assert_eq!(
        caps,
        bits::agent::REPORTS_STATUS
            | bits::agent::ACCEPTS_REMOTE_CONFIG
            | bits::agent::REPORTS_EFFECTIVE_CONFIG
            | bits::agent::REPORTS_REMOTE_CONFIG
            | bits::agent::REPORTS_HEARTBEAT
    );

    let v2 = json(r#"{"ratio": 0.1}"#);
    server.backend.set_service("py-svc", Some(v2.clone()));
    status(&server, uid, &v2, ApplyStatus::Applied).await;

    // The client parses JSON only: a YAML file is refused, and it says so.
    let v3 = RemoteConfig::single("sampling.yaml", "text/yaml", "ratio: 1\n");
    server.backend.set_service("py-svc", Some(v3.clone()));
    let failed = status(&server, uid, &v3, ApplyStatus::Failed).await;
    assert!(failed.error_message.contains("sampling.yaml"), "{failed:?}");

    // Heartbeats go on in one session; then the client leaves.
    let seen = server.opamp.stats().messages;
    server.wait_stats(|s| s.messages >= seen + 2).await;
    assert_eq!(server.opamp.stats().sessions, 1);
    let lines = agent.stop().await;
    server
        .backend
        .wait_for(DEADLINE, |events| {
            events.iter().any(|(u, e)| *u == uid && *e == Event::Disconnected(Disconnect::Reported))
        })
        .await
        .unwrap();
    let failures: Vec<_> =
        lines.iter().filter(|l| l["event"] == "connect_failed" || l["event"] == "error_response").collect();
    assert!(failures.is_empty(), "no request failed or timed out: {failures:?}");
    server.stop().await;
}

#[tokio::test]
async fn the_npm_client_applies_a_configuration_its_changes_and_reports_a_failure() {
    let Some(node) = node() else { return };
    let (server, agent, uid) = npm_client_applied(&node, None).await;
    assert_eq!(
        capabilities_of(&server, uid),
        Some(
            bits::agent::REPORTS_STATUS
                | bits::agent::ACCEPTS_REMOTE_CONFIG
                | bits::agent::REPORTS_REMOTE_CONFIG
                | bits::agent::REPORTS_HEARTBEAT
        )
    );
    let v2 = json(r#"{"ratio": 0.1}"#);
    server.backend.set_default(Some(v2.clone()));
    status(&server, uid, &v2, ApplyStatus::Applied).await;
    let v3 = json("{not json");
    server.backend.set_default(Some(v3.clone()));
    let failed = status(&server, uid, &v3, ApplyStatus::Failed).await;
    assert!(failed.error_message.starts_with("sampling.json:"), "{failed:?}");

    let seen = server.opamp.stats().messages;
    server.wait_stats(|s| s.messages >= seen + 2).await;
    assert_eq!(server.opamp.stats().held_polls, 0, "a client that does not ask is never held");
    stop_npm_client(server, agent).await;
}

#[tokio::test]
async fn the_npm_client_that_asks_for_held_polls_gets_a_change_while_held() {
    let Some(node) = node() else { return };
    let (server, agent, uid) = npm_client_applied(&node, Some("20")).await;

    // Its next heartbeat is held: change the configuration while it waits.
    server.wait_stats(|s| s.held_polls == 1).await;
    let changed = Instant::now();
    let v2 = json(r#"{"ratio": 0.1}"#);
    server.backend.set_default(Some(v2.clone()));
    status(&server, uid, &v2, ApplyStatus::Applied).await;
    let latency = changed.elapsed();
    assert!(latency < Duration::from_secs(5), "{latency:?}");
    assert!(server.opamp.stats().pushes >= 1, "delivered as the answer to the held poll");

    // Held again, and a poll ends plainly at the end of its hold without failing the client.
    server.wait_stats(|s| s.held_polls == 1).await;
    stop_npm_client(server, agent).await;
}
