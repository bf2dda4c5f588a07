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
//! block of [`RESERVE`], renewed by the persister when half of it is used; the first block is
//! written at start-up, before anything is served) and starts above that reservation and above
//! every id any file name in `releases/` claims. So ids can skip up to [`RESERVE`] across a
//! restart. Files that cannot be trusted (unreadable, or an id other than their name's, or above
//! [`MAX_ID`]) are moved aside as `*.corrupt` and logged at error level. Only when even the
//! reservation cannot be written (the whole data directory unwritable) can ids of releases that
//! never reached the disk be issued again after a restart; that too is logged at error level.
//!
//! Releases are recorded by the [`Reloader`](crate::reload::Reloader) just *before* it installs a
//! table, so whoever wakes up on the served table's watch channel finds the release already there.
//! A writer's announcement ([`crate::publish::PendingWrites`]) attaches its author and message to
//! the release ([`ReleaseLog::record_as`]); documents nobody announced are attributed to their
//! origin.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use skyconf_core::AgentConfigurations;
use skyconf_core::diff::{ChangeKind, ServiceChange, diff};
use skyconf_core::store::content_hash;

use skyconf_sources::fs::write_atomically;

use crate::chunked_text::ChunkedText;
use crate::persister::Persister;
use crate::unix_time::now_ms;

/// How many releases are kept by default.
pub const DEFAULT_RETENTION: usize = 200;

/// The most of a refused document kept for operators to look at.
const MAX_REJECTED_TEXT_BYTES: usize = 1024 * 1024;

/// The highest release id trusted (2^53 - 1, exact in JSON numbers and in the web page). A file
/// claiming a higher one is corrupt; ids never wrap.
pub const MAX_ID: u64 = (1 << 53) - 1;

/// How many ids are reserved ahead on disk, so ids whose files could not be written are never
/// issued again after a restart.
pub const RESERVE: u64 = 32;

/// The reservation's file, in the data directory.
const RESERVATION_FILE: &str = "next-release-id";

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

/// The origin of a document written through the admin API.
pub const ORIGIN_API: &str = "api";
/// The origin of a document a staged rollout wrote, before its id.
pub const ORIGIN_ROLLOUT: &str = "rollout ";

/// Whether `origin` names a write made through a replica's admin API (a plain write or a
/// rollout's last step), rather than a change found in the store.
pub fn written_through_admin(origin: &str) -> bool {
    origin == ORIGIN_API || origin.starts_with(ORIGIN_ROLLOUT)
}

/// One accepted document.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct Release {
    /// Increases with every release, across restarts. With a store that orders its changes
    /// (etcd, ZooKeeper) it is the store's revision of the document ([`Release::store_revision`]),
    /// so every replica on the same store names a release alike; otherwise it increases by one.
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
    /// Every service's digest in this release.
    pub digests: BTreeMap<String, String>,
    /// What changed against the previous release.
    pub changes: Vec<ServiceChange>,
}

/// The most changed services a [`ReleaseSummary`] names.
pub const MAX_SUMMARY_CHANGES: usize = 20;

/// What the log keeps in memory of a release: its metadata and counts, and the first
/// [`MAX_SUMMARY_CHANGES`] changed services. Digests and key-level changes stay in the release's
/// file ([`ReleaseLog::full`]), so memory does not grow with the size of the documents.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct ReleaseSummary {
    /// See [`Release::id`].
    pub id: u64,
    /// See [`Release::at_ms`].
    pub at_ms: u64,
    /// See [`Release::author`].
    pub author: Option<String>,
    /// See [`Release::message`].
    pub message: Option<String>,
    /// See [`Release::origin`].
    pub origin: String,
    /// See [`Release::rollback_of`].
    pub rollback_of: Option<u64>,
    /// See [`Release::version`].
    pub version: u64,
    /// See [`Release::document_sha256`].
    pub document_sha256: Option<String>,
    /// See [`Release::store_revision`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store_revision: Option<u64>,
    /// How many services the document configures.
    pub services: usize,
    /// How many services' digests changed.
    pub changed: usize,
    /// The first changed services (at most [`MAX_SUMMARY_CHANGES`]), in the release's order.
    pub changes: Vec<ChangeSummary>,
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
            id: release.id,
            at_ms: release.at_ms,
            author: release.author.clone(),
            message: release.message.clone(),
            origin: release.origin.clone(),
            rollback_of: release.rollback_of,
            version: release.version,
            document_sha256: release.document_sha256.clone(),
            store_revision: release.store_revision,
            services: release.digests.len(),
            changed: release.changes.len(),
            changes: release
                .changes
                .iter()
                .take(MAX_SUMMARY_CHANGES)
                .map(|c| ChangeSummary { service: c.service.clone(), change: c.change })
                .collect(),
        }
    }

    fn hash(&self) -> Option<&str> {
        self.document_sha256.as_deref()
    }
}

/// A release not (yet) on disk: all of them without a data directory, else those whose file is
/// not written (yet). Kept small, since without a data directory there are `retention` of them:
/// the digests are left out (they follow from the text, and at 10,000 services they are
/// megabytes, nearly the same in every release), and the text shares its chunks with the
/// release kept before it.
#[derive(Debug)]
struct Kept {
    /// The release, with no digests.
    release: Arc<Release>,
    document: Option<ChunkedText>,
}

impl Kept {
    /// Keeps `release` and its text (chunked by [`ReleaseLog::chunk`], outside the lock).
    fn new(release: &Release, document: Option<ChunkedText>) -> Self {
        Self { release: Arc::new(release.without_digests()), document }
    }

    /// The release in full, its digests read again from its text, the text and its table. Reads
    /// a whole document: call it without the log's lock, off the async threads.
    fn full(
        release: &Release,
        document: Option<&ChunkedText>,
    ) -> Result<(Release, Option<String>, AgentConfigurations), skyconf_core::ReadError> {
        let text = document.map(ChunkedText::text);
        let table = match &text {
            Some(text) => skyconf_core::read(text)?,
            None => AgentConfigurations::default(),
        };
        let mut full = release.without_digests();
        full.digests = digests(&table);
        Ok((full, text, table))
    }
}

/// Every service's digest in `table`, as a release records them.
fn digests(table: &AgentConfigurations) -> BTreeMap<String, String> {
    table.services().map(|s| (s.name().to_owned(), s.digest().to_string())).collect()
}

