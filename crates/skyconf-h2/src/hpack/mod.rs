//! HPACK (RFC 7541): the decoder of request header blocks and the encoder of response ones.
//!
//! The decoder keeps a dynamic table only while the client may still use one: the server
//! advertises `SETTINGS_HEADER_TABLE_SIZE` 0, but until the client acknowledges that SETTINGS
//! frame it may index up to the protocol's default 4,096 bytes ([`Decoder::settings_acked`]
//! shrinks the table to what was advertised, and with 0 frees it). Table size updates are
//! checked against that bound, and only at the start of a block (§4.2). What a block decodes to
//! is measured as §4.1 measures a table entry (name + value + 32 bytes) and handed to the caller
//! field by field, so an HPACK bomb (a small block that references a large entry many times)
//! costs its decoding time, bounded by the block's size, and no memory: the caller stops keeping
//! fields once the header list limit is passed.
//!
//! The encoder keeps no state: every field is a literal without indexing, its name a reference
//! to the static table where the table has it, and `:status 200` the static entry itself.

mod huffman;
mod table;

use std::borrow::Cow;
use std::collections::VecDeque;

/// The dynamic table size a client may use before it has acknowledged the server's SETTINGS
/// (RFC 9113 §6.5.2's initial value).
pub(crate) const DEFAULT_TABLE_SIZE: usize = 4096;

/// Per-entry overhead of RFC 7541 §4.1.
pub(crate) const ENTRY_OVERHEAD: usize = 32;

/// Table size updates allowed at the start of one block: two say "shrink, then grow" (§4.2); more
/// say nothing new.
const MAX_SIZE_UPDATES: usize = 2;

