//! Forwarding one call to the agent connection's OAP, as bytes.
//!
//! The request goes up as it came: method, path, every header (metadata such as
//! `authentication` and `agent-version`, `grpc-timeout`, `grpc-encoding`) and the body stream,
//! frame by frame. The response comes back likewise: status, headers, every message, trailers.
//! Nothing is buffered beyond the HTTP/2 windows: a body is read from one side only when the
//! other side has room for it, so a slow OAP slows the agent down, and what one stream holds in
//! skyconf is bounded by those windows ([`super::upstream`]).
//!
//! Failures end the call as the agent would see them had it talked to the OAP directly:
//! - the OAP resets the stream: the agent's stream is reset with the same HTTP/2 code;
//! - the connection to the OAP is lost (OAP gone, ping unanswered): `UNAVAILABLE`, which makes a
//!   Java agent reconnect — and its next call is pinned to a healthy OAP;
//! - no OAP is reachable at all: `UNAVAILABLE`, after waiting a moment for a connection
//!   ([`super::upstream::CONNECTION_WAIT`]: at start-up the connections are still being made);
//! - a reset or loss before the OAP answered: the status the gRPC spec gives the HTTP/2 code
//!   (`CANCEL` → CANCELLED, `REFUSED_STREAM` → UNAVAILABLE, ...).
//!
//! The agent cancelling its call resets the OAP's stream too: dropping the upstream response
//! resets it with `CANCEL`, and a request body that fails mid-stream does the same.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::Bytes;
use http::{Request, Response, Uri};
use http_body::Frame;
use tonic::Status;

use super::identity::IdentityTap;
use super::upstream::Upstreams;
use crate::fleet::Fleet;
use crate::metrics::GatewayMetrics;

/// Forwards calls to the OAPs; the gRPC router's fallback in gateway mode.
#[derive(Debug, Clone)]
pub struct Forwarder {
    upstreams: Arc<Upstreams>,
    fleet: Option<Arc<Fleet>>,
    metrics: GatewayMetrics,
}

impl Forwarder {
    /// Forwarding to `upstreams`.
    pub fn new(upstreams: Arc<Upstreams>) -> Self {
        Self { upstreams, fleet: None, metrics: GatewayMetrics::default() }
    }

    /// Records the instance identity of `ManagementService` calls that pass in `fleet`.
    pub fn with_fleet(mut self, fleet: Arc<Fleet>) -> Self {
        self.fleet = Some(fleet);
        self
    }

    /// Counts forwarded calls in `metrics`.
    pub fn with_metrics(mut self, metrics: GatewayMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Forwards one call and answers with the OAP's response.
    pub async fn forward(&self, request: Request<Body>) -> Response<Body> {
        let agent = crate::socket::connection_of(request.extensions()).cloned();
        // A call without a connection record (not through the gRPC port) is pinned on its own.
        let state = agent.as_ref().map_or_else(Arc::default, |c| Arc::clone(&c.state));
        let Some((mut connection, member)) = self.upstreams.wait_for_connection(&state.pin).await else {
            self.metrics.no_upstream();
            return status_response(Status::unavailable("no OAP is reachable from the gateway"));
        };
        let (mut parts, body) = request.into_parts();
        let caller = agent.as_ref().map(|c| crate::fleet::Caller::Connection(Arc::clone(&c.state)));
        let body = match (&self.fleet, caller, super::identity::call_of(parts.uri.path())) {
            (Some(fleet), Some(caller), Some(call)) => {
                let agent_version = parts.headers.get("agent-version").and_then(|v| v.to_str().ok()).map(str::to_owned);
                Body::new(IdentityTap::new(body, call, caller, agent_version, Arc::clone(fleet)))
            }
            _ => body,
        };
        parts.uri = upstream_uri(&parts.uri, &member.addr, self.upstreams.is_tls());
        // The server's own records (connection info) stay here.
        parts.extensions = http::Extensions::new();
        let upstream = member.addr.as_str();
        let body = connection.body(body);
        match connection.sender.send_request(Request::from_parts(parts, body)).await {
            Ok(response) => {
                self.metrics.forwarded(upstream);
                response
                    .map(|body| Body::new(ResponseBody { inner: body, upstream: upstream.to_owned(), ended: false }))
            }
            Err(error) => {
                let status = status_before_response(&error);
                self.metrics.failed(upstream);
                tracing::debug!(upstream, %error, code = ?status.code(), "A forwarded call failed before the OAP answered.");
                status_response(status)
            }
        }
    }
}

/// The request's path on the OAP: same path and query, the OAP's scheme. The authority the
/// agent sent is kept (it is a header like any other to the OAP); without one, the OAP's.
fn upstream_uri(uri: &Uri, upstream: &str, tls: bool) -> Uri {
    let mut parts = uri.clone().into_parts();
    parts.scheme = Some(if tls { http::uri::Scheme::HTTPS } else { http::uri::Scheme::HTTP });
    if parts.authority.is_none() {
        parts.authority = upstream.parse().ok();
    }
    if parts.path_and_query.is_none() {
        parts.path_and_query = Some(http::uri::PathAndQuery::from_static("/"));
    }
    Uri::from_parts(parts).unwrap_or_else(|_| uri.clone())
}

/// A trailers-only gRPC response carrying `status`.
fn status_response(status: Status) -> Response<Body> {
    status.into_http()
}

/// The HTTP/2 error in `error`'s chain, if any.
fn h2_error<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a h2::Error> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(h2) = e.downcast_ref::<h2::Error>() {
            return Some(h2);
        }
        next = e.source();
    }
    None
}

