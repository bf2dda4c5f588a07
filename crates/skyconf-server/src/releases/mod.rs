//! The release log: every accepted agent-configurations document, whatever its origin (an admin
//! API write, a file edit, a change in etcd, ZooKeeper or Nacos, the document found at start-up),
//! with its time, author, message, per-service digests and the change against the previous one.
//! A rollback writes an old release's exact text back to the store, so agents get back exactly the
//! values (and digests) they had.
//!
//! The log is local to each server, kept even when the store itself has no history (a plain etcd
//! key, a file). With a data directory it is one JSON file per release,
//! `<data dir>/releases/<id, 20 digits>.json`, written atomically by the [`Persister`] off the
//! serving path and read back at start-up. Memory holds a [`ReleaseSummary`] per release (counts
//! and the first changed services); the full release (every digest, key-level changes) and its
//! text stay in memory only until its file is on disk (for good if it cannot be written), and are
//! read from the file when asked for ([`ReleaseLog::full`]). Without a data directory everything
//! lives in memory, compactly: a release's text shares its chunks with the release before it
//! ([`crate::chunked_text`]) and its digests are read again from the text when asked for, so a
//! history of one-service edits costs about one document, not one per release. Only the newest `retention` releases are kept. Why files and not an embedded database: a release is written a few times a day, never
//! updated, read by id or newest first; files are inspectable with `cat` and `jq`, need no new
//! dependency, and retention is deleting a file.
//!
//! Durability. A release file is written after its document is served (the serving path never
//! waits for a disk), so a file that cannot be written (disk full, read-only data directory, a
//! file where the `releases` directory should be) cannot undo the change. It is never silent: the
//! failure is logged at error level, the release is kept in memory and counted as unsaved
//! ([`ReleaseLog::unsaved`], in `GET /api/v1/status`), and an admin write waits for its release's
//! file and answers **503** with `"served": true, "durable": false` when it cannot be written — the
//! change is in effect for agents, but its history is not on disk, which an operator must fix.
//!
//! Ids. Ids increase by one within a run and are never reused across restarts, even for a release
//! whose file was never written: the log reserves ids ahead in `<data dir>/next-release-id` (a
//! block of [`RESERVE`](ids::RESERVE), renewed by the persister when half of it is used; the first block is
//! written at start-up, before anything is served) and starts above that reservation and above
//! every id any file name in `releases/` claims. So ids can skip up to [`RESERVE`](ids::RESERVE) across a
//! restart. Files that cannot be trusted (unreadable, or an id other than their name's, or above
//! [`MAX_ID`]) are moved aside as `*.corrupt` and logged at error level. Only when even the
//! reservation cannot be written (the whole data directory unwritable) can ids of releases that
//! never reached the disk be issued again after a restart; that too is logged at error level.
//!
//! Layout: this facade holds the types and the one lock; each concern is a file of its own —
//! [`ids`] (reservation), [`files`] (the directory), [`memory`] (summaries, texts, served
//! versions, queries), [`import`] (the shared history) and [`durability`]. The last refused
//! document has one home, [`crate::served::Rejection`].
//!
//! Releases are recorded by the [`Reloader`](crate::reload::Reloader) just *before* it installs a
//! table, so whoever wakes up on the served table's watch channel finds the release already there.
//! A writer's announcement ([`crate::publish::PendingWrites`]) attaches its author and message to
//! the release ([`ReleaseLog::record`]); documents nobody announced are attributed to their
//! origin.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use skyconf_core::AgentConfigurations;
use skyconf_core::diff::{ChangeKind, ServiceChange, diff};
use skyconf_core::opamp_diff::{GroupChange, opamp_diff};
use skyconf_core::store::content_hash;

use skyconf_sources::fs::write_atomically;

use crate::chunked_text::ChunkedText;
use crate::persister::Persister;
use crate::unix_time::now_ms;

mod durability;
mod files;
mod ids;
mod import;
mod memory;
#[cfg(test)]
mod tests;

pub(crate) use durability::Durability;

use durability::CopyState;
use files::{ReleaseFile, read_release_file, release_path};
use ids::reserve_at_start;
use memory::{Appended, Kept, Stored, digests};

/// How many releases are kept by default.
pub(crate) const DEFAULT_RETENTION: usize = 200;

