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
//! Calls answered here wait for their request message at most
//! [`GrpcLimits::request_message_timeout`], and only so many may wait at once: in all
//! ([`GrpcLimits::max_pending_streams`]), per source address (a share of that, see
//! [`super::sources`]) and per connection (its stream limit). Each waiting call costs about 10 KB
//! (HTTP/2 stream, request, task), so the bounds bound that memory; a call over one is answered
//! `DEADLINE_EXCEEDED` at once, as if its message had not arrived in time, and counted. An agent
//! sends its message with the headers, so its calls wait microseconds and never meet a bound that
//! another source fills.
//!
//! Admin: request bodies are bounded by the largest document plus an envelope on write routes,
//! and by a few KiB everywhere else (a `GET` carries no body).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use tower_http::limit::RequestBodyLimitLayer;

use super::connections::{Acceptor, Guarded, OpenCall, Opening};
use super::drain::{Drain, keep_until_answered};
use super::metrics::{EdgeMetrics, PendingLimit};
use super::sources::{Bound, default_share, increment_below};
use crate::socket::ConnectionState;

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
    /// Held polls take less than half of them (`crate::HoldOptions`).
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
    /// Calls answered here waiting for their request message at once, in all.
    pub max_pending_streams: usize,
    /// The same from one source address ([`super::sources`]); `None`: a quarter of
    /// [`Self::max_pending_streams`].
    pub max_pending_streams_per_source: Option<usize>,
    /// Which HTTP/2 server serves the port's connections.
    pub http2_server: Http2Server,
}

impl Default for GrpcLimits {
    fn default() -> Self {
        Self {
            max_header_list_bytes: 16 * 1024,
            // An agent has one or two calls open; a proxy that multiplexes many agents (Envoy)
            // opens another connection when one is full, and clients queue the rest.
            max_concurrent_streams: 100,
            keepalive_interval: Some(PING_INTERVAL),
            keepalive_timeout: PING_TIMEOUT,
            tcp_keepalive: Some(Duration::from_secs(60)),
            request_message_timeout: Duration::from_secs(10),
            max_pending_streams: 10_000,
            max_pending_streams_per_source: None,
            http2_server: Http2Server::from_env(),
        }
    }
}

impl GrpcLimits {
    /// The request message deadline and the bounds on calls waiting for their message, as a
    /// layer over the agent port's routes, refusals counted in `metrics` (on the calls answered
    /// here only, when `forwarding`: a forwarded stream's messages come when the agent has them).
    /// Every call is counted open on its connection until its answer ends, and a call still
    /// waiting for its message is answered when `drain`'s shutdown begins ([`super::drain`]). The
    /// HTTP/2 limits are applied by `crate::agent_port::http2`.
    pub fn layer(&self, forwarding: bool, metrics: &EdgeMetrics, drain: &Drain) -> FirstMessageTimeout {
        let pending = PendingStreams::new(self, metrics.clone());
        FirstMessageTimeout { timeout: self.request_message_timeout, forwarding, pending, drain: drain.clone() }
    }

