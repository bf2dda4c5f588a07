//! End to end over real sockets: a file-backed server on ephemeral ports, polled by a tonic
//! client as an agent would poll it.

use std::path::Path;
use std::time::{Duration, Instant};

use prost::Message;
use skyconf_core::codec::DiscoveryCommand;
use skyconf_core::digest::EMPTY_DIGEST;
use skyconf_proto::v3::ConfigurationSyncRequest;
use skyconf_proto::v3::configuration_discovery_service_client::ConfigurationDiscoveryServiceClient;
use skyconf_server::{Running, ServeConfig, ServerError};
use skyconf_sources::file::FileSource;
use tonic::transport::Channel;

const GOOD: &str =
    "configurations:\n  svc:\n    agent.sample_n_per_3_secs: 10\n    agent.span_limit_per_segment: 400\n";
/// Vector V5 of the behaviour reference.
const GOOD_DIGEST: &str = "b111ca16ffb52b5d97102ffea2926a76e06d124f01e3aa0e9e11bca6b606bb72d39ec9596d900520195cfaf88c98eff8695576af47fb1858a8f1e098ff35fb11";

async fn start(path: &Path) -> Result<Running, ServerError> {
    let config = ServeConfig {
        grpc_addr: "127.0.0.1:0".parse().unwrap(),
        admin_addr: "127.0.0.1:0".parse().unwrap(),
        ..ServeConfig::default()
    };
    skyconf_server::start_with(FileSource::new(path), config).await
}

async fn client(running: &Running) -> ConfigurationDiscoveryServiceClient<Channel> {
    ConfigurationDiscoveryServiceClient::connect(format!("http://{}", running.grpc_addr)).await.unwrap()
}

async fn fetch(
    client: &mut ConfigurationDiscoveryServiceClient<Channel>,
    service: &str,
    uuid: &str,
) -> Option<DiscoveryCommand> {
    let request = ConfigurationSyncRequest { service: service.into(), uuid: uuid.into() };
    let commands = client.fetch_configurations(request).await.expect("the call succeeds").into_inner();
    DiscoveryCommand::find(&commands)
}

async fn served_digest(client: &mut ConfigurationDiscoveryServiceClient<Channel>) -> String {
    fetch(client, "svc", "").await.unwrap().uuid.unwrap()
}

/// Polls until the served digest differs from `old`, returning when that was seen.
async fn wait_for_new_digest(
    client: &mut ConfigurationDiscoveryServiceClient<Channel>,
    old: &str,
) -> (String, Instant) {
    let give_up = Instant::now() + Duration::from_secs(10);
    loop {
        let digest = served_digest(client).await;
        if digest != old {
            return (digest, Instant::now());
        }
        assert!(Instant::now() < give_up, "the edit was never served");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test]
async fn answers_as_the_oap_does_over_grpc() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.yaml");
    std::fs::write(&path, GOOD).unwrap();
    let running = start(&path).await.unwrap();
    let mut client = client(&running).await;

    let first = fetch(&mut client, "svc", "").await.unwrap();
    assert_eq!(first.uuid.as_deref(), Some(GOOD_DIGEST));
    assert_eq!(first.config.len(), 2);
    assert!(fetch(&mut client, "svc", GOOD_DIGEST).await.is_none(), "echoing the digest gets no command");
    let unknown = fetch(&mut client, "unknown", "").await.unwrap();
    assert_eq!(unknown.uuid.as_deref(), Some(EMPTY_DIGEST));
    assert!(unknown.config.is_empty());
    assert!(fetch(&mut client, "unknown", EMPTY_DIGEST).await.is_none());
    running.stop().await.unwrap();
}

/// The file store's headline number: an edit reaches a polling agent within 100 ms (p99 of 50
/// edits, half written in place, half replaced by rename). On a multi-threaded runtime like the
/// real server's, so the polling client does not take turns with the server on one thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn propagation_file_edits_are_served_within_100_ms() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.yaml");
    std::fs::write(&path, GOOD).unwrap();
    let running = start(&path).await.unwrap();
    let mut client = client(&running).await;
    let mut current = served_digest(&mut client).await;
    let mut delays = Vec::with_capacity(50);
    for n in 0..50 {
        let text = format!("configurations:\n  svc:\n    agent.sample_n_per_3_secs: {n}\n");
        let written = Instant::now();
        if n % 2 == 0 {
            std::fs::write(&path, text).unwrap();
        } else {
            // Editors and ConfigMap mounts replace the file by rename.
            let staged = dir.path().join(".agent.yaml.swp");
            std::fs::write(&staged, text).unwrap();
            std::fs::rename(&staged, &path).unwrap();
        }
        let (digest, seen) = wait_for_new_digest(&mut client, &current).await;
        delays.push(seen - written);
        current = digest;
    }
    delays.sort();
    let pct = |p: f64| delays[((p * delays.len() as f64).ceil() as usize).clamp(1, delays.len()) - 1];
    eprintln!(
        "file edit → served by fetchConfigurations, 50 edits: p50 {:?}, p90 {:?}, p99 {:?}, max {:?}",
        pct(0.50),
        pct(0.90),
        pct(0.99),
        delays[delays.len() - 1]
    );
    assert!(pct(0.99) <= Duration::from_millis(100), "p99 over 100 ms: {delays:?}");
    running.stop().await.unwrap();
}

