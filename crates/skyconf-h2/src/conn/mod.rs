//! One server connection: the frame loop, stream states, flow control and the bounds.
//!
//! The connection is a plain state machine ([`Connection`]) driven by one task
//! (`crate::serve_connection`). Each time the task runs it reads into the worker's buffer
//! (`crate::buf`) and handles every whole frame there; polls the calls' futures and response
//! bodies, which live in the connection's stream list (no task per stream); encodes what they
//! answer into the worker's write buffer; and writes it to the socket at once. A connection
//! therefore holds bytes of its own only for an incomplete frame (the bytes read so far, in a
//! `Vec` sized to the frame and freed once it is whole) and for what the socket did not take
//! (freed once sent). An idle connection holds its stream list, the HPACK decoder (an empty
//! table once the client acknowledges `SETTINGS_HEADER_TABLE_SIZE` 0) and a few counters.
//!
//! Streams: a stream is open from its HEADERS until both sides have ended it; a closed stream
//! leaves nothing behind but the highest stream id (frames on a lower id that is not open are
//! on a closed stream). Streams over `MAX_CONCURRENT_STREAMS` are refused (`REFUSED_STREAM`).
//! Priority is not scheduled (frames are validated and ignored): every stream is served in turn.
//!
//! Flow control: response DATA is sent within the client's windows, and a response body is
//! polled only when its stream and the connection have window and the connection's unsent
//! bytes are under [`crate::Settings::max_send_buffer_bytes`]; so what is queued for a client
//! that does not read is at most that bound plus one body chunk per stream. Request DATA is
//! credited back (WINDOW_UPDATE) as the call takes it (`crate::body`), so a client may have at
//! most a stream window of data unread per stream, and a connection window in all.
//!
//! Bounds (each closes the connection with GOAWAY when passed): a header block's compressed size,
//! frame headers included, at most twice the header list limit (the CONTINUATION flood); streams
//! the client resets before they are answered, less those answered since, at most
//! `max_pending_accept_reset_streams` (rapid reset); stream errors the client causes at most
//! `max_local_error_reset_streams`; the client's SETTINGS acknowledged within
//! `settings_ack_timeout`; a keep-alive PING answered within `keepalive_timeout`. While the
//! unsent bytes are over their bound nothing more is read, so a client that sends PINGs or
//! SETTINGS without reading the answers stops itself.

mod answer;
mod headers;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use crate::body::Feed;
use crate::frame::{self, HEAD_LEN, Head, MAX_WINDOW, Reason, flag, kind, setting};
use crate::hpack::Decoder;
use crate::{Error, Service, Settings, buf};

/// A connection error: GOAWAY with `reason`, then the connection closes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnError {
    reason: Reason,
    why: &'static str,
}

fn conn_error(reason: Reason, why: &'static str) -> ConnError {
    ConnError { reason, why }
}

type Result<T = (), E = ConnError> = std::result::Result<T, E>;

/// Rounds of read, poll and write one run of the task makes before it yields to others.
const MAX_ROUNDS: usize = 16;

/// The payload of the server's keep-alive PING.
const PING_PAYLOAD: [u8; 8] = *b"skyconf!";

/// How long a connection closed for an error reads (and discards) what the client still sends,
/// so that the GOAWAY reaches it before the socket closes (a close with unread data is a reset).
const LINGER: std::time::Duration = std::time::Duration::from_secs(1);

/// What a stream's answer is at.
enum Reply<F, B> {
    /// The call is running.
    Calling(F),
    /// The response head is sent; its body is being sent.
    Sending(B),
}

/// One open stream.
pub(crate) struct Stream<F, B> {
    id: u32,
    /// The client ended its side (END_STREAM).
    recv_closed: bool,
    reply: Reply<F, B>,
    /// The part of the body's last data frame not yet sent (empty when none).
    chunk: Bytes,
    /// What the server may send on the stream (the client's window).
    send_window: i64,
    /// What the client may still send on the stream.
    recv_window: i64,
    /// Request bytes taken by the call and not yet credited back to the client.
    credit: usize,
    /// The request body's feed; `None` once the request ended with its HEADERS.
    feed: Option<Feed>,
    /// Request bytes still to come by the request's `content-length`.
    remaining: Option<u64>,
}

impl<F, B> std::fmt::Debug for Stream<F, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream").field("id", &self.id).field("recv_closed", &self.recv_closed).finish_non_exhaustive()
    }
}

