//! The plain HTTP transport: `POST` of one `AgentToServer`, answered with one `ServerToAgent`.
//!
//! Refusals, in the order they are checked: not `application/x-protobuf` (415), an unknown
//! `Content-Encoding` (415), too many bodies being read at once (429 + `Retry-After`), a body
//! over the limit, compressed or not (413), a body that takes too long (408), bytes that are
//! not a message (400, with a `BAD_REQUEST` body). A message with a bad instance uid, or whose
//! `OpAMP-Instance-UID` header names another agent, is answered 200 with `BAD_REQUEST` (the
//! spec's way: the client does not retry it). A throttled agent gets 503 + `Retry-After`.

use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use http_body_util::{BodyExt as _, LengthLimitError, Limited};

use crate::backend::Transport;
use crate::codec::{self, CodecError};
use crate::hold;
use crate::server::{Counters, Opamp};
use crate::session::{self, Outcome};
use crate::uid::InstanceUid;
use crate::wire;

/// The header that names the agent of a plain HTTP request (spec v0.15 on).
pub(crate) const INSTANCE_UID_HEADER: &str = "opamp-instance-uid";

pub(crate) async fn post(State(opamp): State<Opamp>, headers: HeaderMap, body: Body) -> Response {
    let inner = &opamp.inner;
    let config = &inner.config;
    if !is_protobuf(&headers) {
        return refuse(&opamp, StatusCode::UNSUPPORTED_MEDIA_TYPE, "the body must be application/x-protobuf");
    }
    let encoding = match codec::request_encoding(&headers) {
        Ok(encoding) => encoding,
        Err(error) => return refuse(&opamp, StatusCode::UNSUPPORTED_MEDIA_TYPE, &error.to_string()),
    };
    let gzip_allowed = codec::accepts_gzip(&headers);
    let hold_asked = hold::asked(&headers);

    let Ok(permit) = inner.inflight.clone().try_acquire_owned() else {
        Counters::add(&inner.counters.throttled);
        tracing::debug!("An OpAMP request is throttled: too many bodies are being read.");
        return throttled(StatusCode::TOO_MANY_REQUESTS, config.retry_after, None);
    };
    let limit = config.limits.max_message_bytes;
    let read = tokio::time::timeout(config.limits.body_timeout, Limited::new(body, limit).collect()).await;
    let bytes = match read {
        Err(_) => return refuse(&opamp, StatusCode::REQUEST_TIMEOUT, "the body did not arrive in time"),
        Ok(Err(error)) if error.downcast_ref::<LengthLimitError>().is_some() => {
            return refuse(&opamp, StatusCode::PAYLOAD_TOO_LARGE, &format!("the body is larger than {limit} bytes"));
        }
        Ok(Err(error)) => return refuse(&opamp, StatusCode::BAD_REQUEST, &format!("the body cannot be read: {error}")),
        Ok(Ok(collected)) => collected.to_bytes(),
    };
    let message = codec::decode_body(encoding, &bytes, limit);
    drop((bytes, permit));
    let message = match message {
        Ok(message) => message,
        Err(CodecError::TooLarge { limit }) => {
            return refuse(&opamp, StatusCode::PAYLOAD_TOO_LARGE, &format!("the message is larger than {limit} bytes"));
        }
        Err(error) => return refuse(&opamp, StatusCode::BAD_REQUEST, &error.to_string()),
    };
    Counters::add(&inner.counters.messages);

    if let Some(named) = headers.get(INSTANCE_UID_HEADER).and_then(|v| v.to_str().ok())
        && let Ok(body_uid) = InstanceUid::from_wire(&message.instance_uid)
        && InstanceUid::from_header(named) != Some(body_uid)
    {
        Counters::add(&inner.counters.bad_requests);
        let answer =
            session::bad_request(message.instance_uid, "the OpAMP-Instance-UID header does not name the body's agent");
        return respond(StatusCode::OK, &answer.message, gzip_allowed, None);
    }

    let answer = inner.protocol.answer(&message, Transport::Http, None);
    let granted = hold_asked.map(|asked| hold::granted(asked, config.max_hold));
    match answer.outcome {
        Outcome::Unavailable { retry_after } => {
            Counters::add(&inner.counters.throttled);
            throttled(StatusCode::SERVICE_UNAVAILABLE, retry_after, Some(&answer.message))
        }
        Outcome::BadRequest => {
            Counters::add(&inner.counters.bad_requests);
            respond(StatusCode::OK, &answer.message, gzip_allowed, granted)
        }
        Outcome::Processed { uid, holdable: true } if granted.is_some_and(|g| !g.is_zero()) => {
            let held = held(&opamp, uid, granted.unwrap_or_default(), answer.message).await;
            respond(StatusCode::OK, &held, gzip_allowed, granted)
        }
        Outcome::Processed { .. } | Outcome::Disconnected => {
            respond(StatusCode::OK, &answer.message, gzip_allowed, granted)
        }
    }
}

