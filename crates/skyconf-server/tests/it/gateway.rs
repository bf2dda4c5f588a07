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

use crate::metrics::value;

const DOC: &str = "configurations:\n  order:\n    agent.sample_n_per_3_secs: 10\n";

/// A skyconf gateway in front of `upstreams`, once it is connected to all of them.
async fn gateway(upstreams: &[&Upstream]) -> (tempfile::TempDir, Server) {
    let config = GatewayConfig::new(upstreams.iter().map(|u| u.addr.to_string()).collect());
    gateway_with(upstreams, ServeConfig { gateway: Some(config), ..loopback() }).await
}

/// One OAP (`oap-a`) and a skyconf gateway in front of it, connected to it.
async fn one_oap() -> (Upstream, tempfile::TempDir, Server) {
    let upstream = Upstream::start("oap-a").await;
    let (dir, server) = gateway(&[&upstream]).await;
    (upstream, dir, server)
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

/// Opens a call on the connection of `client` and sends `message` as its first, leaving the
/// request open: a call the upstream sees begun, which ends only when it or the test ends it.
async fn begin(
    client: &h2::client::SendRequest<Bytes>,
    path: &str,
    message: &[u8],
) -> (h2::client::ResponseFuture, h2::SendStream<Bytes>) {
    let (response, mut send) = open(client, path, &[]).await;
    send.send_data(Bytes::from(framed(message)), false).unwrap();
    (response, send)
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
    let (upstream, _dir, server) = one_oap().await;
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
    let (upstream, _dir, server) = one_oap().await;
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
    let (upstream, _dir, server) = one_oap().await;
    let command = server.cds().await.fetch("order", "").await.expect("the command");
    assert_eq!(command.config, [("agent.sample_n_per_3_secs".to_owned(), "10".to_owned())]);
    assert!(upstream.calls().is_empty(), "{:?}", upstream.calls());
}

#[tokio::test]
async fn an_agent_cancelling_its_call_cancels_the_oaps_stream() {
    let (upstream, _dir, server) = one_oap().await;
    let client = connect(server.grpc_addr).await;
    let (_response, mut send) = begin(&client, "/skywalking.v3.TraceSegmentReportService/echo", b"first segment").await;
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
    let (response, _send) = begin(&client, "/skywalking.v3.TraceSegmentReportService/stall", b"segment").await;
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
    let (upstream, _dir, server) = one_oap().await;
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
    let (upstream, _dir, server) = one_oap().await;
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
    let (upstream, _dir, server) = one_oap().await;
    let client = connect(server.grpc_addr).await;
    let (_response, _send) = begin(&client, "/skywalking.v3.TraceSegmentReportService/stall", b"segment").await;
    upstream.wait_for("the stream", |calls| !calls.is_empty()).await;
    let started = std::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(30), server.stop()).await.expect("the server stops").unwrap();
    let took = started.elapsed();
    assert!(took >= Duration::from_secs(9), "the stream had its drain: {took:?}");
}

/// A gateway with one connection to `upstream`, and `agents` agent connections each holding
/// an `echo` call open on it (one message sent, the request not ended).
async fn agents_holding_calls(
    server: &Server,
    upstream: &Upstream,
    agents: usize,
) -> Vec<(h2::client::ResponseFuture, h2::SendStream<Bytes>)> {
    let mut held = Vec::new();
    for i in 0..agents {
        let client = connect(server.grpc_addr).await;
        held.push(
            begin(&client, "/skywalking.v3.TraceSegmentReportService/echo", format!("held {i}").as_bytes()).await,
        );
    }
    upstream
        .wait_for("every held call's first message", |calls| {
            calls.iter().filter(|c| c.path.ends_with("/echo") && !c.body.is_empty()).count() >= agents
        })
        .await;
    held
}

