//! TLS over real sockets, with a throwaway CA made here by rcgen: server certificates on both
//! ports, client certificates required or only requested, and files that cannot be used.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use skyconf_core::codec::DiscoveryCommand;
use skyconf_proto::v3::ConfigurationSyncRequest;
use skyconf_proto::v3::configuration_discovery_service_client::ConfigurationDiscoveryServiceClient;
use skyconf_server::security::{ClientAuth, ClientCerts, SecurityConfig, TlsFiles};
use skyconf_server::{Running, ServeConfig, ServerError};
use skyconf_sources::file::FileSource;
use skyconf_testkit::server::{Server, loopback};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

const GOOD: &str = "configurations:\n  svc:\n    agent.sample_n_per_3_secs: 10\n";

/// A CA, a server certificate for localhost and 127.0.0.1, a client certificate it signed, and
/// one from a CA the server does not trust.
pub(crate) struct Pki {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) ca_pem: String,
    pub(crate) client: (String, String),
    pub(crate) stranger: (String, String),
}

fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

fn leaf(
    issuer: &CertifiedIssuer<'static, KeyPair>,
    names: &[&str],
    usage: ExtendedKeyUsagePurpose,
) -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>()).unwrap();
    params.distinguished_name.push(DnType::CommonName, names[0]);
    params.extended_key_usages = vec![usage];
    let cert = params.signed_by(&key, issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

impl Pki {
    pub(crate) fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let authority = ca("skyconf test CA");
        let (server_cert, server_key) =
            leaf(&authority, &["localhost", "127.0.0.1"], ExtendedKeyUsagePurpose::ServerAuth);
        let client = leaf(&authority, &["agent.test"], ExtendedKeyUsagePurpose::ClientAuth);
        let stranger = leaf(&ca("someone else"), &["agent.test"], ExtendedKeyUsagePurpose::ClientAuth);
        std::fs::write(dir.path().join("ca.pem"), authority.pem()).unwrap();
        std::fs::write(dir.path().join("server.pem"), server_cert).unwrap();
        std::fs::write(dir.path().join("server.key"), server_key).unwrap();
        Self { ca_pem: authority.pem(), dir, client, stranger }
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub(crate) fn files(&self, client_auth: Option<ClientAuth>) -> TlsFiles {
        TlsFiles {
            cert: self.path("server.pem"),
            key: self.path("server.key"),
            client_certs: client_auth.map(|auth| ClientCerts { ca: self.path("ca.pem"), auth }),
        }
    }
}

/// A server on a file holding GOOD in `dir`, with `security`.
async fn start(dir: &Path, security: SecurityConfig) -> Result<Server, ServerError> {
    let path = dir.join("agent.yaml");
    std::fs::write(&path, GOOD).unwrap();
    Server::try_start(FileSource::new(path), ServeConfig { security, ..loopback() }).await
}

async fn start_tls(pki: &Pki, client_auth: Option<ClientAuth>) -> Server {
    let files = pki.files(client_auth);
    let security =
        SecurityConfig { grpc_tls: Some(files.clone()), admin_tls: Some(files), ..SecurityConfig::default() };
    start(pki.dir.path(), security).await.unwrap()
}

/// One poll over TLS, as an agent with (or without) a client certificate.
async fn fetch_tls(running: &Running, pki: &Pki, identity: Option<&(String, String)>) -> Result<(), String> {
    let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&pki.ca_pem)).domain_name("localhost");
    if let Some((cert, key)) = identity {
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    let endpoint = Channel::from_shared(format!("https://{}", running.grpc_addr)).unwrap();
    let channel = endpoint.tls_config(tls).map_err(|e| e.to_string())?.connect().await.map_err(|e| e.to_string())?;
    let request = ConfigurationSyncRequest { service: "svc".into(), uuid: String::new() };
    let commands = ConfigurationDiscoveryServiceClient::new(channel)
        .fetch_configurations(request)
        .await
        .map_err(|e| e.to_string())?
        .into_inner();
    DiscoveryCommand::find(&commands).ok_or("no command")?;
    Ok(())
}

/// `GET /healthz` over TLS; the raw response, or why there was none.
async fn healthz_tls(running: &Running, pki: &Pki, identity: Option<&(String, String)>) -> Result<String, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pki.ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(cert.as_bytes()).collect::<Result<Vec<_>, _>>().unwrap();
            builder.with_client_auth_cert(chain, PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap()).unwrap()
        }
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(running.admin_addr).await.unwrap();
    let server_name = ServerName::try_from("localhost").unwrap();
    let mut stream = connector.connect(server_name, tcp).await.map_err(|e| e.to_string())?;
    // With TLS 1.3 the server judges the client's certificate after the client's side of the
    // handshake is done: a refusal arrives as an alert on the first read.
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .map_err(|e| e.to_string())?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.map_err(|e| e.to_string())?;
    Ok(response)
}