/// The highest release id trusted (2^53 - 1, exact in JSON numbers and in the web page). A file
/// claiming a higher one is corrupt; ids never wrap.
pub(crate) const MAX_ID: u64 = (1 << 53) - 1;

/// Why the log could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    /// File system trouble.
    #[error("{path}: {cause}")]
    Io {
        /// The file or directory.
        path: String,
        /// The cause, in the message (so logs of the error alone keep it); not also its
        /// `source()`, which would print it twice in a chain.
        cause: std::io::Error,
    },
    /// A file that is not a release skyconf wrote.
    #[error("{path}: not a skyconf release: {message}")]
    Format {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
}

/// Who made a change and why.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attribution {
    /// Who (from the admin API request).
    pub author: Option<String>,
    /// Why.
    pub message: Option<String>,
    /// The release this change restores, for a rollback.
    pub rollback_of: Option<u64>,
    /// Where it came from (`api`, `rollout <id>`).
    pub origin: String,
}

/// A change known only by where it came from.
impl From<&str> for Attribution {
    fn from(origin: &str) -> Self {
        Self { origin: origin.to_owned(), ..Self::default() }
    }
}

/// The origin of a document written through the admin API.
pub(crate) const ORIGIN_API: &str = "api";
/// The origin of a document a staged rollout wrote, before its id.
pub(crate) const ORIGIN_ROLLOUT: &str = "rollout ";

/// Whether `origin` names a write made through a replica's admin API (a plain write or a
/// rollout's last step), rather than a change found in the store.
pub(crate) fn written_through_admin(origin: &str) -> bool {
    origin == ORIGIN_API || origin.starts_with(ORIGIN_ROLLOUT)
}

/// What identifies a release and says where it came from: the part of it the log keeps in
/// memory whole, in [`Release`] and in [`ReleaseSummary`] alike.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct ReleaseMeta {
    /// Increases with every release, across restarts. With a store that orders its changes
    /// (etcd, ZooKeeper) it is the store's revision of the document
    /// ([`ReleaseMeta::store_revision`]), so every replica on the same store names a release
    /// alike; otherwise it increases by one.
    pub id: u64,
    /// When it was accepted (Unix milliseconds).
    pub at_ms: u64,
    /// Who wrote it, when it came through the admin API with an author.
    pub author: Option<String>,
    /// Why, when given.
    pub message: Option<String>,
    /// Where it came from: `api`, or the store (`file /etc/skyconf/agents.yaml`, `etcd ...`).
    pub origin: String,
    /// The release it restores, for a rollback.
    pub rollback_of: Option<u64>,
    /// The served table's version it became (versions restart at 1 with every server start).
    pub version: u64,
    /// SHA-256 (hex) of the document text; none when the key was deleted from the store.
    pub document_sha256: Option<String>,
    /// The store's revision of the document (etcd's `mod_revision`, ZooKeeper's `mzxid`), where
    /// the store has revisions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_revision: Option<u64>,
}

/// One accepted document.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct Release {
    /// Its id, time, attribution and hash.
    #[serde(flatten)]
    pub meta: ReleaseMeta,
    /// Every service's digest in this release.
    pub digests: BTreeMap<String, String>,
    /// What changed against the previous release.
    pub changes: Vec<ServiceChange>,
    /// The `opamp:` groups that changed against the previous release (the OpAMP agents'
    /// configuration files).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub opamp_changes: Vec<GroupChange>,
}

/// The most changed services a [`ReleaseSummary`] names.
pub(crate) const MAX_SUMMARY_CHANGES: usize = 20;

/// What the log keeps in memory of a release: its metadata and counts, and the first
/// [`MAX_SUMMARY_CHANGES`] changed services. Digests and key-level changes stay in the release's
/// file ([`ReleaseLog::full`]), so memory does not grow with the size of the documents.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct ReleaseSummary {
    /// The release's id, time, attribution and hash.
    #[serde(flatten)]
    pub meta: ReleaseMeta,
    /// How many services the document configures.
    pub services: usize,
    /// How many services' digests changed.
    pub changed: usize,
    /// The first changed services (at most [`MAX_SUMMARY_CHANGES`]), in the release's order.
    pub changes: Vec<ChangeSummary>,
    /// The first changed `opamp:` groups (at most [`MAX_SUMMARY_CHANGES`], each naming at most
    /// as many files); absent when none changed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub opamp_changes: Vec<GroupChange>,
}

