//! The last good configuration on local disk, so a restart while the store is unreachable still
//! serves what agents had instead of nothing.
//!
//! One JSON file, `last-good.json`, in the data directory, replaced atomically (write, fsync,
//! rename, fsync the directory) after every accepted change, by the
//! [`Persister`](crate::persister::Persister) off the serving path. It holds the store's content with the agent-configurations
//! value replaced by the last *accepted* document: a refused document is never persisted.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use skyconf_core::store::{AGENT_CONFIGURATIONS_KEY, StoreContent};
use skyconf_sources::fs::write_atomically;

/// Why the persisted copy could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    /// File system trouble.
    #[error("{path}: {cause}")]
    Io {
        /// The file.
        path: String,
        /// The cause, in the message (so logs of the error alone keep it); not also its
        /// `source()`, which would print it twice in a chain.
        cause: std::io::Error,
    },
    /// The file is not what skyconf writes.
    #[error("{path}: not a skyconf last-good file: {message}")]
    Format {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
}

/// The persisted copy in one data directory.
#[derive(Debug, Clone)]
pub struct LastGood {
    path: PathBuf,
}

/// What the file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Persisted {
    /// The store it came from.
    pub store: String,
    /// When it was written (seconds since the epoch).
    pub saved_at: u64,
    /// The content.
    pub content: StoreContent,
}

impl LastGood {
    /// The copy in `data_dir` (created when first written).
    pub fn in_dir(data_dir: &Path) -> Self {
        Self { path: data_dir.join("last-good.json") }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the copy; `Ok(None)` when there is none yet.
    pub fn load(&self) -> Result<Option<Persisted>, PersistError> {
        let display = self.path.display().to_string();
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(cause) => return Err(PersistError::Io { path: display, cause }),
        };
        let format = |message: String| PersistError::Format { path: display.clone(), message };
        let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| format(e.to_string()))?;
        let strings = |v: &serde_json::Value| -> Option<std::collections::BTreeMap<String, String>> {
            v.as_object()?.iter().map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect()
        };
        let singles = strings(&json["singles"]).ok_or_else(|| format("`singles` must map keys to strings".into()))?;
        let groups = json["groups"]
            .as_object()
            .and_then(|g| g.iter().map(|(k, v)| Some((k.clone(), strings(v)?))).collect::<Option<_>>())
            .ok_or_else(|| format("`groups` must map keys to string maps".into()))?;
        Ok(Some(Persisted {
            store: json["store"].as_str().unwrap_or_default().to_owned(),
            saved_at: json["saved_at"].as_u64().unwrap_or(0),
            // A revision read from disk may be stale: only the store's own is trusted.
            content: StoreContent { singles, groups, revisions: Default::default() },
        }))
    }

    /// The file's bytes for `content`, with the agent-configurations value replaced by
    /// `accepted` (the last accepted document; `None`: absent).
    pub fn encode(store: &str, content: &StoreContent, accepted: Option<&str>) -> Vec<u8> {
        let mut singles: serde_json::Map<String, serde_json::Value> = content
            .singles
            .iter()
            .filter(|(key, _)| key.as_str() != AGENT_CONFIGURATIONS_KEY)
            .map(|(k, v)| (k.clone(), v.as_str().into()))
            .collect();
        if let Some(accepted) = accepted {
            singles.insert(AGENT_CONFIGURATIONS_KEY.to_owned(), accepted.into());
        }
        let json = serde_json::json!({
            "format": 1,
            "store": store,
            "saved_at": SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
            "singles": singles,
            "groups": content.groups,
        });
        serde_json::to_vec_pretty(&json).expect("string maps always serialize")
    }

    /// Replaces the copy now, on this thread.
    pub fn save(&self, store: &str, content: &StoreContent) -> Result<(), PersistError> {
        let bytes = Self::encode(store, content, content.agent_configurations());
        write_atomically(&self.path, &bytes)
            .map_err(|cause| PersistError::Io { path: self.path.display().to_string(), cause })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_reports_a_missing_or_corrupt_file() {
        let dir = tempfile::tempdir().unwrap();
        let copy = LastGood::in_dir(&dir.path().join("data"));
        assert_eq!(copy.load().unwrap(), None);
        let mut content = StoreContent::default();
        content.set_single("k", Some("v\nw".into()));
        content.set_group("g", Some([("a".to_owned(), "1".to_owned())].into()));
        copy.save("etcd x", &content).unwrap();
        let loaded = copy.load().unwrap().unwrap();
        assert_eq!(loaded.content, content);
        assert_eq!(loaded.store, "etcd x");
        std::fs::write(copy.path(), "{").unwrap();
        assert!(matches!(copy.load(), Err(PersistError::Format { .. })));
    }
}
