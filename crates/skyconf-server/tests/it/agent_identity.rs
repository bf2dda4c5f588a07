//! skyconf's own Rust agent library as a client, end to end over real sockets: an agent with an
//! instance identity reports it on the channel it polls on, so `GET /api/v1/instances` shows the
//! instance, its properties and the state of its polls, and no anonymous poller.

use std::time::Duration;

use skyconf_agent::watchers::SampleNPer3Secs;
use skyconf_agent::{Agent, AgentOptions, GrpcTransport, Registry};
use skyconf_sources::file::FileSource;
use skyconf_testkit::PATIENCE;
use skyconf_testkit::fixtures::temp_file;
use skyconf_testkit::server::{Server, loopback};
use tokio::time::Instant;

const V1: &str = "configurations:\n  svc:\n    agent.sample_n_per_3_secs: 10\n";

#[tokio::test]
async fn an_agent_with_an_identity_shows_as_its_instance_with_its_properties() {
    let (_dir, path) = temp_file("agents.yaml", V1);
    let running = Server::start(FileSource::new(&path), loopback()).await;
    let registry = Registry::new();
    registry.register(std::sync::Arc::new(SampleNPer3Secs::default()));
    let options = AgentOptions::new("svc")
        .interval(Duration::from_millis(50))
        .instance("checkout-1")
        .property("zone", "eu-1")
        .property("version", "1.4.2");
    let transport = GrpcTransport::lazy(&running.grpc_addr.to_string()).unwrap();
    let handle = Agent::new(options, registry, transport).spawn();

    // Polled until the agent echoes the served digest: the server then counts it as applied.
    let give_up = Instant::now() + PATIENCE;
    let body = loop {
        let body = running.admin().get_json("/api/v1/instances").await;
        if body["instances"][0]["services"][0]["state"] == "applied" {
            break body;
        }
        assert!(Instant::now() < give_up, "the instance did not show as applied within {PATIENCE:?}: {body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let instances = body["instances"].as_array().unwrap();
    assert_eq!(instances.len(), 1, "{body}");
    let instance = &instances[0];
    assert_eq!((instance["service"].as_str(), instance["instance"].as_str()), (Some("svc"), Some("checkout-1")));
    let properties = crate::pairs(&instance["properties"], "key", "value");
    assert_eq!(properties, [("zone", "eu-1"), ("version", "1.4.2")]);
    assert_eq!(instance["services"][0]["service"], "svc");
    assert!(
        body["anonymous"].as_array().unwrap().is_empty(),
        "the polls come from the connection that reported: {body}"
    );
    handle.stop().await;
    running.stop().await.unwrap();
}
