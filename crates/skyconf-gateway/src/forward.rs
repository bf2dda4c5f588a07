//! Forwarding one call to the agent connection's OAP, as bytes.
//!
//! The request goes up as it came: method, path, every header (metadata such as
//! `authentication` and `agent-version`, `grpc-timeout`, `grpc-encoding`) and the body stream,
//! frame by frame. The response comes back likewise: status, headers, every message, trailers.
//! Nothing is buffered beyond the HTTP/2 windows: a body is read from one side only when the
//! other side has room for it, so a slow OAP slows the agent down, and what one stream holds in
//! skyconf is bounded by those windows ([`super::connect`]).
//!
//! Failures end the call as the agent would see them had it talked to the OAP directly, and one
//! call's failure never ends another's:
//! - the OAP resets the stream after its response headers reached skyconf: the agent's stream is
//!   reset with the same HTTP/2 code (`INTERNAL_ERROR`, which a gRPC client reports as
//!   INTERNAL);
//! - the OAP resets the stream before that: a trailers-only answer with the status the gRPC spec
//!   gives the HTTP/2 code (`INTERNAL_ERROR` → INTERNAL, `CANCEL` → CANCELLED,
//!   `REFUSED_STREAM` → UNAVAILABLE, ...), the status a client of the OAP would report;
//! - the OAP's answer has a header block (response headers or trailers) over
//!   [`MAX_ANSWER_HEADER_BYTES`], or h2 refuses it for its stream (malformed): that call ends
//!   with INTERNAL and the OAP's stream is cancelled. INTERNAL is what a gRPC client reports for
//!   an answer it cannot take, and it keeps a Java agent's channel (UNAVAILABLE or
//!   RESOURCE_EXHAUSTED would make it reconnect, and nothing is wrong with the connection);
//! - the connection to the OAP is lost (OAP gone, ping unanswered): `UNAVAILABLE`, which makes a
//!   Java agent reconnect, and its next call is pinned to a healthy OAP;
//! - no OAP is reachable at all: `UNAVAILABLE`, after waiting a moment for a connection
//!   ([`super::upstream::CONNECTION_WAIT`]: at start-up the connections are still being made);
//! - no stream to the OAP is free in time, or too many calls wait for one: `DEADLINE_EXCEEDED`
//!   ([`super::admission`]).
//!
//! The agent cancelling its call resets the OAP's stream too: dropping the upstream response
//! resets it with `CANCEL`, and a request body that fails mid-stream does the same.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::Bytes;
use http::{HeaderMap, Request, Response, Uri};
use http_body::Frame;
use tonic::Status;

use super::Agent;
use super::admission::{Stream, Unsent};
use super::identity::IdentityTap;
use super::upstream::{Pin as UpstreamPin, Upstreams};

/// The largest header block of an OAP's answer (its response headers, or its trailers) passed on
/// to the agent, counted as HTTP/2 counts `SETTINGS_MAX_HEADER_LIST_SIZE` (name, value and 32
/// bytes per field). It is the default limit of grpc-java and gRPC C-core clients: a larger
/// block would fail at a Java agent anyway, and beyond 10 KiB the agent's HTTP/2 stack treats it
/// as a connection error and drops every call on the channel. An OAP's answers carry a status,
/// a message and a few metadata entries: well under it.
pub const MAX_ANSWER_HEADER_BYTES: usize = 8 * 1024;

/// What the response headers passed on carry besides the OAP's fields: `:status` and the `date`
/// skyconf's server adds when there is none.
const RESPONSE_PSEUDO_BYTES: usize = ":status".len() + 3 + 32;
const DATE_BYTES: usize = "date".len() + "Thu, 01 Jan 1970 00:00:00 GMT".len() + 32;

/// Forwards calls to the OAPs; the gRPC router's fallback in gateway mode.
#[derive(Debug, Clone)]
pub struct Forwarder {
    upstreams: Arc<Upstreams>,
}

impl Forwarder {
    /// Forwarding to `upstreams` (counting calls there, for the metrics and the admin API).
    pub fn new(upstreams: Arc<Upstreams>) -> Self {
        Self { upstreams }
    }

