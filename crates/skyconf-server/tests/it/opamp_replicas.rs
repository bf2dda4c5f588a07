//! OpAMP agents across replicas on a real etcd: an agent of replica A's OpAMP port is listed by
//! replica B's `GET /api/v1/opamp/agents` (B serves no OpAMP itself) labelled with A and the time
//! of A's summary, with what it reported, and the groups no agent is in are those it is not in;
//! its effective configuration's contents are shown by A; when A stops, its record goes with it;
//! a rollout driven by A judges B's agents. The summaries are published every 100 ms here (10 s
//! by default).

use serde_json::{Value, json};
use skyconf_opamp::wire::RemoteConfigStatuses;
use skyconf_server::ServeConfig;
use skyconf_testkit::server::{AdminClient, Server, eventually_async};
use skyconf_testkit::servers::etcd::EtcdServer;

use crate::opamp::{document, hex, json_file, reporting_agent};
use crate::opamp_rollout::{OtelAgent, document as rollout_document, last_event, start};
use crate::replicas::etcd_source;
use crate::rollouts::{rollout, start_rollout, until, until_state};
use crate::shared_writes::ETCD_AGENT_KEY;

/// A replica named `name` (see [`crate::replicas::config`]), with an OpAMP port when `opamp`.
fn replica(name: &str, opamp: bool) -> ServeConfig {
    ServeConfig { opamp_addr: opamp.then(|| "127.0.0.1:0".parse().unwrap()), ..crate::replicas::config(name) }
}