    /// One source's share of the calls waiting for their message: as configured (at most the
    /// bound of all), or a quarter.
    pub fn pending_share(&self) -> usize {
        let max = self.max_pending_streams.max(1);
        self.max_pending_streams_per_source.map_or_else(|| default_share(max), |share| share.clamp(1, max))
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
            let (stream, _, admission) = acceptor.accept().await;
            let _ = stream.set_nodelay(true);
            set_tcp_keepalive(&stream, tcp_keepalive);
            let stream = crate::socket::BatchedWrites::new(stream).with_frame_boundaries();
            Some((Ok(Guarded::new(stream, Opening::Http2, handshake_timeout, admission)), acceptor))
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

/// The calls answered here that wait for their request message: counted, and bounded in all and
/// per source (see the module docs). Cheap to clone.
#[derive(Debug, Clone)]
pub struct PendingStreams {
    count: Arc<AtomicUsize>,
    max: usize,
    per_source: usize,
    metrics: EdgeMetrics,
    /// Whether the bound of all was reached, and logged, since the count was last below half.
    full: Arc<AtomicBool>,
}

impl PendingStreams {
    /// The bounds of `limits`, refusals and the count reported in `metrics`.
    pub fn new(limits: &GrpcLimits, metrics: EdgeMetrics) -> Self {
        let count = Arc::default();
        metrics.watch_pending(&count);
        let (max, per_source) = (limits.max_pending_streams.max(1), limits.pending_share());
        Self { count, max, per_source, metrics, full: Arc::default() }
    }

    /// A place for one more waiting call on `connection`, or the bound that is reached (counted).
    fn take(&self, connection: Option<Arc<ConnectionState>>) -> Result<PendingPlace, PendingLimit> {
        if let Some(source) =
            connection.as_ref().and_then(|c| c.get::<super::connections::EdgeState>().and_then(|e| e.source()))
            && !increment_below(&source.pending_streams, self.per_source)
        {
            source.reached(Bound::PendingStreams, self.per_source);
            self.metrics.stream_refused(PendingLimit::Source);
            return Err(PendingLimit::Source);
        }
        // From here the place holds the source's count, and gives it back if refused.
        let mut place = PendingPlace { count: None, connection };
        if !increment_below(&self.count, self.max) {
            if !self.full.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    bound = self.max,
                    setting = "skyconf.limits.grpcMaxPendingStreams",
                    "The calls waiting for their request message reached their bound; further calls are answered DEADLINE_EXCEEDED at once until some arrive."
                );
            }
            self.metrics.stream_refused(PendingLimit::Total);
            return Err(PendingLimit::Total);
        }
        if self.full.load(Ordering::Relaxed) && self.count.load(Ordering::Relaxed) < self.max / 2 {
            self.full.store(false, Ordering::Relaxed);
        }
        place.count = Some(Arc::clone(&self.count));
        Ok(place)
    }
}

/// One waiting call's place in the bounds of [`PendingStreams`]; given back when dropped (its
/// message arrived, or the call ended).
#[derive(Debug)]
struct PendingPlace {
    count: Option<Arc<AtomicUsize>>,
    connection: Option<Arc<ConnectionState>>,
}

