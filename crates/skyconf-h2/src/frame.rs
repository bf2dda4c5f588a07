//! HTTP/2 frames (RFC 9113 §4, §6): the 9-byte header, the type and flag constants, error codes,
//! and the writers of the frames the server sends. Frames are written straight into the caller's
//! buffer (the worker's, see `crate::buf`); nothing here allocates.

/// The client connection preface (§3.4).
pub(crate) const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The length of a frame header.
pub(crate) const HEAD_LEN: usize = 9;

/// The protocol's smallest `SETTINGS_MAX_FRAME_SIZE`, the one the server advertises.
pub(crate) const MIN_MAX_FRAME_SIZE: u32 = 16_384;

/// The largest `SETTINGS_MAX_FRAME_SIZE` a peer may advertise.
pub(crate) const MAX_MAX_FRAME_SIZE: u32 = 16_777_215;

/// The largest flow-control window (§6.9.1).
pub(crate) const MAX_WINDOW: i64 = (1 << 31) - 1;

/// The initial flow-control window of RFC 9113 (§6.9.2).
pub(crate) const DEFAULT_WINDOW: u32 = 65_535;

/// Frame types (§6).
pub(crate) mod kind {
    pub(crate) const DATA: u8 = 0x0;
    pub(crate) const HEADERS: u8 = 0x1;
    pub(crate) const PRIORITY: u8 = 0x2;
    pub(crate) const RST_STREAM: u8 = 0x3;
    pub(crate) const SETTINGS: u8 = 0x4;
    pub(crate) const PUSH_PROMISE: u8 = 0x5;
    pub(crate) const PING: u8 = 0x6;
    pub(crate) const GOAWAY: u8 = 0x7;
    pub(crate) const WINDOW_UPDATE: u8 = 0x8;
    pub(crate) const CONTINUATION: u8 = 0x9;
}

/// Frame flags.
pub(crate) mod flag {
    pub(crate) const END_STREAM: u8 = 0x1;
    pub(crate) const ACK: u8 = 0x1;
    pub(crate) const END_HEADERS: u8 = 0x4;
    pub(crate) const PADDED: u8 = 0x8;
    pub(crate) const PRIORITY: u8 = 0x20;
}

/// Setting identifiers (§6.5.2).
pub(crate) mod setting {
    pub(crate) const HEADER_TABLE_SIZE: u16 = 0x1;
    pub(crate) const ENABLE_PUSH: u16 = 0x2;
    pub(crate) const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    pub(crate) const INITIAL_WINDOW_SIZE: u16 = 0x4;
    pub(crate) const MAX_FRAME_SIZE: u16 = 0x5;
    pub(crate) const MAX_HEADER_LIST_SIZE: u16 = 0x6;
}

/// An HTTP/2 error code (§7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reason(pub u32);

impl Reason {
    /// Graceful shutdown, or a stream ended early with nothing wrong.
    pub const NO_ERROR: Self = Self(0x0);
    /// The peer broke the protocol.
    pub const PROTOCOL_ERROR: Self = Self(0x1);
    /// The server failed.
    pub const INTERNAL_ERROR: Self = Self(0x2);
    /// Flow control was broken.
    pub const FLOW_CONTROL_ERROR: Self = Self(0x3);
    /// SETTINGS were not acknowledged in time.
    pub const SETTINGS_TIMEOUT: Self = Self(0x4);
    /// A frame came on a closed stream.
    pub const STREAM_CLOSED: Self = Self(0x5);
    /// A frame had the wrong size.
    pub const FRAME_SIZE_ERROR: Self = Self(0x6);
    /// The stream was refused before any processing.
    pub const REFUSED_STREAM: Self = Self(0x7);
    /// The stream is no longer needed.
    pub const CANCEL: Self = Self(0x8);
    /// The header compression context cannot be kept.
    pub const COMPRESSION_ERROR: Self = Self(0x9);
    /// The peer behaves in a way that costs too much.
    pub const ENHANCE_YOUR_CALM: Self = Self(0xb);
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self.0 {
            0x0 => "NO_ERROR",
            0x1 => "PROTOCOL_ERROR",
            0x2 => "INTERNAL_ERROR",
            0x3 => "FLOW_CONTROL_ERROR",
            0x4 => "SETTINGS_TIMEOUT",
            0x5 => "STREAM_CLOSED",
            0x6 => "FRAME_SIZE_ERROR",
            0x7 => "REFUSED_STREAM",
            0x8 => "CANCEL",
            0x9 => "COMPRESSION_ERROR",
            0xa => "CONNECT_ERROR",
            0xb => "ENHANCE_YOUR_CALM",
            0xc => "INADEQUATE_SECURITY",
            0xd => "HTTP_1_1_REQUIRED",
            _ => return write!(f, "error code {:#x}", self.0),
        };
        f.write_str(name)
    }
}

/// A frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Head {
    pub(crate) len: usize,
    pub(crate) kind: u8,
    pub(crate) flags: u8,
    pub(crate) stream: u32,
}

