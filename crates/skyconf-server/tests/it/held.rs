//! Held polls over real sockets: an agent that sends the Java agent's 30 s deadline is held while
//! its configuration is unchanged and gets each store write within a second; the held polls show
//! in /metrics; a shutdown releases them as "unchanged" before the connections close.

use std::time::{Duration, Instant};

use skyconf_core::codec::DiscoveryCommand;
use skyconf_proto::v3::ConfigurationSyncRequest;
use skyconf_proto::v3::configuration_discovery_service_client::ConfigurationDiscoveryServiceClient;
use skyconf_sources::file::FileSource;
use skyconf_testkit::fixtures::{V5_DOCUMENT as GOOD, numbered, temp_file};
use skyconf_testkit::latency::percentiles;
use skyconf_testkit::server::{AdminClient, Server, eventually_async, loopback};
use tokio::sync::mpsc;
use tonic::transport::Channel;

/// One poll with the Java agent's deadline: the command, or `None` for "unchanged".
async fn poll(channel: &Channel, uuid: &str) -> Result<Option<DiscoveryCommand>, tonic::Status> {
    let mut request = tonic::Request::new(ConfigurationSyncRequest { service: "svc".into(), uuid: uuid.into() });
    request.set_timeout(Duration::from_secs(30));
    let commands = ConfigurationDiscoveryServiceClient::new(channel.clone()).fetch_configurations(request).await?;
    Ok(DiscoveryCommand::find(&commands.into_inner()))
}

async fn held_polls(admin: &AdminClient) -> String {
    let metrics = admin.get("/metrics").await.body;
    metrics.lines().find(|l| l.starts_with("skyconf_held_polls ")).unwrap_or_default().to_owned()
}

/// 20 store writes, each made while the agent's poll is held: p99 from the write to the command
/// at the agent ≤ 1 s, and no call ends in an error (no DEADLINE_EXCEEDED).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn propagation_held_polls_bring_each_write_to_the_agent_within_a_second() {
    let (dir, path) = temp_file("agent.yaml", GOOD);
    let server = Server::start(FileSource::new(&path), loopback()).await;
    let channel = Channel::from_shared(format!("http://{}", server.grpc_addr)).unwrap().connect().await.unwrap();
    // The agent: polls again as soon as an answer comes (the Java agent does when a held call
    // outlasts its 20 s interval), sending each command's arrival time.
    let (arrivals, mut arrived) = mpsc::unbounded_channel();
    let agent = tokio::spawn(async move {
        let mut uuid = String::new();
        loop {
            match poll(&channel, &uuid).await {
                Ok(Some(command)) => {
                    uuid = command.uuid.clone().unwrap();
                    if arrivals.send((Instant::now(), command)).is_err() {
                        return Ok(());
                    }
                }
                Ok(None) => {}
                Err(status) => return Err(status),
            }
        }
    });
    let (_, first) = arrived.recv().await.unwrap();
    assert!(first.uuid.is_some());
    let admin = server.admin();
    let mut delays = Vec::new();
    for n in 0..20 {
        eventually_async("the agent's poll is held", async || held_polls(&admin).await == "skyconf_held_polls 1").await;
        let staged = dir.path().join(".agent.yaml.swp");
        let written = Instant::now();
        std::fs::write(&staged, numbered(n)).unwrap();
        std::fs::rename(&staged, &path).unwrap();
        let (at, command) = arrived.recv().await.expect("the agent is still polling");
        assert_eq!(command.uuid.as_deref(), Some(server.served.snapshot().answer("svc").digest.as_str()));
        delays.push(at - written);
    }
    let p = percentiles(&mut delays);
    eprintln!("store write → command at a held agent, 20 writes: {p}");
    assert!(p.p99 <= Duration::from_secs(1), "{delays:?}");
    assert!(!agent.is_finished(), "a call failed");
    let metrics = admin.get("/metrics").await.body;
    assert!(metrics.contains("skyconf_held_polls_released_total{reason=\"changed\"} 20"), "{metrics}");
    agent.abort();
}

/// A shutdown answers every held poll "unchanged" (an OK call, not an error) before the server
/// stops.
#[tokio::test]
async fn shutdown_releases_held_polls_unchanged() {
    let (_dir, path) = temp_file("agent.yaml", GOOD);
    let server = Server::start(FileSource::new(&path), loopback()).await;
    let digest = server.served.snapshot().answer("svc").digest.as_str().to_owned();
    let mut calls = Vec::new();
    for _ in 0..3 {
        let channel = Channel::from_shared(format!("http://{}", server.grpc_addr)).unwrap().connect().await.unwrap();
        let digest = digest.clone();
        calls.push(tokio::spawn(async move { poll(&channel, &digest).await }));
    }
    let admin = server.admin();
    eventually_async("three held polls", async || held_polls(&admin).await == "skyconf_held_polls 3").await;
    let started = Instant::now();
    server.stop().await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5), "the stop did not wait for the holds");
    for call in calls {
        assert_eq!(call.await.unwrap().unwrap(), None, "unchanged");
    }
}
