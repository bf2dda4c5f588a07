//! The `global-configurations:` section over real sockets, with held polls on (the default): a
//! global change reaches services with and without their own entry, held polls included, as one
//! release naming every service whose answer changed; a service's own setting and a targeting
//! group's win over a global one; two replicas reading the same document serve the same uuids;
//! the layers and preview routes say where each value comes from and what an agent would ignore.

use std::time::Duration;

use serde_json::{Value, json};
use skyconf_core::codec::DiscoveryCommand;
use skyconf_proto::v3::configuration_discovery_service_client::ConfigurationDiscoveryServiceClient;
use skyconf_proto::v3::management_service_client::ManagementServiceClient;
use skyconf_proto::v3::{ConfigurationSyncRequest, InstanceProperties, KeyStringValuePair};
use skyconf_sources::file::FileSource;
use skyconf_testkit::fixtures::temp_file;
use skyconf_testkit::server::{AdminClient, Server, eventually_async, loopback};
use tonic::transport::Channel;

fn document(global_rate: u32) -> String {
    format!(
        "global-configurations:\n  agent.sample_n_per_3_secs: {global_rate}\n  agent.trace.ignore_path: /health/**\nconfigurations:\n  listed:\n    agent.span_limit_per_segment: 100\n  own:\n    agent.sample_n_per_3_secs: 50\n    agent.trace.ignore_path: /own\ntargeting:\n  listed:\n    - group: canary\n      instances: [pod-1]\n      settings:\n        agent.sample_n_per_3_secs: 7\n"
    )
}

/// One poll with the Java agent's 30 s deadline (held while unchanged): the command, or `None`.
async fn held_poll(channel: Channel, service: String, uuid: String) -> Option<DiscoveryCommand> {
    let mut request = tonic::Request::new(ConfigurationSyncRequest { service, uuid });
    request.set_timeout(Duration::from_secs(30));
    let commands = ConfigurationDiscoveryServiceClient::new(channel).fetch_configurations(request).await.unwrap();
    DiscoveryCommand::find(&commands.into_inner())
}

/// One poll answered at once (no deadline: never held).
async fn poll(channel: &Channel, service: &str) -> DiscoveryCommand {
    let request = ConfigurationSyncRequest { service: service.into(), uuid: String::new() };
    let commands =
        ConfigurationDiscoveryServiceClient::new(channel.clone()).fetch_configurations(request).await.unwrap();
    DiscoveryCommand::find(&commands.into_inner()).expect("a first poll gets a command")
}

async fn connect(server: &Server) -> Channel {
    Channel::from_shared(format!("http://{}", server.grpc_addr)).unwrap().connect().await.unwrap()
}

fn value<'a>(command: &'a DiscoveryCommand, key: &str) -> Option<&'a str> {
    command.config.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

