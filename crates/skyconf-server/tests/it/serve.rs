//! End to end over real sockets: a file-backed server on ephemeral ports, polled by a tonic
//! client as an agent would poll it.

use std::path::Path;
use std::time::{Duration, Instant};

use prost::Message;
use skyconf_core::digest::EMPTY_DIGEST;
use skyconf_proto::v3::ConfigurationSyncRequest;
use skyconf_proto::v3::configuration_discovery_service_client::ConfigurationDiscoveryServiceClient;
use skyconf_sources::file::{FileSource, IN_PLACE_SETTLE};
use skyconf_testkit::fixtures::{V5_DIGEST as GOOD_DIGEST, V5_DOCUMENT as GOOD, numbered, temp_file};
use skyconf_testkit::latency::percentiles;
use skyconf_testkit::server::{Cds, Server, loopback};
use tonic::transport::Channel;

/// A server on the file at `path` and a CDS client.
async fn serve(path: &Path) -> (Server, Cds) {
    let running = Server::try_start(FileSource::new(path), loopback()).await.unwrap();
    let client = running.cds().await;
    (running, client)
}

#[tokio::test]
async fn answers_as_the_oap_does_over_grpc() {
    let (_dir, path) = temp_file("agent.yaml", GOOD);
    let (running, client) = serve(&path).await;

    let first = client.fetch("svc", "").await.unwrap();
    assert_eq!(first.uuid.as_deref(), Some(GOOD_DIGEST));
    assert_eq!(first.config.len(), 2);
    assert!(client.fetch("svc", GOOD_DIGEST).await.is_none(), "echoing the digest gets no command");
    let unknown = client.fetch("unknown", "").await.unwrap();
    assert_eq!(unknown.uuid.as_deref(), Some(EMPTY_DIGEST));
    assert!(unknown.config.is_empty());
    assert!(client.fetch("unknown", EMPTY_DIGEST).await.is_none());
    running.stop().await.unwrap();
}

/// The file store's headline number: a file replaced by rename (as editors, ConfigMap mounts and
/// `skyconf`'s own writes do) reaches a polling agent within 100 ms (p99 of 200 edits: two may be
/// slower, as a loaded machine makes a few). A file written in place is held back until it has
/// been quiet for `IN_PLACE_SETTLE` (it may be half written), and is served soon after. On a
/// multi-threaded runtime like the real server's, so the polling client does not take turns with
/// the server on one thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn propagation_file_edits_are_served_within_100_ms() {
    let (dir, path) = temp_file("agent.yaml", GOOD);
    let (running, client) = serve(&path).await;
    let mut current = client.digest("svc").await.unwrap();
    let mut delays = Vec::with_capacity(200);
    for n in 0..200 {
        let written = Instant::now();
        let staged = dir.path().join(".agent.yaml.swp");
        std::fs::write(&staged, numbered(n)).unwrap();
        std::fs::rename(&staged, &path).unwrap();
        let (digest, seen) = client.wait_for_new_digest("svc", Some(&current)).await;
        delays.push(seen - written);
        current = digest.unwrap();
    }
    let p = percentiles(&mut delays);
    eprintln!("file replaced by rename → served by fetchConfigurations, 200 edits: {p}");
    assert!(p.p99 <= Duration::from_millis(100), "p99 over 100 ms: {delays:?}");

    for n in 200..203 {
        let written = Instant::now();
        std::fs::write(&path, numbered(n)).unwrap();
        let (digest, seen) = client.wait_for_new_digest("svc", Some(&current)).await;
        let delay = seen - written;
        assert!(
            (IN_PLACE_SETTLE..IN_PLACE_SETTLE + Duration::from_secs(1)).contains(&delay),
            "an in-place write served after {delay:?}"
        );
        current = digest.unwrap();
    }
    running.stop().await.unwrap();
}

#[tokio::test]
async fn a_broken_file_keeps_the_last_good_config_and_recovers() {
    let (_dir, path) = temp_file("agent.yaml", GOOD);
    let (running, client) = serve(&path).await;
    let mut changes = running.served.subscribe();

    std::fs::write(&path, "configurations:\n  svc:\n    agent.sample_n_per_3_secs: [unclosed\n").unwrap();
    let give_up = Instant::now() + Duration::from_secs(10);
    while running.served.last_rejection().is_none() {
        assert!(Instant::now() < give_up, "the broken file was never noticed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let rejection = running.served.last_rejection().unwrap();
    // `FILE:LINE:COLUMN: message`, as `skyconf validate` says it.
    assert!(rejection.error.starts_with(&format!("{}:4:1: ", path.display())), "{}", rejection.error);
    assert_eq!(client.digest("svc").await.unwrap(), GOOD_DIGEST, "the last good table is still served");

    let ready = running.admin().get("/readyz").await;
    assert_eq!(ready.status, 200, "{ready:?}");
    assert_eq!(ready.json()["last_rejection"]["error"], rejection.error.as_str(), "{ready:?}");
    // A file has no connection: it is watched (the page says the same).
    let store = &ready.json()["store"];
    assert_eq!((&store["reach"], &store["state"]), (&"files".into(), &"watching".into()), "{store}");

    std::fs::write(&path, "configurations:\n  svc:\n    agent.sample_n_per_3_secs: 20\n").unwrap();
    tokio::time::timeout(Duration::from_secs(10), changes.changed()).await.unwrap().unwrap();
    assert_ne!(client.digest("svc").await.unwrap(), GOOD_DIGEST);
    assert!(running.served.last_rejection().is_none());
    running.stop().await.unwrap();
}

#[tokio::test]
async fn refuses_to_start_on_a_bad_document_naming_line_and_column() {
    let (_dir, path) = temp_file("agent.yaml", "configurations:\n  svc:\n    k:\n");
    let error = Server::try_start(FileSource::new(&path), loopback()).await.unwrap_err();
    let message = error.to_string();
    assert!(message.starts_with(&format!("{}:3:", path.display())), "FILE:LINE:COLUMN: message: {message}");
}

#[tokio::test]
async fn bad_requests_never_end_with_a_code_that_drops_the_agent_channel() {
    use tonic::Code;
    let (_dir, path) = temp_file("agent.yaml", GOOD);
    let running = Server::try_start(FileSource::new(&path), loopback()).await.unwrap();
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

#[test]
fn the_empty_answer_is_zero_bytes() {
    assert!(skyconf_proto::v3::Commands::default().encode_to_vec().is_empty());
}
