//! Bytes on the wire.
//!
//! - **Plain HTTP**: the body is one `AgentToServer` (request) or `ServerToAgent` (response),
//!   `Content-Type: application/x-protobuf`. A request body may be gzip-compressed
//!   (`Content-Encoding: gzip`); a response is compressed when the request's `Accept-Encoding`
//!   allows gzip and the message is large enough to gain from it ([`GZIP_MIN_BYTES`]).
//!   Decompression stops at the message limit, so a small compressed body cannot expand into
//!   unbounded memory.
//! - **WebSocket**: each binary message is a varint header (0 in this version of the spec)
//!   followed by the encoded message. Any other header value means a malformed message.

use std::io::Read as _;

use bytes::Bytes;
use http::HeaderMap;
use prost::Message as _;

use crate::wire::{AgentToServer, ServerToAgent};

/// The content type of both directions of the plain HTTP transport.
pub const CONTENT_TYPE: &str = "application/x-protobuf";

/// Responses shorter than this are sent uncompressed: gzip's own framing (18 bytes) outweighs
/// what it saves on an acknowledgement of a few bytes.
pub const GZIP_MIN_BYTES: usize = 128;

/// How a request body is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// As is.
    Identity,
    /// gzip (one or more members).
    Gzip,
}

/// Why bytes are not a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// `Content-Encoding` names something other than gzip or identity.
    #[error("unsupported Content-Encoding {0:?}; gzip and identity are supported")]
    UnsupportedEncoding(String),
    /// The (decompressed) message is over the limit.
    #[error("the message is larger than {limit} bytes")]
    TooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// The gzip stream is corrupt or truncated.
    #[error("the gzip body cannot be decompressed: {0}")]
    Gzip(String),
    /// A WebSocket message without its header byte(s).
    #[error("the WebSocket message has no header")]
    MissingHeader,
    /// A WebSocket header other than 0.
    #[error("unsupported WebSocket message header {0}; this version of OpAMP defines 0 only")]
    UnsupportedHeader(u64),
    /// The bytes are not an `AgentToServer`.
    #[error("not an AgentToServer message: {0}")]
    Malformed(String),
}

/// The request's `Content-Encoding`.
pub fn request_encoding(headers: &HeaderMap) -> Result<Encoding, CodecError> {
    let mut encoding = Encoding::Identity;
    for value in headers.get_all(http::header::CONTENT_ENCODING) {
        let text = value.to_str().map_err(|_| CodecError::UnsupportedEncoding("(not text)".into()))?;
        for token in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            if token.eq_ignore_ascii_case("gzip") || token.eq_ignore_ascii_case("x-gzip") {
                if encoding == Encoding::Gzip {
                    // Nested gzip is not something a client does.
                    return Err(CodecError::UnsupportedEncoding(text.to_owned()));
                }
                encoding = Encoding::Gzip;
            } else if !token.eq_ignore_ascii_case("identity") {
                return Err(CodecError::UnsupportedEncoding(token.to_owned()));
            }
        }
    }
    Ok(encoding)
}

/// Whether `Accept-Encoding` allows a gzip response (`gzip` or `*`, with a non-zero q).
pub fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers.get_all(http::header::ACCEPT_ENCODING).iter().filter_map(|v| v.to_str().ok()).any(|text| {
        text.split(',').any(|item| {
            let mut parts = item.split(';').map(str::trim);
            let coding = parts.next().unwrap_or("");
            let refused = parts.any(|p| {
                p.strip_prefix("q=").or_else(|| p.strip_prefix("Q=")).is_some_and(|q| q.parse::<f32>() == Ok(0.0))
            });
            (coding.eq_ignore_ascii_case("gzip") || coding == "*") && !refused
        })
    })
}

/// Decodes a plain HTTP request body of `encoding`; `limit` bounds the message after
/// decompression.
pub fn decode_body(encoding: Encoding, body: &[u8], limit: usize) -> Result<AgentToServer, CodecError> {
    match encoding {
        Encoding::Identity if body.len() > limit => Err(CodecError::TooLarge { limit }),
        Encoding::Identity => decode(body),
        Encoding::Gzip => decode(&gunzip(body, limit)?),
    }
}

/// `body` decompressed, or [`CodecError::TooLarge`] as soon as it passes `limit` bytes.
pub fn gunzip(body: &[u8], limit: usize) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::with_capacity(body.len().saturating_mul(4).min(limit));
    let reader = flate2::read::MultiGzDecoder::new(body);
    reader.take(limit as u64 + 1).read_to_end(&mut out).map_err(|e| CodecError::Gzip(e.to_string()))?;
    if out.len() > limit {
        return Err(CodecError::TooLarge { limit });
    }
    Ok(out)
}

/// `bytes` gzip-compressed.
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut encoder =
        flate2::write::GzEncoder::new(Vec::with_capacity(bytes.len() / 2 + 32), flate2::Compression::fast());
    encoder.write_all(bytes).expect("writing to a Vec cannot fail");
    encoder.finish().expect("writing to a Vec cannot fail")
}

/// Encodes a response: its body and whether it is gzip-compressed.
pub fn encode_body(message: &ServerToAgent, gzip_allowed: bool) -> (Bytes, bool) {
    let bytes = message.encode_to_vec();
    if gzip_allowed && bytes.len() >= GZIP_MIN_BYTES {
        (Bytes::from(gzip(&bytes)), true)
    } else {
        (Bytes::from(bytes), false)
    }
}

