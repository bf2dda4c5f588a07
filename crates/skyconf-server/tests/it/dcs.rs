//! skyconf at both ends of SkyWalking's DCS protocol: a skyconf server polling another skyconf
//! server's `/ConfigurationService/call` and `callGroup` reproduces its store and its answers.

use std::path::Path;

use skyconf_core::store::AGENT_CONFIGURATIONS_KEY;
use skyconf_server::ServeConfig;
use skyconf_sources::dcs::{DcsSettings, DcsSource};
use skyconf_sources::file::FileSource;
use skyconf_sources::{Expect, Source};
use skyconf_testkit::server::{Server, eventually_async, loopback};

fn local() -> ServeConfig {
    ServeConfig { require_initial_load: false, ..loopback() }
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
    let upstream = Server::start(upstream_store.clone(), local()).await;

    let settings =
        DcsSettings { host: "127.0.0.1".into(), port: upstream.grpc_addr.port(), period: 1, ..DcsSettings::default() };
    let downstream = Server::start(DcsSource::new(settings).unwrap(), local()).await;

    assert_eq!(downstream.cds().await.digest("svc").await.unwrap(), upstream.cds().await.digest("svc").await.unwrap());
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
    let before = downstream.cds().await.digest("svc").await.unwrap();
    upstream_store
        .put(
            AGENT_CONFIGURATIONS_KEY,
            Some("configurations:\n  svc:\n    agent.sample_n_per_3_secs: 8\n"),
            Expect::Seen,
        )
        .await
        .unwrap();
    eventually_async("the change upstream is served downstream", async || {
        downstream.cds().await.digest("svc").await.unwrap() != before
    })
    .await;
    assert_eq!(downstream.cds().await.digest("svc").await.unwrap(), upstream.cds().await.digest("svc").await.unwrap());

    // A key deleted upstream is cleared downstream (sent as "", as the protocol requires).
    upstream_store.put("alarm.default.alarm-settings", None, Expect::Seen).await.unwrap();
    eventually_async("the deleted key is cleared", async || {
        downstream.store.content().singles.get("alarm.default.alarm-settings").is_some_and(String::is_empty)
    })
    .await;

    downstream.stop().await.unwrap();
    upstream.stop().await.unwrap();
}