impl Release {
    /// A copy without the digests (never copying them).
    fn without_digests(&self) -> Self {
        Self {
            id: self.id,
            at_ms: self.at_ms,
            author: self.author.clone(),
            message: self.message.clone(),
            origin: self.origin.clone(),
            rollback_of: self.rollback_of,
            version: self.version,
            document_sha256: self.document_sha256.clone(),
            store_revision: self.store_revision,
            digests: BTreeMap::new(),
            changes: self.changes.clone(),
        }
    }
}

/// Where a release is: in memory (without its digests), in its file, or not kept.
enum Stored {
    Gone,
    Memory(Arc<Release>, Option<ChunkedText>),
    File(PathBuf),
}

/// What [`ReleaseLog::append`] leaves for [`ReleaseLog::save`].
struct Appended {
    summary: Arc<ReleaseSummary>,
    evicted: Vec<u64>,
    reserve: Option<u64>,
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

/// What a release file holds: the release and the document text.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct ReleaseFile {
    format: u32,
    #[serde(flatten)]
    release: Release,
    document: Option<String>,
}

/// A document that was refused, with its text, for operators.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct RejectedDocument {
    /// Where it came from.
    pub origin: String,
    /// Why, with line and column.
    pub error: String,
    /// When (Unix milliseconds).
    pub at_ms: u64,
    /// Its text (the first MiB).
    pub text: String,
    /// Whether the text was cut.
    pub truncated: bool,
}

/// The last good copy (`last-good.json`, see [`crate::persist`]) as far as durability goes: a
/// release is durable once its file is on disk *and* a copy that holds its document (or a newer
/// one) is, so a restart with the store away serves it.
#[derive(Debug, Default)]
struct CopyState {
    /// The server keeps a copy ([`ReleaseLog::keep_last_good`]).
    kept: bool,
    /// The newest release whose document (or a newer one) a copy on disk holds.
    through: u64,
    /// The newest copy that could not be written: the release it was to hold, and why.
    failed: Option<(u64, String)>,
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
    last_rejection: Option<RejectedDocument>,
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

/// Whether a release is on disk: its file, and (where the server keeps one) the last good copy
/// a restart serves when the store is away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Durability {
    /// No data directory: releases live in memory only, by configuration.
    Memory,
    /// Its file or the copy is being written.
    Pending,
    /// Its file and the copy are on disk (or it was dropped by retention).
    Durable,
    /// Its file, or the last good copy holding its document, could not be written (why); the
    /// release is kept in memory until the server stops.
    Failed(String),
}

