//! An HTTP/2 server connection (RFC 9113) for connections that are mostly idle: the agent port's
//! own HTTP/2 path.
//!
//! A connection keeps no buffer of its own while idle. It reads into its worker thread's buffer
//! and handles every whole frame inside that one synchronous step; only an incomplete frame's
//! bytes are copied into a `Vec` of the connection, sized to them and freed once the frame is
//! whole. Frames it sends are written into the worker's write buffer and handed to the socket at
//! once; only what the socket does not take is kept, and freed once sent (`buf`). The calls'
//! futures and response bodies are polled by the connection's own task: no task per stream, and
//! a closed stream leaves nothing behind but the highest stream id. HPACK is decoded with a
//! dynamic table only until the client acknowledges `SETTINGS_HEADER_TABLE_SIZE` 0, and encoded
//! without one (`hpack`).
//!
//! What a client may make a connection cost is bounded, each bound closing the connection with
//! GOAWAY when passed (`conn` lists them): header list size, header block size (CONTINUATION
//! floods), HPACK bombs (decoded size counted as RFC 7541 §4.1 counts it), streams reset before
//! their answer (rapid reset), stream errors, queued output for a client that does not read,
//! keep-alive pings and the SETTINGS acknowledgement.
//!
//! Not supported, safely: server push (never sent), priority
//! scheduling (PRIORITY and the HEADERS priority fields are validated and ignored; streams are
//! served in turn), extended CONNECT (`:protocol` is a malformed request), HTTP/1.1 upgrade
//! (a connection must start with the HTTP/2 preface).

mod body;
mod buf;
mod conn;
mod fields;
mod frame;
mod hpack;

use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};

pub use body::{RecvBody, RecvError};
pub use frame::Reason;
pub use hpack::DecodeError;

/// An error a boxed error can be made from.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What answers a connection's requests: called once per stream, from the connection's task.
///
/// The future and the response body are polled by the connection's task, in place: both are
/// `Unpin` (box them when they are not).
pub trait Service {
    /// The response body.
    type Body: http_body::Body<Data = Bytes, Error: Into<BoxError>> + Unpin;
    /// Why a call failed (the stream is reset with `INTERNAL_ERROR`).
    type Error: Into<BoxError>;
    /// The call.
    type Future: Future<Output = Result<Response<Self::Body>, Self::Error>> + Unpin;

    /// Answers `request`.
    fn call(&self, request: Request<RecvBody>) -> Self::Future;
}

/// A [`Service`] from a function returning a future (boxed here).
#[derive(Debug, Clone)]
pub struct ServiceFn<F>(pub F);

impl<F, Fut, B, E> Service for ServiceFn<F>
where
    F: Fn(Request<RecvBody>) -> Fut,
    Fut: Future<Output = Result<Response<B>, E>>,
    B: http_body::Body<Data = Bytes, Error: Into<BoxError>> + Unpin,
    E: Into<BoxError>,
{
    type Body = B;
    type Error = E;
    type Future = Pin<Box<Fut>>;

    fn call(&self, request: Request<RecvBody>) -> Self::Future {
        Box::pin((self.0)(request))
    }
}

/// A connection's limits and advertised settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `SETTINGS_HEADER_TABLE_SIZE`: the HPACK table the client may use once it acknowledges.
    pub header_table_size: u32,
    /// `SETTINGS_MAX_CONCURRENT_STREAMS`; streams over it are refused (`REFUSED_STREAM`).
    pub max_concurrent_streams: u32,
    /// `SETTINGS_MAX_HEADER_LIST_SIZE`: a request's header list, RFC 7541 §4.1 sizes; a list over
    /// it is answered 431, a compressed block over twice it closes the connection.
    pub max_header_list_bytes: u32,
    /// `SETTINGS_INITIAL_WINDOW_SIZE`: request data a client may send per stream before the call
    /// takes it.
    pub initial_stream_window: u32,
    /// The connection's receive window, over all its streams.
    pub connection_window: u32,
    /// How long the connection may read nothing before it sends a PING; `None`: never.
    pub keepalive_interval: Option<Duration>,
    /// How long that PING may go unanswered before the connection closes.
    pub keepalive_timeout: Duration,
    /// How long the client may take to acknowledge the server's SETTINGS (then GOAWAY
    /// `SETTINGS_TIMEOUT`).
    pub settings_ack_timeout: Duration,
    /// Streams the client may reset before their answer, less those answered since, before the
    /// connection is closed with `ENHANCE_YOUR_CALM` (rapid reset).
    pub max_pending_accept_reset_streams: usize,
    /// Stream errors the client may cause before the connection is closed with
    /// `ENHANCE_YOUR_CALM`.
    pub max_local_error_reset_streams: usize,
    /// Output the connection queues for a client that does not read before it stops reading
    /// from it and stops polling response bodies.
    pub max_send_buffer_bytes: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            header_table_size: 0,
            max_concurrent_streams: 100,
            max_header_list_bytes: 16 * 1024,
            initial_stream_window: 1024 * 1024,
            connection_window: 1024 * 1024,
            keepalive_interval: Some(Duration::from_secs(20)),
            keepalive_timeout: Duration::from_secs(10),
            settings_ack_timeout: Duration::from_secs(10),
            max_pending_accept_reset_streams: 20,
            max_local_error_reset_streams: 1024,
            max_send_buffer_bytes: 64 * 1024,
        }
    }
}

/// Why a connection ended other than by a clean close.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The socket failed.
    #[error("connection i/o failed: {0}")]
    Io(#[from] std::io::Error),
    /// The client broke the protocol or passed a bound: the server sent GOAWAY with `reason`.
    #[error("connection error {reason}: {why}")]
    Protocol {
        /// The GOAWAY's error code.
        reason: Reason,
        /// What happened.
        why: &'static str,
    },
    /// A keep-alive PING went unanswered.
    #[error("a keep-alive ping went unanswered")]
    KeepAliveTimeout,
}

/// Serves one connection with `settings` (shared by a server's connections) until it closes: the client closes it, a protocol error or bound closes
/// it, or `shutdown` completes and its open streams have finished (graceful shutdown: GOAWAY with
/// the last stream id, the open streams end, then the connection closes).
pub async fn serve_connection<IO, S>(
    io: IO,
    service: S,
    settings: Arc<Settings>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Error>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite,
    S: Service,
{
    let mut io = pin!(io);
    let mut shutdown = pin!(shutdown);
    let mut stopping = false;
    // Far off until the connection arms it.
    let mut sleep = pin!(tokio::time::sleep(Duration::from_secs(86_400 * 365)));
    let mut connection = conn::Connection::new(service, settings);
    poll_fn(|cx| {
        if !stopping && shutdown.as_mut().poll(cx).is_ready() {
            stopping = true;
            connection.shutdown();
        }
        connection.poll(cx, io.as_mut(), sleep.as_mut())
    })
    .await
}

/// The size of a connection's state and of one stream's, for a service with these types (the
/// socket, the timer and the shutdown future come on top).
pub fn state_sizes<S: Service>() -> (usize, usize) {
    (std::mem::size_of::<conn::Connection<S>>(), std::mem::size_of::<conn::Stream<S::Future, S::Body>>())
}
