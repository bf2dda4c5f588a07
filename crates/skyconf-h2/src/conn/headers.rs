//! A stream's header blocks: HEADERS and CONTINUATION put together (their compressed size
//! bounded), decoded, and taken as a new request, its trailers, or a stream to refuse.

use bytes::Bytes;

use super::{Block, BlockKind, Connection, Reply, Result, Stream, conn_error, unpadded};
use crate::Service;
use crate::body::RecvBody;
use crate::fields::Fields;
use crate::frame::{self, HEAD_LEN, Head, Reason, flag};

impl<S: Service> Connection<S> {
    pub(super) fn on_headers(&mut self, head: Head, payload: &[u8], out: &mut Vec<u8>) -> Result {
        if head.stream == 0 {
            return Err(conn_error(Reason::PROTOCOL_ERROR, "HEADERS on stream 0"));
        }
        let mut fragment = unpadded(head, payload)?;
        let mut self_dependent = false;
        if head.has(flag::PRIORITY) {
            if fragment.len() < 5 {
                return Err(conn_error(Reason::FRAME_SIZE_ERROR, "HEADERS too short for its priority"));
            }
            let dependency = u32::from_be_bytes([fragment[0], fragment[1], fragment[2], fragment[3]]) & 0x7fff_ffff;
            self_dependent = dependency == head.stream;
            fragment = &fragment[5..];
        }
        if head.stream.is_multiple_of(2) {
            return Err(conn_error(Reason::PROTOCOL_ERROR, "HEADERS on an even stream id"));
        }
        let end_stream = head.has(flag::END_STREAM);
        let kind = if let Some(i) = self.find(head.stream) {
            if self.streams[i].recv_closed {
                BlockKind::Reset(Reason::STREAM_CLOSED, true)
            } else if !end_stream || self_dependent {
                // Trailers end the stream; a stream cannot depend on itself.
                BlockKind::Reset(Reason::PROTOCOL_ERROR, true)
            } else {
                BlockKind::Trailers
            }
        } else if head.stream <= self.highest {
            return Err(conn_error(Reason::STREAM_CLOSED, "HEADERS on a closed stream"));
        } else {
            self.highest = head.stream;
            if self.goaway_sent || self.goaway_pending {
                BlockKind::Ignore
            } else if self_dependent {
                BlockKind::Reset(Reason::PROTOCOL_ERROR, true)
            } else if self.streams.len() >= self.settings.max_concurrent_streams as usize {
                BlockKind::Reset(Reason::REFUSED_STREAM, true)
            } else {
                BlockKind::Open
            }
        };
        let counted = HEAD_LEN + payload.len();
        if counted > self.max_block() {
            return Err(conn_error(Reason::ENHANCE_YOUR_CALM, "a header block over its bound"));
        }
        if head.has(flag::END_HEADERS) {
            return self.on_block(head.stream, end_stream, kind, fragment, out);
        }
        self.block = Some(Block { stream: head.stream, end_stream, kind, bytes: fragment.to_vec(), counted });
        Ok(())
    }

    /// A header block's compressed size bound: twice the header list limit (a block within the
    /// limit is smaller than the list it decodes to, HPACK's literals cost at most 32 bytes a
    /// field less than §4.1 counts), so a list somewhat over the limit is still decoded and
    /// answered 431, and a larger block closes the connection.
    fn max_block(&self) -> usize {
        2 * (self.settings.max_header_list_bytes as usize).max(frame::MIN_MAX_FRAME_SIZE as usize)
    }

    pub(super) fn on_continuation(&mut self, head: Head, payload: &[u8], out: &mut Vec<u8>) -> Result {
        let max = self.max_block();
        let Some(block) = &mut self.block else {
            return Err(conn_error(Reason::PROTOCOL_ERROR, "CONTINUATION without HEADERS"));
        };
        block.counted += HEAD_LEN + payload.len();
        if block.counted > max {
            return Err(conn_error(Reason::ENHANCE_YOUR_CALM, "a header block over its bound"));
        }
        block.bytes.extend_from_slice(payload);
        if head.has(flag::END_HEADERS) {
            let block = self.block.take().expect("checked above");
            return self.on_block(block.stream, block.end_stream, block.kind, &block.bytes, out);
        }
        Ok(())
    }

    /// A whole header block.
    fn on_block(&mut self, id: u32, end_stream: bool, kind: BlockKind, block: &[u8], out: &mut Vec<u8>) -> Result {
        let mut fields = Fields::new(self.settings.max_header_list_bytes as usize, kind == BlockKind::Trailers);
        self.decoder
            .decode(block, |name, value| fields.field(name, value))
            .map_err(|error| conn_error(Reason::COMPRESSION_ERROR, error.0))?;
        match kind {
            BlockKind::Ignore => Ok(()),
            BlockKind::Reset(reason, counted) => {
                if counted {
                    self.stream_error(id, reason, out)
                } else {
                    self.reset(id, reason, out)
                }
            }
            BlockKind::Trailers => {
                let Some(i) = self.find(id) else { return Ok(()) };
                if fields.too_large() {
                    return self.stream_error(id, Reason::PROTOCOL_ERROR, out);
                }
                if self.streams[i].remaining.is_some_and(|left| left != 0) {
                    return self.stream_error(id, Reason::PROTOCOL_ERROR, out);
                }
                match fields.into_trailers() {
                    Ok(trailers) => {
                        let stream = &mut self.streams[i];
                        stream.recv_closed = true;
                        if let Some(feed) = &stream.feed {
                            feed.trailers(trailers);
                        }
                        Ok(())
                    }
                    Err(why) => {
                        tracing::debug!(stream = id, why, "Malformed request trailers.");
                        self.stream_error(id, Reason::PROTOCOL_ERROR, out)
                    }
                }
            }
            BlockKind::Open => self.open(id, end_stream, fields, out),
        }
    }

    /// A new stream's request: called, or answered at once when it cannot be.
    fn open(&mut self, id: u32, end_stream: bool, fields: Fields, out: &mut Vec<u8>) -> Result {
        if fields.too_large() {
            frame::headers(out, id, true, self.peer_max_frame as usize, |out| {
                crate::hpack::encode_status(out, http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
            });
            if !end_stream {
                frame::rst_stream(out, id, Reason::NO_ERROR);
            }
            return Ok(());
        }
        let head = match fields.into_request() {
            Ok(head) if end_stream && head.content_length.is_some_and(|n| n > 0) => {
                return self.stream_error(id, Reason::PROTOCOL_ERROR, out);
            }
            Ok(head) => head,
            Err(why) => {
                tracing::debug!(stream = id, why, "Malformed request.");
                return self.stream_error(id, Reason::PROTOCOL_ERROR, out);
            }
        };
        let (body, feed) = if end_stream {
            (RecvBody::empty(), None)
        } else {
            let (body, feed) = RecvBody::channel();
            (body, Some(feed))
        };
        let future = self.service.call(head.request.map(|()| body));
        self.streams.push(Stream {
            id,
            recv_closed: end_stream,
            reply: Reply::Calling(future),
            chunk: Bytes::new(),
            send_window: i64::from(self.peer_initial_window),
            recv_window: i64::from(self.settings.initial_stream_window),
            credit: 0,
            feed,
            remaining: head.content_length,
        });
        Ok(())
    }
}