/// What a header block is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlockKind {
    /// A new stream's request.
    Open,
    /// An open stream's trailers.
    Trailers,
    /// Decoded (for the HPACK state) and then answered with RST_STREAM.
    Reset(Reason, bool),
    /// Decoded and dropped (a stream above the GOAWAY's last id).
    Ignore,
}

/// A header block whose CONTINUATION frames are still coming.
#[derive(Debug)]
struct Block {
    stream: u32,
    end_stream: bool,
    kind: BlockKind,
    bytes: Vec<u8>,
    /// Bytes counted against the block bound (frame headers included).
    counted: usize,
}

/// How a stream's answer went in one poll.
enum Outcome {
    Pending,
    Done,
    Reset(Reason),
}

/// One server connection's state (see the module docs).
pub(crate) struct Connection<S: Service> {
    service: S,
    /// Shared by every connection of a server: a copy would cost each idle connection its size.
    settings: Arc<Settings>,
    streams: Vec<Stream<S::Future, S::Body>>,
    decoder: Decoder,
    /// An incomplete frame's bytes (or the preface's, at the start).
    partial: Vec<u8>,
    /// Bytes the socket did not take, from `unsent_from` on.
    unsent: Vec<u8>,
    unsent_from: usize,
    block: Option<Block>,
    /// The highest stream id the client opened.
    highest: u32,
    send_window: i64,
    recv_window: i64,
    /// Request bytes taken (or discarded) and not yet credited to the connection's window.
    recv_credit: usize,
    peer_initial_window: u32,
    peer_max_frame: u32,
    /// Preface bytes still expected.
    preface_left: u8,
    started: bool,
    got_settings: bool,
    settings_deadline: Option<Instant>,
    /// GOAWAY to send (graceful shutdown), not yet written.
    goaway_pending: bool,
    goaway_sent: bool,
    goaway_received: bool,
    eof: bool,
    needs_flush: bool,
    shut_down: bool,
    error: Option<ConnError>,
    early_resets: usize,
    local_resets: usize,
    last_read: Instant,
    ping_deadline: Option<Instant>,
    linger_deadline: Option<Instant>,
}

impl<S: Service> std::fmt::Debug for Connection<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("streams", &self.streams)
            .field("highest", &self.highest)
            .finish_non_exhaustive()
    }
}

impl<S: Service> Connection<S> {
    pub(crate) fn new(service: S, settings: Arc<Settings>) -> Self {
        Self {
            service,
            streams: Vec::new(),
            decoder: Decoder::new(settings.header_table_size as usize),
            settings,
            partial: Vec::new(),
            unsent: Vec::new(),
            unsent_from: 0,
            block: None,
            highest: 0,
            send_window: i64::from(frame::DEFAULT_WINDOW),
            recv_window: i64::from(frame::DEFAULT_WINDOW),
            recv_credit: 0,
            peer_initial_window: frame::DEFAULT_WINDOW,
            peer_max_frame: frame::MIN_MAX_FRAME_SIZE,
            preface_left: frame::PREFACE.len() as u8,
            started: false,
            got_settings: false,
            settings_deadline: None,
            goaway_pending: false,
            goaway_sent: false,
            goaway_received: false,
            eof: false,
            needs_flush: false,
            shut_down: false,
            error: None,
            early_resets: 0,
            local_resets: 0,
            last_read: Instant::now(),
            ping_deadline: None,
            linger_deadline: None,
        }
    }

    /// Graceful shutdown: GOAWAY with the last stream id, the open streams finish, then the
    /// connection closes.
    pub(crate) fn shutdown(&mut self) {
        if !self.goaway_sent {
            self.goaway_pending = true;
        }
    }

    /// Runs the connection as far as it can go without waiting.
    pub(crate) fn poll<IO: AsyncRead + AsyncWrite>(
        &mut self,
        cx: &mut Context<'_>,
        mut io: Pin<&mut IO>,
        mut sleep: Pin<&mut Sleep>,
    ) -> Poll<Result<(), Error>> {
        let now = Instant::now();
        let mut out = buf::take_write();
        let result = self.step(cx, io.as_mut(), &mut out, now);
        buf::give_write(out);
        if let Err(error) = result {
            return Poll::Ready(Err(error));
        }
        if self.finished() {
            return self.close(cx, io, sleep, now);
        }
        self.arm(cx, sleep.as_mut(), now);
        Poll::Pending
    }

