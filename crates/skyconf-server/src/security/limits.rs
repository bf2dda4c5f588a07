//! Limits: what one connection or request may cost the server.
//!
//! gRPC, besides the 64 KiB CDS message limit (`crate::cds::MAX_REQUEST_BYTES`, answered with
//! `OUT_OF_RANGE`): the HTTP/2 header list size, concurrent streams per connection, and
//! keep-alive pings that find dead peers. None of them can answer an agent's call with a status
//! that drops its channel: a client keeps to the advertised stream limit by queueing its calls
//! (grpc-java, grpc-go and tonic all do), and the header limit is far above anything an agent
//! sends (a few hundred bytes of metadata). A header block over it is answered with HTTP 431,
//! which gRPC clients report as UNKNOWN: such a request is not from an agent.
//!
//! Admin: request bodies are bounded by the largest document plus an envelope on write routes,
//! and by a few KiB everywhere else (a `GET` carries no body).

use std::time::Duration;

use axum::Router;
use tower_http::limit::RequestBodyLimitLayer;

use super::connections::{Acceptor, Guarded, Opening};

/// How long an agent connection may be idle (nothing read from it) before the server sends an
/// HTTP/2 PING. A held poll leaves its connection idle for up to 28 s, so a live agent is pinged
/// about once per hold; a silent peer (a partition: no FIN, no RST) is found by this.
pub const PING_INTERVAL: Duration = Duration::from_secs(20);

/// How long a PING may go unanswered before the server closes the connection: a partitioned
/// agent's connection, and with it its fleet rows and identity, ends within
/// `PING_INTERVAL + PING_TIMEOUT` (30 s) of the partition.
pub const PING_TIMEOUT: Duration = Duration::from_secs(10);

/// HTTP/2 limits of the gRPC port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrpcLimits {
    /// The largest header block (HTTP/2 `SETTINGS_MAX_HEADER_LIST_SIZE`), in bytes.
    pub max_header_list_bytes: u32,
    /// Concurrent calls per connection (`SETTINGS_MAX_CONCURRENT_STREAMS`); clients queue the rest.
    pub max_concurrent_streams: u32,
    /// How often an idle connection is pinged; `None`: never.
    pub keepalive_interval: Option<Duration>,
    /// How long a ping may go unanswered before the connection is closed.
    pub keepalive_timeout: Duration,
    /// TCP keep-alive on accepted sockets; `None`: off.
    pub tcp_keepalive: Option<Duration>,
    /// How long a call's request message may take to arrive after its headers
    /// ([`FirstMessageTimeout`]).
    pub request_message_timeout: Duration,
}

impl Default for GrpcLimits {
    fn default() -> Self {
        Self {
            max_header_list_bytes: 16 * 1024,
            // Proxies such as Envoy multiplex many agents onto few connections.
            max_concurrent_streams: 1024,
            keepalive_interval: Some(PING_INTERVAL),
            keepalive_timeout: PING_TIMEOUT,
            tcp_keepalive: Some(Duration::from_secs(60)),
            request_message_timeout: Duration::from_secs(10),
        }
    }
}

impl GrpcLimits {
    /// `server` with the HTTP/2 limits and the request message deadline (on the calls answered
    /// here only, when `forwarding`: a forwarded stream's messages come when the agent has them).
    pub fn apply<L>(
        &self,
        server: tonic::transport::Server<L>,
        forwarding: bool,
    ) -> tonic::transport::Server<tower::layer::util::Stack<FirstMessageTimeout, L>> {
        server
            .http2_max_header_list_size(self.max_header_list_bytes)
            .max_concurrent_streams(self.max_concurrent_streams)
            .http2_keepalive_interval(self.keepalive_interval)
            .http2_keepalive_timeout(Some(self.keepalive_timeout))
            .layer(FirstMessageTimeout { timeout: self.request_message_timeout, forwarding })
    }

    /// The accepted sockets of `acceptor` (capped, backing off on accept errors), with TCP
    /// keep-alive and no Nagle delay, each wrapped so that h2 batches small answers into shared
    /// writes ([`crate::socket`]) and closed unless its HTTP/2 preface arrives within
    /// `handshake_timeout` ([`super::connections`]).
    pub fn incoming(
        &self,
        acceptor: Acceptor,
        handshake_timeout: Duration,
    ) -> impl futures_util::Stream<Item = std::io::Result<Guarded<crate::socket::BatchedWrites>>> + use<> {
        let tcp_keepalive = self.tcp_keepalive;
        futures_util::stream::unfold(acceptor, move |mut acceptor| async move {
            let (stream, _, permit) = acceptor.accept().await;
            let _ = stream.set_nodelay(true);
            set_tcp_keepalive(&stream, tcp_keepalive);
            let stream = crate::socket::BatchedWrites::new(stream).with_frame_boundaries();
            Some((Ok(Guarded::new(stream, Opening::Http2, handshake_timeout, permit)), acceptor))
        })
    }

