//! Tokens and limits. The agent token over real gRPC sockets, exactly as the OAP checks it; the
//! admin API's bearer roles with `oneshot` (no socket); HTTP/2 limits that never cost an agent
//! its channel.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::BodyExt;
use skyconf_core::codec::DiscoveryCommand;
use skyconf_proto::dcs::ConfigurationRequest;
use skyconf_proto::dcs::configuration_service_client::ConfigurationServiceClient;
use skyconf_proto::v3::configuration_discovery_service_client::ConfigurationDiscoveryServiceClient;
use skyconf_proto::v3::management_service_client::ManagementServiceClient;
use skyconf_proto::v3::{ConfigurationSyncRequest, InstancePingPkg};
use skyconf_server::admin::Admin;
use skyconf_server::security::{AdminTokens, GrpcLimits, Role, Secret, SecurityConfig};
use skyconf_server::{Metrics, Running, ServeConfig, ServedTable, StoreView};
use skyconf_sources::file::FileSource;
use skyconf_testkit::fixtures::temp_file;
use skyconf_testkit::server::{Server, loopback};
use tempfile::TempDir;
use tonic::Code;
use tonic::transport::Channel;
use tower::ServiceExt;

const GOOD: &str = "configurations:\n  svc:\n    agent.sample_n_per_3_secs: 10\n";

/// The codes that make a Java agent drop its whole channel (behaviour reference §1.3).
const DEADLY: [Code; 5] =
    [Code::Unknown, Code::Unavailable, Code::ResourceExhausted, Code::Unauthenticated, Code::PermissionDenied];

/// A server with `security` on a file holding GOOD (in the directory returned first), and a
/// channel to its gRPC port.
async fn start(security: SecurityConfig) -> (TempDir, Server, Channel) {
    let (dir, path) = temp_file("agent.yaml", GOOD);
    let running = Server::start(FileSource::new(path), ServeConfig { security, ..loopback() }).await;
    let channel = channel(&running).await;
    (dir, running, channel)
}

async fn channel(running: &Running) -> Channel {
    Channel::from_shared(format!("http://{}", running.grpc_addr)).unwrap().connect().await.unwrap()
}

fn with_token<T>(message: T, token: Option<&str>) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(token) = token {
        // The Java agent's metadata key is `Authentication`; HTTP/2 carries it lower-case.
        request.metadata_mut().insert("authentication", token.parse().unwrap());
    }
    request
}

async fn fetch(channel: &Channel, token: Option<&str>) -> Result<Option<DiscoveryCommand>, tonic::Status> {
    let request = ConfigurationSyncRequest { service: "svc".into(), uuid: String::new() };
    let commands = ConfigurationDiscoveryServiceClient::new(channel.clone())
        .fetch_configurations(with_token(request, token))
        .await?;
    Ok(DiscoveryCommand::find(&commands.into_inner()))
}

async fn dcs_call(channel: &Channel, token: Option<&str>) -> Result<(), tonic::Status> {
    let request = ConfigurationRequest { cluster_name: "oap".into(), uuid: String::new() };
    ConfigurationServiceClient::new(channel.clone()).call(with_token(request, token)).await.map(drop)
}

async fn keep_alive(channel: &Channel, token: Option<&str>) -> Result<(), tonic::Status> {
    let ping = InstancePingPkg { service: "svc".into(), service_instance: "i1".into(), layer: String::new() };
    ManagementServiceClient::new(channel.clone()).keep_alive(with_token(ping, token)).await.map(drop)
}

fn agent_token(token: &str) -> SecurityConfig {
    SecurityConfig { agent_token: Some(Secret::new(token)), ..SecurityConfig::default() }
}

#[tokio::test]
async fn without_a_token_every_call_is_answered_whatever_metadata_it_sends() {
    let (_dir, running, channel) = start(SecurityConfig::default()).await;
    for token in [None, Some("anything")] {
        assert!(fetch(&channel, token).await.unwrap().is_some(), "{token:?}");
        keep_alive(&channel, token).await.unwrap();
        dcs_call(&channel, token).await.unwrap();
    }
    running.stop().await.unwrap();
}

#[tokio::test]
async fn the_agent_token_is_checked_as_the_oap_checks_it() {
    let (_dir, running, channel) = start(agent_token("s3cret")).await;

    for wrong in [None, Some("wrong"), Some("s3cret "), Some("S3CRET"), Some("")] {
        let status = fetch(&channel, wrong).await.unwrap_err();
        assert_eq!(status.code(), Code::PermissionDenied, "{wrong:?}: {status:?}");
        assert!(status.message().is_empty(), "the OAP sends no description");
        let status = keep_alive(&channel, wrong).await.unwrap_err();
        assert_eq!(status.code(), Code::PermissionDenied, "management shares the agents' channel and token");
    }
    let command = fetch(&channel, Some("s3cret")).await.unwrap().expect("the right token gets the command");
    assert_eq!(command.config.len(), 1);
    keep_alive(&channel, Some("s3cret")).await.unwrap();
    // The OAP's DCS client sends no metadata: the agent token does not apply to DCS.
    dcs_call(&channel, None).await.unwrap();

    let text = running.metrics.encode();
    assert!(text.contains("skyconf_grpc_denied_total{service=\"cds\"} 5"), "{text}");
    assert!(text.contains("skyconf_grpc_denied_total{service=\"management\"} 5"), "{text}");
    assert!(text.contains("skyconf_fetches_total{outcome=\"changed\"} 1"), "refused calls are not answered: {text}");
    running.stop().await.unwrap();
}