/// Ends the held calls and checks each is answered in full (OK, its message echoed).
async fn assert_held_calls_complete(held: Vec<(h2::client::ResponseFuture, h2::SendStream<Bytes>)>) {
    for (i, (response, mut send)) in held.into_iter().enumerate() {
        send.send_data(Bytes::new(), true).unwrap();
        let outcome = tokio::time::timeout(Duration::from_secs(20), read(response)).await.expect("the answer");
        assert_eq!(outcome.grpc_status().as_deref(), Some("0"), "held call {i}: {outcome:?}");
        assert_eq!(outcome.body, framed(format!("held {i}").as_bytes()), "held call {i}");
    }
}

/// N5: an OAP answer whose header block or trailers are far too large fails that call with
/// INTERNAL (a status that does not make a Java agent drop its channel), and the upstream
/// connection every other agent's call shares lives on.
#[tokio::test]
async fn an_oversized_oap_answer_fails_that_call_only_and_the_shared_connection_lives() {
    let upstream = Upstream::start("oap-a").await;
    let mut config = GatewayConfig::new(vec![upstream.addr.to_string()]);
    config.connections_per_upstream = 1;
    let (_dir, server) = gateway_with(&[&upstream], ServeConfig { gateway: Some(config), ..loopback() }).await;
    let held = agents_holding_calls(&server, &upstream, 10).await;

    let mut client = connect(server.grpc_addr).await;
    for (method, bytes) in [
        ("bigtrailers", 64 * 1024),
        ("bigtrailers", 1024 * 1024),
        ("bigtrailers", 8 * 1024 * 1024),
        ("bigheaders", 64 * 1024),
        ("bigheaders", 8 * 1024 * 1024),
    ] {
        let path = format!("/skywalking.v3.LogReportService/{method}");
        let size = bytes.to_string();
        let outcome = call(&mut client, &path, &[("x-big-bytes", &size)], &framed(b"log")).await;
        assert_eq!(outcome.grpc_status().as_deref(), Some("13"), "{method} of {bytes} bytes: INTERNAL: {outcome:?}");
        assert!(
            outcome.headers.get("x-big").is_none()
                && outcome.trailers.as_ref().is_none_or(|t| t.get("x-big").is_none()),
            "the oversized block is not passed on"
        );
    }
    // Small ones still pass whole.
    let outcome =
        call(&mut client, "/skywalking.v3.LogReportService/bigtrailers", &[("x-big-bytes", "4000")], &framed(b"l"))
            .await;
    assert_eq!(outcome.grpc_status().as_deref(), Some("0"), "{outcome:?}");
    assert_eq!(outcome.trailers.as_ref().unwrap()["x-big"].len(), 4000);

    assert_held_calls_complete(held).await;
    assert_eq!(upstream.connections(), 1, "the shared upstream connection was never lost");
}

