//! Remote configurations and their `config_hash`.
//!
//! A remote configuration is a set of named files (name, content type, body). Its hash is
//! SHA-256 over a canonical encoding — files in byte order of their names, each field
//! length-prefixed — so equal file sets have equal hashes however they were assembled, and no
//! two different sets share one by concatenation. The session compares this hash with the one an
//! agent reports (and with the one it last sent), so an unchanged configuration is never resent.

use std::collections::BTreeMap;
use std::fmt;

use bytes::Bytes;
use sha2::{Digest as _, Sha256};

use crate::wire;

/// One configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigFile {
    /// A MIME type such as `text/yaml` or `application/json`; may be empty.
    pub content_type: String,
    /// The file's bytes, as the agent receives them.
    pub body: Bytes,
}

/// A `config_hash` (ours are 32 bytes; an agent's report may carry anything).
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct ConfigHash(Bytes);

impl ConfigHash {
    /// The hash as an agent reported it.
    pub fn from_wire(bytes: Bytes) -> Self {
        Self(bytes)
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &Bytes {
        &self.0
    }

    /// Whether it is empty (an agent that has received nothing yet).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for ConfigHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0.iter() {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for ConfigHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ConfigHash({self})")
    }
}

/// A remote configuration: its files and their hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteConfig {
    files: BTreeMap<String, ConfigFile>,
    hash: ConfigHash,
}

/// The domain of [`RemoteConfig::hash`], so a future encoding cannot collide with this one.
const HASH_DOMAIN: &[u8] = b"skyconf-opamp remote config v1\0";

impl RemoteConfig {
    /// The configuration of `files` (file name to file; a later duplicate name replaces an
    /// earlier one). An empty set is a valid configuration: it withdraws what was offered.
    pub fn new(files: impl IntoIterator<Item = (String, ConfigFile)>) -> Self {
        let files: BTreeMap<_, _> = files.into_iter().collect();
        let mut sha = Sha256::new();
        sha.update(HASH_DOMAIN);
        for (name, file) in &files {
            for part in [name.as_bytes(), file.content_type.as_bytes(), &file.body] {
                sha.update((part.len() as u64).to_le_bytes());
                sha.update(part);
            }
        }
        let hash = ConfigHash(Bytes::copy_from_slice(&sha.finalize()));
        Self { files, hash }
    }

    /// A configuration of one file.
    pub fn single(name: &str, content_type: &str, body: impl Into<Bytes>) -> Self {
        Self::new([(name.to_owned(), ConfigFile { content_type: content_type.to_owned(), body: body.into() })])
    }

    /// The files, by name.
    pub fn files(&self) -> &BTreeMap<String, ConfigFile> {
        &self.files
    }

    /// The `config_hash`.
    pub fn hash(&self) -> &ConfigHash {
        &self.hash
    }

    /// The `AgentRemoteConfig` message (bodies are shared, not copied).
    pub fn to_wire(&self) -> wire::AgentRemoteConfig {
        let config_map = self
            .files
            .iter()
            .map(|(name, file)| {
                (
                    name.clone(),
                    wire::AgentConfigFile { body: file.body.clone(), content_type: file.content_type.clone() },
                )
            })
            .collect();
        wire::AgentRemoteConfig { config: Some(wire::AgentConfigMap { config_map }), config_hash: self.hash.0.clone() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(ct: &str, body: &'static str) -> ConfigFile {
        ConfigFile { content_type: ct.into(), body: Bytes::from_static(body.as_bytes()) }
    }

    #[test]
    fn the_hash_depends_on_content_not_on_order() {
        let a = RemoteConfig::new([("a".into(), file("text/yaml", "x: 1")), ("b".into(), file("", "y"))]);
        let b = RemoteConfig::new([("b".into(), file("", "y")), ("a".into(), file("text/yaml", "x: 1"))]);
        assert_eq!(a.hash(), b.hash());
        assert_eq!(a.hash().as_bytes().len(), 32);
        let changed = RemoteConfig::new([("a".into(), file("text/yaml", "x: 2")), ("b".into(), file("", "y"))]);
        assert_ne!(a.hash(), changed.hash());
        let retyped = RemoteConfig::new([("a".into(), file("application/json", "x: 1")), ("b".into(), file("", "y"))]);
        assert_ne!(a.hash(), retyped.hash());
    }

    #[test]
    fn fields_cannot_borrow_from_each_other() {
        // Name "ab" + body "c" against name "a" + body "bc": same bytes, different files.
        let one = RemoteConfig::new([("ab".into(), file("", "c"))]);
        let two = RemoteConfig::new([("a".into(), file("", "bc"))]);
        assert_ne!(one.hash(), two.hash());
        assert_ne!(RemoteConfig::new([]).hash(), one.hash(), "the empty set has a hash of its own");
    }

    #[test]
    fn the_wire_form_carries_files_and_hash() {
        let config = RemoteConfig::single("collector.yaml", "text/yaml", "receivers: {}");
        let wire = config.to_wire();
        assert_eq!(&wire.config_hash, config.hash().as_bytes());
        let files = wire.config.unwrap().config_map;
        assert_eq!(files["collector.yaml"].content_type, "text/yaml");
        assert_eq!(&files["collector.yaml"].body[..], b"receivers: {}");
    }
}
