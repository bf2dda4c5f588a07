//! A staged rollout across two replicas on one real etcd server, with agents on both: the record
//! in the store is the one truth, so a wave reaches the instances it picked on either replica, a
//! promote on the other replica moves it on, the candidate is written once, and both list the
//! same history; an abort on one replica gives the agents of both back what they had.

use serde_json::{Value, json};
use skyconf_testkit::server::{AdminClient, Server};
use skyconf_testkit::servers::etcd::EtcdServer;

use crate::replicas::config;
use crate::rollouts::{
    TestAgent, V1, V2, post, rollout, start_body, start_rollout, stop_all, until, until_state, values,
};
use crate::shared_writes::{ETCD_AGENT_KEY, etcd_source};

/// How many instances `admin`'s merged fleet view lists as applied on `svc`, its own and the
/// other replica's.
async fn applied_instances(admin: &AdminClient) -> usize {
    let body = admin.get_json("/api/v1/instances").await;
    let rows = body["instances"].as_array().cloned().unwrap_or_default();
    rows.iter().filter(|i| i["services"][0]["state"] == "applied").count()
}

/// The ids and states of a replica's rollout history.
async fn history(admin: &AdminClient) -> Vec<(String, String)> {
    let body = admin.get_json("/api/v1/rollouts").await;
    let list = body["history"].as_array().cloned().unwrap_or_default();
    list.iter().map(|r| (r["id"].as_str().unwrap().to_owned(), r["state"].as_str().unwrap().to_owned())).collect()
}

#[tokio::test]
async fn a_rollout_on_one_etcd_is_served_promoted_and_aborted_through_either_replica() {
    let Some(etcd) = EtcdServer::start().await else { return };
    let store = etcd.admin().await;
    store.put(ETCD_AGENT_KEY, V1).await;
    let a = Server::start(etcd_source(&etcd), config("replica-a")).await;
    let b = Server::start(etcd_source(&etcd), config("replica-b")).await;
    let (admin_a, admin_b) = (a.admin(), b.admin());
    // Two agents on each replica.
    let agents: Vec<TestAgent> = (0..4)
        .map(|i| TestAgent::spawn(if i < 2 { a.grpc_addr } else { b.grpc_addr }, &format!("pod-{i}"), &[]))
        .collect();
    until("each replica sees all four agents applied", async || {
        values(&agents).iter().all(|v| v.as_deref() == Some("10"))
            && applied_instances(&admin_a).await == 4
            && applied_instances(&admin_b).await == 4
    })
    .await;

    // Started on A: a wave of two instances, picked among both replicas' agents.
    let gates = json!({"apply_within_s": 30, "bake_s": 1, "lost_after_s": 30});
    let body = start_body(json!([{"instances": 2}, {"share": "100%"}]), gates.clone(), "manual");
    let started = start_rollout(&admin_a, &body).await;
    let id = started["rollout"]["id"].as_str().unwrap().to_owned();
    let picked: Vec<String> = serde_json::from_value(started["rollout"]["named"]["svc"].clone()).unwrap();
    assert_eq!(picked.len(), 2);
    until("the wave's instances hold the candidate on both replicas, the others do not", async || {
        agents.iter().all(|x| x.value().as_deref() == Some(if picked.contains(&x.name) { "20" } else { "10" }))
    })
    .await;
    // B reads the record from the store: the same rollout, waiting once A judged the wave.
    let waiting = until_state(&admin_b, "waiting for a promote").await;
    assert_eq!(waiting["id"], id.as_str());
    assert_eq!(waiting["driver"], "replica-a");

    // Promoted on B, which drives it from then on; the candidate is written once.
    let (status, promoted) = post(&admin_b, &format!("/api/v1/rollouts/{id}/promote"), &json!({"author": "ops"})).await;
    assert_eq!(status, 200, "{promoted}");
    let done = until_state(&admin_a, "completed").await;
    assert_eq!(done["driver"], "replica-b");
    until("every agent holds the candidate", async || values(&agents).iter().all(|v| v.as_deref() == Some("20"))).await;
    assert_eq!(store.get(ETCD_AGENT_KEY).await.as_deref(), Some(V2.as_bytes()), "the candidate is the document");
    let release = done["release"].as_u64().expect("the release it became");
    // One release on both, attributed to the rollout (the other replica takes the writer's
    // attribution from the shared history record).
    let origin = format!("rollout {id}");
    until("both replicas list the release as the rollout's", async || {
        for admin in [&admin_a, &admin_b] {
            let releases = admin.get_json("/api/v1/releases").await;
            let newest = &releases["releases"][0];
            if (newest["id"].as_u64(), newest["origin"].as_str()) != (Some(release), Some(origin.as_str())) {
                return false;
            }
        }
        true
    })
    .await;

    // A second rollout, started on B and aborted on A while it bakes: every agent, on either
    // replica, is given back V2.
    let v3 = V2.replace("20", "30");
    let baking = json!({"apply_within_s": 30, "bake_s": 600, "lost_after_s": 30});
    let mut body = start_body(json!([{"share": "100%"}]), baking, "manual");
    body["document"] = Value::from(v3.as_str());
    let started = start_rollout(&admin_b, &body).await;
    let second = started["rollout"]["id"].as_str().unwrap().to_owned();
    until("every agent holds the second candidate", async || {
        values(&agents).iter().all(|v| v.as_deref() == Some("30"))
    })
    .await;
    let (status, aborted) = post(&admin_a, &format!("/api/v1/rollouts/{second}/abort"), &json!(null)).await;
    assert_eq!(status, 200, "{aborted}");
    until("every agent is back on V2", async || values(&agents).iter().all(|v| v.as_deref() == Some("20"))).await;
    assert_eq!(store.get(ETCD_AGENT_KEY).await.as_deref(), Some(V2.as_bytes()), "the document is untouched");
    until("both replicas list the same history", async || {
        let want = vec![(second.clone(), "aborted".to_owned()), (id.clone(), "completed".to_owned())];
        history(&admin_a).await == want && history(&admin_b).await == want
    })
    .await;
    assert_eq!(rollout(&admin_b).await["state"], "aborted");
    stop_all(agents).await;
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}
