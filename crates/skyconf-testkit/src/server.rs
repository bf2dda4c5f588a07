//! A skyconf server for tests ([`Server`]): `skyconf_server::start_with` on ephemeral loopback
//! ports, with a CDS client ([`Cds`], what an agent sees), a DCS client ([`Server::dcs`], what an
//! OAP sees) and an admin HTTP client ([`AdminClient`], what an operator sees); plus
//! [`eventually`] for conditions that become true some time after a change.

use std::net::SocketAddr;
use std::ops::Deref;
use std::time::{Duration, Instant};

use skyconf_core::codec::DiscoveryCommand;
use skyconf_proto::dcs::ConfigurationRequest;
use skyconf_proto::dcs::configuration_service_client::ConfigurationServiceClient;
use skyconf_proto::v3::ConfigurationSyncRequest;
use skyconf_proto::v3::configuration_discovery_service_client::ConfigurationDiscoveryServiceClient;
use skyconf_server::{Running, ServeConfig, ServerError};
use skyconf_sources::{Source, StoreContent};
use tonic::transport::Channel;

use crate::PATIENCE;

/// A [`ServeConfig`] listening on ephemeral loopback ports, otherwise the default.
pub fn loopback() -> ServeConfig {
    ServeConfig {
        grpc_addr: "127.0.0.1:0".parse().unwrap(),
        admin_addr: "127.0.0.1:0".parse().unwrap(),
        ..ServeConfig::default()
    }
}

/// A running skyconf server; derefs to [`Running`] (its addresses, served table, store view...).
#[derive(Debug)]
pub struct Server {
    running: Running,
}

impl Server {
    /// Starts a server on `source` with `config` (see [`loopback`]); panics when it cannot start.
    pub async fn start<S: Source>(source: S, config: ServeConfig) -> Self {
        Self::try_start(source, config).await.expect("the server starts")
    }

    /// Starts a server, or says why it did not.
    pub async fn try_start<S: Source>(source: S, config: ServeConfig) -> Result<Self, ServerError> {
        Ok(Self { running: skyconf_server::start_with(source, config).await? })
    }

    /// A CDS client connected to the gRPC port.
    pub async fn cds(&self) -> Cds {
        Cds::connect(self.running.grpc_addr).await
    }

    /// A DCS client (what an OAP polls) connected to the gRPC port.
    pub async fn dcs(&self) -> ConfigurationServiceClient<Channel> {
        ConfigurationServiceClient::connect(format!("http://{}", self.running.grpc_addr)).await.expect("connects")
    }

    /// An admin HTTP client for the admin port.
    pub fn admin(&self) -> AdminClient {
        AdminClient::new(self.running.admin_addr)
    }

    /// Polls the server's view of the store until `done` holds; fails after [`PATIENCE`].
    pub async fn wait_for_store(&self, what: &str, done: impl Fn(&StoreContent) -> bool) {
        let give_up = Instant::now() + PATIENCE;
        let mut changes = self.running.store.subscribe();
        while !done(&self.running.store.content()) {
            let left = give_up.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "never seen in the store view: {what}: {:?}", self.running.store.content());
            // Wakes on every content change; the timeout bounds the wait.
            let _ = tokio::time::timeout(left.min(Duration::from_millis(50)), changes.changed()).await;
        }
    }

    /// Stops the server and waits for it.
    pub async fn stop(self) -> Result<(), ServerError> {
        self.running.stop().await
    }
}

impl Deref for Server {
    type Target = Running;

    fn deref(&self) -> &Running {
        &self.running
    }
}

/// What an OAP of the default cluster (`SkyWalking`) sends the DCS service first: no uuid.
pub fn dcs_request() -> ConfigurationRequest {
    ConfigurationRequest { cluster_name: "SkyWalking".into(), uuid: String::new() }
}

/// A CDS client: asks as an agent asks.
#[derive(Debug, Clone)]
pub struct Cds {
    client: ConfigurationDiscoveryServiceClient<Channel>,
}

impl Cds {
    /// Connects to a gRPC port.
    pub async fn connect(addr: SocketAddr) -> Self {
        let client = ConfigurationDiscoveryServiceClient::connect(format!("http://{addr}")).await.expect("connects");
        Self { client }
    }

