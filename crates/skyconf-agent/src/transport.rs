//! How a poll reaches the server: the [`Transport`] trait, and [`GrpcTransport`], the tonic
//! client every real deployment uses. Tests substitute an in-memory transport, which lets the poll
//! loop run under paused tokio time.
//!
//! A transport also carries the instance's `ManagementService` calls (see [`crate::identity`]);
//! [`GrpcTransport`] sends them on the channel its polls use, so on the same connection.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use skyconf_proto::v3::configuration_discovery_service_client::ConfigurationDiscoveryServiceClient;
use skyconf_proto::v3::management_service_client::ManagementServiceClient;
use skyconf_proto::v3::{Commands, ConfigurationSyncRequest, InstancePingPkg, InstanceProperties};
use tonic::Code;
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint};

use crate::AgentError;

/// The metadata key the OAP checks when `receiver-sharing-server.default.authentication` is set.
pub const AUTHENTICATION_METADATA: &str = "authentication";

/// The metadata key that carries the agent's version on every call (the Java agent sends its
/// own; the OAP and skyconf show it per instance).
pub const AGENT_VERSION_METADATA: &str = "agent-version";

/// One `fetchConfigurations` call, and the `ManagementService` calls of a named instance.
pub trait Transport: Send + 'static {
    /// Sends `request` and returns the server's answer. `timeout` is the call's deadline; the
    /// agent also enforces it, so an implementation may ignore it.
    fn fetch(
        &mut self,
        request: ConfigurationSyncRequest,
        timeout: Duration,
    ) -> impl Future<Output = Result<Commands, tonic::Status>> + Send;

    /// Sends `reportInstanceProperties`, on the same connection as [`Self::fetch`] where the
    /// transport has connections. The answer's commands are not used (an OAP sends none). By
    /// default: `UNIMPLEMENTED`, for a transport that only polls.
    fn report_instance_properties(
        &mut self,
        properties: InstanceProperties,
        timeout: Duration,
    ) -> impl Future<Output = Result<(), tonic::Status>> + Send {
        let _ = (properties, timeout);
        async { Err(tonic::Status::unimplemented("this transport does not carry ManagementService")) }
    }

    /// Sends `keepAlive`, as [`Self::report_instance_properties`] does.
    fn keep_alive(
        &mut self,
        ping: InstancePingPkg,
        timeout: Duration,
    ) -> impl Future<Output = Result<(), tonic::Status>> + Send {
        let _ = (ping, timeout);
        async { Err(tonic::Status::unimplemented("this transport does not carry ManagementService")) }
    }
}

/// Why a poll got no answer. The agent keeps every current value and its uuid in all cases.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PollError {
    /// The server answered with an error status, or could not be reached (`UNAVAILABLE`).
    #[error("{}", describe_status(.0))]
    Status(tonic::Status),
    /// No answer within the deadline.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// A status the server sent is "the server answered"; one the channel made up because it could
/// not reach the server (`UNAVAILABLE` carrying the connection error as its source) is not.
fn describe_status(status: &tonic::Status) -> String {
    if status.code() == Code::Unavailable
        && let Some(cause) = std::error::Error::source(status)
    {
        // The causes say what failed (`tcp connect error: Connection refused`), each once.
        let mut text = format!("cannot reach the server: {}", status.message());
        for cause in std::iter::successors(Some(cause), |e| e.source()) {
            let message = cause.to_string();
            // tonic's own wrapper says only "transport error"; its causes say which.
            if message != "transport error" && !text.contains(&message) {
                text.push_str(": ");
                text.push_str(&message);
            }
        }
        text
    } else {
        format!("the server answered {}: {}", status.code(), status.message())
    }
}

impl PollError {
    /// The gRPC status code (`DEADLINE_EXCEEDED` for a timeout).
    pub fn code(&self) -> Code {
        match self {
            Self::Status(status) => status.code(),
            Self::Timeout(_) => Code::DeadlineExceeded,
        }
    }

    /// True when the call did not get through: no answer within the deadline, or a failure the
    /// channel made up because the server could not be reached (a connection refused, or lost
    /// under the call). Not a refusal by the server.
    pub fn is_unreachable(&self) -> bool {
        match self {
            Self::Timeout(_) => true,
            Self::Status(status) => status.code() == Code::Unavailable && std::error::Error::source(status).is_some(),
        }
    }

