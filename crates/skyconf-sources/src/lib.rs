//! Where skyconf reads configuration from. Each store is a cargo feature and reports the raw
//! value of the configuration keys it holds; the server decides what a value means (parsing,
//! validation, keeping the last good table).
//!
//! Keys are the OAP's dynamic-configuration keys, `<module>.<provider>.<item>`; agents'
//! configuration lives under [`AGENT_CONFIGURATIONS_KEY`].

#[cfg(feature = "file")]
pub mod file;

use std::time::Duration;

/// The dynamic-configuration key holding the agent-configurations document.
pub const AGENT_CONFIGURATIONS_KEY: &str = "configuration-discovery.default.agentConfigurations";

/// Why a store could not be read. The last good configuration stays in service.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// Reading a file failed.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The value is larger than the configured limit.
    #[error("{what} is {size} bytes, more than the limit of {limit} bytes")]
    TooLarge {
        /// What was read.
        what: String,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// The value is not UTF-8 text.
    #[error("{what} is not UTF-8 text")]
    NotText {
        /// What was read.
        what: String,
    },
    /// Setting up a watch failed.
    #[error("cannot watch {what}: {message}")]
    Watch {
        /// What was to be watched.
        what: String,
        /// Why it failed.
        message: String,
    },
}

/// What a source reports about one key.
#[derive(Debug)]
pub enum Update {
    /// The key's current raw value; `None` when the store holds no such key (a delete).
    Value {
        /// The dynamic-configuration key.
        key: String,
        /// Its raw text.
        value: Option<String>,
    },
    /// The store could not be read; nothing changes.
    Failed(SourceError),
}

/// Settings every source shares.
#[derive(Debug, Clone)]
pub struct Limits {
    /// The largest value accepted, in bytes.
    pub max_value_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_value_bytes: 32 * 1024 * 1024,
        }
    }
}

/// How long a burst of change notifications must stay quiet before a source reads again.
pub const DEFAULT_SETTLE: Duration = Duration::from_millis(15);

/// A SHA-256 of raw text, to notice change without keeping or comparing whole documents.
pub fn content_hash(text: &str) -> [u8; 32] {
    use sha2::Digest as _;
    sha2::Sha256::digest(text.as_bytes()).into()
}