    /// Reads, answers and writes, in rounds, then checks the timers.
    fn step<IO: AsyncRead + AsyncWrite>(
        &mut self,
        cx: &mut Context<'_>,
        mut io: Pin<&mut IO>,
        out: &mut Vec<u8>,
        now: Instant,
    ) -> Result<(), Error> {
        if !self.started {
            self.started = true;
            self.last_read = now;
            self.start(out, now);
        }
        for round in 0..MAX_ROUNDS {
            let mut progress = false;
            if self.goaway_pending {
                self.goaway_pending = false;
                self.goaway_sent = true;
                frame::goaway(out, self.highest, Reason::NO_ERROR);
            }
            if self.may_read() {
                progress |= self.read(cx, io.as_mut(), out, now)?;
            }
            if self.error.is_none() {
                if let Err(error) = self.poll_streams(cx, out) {
                    self.fail(error, out);
                }
                progress |= !out.is_empty();
            }
            self.flush(cx, io.as_mut(), out)?;
            if !progress || self.finished() {
                break;
            }
            if round + 1 == MAX_ROUNDS {
                cx.waker().wake_by_ref();
            }
        }
        if self.error.is_none() && !self.finished() {
            self.timers(now, out)?;
            self.flush(cx, io, out)?;
        }
        Ok(())
    }

    /// The server's SETTINGS and its connection window.
    fn start(&mut self, out: &mut Vec<u8>, now: Instant) {
        let s = &self.settings;
        frame::settings(
            out,
            &[
                (setting::HEADER_TABLE_SIZE, s.header_table_size),
                (setting::MAX_CONCURRENT_STREAMS, s.max_concurrent_streams),
                (setting::INITIAL_WINDOW_SIZE, s.initial_stream_window),
                (setting::MAX_FRAME_SIZE, frame::MIN_MAX_FRAME_SIZE),
                (setting::MAX_HEADER_LIST_SIZE, s.max_header_list_bytes),
            ],
        );
        let grow = i64::from(s.connection_window) - self.recv_window;
        if grow > 0 {
            frame::window_update(out, 0, grow as u32);
            self.recv_window += grow;
        }
        self.settings_deadline = Some(now + s.settings_ack_timeout);
    }

    fn may_read(&self) -> bool {
        !self.eof && self.error.is_none() && self.unsent.len() - self.unsent_from < self.settings.max_send_buffer_bytes
    }

    fn finished(&self) -> bool {
        self.error.is_some()
            || self.eof
            || ((self.goaway_sent || self.goaway_received) && self.streams.is_empty() && self.block.is_none())
    }

    /// One read into the worker's buffer and every whole frame in it; true if anything was read.
    fn read<IO: AsyncRead>(
        &mut self,
        cx: &mut Context<'_>,
        io: Pin<&mut IO>,
        out: &mut Vec<u8>,
        now: Instant,
    ) -> Result<bool, Error> {
        let mut buffer = buf::take_read();
        let mut read = ReadBuf::new(&mut buffer);
        let result = match io.poll_read(cx, &mut read) {
            Poll::Pending => Ok(false),
            Poll::Ready(Err(error)) => Err(Error::Io(error)),
            Poll::Ready(Ok(())) if read.filled().is_empty() => {
                self.eof = true;
                Ok(true)
            }
            Poll::Ready(Ok(())) => {
                let n = read.filled().len();
                self.last_read = now;
                if let Err(error) = self.receive(&buffer[..n], cx, out) {
                    self.fail(error, out);
                }
                Ok(true)
            }
        };
        buf::give_read(buffer);
        result
    }