    /// [`Self::incoming`] over TLS: each handshake in its own task ([`super::tls::handshakes`]),
    /// then the HTTP/2 preface must arrive, above TLS, within `handshake_timeout`.
    pub fn incoming_tls(
        &self,
        acceptor: Acceptor,
        config: std::sync::Arc<tokio_rustls::rustls::ServerConfig>,
        handshake_timeout: Duration,
    ) -> impl futures_util::Stream<
        Item = std::io::Result<Guarded<tokio_rustls::server::TlsStream<crate::socket::BatchedWrites>>>,
    > + use<> {
        let tcp_keepalive = self.tcp_keepalive;
        let prepare = move |stream: tokio::net::TcpStream| {
            set_tcp_keepalive(&stream, tcp_keepalive);
            crate::socket::BatchedWrites::new(stream)
        };
        let (accepted, _accepting) =
            super::tls::handshakes(acceptor, config, Opening::Http2, handshake_timeout, prepare, "gRPC");
        // The accept loop ends by itself once this stream (the receiver) is dropped.
        futures_util::stream::unfold(accepted, |mut accepted| async move {
            let (stream, _) = accepted.recv().await?;
            Some((Ok(stream), accepted))
        })
    }
}

fn set_tcp_keepalive(stream: &tokio::net::TcpStream, time: Option<Duration>) {
    if let Some(time) = time {
        let keepalive = socket2::TcpKeepalive::new().with_time(time);
        let _ = socket2::SockRef::from(stream).set_tcp_keepalive(&keepalive);
    }
}

/// A layer that answers a gRPC call `DEADLINE_EXCEEDED` when its first message (or the end of
/// its request) has not arrived within the timeout after its headers. A CDS request is a few
/// hundred bytes sent with the headers, so only a stream that is held open on purpose meets it;
/// the stream is answered and closed instead of held. `DEADLINE_EXCEEDED` is not a status that
/// makes an agent drop its channel.
#[derive(Debug, Clone, Copy)]
pub struct FirstMessageTimeout {
    /// How long the first message may take.
    pub timeout: Duration,
    /// Gateway mode: calls that are forwarded are left alone.
    pub forwarding: bool,
}

impl<S> tower::Layer<S> for FirstMessageTimeout {
    type Service = FirstMessageTimeoutService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        FirstMessageTimeoutService { inner, timeout: self.timeout, forwarding: self.forwarding }
    }
}

/// The service of [`FirstMessageTimeout`].
#[derive(Debug, Clone)]
pub struct FirstMessageTimeoutService<S> {
    inner: S,
    timeout: Duration,
    forwarding: bool,
}

type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

impl<S> tower::Service<http::Request<tonic::body::Body>> for FirstMessageTimeoutService<S>
where
    S: tower::Service<http::Request<tonic::body::Body>, Response = http::Response<tonic::body::Body>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        if self.forwarding && !crate::gateway::is_answered_here(request.uri().path()) {
            return Box::pin(self.inner.call(request));
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let request = request.map(|body| tonic::body::Body::new(FirstFrame { inner: body, arrived: Some(tx) }));
        let call = self.inner.call(request);
        let timeout = self.timeout;
        Box::pin(async move {
            let mut call = std::pin::pin!(call);
            tokio::select! {
                answer = &mut call => answer,
                waited = tokio::time::timeout(timeout, rx) => match waited {
                    // The message arrived, or the handler is done with the body.
                    Ok(_) => call.await,
                    Err(_) => Ok(tonic::Status::deadline_exceeded("the request message did not arrive in time").into_http()),
                },
            }
        })
    }
}

/// A request body that reports its first frame (or its end, or being dropped).
struct FirstFrame {
    inner: tonic::body::Body,
    arrived: Option<tokio::sync::oneshot::Sender<()>>,
}

impl http_body::Body for FirstFrame {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let polled = http_body::Body::poll_frame(std::pin::Pin::new(&mut self.inner), cx);
        if polled.is_ready()
            && let Some(arrived) = self.arrived.take()
        {
            let _ = arrived.send(());
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        http_body::Body::is_end_stream(&self.inner)
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::Body::size_hint(&self.inner)
    }
}

/// The body limit of admin routes that take no document.
pub const ADMIN_SMALL_BODY_BYTES: usize = 16 * 1024;

/// Room for a JSON envelope around the largest document.
pub const ADMIN_ENVELOPE_BYTES: usize = 64 * 1024;

/// The body limit of write routes for documents up to `max_document_bytes`.
pub fn admin_write_body_bytes(max_document_bytes: usize) -> usize {
    max_document_bytes.saturating_add(ADMIN_ENVELOPE_BYTES)
}

/// `router` refusing bodies over `bytes` with 413, before a handler reads them.
pub fn limit_body(router: Router, bytes: usize) -> Router {
    router.layer(RequestBodyLimitLayer::new(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fleet view's bound for a partitioned agent (PING_INTERVAL + PING_TIMEOUT, 30 s) rests
    /// on these defaults.
    #[test]
    fn an_idle_agent_connection_is_pinged_after_20_s_and_closed_10_s_later_without_an_answer() {
        let limits = GrpcLimits::default();
        assert_eq!(limits.keepalive_interval, Some(Duration::from_secs(20)));
        assert_eq!(limits.keepalive_timeout, Duration::from_secs(10));
        assert_eq!((PING_INTERVAL, PING_TIMEOUT), (Duration::from_secs(20), Duration::from_secs(10)));
    }
}