#[tokio::test]
async fn the_dcs_token_guards_only_dcs() {
    let security = SecurityConfig { dcs_token: Some(Secret::new("oap-token")), ..SecurityConfig::default() };
    let (_dir, running, channel) = start(security).await;
    assert_eq!(dcs_call(&channel, None).await.unwrap_err().code(), Code::PermissionDenied);
    assert_eq!(dcs_call(&channel, Some("nope")).await.unwrap_err().code(), Code::PermissionDenied);
    dcs_call(&channel, Some("oap-token")).await.unwrap();
    assert!(fetch(&channel, None).await.unwrap().is_some(), "agents need no token");
    running.stop().await.unwrap();
}

#[tokio::test]
async fn an_empty_token_is_no_token_as_on_the_oap() {
    let (_dir, running, channel) = start(agent_token("")).await;
    assert!(fetch(&channel, None).await.unwrap().is_some());
    running.stop().await.unwrap();
}

#[tokio::test]
async fn connection_limits_never_end_an_agent_call_with_a_deadly_code() {
    let limits = GrpcLimits {
        max_concurrent_streams: 2,
        keepalive_interval: Some(Duration::from_millis(50)),
        keepalive_timeout: Duration::from_secs(5),
        ..GrpcLimits::default()
    };
    let (_dir, running, channel) = start(SecurityConfig { grpc_limits: limits, ..agent_token("t") }).await;

    // One poll first, as an agent's first poll: the client then knows the server's SETTINGS.
    // (Before them HTTP/2 allows any number of streams, and a first flight over the limit is
    // refused with REFUSED_STREAM; the default limit, 1024, is far above any agent's first flight.)
    fetch(&channel, Some("t")).await.unwrap();
    // Ten times the stream limit at once on one connection: the client queues, nothing is refused.
    let calls = (0..20).map(|_| {
        let channel = channel.clone();
        async move { fetch(&channel, Some("t")).await }
    });
    for result in futures_util::future::join_all(calls).await {
        assert!(result.is_ok(), "{result:?}");
    }

    // Agent-shaped metadata, generous: a long token and the Java agent's version header.
    let long = "k".repeat(4096);
    let (_long_dir, running_long, long_channel) = start(agent_token(&long)).await;
    let request = ConfigurationSyncRequest { service: "svc".into(), uuid: String::new() };
    let mut request = with_token(request, Some(&long));
    request.metadata_mut().insert("agent-version", "9.4.0".parse().unwrap());
    ConfigurationDiscoveryServiceClient::new(long_channel).fetch_configurations(request).await.unwrap();
    running_long.stop().await.unwrap();

    // Keep-alive pings on an idle connection are answered; the next poll goes through. The
    // wait is the scenario (idle time), not synchronisation.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after_idle = fetch(&channel, Some("t")).await;
    assert!(after_idle.is_ok(), "{after_idle:?}");

    // Oversized: OUT_OF_RANGE, which agents treat as an ordinary failed poll.
    let huge = ConfigurationSyncRequest { service: "x".repeat(1 << 20), uuid: String::new() };
    let status = ConfigurationDiscoveryServiceClient::new(channel.clone())
        .fetch_configurations(with_token(huge, Some("t")))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::OutOfRange);
    assert!(!DEADLY.contains(&status.code()));
    running.stop().await.unwrap();
}

// ---- admin API: the auth matrix with oneshot ----

fn app(tokens: AdminTokens, metrics_open: bool) -> (axum::Router, Arc<Metrics>) {
    let served = Arc::new(ServedTable::new(skyconf_core::read(GOOD).unwrap()));
    let store = Arc::new(StoreView::new("test".into(), Default::default(), true, false));
    let metrics = Arc::new(Metrics::for_server(Arc::clone(&served), Arc::clone(&store)));
    let admin = Admin::new(served, store);
    let security = SecurityConfig { admin_tokens: tokens, metrics_open, ..SecurityConfig::default() };
    (skyconf_server::admin::admin_app(&admin, &metrics, &security, 1024), metrics)
}

fn tokens() -> AdminTokens {
    let mut tokens = AdminTokens::default();
    tokens.add(Role::Read, Secret::new("reader"));
    tokens.add(Role::Write, Secret::new("writer"));
    tokens
}

async fn status(app: &axum::Router, method: &str, path: &str, token: Option<&str>, body: Vec<u8>) -> u16 {
    // As a client over a socket sends it; the limit refuses on it before reading.
    let length = body.len();
    let mut request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .header("content-length", length);
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let response = app.clone().oneshot(request.body(axum::body::Body::from(body)).unwrap()).await.unwrap();
    let code = response.status().as_u16();
    if code == 401 {
        assert_eq!(response.headers()["www-authenticate"], "Bearer realm=\"skyconf\"");
    }
    let body = response.into_body().collect().await.unwrap().to_bytes();
    if code == 401 || code == 403 {
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert!(json["error"].is_string(), "the admin API's error body");
    }
    code
}

fn service_body() -> Vec<u8> {
    br#"{"config": {"agent.sample_n_per_3_secs": "5"}}"#.to_vec()
}