impl Head {
    /// The header at the start of `bytes` (at least [`HEAD_LEN`] long); the reserved bit is ignored.
    pub(crate) fn parse(bytes: &[u8]) -> Self {
        let len = (usize::from(bytes[0]) << 16) | (usize::from(bytes[1]) << 8) | usize::from(bytes[2]);
        let stream = u32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]) & 0x7fff_ffff;
        Self { len, kind: bytes[3], flags: bytes[4], stream }
    }

    pub(crate) fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// Appends a frame header.
pub(crate) fn head(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    out.extend_from_slice(&head_bytes(len, kind, flags, stream));
}

fn head_bytes(len: usize, kind: u8, flags: u8, stream: u32) -> [u8; HEAD_LEN] {
    debug_assert!(len < 1 << 24);
    let id = stream.to_be_bytes();
    [(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags, id[0], id[1], id[2], id[3]]
}

/// Appends a SETTINGS frame with `values`.
pub(crate) fn settings(out: &mut Vec<u8>, values: &[(u16, u32)]) {
    head(out, values.len() * 6, kind::SETTINGS, 0, 0);
    for (id, value) in values {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&value.to_be_bytes());
    }
}

pub(crate) fn settings_ack(out: &mut Vec<u8>) {
    head(out, 0, kind::SETTINGS, flag::ACK, 0);
}

pub(crate) fn ping(out: &mut Vec<u8>, ack: bool, payload: [u8; 8]) {
    head(out, 8, kind::PING, if ack { flag::ACK } else { 0 }, 0);
    out.extend_from_slice(&payload);
}

pub(crate) fn goaway(out: &mut Vec<u8>, last_stream: u32, reason: Reason) {
    head(out, 8, kind::GOAWAY, 0, 0);
    out.extend_from_slice(&last_stream.to_be_bytes());
    out.extend_from_slice(&reason.0.to_be_bytes());
}

pub(crate) fn rst_stream(out: &mut Vec<u8>, stream: u32, reason: Reason) {
    head(out, 4, kind::RST_STREAM, 0, stream);
    out.extend_from_slice(&reason.0.to_be_bytes());
}

pub(crate) fn window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    head(out, 4, kind::WINDOW_UPDATE, 0, stream);
    out.extend_from_slice(&increment.to_be_bytes());
}

pub(crate) fn data(out: &mut Vec<u8>, stream: u32, payload: &[u8], end_stream: bool) {
    head(out, payload.len(), kind::DATA, if end_stream { flag::END_STREAM } else { 0 }, stream);
    out.extend_from_slice(payload);
}

/// Appends a header block as HEADERS and, past `max_frame` bytes, CONTINUATION frames. The
/// block is encoded by `encode` straight into `out` after a placeholder header, and moved apart
/// into frames only when it is larger than one frame.
pub(crate) fn headers(
    out: &mut Vec<u8>,
    stream: u32,
    end_stream: bool,
    max_frame: usize,
    encode: impl FnOnce(&mut Vec<u8>),
) {
    let start = out.len();
    head(out, 0, kind::HEADERS, 0, stream);
    encode(out);
    let len = out.len() - start - HEAD_LEN;
    let end = if end_stream { flag::END_STREAM } else { 0 };
    if len <= max_frame {
        out[start..start + HEAD_LEN].copy_from_slice(&head_bytes(len, kind::HEADERS, end | flag::END_HEADERS, stream));
        return;
    }
    let block = out.split_off(start + HEAD_LEN);
    out.truncate(start);
    let mut chunks = block.chunks(max_frame).peekable();
    let mut first = true;
    while let Some(chunk) = chunks.next() {
        let last = chunks.peek().is_none();
        let (kind, flags) = if first { (kind::HEADERS, end) } else { (kind::CONTINUATION, 0) };
        head(out, chunk.len(), kind, flags | if last { flag::END_HEADERS } else { 0 }, stream);
        out.extend_from_slice(chunk);
        first = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_header_block_is_split_into_continuations() {
        let mut out = Vec::new();
        headers(&mut out, 1, true, 16, |out| out.extend_from_slice(&[7u8; 40]));
        let first = Head::parse(&out);
        assert_eq!((first.len, first.kind, first.flags, first.stream), (16, kind::HEADERS, flag::END_STREAM, 1));
        let second = Head::parse(&out[25..]);
        assert_eq!((second.len, second.kind, second.flags), (16, kind::CONTINUATION, 0));
        let third = Head::parse(&out[50..]);
        assert_eq!((third.len, third.kind, third.flags), (8, kind::CONTINUATION, flag::END_HEADERS));
        assert_eq!(out.len(), 3 * 9 + 40);

        let mut small = Vec::new();
        headers(&mut small, 3, false, 16, |out| out.extend_from_slice(&[1, 2]));
        assert_eq!(Head::parse(&small), Head { len: 2, kind: kind::HEADERS, flags: flag::END_HEADERS, stream: 3 });
    }
}
