//! The configuration digest the OAP sends as the `UUID` argument: SHA-512, lowercase hex, over the
//! concatenation of `key:value` for every entry of one service in document order, with no separator
//! between entries and no service name. Agents echo it back; equal digests mean "nothing to send".

use std::fmt;
use std::sync::Arc;

use sha2::{Digest as _, Sha512};

/// `sha512("EMPTY")`: the digest of the answer for a service with no configuration.
pub const EMPTY_DIGEST: &str = "410bb567794fe14362a2fb5912af7331eba74877614b82f36f3861fe86201c614f53423e896e5036509c0a815c7f444f20aefbc2bbe66545b382200299aced16";

/// A 128-character lowercase hex SHA-512 digest, cheap to clone.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(Arc<str>);

impl Digest {
    /// The digest of a service's entries, in order.
    pub fn of_entries<'a>(entries: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut hasher = Sha512::new();
        for (key, value) in entries {
            hasher.update(key.as_bytes());
            hasher.update(b":");
            hasher.update(value.as_bytes());
        }
        Self(hex::encode(hasher.finalize()).into())
    }

    /// The digest of arbitrary text (`sha512(text)`).
    pub fn of_text(text: &str) -> Self {
        Self(hex::encode(Sha512::digest(text.as_bytes())).into())
    }

    /// The digest served for unknown services: `sha512("EMPTY")`.
    pub fn empty() -> Self {
        Self(EMPTY_DIGEST.into())
    }

    /// The hex text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({}…)", &self.0[..12.min(self.0.len())])
    }
}

impl PartialEq<str> for Digest {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_digest_is_sha512_of_the_word_empty() {
        assert_eq!(Digest::of_text("EMPTY"), Digest::empty());
    }

    #[test]
    fn no_entries_hash_the_empty_string() {
        // Vector V3.
        assert!(Digest::of_entries([]).as_str().starts_with("cf83e1357eefb8bdf1542850d66d8007"));
        assert_eq!(Digest::of_entries([]), Digest::of_text(""));
    }

    #[test]
    fn concatenation_has_no_separator_so_these_collide() {
        // §2.4.3: the OAP's collisions must be reproduced, not fixed.
        assert_eq!(Digest::of_entries([("a", "b:c")]), Digest::of_entries([("a:b", "c")]));
        assert_eq!(Digest::of_entries([("a", "bc"), ("d", "e")]), Digest::of_entries([("a", "b"), ("cd", "e")]));
        assert_ne!(Digest::of_entries([("a", "1"), ("b", "2")]), Digest::of_entries([("b", "2"), ("a", "1")]));
    }
}