#[tokio::test]
async fn admin_auth_matrix() {
    let (app, metrics) = app(tokens(), false);
    // (token, read route, write route (None: authorised), /healthz, /readyz, /metrics). The web
    // page (`/`) holds no data and is served to all: it asks for a token when the API wants one.
    type Case<'a> = (Option<&'a str>, u16, Option<u16>, u16, u16, u16);
    let cases: [Case<'_>; 4] = [
        (None, 401, Some(401), 200, 200, 401),
        (Some("reader"), 200, Some(403), 200, 200, 200),
        (Some("writer"), 200, None, 200, 200, 200),
        (Some("wrong"), 401, Some(401), 200, 200, 401),
    ];
    for (token, read, write, healthz, readyz, metrics_code) in cases {
        assert_eq!(status(&app, "GET", "/", token, Vec::new()).await, 200, "page {token:?}");
        assert_eq!(status(&app, "GET", "/api/v1/services", token, Vec::new()).await, read, "read {token:?}");
        let openapi = status(&app, "GET", "/api/v1/openapi.json", token, Vec::new()).await;
        assert_eq!(openapi, read, "the description is a read {token:?}");
        let written = status(&app, "PUT", "/api/v1/services/svc", token, service_body()).await;
        match write {
            Some(expected) => assert_eq!(written, expected, "write {token:?}"),
            // Authorised: whatever the write itself answers (this app has no store writer).
            None => assert!(![401, 403].contains(&written), "write {token:?}: {written}"),
        }
        assert_eq!(status(&app, "GET", "/healthz", token, Vec::new()).await, healthz);
        assert_eq!(status(&app, "GET", "/readyz", token, Vec::new()).await, readyz);
        assert_eq!(status(&app, "GET", "/metrics", token, Vec::new()).await, metrics_code, "metrics {token:?}");
    }
    let text = metrics.encode();
    assert!(text.contains("skyconf_admin_denied_total{status=\"401\"} 8"), "{text}");
    assert!(text.contains("skyconf_admin_denied_total{status=\"403\"} 1"), "{text}");
}

#[tokio::test]
async fn without_admin_tokens_the_api_is_open() {
    let (app, _) = app(AdminTokens::default(), false);
    assert_eq!(status(&app, "GET", "/api/v1/services", None, Vec::new()).await, 200);
    assert_eq!(status(&app, "GET", "/metrics", None, Vec::new()).await, 200);
    let written = status(&app, "PUT", "/api/v1/services/svc", None, service_body()).await;
    assert!(![401, 403].contains(&written), "{written}");
}

#[tokio::test]
async fn metrics_can_be_left_open_while_the_api_is_not() {
    let (app, _) = app(tokens(), true);
    assert_eq!(status(&app, "GET", "/metrics", None, Vec::new()).await, 200);
    assert_eq!(status(&app, "GET", "/api/v1/services", None, Vec::new()).await, 401);
}

#[tokio::test]
async fn request_bodies_are_bounded_after_the_token_check() {
    // The app above accepts documents of 1 KiB; write routes take that plus a 64 KiB envelope.
    let (app, _) = app(tokens(), false);
    let too_big = vec![b' '; 1024 + 64 * 1024 + 1];
    assert_eq!(status(&app, "PUT", "/api/v1/configurations", None, too_big.clone()).await, 401, "no token: 401 first");
    assert_eq!(status(&app, "PUT", "/api/v1/configurations", Some("writer"), too_big).await, 413);
    let small_limit_exceeded = vec![b' '; 16 * 1024 + 1];
    assert_eq!(status(&app, "GET", "/api/v1/services", Some("reader"), small_limit_exceeded).await, 413);
}

/// Connection handling under slowloris-style attacks: handshake deadline, connection cap, and the
/// per-call request message deadline, on real loopback sockets.
pub(crate) mod connections {
    use std::net::SocketAddr;
    use std::time::Duration;

    use skyconf_proto::v3::ConfigurationSyncRequest;
    use skyconf_server::security::{ConnectionLimits, GrpcLimits, SecurityConfig};
    use skyconf_server::{Running, ServeConfig};
    use skyconf_sources::file::FileSource;
    use skyconf_testkit::fixtures::temp_file;
    use skyconf_testkit::server::{Server, loopback};
    use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::GOOD;
    use crate::grpc_frame;
    use crate::metrics::now as metric;

    /// The bound of every wait for something that must happen.
    const BOUND: Duration = Duration::from_secs(5);

    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

    async fn start(connections: ConnectionLimits, grpc_limits: GrpcLimits) -> (tempfile::TempDir, Server) {
        let (dir, path) = temp_file("agent.yaml", GOOD);
        let security = SecurityConfig { connections, grpc_limits, ..SecurityConfig::default() };
        (dir, Server::start(FileSource::new(path), ServeConfig { security, ..loopback() }).await)
    }

    fn short_handshake() -> ConnectionLimits {
        ConnectionLimits { handshake_timeout: Duration::from_millis(200), ..ConnectionLimits::default() }
    }