impl Drop for PendingPlace {
    fn drop(&mut self) {
        if let Some(count) = &self.count {
            count.fetch_sub(1, Ordering::Relaxed);
        }
        if let Some(source) =
            self.connection.as_ref().and_then(|c| c.get::<super::connections::EdgeState>().and_then(|e| e.source()))
        {
            source.pending_streams.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// A layer that answers a gRPC call `DEADLINE_EXCEEDED` when its first message (or the end of
/// its request) has not arrived within the timeout after its handler first looked for it, at
/// once when too many calls wait for theirs ([`PendingStreams`]), or when the shutdown begins. A
/// CDS request is a few hundred bytes sent with the headers, so only a stream that is held open
/// on purpose meets either; the stream is answered and closed instead of held.
/// `DEADLINE_EXCEEDED` is not a status that makes an agent drop its channel. Every call,
/// forwarded ones too, is counted open on its connection until its answer ends ([`OpenCall`]).
///
/// The wait is the request body's ([`FirstFrame`]): its timer and its watch of the shutdown are
/// made only when the handler finds the first frame not there yet, so a call whose message came
/// with its headers (every agent's) costs no timer and no waiter.
#[derive(Debug, Clone)]
pub struct FirstMessageTimeout {
    /// How long the first message may take.
    pub timeout: Duration,
    /// Gateway mode: calls that are forwarded are left alone.
    pub forwarding: bool,
    /// The calls waiting for their first message.
    pub pending: PendingStreams,
    /// The shutdown, which answers the calls still waiting.
    pub drain: Drain,
}

impl<S> tower::Layer<S> for FirstMessageTimeout {
    type Service = FirstMessageTimeoutService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        FirstMessageTimeoutService {
            inner,
            timeout: self.timeout,
            forwarding: self.forwarding,
            pending: self.pending.clone(),
            drain: self.drain.clone(),
        }
    }
}

/// The service of [`FirstMessageTimeout`].
#[derive(Debug, Clone)]
pub struct FirstMessageTimeoutService<S> {
    inner: S,
    timeout: Duration,
    forwarding: bool,
    pending: PendingStreams,
    drain: Drain,
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
        let open = OpenCall::of(request.extensions());
        let answered_here = !self.forwarding || skyconf_gateway::is_answered_here(request.uri().path());
        let request = if answered_here {
            let place = match self.pending.take(open.as_ref().map(|open| Arc::clone(open.state()))) {
                Ok(place) => place,
                Err(limit) => {
                    let why = match limit {
                        PendingLimit::Source => "too many calls from this source are waiting for their request message",
                        PendingLimit::Total => "too many calls are waiting for their request message",
                    };
                    return Box::pin(std::future::ready(Ok(tonic::Status::deadline_exceeded(why).into_http())));
                }
            };
            let waiting = Waiting { _place: place, timeout: self.timeout, drain: self.drain.clone(), late: None };
            request.map(|body| tonic::body::Body::new(FirstFrame { inner: body, waiting: Some(waiting) }))
        } else {
            request
        };
        let call = self.inner.call(request);
        Box::pin(async move { Ok(keep_until_answered(call.await?, open)) })
    }
}

/// A request body that gives back its call's place among the waiting calls at its first frame
/// (or its end, or when dropped), and ends with `DEADLINE_EXCEEDED` when that frame is late.
struct FirstFrame {
    inner: tonic::body::Body,
    /// Until the first frame: what bounds the wait for it.
    waiting: Option<Waiting>,
}

/// A call's wait for its first frame: its place among the waiting calls, and, once the handler
/// found the frame not there yet, the deadline and the shutdown's start it waits against.
struct Waiting {
    _place: PendingPlace,
    timeout: Duration,
    drain: Drain,
    late: Option<Late>,
}

/// A late first frame's deadline and the shutdown's start, whichever comes first.
struct Late {
    expired: std::pin::Pin<Box<tokio::time::Sleep>>,
    shutdown: std::pin::Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>,
}

impl Late {
    /// Why the call is answered now, once it is.
    fn poll(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<&'static str> {
        if self.expired.as_mut().poll(cx).is_ready() {
            return std::task::Poll::Ready("the request message did not arrive in time");
        }
        self.shutdown.as_mut().poll(cx).map(|()| "the server is shutting down")
    }
}

impl http_body::Body for FirstFrame {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        let polled = http_body::Body::poll_frame(std::pin::Pin::new(&mut this.inner), cx);
        let Some(waiting) = &mut this.waiting else { return polled };
        if polled.is_ready() {
            // The place is given back: the message (or the request's end) is here.
            this.waiting = None;
            return polled;
        }
        let (timeout, drain) = (waiting.timeout, &waiting.drain);
        let late = waiting.late.get_or_insert_with(|| Late {
            expired: Box::pin(tokio::time::sleep(timeout)),
            shutdown: Box::pin(drain.begun()),
        });
        match late.poll(cx) {
            std::task::Poll::Ready(why) => {
                this.waiting = None;
                std::task::Poll::Ready(Some(Err(tonic::Status::deadline_exceeded(why))))
            }
            std::task::Poll::Pending => std::task::Poll::Pending,
        }
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

/// The environment variable that chooses the agent port's default HTTP/2 server (`hyper` or
/// `own`), so that a whole test run can be served by either without a settings change.
pub const SERVER_ENV: &str = "SKYCONF_AGENT_HTTP2";

/// Which HTTP/2 server serves the agent port (`hyper` or `own` in a settings file).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Http2Server {
    /// hyper and h2 (`crate::agent_port::http2::builder`).
    Hyper,
    /// skyconf's own (`skyconf_h2`): no buffer kept per idle connection.
    #[default]
    Own,
}

impl Http2Server {
    /// The server [`SERVER_ENV`] names; the own server when it names none (or one not known, logged).
    pub fn from_env() -> Self {
        match std::env::var(SERVER_ENV) {
            Ok(value) => value.parse().unwrap_or_else(|error| {
                tracing::warn!(%error, "Ignoring {SERVER_ENV}.");
                Self::default()
            }),
            Err(_) => Self::default(),
        }
    }
}

impl std::str::FromStr for Http2Server {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "hyper" => Ok(Self::Hyper),
            "own" => Ok(Self::Own),
            other => Err(format!("unknown HTTP/2 server `{other}` (hyper or own)")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_is_named_hyper_or_own() {
        assert_eq!("hyper".parse::<Http2Server>(), Ok(Http2Server::Hyper));
        assert_eq!("own".parse::<Http2Server>(), Ok(Http2Server::Own));
        assert!("h2".parse::<Http2Server>().is_err());
        assert_eq!(Http2Server::default(), Http2Server::Own, "the own server is the default");
    }

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