/// The status of a call whose upstream stream failed before the OAP answered: the gRPC spec's
/// status for an HTTP/2 reset code, and UNAVAILABLE when the connection itself failed.
fn status_before_response(error: &hyper::Error) -> Status {
    use h2::Reason;
    let reset = h2_error(error).filter(|e| e.is_reset() && e.is_remote()).and_then(h2::Error::reason);
    match reset {
        Some(Reason::CANCEL) => Status::cancelled("the OAP cancelled the call"),
        Some(Reason::REFUSED_STREAM) => Status::unavailable("the OAP refused the call"),
        Some(Reason::ENHANCE_YOUR_CALM) => Status::resource_exhausted("the OAP asked to slow down"),
        Some(Reason::INADEQUATE_SECURITY) => Status::permission_denied("the OAP refused the connection's security"),
        Some(reason) => Status::internal(format!("the OAP reset the call: {reason}")),
        None => Status::unavailable(format!("the connection to the OAP failed: {error}")),
    }
}

/// The OAP's response body on its way back: frames pass as they are; a stream reset by the OAP
/// resets the agent's stream with the same code, and a lost connection ends the call with
/// UNAVAILABLE trailers.
struct ResponseBody {
    inner: hyper::body::Incoming,
    upstream: String,
    ended: bool,
}

impl http_body::Body for ResponseBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Err(error))) => {
                self.ended = true;
                if h2_error(&error).is_some_and(|e| e.is_reset() && e.is_remote()) {
                    // hyper resets the agent's stream with the reason found in the error.
                    return Poll::Ready(Some(Err(error)));
                }
                tracing::debug!(upstream = %self.upstream, %error, "Lost the OAP in the middle of a forwarded call; ending it with UNAVAILABLE.");
                let status = Status::unavailable(format!("the connection to the OAP failed: {error}"));
                let mut trailers = http::HeaderMap::new();
                if status.add_header(&mut trailers).is_err() {
                    trailers.insert("grpc-status", http::HeaderValue::from_static("14"));
                }
                Poll::Ready(Some(Ok(Frame::trailers(trailers))))
            }
            polled => polled,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        // Never exact: hyper would add a `content-length` the OAP did not send (and to a
        // trailers-only answer, which gRPC clients then read as a trailer).
        http_body::SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_upstream_uri_keeps_path_query_and_authority_and_takes_the_oaps_scheme() {
        let uri: Uri = "http://skyconf:11800/skywalking.v3.TraceSegmentReportService/collect".parse().unwrap();
        let up = upstream_uri(&uri, "oap:11800", true);
        assert_eq!(up.to_string(), "https://skyconf:11800/skywalking.v3.TraceSegmentReportService/collect");
        let bare: Uri = "/foo.Bar/baz?x=1".parse().unwrap();
        assert_eq!(upstream_uri(&bare, "oap:11800", false).to_string(), "http://oap:11800/foo.Bar/baz?x=1");
    }

    #[test]
    fn a_status_response_is_trailers_only_grpc() {
        let response = status_response(Status::unavailable("no OAP"));
        assert_eq!(response.status(), http::StatusCode::OK);
        assert_eq!(response.headers()["grpc-status"], "14");
        assert_eq!(response.headers()["content-type"], "application/grpc");
    }
}
