//! Staged rollouts of `opamp:` groups over real sockets: OpenTelemetry agents reached by a wave
//! are offered the candidate's files, the wave is gated on the `RemoteConfigStatus` they report
//! (APPLIED passes, FAILED reverts at once with the agent's error), an agent that stops reporting
//! reverts it after `lost_after_s`, a revert offers the reached agents their previous files again
//! and shows what they report of them; a mixed rollout judges SkyWalking instances and OpAMP
//! agents together; releases, diffs and rollback name and restore OpAMP-only changes.
//!
//! Agents: OpAMP HTTP clients written here from the spec (they poll every 100 ms, apply
//! `sampling.json` unless its ratio is above 1, and can be killed), a WebSocket client written
//! here from the spec (no OpAMP WebSocket client is installable here), skyconf's Rust agent library
//! for the SkyWalking side, and the PyPI client `opentelemetry-opamp-client` for one end-to-end
//! case (see `opamp.rs` for how it is found).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use prost::Message as _;
use serde_json::{Value, json};
use skyconf_opamp::wire::{self, any_value::Value as AnyValue};
use skyconf_opamp::{bits, codec};
use skyconf_testkit::server::AdminClient;

use crate::opamp::{agents, put, serving, url};
use crate::rollouts::{TestAgent, rollout, start_rollout, stop_all, until, until_state};

/// A document: the SkyWalking service `svc` samples `rate`; the `opamp:` group `collectors`
/// gives agents of `otel` a `sampling.json` of `ratio`.
pub(crate) fn document(rate: u32, ratio: &str) -> String {
    format!(
        "configurations:\n  svc:\n    agent.sample_n_per_3_secs: {rate}\nopamp:\n  - group: collectors\n    match:\n      service.name: otel\n    files:\n      sampling.json:\n        body: '{{\"ratio\": {ratio}}}'\n"
    )
}

/// What one agent went through.
#[derive(Debug, Default, Clone)]
pub(crate) struct Seen {
    /// Every `sampling.json` body offered, in order.
    pub(crate) offered: Vec<String>,
    /// The body it applied last.
    pub(crate) applied: Option<String>,
}

/// An OpAMP agent over plain HTTP, from the spec: a full report first (and whenever asked), then
/// a heartbeat every 100 ms; each offered configuration is applied, unless its ratio is above 1
/// (FAILED, with why), and the status is reported once.
pub(crate) struct OtelAgent {
    pub(crate) instance: String,
    seen: Arc<Mutex<Seen>>,
    task: tokio::task::JoinHandle<()>,
}

impl OtelAgent {
    pub(crate) fn spawn(url: &str, index: u8) -> Self {
        Self::spawn_holding(url, index, None)
    }

    /// An agent whose heartbeats ask for polls held `hold` seconds (`OpAMP-Hold`).
    fn spawn_holding(url: &str, index: u8, hold: Option<u64>) -> Self {
        let instance = format!("otel-{index}");
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (url, name, memory) = (url.to_owned(), instance.clone(), Arc::clone(&seen));
        let task = tokio::spawn(async move {
            let http = reqwest::Client::builder().no_gzip().build().unwrap();
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            let (mut seq, mut full, mut status) = (0u64, true, None::<wire::RemoteConfigStatus>);
            let mut last_status = None::<wire::RemoteConfigStatus>;
            loop {
                tick.tick().await;
                seq += 1;
                let mut msg = message(index, &name, seq, full);
                msg.remote_config_status = status.take().or_else(|| full.then(|| last_status.clone()).flatten());
                let bare = msg.remote_config_status.is_none() && msg.agent_description.is_none();
                let Some(answer) = send(&http, &url, &msg, hold.filter(|_| bare)).await else { continue };
                full = answer.flags & bits::REPORT_FULL_STATE != 0;
                let Some(remote) = answer.remote_config else { continue };
                status = Some(apply(&memory, remote));
                last_status.clone_from(&status);
            }
        });
        Self { instance, seen, task }
    }

    pub(crate) fn seen(&self) -> Seen {
        self.seen.lock().unwrap().clone()
    }

    pub(crate) fn applied_ratio(&self, ratio: &str) -> bool {
        self.seen().applied.is_some_and(|b| b == format!("{{\"ratio\": {ratio}}}"))
    }
}

