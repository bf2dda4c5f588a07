//! Gateway mode over real sockets: a raw HTTP/2 client (the h2 crate, so every header, frame,
//! trailer and reset is visible) calls skyconf, which forwards to recording upstreams
//! (`skyconf_testkit::upstream`). What arrives upstream must be what the client sent, and what
//! comes back must be what the upstream answered; failures end as they would against the OAP.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use h2::Reason;
use http::{HeaderMap, Request};
use skyconf_proto::v3::configuration_discovery_service_client::ConfigurationDiscoveryServiceClient;
use skyconf_proto::v3::management_service_client::ManagementServiceClient;
use skyconf_proto::v3::{ConfigurationSyncRequest, InstanceProperties, KeyStringValuePair};
use skyconf_server::{GatewayConfig, ServeConfig};
use skyconf_sources::file::FileSource;
use skyconf_testkit::fixtures::temp_file;
use skyconf_testkit::server::{Server, eventually_async, loopback};
use skyconf_testkit::upstream::Upstream;
use tokio::net::TcpStream;

const DOC: &str = "configurations:\n  order:\n    agent.sample_n_per_3_secs: 10\n";

/// A skyconf gateway in front of `upstreams`, once it is connected to all of them.
async fn gateway(upstreams: &[&Upstream]) -> (tempfile::TempDir, Server) {
    let config = GatewayConfig::new(upstreams.iter().map(|u| u.addr.to_string()).collect());
    gateway_with(upstreams, ServeConfig { gateway: Some(config), ..loopback() }).await
}

/// A skyconf server with `config` (gateway mode), once it is connected to every one of `upstreams`.
async fn gateway_with(upstreams: &[&Upstream], config: ServeConfig) -> (tempfile::TempDir, Server) {
    let (dir, path) = temp_file("agent-configurations.yaml", DOC);
    let server = Server::start(FileSource::new(path), config).await;
    let admin = server.admin();
    eventually_async("the gateway connects to every upstream", async || {
        let metrics = admin.get("/metrics").await.body;
        upstreams.iter().all(|u| metrics.contains(&format!("skyconf_gateway_upstream_up{{upstream=\"{}\"}} 1", u.addr)))
    })
    .await;
    (dir, server)
}

/// A plain HTTP/2 client connection.
async fn connect(addr: SocketAddr) -> h2::client::SendRequest<Bytes> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    client
}

/// `message` with its gRPC header.
fn framed(message: &[u8]) -> Vec<u8> {
    let mut out = vec![0];
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out
}

/// How a call ended, as the client saw it.
#[derive(Debug, Default)]
struct Outcome {
    headers: HeaderMap,
    body: Vec<u8>,
    trailers: Option<HeaderMap>,
    reset: Option<Reason>,
}

impl Outcome {
    /// `grpc-status`, from the trailers or a trailers-only response.
    fn grpc_status(&self) -> Option<String> {
        let from = |h: &HeaderMap| h.get("grpc-status").map(|v| v.to_str().unwrap().to_owned());
        self.trailers.as_ref().and_then(from).or_else(|| from(&self.headers))
    }
}