    /// Handles every whole frame of `data`, keeping an incomplete one's bytes.
    fn receive(&mut self, mut data: &[u8], cx: &mut Context<'_>, out: &mut Vec<u8>) -> Result {
        if self.preface_left > 0 {
            let at = frame::PREFACE.len() - usize::from(self.preface_left);
            let n = data.len().min(usize::from(self.preface_left));
            if data[..n] != frame::PREFACE[at..at + n] {
                return Err(conn_error(Reason::PROTOCOL_ERROR, "no HTTP/2 preface"));
            }
            self.preface_left -= n as u8;
            data = &data[n..];
        }
        if !self.partial.is_empty() {
            if self.partial.len() < HEAD_LEN {
                let n = data.len().min(HEAD_LEN - self.partial.len());
                self.partial.extend_from_slice(&data[..n]);
                data = &data[n..];
                if self.partial.len() < HEAD_LEN {
                    return Ok(());
                }
                let head = self.check_len(&self.partial)?;
                self.partial.reserve_exact(head.len);
            }
            let head = Head::parse(&self.partial);
            let n = data.len().min(HEAD_LEN + head.len - self.partial.len());
            self.partial.extend_from_slice(&data[..n]);
            data = &data[n..];
            if self.partial.len() < HEAD_LEN + head.len {
                return Ok(());
            }
            let whole = std::mem::take(&mut self.partial);
            self.frame(head, &whole[HEAD_LEN..], cx, out)?;
        }
        while data.len() >= HEAD_LEN {
            let head = self.check_len(data)?;
            if data.len() < HEAD_LEN + head.len {
                break;
            }
            self.frame(head, &data[HEAD_LEN..HEAD_LEN + head.len], cx, out)?;
            data = &data[HEAD_LEN + head.len..];
        }
        if !data.is_empty() {
            let size = if data.len() >= HEAD_LEN { HEAD_LEN + Head::parse(data).len } else { HEAD_LEN };
            let mut partial = Vec::with_capacity(size);
            partial.extend_from_slice(data);
            self.partial = partial;
        }
        Ok(())
    }

    fn check_len(&self, bytes: &[u8]) -> Result<Head> {
        let head = Head::parse(bytes);
        if head.len > frame::MIN_MAX_FRAME_SIZE as usize {
            return Err(conn_error(Reason::FRAME_SIZE_ERROR, "a frame over SETTINGS_MAX_FRAME_SIZE"));
        }
        Ok(head)
    }

    fn frame(&mut self, head: Head, payload: &[u8], cx: &mut Context<'_>, out: &mut Vec<u8>) -> Result {
        if self.error.is_some() {
            return Ok(());
        }
        if let Some(block) = &self.block
            && (head.kind != kind::CONTINUATION || head.stream != block.stream)
        {
            return Err(conn_error(Reason::PROTOCOL_ERROR, "a frame inside a header block"));
        }
        // RFC 9113 §3.4: the preface is followed by SETTINGS. A WINDOW_UPDATE or PING before it
        // is taken as h2 takes it (a client's flow control may send one as soon as it reads the
        // server's SETTINGS); anything else is a connection error.
        let early = matches!(head.kind, kind::WINDOW_UPDATE | kind::PING);
        if !self.got_settings && !early && (head.kind != kind::SETTINGS || head.has(flag::ACK)) {
            return Err(conn_error(Reason::PROTOCOL_ERROR, "the first frame is not SETTINGS"));
        }
        match head.kind {
            kind::DATA => self.on_data(head, payload, cx, out),
            kind::HEADERS => self.on_headers(head, payload, out),
            kind::PRIORITY => self.on_priority(head, payload, out),
            kind::RST_STREAM => self.on_rst_stream(head, payload),
            kind::SETTINGS => self.on_settings(head, payload, out),
            kind::PUSH_PROMISE => Err(conn_error(Reason::PROTOCOL_ERROR, "PUSH_PROMISE from a client")),
            kind::PING => self.on_ping(head, payload, out),
            kind::GOAWAY => self.on_goaway(head, payload),
            kind::WINDOW_UPDATE => self.on_window_update(head, payload, out),
            kind::CONTINUATION => self.on_continuation(head, payload, out),
            _ => Ok(()),
        }
    }

    fn find(&self, id: u32) -> Option<usize> {
        self.streams.iter().position(|s| s.id == id)
    }

