//! Fleet status end to end over real sockets: tonic clients poll as agents do (each on its own
//! connection, so each has its own peer address), one of them fails to apply a change; the admin
//! API shows who applied, who is behind and who is stuck, and the instance identity an agent gave
//! in `ManagementService` calls on the same channel (name, properties, agent version).

use std::time::{Duration, Instant};

use skyconf_core::codec::DiscoveryCommand;
use skyconf_proto::v3::configuration_discovery_service_client::ConfigurationDiscoveryServiceClient;
use skyconf_proto::v3::management_service_client::ManagementServiceClient;
use skyconf_proto::v3::{ConfigurationSyncRequest, InstancePingPkg, InstanceProperties, KeyStringValuePair};
use skyconf_server::{FleetOptions, Running, ServeConfig};
use skyconf_sources::file::FileSource;
use skyconf_testkit::fixtures::temp_file;
use skyconf_testkit::server::{Server, loopback};
use tonic::transport::Channel;

const V1: &str = "configurations:\n  svc:\n    agent.sample_n_per_3_secs: 10\n";
const V2: &str = "configurations:\n  svc:\n    agent.sample_n_per_3_secs: 20\n";

/// An agent: one channel, the digest of what it applied.
struct Agent {
    channel: Channel,
    uuid: String,
    /// Refuses every command after the first, as a Java agent whose watcher throws.
    stuck: bool,
}

impl Agent {
    async fn connect(running: &Running, stuck: bool) -> Self {
        // One endpoint per agent: its own connection and peer address.
        let channel = Channel::from_shared(format!("http://{}", running.grpc_addr)).unwrap().connect().await.unwrap();
        Self { channel, uuid: String::new(), stuck }
    }

    async fn poll(&mut self) {
        let mut client = ConfigurationDiscoveryServiceClient::new(self.channel.clone());
        let request = ConfigurationSyncRequest { service: "svc".into(), uuid: self.uuid.clone() };
        let commands = client.fetch_configurations(request).await.unwrap().into_inner();
        // A stuck agent applied its first configuration and fails every later one.
        if let Some(new) = DiscoveryCommand::find(&commands).and_then(|c| c.uuid)
            && (!self.stuck || self.uuid.is_empty())
        {
            self.uuid = new;
        }
    }
}