#[tokio::test]
async fn a_broken_file_keeps_the_last_good_config_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.yaml");
    std::fs::write(&path, GOOD).unwrap();
    let running = start(&path).await.unwrap();
    let mut client = client(&running).await;
    let mut changes = running.served.subscribe();

    std::fs::write(&path, "configurations:\n  svc:\n    agent.sample_n_per_3_secs: [unclosed\n").unwrap();
    let give_up = Instant::now() + Duration::from_secs(10);
    while running.served.last_rejection().is_none() {
        assert!(Instant::now() < give_up, "the broken file was never noticed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let rejection = running.served.last_rejection().unwrap();
    assert!(rejection.error.contains("line "), "{}", rejection.error);
    assert_eq!(served_digest(&mut client).await, GOOD_DIGEST, "the last good table is still served");

    let ready = http_get(running.admin_addr, "/readyz").await;
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
    assert!(ready.contains("last_rejection") && ready.contains("line "), "{ready}");

    std::fs::write(&path, "configurations:\n  svc:\n    agent.sample_n_per_3_secs: 20\n").unwrap();
    tokio::time::timeout(Duration::from_secs(10), changes.changed()).await.unwrap().unwrap();
    assert_ne!(served_digest(&mut client).await, GOOD_DIGEST);
    assert!(running.served.last_rejection().is_none());
    running.stop().await.unwrap();
}

#[tokio::test]
async fn refuses_to_start_on_a_bad_document_naming_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.yaml");
    std::fs::write(&path, "configurations:\n  svc:\n    k:\n").unwrap();
    let error = start(&path).await.unwrap_err();
    let message = error.to_string();
    assert!(message.contains("line 3") && message.contains("column"), "{message}");
}

#[tokio::test]
async fn bad_requests_never_end_with_a_code_that_drops_the_agent_channel() {
    use tonic::Code;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.yaml");
    std::fs::write(&path, GOOD).unwrap();
    let running = start(&path).await.unwrap();
    let channel = Channel::from_shared(format!("http://{}", running.grpc_addr)).unwrap().connect().await.unwrap();
    let deadly =
        [Code::Unknown, Code::Unavailable, Code::ResourceExhausted, Code::Unauthenticated, Code::PermissionDenied];

    // Oversized: a 1 MiB service name.
    let mut client = ConfigurationDiscoveryServiceClient::new(channel.clone());
    let huge = ConfigurationSyncRequest { service: "x".repeat(1 << 20), uuid: String::new() };
    let status = client.fetch_configurations(huge).await.unwrap_err();
    assert_eq!(status.code(), Code::OutOfRange, "{status:?}");

    // Malformed protobuf.
    let status = raw_call(channel.clone(), vec![0xff, 0xff, 0xff]).await.unwrap_err();
    assert!(!deadly.contains(&status.code()), "{status:?}");

    // Invalid UTF-8 in the service name (field 1, length 2).
    let status = raw_call(channel, vec![0x0a, 0x02, 0xc3, 0x28]).await.unwrap_err();
    assert!(!deadly.contains(&status.code()), "{status:?}");
    running.stop().await.unwrap();
}

/// Sends raw bytes as the request message.
async fn raw_call(channel: Channel, body: Vec<u8>) -> Result<bytes::Bytes, tonic::Status> {
    use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
    #[derive(Default)]
    struct Raw;
    struct RawEnc;
    struct RawDec;
    impl Encoder for RawEnc {
        type Item = Vec<u8>;
        type Error = tonic::Status;
        fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
            bytes::BufMut::put_slice(dst, &item);
            Ok(())
        }
    }
    impl Decoder for RawDec {
        type Item = bytes::Bytes;
        type Error = tonic::Status;
        fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<bytes::Bytes>, tonic::Status> {
            let n = bytes::Buf::remaining(src);
            Ok(Some(bytes::Buf::copy_to_bytes(src, n)))
        }
    }
    impl Codec for Raw {
        type Encode = Vec<u8>;
        type Decode = bytes::Bytes;
        type Encoder = RawEnc;
        type Decoder = RawDec;
        fn encoder(&mut self) -> RawEnc {
            RawEnc
        }
        fn decoder(&mut self) -> RawDec {
            RawDec
        }
    }
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let path = http::uri::PathAndQuery::from_static(skyconf_proto::FETCH_CONFIGURATIONS_PATH);
    grpc.unary(tonic::Request::new(body), path, Raw).await.map(tonic::Response::into_inner)
}

/// A minimal HTTP/1.1 GET, to keep an HTTP client out of the dependencies.
async fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes()).await.unwrap();
    let mut out = String::new();
    stream.read_to_string(&mut out).await.unwrap();
    out
}

#[test]
fn the_empty_answer_is_zero_bytes() {
    assert!(skyconf_proto::v3::Commands::default().encode_to_vec().is_empty());
}