/// One changed service in a [`ReleaseSummary`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct ChangeSummary {
    /// The service.
    pub service: String,
    /// Added, removed or modified.
    pub change: ChangeKind,
}

impl ReleaseSummary {
    fn of(release: &Release) -> Self {
        Self {
            meta: release.meta.clone(),
            services: release.digests.len(),
            changed: release.changes.len(),
            changes: release
                .changes
                .iter()
                .take(MAX_SUMMARY_CHANGES)
                .map(|c| ChangeSummary { service: c.service.clone(), change: c.change })
                .collect(),
            opamp_changes: release
                .opamp_changes
                .iter()
                .take(MAX_SUMMARY_CHANGES)
                .map(|c| GroupChange {
                    files: c.files.iter().take(MAX_SUMMARY_CHANGES).cloned().collect(),
                    ..c.clone()
                })
                .collect(),
        }
    }

    fn hash(&self) -> Option<&str> {
        self.meta.document_sha256.as_deref()
    }
}

impl Release {
    /// A copy without the digests (never copying them).
    fn without_digests(&self) -> Self {
        Self {
            meta: self.meta.clone(),
            digests: BTreeMap::new(),
            changes: self.changes.clone(),
            opamp_changes: self.opamp_changes.clone(),
        }
    }
}

/// A release as replicas share it through the store (see [`crate::shared_history`]): its id
/// (the store's revision of the document), attribution and text.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SharedRelease {
    /// The release id: the store's revision of the document.
    pub id: u64,
    /// When it was recorded first, by whichever replica.
    pub at_ms: u64,
    /// Who wrote it, when it came through the admin API with an author.
    pub author: Option<String>,
    /// Why.
    pub message: Option<String>,
    /// `api`, or the store's name for a change made in the store directly.
    pub origin: String,
    /// The release it restores, for a rollback.
    pub rollback_of: Option<u64>,
    /// The document's text; `None` for a delete.
    pub document: Option<String>,
}

#[derive(Debug, Default)]
struct LogState {
    /// Oldest first.
    releases: VecDeque<Arc<ReleaseSummary>>,
    /// Releases and texts not on disk: all of them without a directory, else those whose file is
    /// not written (yet).
    documents: HashMap<u64, Kept>,
    /// The newest kept release that changed each service (id, time).
    last_changes: HashMap<String, (u64, u64)>,
    next_id: u64,
    /// Which release each served version of this run is (oldest first): a served snapshot names
    /// its release through its version, so a reader pairs content and release id atomically.
    served_as: VecDeque<(u64, u64)>,
    /// Kept releases whose file could not be written, with why.
    unsaved: BTreeMap<u64, String>,
    /// The last good copy, where the server keeps one.
    copy: CopyState,
    /// Ids below this are reserved on disk.
    reserved: u64,
    /// The highest reservation handed to the persister.
    reserving: u64,
}

/// The log. Share it in an `Arc`; every method takes a short lock, never across an await.
#[derive(Debug)]
pub struct ReleaseLog {
    dir: Option<PathBuf>,
    persister: Option<Persister>,
    retention: usize,
    // Shared with the persister's completion callbacks.
    state: Arc<Mutex<LogState>>,
    /// Bumped whenever a release file is written or fails, for writers waiting on theirs.
    persisted: Arc<tokio::sync::watch::Sender<u64>>,
}

/// The hex SHA-256 of a document, as releases record it.
pub(crate) fn document_hash(text: &str) -> String {
    hex::encode(content_hash(text))
}

impl ReleaseLog {
    /// A log kept in memory only.
    pub fn in_memory(retention: usize) -> Self {
        Self {
            dir: None,
            persister: None,
            retention: retention.max(1),
            state: Arc::new(Mutex::new(LogState { next_id: 1, ..LogState::default() })),
            persisted: Arc::new(tokio::sync::watch::Sender::new(0)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, LogState> {
        lock_state(&self.state)
    }

    /// Blocks until every release file handed to the persister is on disk. Not for async threads.
    pub fn flush(&self) {
        if let Some(persister) = &self.persister {
            persister.flush();
        }
    }

    /// How many releases are kept.
    pub fn retention(&self) -> usize {
        self.retention
    }
}

fn lock_state(state: &Mutex<LogState>) -> MutexGuard<'_, LogState> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}
