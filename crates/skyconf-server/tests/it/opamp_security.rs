//! The OpAMP port behind the same agent token and TLS options as the other ports, over real
//! sockets: the PyPI and npm OpAMP clients apply their groups over mutual TLS with the token; a
//! request without the token, or with another, is answered 401 and no WebSocket is opened for it;
//! a client without a certificate the CA signed does not get past the handshake. And the npm
//! client `@elastic/opamp-client-node` against the server `skyconf serve` runs: it applies its
//! group, gets a document change, and its failure is listed.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use prost::Message as _;
use serde_json::Value;
use skyconf_opamp::{bits, codec, wire};
use skyconf_server::ServeConfig;
use skyconf_server::security::{ClientAuth, Secret, SecurityConfig};
use skyconf_sources::file::FileSource;
use skyconf_testkit::fixtures::temp_file;
use skyconf_testkit::server::{Server, eventually_async};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use crate::opamp::{
    agents, applied, applies_the_next_change_and_lists_a_failure, config, document, first_applied, interop_dir,
    json_file, python, row, serving, spawn, stop,
};
use crate::tls::Pki;

const TOKEN: &str = "opamp-t0k";

/// A server whose OpAMP port serves TLS with client certificates required and checks `TOKEN`.
async fn secured(pki: &Pki, path: &std::path::Path) -> Server {
    let security = SecurityConfig {
        agent_token: Some(Secret::new(TOKEN)),
        opamp_tls: Some(pki.files(Some(ClientAuth::Require))),
        ..SecurityConfig::default()
    };
    Server::start(FileSource::new(path), ServeConfig { security, ..config() }).await
}

fn https_url(server: &Server) -> String {
    format!("https://localhost:{}/v1/opamp", server.opamp_addr.unwrap().port())
}

/// Writes the client certificate's files, and returns (cert, key) paths.
fn client_files(pki: &Pki) -> (PathBuf, PathBuf) {
    let (cert, key) = (pki.path("client.pem"), pki.path("client.key"));
    std::fs::write(&cert, &pki.client.0).unwrap();
    std::fs::write(&key, &pki.client.1).unwrap();
    (cert, key)
}

/// A reqwest client trusting the test CA, presenting the client certificate when `identity`.
fn https(pki: &Pki, identity: bool) -> reqwest::Client {
    let mut builder = reqwest::Client::builder()
        .use_rustls_tls()
        .no_gzip()
        .add_root_certificate(reqwest::Certificate::from_pem(pki.ca_pem.as_bytes()).unwrap())
        .resolve("localhost", "127.0.0.1:0".parse().unwrap());
    if identity {
        let pem = format!("{}{}", pki.client.0, pki.client.1);
        builder = builder.identity(reqwest::Identity::from_pem(pem.as_bytes()).unwrap());
    }
    builder.build().unwrap()
}

fn hello() -> wire::AgentToServer {
    let attribute = |key: &str, value: &str| wire::KeyValue {
        key: key.into(),
        value: Some(wire::AnyValue { value: Some(wire::any_value::Value::StringValue(value.into())) }),
    };
    wire::AgentToServer {
        instance_uid: Bytes::copy_from_slice(&[0x17; 16]),
        sequence_num: 1,
        capabilities: bits::agent::REPORTS_STATUS | bits::agent::ACCEPTS_REMOTE_CONFIG,
        agent_description: Some(wire::AgentDescription {
            identifying_attributes: vec![attribute("service.name", "checkout")],
            non_identifying_attributes: Vec::new(),
        }),
        ..Default::default()
    }
}

/// One plain HTTP message with `headers`; the status, and the error message of the answer.
async fn post(
    http: &reqwest::Client,
    url: &str,
    headers: &[(&str, &str)],
) -> (u16, Option<String>, wire::ServerToAgent) {
    let mut request = http.post(url).header("content-type", codec::CONTENT_TYPE).body(hello().encode_to_vec());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let challenge = response.headers().get("www-authenticate").map(|v| v.to_str().unwrap().to_owned());
    let body = response.bytes().await.unwrap();
    (status, challenge, wire::ServerToAgent::decode(body).unwrap())
}