/// The hex SHA-256 of a document, as releases record it.
pub fn document_hash(text: &str) -> String {
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

    /// The log in `<data_dir>/releases`, with the releases already there (files that cannot be
    /// trusted are moved aside; the directory is created on the first release), written by a
    /// persister of its own. A directory that cannot be read is logged and the log starts empty:
    /// its releases then fail to be written, and writes say so.
    pub fn open(data_dir: &Path, retention: usize) -> Result<Self, ReleaseError> {
        Self::open_with(data_dir, retention, Persister::spawn())
    }

    /// [`Self::open`], writing through `persister`.
    pub fn open_with(data_dir: &Path, retention: usize, persister: Persister) -> Result<Self, ReleaseError> {
        let dir = data_dir.join("releases");
        let log = Self { dir: Some(dir.clone()), persister: Some(persister), ..Self::in_memory(retention) };
        let mut releases = Vec::new();
        // Every id any file name claims, trusted or not: the next id is above all of them.
        let mut highest_seen = 0;
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => Some(entries),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(cause) => {
                let error = ReleaseError::Io { path: dir.display().to_string(), cause };
                tracing::error!(%error, "Cannot read the release history; new releases will fail to be written.");
                None
            }
        };
        for entry in entries.into_iter().flatten() {
            let entry = entry.map_err(|cause| ReleaseError::Io { path: dir.display().to_string(), cause })?;
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let named = id_in_name(&name);
            if let Some(id) = named.filter(|&id| id <= MAX_ID) {
                highest_seen = highest_seen.max(id);
            }
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let checked = read_release_file(&path).and_then(|file| match named {
                Some(id) if id == file.release.id && id <= MAX_ID && name == format!("{id:020}.json") => Ok(file),
                _ => Err(ReleaseError::Format {
                    path: path.display().to_string(),
                    message: format!(
                        "it holds release {} under another name, or an id above {MAX_ID}",
                        file.release.id
                    ),
                }),
            });
            match checked {
                Ok(file) => releases.push(file.release),
                Err(error) => quarantine(&path, &error),
            }
        }
        releases.sort_by_key(|r| r.id);
        let mut last_changes = HashMap::new();
        for release in &releases {
            for change in &release.changes {
                last_changes.insert(change.service.clone(), (release.id, release.at_ms));
            }
        }
        let releases: VecDeque<_> = releases.iter().map(|r| Arc::new(ReleaseSummary::of(r))).collect();
        let reservation = data_dir.join(RESERVATION_FILE);
        let reserved_before = match std::fs::read_to_string(&reservation) {
            Ok(text) => match text.trim().parse::<u64>() {
                Ok(id) if id <= MAX_ID => id,
                _ => {
                    tracing::error!(path = %reservation.display(), "The release id reservation is not a valid id; ignoring it.");
                    0
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(error) => {
                tracing::error!(path = %reservation.display(), %error, "Cannot read the release id reservation.");
                0
            }
        };
        let next_id = highest_seen.saturating_add(1).max(reserved_before).max(1);
        let target = next_id.saturating_add(RESERVE);
        let reserved = match write_atomically(&reservation, format!("{target}\n").as_bytes()) {
            Ok(()) => target,
            Err(error) => {
                tracing::error!(path = %reservation.display(), %error, "Cannot reserve release ids on disk; ids of releases that fail to be written may be issued again after a restart.");
                next_id
            }
        };
        {
            let mut state = log.lock();
            state.next_id = next_id;
            state.reserved = reserved;
            state.reserving = reserved;
            state.releases = releases;
            state.last_changes = last_changes;
        }
        log.enforce_retention();
        Ok(log)
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

    /// Records an accepted document: `table` read from `text` (`None`: the key was deleted), to
    /// be served as `version`, replacing `previous`, found in the store at `store_revision` where
    /// it has revisions. `origin` names the store.
    ///
    /// The id is the store revision when there is one above every id issued so far (so replicas
    /// agree on it); otherwise (no revisions, or a wiped or restored store whose revisions went
    /// back) the next local id.
    pub fn record(
        &self,
        previous: &AgentConfigurations,
        table: &AgentConfigurations,
        text: Option<&str>,
        version: u64,
        store_revision: Option<u64>,
        origin: &str,
    ) -> Arc<ReleaseSummary> {
        let attribution = Attribution { origin: origin.to_owned(), ..Attribution::default() };
        self.record_as(previous, table, text, version, store_revision, attribution)
    }

    /// [`Self::record`], attributed to `attribution` (a writer's announcement, see
    /// [`crate::publish::PendingWrites`]).
    pub fn record_as(
        &self,
        previous: &AgentConfigurations,
        table: &AgentConfigurations,
        text: Option<&str>,
        version: u64,
        store_revision: Option<u64>,
        attribution: Attribution,
    ) -> Arc<ReleaseSummary> {
        let hash = text.map(document_hash);
        let chunked = self.chunk(text);
        let (release, appended) = {
            let mut state = self.lock();
            // A store revision is unique by itself: it need only follow the kept releases (the
            // reservation ahead guards local ids, which a restart could otherwise reissue).
            let newest = state.releases.back().map_or(0, |r| r.id);
            let id = match store_revision {
                Some(revision) if revision > newest && revision <= MAX_ID => revision,
                _ => state.next_id,
            };
            let release = Arc::new(Release {
                id,
                at_ms: now_ms(),
                author: attribution.author,
                message: attribution.message,
                origin: attribution.origin,
                rollback_of: attribution.rollback_of,
                version,
                document_sha256: hash,
                store_revision,
                digests: digests(table),
                changes: diff(previous, table),
            });
            Self::serve_as(&mut state, version, release.id, self.retention);
            let appended = self.append(&mut state, &release, chunked);
            (release, appended)
        };
        let summary = self.save(&release, text, appended);
        tracing::info!(release = release.id, version, origin = %release.origin, changed = release.changes.len(), "Recorded a release.");
        summary
    }

    /// Adds `release` (newer than every kept one) to the log; what [`ReleaseLog::save`] needs.
    fn append(&self, state: &mut LogState, release: &Arc<Release>, document: Option<ChunkedText>) -> Appended {
        // Never wraps: ids above MAX_ID are refused at start-up, so this cannot saturate.
        state.next_id = state.next_id.max(release.id.saturating_add(1));
        let summary = Arc::new(ReleaseSummary::of(release));
        state.releases.push_back(Arc::clone(&summary));
        for change in &release.changes {
            state.last_changes.insert(change.service.clone(), (release.id, release.at_ms));
        }
        // Until its file is on disk (for good without a data directory).
        state.documents.insert(release.id, Kept::new(release, document));
        let reserve = self.reserve_more(state);
        Appended { summary, evicted: self.evict(state), reserve }
    }

    /// Writes an appended release's file (off the serving path), the reservation it needs and
    /// the removal of the files retention dropped.
    fn save(&self, release: &Arc<Release>, text: Option<&str>, appended: Appended) -> Arc<ReleaseSummary> {
        let Appended { summary, evicted, reserve } = appended;
        if let (Some(dir), Some(persister)) = (&self.dir, &self.persister) {
            if let Some(target) = reserve {
                self.write_reservation(dir, persister, target);
            }
            let file = ReleaseFile { format: 1, release: (**release).clone(), document: text.map(str::to_owned) };
            match serde_json::to_vec_pretty(&file) {
                Ok(bytes) => {
                    let (state, persisted, id) = (Arc::clone(&self.state), Arc::clone(&self.persisted), release.id);
                    let done = Box::new(move |result: std::io::Result<()>| {
                        match result {
                            Ok(()) => {
                                lock_state(&state).documents.remove(&id);
                            }
                            Err(error) => {
                                let why = format!("release {id}'s file could not be written: {error}");
                                lock_state(&state).unsaved.insert(id, why);
                                tracing::error!(release = id, %error, "Cannot write the release to disk: its change is served, but its history is kept in memory only until the server stops.");
                            }
                        }
                        persisted.send_modify(|n| *n = n.wrapping_add(1));
                    });
                    persister.write(release_path(dir, release.id), bytes, Some(done));
                }
                Err(error) => {
                    self.lock()
                        .unsaved
                        .insert(release.id, format!("release {} could not be encoded: {error}", release.id));
                    tracing::error!(release = release.id, %error, "Cannot encode the release; it is kept in memory.")
                }
            }
            self.delete_files(&evicted);
        }
        summary
    }

    /// Adds a release another replica recorded in the shared history and this one never saw (it
    /// was stopped, or the store reported a burst of changes as its last one): read from its
    /// text and compared with the kept release before it. One between two kept releases is
    /// inserted, and the next one's changes are then counted against it, as on the replicas that
    /// saw it. False when it is kept already, or older than every kept release (retention dropped
    /// it here). Reads and writes files: call it off the async threads.
    pub fn import(&self, shared: &SharedRelease) -> Result<bool, skyconf_core::ReadError> {
        if shared.id > MAX_ID {
            return Ok(false);
        }
        let (previous_id, next_id) = {
            let state = self.lock();
            let position = state.releases.partition_point(|r| r.id < shared.id);
            if state.releases.get(position).is_some_and(|r| r.id == shared.id)
                || (position == 0 && !state.releases.is_empty())
            {
                return Ok(false);
            }
            (position.checked_sub(1).map(|i| state.releases[i].id), state.releases.get(position).map(|r| r.id))
        };
        let table = match &shared.document {
            Some(text) => skyconf_core::read(text)?,
            None => AgentConfigurations::default(),
        };
        let previous = previous_id.and_then(|id| self.table_of(id)).unwrap_or_default();
        let release = Arc::new(Release {
            id: shared.id,
            at_ms: shared.at_ms,
            author: shared.author.clone(),
            message: shared.message.clone(),
            origin: shared.origin.clone(),
            rollback_of: shared.rollback_of,
            // Never served by this replica in this run.
            version: 0,
            document_sha256: shared.document.as_deref().map(document_hash),
            store_revision: Some(shared.id),
            digests: digests(&table),
            changes: diff(&previous, &table),
        });
        let document = shared.document.as_deref();
        let chunked = self.chunk(document);
        let Some(next_id) = next_id else {
            let appended = {
                let mut state = self.lock();
                if state.releases.back().is_some_and(|l| l.id >= shared.id) {
                    return Ok(false);
                }
                self.append(&mut state, &release, chunked)
            };
            self.save(&release, document, appended);
            tracing::info!(release = release.id, origin = %release.origin, "Imported a release from the shared history.");
            return Ok(true);
        };
        // Between two kept releases: the next one changed from this one, not from the one before.
        let (mut next, next_document, next_table) = match self.kept(next_id) {
            Stored::Gone => return Ok(false),
            Stored::Memory(release, document) => Kept::full(&release, document.as_ref())?,
            Stored::File(path) => {
                let Ok(file) = read_release_file(&path) else { return Ok(false) };
                let table = match &file.document {
                    Some(text) => skyconf_core::read(text)?,
                    None => AgentConfigurations::default(),
                };
                (file.release, file.document, table)
            }
        };
        let before = std::mem::replace(&mut next.changes, diff(&table, &next_table));
        let next = Arc::new(next);
        let evicted = {
            let mut state = self.lock();
            let position = state.releases.partition_point(|r| r.id < shared.id);
            if state.releases.get(position).map(|r| r.id) != Some(next_id) {
                return Ok(false); // the log changed meanwhile; the next sync tries again
            }
            state.releases.insert(position, Arc::new(ReleaseSummary::of(&release)));
            state.releases[position + 1] = Arc::new(ReleaseSummary::of(&next));
            for change in &before {
                let still = next.changes.iter().any(|c| c.service == change.service);
                if !still && state.last_changes.get(&change.service).is_some_and(|(id, _)| *id == next.id) {
                    state.last_changes.remove(&change.service);
                }
            }
            for change in &release.changes {
                let newer = state.last_changes.get(&change.service).is_some_and(|(id, _)| *id > release.id);
                if !newer {
                    state.last_changes.insert(change.service.clone(), (release.id, release.at_ms));
                }
            }
            if let Some(kept) = state.documents.get_mut(&next.id) {
                kept.release = Arc::new(next.without_digests());
            }
            state.documents.insert(release.id, Kept::new(&release, chunked));
            state.next_id = state.next_id.max(release.id.saturating_add(1));
            self.evict(&mut state)
        };
        let summary = Arc::new(ReleaseSummary::of(&release));
        self.save(&release, document, Appended { summary, evicted, reserve: None });
        if let (Some(dir), Some(persister)) = (&self.dir, &self.persister) {
            let file = ReleaseFile { format: 1, release: (*next).clone(), document: next_document };
            if let Ok(bytes) = serde_json::to_vec_pretty(&file) {
                persister.write(release_path(dir, next.id), bytes, None);
            }
        }
        tracing::info!(release = release.id, origin = %release.origin, "Inserted a release this replica missed, from the shared history.");
        Ok(true)
    }

    /// Gives kept release `id` the attribution the shared history holds for it (who, when, why,
    /// from where), so every replica shows the same. False when it is not kept or already says so.
    /// Rewrites its file: call it off the async threads.
    pub fn amend(&self, id: u64, shared: &SharedRelease) -> bool {
        let apply = |release: &mut Release| {
            release.at_ms = shared.at_ms;
            release.author.clone_from(&shared.author);
            release.message.clone_from(&shared.message);
            release.origin.clone_from(&shared.origin);
            release.rollback_of = shared.rollback_of;
        };
        let kept = {
            let mut state = self.lock();
            let Ok(index) = state.releases.binary_search_by_key(&id, |r| r.id) else { return false };
            let old = &state.releases[index];
            if (old.at_ms, &old.author, &old.message, &old.origin, old.rollback_of)
                == (shared.at_ms, &shared.author, &shared.message, &shared.origin, shared.rollback_of)
            {
                return false;
            }
            let mut summary = (**old).clone();
            summary.at_ms = shared.at_ms;
            summary.author.clone_from(&shared.author);
            summary.message.clone_from(&shared.message);
            summary.origin.clone_from(&shared.origin);
            summary.rollback_of = shared.rollback_of;
            state.releases[index] = Arc::new(summary);
            for (changed_in, at_ms) in state.last_changes.values_mut() {
                if *changed_in == id {
                    *at_ms = shared.at_ms;
                }
            }
            state.documents.get_mut(&id).map(|kept| {
                let mut release = (*kept.release).clone();
                apply(&mut release);
                kept.release = Arc::new(release);
                (Arc::clone(&kept.release), kept.document.clone())
            })
        };
        if let (Some(dir), Some(persister)) = (&self.dir, &self.persister) {
            // After any write of the old file still queued: the persister writes in order.
            let file = match kept {
                // A text that no longer reads (it cannot: it was read when recorded) leaves the
                // file as it is rather than rewrite it without its digests.
                Some((release, document)) => Kept::full(&release, document.as_ref())
                    .ok()
                    .map(|(release, document, _)| ReleaseFile { format: 1, release, document }),
                None => read_release_file(&release_path(dir, id)).ok().map(|mut file| {
                    apply(&mut file.release);
                    file
                }),
            };
            if let Some(bytes) = file.and_then(|f| serde_json::to_vec_pretty(&f).ok()) {
                persister.write(release_path(dir, id), bytes, None);
            }
        }
        tracing::debug!(release = id, origin = %shared.origin, "Took the shared history's attribution of a release.");
        true
    }

    /// Records, at start-up, the document the server starts with, unless it is the newest release
    /// already (the usual case after a restart).
    pub fn record_start(
        &self,
        table: &AgentConfigurations,
        text: Option<&str>,
        version: u64,
        store_revision: Option<u64>,
        origin: &str,
    ) {
        let latest = self.latest();
        let hash = text.map(document_hash);
        if let Some(latest) = latest.as_ref().filter(|l| l.document_sha256 == hash) {
            Self::serve_as(&mut self.lock(), version, latest.id, self.retention);
            return;
        }
        let previous = latest.and_then(|l| self.table_of(l.id)).unwrap_or_default();
        self.record(&previous, table, text, version, store_revision, origin);
    }

    fn serve_as(state: &mut LogState, version: u64, id: u64, retention: usize) {
        state.served_as.retain(|&(v, _)| v < version);
        state.served_as.push_back((version, id));
        while state.served_as.len() > retention.saturating_add(16) {
            state.served_as.pop_front();
        }
    }

    /// The release whose table is served as `version` in this run: what a reader that took a
    /// snapshot of the served table must name as its ETag. `None` for a table no release names.
    pub fn served_as(&self, version: u64) -> Option<u64> {
        self.lock().served_as.iter().rev().find(|&&(v, _)| v == version).map(|&(_, id)| id)
    }

    /// The next reservation to write, when less than half of the current one is left.
    fn reserve_more(&self, state: &mut LogState) -> Option<u64> {
        self.dir.as_ref()?;
        if state.next_id.saturating_add(RESERVE / 2) <= state.reserving {
            return None;
        }
        state.reserving = state.next_id.saturating_add(RESERVE);
        Some(state.reserving)
    }

    fn write_reservation(&self, dir: &Path, persister: &Persister, target: u64) {
        let Some(data_dir) = dir.parent() else { return };
        let state = Arc::clone(&self.state);
        let done = Box::new(move |result: std::io::Result<()>| match result {
            Ok(()) => {
                let mut state = lock_state(&state);
                state.reserved = state.reserved.max(target);
            }
            Err(error) => {
                tracing::error!(%error, "Cannot reserve release ids on disk; ids of releases that fail to be written may be issued again after a restart.")
            }
        });
        persister.write(data_dir.join(RESERVATION_FILE), format!("{target}\n").into_bytes(), Some(done));
    }

    /// Whether release `id`'s file is on disk, and the last good copy with its document.
    pub fn durability(&self, id: u64) -> Durability {
        if self.dir.is_none() {
            return Durability::Memory;
        }
        let state = self.lock();
        if let Some(why) = state.unsaved.get(&id) {
            return Durability::Failed(why.clone());
        }
        if state.documents.contains_key(&id) {
            return Durability::Pending;
        }
        if state.copy.kept && state.copy.through < id {
            return match &state.copy.failed {
                Some((failed, why)) if *failed >= id => Durability::Failed(why.clone()),
                _ => Durability::Pending,
            };
        }
        Durability::Durable
    }

    /// The server keeps a last good copy: from now on a release is durable only once a copy that
    /// holds its document is on disk too ([`Self::last_good_written`]).
    pub fn keep_last_good(&self) {
        self.lock().copy.kept = true;
    }

    /// A last good copy holding release `through`'s document was written (`Ok`) or could not be
    /// (`Err`, why); writers waiting on their release learn it.
    pub fn last_good_written(&self, through: u64, result: Result<(), String>) {
        {
            let mut state = self.lock();
            let copy = &mut state.copy;
            match result {
                Ok(()) => {
                    copy.through = copy.through.max(through);
                    if copy.failed.as_ref().is_some_and(|(failed, _)| *failed <= copy.through) {
                        copy.failed = None;
                    }
                }
                Err(why) => {
                    tracing::error!(release = through, error = %why, "Cannot write the last good copy.");
                    copy.failed = Some((through, why));
                }
            }
        }
        self.persisted.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Waits (up to `deadline`) until release `id` is durable or has failed.
    pub async fn durable(&self, id: u64, deadline: tokio::time::Instant) -> Durability {
        let mut changes = self.persisted.subscribe();
        loop {
            let durability = self.durability(id);
            if durability != Durability::Pending {
                return durability;
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => return self.durability(id),
            }
        }
    }

    /// How many kept releases could not be written to disk.
    pub fn unsaved(&self) -> usize {
        self.lock().unsaved.len()
    }

    fn evict(&self, state: &mut LogState) -> Vec<u64> {
        let mut evicted = Vec::new();
        while state.releases.len() > self.retention {
            if let Some(old) = state.releases.pop_front() {
                state.documents.remove(&old.id);
                state.unsaved.remove(&old.id);
                evicted.push(old.id);
            }
        }
        if let Some(oldest) = state.releases.front().map(|r| r.id)
            && !evicted.is_empty()
        {
            state.last_changes.retain(|_, (id, _)| *id >= oldest);
        }
        evicted
    }

    fn enforce_retention(&self) {
        let evicted = {
            let mut state = self.lock();
            self.evict(&mut state)
        };
        self.delete_files(&evicted);
    }

    fn delete_files(&self, ids: &[u64]) {
        let (Some(dir), Some(persister)) = (&self.dir, &self.persister) else { return };
        for id in ids {
            persister.remove(release_path(dir, *id));
        }
    }

    /// Every release kept, newest first.
    pub fn list(&self) -> Vec<Arc<ReleaseSummary>> {
        self.lock().releases.iter().rev().cloned().collect()
    }

    /// A page of releases, newest first: at most `limit` with ids below `before` (all when
    /// `None`), and how many are kept in all.
    pub fn page(&self, before: Option<u64>, limit: usize) -> (Vec<Arc<ReleaseSummary>>, usize) {
        let state = self.lock();
        let end = before.map_or(state.releases.len(), |b| state.releases.partition_point(|r| r.id < b));
        let page = state.releases.range(..end).rev().take(limit).cloned().collect();
        (page, state.releases.len())
    }

    /// One release's summary.
    pub fn get(&self, id: u64) -> Option<Arc<ReleaseSummary>> {
        let state = self.lock();
        let index = state.releases.binary_search_by_key(&id, |r| r.id).ok()?;
        state.releases.get(index).cloned()
    }

    /// The newest release.
    pub fn latest(&self) -> Option<Arc<ReleaseSummary>> {
        self.lock().releases.back().cloned()
    }

    /// The release before `id`, if it is still kept.
    pub fn previous(&self, id: u64) -> Option<Arc<ReleaseSummary>> {
        let state = self.lock();
        let index = state.releases.partition_point(|r| r.id < id);
        index.checked_sub(1).and_then(|i| state.releases.get(i).cloned())
    }

    /// The newest release after `after` whose document has `hash` (`None`: a delete).
    pub fn find_after(&self, after: u64, hash: Option<&str>) -> Option<Arc<ReleaseSummary>> {
        self.lock().releases.iter().rev().take_while(|r| r.id > after).find(|r| r.hash() == hash).cloned()
    }

    /// The newest kept release that changed `service`'s digest: its id and time.
    pub fn last_change(&self, service: &str) -> Option<(u64, u64)> {
        self.lock().last_changes.get(service).copied()
    }

    /// The text of release `id`: `Ok(None)` when it is not kept, `Ok(Some(None))` for a delete.
    /// Reads a file: call it off the async threads.
    pub fn document(&self, id: u64) -> Result<Option<Option<String>>, ReleaseError> {
        match self.kept(id) {
            Stored::Gone => Ok(None),
            Stored::Memory(_, document) => Ok(Some(document.as_ref().map(ChunkedText::text))),
            Stored::File(path) => Ok(Some(read_release_file(&path)?.document)),
        }
    }

    /// Release `id` in full (digests, key-level changes) with its text, from memory or from its
    /// file: `Ok(None)` when it is not kept. Reads a file, or a whole document from memory (to
    /// give the digests): call it off the async threads.
    pub fn full(&self, id: u64) -> Result<Option<(Release, Option<String>)>, ReleaseError> {
        match self.kept(id) {
            Stored::Gone => Ok(None),
            Stored::Memory(release, document) => match Kept::full(&release, document.as_ref()) {
                Ok((release, document, _)) => Ok(Some((release, document))),
                Err(error) => {
                    // It was read when it was recorded; the same reader cannot refuse it now.
                    tracing::error!(release = id, %error, "A kept release no longer reads.");
                    Ok(Some(((*release).clone(), document.as_ref().map(ChunkedText::text))))
                }
            },
            Stored::File(path) => {
                let file = read_release_file(&path)?;
                Ok(Some((file.release, file.document)))
            }
        }
    }

    /// Where release `id` is kept; the lock is held only to find out.
    fn kept(&self, id: u64) -> Stored {
        let state = self.lock();
        if state.releases.binary_search_by_key(&id, |r| r.id).is_err() {
            return Stored::Gone;
        }
        if let Some(kept) = state.documents.get(&id) {
            return Stored::Memory(Arc::clone(&kept.release), kept.document.clone());
        }
        self.dir.as_ref().map_or(Stored::Gone, |dir| Stored::File(release_path(dir, id)))
    }

    /// What release `id` changed, key by key: `Ok(None)` when it is not kept. Reads a file
    /// (never a whole document from memory): call it off the async threads.
    pub fn changes(&self, id: u64) -> Result<Option<Vec<ServiceChange>>, ReleaseError> {
        match self.kept(id) {
            Stored::Gone => Ok(None),
            Stored::Memory(release, _) => Ok(Some(release.changes.clone())),
            Stored::File(path) => Ok(Some(read_release_file(&path)?.release.changes)),
        }
    }

    /// `text` as a kept release keeps it: without a data directory, in chunks shared with the
    /// newest kept release's text (the one it most likely shares them with; taken in a short
    /// lock, the chunking done outside it); with one, whole (kept only until its file is written).
    fn chunk(&self, text: Option<&str>) -> Option<ChunkedText> {
        let text = text?;
        if self.dir.is_some() {
            return Some(ChunkedText::whole(text));
        }
        let like = {
            let state = self.lock();
            state.releases.back().and_then(|r| state.documents.get(&r.id)).and_then(|k| k.document.clone())
        };
        Some(ChunkedText::new(text, like.as_ref()))
    }

    /// The table of release `id`, if its text is still readable.
    pub fn table_of(&self, id: u64) -> Option<AgentConfigurations> {
        match self.document(id) {
            Ok(Some(Some(text))) => skyconf_core::read(&text).ok(),
            Ok(Some(None)) => Some(AgentConfigurations::default()),
            Ok(None) => None,
            Err(error) => {
                tracing::warn!(release = id, %error, "Cannot read a release.");
                None
            }
        }
    }

    /// Keeps a refused document for operators.
    pub fn record_rejection(&self, origin: &str, error: &str, text: &str) {
        let mut end = text.len().min(MAX_REJECTED_TEXT_BYTES);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        self.lock().last_rejection = Some(RejectedDocument {
            origin: origin.to_owned(),
            error: error.to_owned(),
            at_ms: now_ms(),
            text: text[..end].to_owned(),
            truncated: end < text.len(),
        });
    }

    /// Forgets the refused document once a good one is accepted.
    pub fn clear_rejection(&self) {
        self.lock().last_rejection = None;
    }

    /// The last refused document, unless a good one came after it.
    pub fn last_rejection(&self) -> Option<RejectedDocument> {
        self.lock().last_rejection.clone()
    }
}

fn release_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:020}.json"))
}

fn read_release_file(path: &Path) -> Result<ReleaseFile, ReleaseError> {
    let display = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|cause| ReleaseError::Io { path: display.clone(), cause })?;
    let file: ReleaseFile = serde_json::from_str(&text)
        .map_err(|e| ReleaseError::Format { path: display.clone(), message: e.to_string() })?;
    if file.format != 1 {
        return Err(ReleaseError::Format { path: display, message: format!("unknown format {}", file.format) });
    }
    Ok(file)
}

