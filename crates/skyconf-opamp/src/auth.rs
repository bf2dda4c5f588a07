//! [`Authorize`]: the host's check of who may talk to the server, run on every request of both
//! transports before anything else — before a plain HTTP body is read, before a WebSocket is
//! upgraded. The spec leaves authentication to HTTP (its "Security" section: a `401` for a
//! client whose credentials the server refuses); the check sees the request's headers only.
//!
//! A refused request is answered `401 Unauthorized` with `WWW-Authenticate: Bearer` and a
//! `ServerToAgent` body whose `BAD_REQUEST` error says why; a refused WebSocket upgrade is
//! that same answer instead of `101 Switching Protocols`, so no connection is opened.

use std::fmt;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode, header};

use crate::codec;
use crate::server::{Counters, Opamp};
use crate::session;

/// Why a request is refused; the text is sent to the client, so it names no secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    /// What is wrong, for the client (`the Authorization header is missing`).
    pub reason: &'static str,
}

/// Who may talk to the server.
pub trait Authorize: Send + Sync + fmt::Debug + 'static {
    /// `Ok` lets the request through; `Err` answers it 401.
    fn authorize(&self, headers: &HeaderMap) -> Result<(), Denied>;
}

/// The middleware of [`Opamp::router`] when [`crate::OpampConfig::authorize`] is set.
pub(crate) async fn check(
    State((opamp, check)): State<(Opamp, Arc<dyn Authorize>)>,
    request: Request,
    next: Next,
) -> Response {
    match check.authorize(request.headers()) {
        Ok(()) => next.run(request).await,
        Err(denied) => {
            Counters::add(&opamp.inner.counters.unauthorized);
            tracing::debug!(reason = denied.reason, "An OpAMP request is refused: its credentials are not accepted.");
            unauthorized(denied.reason)
        }
    }
}

fn unauthorized(reason: &str) -> Response {
    let message = session::bad_request(Bytes::new(), reason).message;
    let (body, _) = codec::encode_body(&message, false);
    let mut response = (StatusCode::UNAUTHORIZED, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(codec::CONTENT_TYPE));
    headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}