    /// Forwards one call that came on `agent`'s connection and answers with the OAP's response;
    /// the identity its `ManagementService` calls carry is handed to `agent` in passing.
    pub async fn forward<A: Agent>(&self, request: Request<Body>, agent: Option<A>) -> Response<Body> {
        // A call without a connection record (not through the gRPC port) is pinned on its own.
        let own = UpstreamPin::default();
        let pin = agent.as_ref().and_then(Agent::pin).unwrap_or(&own);
        let stream = match self.upstreams.stream_for(pin).await {
            Ok(stream) => stream,
            Err(unsent) => return status_response(unsent_status(unsent, &self.upstreams)),
        };
        let (mut parts, body) = request.into_parts();
        let body = match (agent, super::identity::call_of(parts.uri.path())) {
            (Some(agent), Some(call)) => {
                let agent_version = parts.headers.get("agent-version").and_then(|v| v.to_str().ok()).map(str::to_owned);
                Body::new(IdentityTap::new(body, call, agent, agent_version))
            }
            _ => body,
        };
        let member = stream.member();
        parts.uri = upstream_uri(&parts.uri, &member.addr, self.upstreams.is_tls());
        // The server's own records (connection info) stay here.
        parts.extensions = http::Extensions::new();
        let mut sender = stream.link().sender();
        let body = stream.link().body(body, stream.clone());
        match sender.send_request(Request::from_parts(parts, body)).await {
            Ok(response) => {
                member.count_forwarded();
                let mut size = header_list_size(response.headers()) + RESPONSE_PSEUDO_BYTES;
                if !response.headers().contains_key(http::header::DATE) {
                    size += DATE_BYTES;
                }
                if size > MAX_ANSWER_HEADER_BYTES {
                    member.count_oversized();
                    tracing::debug!(upstream = %member.addr, size, "The OAP's response headers are too large to pass on; ending the call with INTERNAL.");
                    // Dropping the response cancels the OAP's stream.
                    return status_response(oversized("response headers", size));
                }
                response.map(|body| Body::new(ResponseBody { inner: body, stream, ended: false }))
            }
            Err(error) => {
                let failure = failure(&error);
                if failure == Failure::Refused {
                    member.count_malformed();
                } else {
                    member.count_failed();
                }
                let status = status_before_response(failure, &error);
                tracing::debug!(upstream = %member.addr, %error, code = ?status.code(), "A forwarded call failed before the OAP answered.");
                status_response(status)
            }
        }
    }
}

/// The status of a call that got no stream to an OAP.
fn unsent_status(unsent: Unsent, upstreams: &Upstreams) -> Status {
    let config = upstreams.config();
    match unsent {
        Unsent::NoUpstream | Unsent::Down => Status::unavailable("no OAP is reachable from the gateway"),
        Unsent::Deadline => Status::deadline_exceeded(format!(
            "every stream the OAP allows on {} connections stayed in use for {:?}",
            config.max_connections_per_upstream, config.queue_wait
        )),
        Unsent::Full => Status::deadline_exceeded(format!(
            "every stream the OAP allows on {} connections is in use and {} calls are waiting already",
            config.max_connections_per_upstream, config.max_queued_calls
        )),
    }
}

/// The status of an answer with a header block of `size` bytes.
fn oversized(what: &str, size: usize) -> Status {
    Status::internal(format!(
        "the OAP's {what} ({size} bytes) are over the {MAX_ANSWER_HEADER_BYTES} bytes the gateway passes on"
    ))
}

/// The size of `headers` as HTTP/2 counts a header list.
fn header_list_size(headers: &HeaderMap) -> usize {
    headers.iter().map(|(name, value)| name.as_str().len() + value.len() + 32).sum()
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

/// How a forwarded call's upstream stream failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    /// The OAP reset it (or skyconf did, for the agent), with this code.
    Reset(h2::Reason),
    /// h2 refused what the OAP sent on it (a malformed answer, or a header block over
    /// [`super::connect::MAX_HEADER_LIST_BYTES`]) and reset this stream only.
    Refused,
    /// The connection failed.
    Lost,
}

fn failure(error: &hyper::Error) -> Failure {
    match h2_error(error) {
        Some(e) if e.is_reset() && e.is_library() => Failure::Refused,
        Some(e) if e.is_reset() => e.reason().map_or(Failure::Lost, Failure::Reset),
        _ => Failure::Lost,
    }
}