    /// The command an agent of `service` holding `uuid` gets; `None` is "no change".
    pub async fn fetch(&self, service: &str, uuid: &str) -> Option<DiscoveryCommand> {
        let request = ConfigurationSyncRequest { service: service.into(), uuid: uuid.into() };
        let commands = self.client.clone().fetch_configurations(request).await.expect("the call succeeds");
        DiscoveryCommand::find(&commands.into_inner())
    }

    /// The digest in the command an agent of `service` holding `uuid` gets; `None` is "no
    /// change".
    pub async fn fetch_digest(&self, service: &str, uuid: &str) -> Option<String> {
        self.fetch(service, uuid).await.map(|command| command.uuid.expect("a command carries its digest"))
    }

    /// The digest served to `service` now; `None` while the server answers "no change".
    pub async fn digest(&self, service: &str) -> Option<String> {
        self.fetch(service, "").await.and_then(|command| command.uuid)
    }

    /// Polls until the digest served to `service` satisfies `done`; returns it and when it was
    /// first seen. Fails after [`PATIENCE`].
    pub async fn wait_for_digest(
        &self,
        service: &str,
        what: &str,
        done: impl Fn(Option<&str>) -> bool,
    ) -> (Option<String>, Instant) {
        let give_up = Instant::now() + PATIENCE;
        loop {
            let digest = self.digest(service).await;
            if done(digest.as_deref()) {
                return (digest, Instant::now());
            }
            assert!(Instant::now() < give_up, "never served: {what} (last digest {digest:?})");
            tokio::task::yield_now().await;
        }
    }

    /// Polls until the digest served to `service` is no longer `old`; the new one and when it was
    /// first seen.
    pub async fn wait_for_new_digest(&self, service: &str, old: Option<&str>) -> (Option<String>, Instant) {
        self.wait_for_digest(service, "a new digest", |digest| digest != old).await
    }
}

/// An HTTP client for the admin port (reqwest), optionally with a bearer token.
#[derive(Debug, Clone)]
pub struct AdminClient {
    base: String,
    token: Option<String>,
    timeout: Duration,
}

/// An admin port's answer.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// The `Content-Type` header, if any.
    pub content_type: Option<String>,
    /// The body, as text.
    pub body: String,
}

impl Reply {
    /// The body as JSON; `Null` when it is not JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

impl AdminClient {
    /// A client for the admin port at `addr` (`host:port`), over plain HTTP.
    pub fn new(addr: impl std::fmt::Display) -> Self {
        Self { base: format!("http://{addr}"), token: None, timeout: Duration::from_secs(5) }
    }

    /// The same client, giving up on a request after `timeout` instead of 5 s.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The same client, sending `Authorization: Bearer {token}`.
    pub fn with_bearer(mut self, token: &str) -> Self {
        self.token = Some(token.to_owned());
        self
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Reply {
        self.send("GET", path, &[], "").await
    }

    /// `GET path`, the body as JSON (which it must be).
    pub async fn get_json(&self, path: &str) -> serde_json::Value {
        let reply = self.get(path).await;
        serde_json::from_str(&reply.body).unwrap_or_else(|e| panic!("{e}: {reply:?}"))
    }

    /// Any request, with extra headers and a body.
    pub async fn send(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Reply {
        self.try_send(method, path, headers, body).await.unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    /// Any request; an error when nothing answered (within 5 s, or as [`Self::with_timeout`] says).
    pub async fn try_send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Result<Reply, reqwest::Error> {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
        // A client per request: no pooled connection outlives the runtime that made it (see
        // `send_blocking`), and every request is on a connection of its own, as curl's would be.
        let client = reqwest::Client::new();
        let mut request =
            client.request(method, format!("{}{path}", self.base)).timeout(self.timeout).body(body.to_owned());
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        let content_type =
            response.headers().get(reqwest::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let body = response.text().await?;
        Ok(Reply { status, content_type, body })
    }

    /// A request without a body from a test that is not async, on a runtime of its own.
    pub fn send_blocking(&self, method: &str, path: &str) -> Reply {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        runtime.block_on(self.send(method, path, &[], ""))
    }
}

/// Polls `condition` until it holds; fails after [`PATIENCE`].
pub async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let give_up = Instant::now() + PATIENCE;
    while !condition() {
        assert!(Instant::now() < give_up, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// [`eventually`] for a condition that must ask over the network.
pub async fn eventually_async(what: &str, mut condition: impl AsyncFnMut() -> bool) {
    let give_up = Instant::now() + PATIENCE;
    while !condition().await {
        assert!(Instant::now() < give_up, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