    /// True when the failure says something is set up wrong rather than temporarily down: the
    /// server has no configuration discovery (`UNIMPLEMENTED`), refuses our token
    /// (`UNAUTHENTICATED`, `PERMISSION_DENIED`) or our request (`INVALID_ARGUMENT`,
    /// `OUT_OF_RANGE`, `FAILED_PRECONDITION`). Such failures are logged at WARN level; the others
    /// (a server that is down, slow or overloaded) at INFO after the first.
    pub fn is_misconfiguration(&self) -> bool {
        matches!(
            self.code(),
            Code::Unimplemented
                | Code::Unauthenticated
                | Code::PermissionDenied
                | Code::InvalidArgument
                | Code::OutOfRange
                | Code::FailedPrecondition
        )
    }
}

/// The tonic client: a lazily connected channel that reconnects on its own after a server
/// restart, and the `authentication` metadata the OAP expects when it checks a token. Polls and
/// `ManagementService` calls share the channel, so they share its connection.
#[derive(Debug, Clone)]
pub struct GrpcTransport {
    client: ConfigurationDiscoveryServiceClient<Channel>,
    management: ManagementServiceClient<Channel>,
    token: Option<MetadataValue<tonic::metadata::Ascii>>,
    agent_version: Option<MetadataValue<tonic::metadata::Ascii>>,
}

impl GrpcTransport {
    /// A transport to `addr` (`host:port`, or a `http://` / `https://` URI). Nothing is
    /// connected until the first poll, so a server that is not up yet is not an error. Call it
    /// inside a tokio runtime: the channel spawns its worker task.
    pub fn lazy(addr: &str) -> Result<Self, AgentError> {
        let uri = if addr.contains("://") { addr.to_owned() } else { format!("http://{addr}") };
        let endpoint = Endpoint::from_shared(uri)
            .map_err(|source| AgentError::InvalidAddress { addr: addr.to_owned(), source })?;
        Ok(Self::from_channel(endpoint.connect_timeout(Duration::from_secs(10)).tcp_nodelay(true).connect_lazy()))
    }

    /// A transport over a channel the service already has (TLS, a shared connection).
    pub fn from_channel(channel: Channel) -> Self {
        Self {
            management: ManagementServiceClient::new(channel.clone()),
            client: ConfigurationDiscoveryServiceClient::new(channel),
            token: None,
            agent_version: None,
        }
    }

    /// A request with the call's deadline (sent as `grpc-timeout`, so the server can give up
    /// too), the token and the agent's version.
    fn request<M>(&self, message: M, timeout: Duration) -> tonic::Request<M> {
        let mut request = tonic::Request::new(message);
        request.set_timeout(timeout);
        if let Some(token) = &self.token {
            request.metadata_mut().insert(AUTHENTICATION_METADATA, token.clone());
        }
        if let Some(version) = &self.agent_version {
            request.metadata_mut().insert(AGENT_VERSION_METADATA, version.clone());
        }
        request
    }

    /// Sends `version` as the `agent-version` metadata on every call, as the Java agent sends
    /// its own version.
    pub fn with_agent_version(mut self, version: &str) -> Result<Self, AgentError> {
        self.agent_version = Some(version.parse().map_err(|_| AgentError::InvalidAgentVersion)?);
        Ok(self)
    }

    /// Sends `token` as the `authentication` metadata on every call, as the Java agent does with
    /// `agent.authentication`.
    pub fn with_authentication(mut self, token: &str) -> Result<Self, AgentError> {
        self.token = Some(token.parse().map_err(|_| AgentError::InvalidToken)?);
        Ok(self)
    }
}

impl Transport for GrpcTransport {
    async fn fetch(&mut self, request: ConfigurationSyncRequest, timeout: Duration) -> Result<Commands, tonic::Status> {
        let request = self.request(request, timeout);
        match self.client.fetch_configurations(request).await {
            Ok(response) => Ok(response.into_inner()),
            Err(status) => Err(local_failure_as_unavailable(status)),
        }
    }

    async fn report_instance_properties(
        &mut self,
        properties: InstanceProperties,
        timeout: Duration,
    ) -> Result<(), tonic::Status> {
        let request = self.request(properties, timeout);
        self.management.report_instance_properties(request).await.map(drop).map_err(local_failure_as_unavailable)
    }