/// Decodes one WebSocket message: the header, which must be 0, then an `AgentToServer`.
pub fn decode_frame(frame: &[u8]) -> Result<AgentToServer, CodecError> {
    let mut rest = frame;
    if rest.is_empty() {
        return Err(CodecError::MissingHeader);
    }
    let header = prost::encoding::decode_varint(&mut rest).map_err(|e| CodecError::Malformed(e.to_string()))?;
    if header != 0 {
        return Err(CodecError::UnsupportedHeader(header));
    }
    decode(rest)
}

/// Encodes one WebSocket message: header 0, then the message.
pub fn encode_frame(message: &ServerToAgent) -> Bytes {
    let mut out = Vec::with_capacity(1 + message.encoded_len());
    out.push(0);
    message.encode(&mut out).expect("a Vec grows as needed");
    Bytes::from(out)
}

fn decode(bytes: &[u8]) -> Result<AgentToServer, CodecError> {
    AgentToServer::decode(bytes).map_err(|e| CodecError::Malformed(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(name: http::HeaderName, value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(name, HeaderValue::from_str(value).unwrap());
        h
    }

    fn message() -> AgentToServer {
        AgentToServer {
            instance_uid: Bytes::from_static(&[9; 16]),
            sequence_num: 3,
            capabilities: 1,
            ..Default::default()
        }
    }

    #[test]
    fn a_request_body_reads_plain_or_gzipped() {
        let bytes = message().encode_to_vec();
        assert_eq!(decode_body(Encoding::Identity, &bytes, 1024).unwrap(), message());
        assert_eq!(decode_body(Encoding::Gzip, &gzip(&bytes), 1024).unwrap(), message());
        assert_eq!(decode_body(Encoding::Identity, &bytes, 3), Err(CodecError::TooLarge { limit: 3 }));
        assert!(matches!(decode_body(Encoding::Gzip, b"not gzip", 1024), Err(CodecError::Gzip(_))));
        assert!(matches!(decode_body(Encoding::Identity, &[0xff, 0xff], 1024), Err(CodecError::Malformed(_))));
    }

    #[test]
    fn a_gzip_bomb_stops_at_the_limit() {
        // 16 MiB of zeros compress to about 16 KiB; the decoder gives up after 1 MiB + 1.
        use std::io::Write as _;
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        encoder.write_all(&vec![0u8; 16 << 20]).unwrap();
        let bomb = encoder.finish().unwrap();
        assert!(bomb.len() < 64 << 10, "{}", bomb.len());
        assert_eq!(gunzip(&bomb, 1 << 20), Err(CodecError::TooLarge { limit: 1 << 20 }));
    }

    #[test]
    fn content_encoding_is_gzip_or_identity() {
        assert_eq!(request_encoding(&HeaderMap::new()), Ok(Encoding::Identity));
        assert_eq!(request_encoding(&headers(http::header::CONTENT_ENCODING, "GZIP")), Ok(Encoding::Gzip));
        assert_eq!(request_encoding(&headers(http::header::CONTENT_ENCODING, "identity")), Ok(Encoding::Identity));
        assert!(request_encoding(&headers(http::header::CONTENT_ENCODING, "br")).is_err());
        assert!(request_encoding(&headers(http::header::CONTENT_ENCODING, "gzip, gzip")).is_err());
    }

    #[test]
    fn accept_encoding_allows_gzip_unless_refused() {
        let accept = |v| accepts_gzip(&headers(http::header::ACCEPT_ENCODING, v));
        assert!(accept("gzip, deflate"));
        assert!(accept("br;q=1.0, gzip;q=0.8"));
        assert!(accept("*"));
        assert!(!accept("gzip;q=0"));
        assert!(!accept("deflate"));
        assert!(!accepts_gzip(&HeaderMap::new()));
    }

    #[test]
    fn a_response_is_compressed_only_when_allowed_and_worth_it() {
        let small = ServerToAgent { instance_uid: Bytes::from_static(&[1; 16]), ..Default::default() };
        assert!(!encode_body(&small, true).1);
        let large = ServerToAgent { instance_uid: Bytes::from(vec![b'x'; 400]), ..Default::default() };
        let (body, gzipped) = encode_body(&large, true);
        assert!(gzipped);
        assert_eq!(ServerToAgent::decode(gunzip(&body, 4096).unwrap().as_slice()).unwrap(), large);
        assert!(!encode_body(&large, false).1);
    }

    #[test]
    fn a_websocket_message_is_header_zero_then_the_message() {
        let response = ServerToAgent { instance_uid: Bytes::from_static(&[2; 16]), flags: 1, ..Default::default() };
        let frame = encode_frame(&response);
        assert_eq!(frame[0], 0);
        assert_eq!(ServerToAgent::decode(&frame[1..]).unwrap(), response);

        let mut request = vec![0];
        message().encode(&mut request).unwrap();
        assert_eq!(decode_frame(&request).unwrap(), message());
        assert_eq!(decode_frame(&[0]).unwrap(), AgentToServer::default(), "an empty message is valid");
        assert_eq!(decode_frame(&[]), Err(CodecError::MissingHeader));
        assert_eq!(decode_frame(&[1, 0x08, 0x01]), Err(CodecError::UnsupportedHeader(1)));
        // A client that sends no header: its first byte (field 1's tag, 0x0a) reads as header 10.
        assert_eq!(decode_frame(&message().encode_to_vec()), Err(CodecError::UnsupportedHeader(10)));
        // A multi-byte varint header of 0 is still 0.
        let mut long_zero = vec![0x80, 0x00];
        message().encode(&mut long_zero).unwrap();
        assert_eq!(decode_frame(&long_zero).unwrap(), message());
    }
}