/// A WebSocket upgrade over TLS with the client certificate and `headers`: the opened socket, or
/// the HTTP status it was refused with.
async fn upgrade(
    pki: &Pki,
    server: &Server,
    headers: &[(&'static str, &str)],
) -> Result<tokio_tungstenite::WebSocketStream<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>, u16> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pki.ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let chain = CertificateDer::pem_slice_iter(pki.client.0.as_bytes()).collect::<Result<Vec<_>, _>>().unwrap();
    let key = PrivateKeyDer::from_pem_slice(pki.client.1.as_bytes()).unwrap();
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .unwrap();
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = tokio::net::TcpStream::connect(server.opamp_addr.unwrap()).await.unwrap();
    let stream = tokio_rustls::TlsConnector::from(Arc::new(tls))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let url = format!("wss://localhost:{}/v1/opamp", server.opamp_addr.unwrap().port());
    let mut request = url.into_client_request().unwrap();
    for (name, value) in headers {
        request.headers_mut().insert(*name, value.parse().unwrap());
    }
    match tokio_tungstenite::client_async(request, stream).await {
        Ok((socket, _)) => Ok(socket),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => Err(response.status().as_u16()),
        Err(other) => panic!("the upgrade failed otherwise: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_wrong_agent_token_is_refused_401_on_both_transports_and_tls_wants_a_client_certificate() {
    let pki = Pki::new();
    let (_dir, path) = temp_file("agents.yaml", &document("checkout", &json_file("0.5"), 10));
    let server = secured(&pki, &path).await;
    let (http, url) = (https(&pki, true), https_url(&server));

    let (status, challenge, answer) = post(&http, &url, &[]).await;
    assert_eq!((status, challenge.as_deref()), (401, Some("Bearer")), "no token");
    let why = answer.error_response.unwrap().error_message;
    assert!(why.contains("missing"), "{why}");
    for wrong in ["Bearer opamp-t0", "Bearer OPAMP-T0K", "opamp-t0k"] {
        let (status, _, answer) = post(&http, &url, &[("authorization", wrong)]).await;
        assert_eq!(status, 401, "{wrong}");
        assert_eq!(answer.error_response.unwrap().error_message, "the agent token does not match");
    }
    let (status, _, answer) = post(&http, &url, &[("authentication", "nope")]).await;
    assert_eq!(status, 401);
    assert!(answer.remote_config.is_none());
    assert!(agents(&server.admin()).await.is_empty(), "a refused agent has no session");

    // The token as a bearer, or as SkyWalking's `Authentication` header: answered.
    let bearer = format!("Bearer {TOKEN}");
    let (status, _, answer) = post(&http, &url, &[("authorization", &bearer)]).await;
    assert_eq!(status, 200);
    assert!(answer.remote_config.is_some(), "its group's files");
    let (status, _, _) = post(&http, &url, &[("authentication", TOKEN)]).await;
    assert_eq!(status, 200);

    // WebSocket: no upgrade without the token, or with another.
    assert_eq!(upgrade(&pki, &server, &[]).await.err(), Some(401));
    assert_eq!(upgrade(&pki, &server, &[("authorization", "Bearer nope")]).await.err(), Some(401));
    let mut socket = upgrade(&pki, &server, &[("authorization", &bearer)]).await.expect("upgraded with the token");
    {
        use futures_util::{SinkExt as _, StreamExt as _};
        let mut frame = vec![0u8];
        let mut message = hello();
        message.instance_uid = Bytes::copy_from_slice(&[0x18; 16]);
        message.encode(&mut frame).unwrap();
        socket.send(tokio_tungstenite::tungstenite::Message::Binary(frame.into())).await.unwrap();
        let reply = tokio::time::timeout(Duration::from_secs(30), socket.next()).await.unwrap().unwrap().unwrap();
        let reply = wire::ServerToAgent::decode(&reply.into_data()[1..]).unwrap();
        assert!(reply.remote_config.is_some());
        socket.close(None).await.unwrap();
    }
    let refused = server.admin().get("/metrics").await.body;
    assert!(refused.lines().any(|l| l == "skyconf_opamp_unauthorized_total 7"), "{refused}");

    // Without a client certificate the handshake fails: no request is answered.
    let failed = https(&pki, false).post(&url).header("content-type", codec::CONTENT_TYPE).send().await;
    assert!(failed.is_err(), "{failed:?}");
    server.stop().await.unwrap();
}

/// The npm client's `node`, or `None` (with a message; a failure when required).
pub(crate) fn node() -> Option<PathBuf> {
    let installed = interop_dir().join("node_modules/@elastic/opamp-client-node/package.json").is_file();
    let runs =
        std::process::Command::new("node").arg("--version").stdout(Stdio::null()).status().is_ok_and(|s| s.success());
    if installed && runs {
        return Some(PathBuf::from("node"));
    }
    let required = std::env::var_os("SKYCONF_REQUIRE_OPAMP_CLIENTS").is_some_and(|v| !v.is_empty() && v != "0");
    assert!(!required, "SKYCONF_REQUIRE_OPAMP_CLIENTS is set but the npm OpAMP client is not installed");
    eprintln!("skipping: the npm client @elastic/opamp-client-node is not installed (scripts/deps/opamp.sh)");
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pypi_and_npm_clients_apply_their_groups_over_mutual_tls_with_the_agent_token() {
    let (Some(python), Some(node)) = (python(), node()) else { return };
    let pki = Pki::new();
    let both = "configurations: {}\nopamp:\n  - group: svc\n    match:\n      service.name: '*-svc'\n    files:\n      sampling.json:\n        body: '{\"ratio\": 0.5}'\n";
    let (_dir, path) = temp_file("agents.yaml", both);
    let server = secured(&pki, &path).await;
    let admin = server.admin();
    let (cert, key) = client_files(&pki);
    let env = [
        ("OPAMP_TOKEN", PathBuf::from(TOKEN)),
        ("OPAMP_CA", pki.path("ca.pem")),
        ("OPAMP_CLIENT_CERT", cert),
        ("OPAMP_CLIENT_KEY", key),
    ];
    let url = https_url(&server);
    let py = spawn(&python, "python_agent.py", &[&url, "py-svc", "1"], &env);
    let js = spawn(&node, "node_agent.js", &[&url, "js-svc", "1"], &env);
    let service = |r: &Value, name: &str| {
        r["attributes"].as_array().is_some_and(|a| a.iter().any(|a| a["key"] == "service.name" && a["value"] == name))
    };
    eventually_async("both clients apply their group over TLS with the token", async || {
        let listed = agents(&admin).await;
        ["py-svc", "js-svc"].iter().all(|name| listed.iter().any(|r| service(r, name) && applied(r)))
    })
    .await;
    stop(py).await;
    stop(js).await;
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_npm_client_applies_its_group_gets_a_document_change_and_its_failure_is_listed() {
    let Some(node) = node() else { return };
    let (_dir, _, server, admin) = serving(&document("js-svc", &json_file("0.5"), 10)).await;
    let url = crate::opamp::url(&server);
    let child = spawn(&node, "node_agent.js", &[&url, "js-svc", "1"], &[]);

    let uid = first_applied(&admin).await;
    let first = row(&admin, &uid, "listed", |r| r["group"] == "svc").await;
    assert_eq!(first["transport"], "http");
    // The agent parses application/json: a body that is not JSON fails.
    applies_the_next_change_and_lists_a_failure(&admin, &uid, "js-svc", &first["offered_hash"], "sampling.json").await;
    stop(child).await;
    server.stop().await.unwrap();
}
