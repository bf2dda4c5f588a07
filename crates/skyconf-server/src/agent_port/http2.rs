//! The HTTP/2 settings of the agent port, each chosen for what it costs an idle connection and
//! what it bounds. The agent port holds one connection per agent, mostly idle (a poll every 20 s,
//! or one held call), so what a connection keeps while idle is what a fleet costs; what a
//! connection *may* buffer is what a misbehaving peer can make it cost.
//!
//! hyper's and h2's fixed per-connection buffers (a 16 KiB write buffer, an 8 KiB read buffer,
//! 4 KiB of HPACK decode scratch) are allocated when a connection opens whatever these settings
//! say: no setting here shrinks them (BENCHMARKS.md, "Memory and scale", has the measurements).
//! The settings bound what a connection may hold beyond them.
//!
//! The limits an operator may change (header list size, concurrent streams, keep-alive pings)
//! are [`GrpcLimits`]; the rest are the constants below.

use std::sync::Arc;

use hyper::server::conn::http2::Builder;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::security::GrpcLimits;

/// `SETTINGS_HEADER_TABLE_SIZE`: the HPACK decoder keeps no dynamic table. With one, the headers
/// a client indexes (the ones it repeats on every poll: `:path`, `:authority`, its metadata) are
/// kept for the connection's life, up to 4 KiB, and h2 keeps pseudo-header values as views into
/// the buffer they were decoded from, so an indexed `:path` can keep that buffer alive too.
/// Measured: about 1 KB less RSS per agent than with the 4 KiB table (BENCHMARKS.md, "The agent
/// port's HTTP/2 settings"). Cost: a poll's header block carries literal names and values, a few
/// dozen bytes more on the wire per poll.
pub const HEADER_TABLE_SIZE: u32 = 0;

/// `SETTINGS_INITIAL_WINDOW_SIZE`: how much request data a client may send on one stream before
/// the server has read it. A CDS request is a few hundred bytes (64 KiB at most,
/// `crate::cds::MAX_REQUEST_BYTES`); 1 MiB is for the gateway's forwarded client streams (trace
/// segments), which the window would otherwise slow to a round trip per 64 KiB. No memory is
/// taken for it while a connection is idle: data is buffered only as it arrives.
pub const STREAM_WINDOW_BYTES: u32 = 1024 * 1024;

/// The connection's window, over all its streams: as one stream's, so a single forwarded stream
/// is not held back by the connection, and a connection's unread request data stays within
/// 1 MiB however many streams it opens.
pub const CONNECTION_WINDOW_BYTES: u32 = 1024 * 1024;

/// `SETTINGS_MAX_FRAME_SIZE`: the smallest HTTP/2 allows. h2 grows its read buffer to hold one
/// whole frame, so this caps a connection's read buffer at 16 KiB plus a frame header; a client
/// splits larger messages into frames of this size.
pub const MAX_FRAME_BYTES: u32 = 16 * 1024;

/// How much response data h2 queues per stream before the handler's body waits (a high-water
/// mark, not an allocation). A CDS answer is a few KiB; a forwarded server stream may have this
/// much on its way to a slow reader.
pub const MAX_SEND_BUFFER_BYTES: usize = 400 * 1024;

/// Streams a client opened and reset before the server took them up, per connection, before the
/// connection is closed (the rapid-reset attack, CVE-2023-44487). An agent resets a call only
/// when its deadline passes.
pub const MAX_PENDING_ACCEPT_RESET_STREAMS: usize = 20;

/// Streams the server reset because the client broke the protocol on them, per connection,
/// before the connection is closed with `ENHANCE_YOUR_CALM` (the same attack made through
/// stream errors). An agent breaks no stream.
pub const MAX_LOCAL_ERROR_RESET_STREAMS: usize = 1024;

/// The agent port's HTTP/2 server, as `limits` chooses it ([`GrpcLimits::http2_server`]).
#[derive(Debug)]
pub enum Server {
    /// hyper's ([`builder`]).
    Hyper(Builder<TokioExecutor>),
    /// skyconf's own ([`own_settings`], `super::own`).
    Own(Arc<skyconf_h2::Settings>),
}

/// The server `limits` chooses, with its settings.
pub fn server(limits: &GrpcLimits) -> Server {
    match limits.http2_server {
        super::Http2Server::Hyper => Server::Hyper(builder(limits)),
        super::Http2Server::Own => Server::Own(Arc::new(own_settings(limits))),
    }
}

/// The own server's bound on a connection's output the socket has not taken (over all its
/// streams): past it the connection reads nothing more and polls no response body until the
/// client reads. The socket's send buffer takes a streaming answer's bytes first, so this is
/// what a client that stops reading can make the server hold, beyond one body chunk per stream.
pub const OWN_MAX_UNSENT_BYTES: usize = 64 * 1024;

/// The own server's settings: the constants above and the limits of `limits`, as [`builder`]
/// sets them for hyper; SETTINGS must be acknowledged within the keep-alive timeout.
pub fn own_settings(limits: &GrpcLimits) -> skyconf_h2::Settings {
    skyconf_h2::Settings {
        header_table_size: HEADER_TABLE_SIZE,
        max_concurrent_streams: limits.max_concurrent_streams,
        max_header_list_bytes: limits.max_header_list_bytes,
        initial_stream_window: STREAM_WINDOW_BYTES,
        connection_window: CONNECTION_WINDOW_BYTES,
        keepalive_interval: limits.keepalive_interval,
        keepalive_timeout: limits.keepalive_timeout,
        settings_ack_timeout: limits.keepalive_timeout,
        max_pending_accept_reset_streams: MAX_PENDING_ACCEPT_RESET_STREAMS,
        max_local_error_reset_streams: MAX_LOCAL_ERROR_RESET_STREAMS,
        max_send_buffer_bytes: OWN_MAX_UNSENT_BYTES,
    }
}

/// The agent port's HTTP/2 server: the constants above and the limits of `limits`, keep-alive
/// pings timed by tokio.
pub fn builder(limits: &GrpcLimits) -> Builder<TokioExecutor> {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .header_table_size(HEADER_TABLE_SIZE)
        .initial_stream_window_size(STREAM_WINDOW_BYTES)
        .initial_connection_window_size(CONNECTION_WINDOW_BYTES)
        .adaptive_window(false)
        .max_frame_size(MAX_FRAME_BYTES)
        .max_send_buf_size(MAX_SEND_BUFFER_BYTES)
        .max_pending_accept_reset_streams(MAX_PENDING_ACCEPT_RESET_STREAMS)
        .max_local_error_reset_streams(MAX_LOCAL_ERROR_RESET_STREAMS)
        .max_header_list_size(limits.max_header_list_bytes)
        .max_concurrent_streams(limits.max_concurrent_streams)
        .keep_alive_interval(limits.keepalive_interval)
        .keep_alive_timeout(limits.keepalive_timeout);
    builder
}
