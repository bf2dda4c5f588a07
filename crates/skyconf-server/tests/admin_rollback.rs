//! Writes and rollback over real sockets: a write through the admin API reaches the file by
//! atomic rename and is served; the release history survives a restart; a rollback restores
//! exactly the values (and digest) a tonic client fetched before.

use std::net::SocketAddr;
use std::path::Path;

use skyconf_core::codec::DiscoveryCommand;
use skyconf_proto::v3::ConfigurationSyncRequest;
use skyconf_proto::v3::configuration_discovery_service_client::ConfigurationDiscoveryServiceClient;
use skyconf_server::{Running, ServeConfig};
use skyconf_sources::file::FileSource;

const V1: &str = "# comments survive a rollback\nconfigurations:\n  svc:\n    agent.sample_n_per_3_secs: 010\n    agent.ignore_suffix: .jpg\n";

async fn start(path: &Path, data: &Path) -> Running {
    let config = ServeConfig {
        grpc_addr: "127.0.0.1:0".parse().unwrap(),
        admin_addr: "127.0.0.1:0".parse().unwrap(),
        data_dir: Some(data.to_owned()),
        ..ServeConfig::default()
    };
    skyconf_server::start_with(FileSource::new(path), config).await.unwrap()
}

async fn fetch(addr: SocketAddr) -> DiscoveryCommand {
    let mut client = ConfigurationDiscoveryServiceClient::connect(format!("http://{addr}")).await.unwrap();
    let request = ConfigurationSyncRequest { service: "svc".into(), uuid: String::new() };
    DiscoveryCommand::find(&client.fetch_configurations(request).await.unwrap().into_inner()).unwrap()
}

async fn http(addr: SocketAddr, method: &str, path: &str, headers: &str, body: &str) -> (u16, serde_json::Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{headers}Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut out = String::new();
    stream.read_to_string(&mut out).await.unwrap();
    let status = out[9..12].parse().unwrap();
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or_default();
    (status, serde_json::from_str(body).unwrap_or(serde_json::Value::Null))
}

#[tokio::test]
async fn a_rollback_after_a_restart_restores_what_agents_fetched_before() {
    let dir = tempfile::tempdir().unwrap();
    let (path, data) = (dir.path().join("agents.yaml"), dir.path().join("data"));
    std::fs::write(&path, V1).unwrap();
    let running = start(&path, &data).await;
    let before = fetch(running.grpc_addr).await;

    let body = r#"{"config": {"agent.sample_n_per_3_secs": "50"}, "author": "eve", "message": "more samples"}"#;
    let headers = "Content-Type: application/json\r\n";
    let (status, answer) = http(running.admin_addr, "PUT", "/api/v1/services/svc", headers, body).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["served"], true);
    let changed = fetch(running.grpc_addr).await;
    assert_eq!(changed.config, [("agent.sample_n_per_3_secs".to_owned(), "50".to_owned())]);
    assert!(std::fs::read_to_string(&path).unwrap().contains("\"50\""), "written through to the file");
    running.stop().await.unwrap();

    let running = start(&path, &data).await;
    let (status, list) = http(running.admin_addr, "GET", "/api/v1/releases", "", "").await;
    assert_eq!(status, 200);
    let ids: Vec<u64> = list["releases"].as_array().unwrap().iter().map(|r| r["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, [2, 1], "the history survived the restart, and the restart added no release");
    assert_eq!(list["releases"][0]["author"], "eve");

    let (status, dry) = http(running.admin_addr, "POST", "/api/v1/releases/1/rollback?dry_run=true", "", "").await;
    assert_eq!(status, 200, "{dry}");
    assert_eq!(dry["changes"][0]["digest_after"], before.uuid.clone().unwrap());
    assert_eq!(fetch(running.grpc_addr).await.uuid, changed.uuid, "a dry run changes nothing");

    let (status, answer) =
        http(running.admin_addr, "POST", "/api/v1/releases/1/rollback", "X-Skyconf-Author: frank\r\n", "").await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["release"]["rollback_of"], 1);
    let after = fetch(running.grpc_addr).await;
    assert_eq!(after.uuid, before.uuid);
    assert_eq!(after.config, before.config);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), V1, "the exact text, comments included");

    let (status, missing) = http(running.admin_addr, "GET", "/api/v1/services/nope", "", "").await;
    assert_eq!((status, missing["error"].is_string()), (404, true));
    running.stop().await.unwrap();
}
