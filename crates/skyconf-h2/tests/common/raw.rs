//! A raw-frame client over any socket: frames written by hand, frames read whole.

#![allow(dead_code, unreachable_pub)]

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut out = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

pub fn settings(values: &[(u16, u32)]) -> Vec<u8> {
    let mut payload = Vec::new();
    for (id, value) in values {
        payload.extend_from_slice(&id.to_be_bytes());
        payload.extend_from_slice(&value.to_be_bytes());
    }
    frame(4, 0, 0, &payload)
}

pub fn settings_ack() -> Vec<u8> {
    frame(4, 1, 0, &[])
}

/// A request's header block: literals without indexing, so no table is needed.
pub fn request_block(path: &str) -> Vec<u8> {
    let mut block = Vec::new();
    for (name, value) in [(":method", "POST"), (":scheme", "http"), (":authority", "t"), (":path", path)] {
        block.push(0);
        block.push(name.len() as u8);
        block.extend_from_slice(name.as_bytes());
        block.push(value.len() as u8);
        block.extend_from_slice(value.as_bytes());
    }
    block
}

pub fn headers(stream: u32, path: &str, end_stream: bool) -> Vec<u8> {
    frame(1, 4 | u8::from(end_stream), stream, &request_block(path))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
}

impl Frame {
    /// The error code of a GOAWAY or RST_STREAM.
    pub fn code(&self) -> u32 {
        let at = if self.kind == 7 { 4 } else { 0 };
        u32::from_be_bytes(self.payload[at..at + 4].try_into().unwrap())
    }
}

pub async fn read_frame(io: &mut (impl AsyncRead + Unpin)) -> Option<Frame> {
    let mut head = [0u8; 9];
    io.read_exact(&mut head).await.ok()?;
    let len = (usize::from(head[0]) << 16) | (usize::from(head[1]) << 8) | usize::from(head[2]);
    let mut payload = vec![0; len];
    io.read_exact(&mut payload).await.ok()?;
    Some(Frame {
        kind: head[3],
        flags: head[4],
        stream: u32::from_be_bytes(head[5..9].try_into().unwrap()) & 0x7fff_ffff,
        payload,
    })
}

/// Preface and SETTINGS, then the server's SETTINGS acknowledged (when `ack`).
pub async fn handshake(io: &mut (impl AsyncRead + AsyncWrite + Unpin), values: &[(u16, u32)], ack: bool) {
    let mut hello = PREFACE.to_vec();
    hello.extend(settings(values));
    io.write_all(&hello).await.unwrap();
    loop {
        let frame = read_frame(io).await.expect("the server's SETTINGS");
        if frame.kind == 4 && frame.flags & 1 == 0 {
            break;
        }
    }
    if ack {
        io.write_all(&settings_ack()).await.unwrap();
    }
}

/// Reads until a frame of `kind` (on `stream`, when given) or the end.
pub async fn until(io: &mut (impl AsyncRead + Unpin), kind: u8, stream: Option<u32>) -> Option<Frame> {
    loop {
        let frame = read_frame(io).await?;
        if frame.kind == kind && stream.is_none_or(|s| s == frame.stream) {
            return Some(frame);
        }
    }
}