#[tokio::test]
async fn required_client_certificates_on_both_ports() {
    let pki = Pki::new();
    let running = start_tls(&pki, Some(ClientAuth::Require)).await;

    fetch_tls(&running, &pki, Some(&pki.client)).await.unwrap();
    let error = fetch_tls(&running, &pki, None).await.unwrap_err();
    assert!(!error.is_empty());
    fetch_tls(&running, &pki, Some(&pki.stranger)).await.expect_err("a certificate from another CA is refused");

    let response = healthz_tls(&running, &pki, Some(&pki.client)).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    let refused = healthz_tls(&running, &pki, None).await;
    assert!(refused.as_ref().map_or(true, String::is_empty), "no HTTP answer without a certificate: {refused:?}");
    let refused = healthz_tls(&running, &pki, Some(&pki.stranger)).await;
    assert!(refused.as_ref().map_or(true, String::is_empty), "{refused:?}");
    running.stop().await.unwrap();
}

#[tokio::test]
async fn requested_client_certificates_let_clients_without_one_in() {
    let pki = Pki::new();
    let running = start_tls(&pki, Some(ClientAuth::Request)).await;
    fetch_tls(&running, &pki, None).await.unwrap();
    fetch_tls(&running, &pki, Some(&pki.client)).await.unwrap();
    assert!(healthz_tls(&running, &pki, None).await.unwrap().starts_with("HTTP/1.1 200"));
    // A certificate that is sent is verified.
    fetch_tls(&running, &pki, Some(&pki.stranger)).await.expect_err("a bad certificate is refused even when optional");
    running.stop().await.unwrap();
}

#[tokio::test]
async fn server_tls_alone_and_no_plaintext_on_a_tls_port() {
    let pki = Pki::new();
    let running = start_tls(&pki, None).await;
    fetch_tls(&running, &pki, None).await.unwrap();
    assert!(healthz_tls(&running, &pki, None).await.unwrap().starts_with("HTTP/1.1 200"));

    let plain = async {
        let channel = Channel::from_shared(format!("http://{}", running.grpc_addr)).unwrap().connect().await?;
        let request = ConfigurationSyncRequest { service: "svc".into(), uuid: String::new() };
        ConfigurationDiscoveryServiceClient::new(channel).fetch_configurations(request).await?;
        Ok::<_, Box<dyn std::error::Error>>(())
    };
    assert!(plain.await.is_err(), "plaintext gRPC on the TLS port");
    running.stop().await.unwrap();
}

#[tokio::test]
async fn unusable_files_stop_the_start_and_name_the_file() {
    let pki = Pki::new();
    // A missing file; a key that is not the certificate's; a CA file holding no certificate.
    std::fs::write(pki.path("other.key"), KeyPair::generate().unwrap().serialize_pem()).unwrap();
    std::fs::write(pki.path("empty.pem"), "not a certificate\n").unwrap();
    let missing = TlsFiles { cert: pki.path("nope.pem"), ..pki.files(None) };
    let mismatched = TlsFiles { key: pki.path("other.key"), ..pki.files(None) };
    let empty = TlsFiles {
        client_certs: Some(ClientCerts { ca: pki.path("empty.pem"), auth: ClientAuth::Require }),
        ..pki.files(None)
    };
    let cases = [
        (SecurityConfig { admin_tls: Some(missing), ..SecurityConfig::default() }, "nope.pem"),
        (SecurityConfig { grpc_tls: Some(mismatched), ..SecurityConfig::default() }, "gRPC"),
        (SecurityConfig { grpc_tls: Some(empty), ..SecurityConfig::default() }, "empty.pem"),
    ];
    for (security, named) in cases {
        let error = start(pki.dir.path(), security).await.unwrap_err().to_string();
        assert!(error.contains(named), "{error}");
    }
}

/// A TLS client connection to `addr`, handshake done, offering `alpn`.
async fn tls_connect(
    addr: std::net::SocketAddr,
    pki: &Pki,
    alpn: &[u8],
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pki.ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    connector.connect(ServerName::try_from("localhost").unwrap(), tcp).await.expect("the TLS handshake completes")
}