    async fn keep_alive(&mut self, ping: InstancePingPkg, timeout: Duration) -> Result<(), tonic::Status> {
        let request = self.request(ping, timeout);
        self.management.keep_alive(request).await.map(drop).map_err(local_failure_as_unavailable)
    }
}

/// tonic reports a connection that broke under a call (a server killed mid-connection) as
/// `UNKNOWN: transport error`, or `CANCELLED: operation was canceled` when the connection closed
/// with the call in flight. A status that came over the wire never carries a source error, so one
/// that does is a local transport failure: the server is unreachable, which gRPC calls
/// `UNAVAILABLE`. The cause stays the status's source, so the error says what failed.
fn local_failure_as_unavailable(status: tonic::Status) -> tonic::Status {
    let Some(source) = std::error::Error::source(&status) else { return status };
    if !matches!(status.code(), Code::Unknown | Code::Cancelled) {
        return status;
    }
    let mut causes: Vec<String> = Vec::new();
    for cause in std::iter::successors(Some(source), |e| e.source()) {
        let message = cause.to_string();
        if !causes.iter().any(|c| c.contains(&message)) {
            causes.push(message);
        }
    }
    let mut local = tonic::Status::unavailable(format!("connection lost: {}", status.message()));
    local.set_source(Arc::new(Cause(causes.join(": "))));
    local
}

/// A transport failure's text, kept as the source of the status that reports it.
#[derive(Debug)]
struct Cause(String);

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Cause {}

#[cfg(test)]
mod tests {
    use super::*;

    // Building a channel spawns its worker, hence the runtime.
    #[tokio::test]
    async fn addresses_with_and_without_scheme() {
        assert!(GrpcTransport::lazy("127.0.0.1:11800").is_ok());
        assert!(GrpcTransport::lazy("http://oap:11800").is_ok());
        assert!(matches!(GrpcTransport::lazy("not a uri"), Err(AgentError::InvalidAddress { .. })));
    }

    #[tokio::test]
    async fn tokens_must_be_ascii_metadata() {
        let t = GrpcTransport::lazy("127.0.0.1:1").unwrap();
        assert!(t.clone().with_authentication("secret").is_ok());
        assert!(matches!(t.clone().with_authentication("bad\nvalue"), Err(AgentError::InvalidToken)));
        assert!(t.clone().with_agent_version("9.4.0").is_ok());
        assert!(matches!(t.with_agent_version("bad\nvalue"), Err(AgentError::InvalidAgentVersion)));
    }

    #[test]
    fn local_transport_failures_read_as_unavailable() {
        let local = tonic::Status::from_error(Box::new(std::io::Error::other("reset")));
        assert_eq!(local.code(), Code::Unknown);
        let unavailable = local_failure_as_unavailable(local);
        assert_eq!(unavailable.code(), Code::Unavailable);
        assert!(PollError::Status(unavailable.clone()).is_unreachable());
        assert!(PollError::Status(unavailable).to_string().starts_with("cannot reach the server: "));
        let remote = tonic::Status::unknown("the server says so");
        assert_eq!(local_failure_as_unavailable(remote).code(), Code::Unknown);
        // Usability finding 13: a connection closed under the call read "the server answered
        // The operation was cancelled"; the server said nothing.
        let mut cancelled = tonic::Status::cancelled("operation was canceled");
        cancelled.set_source(Arc::new(std::io::Error::other("connection closed")));
        let unreachable = PollError::Status(local_failure_as_unavailable(cancelled));
        assert!(unreachable.is_unreachable(), "{unreachable}");
        assert!(unreachable.to_string().contains("connection closed"), "{unreachable}");
        assert!(!PollError::Status(tonic::Status::cancelled("the server says so")).is_unreachable());
        assert!(!PollError::Status(tonic::Status::permission_denied("no")).is_unreachable());
    }

    #[test]
    fn timeouts_read_as_deadline_exceeded() {
        let e = PollError::Timeout(Duration::from_secs(30));
        assert_eq!(e.code(), Code::DeadlineExceeded);
        assert!(!e.is_misconfiguration());
        assert!(PollError::Status(tonic::Status::unimplemented("x")).is_misconfiguration());
    }
}