async fn listed(admin: &AdminClient) -> Value {
    admin.get_json("/api/v1/opamp/agents").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opamp_agent_of_one_replica_is_listed_by_the_other_until_it_leaves() {
    let Some(etcd) = EtcdServer::start().await else { return };
    let text = document("checkout", &json_file("0.5"), 10);
    etcd.admin().await.put(ETCD_AGENT_KEY, text.as_str()).await;
    let a = Server::start(etcd_source(&etcd), replica("replica-a", true)).await;
    let b = Server::start(etcd_source(&etcd), replica("replica-b", false)).await;
    let url = format!("http://{}/v1/opamp", a.opamp_addr.unwrap());
    eventually_async("A serves the document", async || a.served.snapshot().ready()).await;

    eventually_async("B says no agent is in either group yet", async || {
        listed(&b.admin()).await["unmatched_groups"] == serde_json::json!(["svc", "others"])
    })
    .await;
    let uid = [0x5a; 16];
    reporting_agent(&url, uid, "checkout", "node-1", RemoteConfigStatuses::Applied, "").await;
    let admin_b = b.admin();
    let mut row = Value::Null;
    // The agent says hello before it reports its status, and A may publish between the two: wait
    // for a row that carries the status.
    eventually_async("B lists A's OpAMP agent, labelled with A, with its status", async || {
        let body = listed(&admin_b).await;
        row = body["agents"].as_array().and_then(|a| a.first()).cloned().unwrap_or(Value::Null);
        body["replica"] == "replica-b"
            && row["replica"] == "replica-a"
            && row["remote_config_status"]["status"] == "applied"
    })
    .await;
    let body = listed(&admin_b).await;
    assert_eq!(body["enabled"], false, "B serves no OpAMP itself");
    assert_eq!(body["unmatched_groups"], serde_json::json!(["others"]), "svc has A's agent: {body}");
    assert_eq!(body["agents"].as_array().unwrap().len(), 1, "{body}");
    assert_eq!(row["uid"], hex(&uid));
    assert!(row["as_of_ms"].is_u64(), "{row}");
    assert_eq!(row["group"], "svc");
    assert_eq!(row["remote_config_status"]["status"], "applied");
    assert_eq!(row["current"], true);
    assert_eq!(row["health"]["healthy"], true);
    assert!(row["effective_config_hash"].is_string());

    // A lists it too, as its own (live, no as_of_ms), and shows its effective configuration's
    // contents; B, whose agent it is not, says where to look.
    let own = listed(&a.admin()).await;
    assert_eq!((&own["agents"][0]["replica"], &own["agents"][0]["as_of_ms"]), (&"replica-a".into(), &Value::Null));
    let path = format!("/api/v1/opamp/agents/{}/effective", hex(&uid));
    let effective = a.admin().get_json(&path).await;
    assert_eq!(effective["effective_config_hash"], row["effective_config_hash"], "{effective:#}");
    let file = &effective["effective_config"]["files"][0];
    assert_eq!(
        (&file["name"], &file["body"], &file["truncated"]),
        (&json!("sampling.json"), &json!(r#"{"ratio": 0.5}"#), &json!(false))
    );
    let elsewhere = admin_b.get(&path).await;
    assert_eq!(elsewhere.status, 404, "{}", elsewhere.body);
    assert!(elsewhere.body.contains("another replica's agent is shown by that replica"), "{}", elsewhere.body);

    // A second agent whose configuration failed: B shows the failure.
    let failed = [0x5b; 16];
    reporting_agent(&url, failed, "checkout", "node-2", RemoteConfigStatuses::Failed, "bad ratio").await;
    eventually_async("B lists the failure", async || {
        let body = listed(&admin_b).await;
        body["agents"].as_array().is_some_and(|rows| {
            rows.iter().any(|r| {
                r["uid"] == hex(&failed)
                    && r["remote_config_status"]["status"] == "failed"
                    && r["remote_config_status"]["error_message"] == "bad ratio"
            })
        })
    })
    .await;

    // A stops: its record goes, and B lists nothing.
    a.stop().await.unwrap();
    eventually_async("B's listing empties with A", async || {
        listed(&admin_b).await["agents"].as_array().is_some_and(Vec::is_empty)
    })
    .await;
    b.stop().await.unwrap();
}

/// A rollout driven by replica A (no OpAMP port) judges the OpAMP agent of replica B through B's
/// published summary: its FAILED status reverts the wave with its words, it is given back its
/// file and A shows what it reports of it; its APPLIED status lets the next rollout complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_driven_on_one_replica_is_judged_on_the_other_replicas_opamp_agent() {
    let Some(etcd) = EtcdServer::start().await else { return };
    etcd.admin().await.put(ETCD_AGENT_KEY, rollout_document(10, "0.5").as_str()).await;
    let a = Server::start(etcd_source(&etcd), replica("replica-a", false)).await;
    let b = Server::start(etcd_source(&etcd), replica("replica-b", true)).await;
    let agent = OtelAgent::spawn(&format!("http://{}/v1/opamp", b.opamp_addr.unwrap()), 0);
    let admin = a.admin();
    until("A lists B's agent as applied", async || {
        let body = listed(&admin).await;
        let row = &body["agents"][0];
        row["replica"] == "replica-b" && row["remote_config_status"]["status"] == "applied" && row["current"] == true
    })
    .await;

    let gates = json!({"apply_within_s": 30, "bake_s": 1, "lost_after_s": 20});
    let waves = json!([{"share": "100%"}]);
    let body = start_rollout(&admin, &start(&rollout_document(10, "2"), waves.clone(), gates.clone())).await;
    assert_eq!(body["rollout"]["driver"], "replica-a");
    let reverted = until_state(&admin, "reverted").await;
    assert_eq!(
        last_event(&reverted),
        "Wave 1: 1 reached agent(s) reported FAILED: otel-0 (opamp:collectors): ratio 2 is out of range"
    );
    until("B's agent is given back its file", async || agent.applied_ratio("0.5")).await;
    until("A shows what B's agent reports after the revert", async || {
        let back = rollout(&admin).await["after_revert"].clone();
        back[0]["instance"] == "otel-0" && back[0]["status_of"] == "previous"
    })
    .await;

    start_rollout(&admin, &start(&rollout_document(10, "0.25"), waves, gates)).await;
    let done = until_state(&admin, "completed").await;
    let messages: Vec<&str> =
        done["events"].as_array().unwrap().iter().map(|e| e["message"].as_str().unwrap()).collect();
    assert!(messages.contains(&"Wave 1: all 1 reached agent(s) applied"), "{messages:#?}");
    assert!(agent.applied_ratio("0.25"));
    drop(agent);
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}