fn states(body: &serde_json::Value) -> Vec<(String, String)> {
    let mut out: Vec<_> = body["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["instance"].as_str().unwrap_or("-").to_owned(), a["state"].as_str().unwrap().to_owned()))
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn followers_apply_within_one_poll_and_a_failing_agent_shows_stuck() {
    let (_dir, path) = temp_file("agents.yaml", V1);
    let config = ServeConfig { fleet: FleetOptions { stuck_after_polls: 3, ..FleetOptions::default() }, ..loopback() };
    let running = Server::start(FileSource::new(&path), config).await;
    let mut follower = Agent::connect(&running, false).await;
    let mut failing = Agent::connect(&running, true).await;
    for name in ["follower", "failing"] {
        let channel = if name == "follower" { follower.channel.clone() } else { failing.channel.clone() };
        let ping = InstancePingPkg { service: "svc".into(), service_instance: name.into(), layer: String::new() };
        ManagementServiceClient::new(channel).keep_alive(ping).await.unwrap();
    }

    for _ in 0..2 {
        follower.poll().await;
        failing.poll().await;
    }
    let body = running.admin().get_json("/api/v1/services/svc").await;
    assert_eq!(states(&body), [("failing".into(), "applied".into()), ("follower".into(), "applied".into())]);

    let mut changes = running.served.subscribe();
    std::fs::write(&path, V2).unwrap();
    tokio::time::timeout(Duration::from_secs(10), changes.changed()).await.unwrap().unwrap();

    follower.poll().await;
    failing.poll().await;
    let body = running.admin().get_json("/api/v1/services/svc").await;
    assert_eq!(states(&body), [("failing".into(), "behind".into()), ("follower".into(), "behind".into())]);
    follower.poll().await;
    failing.poll().await;
    let body = running.admin().get_json("/api/v1/services/svc").await;
    assert_eq!(
        states(&body),
        [("failing".into(), "behind".into()), ("follower".into(), "applied".into())],
        "one poll after receiving it, the follower holds the new digest"
    );
    failing.poll().await;
    let body = running.admin().get_json("/api/v1/services/svc").await;
    assert_eq!(states(&body), [("failing".into(), "stuck".into()), ("follower".into(), "applied".into())]);
    let stuck = body["agents"].as_array().unwrap().iter().find(|a| a["state"] == "stuck").unwrap();
    assert_eq!(stuck["polls_behind"], 3);
    assert_ne!(stuck["digest"], body["digest"], "it holds the old digest");

    let list = running.admin().get_json("/api/v1/services").await;
    let svc = &list["services"][0];
    assert_eq!((svc["agents"].as_u64(), svc["applied"].as_u64(), svc["stuck"].as_u64()), (Some(2), Some(1), Some(1)));
    running.stop().await.unwrap();
}

#[tokio::test]
async fn agents_not_seen_for_a_while_are_forgotten() {
    let (_dir, path) = temp_file("agents.yaml", V1);
    let config = ServeConfig {
        fleet: FleetOptions { expire_after: Duration::from_millis(50), ..FleetOptions::default() },
        ..loopback()
    };
    let running = Server::start(FileSource::new(&path), config).await;
    let mut agent = Agent::connect(&running, false).await;
    agent.poll().await;
    assert_eq!(running.fleet.tracked(), 1);
    // The sweeper runs every second at most; bounded wait for it.
    let give_up = Instant::now() + Duration::from_secs(10);
    while running.fleet.tracked() != 0 {
        assert!(Instant::now() < give_up, "the agent was never forgotten");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    running.stop().await.unwrap();
}

/// F17: a flood of made-up service names (one channel, no token) does not keep a real agent out
/// of the fleet table: unconfigured names stay within their quota, evicting each other.
#[tokio::test]
async fn a_flood_of_fake_service_names_does_not_push_real_agents_out() {
    let (_dir, path) = temp_file("agents.yaml", V1);
    let fleet = FleetOptions { max_agents: 50, max_unconfigured: 10, ..FleetOptions::default() };
    let running = Server::start(FileSource::new(&path), ServeConfig { fleet, ..loopback() }).await;
    let flooder = Agent::connect(&running, false).await;
    let mut client = ConfigurationDiscoveryServiceClient::new(flooder.channel.clone());
    for i in 0..200 {
        let request = ConfigurationSyncRequest { service: format!("fake-{i}"), uuid: String::new() };
        client.fetch_configurations(request).await.unwrap();
    }
    assert_eq!(running.fleet.tracked_unconfigured(), 10);

    let mut agent = Agent::connect(&running, false).await;
    agent.poll().await;
    let body = running.admin().get_json("/api/v1/services/svc").await;
    assert_eq!(body["agents"].as_array().unwrap().len(), 1, "the real agent is tracked: {body}");
    let status = running.admin().get_json("/api/v1/status").await;
    assert_eq!(status["fleet"]["evictions"], 190, "{status}");
    let metrics = running.admin().get("/metrics").await.body;
    assert!(metrics.contains("skyconf_fleet_evictions_total 190"), "{metrics}");
    assert!(metrics.contains("skyconf_fleet_tracked{kind=\"unconfigured\"} 10"), "{metrics}");
    running.stop().await.unwrap();
}

/// What a Java agent sends at start: `reportInstanceProperties` with its properties (`ipv4`
/// twice) and its version as `Agent-Version` metadata; then `keepAlive`s, which keep them. With
/// identities expected (gateway mode), a connection that only polls is anonymous.
#[tokio::test]
async fn the_management_calls_identify_an_agent_and_a_poller_without_them_is_anonymous() {
    let (_dir, path) = temp_file("agents.yaml", V1);
    let fleet = FleetOptions { expect_identity: true, ..FleetOptions::default() };
    let running = Server::start(FileSource::new(&path), ServeConfig { fleet, ..loopback() }).await;
    let mut agent = Agent::connect(&running, false).await;
    let mut anonymous = Agent::connect(&running, false).await;
    let pairs = [("hostname", "pod-7"), ("ipv4", "10.0.0.7"), ("ipv4", "172.17.0.1"), ("language", "java")];
    let mut report = tonic::Request::new(InstanceProperties {
        service: "svc".into(),
        service_instance: "pod-7@10.0.0.7".into(),
        properties: pairs.iter().map(|(k, v)| KeyStringValuePair { key: (*k).into(), value: (*v).into() }).collect(),
        layer: String::new(),
    });
    // A client writes the key in any case; it arrives lowercase.
    report.metadata_mut().insert("agent-version", "9.4.0-test".parse().unwrap());
    let mut management = ManagementServiceClient::new(agent.channel.clone());
    management.report_instance_properties(report).await.unwrap();
    let ping =
        InstancePingPkg { service: "svc".into(), service_instance: "pod-7@10.0.0.7".into(), layer: String::new() };
    management.keep_alive(ping).await.unwrap();
    for _ in 0..2 {
        agent.poll().await;
        anonymous.poll().await;
    }

    let body = running.admin().get_json("/api/v1/instances").await;
    assert_eq!(body["expect_identity"], true);
    let instance = &body["instances"][0];
    assert_eq!(instance["instance"], "pod-7@10.0.0.7");
    let got = crate::pairs(&instance["properties"], "key", "value");
    assert_eq!(got, pairs, "kept through the keepAlive, in order");
    assert_eq!(instance["agent_version"], "9.4.0-test");
    assert_eq!(instance["services"][0]["state"], "applied");
    assert_eq!(body["anonymous"].as_array().unwrap().len(), 1, "{body}");
    assert_eq!(body["anonymous"][0]["state"], "anonymous");

    let list = running.admin().get_json("/api/v1/services").await;
    let svc = &list["services"][0];
    assert_eq!((svc["agents"].as_u64(), svc["anonymous"].as_u64()), (Some(1), Some(1)), "{svc}");
    let status = running.admin().get_json("/api/v1/status").await;
    assert_eq!(
        (status["fleet"]["identified"].as_u64(), status["fleet"]["expect_identity"].as_bool()),
        (Some(1), Some(true))
    );
    running.stop().await.unwrap();
}

/// An agent whose connection closes while its poll is held (a crash, a `kill -9`): its row and
/// its identity go with the connection, at once, whatever `--agent-expiry` says.
#[tokio::test]
async fn an_agent_whose_connection_closes_while_its_poll_is_held_is_gone_at_once() {
    let (_dir, path) = temp_file("agents.yaml", V1);
    let running = Server::start(FileSource::new(&path), loopback()).await;
    let mut agent = Agent::connect(&running, false).await;
    let ping = InstancePingPkg { service: "svc".into(), service_instance: "pod-1".into(), layer: String::new() };
    ManagementServiceClient::new(agent.channel.clone()).keep_alive(ping).await.unwrap();
    agent.poll().await;
    // The next poll echoes the current digest with the Java agent's 30 s deadline: held.
    let mut request = tonic::Request::new(ConfigurationSyncRequest { service: "svc".into(), uuid: agent.uuid.clone() });
    request.set_timeout(Duration::from_secs(30));
    let mut client = ConfigurationDiscoveryServiceClient::new(agent.channel.clone());
    let held = tokio::spawn(async move { client.fetch_configurations(request).await });
    let admin = running.admin();
    skyconf_testkit::server::eventually_async("the poll is held", async || {
        admin.get_json("/api/v1/status").await["held_polls"] == 1
    })
    .await;
    let body = admin.get_json("/api/v1/services/svc").await;
    assert_eq!(states(&body), [("pod-1".into(), "applied".into())]);

    // The process dies: its call and its connection end.
    held.abort();
    drop(agent);
    let closed = Instant::now();
    skyconf_testkit::server::eventually_async("the agent is gone", async || {
        let body = admin.get_json("/api/v1/services/svc").await;
        body["agents"].as_array().unwrap().is_empty()
    })
    .await;
    assert!(closed.elapsed() < Duration::from_secs(1), "gone within a second: {:?}", closed.elapsed());
    let instances = admin.get_json("/api/v1/instances").await;
    assert_eq!(instances["instances"].as_array().unwrap().len(), 0, "no identity outlives its connection");
    assert_eq!(running.fleet.identified(), 0);
    running.stop().await.unwrap();
}

/// A peer that goes silent without FIN or RST (a partition) while its poll is held: the server's
/// HTTP/2 PING finds it, the connection ends within the ping interval and timeout, and its row
/// with it. A peer that answers pings keeps its connection and its held poll.
#[tokio::test]
async fn a_silent_peer_is_found_by_ping_and_its_row_ends_with_its_connection() {
    use skyconf_server::security::{GrpcLimits, SecurityConfig};
    let (_dir, path) = temp_file("agents.yaml", V1);
    let (interval, timeout) = (Duration::from_millis(600), Duration::from_millis(600));
    let grpc_limits =
        GrpcLimits { keepalive_interval: Some(interval), keepalive_timeout: timeout, ..GrpcLimits::default() };
    let security = SecurityConfig { grpc_limits, ..SecurityConfig::default() };
    let running = Server::start(FileSource::new(&path), ServeConfig { security, ..loopback() }).await;
    let admin = running.admin();
    let digest = running.served.snapshot().answer("svc").digest.as_str().to_owned();

    let silent = raw::Client::connect(running.grpc_addr).await;
    let answering = raw::Client::connect(running.grpc_addr).await;
    let _held = [silent.hold("silent", &digest).await, answering.hold("answering", &digest).await];
    skyconf_testkit::server::eventually_async("both polls are held", async || {
        admin.get_json("/api/v1/status").await["held_polls"] == 2
    })
    .await;
    silent.freeze();
    let frozen = Instant::now();
    skyconf_testkit::server::eventually_async("the silent agent is gone", async || {
        let body = admin.get_json("/api/v1/services/svc").await;
        states(&body) == [("answering".to_owned(), "applied".to_owned())]
    })
    .await;
    let took = frozen.elapsed();
    assert!(took >= interval, "ended by the ping timeout, not before: {took:?}");
    assert!(took < interval + timeout + Duration::from_secs(1), "within interval + timeout: {took:?}");
    // The answering peer stays through several more ping intervals, its poll still held.
    tokio::time::sleep(3 * (interval + timeout)).await;
    assert_eq!(admin.get_json("/api/v1/status").await["held_polls"], 1);
    let body = admin.get_json("/api/v1/services/svc").await;
    assert_eq!(states(&body), [("answering".to_owned(), "applied".to_owned())]);
    running.stop().await.unwrap();
}

/// A raw HTTP/2 client (h2) whose socket can be frozen: from then on it reads and writes nothing,
/// so a PING goes unanswered while the TCP connection stays open, as across a partition.
mod raw {
    use std::net::SocketAddr;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::task::{Context, Poll};

    use bytes::Bytes;
    use skyconf_proto::v3::{ConfigurationSyncRequest, InstancePingPkg};
    use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
    use tokio::net::TcpStream;

    struct Freezable {
        inner: TcpStream,
        frozen: Arc<AtomicBool>,
    }

    impl AsyncRead for Freezable {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            if self.frozen.load(Ordering::Relaxed) {
                return Poll::Pending;
            }
            Pin::new(&mut self.inner).poll_read(cx, buf)
        }
    }

    impl AsyncWrite for Freezable {
        fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
            if self.frozen.load(Ordering::Relaxed) {
                return Poll::Pending;
            }
            Pin::new(&mut self.inner).poll_write(cx, buf)
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            if self.frozen.load(Ordering::Relaxed) {
                return Poll::Pending;
            }
            Pin::new(&mut self.inner).poll_flush(cx)
        }

        fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.inner).poll_shutdown(cx)
        }
    }

    pub(super) struct Client {
        addr: SocketAddr,
        send: h2::client::SendRequest<Bytes>,
        frozen: Arc<AtomicBool>,
    }

    impl Client {
        pub(super) async fn connect(addr: SocketAddr) -> Self {
            let frozen = Arc::new(AtomicBool::new(false));
            let tcp = Freezable { inner: TcpStream::connect(addr).await.unwrap(), frozen: Arc::clone(&frozen) };
            let (send, connection) = h2::client::handshake(tcp).await.unwrap();
            tokio::spawn(connection);
            Self { addr, send, frozen }
        }

        async fn call(&self, path: &str, message: Bytes, timeout: Option<&str>) -> h2::client::ResponseFuture {
            let mut request = http::Request::post(format!("http://{}{path}", self.addr))
                .header("content-type", "application/grpc")
                .header("te", "trailers");
            if let Some(timeout) = timeout {
                request = request.header("grpc-timeout", timeout);
            }
            let mut ready = self.send.clone().ready().await.unwrap();
            let (response, mut body) = ready.send_request(request.body(()).unwrap(), false).unwrap();
            body.send_data(message, true).unwrap();
            response
        }

        /// Names the connection `instance` (a keepAlive), then sends a poll echoing `digest`
        /// with a 30 s deadline: held.
        pub(super) async fn hold(&self, instance: &str, digest: &str) -> h2::client::ResponseFuture {
            let ping =
                InstancePingPkg { service: "svc".into(), service_instance: instance.into(), layer: String::new() };
            let answer = self.call("/skywalking.v3.ManagementService/keepAlive", crate::grpc_frame(&ping), None).await;
            let mut body = answer.await.unwrap().into_body();
            while body.data().await.is_some() {}
            let poll = ConfigurationSyncRequest { service: "svc".into(), uuid: digest.into() };
            self.call(
                "/skywalking.v3.ConfigurationDiscoveryService/fetchConfigurations",
                crate::grpc_frame(&poll),
                Some("30S"),
            )
            .await
        }

        /// From now on, nothing is read or written.
        pub(super) fn freeze(&self) {
            self.frozen.store(true, Ordering::Relaxed);
        }
    }
}