async fn held_polls(admin: &AdminClient) -> String {
    let metrics = admin.get("/metrics").await.body;
    metrics.lines().find(|l| l.starts_with("skyconf_held_polls ")).unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_global_change_reaches_every_service_held_polls_included_as_one_release_on_both_replicas() {
    let (dir, path) = temp_file("agents.yaml", &document(5));
    let a = Server::start(FileSource::new(&path), loopback()).await;
    let b = Server::start(FileSource::new(&path), loopback()).await;
    let (channel_a, channel_b) = (connect(&a).await, connect(&b).await);
    let mut first = Vec::new();
    for service in ["listed", "unlisted", "own"] {
        let (on_a, on_b) = (poll(&channel_a, service).await, poll(&channel_b, service).await);
        assert_eq!(on_a.uuid, on_b.uuid, "{service}: both replicas serve the same uuid");
        assert_eq!(value(&on_a, "agent.trace.ignore_path"), Some(if service == "own" { "/own" } else { "/health/**" }));
        first.push(on_a);
    }
    assert_eq!(value(&first[0], "agent.sample_n_per_3_secs"), Some("5"), "the global value under `listed`");
    assert_eq!(value(&first[0], "agent.span_limit_per_segment"), Some("100"));
    assert_eq!(
        value(&first[1], "agent.sample_n_per_3_secs"),
        Some("5"),
        "an unlisted service gets the global settings"
    );
    assert_eq!(value(&first[2], "agent.sample_n_per_3_secs"), Some("50"), "the service's own setting wins");

    // Held polls of every service, on both replicas, each echoing what it holds.
    let mut held = Vec::new();
    for (channel, admin) in [(&channel_a, a.admin()), (&channel_b, b.admin())] {
        for (service, command) in ["listed", "unlisted"].into_iter().zip(&first) {
            let uuid = command.uuid.clone().unwrap();
            held.push(tokio::spawn(held_poll(channel.clone(), service.to_owned(), uuid)));
        }
        eventually_async("both polls are held", async || held_polls(&admin).await == "skyconf_held_polls 2").await;
    }
    let staged = dir.path().join(".agents.yaml.swp");
    std::fs::write(&staged, document(6)).unwrap();
    std::fs::rename(&staged, &path).unwrap();
    let mut answered = Vec::new();
    for poll in held {
        let command =
            tokio::time::timeout(Duration::from_secs(10), poll).await.expect("answered at the change").unwrap();
        let command = command.expect("the held poll gets the new command");
        assert_eq!(value(&command, "agent.sample_n_per_3_secs"), Some("6"));
        answered.push(command.uuid.unwrap());
    }
    assert_eq!((&answered[0], &answered[1]), (&answered[2], &answered[3]), "both replicas answer the same uuids");
    assert_ne!(answered[0], answered[1], "`listed` and `unlisted` are served different settings");
    // `own` sets the key itself: its answer (and uuid) did not change.
    assert_eq!(poll(&channel_a, "own").await.uuid, first[2].uuid);

    let body = a.admin().get_json("/api/v1/releases").await;
    let newest = &body["releases"][0];
    let named: Vec<&str> =
        newest["changes"].as_array().unwrap().iter().map(|c| c["service"].as_str().unwrap()).collect();
    assert_eq!(named, ["listed", "*"], "one release names every service whose answer changed: {newest}");
    let history = a.admin().get_json("/api/v1/services/listed/history").await;
    let keys = &history["history"][0]["change"]["keys"];
    assert_eq!(keys, &json!([{"key": "agent.sample_n_per_3_secs", "before": "5", "after": "6"}]), "{history}");
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}

#[tokio::test]
async fn a_group_wins_over_the_global_setting_and_the_layers_route_says_so() {
    let (_dir, path) = temp_file("agents.yaml", &document(5));
    let server = Server::start(FileSource::new(&path), loopback()).await;
    let channel = connect(&server).await;
    let report = InstanceProperties {
        service: "listed".into(),
        service_instance: "pod-1".into(),
        properties: vec![KeyStringValuePair { key: "zone".into(), value: "eu".into() }],
        layer: String::new(),
    };
    ManagementServiceClient::new(channel.clone()).report_instance_properties(report).await.unwrap();
    let command = poll(&channel, "listed").await;
    assert_eq!(value(&command, "agent.sample_n_per_3_secs"), Some("7"), "the group's value");
    assert_eq!(value(&command, "agent.trace.ignore_path"), Some("/health/**"), "the global value under the group");

    let admin = server.admin();
    let layers = admin.get_json("/api/v1/services/listed/layers?instance=pod-1&property=zone%3Deu").await;
    assert_eq!(layers["digest"], command.uuid.clone().unwrap(), "{layers}");
    assert_eq!(layers["group"], "canary");
    let named = crate::pairs(&layers["settings"], "key", "layer");
    assert_eq!(
        named,
        [
            ("agent.span_limit_per_segment", "service"),
            ("agent.sample_n_per_3_secs", "group:canary"),
            ("agent.trace.ignore_path", "global"),
        ]
    );
    let plain = admin.get_json("/api/v1/services/unlisted/layers").await;
    assert_eq!((plain["configured"].as_bool(), plain["group"].is_null()), (Some(false), true));
    assert_eq!(plain["digest"], poll(&channel, "unlisted").await.uuid.unwrap());
    assert_eq!(admin.get("/api/v1/services/listed/layers?bogus=1").await.status, 400);

    // A per-service write edits the service's own settings: the global ones stay global.
    let own = admin.get_json("/api/v1/services/listed").await;
    assert_eq!(own["config"], json!({"agent.span_limit_per_segment": "100"}), "{own}");
    let patch = json!({"config": {"agent.span_limit_per_segment": "200"}}).to_string();
    let reply = admin.send("PATCH", "/api/v1/services/listed", &[("content-type", "application/json")], &patch).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let written = std::fs::read_to_string(&path).unwrap();
    let table = skyconf_core::read(&written).unwrap();
    assert_eq!(table.get("listed").unwrap().own_entries(), [("agent.span_limit_per_segment".into(), "200".into())]);
    assert_eq!(table.global().unwrap().entries().len(), 2, "{written}");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn the_preview_answers_for_a_draft_and_judges_paths_as_the_java_agent_would() {
    let (_dir, path) = temp_file("agents.yaml", &document(5));
    let server = Server::start(FileSource::new(&path), loopback()).await;
    let admin = server.admin();
    let draft = "global-configurations:\n  agent.trace.ignore_path: /eureka/**, /actuator/**\n  agent.ignore_suffix: .css\nconfigurations: {}\n";
    let body = json!({
        "service": "checkout",
        "instance": "c-1",
        "document": draft,
        "paths": ["/eureka/apps/x", "/actuator/health", "/site.css", "/orders"],
    });
    let reply = admin.send("POST", "/api/v1/preview", &[("content-type", "application/json")], &body.to_string()).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let preview: Value = reply.json();
    assert_eq!(preview["against"], "draft");
    let verdicts: Vec<(bool, Option<&str>)> = preview["ignored"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["ignored"].as_bool().unwrap(), v["pattern"].as_str()))
        .collect();
    assert_eq!(
        verdicts,
        [(true, Some("/eureka/**")), (false, None), (true, Some(".css")), (false, None)],
        "the space after the comma is part of the second pattern: {preview}"
    );
    assert!(preview["warnings"][0].as_str().unwrap().contains("space"), "{preview}");
    // The served document, for an instance of a group.
    let served = json!({"service": "listed", "instance": "pod-1", "paths": ["/health/x"]});
    let reply =
        admin.send("POST", "/api/v1/preview", &[("content-type", "application/json")], &served.to_string()).await;
    let preview: Value = reply.json();
    assert_eq!((preview["against"].as_str(), preview["group"].as_str()), (Some("served"), Some("canary")), "{preview}");
    assert_eq!(preview["ignored"][0]["ignored"], true);
    // A draft that would be refused says where.
    let bad = json!({"service": "x", "document": "global-configurations:\n  k:\nconfigurations: {}\n"});
    let reply = admin.send("POST", "/api/v1/preview", &[("content-type", "application/json")], &bad.to_string()).await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.json()["details"]["line"], 2, "{}", reply.body);
    assert!(
        reply.json()["details"]["message"].as_str().is_some_and(|m| m.starts_with("2:")),
        "LINE:COLUMN: {}",
        reply.body
    );
    server.stop().await.unwrap();
}
