//! Instance uids: who an agent is.
//!
//! Since spec v0.10 the `instance_uid` field holds 16 bytes (a UUID, v7 recommended); every
//! client installable here sends that (the PyPI and npm clients send UUID v7 bytes, opamp-go
//! too). Clients written against earlier drafts put a 26-character ULID string in the same
//! field (the crates.io client `otel-opamp-rs` 0.0.14 does); a ULID is 128 bits as well, so it
//! is read into the same 16 bytes. A 36-character UUID string is read likewise. The answer
//! echoes the agent's field byte for byte, whatever its form ([`crate::session`]).

use std::fmt;

/// An agent's identity: 128 bits, shown as a hyphenated UUID.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InstanceUid([u8; 16]);

/// Why an `instance_uid` field cannot name an agent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UidError {
    /// The field is empty.
    #[error("instance_uid is empty")]
    Empty,
    /// Neither 16 bytes nor a ULID or UUID string.
    #[error("instance_uid must be 16 bytes (or a 26-character ULID string), got {0} bytes")]
    Malformed(usize),
}

impl InstanceUid {
    /// The uid of 16 raw bytes.
    pub const fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(bytes)
    }

    /// A new UUID v7, for agents that ask the server for their uid.
    pub fn generate() -> Self {
        Self(*uuid::Uuid::now_v7().as_bytes())
    }

    /// Reads the `instance_uid` field: 16 bytes, or the text of a ULID or UUID.
    pub fn from_wire(raw: &[u8]) -> Result<Self, UidError> {
        match raw.len() {
            0 => Err(UidError::Empty),
            16 => Ok(Self(raw.try_into().expect("16 bytes"))),
            26 => ulid(raw).map(Self).ok_or(UidError::Malformed(26)),
            36 => std::str::from_utf8(raw)
                .ok()
                .and_then(|text| uuid::Uuid::try_parse(text).ok())
                .map(|u| Self(*u.as_bytes()))
                .ok_or(UidError::Malformed(36)),
            n => Err(UidError::Malformed(n)),
        }
    }

    /// Reads the `OpAMP-Instance-UID` request header: a hyphenated (or plain hex) UUID.
    pub fn from_header(value: &str) -> Option<Self> {
        uuid::Uuid::try_parse(value.trim()).ok().map(|u| Self(*u.as_bytes()))
    }

    /// The 16 bytes.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }
}

/// Crockford base32 (case-insensitive; I and L read as 1, O as 0), 26 characters, at most 128 bits.
fn ulid(text: &[u8]) -> Option<[u8; 16]> {
    let mut value: u128 = 0;
    for (i, &c) in text.iter().enumerate() {
        let digit = match c.to_ascii_uppercase() {
            c @ b'0'..=b'9' => c - b'0',
            b'O' => 0,
            b'I' | b'L' => 1,
            c @ b'A'..=b'H' => c - b'A' + 10,
            b'J' => 18,
            b'K' => 19,
            b'M' => 20,
            b'N' => 21,
            c @ b'P'..=b'T' => c - b'P' + 22,
            c @ b'V'..=b'Z' => c - b'V' + 27,
            _ => return None,
        };
        // 26 digits carry 130 bits: the first may only hold the top 3.
        if i == 0 && digit > 7 {
            return None;
        }
        value = (value << 5) | u128::from(digit);
    }
    Some(value.to_be_bytes())
}

impl fmt::Display for InstanceUid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        uuid::Uuid::from_bytes(self.0).hyphenated().fmt(f)
    }
}

impl fmt::Debug for InstanceUid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "InstanceUid({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sixteen_bytes_are_the_uid() {
        let raw = [7u8; 16];
        assert_eq!(InstanceUid::from_wire(&raw).unwrap().as_bytes(), &raw);
        assert_eq!(InstanceUid::from_wire(&[]), Err(UidError::Empty));
        assert_eq!(InstanceUid::from_wire(&[1; 15]), Err(UidError::Malformed(15)));
        assert_eq!(InstanceUid::from_wire(&[1; 17]), Err(UidError::Malformed(17)));
    }

    #[test]
    fn a_ulid_string_reads_into_the_same_128_bits() {
        // The ULID spec's own example value and its 128-bit big-endian form.
        let uid = InstanceUid::from_wire(b"01ARZ3NDEKTSV4RRFFQ69G5FAV").unwrap();
        assert_eq!(uid.to_string(), "01563e3a-b5d3-d676-4c61-efb99302bd5b");
        assert_eq!(InstanceUid::from_wire(b"01arz3ndektsv4rrffq69g5fav").unwrap(), uid, "case-insensitive");
        assert_eq!(
            InstanceUid::from_wire(b"81ARZ3NDEKTSV4RRFFQ69G5FAV"),
            Err(UidError::Malformed(26)),
            "over 128 bits"
        );
        assert_eq!(
            InstanceUid::from_wire(b"01ARZ3NDEKTSV4RRFFQ69G5FAU"),
            Err(UidError::Malformed(26)),
            "U is not a digit"
        );
    }

    #[test]
    fn a_uuid_string_and_the_header_read_alike() {
        let text = "0190a0b1-7c2d-7e3f-8a4b-5c6d7e8f9a0b";
        let from_field = InstanceUid::from_wire(text.as_bytes()).unwrap();
        assert_eq!(from_field.to_string(), text);
        assert_eq!(InstanceUid::from_header(text), Some(from_field));
        assert_eq!(InstanceUid::from_header("not a uuid"), None);
    }
}
