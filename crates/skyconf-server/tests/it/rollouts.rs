//! Per-instance targeting and staged rollouts end to end, with skyconf's Rust agent library as
//! the fleet: each agent reports its instance (name, properties) on the channel it polls on, and
//! holds its polls (a 12 s deadline), as a stock Java agent does with skyconf.
//!
//! - a targeting group reaches only its instances, each with its own digest;
//! - a wave reaches only its instances; a promote moves on; the last wave writes the candidate;
//! - a reached agent that stops polling reverts the wave, and the revert reaches the wave's other
//!   agents within a second (measured from the revert's event to the agent holding its old value);
//! - a restart mid-rollout resumes it;
//! - the Prometheus gate, against a real Prometheus, reverts a wave when the error ratio rises.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use skyconf_agent::watchers::StringWatcher;
use skyconf_agent::{Agent, AgentHandle, AgentOptions, GrpcTransport, Registry};
use skyconf_server::ServeConfig;
use skyconf_sources::file::FileSource;
use skyconf_testkit::PATIENCE;
use skyconf_testkit::fixtures::temp_file;
use skyconf_testkit::server::{AdminClient, Server, loopback};
use tokio::time::Instant;

pub(crate) const KEY: &str = "agent.sample_n_per_3_secs";
pub(crate) const V1: &str = "configurations:\n  svc:\n    agent.sample_n_per_3_secs: 10\n";
pub(crate) const V2: &str = "configurations:\n  svc:\n    agent.sample_n_per_3_secs: 20\n";

/// One agent of the test fleet.
pub(crate) struct TestAgent {
    pub(crate) name: String,
    sampling: Arc<StringWatcher>,
    pub(crate) handle: AgentHandle,
}

impl TestAgent {
    pub(crate) fn spawn(grpc: std::net::SocketAddr, name: &str, properties: &[(&str, &str)]) -> Self {
        let registry = Registry::new();
        let sampling = Arc::new(StringWatcher::new(KEY));
        registry.register(Arc::clone(&sampling) as Arc<dyn skyconf_agent::Watcher>);
        let mut options = AgentOptions::new("svc")
            .interval(Duration::from_millis(50))
            .timeout(Duration::from_secs(12))
            .instance(name);
        for (key, value) in properties {
            options = options.property(*key, *value);
        }
        let transport = GrpcTransport::lazy(&grpc.to_string()).unwrap();
        let handle = Agent::new(options, registry, transport).spawn();
        Self { name: name.to_owned(), sampling, handle }
    }

    pub(crate) fn value(&self) -> Option<String> {
        self.sampling.get().map(|v| v.to_string())
    }
}

fn fleet(grpc: std::net::SocketAddr, count: usize) -> Vec<TestAgent> {
    (0..count).map(|i| TestAgent::spawn(grpc, &format!("pod-{i}"), &[])).collect()
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}