/// The status of a call whose upstream stream failed before the OAP answered: the gRPC spec's
/// status for an HTTP/2 reset code, and UNAVAILABLE when the connection itself failed.
fn status_before_response(failure: Failure, error: &hyper::Error) -> Status {
    use h2::Reason;
    match failure {
        Failure::Reset(Reason::CANCEL) => Status::cancelled("the OAP cancelled the call"),
        Failure::Reset(Reason::REFUSED_STREAM) => Status::unavailable("the OAP refused the call"),
        Failure::Reset(Reason::ENHANCE_YOUR_CALM) => Status::resource_exhausted("the OAP asked to slow down"),
        Failure::Reset(Reason::INADEQUATE_SECURITY) => {
            Status::permission_denied("the OAP refused the connection's security")
        }
        Failure::Reset(reason) => Status::internal(format!("the OAP reset the call: {reason}")),
        Failure::Refused => Status::internal(format!("the OAP's answer could not be passed on: {error}")),
        Failure::Lost => Status::unavailable(format!("the connection to the OAP failed: {error}")),
    }
}

/// Trailers carrying `status`.
fn status_trailers(status: &Status) -> HeaderMap {
    let mut trailers = HeaderMap::new();
    if status.add_header(&mut trailers).is_err() {
        trailers.insert("grpc-status", http::HeaderValue::from(status.code() as i32));
    }
    trailers
}

/// The OAP's response body on its way back, holding the call's stream: frames pass as they
/// are; a stream reset by the OAP resets the agent's stream with the same code, trailers over
/// [`MAX_ANSWER_HEADER_BYTES`] or refused by h2 end the call with INTERNAL trailers, and a lost
/// connection ends it with UNAVAILABLE trailers.
struct ResponseBody {
    inner: hyper::body::Incoming,
    stream: Stream,
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
                let member = self.stream.member();
                let status = match failure(&error) {
                    // hyper resets the agent's stream with the reason found in the error.
                    Failure::Reset(_) => return Poll::Ready(Some(Err(error))),
                    Failure::Refused => {
                        member.count_malformed();
                        tracing::debug!(upstream = %member.addr, %error, "The OAP's answer broke HTTP/2's rules for its stream; ending the call with INTERNAL.");
                        Status::internal(format!("the OAP's answer could not be passed on: {error}"))
                    }
                    Failure::Lost => {
                        tracing::debug!(upstream = %member.addr, %error, "Lost the OAP in the middle of a forwarded call; ending it with UNAVAILABLE.");
                        Status::unavailable(format!("the connection to the OAP failed: {error}"))
                    }
                };
                Poll::Ready(Some(Ok(Frame::trailers(status_trailers(&status)))))
            }
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(trailers) = frame.trailers_ref() {
                    let size = header_list_size(trailers);
                    if size > MAX_ANSWER_HEADER_BYTES {
                        self.ended = true;
                        let member = self.stream.member();
                        member.count_oversized();
                        tracing::debug!(upstream = %member.addr, size, "The OAP's trailers are too large to pass on; ending the call with INTERNAL.");
                        return Poll::Ready(Some(Ok(Frame::trailers(status_trailers(&oversized("trailers", size))))));
                    }
                }
                Poll::Ready(Some(Ok(frame)))
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

    /// Header blocks are counted as HTTP/2 counts them: name, value and 32 bytes per field.
    #[test]
    fn header_blocks_are_measured_as_http2_measures_them() {
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
        assert_eq!(header_list_size(&trailers), 11 + 1 + 32);
        let big = "a".repeat(MAX_ANSWER_HEADER_BYTES - 44 - 5 - 32);
        trailers.insert("x-big", http::HeaderValue::from_str(&big).unwrap());
        assert_eq!(header_list_size(&trailers), MAX_ANSWER_HEADER_BYTES, "at the bound: passed on");
        let status = status_trailers(&oversized("trailers", MAX_ANSWER_HEADER_BYTES + 1));
        assert_eq!(status["grpc-status"], "13");
        assert!(status["grpc-message"].to_str().unwrap().contains("8193%20bytes"), "{status:?}");
    }

    #[test]
    fn a_status_response_is_trailers_only_grpc() {
        let response = status_response(Status::unavailable("no OAP"));
        assert_eq!(response.status(), http::StatusCode::OK);
        assert_eq!(response.headers()["grpc-status"], "14");
        assert_eq!(response.headers()["content-type"], "application/grpc");
    }
}
