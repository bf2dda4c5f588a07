//! A minimal etcd v3 client on tonic: connect to the first endpoint that answers (TLS through
//! rustls), log in when authentication is on, and the calls the store needs — a range read, a
//! compare-and-swap write (a `Txn`), and a prefix watch. Every unary call and the watch's creation are bounded by the
//! connect timeout, so a store that accepts connections but never answers counts as down.
//!
//! The generated stubs come from skyconf-proto's own declaration of etcd's API (see
//! `proto/etcd/`), compiled by protox: no system `protoc`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use skyconf_proto::etcd::etcdserverpb as pb;
use skyconf_proto::etcd::etcdserverpb::auth_client::AuthClient;
use skyconf_proto::etcd::etcdserverpb::kv_client::KvClient;
use skyconf_proto::etcd::etcdserverpb::lease_client::LeaseClient;
use skyconf_proto::etcd::etcdserverpb::watch_client::WatchClient;
use tokio::sync::mpsc;
use tonic::metadata::{AsciiMetadataValue, MetadataValue};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use super::settings::EtcdSettings;

/// HTTP/2 pings keep a quiet watch honest: a store that vanished without closing the connection
/// is noticed within interval + timeout. etcd refuses pings more often than every 5 s.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EtcdError {
    /// No endpoint could be connected to.
    #[error("cannot connect to {endpoint}: {message}")]
    Connect { endpoint: String, message: String },
    /// The TLS or endpoint settings cannot be used.
    #[error("{0}")]
    Config(String),
    /// The store answered with an error.
    #[error("{}: {}", .0.code_name(), .0.message())]
    Status(Box<StatusText>),
    /// The store did not answer in time.
    #[error("no answer to {what} within {limit:?}")]
    Timeout { what: &'static str, limit: Duration },
    /// The watch's start revision is older than what the store keeps.
    #[error("revision {requested} was compacted (the store keeps revisions from {compacted})")]
    Compacted { requested: i64, compacted: i64 },
    /// The store cancelled the watch, saying why (permissions, for one).
    #[error("the store cancelled the watch: {0}")]
    Cancelled(String),
    /// The watch stream ended without a reason (a member going away, a proxy closing it).
    #[error("{0}")]
    Closed(&'static str),
}

/// The parts of a gRPC status worth keeping.
#[derive(Debug)]
pub(crate) struct StatusText {
    code: tonic::Code,
    message: String,
}

impl StatusText {
    fn code_name(&self) -> String {
        format!("{:?}", self.code)
    }

    fn message(&self) -> &str {
        &self.message
    }
}

impl From<tonic::Status> for EtcdError {
    fn from(status: tonic::Status) -> Self {
        // Transport failures keep their cause (a TLS alert, a reset) in the source chain.
        let message = match std::error::Error::source(&status) {
            Some(cause) => {
                let cause = chain(cause);
                if cause.starts_with(status.message()) { cause } else { format!("{}: {cause}", status.message()) }
            }
            None => status.message().to_owned(),
        };
        Self::Status(Box::new(StatusText { code: status.code(), message }))
    }
}

impl EtcdError {
    /// Whether the store refused who we are or what we asked (rather than being unreachable):
    /// wrong password, no or expired token, no permission, settings that cannot work.
    pub(crate) fn is_refusal(&self) -> bool {
        match self {
            Self::Status(s) => matches!(
                s.code,
                tonic::Code::InvalidArgument | tonic::Code::Unauthenticated | tonic::Code::PermissionDenied
            ),
            Self::Config(_) | Self::Cancelled(_) => true,
            Self::Connect { .. } | Self::Timeout { .. } | Self::Compacted { .. } | Self::Closed(_) => false,
        }
    }

    /// Whether a fresh login may help (the token expired or was revoked).
    pub(crate) fn is_token_problem(&self) -> bool {
        matches!(self, Self::Status(s) if s.code == tonic::Code::Unauthenticated)
    }
}

/// Connects to one of the configured endpoints.
#[derive(Debug)]
pub(crate) struct Connector {
    settings: std::sync::Arc<EtcdSettings>,
    endpoints: Vec<String>,
    /// The endpoint to try first: the one that answered last.
    preferred: AtomicUsize,
    max_message_bytes: usize,
}

impl Connector {
    /// A connector for `settings`, already validated, accepting messages up to `max_message_bytes`.
    pub(crate) fn new(
        settings: std::sync::Arc<EtcdSettings>,
        endpoints: Vec<String>,
        max_message_bytes: usize,
    ) -> Self {
        Self { settings, endpoints, preferred: AtomicUsize::new(0), max_message_bytes }
    }

    /// A logged-in connection to the first endpoint that answers, starting with the one that
    /// answered last. A refused login ends the search: every member holds the same users.
    pub(crate) async fn connect(&self) -> Result<Connection, EtcdError> {
        let count = self.endpoints.len();
        let first = self.preferred.load(Ordering::Relaxed) % count.max(1);
        let mut last_error = None;
        for offset in 0..count {
            let index = (first + offset) % count;
            let url = &self.endpoints[index];
            match self.connect_to(url).await {
                Ok(connection) => {
                    self.preferred.store(index, Ordering::Relaxed);
                    return Ok(connection);
                }
                Err(error) if error.is_refusal() => return Err(error),
                Err(error) => {
                    tracing::debug!(endpoint = %url, %error, "Cannot reach this etcd endpoint; trying the next.");
                    last_error = Some(error);
                }
            }
        }
        Err(last_error.unwrap_or_else(|| EtcdError::Config("no endpoints".to_owned())))
    }

    async fn connect_to(&self, url: &str) -> Result<Connection, EtcdError> {
        let limit = self.settings.connect_timeout();
        let endpoint = self.endpoint(url)?;
        let channel = match tokio::time::timeout(limit, endpoint.connect()).await {
            Ok(Ok(channel)) => channel,
            Ok(Err(error)) => return Err(EtcdError::Connect { endpoint: url.to_owned(), message: chain(&error) }),
            Err(_) => {
                return Err(EtcdError::Connect {
                    endpoint: url.to_owned(),
                    message: format!("no answer within {limit:?}"),
                });
            }
        };
        let mut connection =
            Connection { channel, token: None, timeout: limit, max_message_bytes: self.max_message_bytes };
        if self.settings.authentication {
            connection.token = Some(connection.authenticate(&self.settings.user, &self.settings.password).await?);
        }
        Ok(connection)
    }

    fn endpoint(&self, url: &str) -> Result<Endpoint, EtcdError> {
        let settings = &self.settings;
        let mut endpoint = Endpoint::from_shared(url.to_owned())
            .map_err(|e| EtcdError::Config(format!("endpoint `{url}`: {e}")))?
            .connect_timeout(settings.connect_timeout())
            .tcp_nodelay(true)
            .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
            .keep_alive_timeout(KEEPALIVE_TIMEOUT);
        if url.starts_with("https://") {
            let read = |path: &std::path::Path| {
                std::fs::read(path).map_err(|e| EtcdError::Config(format!("cannot read {}: {e}", path.display())))
            };
            let mut tls = ClientTlsConfig::new();
            tls = match &settings.ca_file {
                Some(ca) => tls.ca_certificate(Certificate::from_pem(read(ca)?)),
                None => tls.with_native_roots(),
            };
            if let (Some(cert), Some(key)) = (&settings.cert_file, &settings.key_file) {
                tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
            }
            if let Some(authority) = &settings.authority {
                tls = tls.domain_name(authority.clone());
            }
            endpoint =
                endpoint.tls_config(tls).map_err(|e| EtcdError::Config(format!("TLS for `{url}`: {}", chain(&e))))?;
        }
        Ok(endpoint)
    }
}

/// A connection to one etcd member, logged in if authentication is on.
#[derive(Debug, Clone)]
pub(crate) struct Connection {
    channel: Channel,
    token: Option<AsciiMetadataValue>,
    timeout: Duration,
    max_message_bytes: usize,
}

impl Connection {
    /// `message` with the login token attached, as etcd expects it (`token` metadata).
    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Some(token) = &self.token {
            request.metadata_mut().insert("token", token.clone());
        }
        request
    }

    async fn bounded<T>(
        &self,
        what: &'static str,
        call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, EtcdError> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(result) => Ok(result?.into_inner()),
            Err(_) => Err(EtcdError::Timeout { what, limit: self.timeout }),
        }
    }

    fn kv(&self) -> KvClient<Channel> {
        KvClient::new(self.channel.clone()).max_decoding_message_size(self.max_message_bytes)
    }

    /// Logs in; the token to send with every later request.
    async fn authenticate(&self, user: &str, password: &str) -> Result<AsciiMetadataValue, EtcdError> {
        let request = pb::AuthenticateRequest { name: user.to_owned(), password: password.to_owned() };
        let response =
            self.bounded("Authenticate", AuthClient::new(self.channel.clone()).authenticate(request)).await?;
        MetadataValue::try_from(response.token)
            .map_err(|_| EtcdError::Config("the store issued a token that is not ASCII".to_owned()))
    }

    /// Every key in `[key, range_end)`, with the revision the read reflects.
    pub(crate) async fn range(&self, key: Vec<u8>, range_end: Vec<u8>) -> Result<pb::RangeResponse, EtcdError> {
        let request = pb::RangeRequest { key, range_end, ..Default::default() };
        self.bounded("Range", self.kv().range(self.request(request))).await
    }

    /// The keys (no values) in `[key, range_end)`.
    pub(crate) async fn range_keys(&self, key: Vec<u8>, range_end: Vec<u8>) -> Result<pb::RangeResponse, EtcdError> {
        let request = pb::RangeRequest { key, range_end, keys_only: true, ..Default::default() };
        self.bounded("Range", self.kv().range(self.request(request))).await
    }

    /// Writes `value` to `key` (with `None`, deletes it) only if the key's last change is still
    /// revision `expected` (0: only if the key does not exist), in one `Txn`.
    pub(crate) async fn swap(&self, key: Vec<u8>, expected: i64, value: Option<Vec<u8>>) -> Result<Swap, EtcdError> {
        use pb::compare::{CompareResult, CompareTarget, TargetUnion};
        use pb::request_op::Request;
        let compare = if expected == 0 {
            // version is 0 only for a key that does not exist.
            pb::Compare {
                result: CompareResult::Equal as i32,
                target: CompareTarget::Version as i32,
                key: key.clone(),
                target_union: Some(TargetUnion::Version(0)),
                range_end: Vec::new(),
            }
        } else {
            pb::Compare {
                result: CompareResult::Equal as i32,
                target: CompareTarget::Mod as i32,
                key: key.clone(),
                target_union: Some(TargetUnion::ModRevision(expected)),
                range_end: Vec::new(),
            }
        };
        let write = match value {
            Some(value) => Request::RequestPut(pb::PutRequest { key: key.clone(), value, ..Default::default() }),
            None => Request::RequestDeleteRange(pb::DeleteRangeRequest { key: key.clone(), ..Default::default() }),
        };
        // When the compare fails, read the key in the same revision, to say what it holds now.
        let read = Request::RequestRange(pb::RangeRequest { key, keys_only: true, ..Default::default() });
        let request = pb::TxnRequest {
            compare: vec![compare],
            success: vec![pb::RequestOp { request: Some(write) }],
            failure: vec![pb::RequestOp { request: Some(read) }],
        };
        let response = self.bounded("Txn", self.kv().txn(self.request(request))).await?;
        let revision = response.header.map(|h| h.revision).unwrap_or_default();
        if response.succeeded {
            return Ok(Swap::Written { revision });
        }
        let current = response.responses.into_iter().find_map(|op| match op.response {
            Some(pb::response_op::Response::ResponseRange(range)) => Some(range.kvs),
            _ => None,
        });
        let current = current.and_then(|kvs| kvs.into_iter().next()).map(|kv| kv.mod_revision).unwrap_or(0);
        Ok(Swap::Changed { current })
    }

    /// Writes `value` to `key` unconditionally, attached to `lease` (0: none).
    pub(crate) async fn put(&self, key: Vec<u8>, value: Vec<u8>, lease: i64) -> Result<(), EtcdError> {
        let request = pb::PutRequest { key, value, lease, ..Default::default() };
        self.bounded("Put", self.kv().put(self.request(request))).await.map(drop)
    }

    /// Deletes `key` (nothing when it is absent).
    pub(crate) async fn delete(&self, key: Vec<u8>) -> Result<(), EtcdError> {
        let request = pb::DeleteRangeRequest { key, ..Default::default() };
        self.bounded("DeleteRange", self.kv().delete_range(self.request(request))).await.map(drop)
    }

    fn lease(&self) -> LeaseClient<Channel> {
        LeaseClient::new(self.channel.clone())
    }

    /// A new lease of `ttl` seconds: its id and the TTL granted.
    pub(crate) async fn lease_grant(&self, ttl: i64) -> Result<(i64, i64), EtcdError> {
        let request = pb::LeaseGrantRequest { ttl, id: 0 };
        let response = self.bounded("LeaseGrant", self.lease().lease_grant(self.request(request))).await?;
        if !response.error.is_empty() {
            return Err(EtcdError::Cancelled(format!("lease not granted: {}", response.error)));
        }
        Ok((response.id, response.ttl))
    }

    /// Renews lease `id` once: its TTL after the renewal, 0 or less when it no longer exists.
    pub(crate) async fn lease_keep_alive(&self, id: i64) -> Result<i64, EtcdError> {
        let once = futures_util::stream::iter([pb::LeaseKeepAliveRequest { id }]);
        let lease = self.lease();
        let renew = async move {
            let mut lease = lease;
            let mut responses = lease.lease_keep_alive(self.request(once)).await?.into_inner();
            match responses.message().await? {
                Some(response) => Ok(tonic::Response::new(response.ttl)),
                None => Err(tonic::Status::unavailable("the keep-alive stream ended without an answer")),
            }
        };
        self.bounded("LeaseKeepAlive", renew).await
    }

    /// Revokes lease `id`, deleting every key attached to it.
    pub(crate) async fn lease_revoke(&self, id: i64) -> Result<(), EtcdError> {
        let request = pb::LeaseRevokeRequest { id };
        self.bounded("LeaseRevoke", self.lease().lease_revoke(self.request(request))).await.map(drop)
    }

    /// A watch on `[key, range_end)` reporting every change from `start_revision` on, returned
    /// once the store confirmed it.
    pub(crate) async fn watch(
        &self,
        key: Vec<u8>,
        range_end: Vec<u8>,
        start_revision: i64,
    ) -> Result<Watch, EtcdError> {
        let (requests, outbound) = mpsc::channel(1);
        let create = pb::WatchCreateRequest { key, range_end, start_revision, ..Default::default() };
        let create = pb::WatchRequest { request_union: Some(pb::watch_request::RequestUnion::CreateRequest(create)) };
        // The channel has room for it; the stream below is what the server reads.
        requests.try_send(create).map_err(|_| EtcdError::Config("cannot queue the watch request".to_owned()))?;
        let outbound = futures_util::stream::unfold(outbound, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) });
        let mut client = WatchClient::new(self.channel.clone()).max_decoding_message_size(self.max_message_bytes);
        let mut inbound = self.bounded("Watch", client.watch(self.request(outbound))).await?;
        let created = match tokio::time::timeout(self.timeout, inbound.message()).await {
            Ok(Ok(Some(response))) => response,
            Ok(Ok(None)) => return Err(EtcdError::Closed("the watch stream ended at once")),
            Ok(Err(status)) => return Err(status.into()),
            Err(_) => return Err(EtcdError::Timeout { what: "Watch", limit: self.timeout }),
        };
        if created.canceled {
            return Err(cancelled(&created, start_revision));
        }
        if !created.created {
            return Err(EtcdError::Closed("the store answered the watch request with something else"));
        }
        Ok(Watch { inbound, start_revision, _requests: requests })
    }
}