    fn on_data(&mut self, head: Head, payload: &[u8], cx: &mut Context<'_>, out: &mut Vec<u8>) -> Result {
        if head.stream == 0 {
            return Err(conn_error(Reason::PROTOCOL_ERROR, "DATA on stream 0"));
        }
        let data = unpadded(head, payload)?;
        let flow = payload.len();
        if flow as i64 > self.recv_window {
            return Err(conn_error(Reason::FLOW_CONTROL_ERROR, "DATA over the connection window"));
        }
        self.recv_window -= flow as i64;
        if head.stream > self.highest {
            return Err(conn_error(Reason::PROTOCOL_ERROR, "DATA on an idle stream"));
        }
        let Some(i) = self.find(head.stream) else {
            // A closed stream: credited at once, and answered as RFC 9113 §5.1 says.
            self.recv_credit += flow;
            frame::rst_stream(out, head.stream, Reason::STREAM_CLOSED);
            return Ok(());
        };
        let stream = &mut self.streams[i];
        if stream.recv_closed {
            self.recv_credit += flow;
            return self.stream_error(head.stream, Reason::STREAM_CLOSED, out);
        }
        if flow as i64 > stream.recv_window {
            self.recv_credit += flow;
            return self.stream_error(head.stream, Reason::FLOW_CONTROL_ERROR, out);
        }
        stream.recv_window -= flow as i64;
        // Padding is taken at once.
        stream.credit += flow - data.len();
        self.recv_credit += flow - data.len();
        if let Some(remaining) = &mut stream.remaining {
            match remaining.checked_sub(data.len() as u64) {
                Some(left) if !head.has(flag::END_STREAM) || left == 0 => *remaining = left,
                _ => {
                    self.recv_credit += data.len();
                    return self.stream_error(head.stream, Reason::PROTOCOL_ERROR, out);
                }
            }
        }
        let taken = match &stream.feed {
            Some(feed) if !data.is_empty() => feed.data(Bytes::copy_from_slice(data), cx.waker()),
            _ => false,
        };
        if !taken {
            stream.credit += data.len();
            self.recv_credit += data.len();
        }
        if head.has(flag::END_STREAM) {
            stream.recv_closed = true;
            if let Some(feed) = &stream.feed {
                feed.end();
            }
        }
        Ok(())
    }

    fn on_priority(&mut self, head: Head, payload: &[u8], out: &mut Vec<u8>) -> Result {
        if head.stream == 0 {
            return Err(conn_error(Reason::PROTOCOL_ERROR, "PRIORITY on stream 0"));
        }
        if payload.len() != 5 {
            return self.stream_error(head.stream, Reason::FRAME_SIZE_ERROR, out);
        }
        let dependency = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & 0x7fff_ffff;
        if dependency == head.stream {
            return self.stream_error(head.stream, Reason::PROTOCOL_ERROR, out);
        }
        Ok(())
    }