/// The id a file name starts with (`00000000000000000005.json`, `.00000000000000000005.json.*.tmp`,
/// `00000000000000000005.json.corrupt`), if any.
fn id_in_name(name: &str) -> Option<u64> {
    let digits: String = name.trim_start_matches('.').chars().take_while(char::is_ascii_digit).collect();
    if digits.is_empty() {
        return None;
    }
    // Too many digits for a u64: as high as can be, so it is never trusted.
    Some(digits.parse().unwrap_or(u64::MAX))
}

/// Moves a release file that cannot be trusted aside (`*.corrupt`), so it is neither read again nor
/// overwritten, and says so.
fn quarantine(path: &Path, error: &ReleaseError) {
    let mut aside = path.as_os_str().to_owned();
    aside.push(".corrupt");
    match std::fs::rename(path, &aside) {
        Ok(()) => {
            tracing::error!(%error, to = %Path::new(&aside).display(), "A release file cannot be trusted; moved it aside.")
        }
        Err(rename) => {
            tracing::error!(%error, %rename, "A release file cannot be trusted, nor moved aside; skipping it.")
        }
    }
}

fn lock_state(state: &Mutex<LogState>) -> MutexGuard<'_, LogState> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> AgentConfigurations {
        skyconf_core::read(text).unwrap()
    }

    const V1: &str = "configurations:\n  a: {k: 1, j: x}\n  b: {k: 2}\n";
    const V2: &str = "configurations:\n  a: {k: 3}\n  c: {k: 4}\n";

    #[test]
    fn releases_survive_a_restart_and_old_ones_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let log = ReleaseLog::open(dir.path(), 2).unwrap();
        log.record(&AgentConfigurations::default(), &table(V1), Some(V1), 1, None, "file x");
        let ann = Attribution { author: Some("ann".into()), origin: "api".into(), ..Default::default() };
        log.record_as(&table(V1), &table(V2), Some(V2), 2, None, ann);
        log.record(&table(V2), &AgentConfigurations::default(), None, 3, None, "file x");
        assert_eq!(log.list().iter().map(|r| r.id).collect::<Vec<_>>(), [3, 2]);
        log.flush();

        let reopened = ReleaseLog::open(dir.path(), 2).unwrap();
        let two = reopened.get(2).unwrap();
        assert_eq!((two.author.as_deref(), two.origin.as_str()), (Some("ann"), "api"));
        assert_eq!(reopened.document(2).unwrap(), Some(Some(V2.to_owned())));
        assert_eq!(reopened.document(3).unwrap(), Some(None), "a delete has no text");
        assert_eq!(reopened.document(1).unwrap(), None, "past retention");
        assert_eq!(std::fs::read_dir(dir.path().join("releases")).unwrap().count(), 2);
        assert_eq!(reopened.previous(3).unwrap().id, 2);
        assert_eq!(reopened.last_change("c").unwrap().0, 3);
        assert_eq!(reopened.find_after(1, Some(&document_hash(V2))).unwrap().id, 2);
        assert!(reopened.find_after(2, Some(&document_hash(V2))).is_none());

        reopened.record(&AgentConfigurations::default(), &table(V1), Some(V1), 1, None, "file x");
        let id = reopened.latest().unwrap().id;
        assert!(id > 3, "ids keep increasing across restarts (with gaps up to RESERVE), got {id}");
        reopened.record_start(&table(V1), Some(V1), 1, None, "file x");
        assert_eq!(reopened.latest().unwrap().id, id, "an unchanged start records nothing");
    }

    #[test]
    fn an_unreadable_file_is_quarantined_and_its_id_never_reissued() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("releases")).unwrap();
        std::fs::write(dir.path().join("releases/00000000000000000009.json"), "{").unwrap();
        let log = ReleaseLog::open(dir.path(), 10).unwrap();
        assert!(log.list().is_empty());
        assert!(dir.path().join("releases/00000000000000000009.json.corrupt").exists(), "moved aside");
        let release = log.record(&AgentConfigurations::default(), &table(V1), Some(V1), 1, None, "file x");
        assert!(release.id > 9, "above the corrupt file's id, got {}", release.id);
    }

    /// F11: a release whose id was corrupted to u64::MAX made the next id wrap to 0, then 1, and
    /// overwrite release 1's file.
    #[test]
    fn a_corrupt_id_is_quarantined_and_ids_never_wrap() {
        let dir = tempfile::tempdir().unwrap();
        let log = ReleaseLog::open(dir.path(), 10).unwrap();
        for version in 1..=3 {
            log.record(&AgentConfigurations::default(), &table(V1), Some(V1), version, None, "file x");
        }
        log.flush();
        drop(log);
        let newest = dir.path().join("releases/00000000000000000003.json");
        let text = std::fs::read_to_string(&newest).unwrap().replace("\"id\": 3", "\"id\": 18446744073709551615");
        std::fs::write(&newest, text).unwrap();
        // A stray file whose name claims a huge id is not trusted for allocation either.
        std::fs::write(dir.path().join("releases/99999999999999999999.json"), "{}").unwrap();
        let one = std::fs::read_to_string(dir.path().join("releases/00000000000000000001.json")).unwrap();

        let log = ReleaseLog::open(dir.path(), 10).unwrap();
        assert_eq!(log.list().iter().map(|r| r.id).collect::<Vec<_>>(), [2, 1]);
        assert!(dir.path().join("releases/00000000000000000003.json.corrupt").exists());
        assert!(dir.path().join("releases/99999999999999999999.json.corrupt").exists());
        let next = log.record(&AgentConfigurations::default(), &table(V2), Some(V2), 1, None, "file x");
        assert!(next.id > 3, "above every id in a file name, the corrupt one's included: {}", next.id);
        log.flush();
        assert_eq!(std::fs::read_to_string(dir.path().join("releases/00000000000000000001.json")).unwrap(), one);
        let current = log.served_as(1).unwrap();
        assert_eq!(log.document(current).unwrap(), Some(Some(V2.to_owned())));
    }

    /// F10: a release file that cannot be written is reported, and its id is never issued again,
    /// not even after a restart.
    #[tokio::test]
    async fn a_release_that_cannot_be_written_is_reported_and_its_id_never_reissued() {
        let dir = tempfile::tempdir().unwrap();
        // A file where the releases directory should be: every release file write fails (even as
        // root, where a read-only mode would not).
        std::fs::write(dir.path().join("releases"), "not a directory").unwrap();
        let log = ReleaseLog::open(dir.path(), 10).unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let mut ids = Vec::new();
        for version in 1..=3 {
            let text = format!("configurations:\n  a: {{k: {version}}}\n");
            let release =
                log.record(&AgentConfigurations::default(), &table(&text), Some(&text), version, None, "file x");
            assert!(
                matches!(log.durable(release.id, deadline).await, Durability::Failed(why) if why.contains("file could not be written"))
            );
            assert_eq!(log.document(release.id).unwrap(), Some(Some(text)), "kept in memory");
            ids.push(release.id);
        }
        assert_eq!(log.unsaved(), 3);
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
        log.flush();
        drop(log);

        std::fs::remove_file(dir.path().join("releases")).unwrap();
        let log = ReleaseLog::open(dir.path(), 10).unwrap();
        let release = log.record(&AgentConfigurations::default(), &table(V1), Some(V1), 1, None, "file x");
        assert!(release.id > ids[2], "{} reissued after {ids:?}", release.id);
        assert_eq!(log.durable(release.id, deadline).await, Durability::Durable);
        assert_eq!(log.unsaved(), 0);
    }

    /// N11: where the server keeps a last good copy, a release is durable once its file is on
    /// disk and a copy that holds its document (or a newer one) is too; a copy that cannot be
    /// written fails it, with why, until a newer copy is written.
    #[test]
    fn with_a_last_good_copy_a_release_is_durable_once_a_copy_holds_it() {
        let dir = tempfile::tempdir().unwrap();
        let log = ReleaseLog::open(dir.path(), 10).unwrap();
        log.keep_last_good();
        let one = log.record(&AgentConfigurations::default(), &table(V1), Some(V1), 1, None, "file x");
        log.flush();
        assert_eq!(log.durability(one.id), Durability::Pending, "its file is on disk, no copy yet");
        log.last_good_written(one.id, Ok(()));
        assert_eq!(log.durability(one.id), Durability::Durable);
        let two = log.record(&table(V1), &table(V2), Some(V2), 2, None, "file x");
        log.flush();
        log.last_good_written(two.id, Err("cannot write last-good.json: disk full".into()));
        assert_eq!(log.durability(two.id), Durability::Failed("cannot write last-good.json: disk full".into()));
        assert_eq!(log.durability(one.id), Durability::Durable);
        let three = log.record(&table(V2), &table(V1), Some(V1), 3, None, "file x");
        log.flush();
        assert_eq!(log.durability(three.id), Durability::Pending, "an older failure is not this release's");
        log.last_good_written(three.id, Ok(()));
        assert_eq!((log.durability(two.id), log.durability(three.id)), (Durability::Durable, Durability::Durable));
    }

    /// F7: with a data directory, memory keeps summaries only; the full release (digests and
    /// key-level changes) comes from its file.
    #[test]
    fn with_a_data_dir_memory_keeps_summaries_and_details_come_from_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let log = ReleaseLog::open(dir.path(), 10).unwrap();
        let many: String = (0..200).map(|i| format!("  s{i}: {{k: v}}\n")).collect();
        let big = format!("configurations:\n{many}");
        let release = log.record(&AgentConfigurations::default(), &table(&big), Some(&big), 1, None, "file x");
        assert_eq!((release.services, release.changed, release.changes.len()), (200, 200, MAX_SUMMARY_CHANGES));
        log.flush();
        assert!(log.lock().documents.is_empty(), "nothing but the summary stays in memory");
        let (full, document) = log.full(release.id).unwrap().unwrap();
        assert_eq!((full.digests.len(), full.changes.len(), document.as_deref()), (200, 200, Some(big.as_str())));
        assert_eq!(log.last_change("s7"), Some((release.id, release.at_ms)));
        let (page, total) = log.page(None, 5);
        assert_eq!((page.len(), total), (1, 1));
    }

    #[test]
    fn in_memory_logs_keep_documents_and_rejections() {
        let log = ReleaseLog::in_memory(10);
        log.record(&AgentConfigurations::default(), &table(V1), Some(V1), 1, None, "mem");
        assert_eq!(log.document(1).unwrap(), Some(Some(V1.to_owned())));
        assert_eq!(log.table_of(1).unwrap(), table(V1));
        log.record_rejection("mem", "line 1, column 1: bad", &"x".repeat(MAX_REJECTED_TEXT_BYTES + 1));
        let rejected = log.last_rejection().unwrap();
        assert!(rejected.truncated);
        log.clear_rejection();
        assert!(log.last_rejection().is_none());
    }

    /// Without a data directory, a history of near-identical large documents costs about one
    /// text: the texts share their chunks and the digests are read again when asked for.
    #[test]
    fn in_memory_releases_share_their_texts_and_give_back_the_same_digests() {
        let document = |edit: usize| {
            let services: String =
                (0..2_000).map(|i| format!("  s{i}:\n    k: {}\n", if i == edit { edit + 7 } else { 1 })).collect();
            format!("configurations:\n{services}")
        };
        let log = ReleaseLog::in_memory(100);
        let mut previous = AgentConfigurations::default();
        let mut recorded = Vec::new();
        for edit in 0..50 {
            let text = document(edit * 37);
            let next = table(&text);
            let summary = log.record(&previous, &next, Some(&text), edit as u64 + 1, None, "mem");
            recorded.push((summary.id, text, digests(&next)));
            previous = next;
        }
        for (id, text, digests) in &recorded {
            let (full, document) = log.full(*id).unwrap().unwrap();
            assert_eq!(document.as_ref(), Some(text));
            assert_eq!(&full.digests, digests, "release {id}'s digests, read again from its text");
            assert_eq!(log.document(*id).unwrap(), Some(Some(text.clone())));
        }
        // Every distinct chunk counted once: one text plus about a chunk per edit (whole texts
        // would be 50 of them).
        let state = log.lock();
        let mut seen = std::collections::HashSet::new();
        let held: usize = state
            .documents
            .values()
            .flat_map(|kept| kept.document.iter().flat_map(ChunkedText::chunks))
            .filter(|chunk| seen.insert(Arc::as_ptr(chunk) as *const u8 as usize))
            .map(|chunk| chunk.len())
            .sum();
        let one = recorded[0].1.len();
        assert!(held < one + 50 * 16 * 1024, "50 texts of {one} bytes hold {held} bytes");
        assert!(state.documents.values().all(|kept| kept.release.digests.is_empty()), "no digests kept");
    }

    #[test]
    fn a_shared_release_missed_here_is_imported_in_its_place_on_disk_too() {
        let dir = tempfile::tempdir().unwrap();
        let log = ReleaseLog::open(dir.path(), 50).unwrap();
        let v3 = "configurations:\n  a: {k: 3}\n";
        log.record(&AgentConfigurations::default(), &table(V1), Some(V1), 1, Some(10), "etcd x");
        log.record(&table(V1), &table(V2), Some(V2), 2, Some(30), "etcd x");
        assert_eq!(log.get(30).unwrap().changed, 3, "a, b and c changed from V1 to V2");
        let shared = |id, document: &str| SharedRelease {
            id,
            at_ms: 7,
            author: Some("alice".into()),
            message: Some("missed".into()),
            origin: "api".into(),
            rollback_of: None,
            document: Some(document.into()),
        };
        assert!(log.import(&shared(20, v3)).unwrap(), "between two kept releases");
        assert!(!log.import(&shared(20, v3)).unwrap(), "once");
        assert!(!log.import(&shared(5, v3)).unwrap(), "older than every kept release: retention dropped it");
        assert_eq!(log.list().iter().map(|r| r.id).collect::<Vec<_>>(), [30, 20, 10]);
        let missed = log.get(20).unwrap();
        assert_eq!((missed.author.as_deref(), missed.at_ms, missed.changed), (Some("alice"), 7, 2), "a and b");
        assert_eq!(log.get(30).unwrap().changed, 1, "from V3 to V2 only c is new (a's digest is V3's)");
        assert_eq!(log.last_change("b"), Some((20, 7)), "b last changed (went away) in the missed release");
        log.flush();
        let reopened = ReleaseLog::open(dir.path(), 50).unwrap();
        assert_eq!(reopened.list().iter().map(|r| r.id).collect::<Vec<_>>(), [30, 20, 10]);
        assert_eq!(reopened.get(30).unwrap().changed, 1, "the next release's file was rewritten");
        assert!(log.amend(30, &shared(30, V2)));
        log.flush();
        assert_eq!(ReleaseLog::open(dir.path(), 50).unwrap().get(30).unwrap().author.as_deref(), Some("alice"));
    }
}