/// A header block that does not decode: a connection error (`COMPRESSION_ERROR`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("header block does not decode: {0}")]
pub struct DecodeError(pub &'static str);

/// A dynamic table entry: name and value.
type Entry = (Box<[u8]>, Box<[u8]>);

/// The request side's HPACK state.
#[derive(Debug)]
pub(crate) struct Decoder {
    /// Newest first.
    table: VecDeque<Entry>,
    size: usize,
    max_size: usize,
    /// The largest size an update may set.
    allowed: usize,
    /// The size the server advertised, in force once the client acknowledges it.
    local: usize,
}

impl Decoder {
    /// A decoder whose table may hold `DEFAULT_TABLE_SIZE` until `local` (the advertised
    /// `SETTINGS_HEADER_TABLE_SIZE`) is acknowledged.
    pub(crate) fn new(local: usize) -> Self {
        let allowed = DEFAULT_TABLE_SIZE.max(local);
        Self { table: VecDeque::new(), size: 0, max_size: allowed, allowed, local }
    }

    /// The client acknowledged the server's SETTINGS: the table is bounded by what was advertised.
    pub(crate) fn settings_acked(&mut self) {
        self.allowed = self.local;
        if self.max_size > self.allowed {
            self.max_size = self.allowed;
            self.evict(0);
            if self.table.is_empty() {
                self.table = VecDeque::new();
            }
        }
    }

    /// Bytes the dynamic table holds (§4.1's size).
    #[cfg(test)]
    pub(crate) fn table_size(&self) -> usize {
        self.size
    }

    /// Decodes `block`, handing each field to `emit` as (name, value).
    pub(crate) fn decode(&mut self, block: &[u8], mut emit: impl FnMut(&[u8], &[u8])) -> Result<(), DecodeError> {
        let mut input = block;
        let mut fields = 0usize;
        let mut updates = 0usize;
        while let Some(&first) = input.first() {
            if first & 0x80 != 0 {
                let index = integer(&mut input, 7)?;
                let (name, value) = self.entry(index)?;
                emit(name, value);
                fields += 1;
            } else if first & 0xc0 == 0x40 {
                let index = integer(&mut input, 6)?;
                let name: Cow<'_, [u8]> =
                    if index == 0 { string(&mut input)? } else { Cow::Owned(self.entry(index)?.0.to_vec()) };
                let value = string(&mut input)?;
                emit(&name, &value);
                self.insert(&name, &value);
                fields += 1;
            } else if first & 0xe0 == 0x20 {
                if fields > 0 {
                    return Err(DecodeError("a table size update after a field"));
                }
                updates += 1;
                if updates > MAX_SIZE_UPDATES {
                    return Err(DecodeError("too many table size updates"));
                }
                let size = integer(&mut input, 5)?;
                if size > self.allowed {
                    return Err(DecodeError("a table size update above the advertised size"));
                }
                self.max_size = size;
                self.evict(0);
            } else {
                // Literal without indexing (0000) or never indexed (0001): the same to a decoder.
                let index = integer(&mut input, 4)?;
                let name: Cow<'_, [u8]> =
                    if index == 0 { string(&mut input)? } else { Cow::Owned(self.entry(index)?.0.to_vec()) };
                let value = string(&mut input)?;
                emit(&name, &value);
                fields += 1;
            }
        }
        Ok(())
    }

    fn entry(&self, index: usize) -> Result<(&[u8], &[u8]), DecodeError> {
        if index == 0 {
            return Err(DecodeError("index 0"));
        }
        if let Some((name, value)) = table::STATIC.get(index - 1) {
            return Ok((name.as_bytes(), value.as_bytes()));
        }
        self.table
            .get(index - 1 - table::STATIC.len())
            .map(|(name, value)| (&name[..], &value[..]))
            .ok_or(DecodeError("index beyond the tables"))
    }

    fn insert(&mut self, name: &[u8], value: &[u8]) {
        let size = name.len() + value.len() + ENTRY_OVERHEAD;
        if size > self.max_size {
            // §4.4: an entry larger than the table empties it; not an error.
            self.table.clear();
            self.size = 0;
            return;
        }
        self.evict(size);
        self.table.push_front((name.into(), value.into()));
        self.size += size;
    }

    /// Evicts the oldest entries until `room` more bytes fit.
    fn evict(&mut self, room: usize) {
        while self.size + room > self.max_size {
            let Some((name, value)) = self.table.pop_back() else { break };
            self.size -= name.len() + value.len() + ENTRY_OVERHEAD;
        }
    }
}

/// An integer with an `prefix`-bit prefix (§5.1), consumed from `input`.
fn integer(input: &mut &[u8], prefix: u32) -> Result<usize, DecodeError> {
    let mask = (1u32 << prefix) - 1;
    let (&first, rest) = input.split_first().ok_or(DecodeError("truncated integer"))?;
    *input = rest;
    let mut value = u64::from(u32::from(first) & mask);
    if value < u64::from(mask) {
        return Ok(value as usize);
    }
    let mut shift = 0u32;
    loop {
        let (&byte, rest) = input.split_first().ok_or(DecodeError("truncated integer"))?;
        *input = rest;
        value += u64::from(byte & 0x7f) << shift;
        shift += 7;
        if value > u64::from(u32::MAX) || shift > 35 {
            return Err(DecodeError("integer too large"));
        }
        if byte & 0x80 == 0 {
            return Ok(value as usize);
        }
    }
}

/// A string literal (§5.2), consumed from `input`: borrowed when raw, decoded when Huffman-coded.
fn string<'a>(input: &mut &'a [u8]) -> Result<Cow<'a, [u8]>, DecodeError> {
    let huffman = input.first().is_some_and(|b| b & 0x80 != 0);
    let len = integer(input, 7)?;
    if len > input.len() {
        return Err(DecodeError("string longer than the block"));
    }
    let (bytes, rest) = input.split_at(len);
    *input = rest;
    if !huffman {
        return Ok(Cow::Borrowed(bytes));
    }
    let mut out = Vec::with_capacity(len + len / 2);
    huffman::decode(bytes, &mut out).map_err(|huffman::Invalid| DecodeError("invalid Huffman string"))?;
    Ok(Cow::Owned(out))
}