/// Holds a poll of `uid` for up to `hold`: answers with a remote configuration as soon as
/// there is one for the agent, or with `plain` at the end of the hold or when the server stops.
/// Answered at once when as many polls as allowed are held already.
async fn held(opamp: &Opamp, uid: InstanceUid, hold: Duration, plain: wire::ServerToAgent) -> wire::ServerToAgent {
    let inner = &opamp.inner;
    let protocol = &inner.protocol;
    let Some(agent) = protocol.agent(uid) else { return plain };
    let Ok(_slot) = inner.held.clone().try_acquire_owned() else {
        tracing::debug!(%uid, "An OpAMP poll is answered at once: the held-poll limit is reached.");
        return plain;
    };
    let _held = protocol.hold(uid);
    let mut changes = protocol.backend().watch(&agent);
    let deadline = tokio::time::Instant::now() + hold;
    loop {
        // Checked after subscribing, so a change between the answer and the subscription is seen.
        if let Some(offer) = protocol.pending(uid) {
            Counters::add(&inner.counters.pushes);
            return offer;
        }
        tokio::select! {
            () = inner.stop.cancelled() => return plain,
            () = tokio::time::sleep_until(deadline) => return plain,
            changed = changes.changed() => {
                if changed.is_err() {
                    // The backend dropped the channel: no change can come any more.
                    tokio::select! {
                        () = inner.stop.cancelled() => {}
                        () = tokio::time::sleep_until(deadline) => {}
                    }
                    return plain;
                }
            }
        }
    }
}

fn is_protobuf(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case(codec::CONTENT_TYPE))
}

fn respond(status: StatusCode, message: &wire::ServerToAgent, gzip_allowed: bool, hold: Option<Duration>) -> Response {
    let (body, gzipped) = codec::encode_body(message, gzip_allowed);
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(codec::CONTENT_TYPE));
    if gzipped {
        headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    if let Some(hold) = hold {
        headers.insert(hold::HEADER, HeaderValue::from(hold.as_secs()));
    }
    response
}

/// A refusal before a message could be read: the status, and a `BAD_REQUEST` body saying why.
fn refuse(opamp: &Opamp, status: StatusCode, why: &str) -> Response {
    Counters::add(&opamp.inner.counters.bad_requests);
    tracing::debug!(%status, why, "An OpAMP request is refused.");
    respond(status, &session::bad_request(Bytes::new(), why).message, false, None)
}

/// 429 or 503 with `Retry-After` in whole seconds (and the `UNAVAILABLE` message, if any).
fn throttled(status: StatusCode, retry_after: Duration, message: Option<&wire::ServerToAgent>) -> Response {
    let seconds = retry_after.as_secs().max(1);
    let mut response = match message {
        Some(message) => respond(status, message, false, None),
        None => status.into_response(),
    };
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    response
}