/// Request headers over the agent port's limit (16 KiB) are refused for that call only (HTTP
/// 431 on that stream); the connection and other calls on it go on.
#[tokio::test]
async fn request_headers_over_the_limit_fail_that_call_only() {
    let (upstream, _dir, server) = one_oap().await;
    let held = agents_holding_calls(&server, &upstream, 3).await;
    let mut client = connect(server.grpc_addr).await;
    let big = "h".repeat(17 * 1024);
    let (response, mut send) = open(&client, "/skywalking.v3.LogReportService/echo", &[("x-big", &big)]).await;
    let _ = send.send_data(Bytes::from(framed(b"log")), true);
    let response = response.await.expect("an answer on that stream");
    assert_eq!(response.status(), http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    // The same connection's next call passes, and so do the held ones.
    let outcome = call(&mut client, "/skywalking.v3.LogReportService/echo", &[], &framed(b"log")).await;
    assert_eq!(outcome.grpc_status().as_deref(), Some("0"), "{outcome:?}");
    assert_held_calls_complete(held).await;
    assert!(upstream.calls().iter().all(|c| !c.headers.contains_key("x-big")), "never forwarded");
}

/// N6: an OAP's per-connection stream limit (Satellite's default: 32) is not the fleet's. One
/// client holding 256 streams open does not keep 8 other agents' calls from the OAP: the
/// gateway opens more connections to it when its streams are all in use.
#[tokio::test]
async fn an_oaps_stream_limit_is_not_the_fleets() {
    let options = skyconf_testkit::upstream::UpstreamOptions { max_concurrent_streams: Some(32) };
    let upstream = Upstream::start_with("oap-a", "127.0.0.1:0".parse().unwrap(), options).await;
    let (_dir, server) = gateway(&[&upstream]).await;

    // 256 held streams, 64 on each of four connections (an agent connection takes at most 100).
    let mut hogs = Vec::new();
    let mut hog_calls = Vec::new();
    for _ in 0..4 {
        let hog = connect(server.grpc_addr).await;
        for _ in 0..64 {
            hog_calls.push(begin(&hog, "/skywalking.v3.TraceSegmentReportService/stall", b"held").await);
        }
        hogs.push(hog);
    }
    // What one connection at 32 streams can take reaches the OAP in any case.
    upstream.wait_for("the first 32 held streams", |calls| calls.len() >= 32).await;

    let agents = (0..8).map(|i| {
        let addr = server.grpc_addr;
        tokio::spawn(async move {
            let mut client = connect(addr).await;
            let message = framed(format!("agent {i}").as_bytes());
            let path = "/skywalking.v3.JVMMetricReportService/echo";
            (call(&mut client, path, &[("grpc-timeout", "5S")], &message).await, message)
        })
    });
    for (i, agent) in agents.enumerate() {
        let (outcome, message) = agent.await.unwrap();
        assert_eq!(outcome.grpc_status().as_deref(), Some("0"), "agent {i}: {outcome:?}");
        assert_eq!(outcome.body, message, "agent {i}");
    }
    upstream
        .wait_for("every held stream", |calls| calls.iter().filter(|c| c.path.ends_with("/stall")).count() == 256)
        .await;
    let connections = upstream.connections();
    assert!((8..=16).contains(&connections), "{connections} connections for 256 + 8 calls at 32 streams each");
    let (status, metrics) = gateway_numbers(&server, &upstream).await;
    assert_eq!(status["calls_in_flight"], 256, "{status}");
    assert_eq!(status["stream_limit"], 32);
    assert_eq!(status["queued_calls"], 0);
    let series = |name: &str| format!("{name}{{upstream=\"{}\"}}", upstream.addr);
    assert_eq!(value(&metrics, &series("skyconf_gateway_calls_in_flight")), Some(256.0), "{metrics}");
    assert_eq!(
        value(&metrics, &series("skyconf_gateway_upstream_connections")),
        status["connections"].as_f64(),
        "{metrics}"
    );
    drop(hog_calls);
    drop(hogs);
}

/// N13: an OAP that accepts TCP connections and never speaks HTTP/2 is never counted up, its
/// connection attempts are given up (and closed) at the connect deadline, and calls go to
/// another OAP; with no other OAP they fail fast with UNAVAILABLE, not at their deadline.
#[tokio::test]
async fn an_oap_that_never_speaks_http2_is_down_and_calls_go_elsewhere_or_fail_fast() {
    let silent = skyconf_testkit::upstream::Silent::start().await;
    let good = Upstream::start("oap-b").await;
    let mut config = GatewayConfig::new(vec![silent.addr.to_string(), good.addr.to_string()]);
    config.connect_timeout = Duration::from_millis(300);
    let (_dir, server) = gateway_with(&[&good], ServeConfig { gateway: Some(config.clone()), ..loopback() }).await;
    // Every connection the gateway opened to it has been given up and closed at least once.
    eventually_async("a connection to the silent OAP given up", async || silent.closed() >= 1).await;
    let admin = server.admin();
    let metrics = admin.get("/metrics").await.body;
    let up = |addr: SocketAddr| format!("skyconf_gateway_upstream_up{{upstream=\"{addr}\"}}");
    assert_eq!(value(&metrics, &up(silent.addr)), Some(0.0), "{metrics}");
    let status = admin.get_json("/api/v1/status").await;
    assert_eq!(status["gateway"]["upstreams"][0]["up"], false, "{status}");
    for _ in 0..3 {
        let mut client = connect(server.grpc_addr).await;
        let message = framed(b"jvm");
        let answered = call(&mut client, "/skywalking.v3.JVMMetricReportService/echo", &[], &message);
        let outcome = tokio::time::timeout(Duration::from_secs(10), answered).await.expect("an answer");
        assert_eq!(outcome.headers.get("x-upstream").map(|v| v.to_str().unwrap()), Some("oap-b"), "{outcome:?}");
    }

    // The silent OAP alone: calls fail fast.
    config.upstreams = vec![silent.addr.to_string()];
    let (_dir, alone) = gateway_with(&[], ServeConfig { gateway: Some(config), ..loopback() }).await;
    let accepted = silent.accepted();
    eventually_async("the lone gateway tries the silent OAP", async || silent.accepted() > accepted).await;
    let mut client = connect(alone.grpc_addr).await;
    let started = std::time::Instant::now();
    let outcome = tokio::time::timeout(
        Duration::from_secs(15),
        call(&mut client, "/skywalking.v3.JVMMetricReportService/echo", &[("grpc-timeout", "20S")], &framed(b"j")),
    )
    .await
    .expect("the call ends well before its deadline");
    assert_eq!(outcome.grpc_status().as_deref(), Some("14"), "{outcome:?}");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}

/// N13: an OAP's RST_STREAM(INTERNAL_ERROR) reaches the agent as INTERNAL: as a trailers-only
/// status when the OAP had not answered yet, and as the same reset once its answer has begun.
#[tokio::test]
async fn an_oap_reset_with_internal_error_reaches_the_agent_as_internal() {
    let (_upstream, _dir, server) = one_oap().await;
    let mut client = connect(server.grpc_addr).await;
    let outcome = call(&mut client, "/skywalking.v3.LogReportService/resetinternal", &[], &framed(b"log")).await;
    assert_eq!(outcome.grpc_status().as_deref(), Some("13"), "{outcome:?}");
    assert_eq!(outcome.reset, None);
    // The answer has begun (headers and a message have reached the agent) when the OAP resets.
    let (response, mut send) = begin(&client, "/skywalking.v3.LogReportService/resetlater", b"log").await;
    let (parts, mut body) = response.await.expect("the response headers").into_parts();
    assert_eq!(parts.headers["content-type"], "application/grpc");
    let first = body.data().await.expect("a message").expect("the message");
    assert_eq!(first, framed(b"log"));
    send.send_data(Bytes::new(), true).unwrap();
    let end = loop {
        match body.data().await {
            Some(Ok(_)) => {}
            Some(Err(e)) => break Err(e.reason()),
            None => break body.trailers().await.map_err(|e| e.reason()),
        }
    };
    assert_eq!(end.err(), Some(Some(Reason::INTERNAL_ERROR)), "the agent's stream is reset with the OAP's code");
}

/// An upstream limited to `streams` per connection, and a gateway in front of it with `tune`
/// applied to its default settings.
async fn limited(streams: u32, tune: impl FnOnce(&mut GatewayConfig)) -> (Upstream, tempfile::TempDir, Server) {
    let options = skyconf_testkit::upstream::UpstreamOptions { max_concurrent_streams: Some(streams) };
    let upstream = Upstream::start_with("oap-a", "127.0.0.1:0".parse().unwrap(), options).await;
    let mut config = GatewayConfig::new(vec![upstream.addr.to_string()]);
    tune(&mut config);
    let (dir, server) = gateway_with(&[&upstream], ServeConfig { gateway: Some(config), ..loopback() }).await;
    (upstream, dir, server)
}

/// `n` calls the upstream holds open (`stall`), on one agent connection.
async fn hold_streams(
    server: &Server,
    upstream: &Upstream,
    n: usize,
) -> Vec<(h2::client::ResponseFuture, h2::SendStream<Bytes>)> {
    let hog = connect(server.grpc_addr).await;
    let mut held = Vec::new();
    for _ in 0..n {
        held.push(begin(&hog, "/skywalking.v3.TraceSegmentReportService/stall", b"held").await);
    }
    upstream
        .wait_for("the held streams", |calls| calls.iter().filter(|c| c.path.ends_with("/stall")).count() >= n)
        .await;
    held
}

/// The gateway part of the status and the metrics, for one upstream.
async fn gateway_numbers(server: &Server, upstream: &Upstream) -> (serde_json::Value, String) {
    let admin = server.admin();
    let status = admin.get_json("/api/v1/status").await;
    let oap = status["gateway"]["upstreams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["addr"] == upstream.addr.to_string())
        .cloned()
        .unwrap();
    (oap, admin.get("/metrics").await.body)
}

/// N6: with every stream the OAP allows in use on every connection allowed, calls wait in a
/// bounded queue: past its wait they end DEADLINE_EXCEEDED, beyond its bound at once, and a
/// stream given back goes to a waiting call. The metrics and the status agree throughout.
#[tokio::test]
async fn with_every_stream_in_use_calls_wait_in_a_bounded_queue_with_a_deadline() {
    let (upstream, _dir, server) = limited(4, |config| {
        config.connections_per_upstream = 1;
        config.max_connections_per_upstream = 1;
        config.max_queued_calls = 3;
        config.queue_wait = Duration::from_millis(800);
    })
    .await;
    let mut held = hold_streams(&server, &upstream, 4).await;
    let series = |name: &str| format!("{name}{{upstream=\"{}\"}}", upstream.addr);
    let unsent = |reason: &str| {
        format!("skyconf_gateway_unsent_calls_total{{upstream=\"{}\",reason=\"{reason}\"}}", upstream.addr)
    };

    let waiting = |timeout: Option<&'static str>| {
        let addr = server.grpc_addr;
        tokio::spawn(async move {
            let mut client = connect(addr).await;
            let metadata: Vec<(&str, &str)> = timeout.map(|t| ("grpc-timeout", t)).into_iter().collect();
            let started = std::time::Instant::now();
            let outcome =
                call(&mut client, "/skywalking.v3.JVMMetricReportService/echo", &metadata, &framed(b"j")).await;
            (outcome, started.elapsed())
        })
    };
    let waiters: Vec<_> = (0..3).map(|_| waiting(None)).collect();
    eventually_async("three calls waiting", async || {
        let (status, metrics) = gateway_numbers(&server, &upstream).await;
        status["queued_calls"] == 3 && value(&metrics, &series("skyconf_gateway_queued_calls")) == Some(3.0)
    })
    .await;
    let (status, metrics) = gateway_numbers(&server, &upstream).await;
    assert_eq!(status["calls_in_flight"], 4, "{status}");
    assert_eq!(value(&metrics, &series("skyconf_gateway_calls_in_flight")), Some(4.0));
    assert_eq!(status["connections"], 1);
    assert_eq!(value(&metrics, &series("skyconf_gateway_upstream_connections")), Some(1.0));
    assert_eq!(status["stream_limit"], 4);

    // The queue is full: the next call ends at once.
    let (outcome, took) = waiting(Some("20S")).await.unwrap();
    assert_eq!(outcome.grpc_status().as_deref(), Some("4"), "DEADLINE_EXCEEDED: {outcome:?}");
    assert!(took < Duration::from_millis(700), "{took:?}");
    // The waiting ones end at the queue's wait.
    for waiter in waiters {
        let (outcome, took) = waiter.await.unwrap();
        assert_eq!(outcome.grpc_status().as_deref(), Some("4"), "DEADLINE_EXCEEDED: {outcome:?}");
        assert!(took >= Duration::from_millis(700) && took < Duration::from_secs(10), "{took:?}");
    }
    assert!(upstream.calls().iter().all(|c| !c.path.ends_with("/echo")), "none of them reached the OAP");

    // A call whose own deadline is shorter ends at that (the client has given up), and leaves.
    let (outcome, _) = waiting(Some("200m")).await.unwrap();
    assert_ne!(outcome.grpc_status().as_deref(), Some("0"), "{outcome:?}");

    // A stream given back goes to a waiting call.
    let waiter = waiting(None);
    eventually_async("a call waiting", async || gateway_numbers(&server, &upstream).await.0["queued_calls"] == 1).await;
    let (_, mut send) = held.pop().unwrap();
    send.send_reset(Reason::CANCEL);
    let (outcome, _) = waiter.await.unwrap();
    assert_eq!(outcome.grpc_status().as_deref(), Some("0"), "{outcome:?}");
    assert_eq!(outcome.body, framed(b"j"));

    eventually_async("the counts", async || {
        let (status, metrics) = gateway_numbers(&server, &upstream).await;
        status["unsent"] == serde_json::json!({"deadline": 3, "full": 1, "left": 1})
            && value(&metrics, &unsent("deadline")) == Some(3.0)
            && value(&metrics, &unsent("full")) == Some(1.0)
            && value(&metrics, &unsent("left")) == Some(1.0)
            && status["queued_calls"] == 0
    })
    .await;
    let metrics = gateway_numbers(&server, &upstream).await.1;
    let no_stream = format!("skyconf_gateway_calls_total{{upstream=\"{}\",outcome=\"no_stream\"}}", upstream.addr);
    assert_eq!(value(&metrics, &no_stream), Some(4.0), "{metrics}");
}

/// Connections opened beyond the kept ones while the OAP's streams were all in use are closed
/// again once idle.
#[tokio::test]
async fn connections_opened_on_demand_close_once_idle() {
    let (upstream, _dir, server) = limited(2, |config| {
        config.connections_per_upstream = 1;
        config.max_connections_per_upstream = 4;
        config.on_demand_idle = Duration::from_millis(100);
    })
    .await;
    let held = hold_streams(&server, &upstream, 6).await;
    let (status, _) = gateway_numbers(&server, &upstream).await;
    assert_eq!(status["connections"], 3, "{status}");
    assert_eq!(status["calls_in_flight"], 6);
    for (_, mut send) in held {
        send.send_reset(Reason::CANCEL);
    }
    eventually_async("back to the kept connection", async || {
        gateway_numbers(&server, &upstream).await.0["connections"] == 1
    })
    .await;
    let mut client = connect(server.grpc_addr).await;
    let outcome = call(&mut client, "/skywalking.v3.JVMMetricReportService/echo", &[], &framed(b"jvm")).await;
    assert_eq!(outcome.grpc_status().as_deref(), Some("0"), "{outcome:?}");
}

/// A raw HTTP/2 upstream that answers its first call with response headers HTTP/2 forbids (a
/// `connection` field: a malformed answer, an error of that stream only) and every later call
/// with an empty OK answer, on whatever connection.
struct RawUpstream {
    addr: SocketAddr,
    connections: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    _task: tokio::task::JoinHandle<()>,
}

impl RawUpstream {
    async fn start() -> Self {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = std::sync::Arc::new(AtomicUsize::new(0));
        let (counted, answered) = (std::sync::Arc::clone(&connections), std::sync::Arc::new(AtomicUsize::new(0)));
        let task = tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::Relaxed);
                let answered = std::sync::Arc::clone(&answered);
                tokio::spawn(async move {
                    let frame = |kind: u8, flags: u8, stream: u32, payload: &[u8]| {
                        let mut out = (payload.len() as u32).to_be_bytes()[1..].to_vec();
                        out.extend_from_slice(&[kind, flags]);
                        out.extend_from_slice(&stream.to_be_bytes());
                        out.extend_from_slice(payload);
                        out
                    };
                    let mut preface = [0u8; 24];
                    if socket.read_exact(&mut preface).await.is_err()
                        || socket.write_all(&frame(4, 0, 0, &[])).await.is_err()
                    {
                        return;
                    }
                    loop {
                        let mut head = [0u8; 9];
                        if socket.read_exact(&mut head).await.is_err() {
                            return;
                        }
                        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
                        let (kind, flags) = (head[3], head[4]);
                        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
                        let mut payload = vec![0u8; len];
                        if socket.read_exact(&mut payload).await.is_err() {
                            return;
                        }
                        let reply = match kind {
                            // SETTINGS: acknowledged.
                            4 if flags & 1 == 0 => frame(4, 1, 0, &[]),
                            // PING: answered.
                            6 if flags & 1 == 0 => frame(6, 1, 0, &payload),
                            // A request's headers: answered at once (its body is not awaited).
                            1 => {
                                // :status 200 (static index 8), content-type: application/grpc.
                                let mut headers = vec![0x88, 0x0f, 0x10, 16];
                                headers.extend_from_slice(b"application/grpc");
                                if answered.fetch_add(1, Ordering::Relaxed) == 0 {
                                    headers.extend_from_slice(&[0x00, 10]);
                                    headers.extend_from_slice(b"connection");
                                    headers.extend_from_slice(&[5]);
                                    headers.extend_from_slice(b"close");
                                    frame(1, 4, stream, &headers)
                                } else {
                                    let mut trailers = vec![0x00, 11];
                                    trailers.extend_from_slice(b"grpc-status");
                                    trailers.extend_from_slice(&[1, b'0']);
                                    [frame(1, 4, stream, &headers), frame(1, 5, stream, &trailers)].concat()
                                }
                            }
                            _ => continue,
                        };
                        if socket.write_all(&reply).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Self { addr, connections, _task: task }
    }
}

/// N5: an OAP answer h2 refuses for its stream (malformed) ends that call with INTERNAL, not
/// UNAVAILABLE (which would make a Java agent drop its channel), and the connection goes on.
#[tokio::test]
async fn a_malformed_oap_answer_fails_that_call_with_internal_and_the_connection_goes_on() {
    let raw = RawUpstream::start().await;
    let mut config = GatewayConfig::new(vec![raw.addr.to_string()]);
    config.connections_per_upstream = 1;
    let (_dir, server) = gateway_with(&[], ServeConfig { gateway: Some(config), ..loopback() }).await;
    let admin = server.admin();
    let up = format!("skyconf_gateway_upstream_up{{upstream=\"{}\"}} 1", raw.addr);
    eventually_async("connected", async || admin.get("/metrics").await.body.contains(&up)).await;
    let mut client = connect(server.grpc_addr).await;
    let outcome = call(&mut client, "/skywalking.v3.LogReportService/collect", &[], &framed(b"log")).await;
    assert_eq!(outcome.grpc_status().as_deref(), Some("13"), "INTERNAL: {outcome:?}");
    let outcome = call(&mut client, "/skywalking.v3.LogReportService/collect", &[], &framed(b"log")).await;
    assert_eq!(outcome.grpc_status().as_deref(), Some("0"), "{outcome:?}");
    assert_eq!(raw.connections.load(std::sync::atomic::Ordering::Relaxed), 1, "one connection throughout");
    let status = admin.get_json("/api/v1/status").await;
    assert_eq!(status["gateway"]["upstreams"][0]["answers_refused"]["malformed"], 1, "{status}");
}
