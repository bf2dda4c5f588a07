//! skyconf at both ends of SkyWalking's DCS protocol: a skyconf server polling another skyconf
//! server's `/ConfigurationService/call` and `callGroup` reproduces its store and its answers.

use std::path::Path;
use std::time::{Duration, Instant};

use skyconf_core::store::AGENT_CONFIGURATIONS_KEY;
use skyconf_proto::v3::ConfigurationSyncRequest;
use skyconf_proto::v3::configuration_discovery_service_client::ConfigurationDiscoveryServiceClient;
use skyconf_server::{Running, ServeConfig};
use skyconf_sources::Source;
use skyconf_sources::dcs::{DcsSettings, DcsSource};
use skyconf_sources::file::FileSource;

fn local() -> ServeConfig {
    ServeConfig {
        grpc_addr: "127.0.0.1:0".parse().unwrap(),
        admin_addr: "127.0.0.1:0".parse().unwrap(),
        require_initial_load: false,
        ..ServeConfig::default()
    }
}

async fn digest(running: &Running, service: &str) -> String {
    let mut client =
        ConfigurationDiscoveryServiceClient::connect(format!("http://{}", running.grpc_addr)).await.unwrap();
    let request = ConfigurationSyncRequest { service: service.into(), uuid: String::new() };
    let commands = client.fetch_configurations(request).await.unwrap().into_inner();
    skyconf_core::codec::DiscoveryCommand::find(&commands).unwrap().uuid.unwrap()
}

/// Waits (bounded) until `condition` holds.
async fn eventually(what: &str, mut condition: impl AsyncFnMut() -> bool) {
    let give_up = Instant::now() + Duration::from_secs(15);
    while !condition().await {
        assert!(Instant::now() < give_up, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn write_store(dir: &Path) {
    std::fs::write(dir.join(AGENT_CONFIGURATIONS_KEY), "configurations:\n  svc:\n    agent.sample_n_per_3_secs: 7\n")
        .unwrap();
    std::fs::write(dir.join("alarm.default.alarm-settings"), "rules: {}\n").unwrap();
    std::fs::create_dir(dir.join("core.default.endpoint-name-grouping-openapi")).unwrap();
    std::fs::write(dir.join("core.default.endpoint-name-grouping-openapi/api-v1.yaml"), "openapi: 3.0.0\n").unwrap();
}

#[tokio::test]
async fn a_dcs_client_of_a_skyconf_dcs_server_reproduces_the_store() {
    let dir = tempfile::tempdir().unwrap();
    write_store(dir.path());
    let upstream_store = FileSource::directory(dir.path());
    let upstream = skyconf_server::start_with(upstream_store.clone(), local()).await.unwrap();

    let settings =
        DcsSettings { host: "127.0.0.1".into(), port: upstream.grpc_addr.port(), period: 1, ..DcsSettings::default() };
    let downstream = skyconf_server::start_with(DcsSource::new(settings).unwrap(), local()).await.unwrap();

    assert_eq!(digest(&downstream, "svc").await, digest(&upstream, "svc").await);
    let (up, down) = (upstream.store.content(), downstream.store.content());
    let non_empty = |c: &skyconf_core::store::StoreContent| {
        c.singles.iter().filter(|(_, v)| !v.is_empty()).map(|(k, v)| (k.clone(), v.clone())).collect::<Vec<_>>()
    };
    assert_eq!(non_empty(&down), non_empty(&up));
    assert_eq!(
        down.groups["core.default.endpoint-name-grouping-openapi"],
        up.groups["core.default.endpoint-name-grouping-openapi"]
    );

    // A change upstream reaches the downstream agents within a poll period.
    let before = digest(&downstream, "svc").await;
    upstream_store
        .put(AGENT_CONFIGURATIONS_KEY, Some("configurations:\n  svc:\n    agent.sample_n_per_3_secs: 8\n"))
        .await
        .unwrap();
    eventually("the change upstream is served downstream", async || digest(&downstream, "svc").await != before).await;
    assert_eq!(digest(&downstream, "svc").await, digest(&upstream, "svc").await);

    // A key deleted upstream is cleared downstream (sent as "", as the protocol requires).
    upstream_store.put("alarm.default.alarm-settings", None).await.unwrap();
    eventually("the deleted key is cleared", async || {
        downstream.store.content().singles.get("alarm.default.alarm-settings").is_some_and(String::is_empty)
    })
    .await;

    downstream.stop().await.unwrap();
    upstream.stop().await.unwrap();
}