/// F5 over TLS: a client that completes TLS and then says nothing is closed after the handshake
/// deadline on both ports, while an agent's idle TLS connection is never cut by it.
#[tokio::test]
async fn a_client_silent_after_tls_is_closed_and_an_idle_agent_is_not() {
    use skyconf_server::security::ConnectionLimits;
    use std::time::Duration;
    const BOUND: Duration = Duration::from_secs(5);
    let pki = Pki::new();
    let files = pki.files(None);
    let connections = ConnectionLimits { handshake_timeout: Duration::from_millis(200), ..ConnectionLimits::default() };
    let security = SecurityConfig {
        grpc_tls: Some(files.clone()),
        admin_tls: Some(files),
        connections,
        ..SecurityConfig::default()
    };
    let running = start(pki.dir.path(), security).await.unwrap();

    for (addr, alpn) in [(running.grpc_addr, &b"h2"[..]), (running.admin_addr, &b"http/1.1"[..])] {
        let silent = tls_connect(addr, &pki, alpn).await;
        let what = format!("{addr}: a client silent after TLS");
        crate::security::connections::closed_by_server(silent, &what).await;
    }

    // An agent: HTTP/2 over TLS, one poll, idle for several deadlines, a poll on the same connection.
    let stream = tls_connect(running.grpc_addr, &pki, b"h2").await;
    let (client, connection) = h2::client::handshake(stream).await.unwrap();
    tokio::spawn(connection);
    let poll = |client: h2::client::SendRequest<bytes::Bytes>| async move {
        let mut ready = client.ready().await.expect("the connection is still open");
        let request =
            http::Request::post("https://localhost/skywalking.v3.ConfigurationDiscoveryService/fetchConfigurations")
                .header("content-type", "application/grpc")
                .header("te", "trailers")
                .body(())
                .unwrap();
        let (response, mut send) = ready.send_request(request, false).unwrap();
        let message =
            prost::Message::encode_to_vec(&ConfigurationSyncRequest { service: "svc".into(), uuid: String::new() });
        let mut frame = vec![0u8];
        frame.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
        frame.extend_from_slice(&message);
        send.send_data(frame.into(), true).unwrap();
        let response = tokio::time::timeout(BOUND, response).await.expect("answered").unwrap();
        assert_eq!(response.status(), 200);
        ready
    };
    let client = poll(client).await;
    // The wait is the scenario (an agent between polls), not synchronisation.
    tokio::time::sleep(Duration::from_millis(800)).await;
    poll(client).await;
    running.stop().await.unwrap();
}

/// Gateway mode towards an OAP that requires TLS and a client certificate (here a second
/// skyconf, which answers `ManagementService` itself): with the CA and skyconf's client
/// certificate, forwarded calls go through; without the certificate, the OAP refuses the
/// handshake and forwarded calls end UNAVAILABLE.
#[tokio::test]
async fn the_gateway_reaches_oaps_over_tls_with_its_client_certificate() {
    use skyconf_proto::v3::InstancePingPkg;
    use skyconf_proto::v3::management_service_client::ManagementServiceClient;
    use skyconf_server::gateway::{GatewayConfig, UpstreamTls};

    let pki = Pki::new();
    let oap = start_tls(&pki, Some(ClientAuth::Require)).await;
    std::fs::write(pki.path("client.pem"), &pki.client.0).unwrap();
    std::fs::write(pki.path("client.key"), &pki.client.1).unwrap();
    let gateway_to_oap = |cert: bool| {
        let mut config = GatewayConfig::new(vec![oap.grpc_addr.to_string()]);
        config.tls = Some(UpstreamTls {
            ca: pki.path("ca.pem"),
            cert: cert.then(|| pki.path("client.pem")),
            key: cert.then(|| pki.path("client.key")),
            server_name: Some("localhost".into()),
        });
        ServeConfig { gateway: Some(config), ..loopback() }
    };
    let ping = || InstancePingPkg { service: "svc".into(), service_instance: "pod-1".into(), ..Default::default() };

    let (_dir, doc) = skyconf_testkit::fixtures::temp_file("agent-configurations.yaml", GOOD);
    let gateway = Server::start(FileSource::new(&doc), gateway_to_oap(true)).await;
    let channel = Channel::from_shared(format!("http://{}", gateway.grpc_addr)).unwrap().connect().await.unwrap();
    let mut management = ManagementServiceClient::new(channel);
    skyconf_testkit::server::eventually_async("a keepAlive through the gateway", async || {
        management.keep_alive(ping()).await.is_ok()
    })
    .await;

    let refused = Server::start(FileSource::new(&doc), gateway_to_oap(false)).await;
    let channel = Channel::from_shared(format!("http://{}", refused.grpc_addr)).unwrap().connect().await.unwrap();
    let status = ManagementServiceClient::new(channel).keep_alive(ping()).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
}