/// What a compare-and-swap did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Swap {
    /// The key was as expected and is now written, in this revision.
    Written { revision: i64 },
    /// The key changed since the expected revision: its last change is now `current` (0: it does
    /// not exist). Nothing was written.
    Changed { current: i64 },
}

/// The error a cancelling watch response means.
fn cancelled(response: &pb::WatchResponse, requested: i64) -> EtcdError {
    if response.compact_revision > 0 {
        EtcdError::Compacted { requested, compacted: response.compact_revision }
    } else if response.cancel_reason.is_empty() {
        EtcdError::Cancelled("no reason given".to_owned())
    } else {
        EtcdError::Cancelled(response.cancel_reason.clone())
    }
}

/// A confirmed watch.
#[derive(Debug)]
pub(crate) struct Watch {
    inbound: tonic::Streaming<pb::WatchResponse>,
    start_revision: i64,
    // Kept open: etcd ends the watch when the client closes its side of the stream.
    _requests: mpsc::Sender<pb::WatchRequest>,
}

impl Watch {
    /// The next batch of events; an error when the watch ended for any reason.
    pub(crate) async fn next(&mut self) -> Result<pb::WatchResponse, EtcdError> {
        match self.inbound.message().await {
            Ok(Some(response)) if response.canceled => Err(cancelled(&response, self.start_revision)),
            Ok(Some(response)) => Ok(response),
            Ok(None) => Err(EtcdError::Closed("the store closed the watch stream")),
            Err(status) => Err(status.into()),
        }
    }
}

/// An error with its causes, which tonic's transport errors keep in their source chain.
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let line = cause.to_string();
        if !text.contains(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
        source = cause.source();
    }
    text
}
