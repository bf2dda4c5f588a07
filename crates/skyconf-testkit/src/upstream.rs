//! A recording OAP stand-in for the gateway's tests: an HTTP/2 server on an ephemeral loopback
//! port that records every call it receives (path, headers, request bytes, how it ended) and
//! answers by the call's method name:
//!
//! - `echo` (and any method not listed): reads the whole request, answers with response header
//!   `x-upstream: NAME`, the request bytes as the response body, and trailers `grpc-status: 0`,
//!   `x-trailer: NAME`;
//! - `status`: reads the request, answers trailers-only `grpc-status: 3`, `grpc-message:
//!   bad%20input`, `x-detail: NAME`;
//! - `stall`: never reads the request and never answers;
//! - `reset`: resets the stream with `CANCEL` at once.
//!
//! [`Upstream::kill`] drops the listener and every connection at once, as a killed OAP would;
//! [`Upstream::freeze`] keeps the connections open but stops serving them (no answers, no ping
//! acknowledgements), as a hung OAP would.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use h2::{Reason, RecvStream};
use http::{HeaderMap, HeaderValue, Response};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::JoinSet;

/// One call as the upstream received it.
#[derive(Debug, Clone, Default)]
pub struct RecordedCall {
    /// The path.
    pub path: String,
    /// The request headers (metadata).
    pub headers: HeaderMap,
    /// The request bytes read so far (nothing for `stall` and `reset`).
    pub body: Vec<u8>,
    /// The request's end: `None` while open, `Some(None)` ended normally, `Some(Some(reason))`
    /// reset by the peer.
    pub ended: Option<Option<Reason>>,
}

#[derive(Debug, Default)]
struct Shared {
    calls: Mutex<Vec<RecordedCall>>,
    changed: Notify,
}

impl Shared {
    fn update(&self, index: usize, change: impl FnOnce(&mut RecordedCall)) {
        change(&mut self.calls.lock().unwrap_or_else(|p| p.into_inner())[index]);
        self.changed.notify_waiters();
    }
}

/// A running recording upstream.
#[derive(Debug)]
pub struct Upstream {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its name, sent back in `x-upstream` and `x-trailer`.
    pub name: String,
    shared: Arc<Shared>,
    tasks: JoinSet<()>,
    frozen: tokio::sync::watch::Sender<bool>,
}

impl Upstream {
    /// Starts one named `name` on `127.0.0.1:0`.
    pub async fn start(name: &str) -> Self {
        Self::start_on(name, "127.0.0.1:0".parse().expect("address")).await
    }

    /// Starts one on `addr` (to come back on the address of a killed one).
    pub async fn start_on(name: &str, addr: SocketAddr) -> Self {
        let listener = TcpListener::bind(addr).await.expect("bind the upstream");
        let addr = listener.local_addr().expect("address");
        let shared = Arc::new(Shared::default());
        let mut tasks = JoinSet::new();
        let (frozen, frozen_rx) = tokio::sync::watch::channel(false);
        let (accept_shared, name_owned) = (Arc::clone(&shared), name.to_owned());
        tasks.spawn(async move {
            let mut connections = JoinSet::new();
            while let Ok((socket, _)) = listener.accept().await {
                let (shared, name, mut frozen) = (Arc::clone(&accept_shared), name_owned.clone(), frozen_rx.clone());
                connections.spawn(async move {
                    let Ok(mut connection) = h2::server::handshake(socket).await else { return };
                    let mut calls = JoinSet::new();
                    loop {
                        tokio::select! {
                            accepted = connection.accept() => match accepted {
                                Some(Ok((request, respond))) => {
                                    calls.spawn(answer(request, respond, Arc::clone(&shared), name.clone()));
                                }
                                _ => return,
                            },
                            frozen_now = async { frozen.wait_for(|f| *f).await.is_ok() } => {
                                if frozen_now {
                                    // The connection stays open and is never polled again.
                                    std::future::pending::<()>().await;
                                }
                            }
                        }
                    }
                });
            }
        });
        Self { addr, name: name.to_owned(), shared, tasks, frozen }
    }

    /// Every call received so far.
    pub fn calls(&self) -> Vec<RecordedCall> {
        self.shared.calls.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Waits until `condition` holds for the calls received (failing after
    /// [`crate::PATIENCE`]).
    pub async fn wait_for(&self, what: &str, condition: impl Fn(&[RecordedCall]) -> bool) -> Vec<RecordedCall> {
        let deadline = tokio::time::Instant::now() + crate::PATIENCE;
        loop {
            let changed = self.shared.changed.notified();
            let calls = self.calls();
            if condition(&calls) {
                return calls;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                panic!("the upstream {} never saw {what}; calls: {:?}", self.name, self.calls());
            }
        }
    }

    /// Stops serving every connection while keeping it open, as a hung process would.
    pub fn freeze(&self) {
        self.frozen.send_replace(true);
    }

    /// Drops the listener and every connection, as a killed process would.
    pub fn kill(&mut self) {
        self.tasks.abort_all();
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn answer(
    request: http::Request<RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    shared: Arc<Shared>,
    name: String,
) {
    let (parts, mut body) = request.into_parts();
    let path = parts.uri.path().to_owned();
    let index = {
        let mut calls = shared.calls.lock().unwrap_or_else(|p| p.into_inner());
        calls.push(RecordedCall { path: path.clone(), headers: parts.headers, ..RecordedCall::default() });
        calls.len() - 1
    };
    shared.changed.notify_waiters();
    let method = path.rsplit('/').next().unwrap_or_default().to_owned();
    match method.as_str() {
        "stall" => {
            // Holds the stream (and its unread data) until the connection goes.
            std::future::pending::<()>().await;
        }
        "reset" => {
            respond.send_reset(Reason::CANCEL);
            return;
        }
        _ => {}
    }
    let mut received = Vec::new();
    let end = loop {
        match body.data().await {
            Some(Ok(chunk)) => {
                let _ = body.flow_control().release_capacity(chunk.len());
                received.extend_from_slice(&chunk);
                shared.update(index, |call| call.body.extend_from_slice(&chunk));
            }
            Some(Err(error)) => break Some(error.reason()),
            None => break None,
        }
    };
    shared.update(index, |call| call.ended = Some(end.flatten()));
    if end.is_some() {
        return;
    }
    let header = |value: &str| HeaderValue::from_str(value).expect("header value");
    if method == "status" {
        let response = Response::builder()
            .header("content-type", "application/grpc")
            .header("grpc-status", "3")
            .header("grpc-message", "bad%20input")
            .header("x-detail", header(&name))
            .body(())
            .expect("response");
        let _ = respond.send_response(response, true);
        return;
    }
    let response = Response::builder()
        .header("content-type", "application/grpc")
        .header("x-upstream", header(&name))
        .body(())
        .expect("response");
    let Ok(mut stream) = respond.send_response(response, false) else { return };
    let _ = stream.send_data(Bytes::from(received), false);
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    trailers.insert("x-trailer", header(&name));
    let _ = stream.send_trailers(trailers);
}