    /// Reads until the server closes the connection (EOF or reset); fails after [`BOUND`], saying
    /// `what` is still held.
    pub(crate) async fn closed_by_server(mut stream: impl AsyncRead + Unpin, what: &str) {
        let mut buf = [0; 1024];
        let closed = tokio::time::timeout(BOUND, async {
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await;
        assert!(closed.is_ok(), "{what} is still held after {BOUND:?}");
    }

    #[tokio::test]
    async fn connections_that_never_complete_their_handshake_are_closed_on_both_ports() {
        let (_dir, server) = start(short_handshake(), GrpcLimits::default()).await;
        let running: &Running = &server;
        let (grpc, admin) = (running.grpc_addr, running.admin_addr);

        // Silent, a partial HTTP/2 preface, a partial HTTP/1 header block.
        let silent_grpc = TcpStream::connect(grpc).await.unwrap();
        let mut partial_grpc = TcpStream::connect(grpc).await.unwrap();
        partial_grpc.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
        let silent_admin = TcpStream::connect(admin).await.unwrap();
        let mut partial_admin = TcpStream::connect(admin).await.unwrap();
        partial_admin.write_all(b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\n").await.unwrap();
        let mut partial_h2_admin = TcpStream::connect(admin).await.unwrap();
        partial_h2_admin.write_all(PREFACE).await.unwrap();

        tokio::join!(
            closed_by_server(silent_grpc, "a silent gRPC connection"),
            closed_by_server(partial_grpc, "a partial HTTP/2 preface"),
            closed_by_server(silent_admin, "a silent admin connection"),
            closed_by_server(partial_admin, "a partial HTTP/1 header block"),
            closed_by_server(partial_h2_admin, "an HTTP/2 preface on the admin port"),
        );
        // The ports still serve.
        assert!(server.cds().await.fetch("svc", "").await.is_some());
        server.stop().await.unwrap();
    }

    /// An HTTP/1.1 keep-alive connection left idle after its first request is closed after the
    /// handshake deadline (a header-read timeout); one that keeps asking is served throughout.
    #[tokio::test]
    async fn an_idle_http1_keep_alive_connection_on_the_admin_port_is_closed() {
        let (_dir, server) = start(short_handshake(), GrpcLimits::default()).await;
        let admin = server.admin_addr;
        let request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
        let answered = |mut stream: TcpStream| async move {
            stream.write_all(request).await.unwrap();
            let mut response = Vec::new();
            let mut buf = [0; 1024];
            while !response.ends_with(b"ok\n") {
                let n = tokio::time::timeout(BOUND, stream.read(&mut buf)).await.expect("answered").unwrap();
                assert!(n > 0, "closed before the answer: {}", String::from_utf8_lossy(&response));
                response.extend_from_slice(&buf[..n]);
            }
            assert!(response.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&response));
            stream
        };
        let idle = answered(TcpStream::connect(admin).await.unwrap()).await;
        closed_by_server(idle, "an idle keep-alive connection").await;

        // Requests closer together than the deadline keep the connection. The waits are the
        // scenario (a client between requests), not synchronisation.
        let mut busy = answered(TcpStream::connect(admin).await.unwrap()).await;
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            busy = answered(busy).await;
        }
        server.stop().await.unwrap();
    }

    /// A raw HTTP/2 client on its own connection.
    async fn h2_client(addr: SocketAddr) -> h2::client::SendRequest<bytes::Bytes> {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let (client, connection) = h2::client::handshake(tcp).await.unwrap();
        tokio::spawn(connection);
        client
    }

    fn fetch_request(addr: SocketAddr) -> http::Request<()> {
        http::Request::post(format!("http://{addr}/skywalking.v3.ConfigurationDiscoveryService/fetchConfigurations"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .unwrap()
    }

    /// The `grpc-status` of a response: from its headers (trailers-only) or its trailers.
    async fn grpc_status(response: h2::client::ResponseFuture) -> String {
        let response = response.await.unwrap();
        if let Some(status) = response.headers().get("grpc-status") {
            return status.to_str().unwrap().to_owned();
        }
        let mut body = response.into_body();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.unwrap();
            let _ = body.flow_control().release_capacity(chunk.len());
        }
        let trailers = body.trailers().await.unwrap().expect("trailers");
        trailers.get("grpc-status").unwrap().to_str().unwrap().to_owned()
    }

    async fn poll_on(client: &mut h2::client::SendRequest<bytes::Bytes>, addr: SocketAddr) -> String {
        let request = ConfigurationSyncRequest { service: "svc".into(), uuid: String::new() };
        let mut ready = client.clone().ready().await.expect("the connection is still open");
        let (response, mut send) = ready.send_request(fetch_request(addr), false).unwrap();
        send.send_data(grpc_frame(&request), true).unwrap();
        tokio::time::timeout(BOUND, grpc_status(response)).await.expect("answered")
    }

    #[tokio::test]
    async fn an_idle_agent_connection_outlives_the_handshake_timeout() {
        let (_dir, server) = start(short_handshake(), GrpcLimits::default()).await;
        let addr = server.grpc_addr;
        let mut client = h2_client(addr).await;
        assert_eq!(poll_on(&mut client, addr).await, "0");
        // Idle for several handshake timeouts, as an agent between polls. The wait is the
        // scenario, not synchronisation.
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert_eq!(poll_on(&mut client, addr).await, "0", "the same connection still serves");
        server.stop().await.unwrap();
    }

    #[tokio::test]
    async fn a_call_whose_message_never_arrives_is_answered_deadline_exceeded() {
        let limits = GrpcLimits { request_message_timeout: Duration::from_millis(200), ..GrpcLimits::default() };
        let (_dir, server) = start(ConnectionLimits::default(), limits).await;
        let addr = server.grpc_addr;
        let client = h2_client(addr).await;
        let mut ready = client.ready().await.unwrap();
        // HEADERS without END_STREAM, and never a DATA frame: the stream is answered, not held.
        let (response, _held) = ready.send_request(fetch_request(addr), false).unwrap();
        let status = tokio::time::timeout(BOUND, grpc_status(response)).await.expect("the stream is answered");
        assert_eq!(status, "4", "DEADLINE_EXCEEDED, which does not make an agent drop its channel");
        // A normal call on another stream of the same connection is unaffected.
        let mut client = ready;
        assert_eq!(poll_on(&mut client, addr).await, "0");
        server.stop().await.unwrap();
    }

    /// A call still open when its client's deadline (`grpc-timeout`) passes ends `CANCELLED` then,
    /// as gRPC servers end it: the handler is dropped, the stream answered.
    #[tokio::test]
    async fn a_call_open_past_its_clients_deadline_is_answered_cancelled() {
        let (_dir, server) = start(ConnectionLimits::default(), GrpcLimits::default()).await;
        let addr = server.grpc_addr;
        let client = h2_client(addr).await;
        let mut ready = client.ready().await.unwrap();
        // A 300 ms deadline, well under the 10 s the server waits for a request message.
        let (mut parts, ()) = fetch_request(addr).into_parts();
        parts.headers.insert("grpc-timeout", http::HeaderValue::from_static("300m"));
        let (response, _held) = ready.send_request(http::Request::from_parts(parts, ()), false).unwrap();
        let status = tokio::time::timeout(BOUND, grpc_status(response)).await.expect("the stream is answered");
        assert_eq!(status, "1", "CANCELLED at the client's deadline");
        let mut client = ready;
        assert_eq!(poll_on(&mut client, addr).await, "0", "the connection goes on");
        server.stop().await.unwrap();
    }

    /// Reads the server's first bytes (its SETTINGS) within `wait`.
    async fn server_speaks(stream: &mut TcpStream, wait: Duration) -> bool {
        let mut buf = [0; 64];
        matches!(tokio::time::timeout(wait, stream.read(&mut buf)).await, Ok(Ok(n)) if n > 0)
    }

    /// The next HTTP/2 frame from `stream`: its type, flags, stream id and payload.
    async fn read_frame(stream: &mut TcpStream) -> (u8, u8, u32, Vec<u8>) {
        let mut header = [0; 9];
        tokio::time::timeout(BOUND, stream.read_exact(&mut header)).await.expect("a frame in time").unwrap();
        let length = usize::from(header[0]) << 16 | usize::from(header[1]) << 8 | usize::from(header[2]);
        let id = u32::from_be_bytes([header[5], header[6], header[7], header[8]]) & 0x7fff_ffff;
        let mut payload = vec![0; length];
        tokio::time::timeout(BOUND, stream.read_exact(&mut payload)).await.expect("a payload in time").unwrap();
        (header[3], header[4], id, payload)
    }

    /// The agent port's HTTP/2 settings (`skyconf_server::agent_port::http2`) as a client reads
    /// them: no HPACK table, 1 MiB windows, the smallest frame size, and the configurable limits.
    #[tokio::test]
    async fn the_agent_port_advertises_the_chosen_http2_settings() {
        let (_dir, server) = start(ConnectionLimits::default(), GrpcLimits::default()).await;
        let mut stream = TcpStream::connect(server.grpc_addr).await.unwrap();
        stream.write_all(PREFACE).await.unwrap();
        // An empty SETTINGS frame: the client's half of the opening.
        stream.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).await.unwrap();
        let (kind, flags, id, payload) = read_frame(&mut stream).await;
        assert_eq!((kind, flags, id), (4, 0, 0), "the server opens with its SETTINGS");
        let settings: std::collections::BTreeMap<u16, u32> = payload
            .chunks(6)
            .map(|s| (u16::from_be_bytes([s[0], s[1]]), u32::from_be_bytes([s[2], s[3], s[4], s[5]])))
            .collect();
        let expected = [
            (0x1, 0),       // SETTINGS_HEADER_TABLE_SIZE: no dynamic table to keep per connection
            (0x3, 100),     // SETTINGS_MAX_CONCURRENT_STREAMS (GrpcLimits)
            (0x4, 1 << 20), // SETTINGS_INITIAL_WINDOW_SIZE
            (0x5, 16_384),  // SETTINGS_MAX_FRAME_SIZE: the smallest allowed
            (0x6, 16_384),  // SETTINGS_MAX_HEADER_LIST_SIZE (GrpcLimits)
        ];
        assert_eq!(settings, expected.into_iter().collect(), "the SETTINGS the agent port advertises");
        // The connection's window is raised from the protocol's 65,535 bytes to 1 MiB.
        let mut increment = None;
        for _ in 0..4 {
            let (kind, _, id, payload) = read_frame(&mut stream).await;
            if (kind, id) == (8, 0) {
                increment = Some(u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]));
                break;
            }
        }
        assert_eq!(increment, Some((1 << 20) - 65_535), "the connection window's WINDOW_UPDATE");
        server.stop().await.unwrap();
    }

    #[tokio::test]
    async fn the_grpc_port_holds_at_most_the_configured_connections() {
        let connections = ConnectionLimits {
            max_grpc_connections: Some(2),
            // One source may take the whole cap here: this is the cap of all.
            max_grpc_connections_per_source: Some(2),
            ..ConnectionLimits::default()
        };
        let (_dir, server) = start(connections, GrpcLimits::default()).await;
        let addr = server.grpc_addr;
        let mut first = TcpStream::connect(addr).await.unwrap();
        let mut second = TcpStream::connect(addr).await.unwrap();
        for stream in [&mut first, &mut second] {
            stream.write_all(PREFACE).await.unwrap();
            assert!(server_speaks(stream, BOUND).await);
        }
        // The third waits in the backlog: the server does not take it up while two are open.
        // (Showing an absence needs a wait.)
        let mut third = TcpStream::connect(addr).await.unwrap();
        third.write_all(PREFACE).await.unwrap();
        assert!(!server_speaks(&mut third, Duration::from_millis(300)).await, "over the cap");
        drop(first);
        assert!(server_speaks(&mut third, BOUND).await, "taken up once a slot is free");
        server.stop().await.unwrap();
    }

    // ---- fair shares by source address (findings F5, F6, N10): 127.0.0.x are distinct sources ----

    /// A TCP connection to `addr` from the loopback address `from` (a source of its own).
    async fn tcp_from(from: [u8; 4], addr: SocketAddr) -> TcpStream {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::from((from, 0))).unwrap();
        socket.connect(addr).await.unwrap()
    }

    /// An HTTP/2 client from `from`, and its connection's task (which answers the server's pings;
    /// it ends when the server closes the connection).
    async fn h2_from(
        from: [u8; 4],
        addr: SocketAddr,
    ) -> (h2::client::SendRequest<bytes::Bytes>, tokio::task::JoinHandle<Result<(), h2::Error>>) {
        let (client, connection) = h2::client::handshake(tcp_from(from, addr).await).await.unwrap();
        (client, tokio::spawn(connection))
    }

    /// Starts a poll echoing the current digest with the Java agent's 30 s deadline (held while
    /// nothing changes); its status once it ends.
    async fn held_poll(
        client: &h2::client::SendRequest<bytes::Bytes>,
        addr: SocketAddr,
        digest: &str,
    ) -> tokio::task::JoinHandle<String> {
        let mut request = fetch_request(addr);
        request.headers_mut().insert("grpc-timeout", "30S".parse().unwrap());
        let message = ConfigurationSyncRequest { service: "svc".into(), uuid: digest.into() };
        let mut ready = client.clone().ready().await.unwrap();
        let (response, mut send) = ready.send_request(request, false).unwrap();
        send.send_data(grpc_frame(&message), true).unwrap();
        tokio::spawn(grpc_status(response))
    }

    /// Waits for `condition`, which must hold within [`BOUND`] (well before a held poll's end).
    async fn within_bound(what: &str, mut condition: impl FnMut() -> bool) {
        let give_up = tokio::time::Instant::now() + BOUND;
        while !condition() {
            assert!(tokio::time::Instant::now() < give_up, "not within {BOUND:?}: {what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    async fn start_with(security: SecurityConfig, hold: skyconf_server::HoldOptions) -> (tempfile::TempDir, Server) {
        let (dir, path) = temp_file("agent.yaml", GOOD);
        (dir, Server::start(FileSource::new(path), ServeConfig { security, hold, ..loopback() }).await)
    }

    /// N10: one source asking for every held poll gets its share (a quarter of the bound by
    /// default); the rest of its polls are answered at once, and another source's agent is held.
    #[tokio::test]
    async fn one_source_cannot_take_the_held_polls_of_another() {
        let hold = skyconf_server::HoldOptions { max_held: 8, ..skyconf_server::HoldOptions::default() };
        let (_dir, server) = start_with(SecurityConfig::default(), hold).await;
        let (addr, digest) = (server.grpc_addr, server.served.snapshot().answer("svc").digest.as_str().to_owned());
        let (greedy, _) = h2_from([127, 0, 0, 2], addr).await;
        let mut calls = Vec::new();
        for _ in 0..8 {
            calls.push(held_poll(&greedy, addr, &digest).await);
        }
        within_bound("six of the greedy source's polls answered at once", || {
            calls.iter().filter(|c| c.is_finished()).count() == 6
        })
        .await;
        assert_eq!(metric(&server, "skyconf_held_polls"), 2, "its share: a quarter of 8");
        assert_eq!(metric(&server, "skyconf_held_polls_refused_total{limit=\"source\"}"), 6);
        for call in calls.into_iter().filter(|c| c.is_finished()) {
            assert_eq!(call.await.unwrap(), "0", "answered \"unchanged\", an OK call");
        }

        let (agent, _) = h2_from([127, 0, 0, 3], addr).await;
        let held = held_poll(&agent, addr, &digest).await;
        within_bound("the other source's poll is held", || metric(&server, "skyconf_held_polls") == 3).await;
        assert!(!held.is_finished());
        server.stop().await.unwrap();
        assert_eq!(held.await.unwrap(), "0", "answered \"unchanged\" at shutdown");
    }

    /// F5: connections that complete their handshake and answer every ping are never cut as idle;
    /// one source opening as many as the cap gets its share (a quarter by default), the rest are
    /// closed at once, and another source's agent connects and is answered.
    #[tokio::test]
    async fn one_source_cannot_take_the_connection_cap_from_another() {
        let connections = ConnectionLimits { max_grpc_connections: Some(8), ..ConnectionLimits::default() };
        let security = SecurityConfig { connections, ..SecurityConfig::default() };
        let (_dir, server) = start_with(security, skyconf_server::HoldOptions::default()).await;
        let addr = server.grpc_addr;
        let mut greedy = Vec::new();
        for _ in 0..8 {
            greedy.push(h2_from([127, 0, 0, 2], addr).await);
        }
        within_bound("six of the greedy source's connections closed", || {
            greedy.iter().filter(|(_, connection)| connection.is_finished()).count() == 6
        })
        .await;
        assert_eq!(metric(&server, "skyconf_grpc_connections_refused_total{limit=\"source\"}"), 6);
        for (client, _) in greedy.iter_mut().filter(|(_, connection)| !connection.is_finished()) {
            assert_eq!(poll_on(client, addr).await, "0", "the source's share is served");
        }

        let (mut agent, _) = h2_from([127, 0, 0, 3], addr).await;
        assert_eq!(poll_on(&mut agent, addr).await, "0", "another source connects and is answered");
        assert_eq!(metric(&server, "skyconf_grpc_connections"), 3);
        server.stop().await.unwrap();
    }

    /// F6: calls whose message never comes cost memory while they wait; one source gets its share
    /// of the bound (a quarter by default), its further ones are answered DEADLINE_EXCEEDED at
    /// once, and another source's calls are answered as usual. Once four sources fill the bound
    /// of all, a fifth source's waiting call is refused too, by that bound.
    #[tokio::test]
    async fn one_source_cannot_take_the_pending_streams_of_another() {
        let grpc_limits = GrpcLimits { max_pending_streams: 40, ..GrpcLimits::default() };
        let security = SecurityConfig { grpc_limits, ..SecurityConfig::default() };
        let (_dir, server) = start_with(security, skyconf_server::HoldOptions::default()).await;
        let addr = server.grpc_addr;
        let (greedy, _) = h2_from([127, 0, 0, 2], addr).await;
        let mut waiting = Vec::new();
        let mut calls = Vec::new();
        for _ in 0..30 {
            let mut ready = greedy.clone().ready().await.unwrap();
            // HEADERS without END_STREAM, and never a DATA frame.
            let (response, body) = ready.send_request(fetch_request(addr), false).unwrap();
            waiting.push(body);
            calls.push(tokio::spawn(grpc_status(response)));
        }
        within_bound("twenty of the source's waiting calls answered at once", || {
            calls.iter().filter(|c| c.is_finished()).count() == 20
        })
        .await;
        for call in calls.iter_mut().filter(|c| c.is_finished()) {
            assert_eq!(call.await.unwrap(), "4", "DEADLINE_EXCEEDED, which does not drop an agent's channel");
        }
        assert_eq!(metric(&server, "skyconf_grpc_pending_streams"), 10, "its share: a quarter of 40");
        assert_eq!(metric(&server, "skyconf_grpc_streams_refused_total{limit=\"source\"}"), 20);

        let (mut agent, _) = h2_from([127, 0, 0, 3], addr).await;
        assert_eq!(poll_on(&mut agent, addr).await, "0", "another source's call is answered");

        // Three more sources take their shares: the bound of all is full.
        let mut others = Vec::new();
        for source in 4..=6 {
            let (client, _) = h2_from([127, 0, 0, source], addr).await;
            for _ in 0..10 {
                let mut ready = client.clone().ready().await.unwrap();
                let (response, body) = ready.send_request(fetch_request(addr), false).unwrap();
                others.push((response, body));
            }
        }
        within_bound("forty calls waiting", || metric(&server, "skyconf_grpc_pending_streams") == 40).await;
        let (last, _) = h2_from([127, 0, 0, 7], addr).await;
        let mut ready = last.ready().await.unwrap();
        let (response, _body) = ready.send_request(fetch_request(addr), false).unwrap();
        assert_eq!(tokio::time::timeout(BOUND, grpc_status(response)).await.unwrap(), "4");
        assert_eq!(metric(&server, "skyconf_grpc_streams_refused_total{limit=\"total\"}"), 1);
        drop((waiting, others));
        server.stop().await.unwrap();
    }
}

/// The admin port against browsers: cross-site writes (CSRF), DNS rebinding, security headers;
/// over a real socket, with the headers a browser sends.
mod browser {
    use std::net::SocketAddr;

    use skyconf_server::ServeConfig;
    use skyconf_server::security::{AllowedHosts, SecurityConfig};
    use skyconf_sources::file::FileSource;
    use skyconf_testkit::fixtures::temp_file;
    use skyconf_testkit::server::{Server, loopback};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::GOOD;

    async fn start(allowed_hosts: AllowedHosts) -> (tempfile::TempDir, Server) {
        let (dir, path) = temp_file("agent.yaml", GOOD);
        let security = SecurityConfig { allowed_hosts, ..SecurityConfig::default() };
        (dir, Server::start(FileSource::new(path), ServeConfig { security, ..loopback() }).await)
    }

    /// One HTTP/1.1 request with `headers` (each `Name: value`); the status and the head.
    async fn request(addr: SocketAddr, method: &str, path: &str, headers: &[String], body: &str) -> (u16, String) {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let mut text = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
        for header in headers {
            text.push_str(header);
            text.push_str("\r\n");
        }
        text.push_str("\r\n");
        text.push_str(body);
        stream.write_all(text.as_bytes()).await.unwrap();
        let mut answer = String::new();
        tokio::time::timeout(std::time::Duration::from_secs(5), stream.read_to_string(&mut answer))
            .await
            .unwrap()
            .unwrap();
        let status = answer.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        let head = answer.split("\r\n\r\n").next().unwrap_or_default().to_ascii_lowercase();
        (status, head)
    }

    #[tokio::test]
    async fn a_cross_site_form_cannot_write() {
        let (_dir, server) = start(AllowedHosts::default()).await;
        let addr = server.admin_addr;
        let host = format!("Host: {addr}");
        let before = server.releases.latest().map(|r| r.meta.id);
        // The review's form: text/plain from another origin, as Chromium sends it.
        let form = r#"{"author":"csrf","message":"x=""}"#;
        let cases = [
            vec![host.clone(), "Content-Type: text/plain".into(), "Origin: http://127.0.0.1:29600".into()],
            vec![host.clone(), "Content-Type: text/plain".into(), "Sec-Fetch-Site: cross-site".into()],
            // Even JSON, if a browser says it comes from another site or origin.
            vec![host.clone(), "Content-Type: application/json".into(), "Sec-Fetch-Site: same-site".into()],
            vec![host.clone(), "Content-Type: application/json".into(), "Origin: http://evil.example".into()],
            // Without Origin (older browsers, `no-referrer`): a simple content type is not enough.
            vec![host.clone(), "Content-Type: text/plain".into()],
            vec![host.clone(), "Content-Type: application/x-www-form-urlencoded".into()],
        ];
        for headers in &cases {
            let (status, _) = request(addr, "POST", "/api/v1/releases/1/rollback", headers, form).await;
            assert_eq!(status, 403, "{headers:?}");
        }
        assert_eq!(server.releases.latest().map(|r| r.meta.id), before, "nothing was written");

        // The page's own writes (same origin, JSON) and the CLI's curl (a custom header) pass.
        let own = [host.clone(), "Content-Type: application/json".into(), format!("Origin: http://{addr}")];
        let (status, _) = request(addr, "PUT", "/api/v1/services/svc?dry_run=true", &own, r#"{"config": {}}"#).await;
        assert_eq!(status, 200);
        let curl = [host.clone(), "X-Skyconf-Author: ann".into()];
        let (status, _) = request(addr, "POST", "/api/v1/releases/1/rollback", &curl, "").await;
        assert_ne!(status, 403);
        server.stop().await.unwrap();
    }

    #[tokio::test]
    async fn a_rebound_host_name_is_refused() {
        let (_dir, server) = start(AllowedHosts { names: vec!["skyconf.internal".into()] }).await;
        let addr = server.admin_addr;
        let port = addr.port();
        let get = |host: String, path: &'static str| async move { request(addr, "GET", path, &[host], "").await.0 };
        assert_eq!(get(format!("Host: attacker.example:{port}"), "/api/v1/services").await, 403);
        assert_eq!(get(format!("Host: attacker.example:{port}"), "/").await, 403);
        assert_eq!(get(format!("Host: 127.0.0.1:{port}"), "/api/v1/services").await, 200);
        assert_eq!(get(format!("Host: localhost:{port}"), "/api/v1/services").await, 200);
        assert_eq!(get(format!("Host: skyconf.internal:{port}"), "/api/v1/services").await, 200);
        assert_eq!(get(format!("Host: attacker.example:{port}"), "/healthz").await, 200, "probes carry no data");
        let scraped = get(format!("Host: skyconf-metrics.monitoring:{port}"), "/metrics").await;
        assert_eq!(scraped, 200, "Prometheus scrapes by service name");
        server.stop().await.unwrap();
    }

    #[tokio::test]
    async fn the_page_and_the_api_carry_security_headers() {
        let (_dir, server) = start(AllowedHosts::default()).await;
        let addr = server.admin_addr;
        let host = [format!("Host: {addr}")];
        let (status, page) = request(addr, "GET", "/", &host, "").await;
        assert_eq!(status, 200);
        let csp = page.lines().find(|l| l.starts_with("content-security-policy:")).expect("a CSP on the page");
        assert!(csp.contains("script-src 'sha256-") && csp.contains("frame-ancestors 'none'"), "{csp}");
        assert!(!csp.contains("unsafe-inline"), "{csp}");
        let (_, api) = request(addr, "GET", "/api/v1/status", &host, "").await;
        for expected in [
            "x-content-type-options: nosniff",
            "referrer-policy: no-referrer",
            "x-frame-options: deny",
            "content-security-policy: default-src 'none'; frame-ancestors 'none'",
        ] {
            let name = expected.split(':').next().unwrap();
            assert!(page.contains(name) && api.contains(expected), "{expected}\n{api}");
        }
        server.stop().await.unwrap();
    }
}