fn request(path: &str, metadata: &[(&str, &str)]) -> Request<()> {
    let mut builder = Request::post(format!("http://skyconf{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (name, value) in metadata {
        builder = builder.header(*name, *value);
    }
    builder.body(()).unwrap()
}

/// Sends `body` as the whole request and reads the whole answer.
async fn call(
    client: &mut h2::client::SendRequest<Bytes>,
    path: &str,
    metadata: &[(&str, &str)],
    body: &[u8],
) -> Outcome {
    let (response, mut send) = open(client, path, metadata).await;
    send.send_data(Bytes::copy_from_slice(body), true).unwrap();
    read(response).await
}

/// Opens a call on the connection of `client`: its answer, and the stream to send its messages on.
async fn open(
    client: &h2::client::SendRequest<Bytes>,
    path: &str,
    metadata: &[(&str, &str)],
) -> (h2::client::ResponseFuture, h2::SendStream<Bytes>) {
    let mut client = client.clone().ready().await.unwrap();
    client.send_request(request(path, metadata), false).unwrap()
}

async fn read(response: h2::client::ResponseFuture) -> Outcome {
    let mut outcome = Outcome::default();
    let response = match response.await {
        Ok(response) => response,
        Err(e) => {
            outcome.reset = e.reason();
            return outcome;
        }
    };
    let (parts, mut body) = response.into_parts();
    outcome.headers = parts.headers;
    while let Some(chunk) = body.data().await {
        match chunk {
            Ok(chunk) => {
                let _ = body.flow_control().release_capacity(chunk.len());
                outcome.body.extend_from_slice(&chunk);
            }
            Err(e) => {
                outcome.reset = e.reason();
                return outcome;
            }
        }
    }
    match body.trailers().await {
        Ok(trailers) => outcome.trailers = trailers,
        Err(e) => outcome.reset = e.reason(),
    }
    outcome
}

#[tokio::test]
async fn a_call_is_forwarded_byte_for_byte_with_its_metadata_and_the_answer_comes_back_unchanged() {
    let upstream = Upstream::start("oap-a").await;
    let (_dir, server) = gateway(&[&upstream]).await;
    let mut client = connect(server.grpc_addr).await;
    let segments: Vec<u8> =
        [framed(b"segment one"), framed(&[0u8, 1, 2, 255, 254]), framed(&vec![7u8; 70_000])].concat();
    let metadata = [
        ("authentication", "agent-token"),
        ("agent-version", "9.3.0"),
        ("grpc-timeout", "20S"),
        ("x-custom-bin", "AAEC"),
    ];
    let outcome = call(&mut client, "/skywalking.v3.TraceSegmentReportService/echo", &metadata, &segments).await;

    let calls = upstream.wait_for("the call ended", |calls| calls.iter().any(|c| c.ended.is_some())).await;
    let received = &calls[0];
    assert_eq!(received.path, "/skywalking.v3.TraceSegmentReportService/echo");
    assert_eq!(received.body, segments, "every message arrives byte for byte");
    for (name, value) in metadata {
        assert_eq!(received.headers.get(name).unwrap(), value, "{name} is forwarded unchanged");
    }
    assert_eq!(received.headers["content-type"], "application/grpc");
    assert_eq!(received.headers["te"], "trailers");

    assert_eq!(outcome.reset, None);
    assert_eq!(outcome.headers["x-upstream"], "oap-a", "response metadata comes back");
    assert_eq!(outcome.body, segments, "every response byte comes back");
    let trailers = outcome.trailers.expect("trailers");
    assert_eq!(trailers["grpc-status"], "0");
    assert_eq!(trailers["x-trailer"], "oap-a", "trailers come back");
}

#[tokio::test]
async fn statuses_resets_and_paths_skyconf_never_heard_of_pass_through() {
    let upstream = Upstream::start("oap-a").await;
    let (_dir, server) = gateway(&[&upstream]).await;
    let mut client = connect(server.grpc_addr).await;

    let outcome = call(&mut client, "/skywalking.v3.JVMMetricReportService/status", &[], &framed(b"jvm")).await;
    assert_eq!(outcome.grpc_status().as_deref(), Some("3"));
    assert_eq!(outcome.headers["grpc-message"], "bad%20input");
    assert_eq!(outcome.headers["x-detail"], "oap-a");

    // A reset before the OAP answered ends the call with the status the gRPC spec gives the
    // reset's code, as a client of the OAP would report it: CANCEL is CANCELLED.
    let outcome = call(&mut client, "/skywalking.v3.LogReportService/reset", &[], &framed(b"log")).await;
    assert_eq!(outcome.grpc_status().as_deref(), Some("1"), "{outcome:?}");

    let outcome = call(&mut client, "/never.Heard.Of/echo", &[], &framed(b"?")).await;
    assert_eq!(outcome.grpc_status().as_deref(), Some("0"));
    assert_eq!(outcome.body, framed(b"?"));
    assert!(upstream.calls().iter().any(|c| c.path == "/never.Heard.Of/echo"));
}

#[tokio::test]
async fn configuration_discovery_is_answered_here_and_never_forwarded() {
    let upstream = Upstream::start("oap-a").await;
    let (_dir, server) = gateway(&[&upstream]).await;
    let command = server.cds().await.fetch("order", "").await.expect("the command");
    assert_eq!(command.config, [("agent.sample_n_per_3_secs".to_owned(), "10".to_owned())]);
    assert!(upstream.calls().is_empty(), "{:?}", upstream.calls());
}

#[tokio::test]
async fn an_agent_cancelling_its_call_cancels_the_oaps_stream() {
    let upstream = Upstream::start("oap-a").await;
    let (_dir, server) = gateway(&[&upstream]).await;
    let client = connect(server.grpc_addr).await;
    let (_response, mut send) = open(&client, "/skywalking.v3.TraceSegmentReportService/echo", &[]).await;
    send.send_data(Bytes::from(framed(b"first segment")), false).unwrap();
    upstream.wait_for("the first segment", |calls| calls.first().is_some_and(|c| !c.body.is_empty())).await;
    send.send_reset(Reason::CANCEL);
    let calls = upstream.wait_for("the call's end", |calls| calls[0].ended.is_some()).await;
    assert_eq!(calls[0].ended, Some(Some(Reason::CANCEL)), "the OAP sees the call cancelled");
}

#[tokio::test]
async fn an_oap_that_dies_mid_stream_ends_the_call_unavailable_and_the_next_call_goes_to_another() {
    let mut first = Upstream::start("oap-a").await;
    let second = Upstream::start("oap-b").await;
    let (_dir, server) = gateway(&[&first, &second]).await;
    let mut client = connect(server.grpc_addr).await;

    // The connection is pinned to the first OAP (both are idle; the first is chosen).
    let outcome = call(&mut client, "/skywalking.v3.JVMMetricReportService/echo", &[], &framed(b"jvm")).await;
    assert_eq!(outcome.headers["x-upstream"], "oap-a");
    // A stream the OAP holds open...
    let (response, mut send) = open(&client, "/skywalking.v3.TraceSegmentReportService/stall", &[]).await;
    send.send_data(Bytes::from(framed(b"segment")), false).unwrap();
    first.wait_for("the stream", |calls| calls.iter().any(|c| c.path.ends_with("/stall"))).await;
    // ...when the OAP dies.
    first.kill();
    let outcome = read(response).await;
    assert_eq!(outcome.grpc_status().as_deref(), Some("14"), "UNAVAILABLE, as from a lost OAP: {outcome:?}");

    // The same connection's next call, and a new connection's, reach the other OAP.
    let outcome = call(&mut client, "/skywalking.v3.JVMMetricReportService/echo", &[], &framed(b"jvm")).await;
    assert_eq!(outcome.headers.get("x-upstream").map(|v| v.to_str().unwrap()), Some("oap-b"), "{outcome:?}");
    let mut fresh = connect(server.grpc_addr).await;
    let outcome = call(&mut fresh, "/skywalking.v3.JVMMetricReportService/echo", &[], &framed(b"jvm")).await;
    assert_eq!(outcome.headers["x-upstream"], "oap-b");
}

#[tokio::test]
async fn with_every_oap_down_forwarded_calls_are_unavailable_and_configuration_discovery_still_answers() {
    let mut upstream = Upstream::start("oap-a").await;
    let (_dir, server) = gateway(&[&upstream]).await;
    upstream.kill();
    let admin = server.admin();
    let down = format!("skyconf_gateway_upstream_up{{upstream=\"{}\"}} 0", upstream.addr);
    eventually_async("the gateway sees the OAP gone", async || admin.get("/metrics").await.body.contains(&down)).await;
    let status = admin.get_json("/api/v1/status").await;
    assert_eq!(status["gateway"]["upstreams"][0]["addr"], upstream.addr.to_string(), "{status}");
    assert_eq!(status["gateway"]["upstreams"][0]["up"], false);
    assert_eq!(status["gateway"]["tls"], false);

    let mut client = connect(server.grpc_addr).await;
    let outcome = call(&mut client, "/skywalking.v3.JVMMetricReportService/echo", &[], &framed(b"jvm")).await;
    assert_eq!(outcome.grpc_status().as_deref(), Some("14"), "{outcome:?}");
    let command = server.cds().await.fetch("order", "").await.expect("CDS answers with every OAP down");
    assert_eq!(command.config.len(), 1);

    // The OAP comes back on its address: forwarding resumes.
    let back = Upstream::start_on("oap-a-again", upstream.addr).await;
    let up = down.replace("} 0", "} 1");
    eventually_async("the gateway reconnects", async || admin.get("/metrics").await.body.contains(&up)).await;
    let outcome = call(&mut client, "/skywalking.v3.JVMMetricReportService/echo", &[], &framed(b"jvm")).await;
    assert_eq!(outcome.headers["x-upstream"], "oap-a-again");
    drop(back);
}

#[tokio::test]
async fn a_stalled_oap_stops_the_agent_within_the_flow_control_windows() {
    let upstream = Upstream::start("oap-a").await;
    let (_dir, server) = gateway(&[&upstream]).await;
    let client = connect(server.grpc_addr).await;
    let (_response, mut send) = open(&client, "/skywalking.v3.TraceSegmentReportService/stall", &[]).await;
    upstream.wait_for("the stream", |calls| !calls.is_empty()).await;

    // Push as fast as the windows let us, until no more room comes for a while.
    let chunk = Bytes::from(vec![0u8; 16 * 1024]);
    let mut sent = 0usize;
    const LIMIT: usize = 256 * 1024 * 1024;
    while sent < LIMIT {
        send.reserve_capacity(chunk.len());
        let room =
            tokio::time::timeout(Duration::from_secs(2), std::future::poll_fn(|cx| send.poll_capacity(cx))).await;
        match room {
            Ok(Some(Ok(room))) if room > 0 => {
                send.send_data(chunk.slice(..room.min(chunk.len())), false).unwrap();
                sent += room.min(chunk.len());
            }
            Ok(Some(Ok(_))) => {}
            Ok(other) => panic!("the stream failed: {other:?}"),
            // No room for two seconds: the agent is held back.
            Err(_) => break,
        }
    }
    // The agent's window into skyconf, skyconf's into the upstream, and the upstream's own
    // buffers: a few MiB at most, whatever the agent wants to send.
    assert!(sent < 16 * 1024 * 1024, "{sent} bytes went in before the agent was held back");
    assert!(sent > 0);
}

#[tokio::test]
async fn management_calls_are_forwarded_and_tell_the_fleet_which_instance_a_connection_is() {
    let upstream = Upstream::start("oap-a").await;
    let (_dir, server) = gateway(&[&upstream]).await;
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", server.grpc_addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let properties = InstanceProperties {
        service: "order".into(),
        service_instance: "pod-1@10.0.0.7".into(),
        properties: vec![KeyStringValuePair { key: "hostname".into(), value: "pod-1".into() }],
        ..Default::default()
    };
    let mut request = tonic::Request::new(properties.clone());
    request.metadata_mut().insert("agent-version", "9.3.0".parse().unwrap());
    // The recording upstream echoes the request back, which is no `Commands`: what the client
    // makes of it does not matter here.
    let _ = ManagementServiceClient::new(channel.clone()).report_instance_properties(request).await;
    let calls = upstream.wait_for("the properties", |calls| calls.iter().any(|c| c.ended.is_some())).await;
    assert_eq!(calls[0].path, "/skywalking.v3.ManagementService/reportInstanceProperties");
    assert_eq!(calls[0].body, framed(&prost::Message::encode_to_vec(&properties)), "forwarded unchanged");

    let sync = ConfigurationSyncRequest { service: "order".into(), uuid: String::new() };
    // The channel stays open: the identity lives as long as its connection.
    ConfigurationDiscoveryServiceClient::new(channel.clone()).fetch_configurations(sync.clone()).await.unwrap();
    let digest = server.served.snapshot().answer("order").digest.clone();
    let agents = server.fleet.agents_of("order", &digest);
    assert_eq!(agents.len(), 1, "{agents:?}");
    assert_eq!(agents[0].instance.as_deref(), Some("pod-1@10.0.0.7"));

    // A connection that polls twice and never says which instance it is: an anonymous poller,
    // not an agent that is behind.
    let anonymous = tonic::transport::Channel::from_shared(format!("http://{}", server.grpc_addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    for _ in 0..2 {
        ConfigurationDiscoveryServiceClient::new(anonymous.clone()).fetch_configurations(sync.clone()).await.unwrap();
    }
    let instances = server.admin().get_json("/api/v1/instances").await;
    let instance = &instances["instances"][0];
    assert_eq!(instance["instance"], "pod-1@10.0.0.7", "{instances}");
    assert_eq!(instance["agent_version"], "9.3.0");
    assert_eq!(instance["properties"][0]["key"], "hostname");
    assert_eq!(instance["properties"][0]["value"], "pod-1");
    assert_eq!(instances["anonymous"].as_array().map(Vec::len), Some(1), "{instances}");
    assert_eq!(instances["anonymous"][0]["state"], "anonymous");
}

#[tokio::test]
async fn a_hung_oap_is_found_by_pings_and_its_agents_go_to_another() {
    let first = Upstream::start("oap-a").await;
    let second = Upstream::start("oap-b").await;
    let mut config = GatewayConfig::new(vec![first.addr.to_string(), second.addr.to_string()]);
    config.keepalive_interval = Duration::from_millis(200);
    // Generous beside the interval: a busy CI machine must not take the live OAP for a hung one.
    config.keepalive_timeout = Duration::from_secs(1);
    let (_dir, server) = gateway_with(&[&first, &second], ServeConfig { gateway: Some(config), ..loopback() }).await;
    let mut client = connect(server.grpc_addr).await;
    let outcome = call(&mut client, "/skywalking.v3.JVMMetricReportService/echo", &[], &framed(b"jvm")).await;
    assert_eq!(outcome.headers["x-upstream"], "oap-a");

    // The OAP hangs: its connections stay open but nothing answers, not even a ping.
    first.freeze();
    let admin = server.admin();
    let down = format!("skyconf_gateway_upstream_up{{upstream=\"{}\"}} 0", first.addr);
    eventually_async("the unanswered pings", async || admin.get("/metrics").await.body.contains(&down)).await;
    let outcome = call(&mut client, "/skywalking.v3.JVMMetricReportService/echo", &[], &framed(b"jvm")).await;
    assert_eq!(outcome.headers.get("x-upstream").map(|v| v.to_str().unwrap()), Some("oap-b"), "{outcome:?}");
}

#[tokio::test]
async fn the_agent_token_guards_configuration_discovery_only_and_dcs_is_answered_here() {
    let upstream = Upstream::start("oap-a").await;
    let security = skyconf_server::SecurityConfig {
        agent_token: Some(skyconf_server::security::Secret::new("s3cret")),
        ..Default::default()
    };
    let config =
        ServeConfig { gateway: Some(GatewayConfig::new(vec![upstream.addr.to_string()])), security, ..loopback() };
    let (_dir, server) = gateway_with(&[&upstream], config).await;
    let mut cds = ConfigurationDiscoveryServiceClient::connect(format!("http://{}", server.grpc_addr)).await.unwrap();
    let sync = ConfigurationSyncRequest { service: "order".into(), uuid: String::new() };
    let status = cds.fetch_configurations(sync).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "CDS still checks the agent token");

    // A forwarded call goes to the OAP with whatever token it carries: the OAP checks it.
    let mut client = connect(server.grpc_addr).await;
    let outcome =
        call(&mut client, "/skywalking.v3.JVMMetricReportService/echo", &[("authentication", "other")], &framed(b"j"))
            .await;
    assert_eq!(outcome.grpc_status().as_deref(), Some("0"));
    assert_eq!(upstream.calls()[0].headers["authentication"], "other");

    // DCS is answered by skyconf, not forwarded.
    let answer = server.dcs().await.call(skyconf_testkit::server::dcs_request()).await.unwrap().into_inner();
    assert!(!answer.uuid.is_empty());
    assert!(upstream.calls().iter().all(|c| !c.path.starts_with("/ConfigurationService/")));
}

#[tokio::test]
async fn shutdown_closes_forwarded_streams_that_do_not_end_within_the_drain() {
    let upstream = Upstream::start("oap-a").await;
    let (_dir, server) = gateway(&[&upstream]).await;
    let client = connect(server.grpc_addr).await;
    let (_response, mut send) = open(&client, "/skywalking.v3.TraceSegmentReportService/stall", &[]).await;
    send.send_data(Bytes::from(framed(b"segment")), false).unwrap();
    upstream.wait_for("the stream", |calls| !calls.is_empty()).await;
    let started = std::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(30), server.stop()).await.expect("the server stops").unwrap();
    let took = started.elapsed();
    assert!(took >= Duration::from_secs(9), "the stream had its drain: {took:?}");
}
