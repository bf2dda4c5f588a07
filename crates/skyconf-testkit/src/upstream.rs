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
//! - `reset`: resets the stream with `CANCEL` at once;
//! - `resetinternal`: resets the stream with `INTERNAL_ERROR` at once;
//! - `resetlater`: answers with response headers and the request's first bytes as soon as they
//!   come, then, once the request has ended, resets the stream with `INTERNAL_ERROR` instead of
//!   sending trailers;
//! - `bigtrailers` and `bigheaders`: as `echo`, with one more trailer (or response header)
//!   `x-big` of as many bytes as the request header `x-big-bytes` says.
//!
//! [`Upstream::kill`] drops the listener and every connection at once, as a killed OAP would;
//! [`Upstream::freeze`] keeps the connections open but stops serving them (no answers, no ping
//! acknowledgements) and leaves new ones unanswered, as a hung OAP would.
//! [`UpstreamOptions`] sets the upstream's HTTP/2 stream limit (an OAP or Satellite with
//! `max_concurrent_streams`). [`Silent`] accepts TCP connections and never says a word.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
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
    connections: AtomicUsize,
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

/// How an [`Upstream`] behaves at the HTTP/2 level.
#[derive(Debug, Clone, Copy, Default)]
pub struct UpstreamOptions {
    /// `SETTINGS_MAX_CONCURRENT_STREAMS` per connection; `None`: no limit.
    pub max_concurrent_streams: Option<u32>,
}

impl Upstream {
    /// Starts one named `name` on `127.0.0.1:0`.
    pub async fn start(name: &str) -> Self {
        Self::start_on(name, "127.0.0.1:0".parse().expect("address")).await
    }

    /// Starts one on `addr` (to come back on the address of a killed one).
    pub async fn start_on(name: &str, addr: SocketAddr) -> Self {
        Self::start_with(name, addr, UpstreamOptions::default()).await
    }

    /// Starts one on `addr` with `options`.
    pub async fn start_with(name: &str, addr: SocketAddr, options: UpstreamOptions) -> Self {
        let listener = TcpListener::bind(addr).await.expect("bind the upstream");
        let addr = listener.local_addr().expect("address");
        let shared = Arc::new(Shared::default());
        let mut tasks = JoinSet::new();
        let (frozen, frozen_rx) = tokio::sync::watch::channel(false);
        let (accept_shared, name_owned) = (Arc::clone(&shared), name.to_owned());
        tasks.spawn(async move {
            let mut connections = JoinSet::new();
            while let Ok((socket, _)) = listener.accept().await {
                accept_shared.connections.fetch_add(1, Ordering::Relaxed);
                accept_shared.changed.notify_waiters();
                let (shared, name, mut frozen) = (Arc::clone(&accept_shared), name_owned.clone(), frozen_rx.clone());
                connections.spawn(async move {
                    if *frozen.borrow() {
                        // A hung process accepts (the kernel does) but never speaks.
                        let _held = socket;
                        return std::future::pending::<()>().await;
                    }
                    let mut builder = h2::server::Builder::new();
                    if let Some(max) = options.max_concurrent_streams {
                        builder.max_concurrent_streams(max);
                    }
                    let Ok(mut connection) = builder.handshake(socket).await else { return };
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

    /// TCP connections accepted so far.
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::Relaxed)
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
        "resetinternal" => {
            respond.send_reset(Reason::INTERNAL_ERROR);
            return;
        }
        "resetlater" => {
            let response = Response::builder().header("content-type", "application/grpc").body(()).expect("response");
            let Ok(mut stream) = respond.send_response(response, false) else { return };
            let mut answered = false;
            while let Some(Ok(chunk)) = body.data().await {
                let _ = body.flow_control().release_capacity(chunk.len());
                shared.update(index, |call| call.body.extend_from_slice(&chunk));
                if !answered {
                    answered = true;
                    let _ = stream.send_data(chunk, false);
                }
            }
            shared.update(index, |call| call.ended = Some(None));
            stream.send_reset(Reason::INTERNAL_ERROR);
            return;
        }
        _ => {}
    }
    let big = big_bytes(&shared, index).map(|n| HeaderValue::from_str(&"a".repeat(n)).expect("header value"));
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
    let mut response = Response::builder()
        .header("content-type", "application/grpc")
        .header("x-upstream", header(&name))
        .body(())
        .expect("response");
    if method == "bigheaders"
        && let Some(big) = &big
    {
        response.headers_mut().insert("x-big", big.clone());
    }
    let Ok(mut stream) = respond.send_response(response, false) else { return };
    let _ = stream.send_data(Bytes::from(received), false);
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    trailers.insert("x-trailer", header(&name));
    if method == "bigtrailers"
        && let Some(big) = big
    {
        trailers.insert("x-big", big);
    }
    let _ = stream.send_trailers(trailers);
}

/// The `x-big-bytes` request header of the call at `index`.
fn big_bytes(shared: &Shared, index: usize) -> Option<usize> {
    let calls = shared.calls.lock().unwrap_or_else(|p| p.into_inner());
    calls[index].headers.get("x-big-bytes")?.to_str().ok()?.parse().ok()
}

/// A process that accepts TCP connections and never speaks (a hung OAP, or something else
/// listening on its port). Every accepted socket is read until the peer closes it.
#[derive(Debug)]
pub struct Silent {
    /// Where it listens.
    pub addr: SocketAddr,
    counts: Arc<SilentCounts>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Debug, Default)]
struct SilentCounts {
    accepted: AtomicUsize,
    closed: AtomicUsize,
}

impl Silent {
    /// Starts one on `127.0.0.1:0`.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let counts = Arc::new(SilentCounts::default());
        let shared = Arc::clone(&counts);
        let task = tokio::spawn(async move {
            let mut sockets = JoinSet::new();
            while let Ok((mut socket, _)) = listener.accept().await {
                shared.accepted.fetch_add(1, Ordering::Relaxed);
                let shared = Arc::clone(&shared);
                sockets.spawn(async move {
                    let mut sink = [0u8; 4096];
                    while matches!(tokio::io::AsyncReadExt::read(&mut socket, &mut sink).await, Ok(n) if n > 0) {}
                    shared.closed.fetch_add(1, Ordering::Relaxed);
                });
            }
        });
        Self { addr, counts, task }
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.counts.accepted.load(Ordering::Relaxed)
    }

    /// Accepted connections the peer has closed since.
    pub fn closed(&self) -> usize {
        self.counts.closed.load(Ordering::Relaxed)
    }
}

impl Drop for Silent {
    fn drop(&mut self) {
        self.task.abort();
    }
}