    fn on_rst_stream(&mut self, head: Head, payload: &[u8]) -> Result {
        if head.stream == 0 {
            return Err(conn_error(Reason::PROTOCOL_ERROR, "RST_STREAM on stream 0"));
        }
        if payload.len() != 4 {
            return Err(conn_error(Reason::FRAME_SIZE_ERROR, "RST_STREAM not 4 bytes"));
        }
        if head.stream > self.highest {
            return Err(conn_error(Reason::PROTOCOL_ERROR, "RST_STREAM on an idle stream"));
        }
        let Some(i) = self.find(head.stream) else { return Ok(()) };
        let reason = Reason(u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]));
        let unanswered = matches!(self.streams[i].reply, Reply::Calling(_));
        self.remove(i, Some(reason));
        if unanswered {
            self.early_resets += 1;
            if self.early_resets > self.settings.max_pending_accept_reset_streams {
                return Err(conn_error(Reason::ENHANCE_YOUR_CALM, "too many streams reset before their answer"));
            }
        }
        Ok(())
    }

    fn on_settings(&mut self, head: Head, payload: &[u8], out: &mut Vec<u8>) -> Result {
        if head.stream != 0 {
            return Err(conn_error(Reason::PROTOCOL_ERROR, "SETTINGS on a stream"));
        }
        if head.has(flag::ACK) {
            if !payload.is_empty() {
                return Err(conn_error(Reason::FRAME_SIZE_ERROR, "SETTINGS ACK with a payload"));
            }
            if self.settings_deadline.take().is_some() {
                self.decoder.settings_acked();
            }
            return Ok(());
        }
        if !payload.len().is_multiple_of(6) {
            return Err(conn_error(Reason::FRAME_SIZE_ERROR, "SETTINGS not a multiple of 6 bytes"));
        }
        for entry in payload.chunks_exact(6) {
            let id = u16::from_be_bytes([entry[0], entry[1]]);
            let value = u32::from_be_bytes([entry[2], entry[3], entry[4], entry[5]]);
            match id {
                setting::ENABLE_PUSH if value > 1 => {
                    return Err(conn_error(Reason::PROTOCOL_ERROR, "SETTINGS_ENABLE_PUSH not 0 or 1"));
                }
                setting::INITIAL_WINDOW_SIZE => {
                    if i64::from(value) > MAX_WINDOW {
                        return Err(conn_error(Reason::FLOW_CONTROL_ERROR, "SETTINGS_INITIAL_WINDOW_SIZE over 2^31-1"));
                    }
                    let delta = i64::from(value) - i64::from(self.peer_initial_window);
                    for stream in &mut self.streams {
                        stream.send_window += delta;
                        if stream.send_window > MAX_WINDOW {
                            return Err(conn_error(Reason::FLOW_CONTROL_ERROR, "a stream window over 2^31-1"));
                        }
                    }
                    self.peer_initial_window = value;
                }
                setting::MAX_FRAME_SIZE => {
                    if !(frame::MIN_MAX_FRAME_SIZE..=frame::MAX_MAX_FRAME_SIZE).contains(&value) {
                        return Err(conn_error(Reason::PROTOCOL_ERROR, "SETTINGS_MAX_FRAME_SIZE out of range"));
                    }
                    self.peer_max_frame = value;
                }
                _ => {}
            }
        }
        self.got_settings = true;
        frame::settings_ack(out);
        Ok(())
    }

    fn on_ping(&mut self, head: Head, payload: &[u8], out: &mut Vec<u8>) -> Result {
        if head.stream != 0 {
            return Err(conn_error(Reason::PROTOCOL_ERROR, "PING on a stream"));
        }
        let Ok(payload) = <[u8; 8]>::try_from(payload) else {
            return Err(conn_error(Reason::FRAME_SIZE_ERROR, "PING not 8 bytes"));
        };
        if head.has(flag::ACK) {
            if payload == PING_PAYLOAD {
                self.ping_deadline = None;
            }
        } else {
            frame::ping(out, true, payload);
        }
        Ok(())
    }

    fn on_goaway(&mut self, head: Head, payload: &[u8]) -> Result {
        if head.stream != 0 {
            return Err(conn_error(Reason::PROTOCOL_ERROR, "GOAWAY on a stream"));
        }
        if payload.len() < 8 {
            return Err(conn_error(Reason::FRAME_SIZE_ERROR, "GOAWAY shorter than 8 bytes"));
        }
        self.goaway_received = true;
        Ok(())
    }

    fn on_window_update(&mut self, head: Head, payload: &[u8], out: &mut Vec<u8>) -> Result {
        let Ok(bytes) = <[u8; 4]>::try_from(payload) else {
            return Err(conn_error(Reason::FRAME_SIZE_ERROR, "WINDOW_UPDATE not 4 bytes"));
        };
        let increment = i64::from(u32::from_be_bytes(bytes) & 0x7fff_ffff);
        if head.stream == 0 {
            if increment == 0 {
                return Err(conn_error(Reason::PROTOCOL_ERROR, "WINDOW_UPDATE of 0 on the connection"));
            }
            self.send_window += increment;
            if self.send_window > MAX_WINDOW {
                return Err(conn_error(Reason::FLOW_CONTROL_ERROR, "the connection window over 2^31-1"));
            }
            return Ok(());
        }
        if head.stream > self.highest {
            return Err(conn_error(Reason::PROTOCOL_ERROR, "WINDOW_UPDATE on an idle stream"));
        }
        let Some(i) = self.find(head.stream) else { return Ok(()) };
        if increment == 0 {
            return self.stream_error(head.stream, Reason::PROTOCOL_ERROR, out);
        }
        let stream = &mut self.streams[i];
        stream.send_window += increment;
        if stream.send_window > MAX_WINDOW {
            return self.stream_error(head.stream, Reason::FLOW_CONTROL_ERROR, out);
        }
        Ok(())
    }

    /// A stream error the client caused: RST_STREAM, counted against
    /// `max_local_error_reset_streams`.
    fn stream_error(&mut self, id: u32, reason: Reason, out: &mut Vec<u8>) -> Result {
        self.reset(id, reason, out)?;
        self.local_resets += 1;
        if self.local_resets > self.settings.max_local_error_reset_streams {
            return Err(conn_error(Reason::ENHANCE_YOUR_CALM, "too many stream errors"));
        }
        Ok(())
    }

    /// RST_STREAM, and the stream (if open) removed.
    fn reset(&mut self, id: u32, reason: Reason, out: &mut Vec<u8>) -> Result {
        frame::rst_stream(out, id, reason);
        if let Some(i) = self.find(id) {
            self.remove(i, Some(reason));
        }
        Ok(())
    }

    /// Removes stream `i`; its request body ends with `reset` (if any), and what it still held
    /// is credited to the connection's window.
    fn remove(&mut self, i: usize, reset: Option<Reason>) {
        let stream = self.streams.swap_remove(i);
        if let Some(feed) = stream.feed {
            if let Some(reason) = reset {
                feed.reset(reason);
            }
            self.recv_credit += feed.take_consumed().0 + feed.unconsumed();
        }
    }

    /// Polls every stream's call or body, and credits what calls took of their request bodies.
    fn poll_streams(&mut self, cx: &mut Context<'_>, out: &mut Vec<u8>) -> Result {
        let max_frame = self.peer_max_frame as usize;
        let threshold = (self.settings.initial_stream_window as usize / 2).max(1);
        let mut i = 0;
        while i < self.streams.len() {
            let room =
                self.settings.max_send_buffer_bytes.saturating_sub(out.len() + self.unsent.len() - self.unsent_from);
            let stream = &mut self.streams[i];
            if let Some(feed) = &stream.feed {
                let (taken, _) = feed.take_consumed();
                stream.credit += taken;
                self.recv_credit += taken;
            }
            if !stream.recv_closed && stream.credit >= threshold {
                frame::window_update(out, stream.id, stream.credit as u32);
                stream.recv_window += stream.credit as i64;
                stream.credit = 0;
            }
            match answer::drive(stream, cx, out, &mut self.send_window, max_frame, room) {
                Outcome::Pending => i += 1,
                Outcome::Done => {
                    let id = stream.id;
                    if !stream.recv_closed {
                        // §8.1: the response is whole; the rest of the request is not needed.
                        frame::rst_stream(out, id, Reason::NO_ERROR);
                        self.remove(i, Some(Reason::NO_ERROR));
                    } else {
                        self.remove(i, None);
                    }
                    self.early_resets = self.early_resets.saturating_sub(1);
                }
                Outcome::Reset(reason) => {
                    let id = stream.id;
                    frame::rst_stream(out, id, reason);
                    self.remove(i, Some(reason));
                }
            }
        }
        let connection_threshold = (self.settings.connection_window as usize / 2).max(1);
        if self.recv_credit >= connection_threshold && self.error.is_none() {
            frame::window_update(out, 0, self.recv_credit as u32);
            self.recv_window += self.recv_credit as i64;
            self.recv_credit = 0;
        }
        Ok(())
    }

    /// Settings ACK deadline and keep-alive PING.
    fn timers(&mut self, now: Instant, out: &mut Vec<u8>) -> Result<(), Error> {
        if self.settings_deadline.is_some_and(|deadline| now >= deadline) {
            self.settings_deadline = None;
            self.fail(conn_error(Reason::SETTINGS_TIMEOUT, "SETTINGS not acknowledged in time"), out);
            return Ok(());
        }
        let Some(interval) = self.settings.keepalive_interval else { return Ok(()) };
        match self.ping_deadline {
            Some(deadline) if now >= deadline => Err(Error::KeepAliveTimeout),
            Some(_) => Ok(()),
            None if now >= self.last_read + interval => {
                frame::ping(out, false, PING_PAYLOAD);
                self.ping_deadline = Some(now + self.settings.keepalive_timeout);
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Sets the timer to the next deadline.
    fn arm(&mut self, cx: &mut Context<'_>, mut sleep: Pin<&mut Sleep>, now: Instant) {
        let mut next = self.settings_deadline;
        let mut earliest = |at: Instant| next = Some(next.map_or(at, |n| n.min(at)));
        if let Some(deadline) = self.ping_deadline {
            earliest(deadline);
        } else if let Some(interval) = self.settings.keepalive_interval {
            earliest(self.last_read + interval);
        }
        if let Some(deadline) = self.linger_deadline {
            earliest(deadline);
        }
        let Some(next) = next else { return };
        if sleep.deadline() != next {
            sleep.as_mut().reset(next);
        }
        if next <= now || sleep.poll(cx).is_ready() {
            cx.waker().wake_by_ref();
        }
    }

    /// A connection error: GOAWAY, every stream ended, nothing more read.
    fn fail(&mut self, error: ConnError, out: &mut Vec<u8>) {
        if self.error.is_some() {
            return;
        }
        tracing::debug!(reason = %error.reason, why = error.why, "Closing an HTTP/2 connection for a protocol error.");
        frame::goaway(out, self.highest, error.reason);
        self.error = Some(error);
        self.block = None;
        self.partial = Vec::new();
        while !self.streams.is_empty() {
            self.remove(0, Some(Reason::CANCEL));
        }
    }

    /// Writes what the socket takes: first what it did not take before, then `out`; the rest is
    /// kept.
    fn flush<IO: AsyncWrite>(
        &mut self,
        cx: &mut Context<'_>,
        mut io: Pin<&mut IO>,
        out: &mut Vec<u8>,
    ) -> Result<(), Error> {
        while self.unsent_from < self.unsent.len() {
            match io.as_mut().poll_write(cx, &self.unsent[self.unsent_from..]) {
                Poll::Ready(Ok(0)) => return Err(Error::Io(std::io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => {
                    self.unsent_from += n;
                    self.needs_flush = true;
                }
                Poll::Ready(Err(error)) => return Err(Error::Io(error)),
                Poll::Pending => break,
            }
        }
        if self.unsent_from == self.unsent.len() && !self.unsent.is_empty() {
            self.unsent = Vec::new();
            self.unsent_from = 0;
        }
        if !out.is_empty() {
            let mut sent = 0;
            if self.unsent.is_empty() {
                while sent < out.len() {
                    match io.as_mut().poll_write(cx, &out[sent..]) {
                        Poll::Ready(Ok(0)) => return Err(Error::Io(std::io::ErrorKind::WriteZero.into())),
                        Poll::Ready(Ok(n)) => {
                            sent += n;
                            self.needs_flush = true;
                        }
                        Poll::Ready(Err(error)) => return Err(Error::Io(error)),
                        Poll::Pending => break,
                    }
                }
            } else if self.unsent_from > 0 {
                self.unsent.drain(..self.unsent_from);
                self.unsent_from = 0;
            }
            if sent < out.len() {
                self.unsent.extend_from_slice(&out[sent..]);
            }
            out.clear();
        }
        if self.needs_flush {
            match io.poll_flush(cx) {
                Poll::Ready(Ok(())) => self.needs_flush = false,
                Poll::Ready(Err(error)) => return Err(Error::Io(error)),
                Poll::Pending => {}
            }
        }
        Ok(())
    }

    fn result(&self) -> Result<(), Error> {
        match self.error {
            Some(error) => Err(Error::Protocol { reason: error.reason, why: error.why }),
            None => Ok(()),
        }
    }

    /// The connection is done: what is unsent is written (within the linger after an error),
    /// the socket shut down, and after an error what the client still sends is read and dropped
    /// until it closes or the linger ends.
    fn close<IO: AsyncRead + AsyncWrite>(
        &mut self,
        cx: &mut Context<'_>,
        mut io: Pin<&mut IO>,
        mut sleep: Pin<&mut Sleep>,
        now: Instant,
    ) -> Poll<Result<(), Error>> {
        if self.error.is_some() && self.linger_deadline.is_none() {
            self.linger_deadline = Some(now + LINGER);
        }
        if self.linger_deadline.is_some_and(|deadline| now >= deadline) {
            return Poll::Ready(self.result());
        }
        if self.eof && self.error.is_none() {
            return Poll::Ready(Ok(()));
        }
        if self.unsent_from < self.unsent.len() || self.needs_flush {
            self.arm(cx, sleep.as_mut(), now);
            return Poll::Pending;
        }
        if !self.shut_down {
            match io.as_mut().poll_shutdown(cx) {
                Poll::Pending => {
                    self.arm(cx, sleep, now);
                    return Poll::Pending;
                }
                Poll::Ready(_) => self.shut_down = true,
            }
        }
        if self.error.is_none() || self.eof {
            return Poll::Ready(self.result());
        }
        // Linger: read and drop until the client closes.
        let mut buffer = buf::take_read();
        let outcome = loop {
            let mut read = ReadBuf::new(&mut buffer);
            match io.as_mut().poll_read(cx, &mut read) {
                Poll::Ready(Ok(())) if !read.filled().is_empty() => continue,
                Poll::Ready(_) => break Poll::Ready(self.result()),
                Poll::Pending => break Poll::Pending,
            }
        };
        buf::give_read(buffer);
        if outcome.is_pending() {
            self.arm(cx, sleep, now);
        }
        outcome
    }
}

/// A DATA or HEADERS payload without its padding.
fn unpadded(head: Head, payload: &[u8]) -> Result<&[u8]> {
    if !head.has(flag::PADDED) {
        return Ok(payload);
    }
    let (&pad, rest) =
        payload.split_first().ok_or(conn_error(Reason::PROTOCOL_ERROR, "padded frame without its pad length"))?;
    let pad = usize::from(pad);
    if pad >= payload.len() {
        return Err(conn_error(Reason::PROTOCOL_ERROR, "padding as long as the frame"));
    }
    Ok(&rest[..rest.len() - pad])
}