/// Appends `value` as an integer with a `prefix`-bit prefix, the prefix's other bits `flags`.
fn put_integer(out: &mut Vec<u8>, flags: u8, prefix: u32, value: usize) {
    let mask = (1usize << prefix) - 1;
    if value < mask {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | mask as u8);
    let mut rest = value - mask;
    while rest >= 0x80 {
        out.push((rest as u8 & 0x7f) | 0x80);
        rest >>= 7;
    }
    out.push(rest as u8);
}

/// Appends one response field: a literal without indexing, the name from the static table when
/// it is there.
pub(crate) fn encode_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    match table::static_name(name) {
        Some(index) => put_integer(out, 0x00, 4, index),
        None => {
            out.push(0x00);
            put_integer(out, 0x00, 7, name.len());
            out.extend_from_slice(name);
        }
    }
    put_integer(out, 0x00, 7, value.len());
    out.extend_from_slice(value);
}

/// Appends `:status`: the static entry for 200, else a literal on its static name.
pub(crate) fn encode_status(out: &mut Vec<u8>, status: http::StatusCode) {
    if status == http::StatusCode::OK {
        out.push(0x88);
    } else {
        put_integer(out, 0x00, 4, 8);
        out.push(3);
        out.extend_from_slice(status.as_str().as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(decoder: &mut Decoder, block: &[u8]) -> Result<Vec<(String, String)>, DecodeError> {
        let mut fields = Vec::new();
        decoder.decode(block, |n, v| {
            fields.push((String::from_utf8_lossy(n).into_owned(), String::from_utf8_lossy(v).into_owned()))
        })?;
        Ok(fields)
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn rfc_7541_c3_requests_without_huffman_share_a_table() {
        let mut d = Decoder::new(0);
        let first = [
            0x82, 0x86, 0x84, 0x41, 0x0f, b'w', b'w', b'w', b'.', b'e', b'x', b'a', b'm', b'p', b'l', b'e', b'.', b'c',
            b'o', b'm',
        ];
        assert_eq!(
            decode_all(&mut d, &first).unwrap(),
            pairs(&[(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "www.example.com")])
        );
        assert_eq!(d.table_size(), 57);
        let second = [0x82, 0x86, 0x84, 0xbe, 0x58, 0x08, b'n', b'o', b'-', b'c', b'a', b'c', b'h', b'e'];
        assert_eq!(
            decode_all(&mut d, &second).unwrap(),
            pairs(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com"),
                ("cache-control", "no-cache")
            ])
        );
        assert_eq!(d.table_size(), 110);
    }

    #[test]
    fn rfc_7541_c4_requests_with_huffman() {
        let mut d = Decoder::new(0);
        let first =
            [0x82, 0x86, 0x84, 0x41, 0x8c, 0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff];
        assert_eq!(
            decode_all(&mut d, &first).unwrap(),
            pairs(&[(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "www.example.com")])
        );
    }

    #[test]
    fn the_table_shrinks_to_the_advertised_size_once_acknowledged() {
        let mut d = Decoder::new(0);
        decode_all(&mut d, &[0x41, 0x01, b'x']).unwrap();
        assert_eq!(d.table_size(), 43);
        assert_eq!(decode_all(&mut d, &[0xbe]).unwrap(), pairs(&[(":authority", "x")]));
        d.settings_acked();
        assert_eq!(d.table_size(), 0);
        assert!(decode_all(&mut d, &[0xbe]).is_err(), "the entry is gone");
        assert!(decode_all(&mut d, &[0x3f, 0x01]).is_err(), "an update to 32 is above the advertised 0");
        assert!(decode_all(&mut d, &[0x20]).is_ok(), "an update to 0 is fine");
        // Incremental indexing still decodes; the entry does not fit and is not kept.
        assert_eq!(decode_all(&mut d, &[0x41, 0x01, b'y']).unwrap(), pairs(&[(":authority", "y")]));
        assert_eq!(d.table_size(), 0);
    }

    #[test]
    fn malformed_blocks_are_compression_errors() {
        let mut d = Decoder::new(0);
        assert!(decode_all(&mut d, &[0x80]).is_err(), "index 0");
        assert!(decode_all(&mut d, &[0xff, 0x80]).is_err(), "truncated integer");
        assert!(decode_all(&mut d, &[0xff, 0xff, 0xff, 0xff, 0xff, 0x0f]).is_err(), "integer overflow");
        assert!(decode_all(&mut d, &[0x00, 0x05, b'a']).is_err(), "string past the end");
        assert!(decode_all(&mut d, &[0x82, 0x20]).is_err(), "size update after a field");
        assert!(decode_all(&mut d, &[0x20, 0x20, 0x20]).is_err(), "three size updates");
        assert!(decode_all(&mut d, &[0x3f, 0xe2, 0x1f]).is_err(), "update above 4096");
        assert!(decode_all(&mut d, &[0x00, 0x81, 0x00, 0x00]).is_err(), "huffman with zero padding");
    }

    fn unhex(text: &str) -> Vec<u8> {
        (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap()).collect()
    }

    /// The decoder against Python's hpack encoder (`tests/h2/hpack_vectors.py`): 300 blocks from
    /// one encoder (indexing, size updates, Huffman on and off, never-indexed fields), each
    /// decoded to the fields it encodes; and the Huffman table against hpack's. Skipped when the
    /// interpreter has no hpack, unless `SKYCONF_REQUIRE_INTEROP` is set.
    #[test]
    fn python_hpack_blocks_decode_to_their_fields() {
        let python = std::env::var_os("SKYCONF_TEST_PYTHON").unwrap_or_else(|| "python3".into());
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/h2/hpack_vectors.py");
        let output = std::process::Command::new(&python).arg(script).output();
        let Some(output) = output.ok().filter(|o| o.status.success()) else {
            assert!(std::env::var_os("SKYCONF_REQUIRE_INTEROP").is_none(), "{python:?} with hpack is required");
            eprintln!("skipped: {python:?} has no hpack (tests/requirements.txt)");
            return;
        };
        let vectors: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        let codes = huffman::codes();
        for (symbol, code) in vectors["codes"].as_array().unwrap().iter().enumerate() {
            let expected = (code[0].as_u64().unwrap() as u32, code[1].as_u64().unwrap() as u8);
            assert_eq!(codes[symbol], expected, "symbol {symbol}");
        }
        let mut decoder = Decoder::new(DEFAULT_TABLE_SIZE);
        for (i, vector) in vectors["blocks"].as_array().unwrap().iter().enumerate() {
            let block = unhex(vector["block"].as_str().unwrap());
            let expected: Vec<(Vec<u8>, Vec<u8>)> = vector["fields"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| (unhex(f[0].as_str().unwrap()), unhex(f[1].as_str().unwrap())))
                .collect();
            let mut fields = Vec::new();
            decoder
                .decode(&block, |n, v| fields.push((n.to_vec(), v.to_vec())))
                .unwrap_or_else(|e| panic!("block {i}: {e}"));
            assert_eq!(fields, expected, "block {i}");
        }
    }

    #[test]
    fn the_encoder_output_decodes() {
        let mut out = Vec::new();
        encode_status(&mut out, http::StatusCode::OK);
        encode_status(&mut out, http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
        encode_field(&mut out, b"content-type", b"application/grpc");
        encode_field(&mut out, b"grpc-status", b"0");
        let long = "v".repeat(300);
        encode_field(&mut out, b"x-long", long.as_bytes());
        let mut d = Decoder::new(0);
        assert_eq!(
            decode_all(&mut d, &out).unwrap(),
            pairs(&[
                (":status", "200"),
                (":status", "431"),
                ("content-type", "application/grpc"),
                ("grpc-status", "0"),
                ("x-long", &long)
            ])
        );
        assert_eq!(d.table_size(), 0, "nothing indexed");
    }
}