pub(crate) async fn until(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let give_up = Instant::now() + PATIENCE;
    while !done().await {
        assert!(Instant::now() < give_up, "{what}: not within {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub(crate) fn values(agents: &[TestAgent]) -> Vec<Option<String>> {
    agents.iter().map(TestAgent::value).collect()
}

/// Waits until every agent holds `value` and the server counts all of them as applied
/// identified instances (not one-off pollers): a rollout then knows them.
async fn settled(admin: &AdminClient, agents: &[TestAgent], value: &str) {
    until("every agent applied", async || {
        let body = admin.get_json("/api/v1/instances").await;
        let applied =
            body["instances"].as_array().unwrap().iter().filter(|i| i["services"][0]["state"] == "applied").count();
        applied == agents.len() && agents.iter().all(|a| a.value().as_deref() == Some(value))
    })
    .await;
}

/// A server on the `V1` file and `count` agents that all applied it: where most rollouts here
/// begin.
struct Settled {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    server: Server,
    admin: AdminClient,
    agents: Vec<TestAgent>,
}

impl Settled {
    async fn start(count: usize) -> Self {
        let (_dir, path) = temp_file("agents.yaml", V1);
        let server = Server::start(FileSource::new(&path), loopback()).await;
        let admin = server.admin();
        let agents = fleet(server.grpc_addr, count);
        settled(&admin, &agents, "10").await;
        Self { _dir, path, server, admin, agents }
    }
}

pub(crate) async fn post(admin: &AdminClient, path: &str, body: &Value) -> (u16, Value) {
    let reply = admin.send("POST", path, &[("content-type", "application/json")], &body.to_string()).await;
    (reply.status, reply.json())
}

/// Starts the rollout `body` asks for: its answer, a 201.
pub(crate) async fn start_rollout(admin: &AdminClient, body: &Value) -> Value {
    let (status, answer) = post(admin, "/api/v1/rollouts", body).await;
    assert_eq!(status, 201, "{answer}");
    answer
}

pub(crate) async fn rollout(admin: &AdminClient) -> Value {
    admin.get_json("/api/v1/rollouts").await["rollout"].clone()
}

pub(crate) async fn until_state(admin: &AdminClient, state: &str) -> Value {
    let mut last = Value::Null;
    let give_up = Instant::now() + PATIENCE;
    loop {
        let now = rollout(admin).await;
        if now["state"] == state {
            return now;
        }
        if now != last {
            last = now;
        }
        assert!(Instant::now() < give_up, "the rollout is not {state} within {PATIENCE:?}: {last:#}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub(crate) fn start_body(waves: Value, gates: Value, advance: &str) -> Value {
    let mut body = json!({ "document": V2, "advance": advance, "author": "ops" });
    body["waves"] = waves;
    body["gates"] = gates;
    body
}

pub(crate) async fn stop_all(agents: Vec<TestAgent>) {
    for agent in agents {
        agent.handle.stop().await;
    }
}

#[tokio::test]
async fn targeting_groups_reach_only_their_instances_and_say_why() {
    let document = format!(
        "{V1}targeting:\n  svc:\n    - group: canary\n      instances: [\"canary-*\"]\n      settings: {{{KEY}: 100}}\n    - group: eu\n      properties: {{zone: eu-west-1a}}\n      settings: {{{KEY}: 20}}\n"
    );
    let (_dir, path) = temp_file("agents.yaml", &document);
    let server = Server::start(FileSource::new(&path), loopback()).await;
    let agents = vec![
        TestAgent::spawn(server.grpc_addr, "canary-1", &[("zone", "eu-west-1a")]),
        TestAgent::spawn(server.grpc_addr, "checkout-eu", &[("zone", "eu-west-1a")]),
        TestAgent::spawn(server.grpc_addr, "checkout-us", &[("zone", "us-east-1")]),
    ];
    until("each instance holds its group's value", async || {
        values(&agents) == [Some("100".into()), Some("20".into()), Some("10".into())]
    })
    .await;
    // Each holds its own digest, and the server counts each as applied on it.
    let admin = server.admin();
    until("all applied", async || {
        let body = admin.get_json("/api/v1/instances").await;
        body["instances"].as_array().unwrap().iter().filter(|i| i["services"][0]["state"] == "applied").count() == 3
    })
    .await;
    let body = admin.get_json("/api/v1/instances").await;
    let row = |name: &str| {
        body["instances"].as_array().unwrap().iter().find(|i| i["instance"] == name).unwrap()["services"][0].clone()
    };
    assert_eq!(row("canary-1")["group"], "canary");
    assert!(row("canary-1")["reason"].as_str().unwrap().contains("instance name in [`canary-*`]"), "{body}");
    assert_eq!(row("checkout-eu")["group"], "eu");
    assert_eq!(row("checkout-us")["group"], Value::Null);
    let why = row("checkout-us")["reason"].as_str().unwrap().to_owned();
    assert!(why.contains("`eu`: its `zone` is not one of [`eu-west-1a`]"), "{why}");
    let digests: std::collections::HashSet<String> = ["canary-1", "checkout-eu", "checkout-us"]
        .iter()
        .map(|n| row(n)["digest"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(digests.len(), 3, "three digests for three configurations");
    // An agent whose connection never says which instance it is gets the service's own.
    let anonymous = server.cds().await.fetch("svc", "").await.unwrap();
    assert_eq!(anonymous.config, [(KEY.to_owned(), "10".to_owned())]);
    stop_all(agents).await;
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_wave_reaches_only_its_instances_and_the_last_one_writes_the_candidate() {
    let Settled { _dir, path, server, admin, agents } = Settled::start(4).await;

    let gates = json!({"apply_within_s": 20, "bake_s": 1, "lost_after_s": 10});
    let body = start_rollout(&admin, &start_body(json!([{"instances": 1}, {"share": "100%"}]), gates, "manual")).await;
    let id = body["rollout"]["id"].as_str().unwrap().to_owned();
    assert_eq!(body["rollout"]["services"], json!(["svc"]));
    // A second rollout waits for this one.
    let (status, refused) =
        post(&admin, "/api/v1/rollouts", &start_body(json!([{"share": "100%"}]), json!({}), "auto")).await;
    assert_eq!(status, 409, "{refused}");

    let waiting = until_state(&admin, "waiting for a promote").await;
    let picked = waiting["named"]["svc"][0].as_str().unwrap().to_owned();
    assert_eq!((waiting["progress"]["reached"].as_u64(), waiting["progress"]["applied"].as_u64()), (Some(1), Some(1)));
    for agent in &agents {
        let expected = if agent.name == picked { "20" } else { "10" };
        assert_eq!(agent.value().as_deref(), Some(expected), "{} in wave 1 of {picked}", agent.name);
    }
    let body = admin.get_json("/api/v1/instances").await;
    let reached: Vec<&Value> =
        body["instances"].as_array().unwrap().iter().filter(|i| i["services"][0]["rollout"] == id.as_str()).collect();
    assert_eq!(reached.len(), 1, "{body}");
    assert_eq!(reached[0]["instance"], picked.as_str());

    let (status, body) = post(&admin, &format!("/api/v1/rollouts/{id}/promote"), &json!({"author": "ops"})).await;
    assert_eq!(status, 200, "{body}");
    let done = until_state(&admin, "completed").await;
    let release = done["release"].as_u64().unwrap();
    until("every agent holds the candidate", async || agents.iter().all(|a| a.value().as_deref() == Some("20"))).await;
    assert_eq!(std::fs::read_to_string(&path).unwrap(), V2, "the candidate is the document");
    let served = admin.get_json("/api/v1/configurations").await;
    assert_eq!(served["release"].as_u64(), Some(release), "{served}");
    let kinds: Vec<&str> = done["events"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["started", "wave", "applied", "passed", "promoted", "wave", "applied", "passed", "completed"]);
    // Usability finding 19: every event is a sentence, as every log line is.
    for event in done["events"].as_array().unwrap() {
        let message = event["message"].as_str().unwrap();
        assert!(message.starts_with(|c: char| c.is_uppercase()), "{message}");
    }
    // The record counts its wave from 0 as `wave_index`; `wave` counts from 1 wherever it is shown.
    assert_eq!((done["wave_index"].as_u64(), done["progress"]["wave"].as_u64()), (Some(1), Some(2)), "{done:#}");
    assert!(done.get("wave").is_none(), "{done:#}");
    let history = admin.get_json(&format!("/api/v1/releases/{release}")).await;
    assert!(history.to_string().contains(&format!("rollout {id}")), "{history}");
    stop_all(agents).await;
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_reached_agent_that_stops_polling_reverts_the_wave_within_a_second_for_the_others() {
    let Settled { _dir, path, server, admin, mut agents } = Settled::start(5).await;

    let gates = json!({"apply_within_s": 20, "bake_s": 60, "lost_after_s": 1});
    let body = start_rollout(&admin, &start_body(json!([{"instances": 2}, {"share": "100%"}]), gates, "auto")).await;
    let picked: Vec<String> = serde_json::from_value(body["rollout"]["named"]["svc"].clone()).unwrap();
    assert_eq!(picked.len(), 2);
    // One reached agent crashes the moment it holds the candidate, before the driver's next look
    // (every 500 ms) could see its row move; the other stays.
    let crashed = agents.iter().position(|a| a.name == picked[0]).unwrap();
    until("the first reached agent holds the candidate", async || agents[crashed].value().as_deref() == Some("20"))
        .await;
    agents.remove(crashed).handle.stop().await;
    let survivor = agents.iter().find(|a| a.name == picked[1]).unwrap();
    let give_up = Instant::now() + PATIENCE;
    while survivor.value().as_deref() != Some("10") {
        if Instant::now() >= give_up {
            let (rollouts, instances) =
                (admin.get_json("/api/v1/rollouts").await, admin.get_json("/api/v1/instances").await);
            panic!("the survivor was not given back its value; rollouts: {rollouts:#}\ninstances: {instances:#}");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let observed_ms = unix_ms();
    let reverted = until_state(&admin, "reverted").await;
    let event = reverted["events"].as_array().unwrap().iter().find(|e| e["kind"] == "reverted").unwrap().clone();
    assert!(event["message"].as_str().unwrap().contains(&picked[0]), "{event}");
    let revert_to_served_ms = observed_ms.saturating_sub(event["at_ms"].as_u64().unwrap());
    eprintln!("{}", json!({"measure": "rollout_revert_to_served_ms", "value": revert_to_served_ms}));
    assert!(revert_to_served_ms <= 1000, "the revert reached the wave's agents {revert_to_served_ms} ms after it");
    assert!(agents.iter().all(|a| a.value().as_deref() == Some("10")), "{:?}", values(&agents));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), V1, "the document is untouched");
    // The history says it was reverted, and why; the metrics count it.
    let history = admin.get_json("/api/v1/rollouts").await["history"].clone();
    assert_eq!((history[0]["id"].clone(), history[0]["state"].as_str()), (reverted["id"].clone(), Some("reverted")));
    assert!(history[0]["outcome"].as_str().unwrap().contains(&picked[0]), "{history:#}");
    let metrics = admin.get("/metrics").await.body;
    for line in
        ["skyconf_rollout_events_total{kind=\"reverted\"} 1", "skyconf_rollout_events_total{kind=\"started\"} 1"]
    {
        assert!(metrics.lines().any(|l| l == line), "no `{line}` in\n{metrics}");
    }
    stop_all(agents).await;
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_restart_mid_rollout_resumes_it() {
    let (dir, path) = temp_file("agents.yaml", V1);
    let config = ServeConfig { data_dir: Some(dir.path().join("data")), ..loopback() };
    let server = Server::start(FileSource::new(&path), config.clone()).await;
    let (grpc, admin_addr) = (server.grpc_addr, server.admin_addr);
    let agents = fleet(grpc, 3);
    settled(&server.admin(), &agents, "10").await;
    let gates = json!({"apply_within_s": 20, "bake_s": 1, "lost_after_s": 30});
    let body =
        start_rollout(&server.admin(), &start_body(json!([{"instances": 1}, {"share": "100%"}]), gates, "manual"))
            .await;
    let id = body["rollout"]["id"].as_str().unwrap().to_owned();
    until_state(&server.admin(), "waiting for a promote").await;
    server.stop().await.unwrap();

    // The same ports, so the agents come back to it.
    let config = ServeConfig { grpc_addr: grpc, admin_addr, ..config };
    let server = Server::start(FileSource::new(&path), config.clone()).await;
    let admin = server.admin();
    let resumed = rollout(&admin).await;
    assert_eq!((resumed["id"].as_str(), resumed["state"].as_str()), (Some(id.as_str()), Some("waiting for a promote")));
    until("the resumed wave's agent is counted again", async || {
        let now = rollout(&admin).await;
        now["progress"]["reached"] == 1 && now["progress"]["applied"] == 1
    })
    .await;
    assert_eq!(values(&agents).iter().filter(|v| v.as_deref() == Some("20")).count(), 1);
    let (status, body) = post(&admin, &format!("/api/v1/rollouts/{id}/promote"), &json!(null)).await;
    assert_eq!(status, 200, "{body}");
    until_state(&admin, "completed").await;
    until("every agent holds the candidate", async || agents.iter().all(|a| a.value().as_deref() == Some("20"))).await;
    server.stop().await.unwrap();

    // Once more: the ended rollout is in the history read back from the data directory.
    let server = Server::start(FileSource::new(&path), config).await;
    let answer = server.admin().get_json("/api/v1/rollouts").await;
    assert_eq!(answer["history"].as_array().map(Vec::len), Some(1), "{answer:#}");
    assert_eq!(
        (answer["history"][0]["id"].as_str(), answer["history"][0]["state"].as_str()),
        (Some(id.as_str()), Some("completed"))
    );
    assert!(answer["history"][0]["release"].is_u64(), "{answer:#}");
    stop_all(agents).await;
    server.stop().await.unwrap();
}

#[tokio::test]
async fn bad_plans_are_refused_with_the_reason() {
    let (_dir, path) = temp_file("agents.yaml", V1);
    let server = Server::start(FileSource::new(&path), loopback()).await;
    let admin = server.admin();
    let cases = [
        (json!({"document": V1, "waves": [{"share": "100%"}]}), 400, "changes no service"),
        (json!({"document": "configurations:\n  svc: [", "waves": [{"share": "100%"}]}), 400, "refused"),
        (json!({"document": V2, "waves": []}), 400, "at least one wave"),
        (json!({"document": V2, "waves": [{"share": "150%"}]}), 400, "wave 1"),
        (json!({"document": V2, "waves": [{"share": "1%", "instances": 1}]}), 400, "either"),
        (json!({"document": V2, "waves": [{"share": "1%"}], "gates": {"bake": 1}}), 400, "bake"),
    ];
    for (body, status, message) in cases {
        let (got, answer) = post(&admin, "/api/v1/rollouts", &body).await;
        assert_eq!(got, status, "{body}: {answer}");
        assert!(answer.to_string().contains(message), "{body}: {answer}");
    }
    let (status, answer) = post(&admin, "/api/v1/rollouts/r1/abort", &json!(null)).await;
    assert_eq!(status, 404, "{answer}");
    assert_eq!(rollout(&admin).await, Value::Null);
    server.stop().await.unwrap();
}

#[tokio::test]
async fn the_prometheus_gate_reverts_a_wave_when_the_error_ratio_rises() {
    use crate::rollout_prometheus::{Exporter, GAUGE};
    use skyconf_testkit::servers::prometheus::PrometheusServer;
    let exporter = Exporter::start(0.01).await;
    let Some(prometheus) = PrometheusServer::start(exporter.addr).await else { return };
    let Settled { _dir, path, server, admin, agents } = Settled::start(3).await;
    let gates = json!({
        "apply_within_s": 20, "bake_s": 6, "lost_after_s": 30,
        "prometheus": {"url": prometheus.url(), "query": GAUGE, "max": 0.05},
    });
    let body = start_rollout(&admin, &start_body(json!([{"instances": 1}, {"share": "100%"}]), gates, "manual")).await;
    // Wave 1 passes its gates while the ratio is 1 %.
    until_state(&admin, "waiting for a promote").await;
    let id = body["rollout"]["id"].as_str().unwrap().to_owned();
    let (status, body) = post(&admin, &format!("/api/v1/rollouts/{id}/promote"), &json!(null)).await;
    assert_eq!(status, 200, "{body}");
    until("wave 2 holds the candidate", async || agents.iter().all(|a| a.value().as_deref() == Some("20"))).await;
    // Errors rise while wave 2 bakes: the rollout reverts, and every agent is given back 10.
    exporter.set(0.2);
    let reverted = until_state(&admin, "reverted").await;
    let event = reverted["events"].as_array().unwrap().last().unwrap().clone();
    assert!(event["message"].as_str().unwrap().contains("Prometheus gate failed"), "{event}");
    until("every agent is given back its value", async || agents.iter().all(|a| a.value().as_deref() == Some("10")))
        .await;
    assert_eq!(std::fs::read_to_string(&path).unwrap(), V1);
    stop_all(agents).await;
    server.stop().await.unwrap();
}

/// An instance that reports its identity, polls once without being held (a 2 s deadline) and
/// leaves: its connection closes, its last sighting is now.
async fn poll_once_and_leave(grpc: std::net::SocketAddr, name: &str) {
    let options = AgentOptions::new("svc").timeout(Duration::from_secs(2)).instance(name);
    let transport = GrpcTransport::lazy(&grpc.to_string()).unwrap();
    let mut agent = Agent::new(options, Registry::new(), transport);
    agent.poll_once().await.unwrap();
    drop(agent);
}

/// The instance `name` of the listing, if listed.
async fn listed(admin: &AdminClient, name: &str) -> Option<Value> {
    let body = admin.get_json("/api/v1/instances").await;
    body["instances"].as_array().unwrap().iter().find(|i| i["instance"] == name).cloned()
}

/// Finding N2: an instance that left before the rollout started is never reached, so it cannot
/// revert the rollout for having disappeared (it reverted every rollout at its first tick).
#[tokio::test]
async fn a_stale_instance_that_left_before_the_start_does_not_revert_the_rollout() {
    let Settled { _dir, path, server, admin, agents } = Settled::start(3).await;
    poll_once_and_leave(server.grpc_addr, "gone-1").await;
    // It left more than `lost_after_s` (2 s) before the start: the fleet view either forgot it
    // (its connection closed) or shows it last seen then.
    until("the instance that left is 2 s stale or gone", async || {
        listed(&admin, "gone-1").await.is_none_or(|i| i["last_seen_ms"].as_u64().unwrap() + 2_500 < unix_ms())
    })
    .await;

    let gates = json!({"apply_within_s": 20, "bake_s": 3, "lost_after_s": 2});
    start_rollout(&admin, &start_body(json!([{"share": "100%"}]), gates, "auto")).await;
    let done = until_state(&admin, "completed").await;
    assert!(!done["events"].to_string().contains("gone-1"), "{done:#}");
    until("every agent holds the candidate", async || agents.iter().all(|a| a.value().as_deref() == Some("20"))).await;
    assert_eq!(std::fs::read_to_string(&path).unwrap(), V2);
    stop_all(agents).await;
    server.stop().await.unwrap();
}

/// The contract's disappearance bound: a reached agent killed during the bake (its connection
/// closed while its poll is held) reverts the rollout for having disappeared, `lost_after_s`
/// after the kill, within the driver's 500 ms tick.
#[tokio::test]
async fn an_agent_killed_during_the_bake_reverts_the_rollout_within_lost_after() {
    let Settled { _dir, path, server, admin, mut agents } = Settled::start(3).await;
    let gates = json!({"apply_within_s": 20, "bake_s": 60, "lost_after_s": 3});
    let body = start_rollout(&admin, &start_body(json!([{"instances": 1}, {"share": "100%"}]), gates, "auto")).await;
    let picked = body["rollout"]["named"]["svc"][0].as_str().unwrap().to_owned();
    // Baking: it applied, and its next poll is held.
    until("wave 1 bakes", async || rollout(&admin).await["applied_ms"].is_u64()).await;
    let killed = agents.iter().position(|a| a.name == picked).unwrap();
    until("the reached agent's poll is held", async || {
        listed(&admin, &picked).await.is_some_and(|i| i["last_seen_ms"].as_u64().unwrap() + 200 >= unix_ms())
    })
    .await;
    let killed_ms = unix_ms();
    agents.remove(killed).handle.stop().await;
    let reverted = until_state(&admin, "reverted").await;
    let event = reverted["events"].as_array().unwrap().last().unwrap().clone();
    let message = event["message"].as_str().unwrap();
    assert!(message.contains("disappeared") && message.contains(&picked), "{event}");
    let after_ms = event["at_ms"].as_u64().unwrap().saturating_sub(killed_ms);
    eprintln!("{}", json!({"measure": "rollout_kill_to_revert_ms", "value": after_ms}));
    // Counted from the driver's last look before the kill (a tick is 500 ms), so up to a tick
    // early; and up to a tick late, with slack for a loaded machine.
    assert!((2_400..=4_500).contains(&after_ms), "reverted {after_ms} ms after the kill, lost_after_s is 3");
    until("every agent is given back its value", async || agents.iter().all(|a| a.value().as_deref() == Some("10")))
        .await;
    assert_eq!(std::fs::read_to_string(&path).unwrap(), V1);
    stop_all(agents).await;
    server.stop().await.unwrap();
}

/// Agents that poll without ever saying which instance they are (the proxy layout).
fn anonymous_fleet(grpc: std::net::SocketAddr, count: usize) -> Vec<TestAgent> {
    (0..count)
        .map(|i| {
            let registry = Registry::new();
            let sampling = Arc::new(StringWatcher::new(KEY));
            registry.register(Arc::clone(&sampling) as Arc<dyn skyconf_agent::Watcher>);
            let options = AgentOptions::new("svc").interval(Duration::from_millis(50)).timeout(Duration::from_secs(12));
            let transport = GrpcTransport::lazy(&grpc.to_string()).unwrap();
            let handle = Agent::new(options, registry, transport).spawn();
            TestAgent { name: format!("anonymous-{i}"), sampling, handle }
        })
        .collect()
}

/// Finding N3: where no instance of a changed service is identified, no gate can judge a wave,
/// so the start is refused with the service named and what to do; `"ungated": true` starts it
/// anyway as a write in steps, and each wave says that no gate judged it.
#[tokio::test]
async fn anonymous_pollers_only_refuse_the_start_and_ungated_is_a_write_in_steps() {
    let (_dir, path) = temp_file("agents.yaml", V1);
    let server = Server::start(FileSource::new(&path), loopback()).await;
    let admin = server.admin();
    let agents = anonymous_fleet(server.grpc_addr, 2);
    until("the anonymous agents hold the document", async || {
        values(&agents).iter().all(|v| v.as_deref() == Some("10"))
    })
    .await;
    let gates = json!({"apply_within_s": 5, "bake_s": 1, "lost_after_s": 10});
    let waves = json!([{"instances": 1}, {"share": "100%"}]);
    let (status, refused) = post(&admin, "/api/v1/rollouts", &start_body(waves.clone(), gates.clone(), "auto")).await;
    assert_eq!(status, 400, "{refused}");
    let error = refused["error"].as_str().unwrap();
    for said in [
        "svc",
        "no live identified instance of svc (2 agent(s) poll for it without an identity)",
        "ManagementService",
        "gateway",
        "\"ungated\": true",
    ] {
        assert!(error.contains(said), "`{said}` in {error}");
    }
    assert_eq!(rollout(&admin).await, Value::Null, "nothing started");

    let mut body = start_body(waves, gates, "auto");
    body["ungated"] = json!(true);
    let started = start_rollout(&admin, &body).await;
    assert_eq!(started["rollout"]["ungated"], true);
    let done = until_state(&admin, "completed").await;
    let kinds: Vec<&str> = done["events"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["started", "wave", "unjudged", "passed", "wave", "unjudged", "passed", "completed"], "{done:#}");
    let unjudged = done["events"].as_array().unwrap().iter().find(|e| e["kind"] == "unjudged").unwrap();
    assert!(unjudged["message"].as_str().unwrap().contains("no gate judges"), "{unjudged}");
    until("every agent holds the candidate", async || values(&agents).iter().all(|v| v.as_deref() == Some("20"))).await;
    assert_eq!(std::fs::read_to_string(&path).unwrap(), V2);
    stop_all(agents).await;
    server.stop().await.unwrap();
}

/// Findings N3, N7 and N12: shares within (0 %, 100 %], growing waves, a candidate with a
/// service, and every size and gate value the client chooses within its written bound; each
/// refusal a 400 with a JSON error, and nothing started.
#[tokio::test]
async fn out_of_bounds_plans_are_refused_with_a_json_error() {
    let Settled { _dir, path: _, server, admin, agents } = Settled::start(2).await;
    let share = |text: &str| json!([{"share": text}]);
    let gates =
        |apply: u64, bake: u64, lost: u64| json!({"apply_within_s": apply, "bake_s": bake, "lost_after_s": lost});
    let many: Vec<Value> = (1..=21).map(|i| json!({"share": format!("{}%", i * 4)})).collect();
    let cases: Vec<(Value, &str)> = vec![
        (json!({"waves": share("0%")}), "reaches nobody"),
        (json!({"waves": share("-0%")}), "not a share"),
        (json!({"waves": share("0.001%")}), "not a share"),
        (json!({"waves": share("100.004%")}), "not a share"),
        (json!({"waves": share("1e2%")}), "not a share"),
        (json!({"waves": [{"share": "50%"}, {"share": "10%"}]}), "does not grow"),
        (json!({"waves": [{"share": "50%"}, {"share": "50%"}]}), "does not grow"),
        (json!({"waves": [{"share": "100%"}, {"instances": 1}]}), "nobody is left"),
        (json!({"waves": many}), "at most 20 waves"),
        (json!({"waves": [{"instances": 100_001}]}), "at most 100000"),
        (json!({"document": "configurations: {}\n"}), "no service"),
        (json!({"author": "a".repeat(257)}), "author"),
        (json!({"message": "m".repeat(4097)}), "message"),
        (json!({"gates": {"bake_s": 18_446_744_073_709_552_u64}}), "gates.bake_s"),
        (json!({"gates": gates(20, 86_401, 30)}), "gates.bake_s"),
        (json!({"gates": gates(20, 1, 0)}), "gates.lost_after_s"),
        (json!({"gates": gates(20, 1, u64::MAX)}), "gates.lost_after_s"),
        (json!({"gates": gates(0, 1, 30)}), "gates.apply_within_s"),
    ];
    for (change, said) in cases {
        let mut body = start_body(json!([{"share": "100%"}]), json!({}), "auto");
        for (key, value) in change.as_object().unwrap() {
            body[key] = value.clone();
        }
        let (status, answer) = post(&admin, "/api/v1/rollouts", &body).await;
        assert_eq!(status, 400, "{change}: {answer}");
        assert!(answer["error"].as_str().is_some_and(|e| e.contains(said)), "`{said}` for {change}: {answer}");
        assert_eq!(rollout(&admin).await, Value::Null, "{change} started a rollout");
    }
    // A promote or an abort names its author within the same bound.
    let body =
        start_rollout(&admin, &start_body(json!([{"instances": 1}, {"share": "100%"}]), json!({}), "manual")).await;
    let id = body["rollout"]["id"].as_str().unwrap().to_owned();
    for action in ["promote", "abort"] {
        let (status, answer) =
            post(&admin, &format!("/api/v1/rollouts/{id}/{action}"), &json!({"author": "a".repeat(257)})).await;
        assert_eq!(status, 400, "{action}: {answer}");
        assert!(answer["error"].as_str().unwrap().contains("author"), "{answer}");
    }
    let (status, answer) = post(&admin, &format!("/api/v1/rollouts/{id}/abort"), &json!({"author": "ops"})).await;
    assert_eq!(status, 200, "{answer}");
    stop_all(agents).await;
    server.stop().await.unwrap();
}
