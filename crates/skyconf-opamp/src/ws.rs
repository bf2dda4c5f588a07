//! The WebSocket transport: binary messages of a varint header (0) and a message, both ways;
//! the server may send at any time.
//!
//! One task per connection waits on three things: the client's next message (answered at
//! once), a change of the backend's configurations for the connection's agents (pushed when
//! an agent lacks its configuration), and the end (the server stops, a newer connection of the
//! agent takes over, or the connection is silent for the idle timeout). A connection may carry
//! several agents (a terminating proxy multiplexes them), up to [`crate::limits::MAX_AGENTS_PER_CONNECTION`].
//! Each agent's session is released by a guard when the connection ends, however it ends.
//! A message over [`crate::Limits::max_message_bytes`] closes the connection (1009).

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::State;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::future::select_all;
use http::{HeaderValue, StatusCode, header};
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;

use crate::backend::{Changes, Description, Disconnect, Transport};
use crate::codec;
use crate::limits::MAX_AGENTS_PER_CONNECTION;
use crate::server::{Counters, Opamp};
use crate::session::{self, Connection, Outcome, Protocol};
use crate::uid::InstanceUid;
use crate::wire;

/// Room for the varint header above the message limit.
const HEADER_ROOM: usize = 10;

pub(crate) async fn upgrade(State(opamp): State<Opamp>, ws: WebSocketUpgrade) -> Response {
    let inner = &opamp.inner;
    let Ok(permit) = inner.websockets.clone().try_acquire_owned() else {
        Counters::add(&inner.counters.throttled);
        tracing::warn!("An OpAMP WebSocket is refused: the WebSocket limit is reached.");
        let mut response = StatusCode::SERVICE_UNAVAILABLE.into_response();
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(inner.config.retry_after.as_secs().max(1)));
        return response;
    };
    let limit = inner.config.limits.max_message_bytes + HEADER_ROOM;
    ws.max_message_size(limit).max_frame_size(limit).on_upgrade(move |socket| serve(opamp, socket, permit))
}

/// One agent of a connection: its session guard, its change receiver, and the description the
/// receiver was asked for.
struct Carried {
    session: SessionGuard,
    changes: Changes,
    description: Arc<Description>,
}

async fn serve(opamp: Opamp, mut socket: WebSocket, _permit: OwnedSemaphorePermit) {
    let inner = Arc::clone(&opamp.inner);
    let protocol = &inner.protocol;
    let connection = Connection {
        id: inner.next_connection.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        evicted: CancellationToken::new(),
    };
    let idle = inner.config.idle_timeout;
    let mut agents: HashMap<InstanceUid, Carried> = HashMap::new();
    let mut last_message = tokio::time::Instant::now();
    let why = loop {
        let changed = async {
            if agents.is_empty() {
                std::future::pending::<()>().await;
            }
            let (result, _, _) = select_all(agents.values_mut().map(|a| Box::pin(a.changes.changed()))).await;
            if result.is_err() {
                // A dropped sender never changes again; wait for the other branches.
                std::future::pending::<()>().await;
            }
        };
        let outgoing: Vec<wire::ServerToAgent> = tokio::select! {
            () = inner.stop.cancelled() => break Disconnect::Shutdown,
            () = connection.evicted.cancelled() => break Disconnect::Closed,
            () = tokio::time::sleep_until(last_message + idle) => break Disconnect::Expired,
            () = changed => {
                let offers: Vec<_> = agents.keys().filter_map(|uid| protocol.pending(*uid)).collect();
                for _ in &offers {
                    Counters::add(&inner.counters.pushes);
                }
                offers
            }
            frame = socket.recv() => match frame {
                None | Some(Err(_)) => break Disconnect::Closed,
                Some(Ok(Message::Close(_))) => break Disconnect::Closed,
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                Some(Ok(Message::Text(_))) => {
                    let _ = socket.send(close(close_code::UNSUPPORTED, "OpAMP messages are binary")).await;
                    break Disconnect::Closed;
                }
                Some(Ok(Message::Binary(bytes))) => {
                    last_message = tokio::time::Instant::now();
                    Counters::add(&inner.counters.messages);
                    vec![answer(&opamp, &connection, &mut agents, &bytes)]
                }
            },
        };
        for message in outgoing {
            if socket.send(Message::Binary(codec::encode_frame(&message))).await.is_err() {
                break;
            }
        }
    };
    if why == Disconnect::Shutdown {
        let _ = socket.send(close(close_code::AWAY, "the server is stopping")).await;
    }
    for carried in agents.values_mut() {
        carried.session.why = why;
    }
    drop(agents);
}

/// Answers one binary message, and keeps `agents` to the agents the connection carries.
fn answer(
    opamp: &Opamp,
    connection: &Connection,
    agents: &mut HashMap<InstanceUid, Carried>,
    bytes: &Bytes,
) -> wire::ServerToAgent {
    let inner = &opamp.inner;
    let protocol = &inner.protocol;
    let message = match codec::decode_frame(bytes) {
        Ok(message) => message,
        Err(error) => {
            Counters::add(&inner.counters.bad_requests);
            return session::bad_request(Bytes::new(), &error.to_string()).message;
        }
    };
    if agents.len() >= MAX_AGENTS_PER_CONNECTION
        && InstanceUid::from_wire(&message.instance_uid).is_ok_and(|uid| !agents.contains_key(&uid))
    {
        Counters::add(&inner.counters.bad_requests);
        let why = format!("one connection carries at most {MAX_AGENTS_PER_CONNECTION} agents");
        return session::bad_request(message.instance_uid, &why).message;
    }
    let answer = protocol.answer(&message, Transport::WebSocket, Some(connection));
    match answer.outcome {
        Outcome::Processed { uid, .. } => {
            if let Some(agent) = protocol.agent(uid) {
                let stale = agents.get(&uid).is_none_or(|c| !Arc::ptr_eq(&c.description, &agent.description));
                if stale {
                    let changes = protocol.backend().watch(&agent);
                    let session = agents.remove(&uid).map(|c| c.session).unwrap_or_else(|| SessionGuard {
                        protocol: Arc::clone(protocol),
                        uid,
                        connection: connection.id,
                        why: Disconnect::Closed,
                    });
                    agents.insert(uid, Carried { session, changes, description: agent.description });
                }
            }
            answer.message
        }
        Outcome::Disconnected => {
            // The protocol ended the session already; its guard finds nothing left to end.
            if let Ok(uid) = InstanceUid::from_wire(&answer.message.instance_uid) {
                agents.remove(&uid);
            }
            answer.message
        }
        Outcome::BadRequest => {
            Counters::add(&inner.counters.bad_requests);
            answer.message
        }
        Outcome::Unavailable { .. } => {
            Counters::add(&inner.counters.throttled);
            answer.message
        }
    }
}

/// Ends an agent's session, if this connection still owns it, when the connection lets go of
/// the agent.
struct SessionGuard {
    protocol: Arc<Protocol>,
    uid: InstanceUid,
    connection: u64,
    why: Disconnect,
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        self.protocol.end(self.uid, Some(self.connection), self.why);
    }
}

fn close(code: u16, reason: &'static str) -> Message {
    Message::Close(Some(CloseFrame { code, reason: reason.into() }))
}