impl Drop for OtelAgent {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Applies an offered configuration as the agents here do: its `sampling.json`, unless its ratio
/// is above 1 (FAILED, with why); what `seen` remembers, and the status to report.
fn apply(seen: &Mutex<Seen>, remote: wire::AgentRemoteConfig) -> wire::RemoteConfigStatus {
    let body = remote
        .config
        .as_ref()
        .and_then(|c| c.config_map.get("sampling.json"))
        .map(|f| String::from_utf8_lossy(&f.body).into_owned())
        .unwrap_or_default();
    let ratio: f64 = serde_json::from_str::<Value>(&body).ok().and_then(|v| v["ratio"].as_f64()).unwrap_or(0.0);
    let (code, error) = if ratio > 1.0 {
        (wire::RemoteConfigStatuses::Failed, format!("ratio {ratio} is out of range"))
    } else {
        (wire::RemoteConfigStatuses::Applied, String::new())
    };
    let mut seen = seen.lock().unwrap();
    seen.offered.push(body.clone());
    if error.is_empty() {
        seen.applied = Some(body);
    }
    wire::RemoteConfigStatus { last_remote_config_hash: remote.config_hash, status: code as i32, error_message: error }
}

/// An OpAMP agent over WebSocket, written from the spec (no OpAMP WebSocket client is installable
/// here): one connection, each message after the spec's header (a varint, 0); a full report
/// first and whenever asked, then the status of each configuration it is pushed, applied as
/// [`apply`] does. It sends no heartbeat: its open connection is what makes it live.
pub(crate) struct WsAgent {
    seen: Arc<Mutex<Seen>>,
    task: tokio::task::JoinHandle<()>,
}

impl WsAgent {
    pub(crate) async fn connect(addr: std::net::SocketAddr, index: u8) -> Self {
        use futures_util::{SinkExt as _, StreamExt as _};
        use tokio_tungstenite::tungstenite::Message as Frame;
        let (socket, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/v1/opamp")).await.unwrap();
        let (mut out, mut incoming) = socket.split();
        let frame = |msg: &wire::AgentToServer| {
            let mut bytes = vec![0u8];
            msg.encode(&mut bytes).unwrap();
            Frame::Binary(bytes.into())
        };
        let (name, seen) = (format!("otel-{index}"), Arc::new(Mutex::new(Seen::default())));
        let memory = Arc::clone(&seen);
        let task = tokio::spawn(async move {
            let mut seq = 1;
            let mut last_status = None::<wire::RemoteConfigStatus>;
            if out.send(frame(&message(index, &name, seq, true))).await.is_err() {
                return;
            }
            while let Some(Ok(received)) = incoming.next().await {
                let Frame::Binary(bytes) = received else { continue };
                assert_eq!(bytes.first(), Some(&0), "the spec's header");
                let answer = wire::ServerToAgent::decode(&bytes[1..]).unwrap();
                let full = answer.flags & bits::REPORT_FULL_STATE != 0;
                let status = answer.remote_config.map(|remote| apply(&memory, remote));
                if status.is_none() && !full {
                    continue;
                }
                if status.is_some() {
                    last_status.clone_from(&status);
                }
                seq += 1;
                let mut msg = message(index, &name, seq, full);
                msg.remote_config_status = status.or_else(|| last_status.clone());
                if out.send(frame(&msg)).await.is_err() {
                    return;
                }
            }
        });
        Self { seen, task }
    }

    fn seen(&self) -> Seen {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for WsAgent {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn message(index: u8, instance: &str, seq: u64, full: bool) -> wire::AgentToServer {
    let attribute = |key: &str, value: &str| wire::KeyValue {
        key: key.into(),
        value: Some(wire::AnyValue { value: Some(AnyValue::StringValue(value.into())) }),
    };
    wire::AgentToServer {
        instance_uid: Bytes::from(vec![index + 1; 16]),
        sequence_num: seq,
        capabilities: bits::agent::REPORTS_STATUS
            | bits::agent::ACCEPTS_REMOTE_CONFIG
            | bits::agent::REPORTS_REMOTE_CONFIG,
        agent_description: full.then(|| wire::AgentDescription {
            identifying_attributes: vec![attribute("service.name", "otel"), attribute("service.instance.id", instance)],
            non_identifying_attributes: vec![],
        }),
        ..Default::default()
    }
}

/// One exchange (held up to `hold` seconds when asked); `None` when the server is not reachable
/// (it is stopping).
async fn send(
    http: &reqwest::Client,
    url: &str,
    msg: &wire::AgentToServer,
    hold: Option<u64>,
) -> Option<wire::ServerToAgent> {
    let mut request = http.post(url).header("content-type", codec::CONTENT_TYPE).body(msg.encode_to_vec());
    if let Some(seconds) = hold {
        request = request.header(skyconf_opamp::hold::HEADER, seconds.to_string());
    }
    let response = request.send().await.ok()?;
    let body = response.bytes().await.ok()?;
    wire::ServerToAgent::decode(body).ok()
}

/// Waits until `count` OpAMP agents are listed as having applied what they are offered.
async fn applied(admin: &AdminClient, count: usize) {
    until("the OpAMP agents applied their group's file", async || {
        let agents = agents(admin).await;
        agents.len() == count
            && agents.iter().all(|a| a["remote_config_status"]["status"] == "applied" && a["current"] == true)
    })
    .await;
}

pub(crate) fn start(document: &str, waves: Value, gates: Value) -> Value {
    let mut body = json!({"document": document, "advance": "auto", "author": "ops"});
    body["waves"] = waves;
    body["gates"] = gates;
    body
}

pub(crate) fn last_event(rollout: &Value) -> String {
    rollout["events"].as_array().unwrap().last().unwrap()["message"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_status_reverts_the_wave_at_once_and_the_reached_agent_goes_back() {
    let (_dir, _, server, admin) = serving(&document(10, "0.5")).await;
    let agents: Vec<OtelAgent> = (0..3).map(|i| OtelAgent::spawn(&url(&server), i)).collect();
    applied(&admin, 3).await;

    // Only the `opamp:` group changes: the rollout judges its agents.
    let gates = json!({"apply_within_s": 30, "bake_s": 60, "lost_after_s": 20});
    let body =
        start_rollout(&admin, &start(&document(10, "2"), json!([{"instances": 1}, {"share": "100%"}]), gates)).await;
    assert_eq!(body["rollout"]["services"], json!([]));
    assert_eq!(body["rollout"]["opamp_groups"], json!(["collectors"]));
    let picked = body["rollout"]["named"]["opamp:collectors"][0].as_str().unwrap().to_owned();

    let reverted = until_state(&admin, "reverted").await;
    let said = last_event(&reverted);
    assert_eq!(
        said,
        format!("Wave 1: 1 reached agent(s) reported FAILED: {picked} (opamp:collectors): ratio 2 is out of range")
    );

    // The reached agent is offered its previous file again, applies it, and the rollout shows it.
    let agent = agents.iter().find(|a| a.instance == picked).unwrap();
    until("the reached agent is given back its file", async || agent.applied_ratio("0.5")).await;
    let mut back = Value::Null;
    until("the rollout shows the status it reported after the revert", async || {
        back = rollout(&admin).await["after_revert"].clone();
        back[0]["status_of"] == "previous"
    })
    .await;
    assert_eq!(back.as_array().unwrap().len(), 1, "{back:#}");
    assert_eq!((back[0]["service"].as_str(), back[0]["instance"].as_str()), (Some("opamp:collectors"), Some(&*picked)));
    assert_eq!(back[0]["remote_config_status"]["status"], "applied");
    assert_eq!(back[0]["applied"], true, "it holds what it is offered now: {back:#}");
    let offered: Vec<String> = agent.seen().offered;
    assert_eq!(offered.len(), 3, "v1, the candidate, v1 again: {offered:?}");
    for other in agents.iter().filter(|a| a.instance != picked) {
        assert_eq!(other.seen().offered.len(), 1, "{} is not in wave 1: {:?}", other.instance, other.seen());
    }
    server.stop().await.unwrap();
}

/// A WebSocket agent over its one connection: a wave of a file it fails is reverted and the
/// server pushes it its file back; a wave it applies completes, and nothing is pushed again when
/// the candidate becomes the document.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_agent_fails_a_wave_is_pushed_its_file_back_and_completes_the_next() {
    let (_dir, _, server, admin) = serving(&document(10, "0.5")).await;
    let agent = WsAgent::connect(server.opamp_addr.unwrap(), 0).await;
    applied(&admin, 1).await;
    assert_eq!(agents(&admin).await[0]["transport"], "websocket");

    let gates = json!({"apply_within_s": 30, "bake_s": 1, "lost_after_s": 20});
    let waves = json!([{"share": "100%"}]);
    start_rollout(&admin, &start(&document(10, "2"), waves.clone(), gates.clone())).await;
    let reverted = until_state(&admin, "reverted").await;
    assert_eq!(
        last_event(&reverted),
        "Wave 1: 1 reached agent(s) reported FAILED: otel-0 (opamp:collectors): ratio 2 is out of range"
    );
    until("the server pushes it its file back", async || agent.seen().applied.as_deref() == Some("{\"ratio\": 0.5}"))
        .await;
    until("the rollout shows it went back", async || {
        let back = rollout(&admin).await["after_revert"].clone();
        back[0]["status_of"] == "previous" && back[0]["remote_config_status"]["status"] == "applied"
    })
    .await;

    start_rollout(&admin, &start(&document(10, "0.25"), waves, gates)).await;
    until_state(&admin, "completed").await;
    applied(&admin, 1).await;
    let offered = agent.seen().offered;
    let ratios: Vec<&str> = ["0.5", "2", "0.5", "0.25"].into();
    let want: Vec<String> = ratios.iter().map(|r| format!("{{\"ratio\": {r}}}")).collect();
    assert_eq!(offered, want, "v1, the failed candidate, v1 again, the next candidate, and nothing more");
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_rollout_completes_when_skywalking_instances_and_opamp_agents_apply() {
    let (_dir, path, server, admin) = serving(&document(10, "0.5")).await;
    let otel: Vec<OtelAgent> = (0..2).map(|i| OtelAgent::spawn(&url(&server), i)).collect();
    let skywalking: Vec<TestAgent> =
        (0..2).map(|i| TestAgent::spawn(server.grpc_addr, &format!("pod-{i}"), &[])).collect();
    applied(&admin, 2).await;
    until("the SkyWalking instances applied", async || {
        let body = admin.get_json("/api/v1/instances").await;
        let instances = body["instances"].as_array().unwrap();
        instances.len() == 2 && instances.iter().all(|i| i["services"][0]["state"] == "applied")
    })
    .await;

    let gates = json!({"apply_within_s": 30, "bake_s": 1, "lost_after_s": 20});
    let body = start_rollout(&admin, &start(&document(20, "0.25"), json!([{"share": "100%"}]), gates)).await;
    assert_eq!(
        (&body["rollout"]["services"], &body["rollout"]["opamp_groups"]),
        (&json!(["svc"]), &json!(["collectors"]))
    );
    let wave = last_event(&body["rollout"]);
    for unit in ["svc", "opamp:collectors"] {
        assert!(wave.contains(&format!("2 of 2 live identified instance(s) of {unit}")), "{wave}");
    }

    let done = until_state(&admin, "completed").await;
    let messages: Vec<&str> =
        done["events"].as_array().unwrap().iter().map(|e| e["message"].as_str().unwrap()).collect();
    assert!(messages.contains(&"Wave 1: all 4 reached agent(s) applied"), "{messages:#?}");
    assert!(otel.iter().all(|a| a.applied_ratio("0.25")));
    until("the SkyWalking agents hold the candidate", async || {
        skywalking.iter().all(|a| a.value().as_deref() == Some("20"))
    })
    .await;
    assert_eq!(std::fs::read_to_string(&path).unwrap(), document(20, "0.25"), "the candidate is the document");

    // The release names both kinds of change.
    let release = admin.get_json(&format!("/api/v1/releases/{}", done["release"])).await;
    assert_eq!(release["changes"][0]["service"], "svc", "{release:#}");
    assert_eq!(
        release["opamp_changes"],
        json!([{"group": "collectors", "change": "modified", "files": ["sampling.json"], "matching": false}])
    );
    stop_all(skywalking).await;
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_opamp_agent_reverts_the_wave_after_lost_after() {
    let (_dir, _, server, admin) = serving(&document(10, "0.5")).await;
    let mut agents: Vec<OtelAgent> = (0..2).map(|i| OtelAgent::spawn(&url(&server), i)).collect();
    applied(&admin, 2).await;

    let gates = json!({"apply_within_s": 30, "bake_s": 600, "lost_after_s": 5});
    start_rollout(&admin, &start(&document(10, "0.25"), json!([{"share": "100%"}]), gates)).await;
    until("both agents applied the candidate", async || {
        rollout(&admin).await["events"].as_array().unwrap().iter().any(|e| e["kind"] == "applied")
    })
    .await;
    // Killed: it stops reporting without saying goodbye; its HTTP session outlives lost_after_s.
    let killed = agents.remove(0);
    let name = killed.instance.clone();
    drop(killed);
    let reverted = until_state(&admin, "reverted").await;
    assert_eq!(
        last_event(&reverted),
        format!("Wave 1: 1 reached agent(s) disappeared, with no live row for 5 s: {name} (opamp:collectors)")
    );
    until("the other agent is given back its file", async || agents[0].applied_ratio("0.5")).await;
    server.stop().await.unwrap();
}

/// An agent whose poll is held is live for as long as it is held: a hold longer than
/// `lost_after_s` is no disappearance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_whose_poll_is_held_longer_than_lost_after_has_not_disappeared() {
    let (_dir, _, server, admin) = serving(&document(10, "0.5")).await;
    let agent = OtelAgent::spawn_holding(&url(&server), 0, Some(30));
    applied(&admin, 1).await;
    until("its poll is held", async || {
        admin.get("/metrics").await.body.lines().any(|l| l == "skyconf_opamp_held_polls 1")
    })
    .await;

    let gates = json!({"apply_within_s": 30, "bake_s": 6, "lost_after_s": 2});
    start_rollout(&admin, &start(&document(10, "0.25"), json!([{"share": "100%"}]), gates)).await;
    let mut done = Value::Null;
    until("the rollout ends", async || {
        done = rollout(&admin).await;
        done["state"] == "completed" || done["state"] == "reverted"
    })
    .await;
    assert_eq!(done["state"], "completed", "{}", last_event(&done));
    assert!(agent.applied_ratio("0.25"), "{done:#}");
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opamp_only_change_is_named_by_its_release_and_the_diff_and_a_rollback_restores_it() {
    let (_dir, path, server, admin) = serving(&document(10, "0.5")).await;
    let agent = OtelAgent::spawn(&url(&server), 0);
    applied(&admin, 1).await;
    let first = admin.get_json("/api/v1/releases").await["releases"][0]["id"].as_u64().unwrap();

    let dry = admin
        .send(
            "PUT",
            "/api/v1/configurations?dry_run=true",
            &[("content-type", "application/yaml")],
            &document(10, "0.75"),
        )
        .await
        .json();
    assert_eq!(dry["changes"], json!([]), "{dry:#}");
    assert_eq!(dry["opamp_changes"][0]["group"], "collectors", "{dry:#}");

    let written = put(&admin, &document(10, "0.75")).await;
    let second = written["release"]["id"].as_u64().unwrap();
    assert_eq!(written["release"]["changed"], 0, "no service changed: {written:#}");
    let named = json!([{"group": "collectors", "change": "modified", "files": ["sampling.json"], "matching": false}]);
    assert_eq!(written["release"]["opamp_changes"], named);
    let listed = admin.get_json("/api/v1/releases").await;
    assert_eq!(listed["releases"][0]["opamp_changes"], named, "the history entry names it: {listed:#}");
    let compared = admin.get_json(&format!("/api/v1/releases/{first}/compare/{second}")).await;
    assert_eq!(compared["opamp_changes"], named, "{compared:#}");
    until("the agent applied the change", async || agent.applied_ratio("0.75")).await;

    let reply =
        admin.send("POST", &format!("/api/v1/releases/{first}/rollback"), &[("X-Skyconf-Author", "ops")], "").await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let rolled = reply.json();
    assert_eq!(rolled["release"]["rollback_of"].as_u64(), Some(first), "{rolled:#}");
    assert_eq!(rolled["release"]["opamp_changes"][0]["group"], "collectors");
    until("the agent applied its first file again", async || agent.applied_ratio("0.5")).await;
    assert_eq!(std::fs::read_to_string(&path).unwrap(), document(10, "0.5"));
    server.stop().await.unwrap();
}

/// A real client of `group` (matching `service.name: service`) at `program script URL service
/// args…`: a wave of `failing` (a file it cannot parse) is reverted with its words (`says`) and it
/// goes back to `first`; a wave of `good` completes. `files(body)` is the group's files.
async fn a_real_client_fails_a_wave_goes_back_and_then_completes_one(
    client: (PathBuf, &str, &[&str]),
    (group, service): (&str, &str),
    files: impl Fn(&str) -> String,
    [first, failing, good]: [&str; 3],
    says: &str,
) {
    let doc = |file: &str| {
        let files = files(file);
        format!(
            "configurations:\n  svc:\n    agent.sample_n_per_3_secs: 10\nopamp:\n  - group: {group}\n    match:\n      service.name: {service}\n    files:\n      {files}\n"
        )
    };
    let (_dir, _, server, admin) = serving(&doc(first)).await;
    let (program, script, args) = client;
    let url = url(&server);
    let child = crate::opamp::spawn(&program, script, &[&[url.as_str(), service][..], args].concat(), &[]);
    applied(&admin, 1).await;
    let v1 = agents(&admin).await[0]["offered_hash"].clone();

    let gates = json!({"apply_within_s": 30, "bake_s": 1, "lost_after_s": 20});
    start_rollout(&admin, &start(&doc(failing), json!([{"share": "100%"}]), gates.clone())).await;
    let reverted = until_state(&admin, "reverted").await;
    let said = last_event(&reverted);
    assert!(said.starts_with("Wave 1: 1 reached agent(s) reported FAILED: ") && said.contains(says), "{said}");
    let mut back = Value::Null;
    until("the client went back to its file and said so", async || {
        back = rollout(&admin).await["after_revert"].clone();
        back[0]["status_of"] == "previous" && back[0]["remote_config_status"]["status"] == "applied"
    })
    .await;
    assert_eq!(back[0]["remote_config_status"]["config_hash"], v1, "{back:#}");

    start_rollout(&admin, &start(&doc(good), json!([{"share": "100%"}]), gates)).await;
    until_state(&admin, "completed").await;
    let row = agents(&admin).await[0].clone();
    assert_eq!((&row["remote_config_status"]["status"], &row["current"]), (&json!("applied"), &json!(true)), "{row:#}");
    assert_ne!(row["offered_hash"], v1);

    crate::opamp::stop(child).await;
    server.stop().await.unwrap();
}

/// The PyPI client parses JSON files only: a YAML file fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pypi_client_fails_a_wave_goes_back_and_then_completes_one() {
    let Some(python) = crate::opamp::python() else { return };
    let json = |ratio: &str| format!("sampling.json:\n        body: '{{\"ratio\": {ratio}}}'");
    let (first, good) = (json("0.5"), json("0.1"));
    let yaml = "sampling.yaml:\n        body: 'ratio: 1'";
    let client = (python, "python_agent.py", &["0.5"][..]);
    let files = |file: &str| file.to_owned();
    a_real_client_fails_a_wave_goes_back_and_then_completes_one(
        client,
        ("py", "py-svc"),
        files,
        [&first, yaml, &good],
        "sampling.yaml",
    )
    .await;
}

/// The npm client parses application/json: a body that is not JSON fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_npm_client_fails_a_wave_goes_back_and_then_completes_one() {
    let Some(node) = crate::opamp_security::node() else { return };
    let client = (node, "node_agent.js", &["1"][..]);
    let files = |body: &str| format!("sampling.json:\n        body: '{body}'");
    let bodies = ["{\"ratio\": 0.5}", "ratio: 1", "{\"ratio\": 0.1}"];
    a_real_client_fails_a_wave_goes_back_and_then_completes_one(client, ("js", "js-svc"), files, bodies, "").await;
}
