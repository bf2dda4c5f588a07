//! The release history every replica shares through the store.
//!
//! With a store that has revisions and shared records (etcd, ZooKeeper; see
//! [`skyconf_sources::shared`]), a release's id is the store's revision of the document
//! ([`ReleaseLog::record`]), so replicas watching one store already agree on ids and order. What
//! only one replica knows is the rest: the author and message of a write made through *its* admin
//! API, and the releases a replica missed while it was stopped. Each release is therefore also
//! kept in the store as a record `releases/<id, 20 digits>` ([`SharedRelease`] as JSON: id, time,
//! author, message, origin, rollback, the document's text), created once:
//!
//! - the replica that wrote the document through its admin API creates the record as soon as it
//!   has recorded the release (it knows the author);
//! - every other replica waits up to [`WAIT_FOR_WRITER`] for that record and takes its time,
//!   author and message ([`ReleaseLog::amend`]); when none comes (a change made in the store
//!   directly, or a writer that stopped in between), it creates the record itself, attributed to
//!   the store. Creation is the store's create-if-absent, so exactly one record exists per release
//!   and the replicas that lost the race take the winner's;
//! - at start-up, a replica imports the records newer than its own newest release
//!   ([`ReleaseLog::import`]) and takes the shared attribution of those it has;
//! - a store may report a burst of changes as its last one (etcd's watch batches, ZooKeeper's
//!   re-read after a notification), so a replica can miss a release another one recorded: for a
//!   minute after each install it compares the record names with its log every
//!   [`LOOK_FOR_GAPS_EVERY`] and imports what it missed, in its place.
//!
//! The agent-configurations key itself is untouched: an OAP reading the same store sees nothing
//! new. Records beyond the retention are deleted by whichever replica creates records (every
//! [`PRUNE_EVERY`] creations). A release recorded with a local id (a store without revisions, or
//! one that went back in time) stays local.

use std::sync::Arc;
use std::time::Duration;

use skyconf_sources::Records;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::releases::{ReleaseLog, ReleaseSummary, SharedRelease};

/// The records' kind.
pub(crate) const KIND: &str = "releases";

/// How long a replica waits for the writing replica's record of a release before it records the
/// change as the store's.
pub(crate) const WAIT_FOR_WRITER: Duration = Duration::from_secs(2);

/// How often a replica looks for the writer's record while it waits.
const LOOK_EVERY: Duration = Duration::from_millis(100);

/// How often a replica compares its history with the shared one.
pub(crate) const LOOK_FOR_GAPS_EVERY: Duration = Duration::from_secs(2);
/// For how long after its last install a replica keeps comparing (a missed release's record may
/// be created a moment after the miss).
pub(crate) const LOOK_FOR_GAPS_FOR: Duration = Duration::from_secs(60);

/// How many records a replica creates between two prunings of the shared history.
pub(crate) const PRUNE_EVERY: u64 = 20;

/// The name of release `id`'s record: fixed width, so names sort as ids do.
fn record_name(id: u64) -> String {
    format!("{id:020}")
}

/// Keeps the local release log and the store's shared history in step.
#[derive(Debug, Clone)]
pub(crate) struct SharedHistory {
    records: Records,
    releases: Arc<ReleaseLog>,
}

impl SharedHistory {
    /// Shares `releases` through `records`.
    pub(crate) fn new(records: Records, releases: Arc<ReleaseLog>) -> Self {
        Self { records, releases }
    }

    /// Reads the shared history into the local log: records newer than the newest local release
    /// are imported, the others' attribution taken. Returns the newest record's id (0: none).
    pub(crate) async fn import(&self) -> u64 {
        let listed = match self.records.list(KIND).await {
            Ok(listed) => listed,
            Err(error) => {
                tracing::warn!(%error, "Cannot read the shared release history; this replica's own history is shown until it can.");
                return 0;
            }
        };
        let mut newest = 0;
        let mut shared = Vec::with_capacity(listed.len());
        for (name, bytes) in listed {
            match serde_json::from_slice::<SharedRelease>(&bytes) {
                Ok(release) if record_name(release.id) == name => {
                    newest = newest.max(release.id);
                    shared.push(release);
                }
                _ => tracing::warn!(record = %name, "Ignoring a shared release record that cannot be read."),
            }
        }
        let imported = self.take(shared).await;
        tracing::info!(records = newest, imported, "Read the shared release history.");
        newest
    }

    /// Brings shared releases into the local log: the attribution of those it keeps, the others
    /// imported in their place. How many were imported.
    async fn take(&self, shared: Vec<SharedRelease>) -> usize {
        let releases = Arc::clone(&self.releases);
        // Reading tables and writing files: off the async threads.
        tokio::task::spawn_blocking(move || {
            let mut imported = 0;
            for release in &shared {
                if releases.get(release.id).is_some() {
                    releases.amend(release.id, release);
                    continue;
                }
                match releases.import(release) {
                    Ok(true) => imported += 1,
                    Ok(false) => {}
                    Err(error) => {
                        tracing::warn!(release = release.id, %error, "A shared release's document cannot be read; it is not imported.");
                    }
                }
            }
            imported
        })
        .await
        .unwrap_or(0)
    }

    /// Shares every release newer than `shared_up_to` (what [`SharedHistory::import`] returned)
    /// until `shutdown`: woken by each install of the served table (a release is recorded just
    /// before its table is installed).
    pub(crate) async fn run(
        self,
        mut shared_up_to: u64,
        mut installs: watch::Receiver<u64>,
        shutdown: CancellationToken,
    ) {
        let mut created = 0u64;
        // When the last install happened: gaps are looked for a while after it, and not forever.
        let mut last_install = tokio::time::Instant::now();
        loop {
            let pending: Vec<Arc<ReleaseSummary>> = self
                .releases
                .list()
                .into_iter()
                .rev()
                .filter(|r| r.meta.id > shared_up_to && r.meta.store_revision == Some(r.meta.id))
                .collect();
            for release in pending {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    done = self.share(&release) => {
                        if done == Shared::Created {
                            created += 1;
                            if created.is_multiple_of(PRUNE_EVERY) {
                                self.prune().await;
                            }
                        }
                    }
                }
                shared_up_to = shared_up_to.max(release.meta.id);
            }
            if last_install.elapsed() <= LOOK_FOR_GAPS_FOR {
                self.fill_gaps().await;
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                changed = installs.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    last_install = tokio::time::Instant::now();
                }
                () = tokio::time::sleep(LOOK_FOR_GAPS_EVERY) => {}
            }
        }
    }

    /// Imports the shared releases this replica never recorded (the store reported a burst of
    /// changes as its last one) that fall within its kept history.
    async fn fill_gaps(&self) {
        let Ok(names) = self.records.names(KIND).await else { return };
        let kept = self.releases.list();
        let Some(oldest) = kept.last().map(|r| r.meta.id) else { return };
        let kept: std::collections::HashSet<u64> = kept.iter().map(|r| r.meta.id).collect();
        let missing =
            names.iter().filter_map(|name| name.parse::<u64>().ok()).filter(|id| *id > oldest && !kept.contains(id));
        let mut shared = Vec::new();
        for id in missing {
            let Ok(Some(bytes)) = self.records.get(KIND, &record_name(id)).await else { continue };
            if let Ok(release) = serde_json::from_slice::<SharedRelease>(&bytes) {
                shared.push(release);
            }
        }
        if !shared.is_empty() {
            self.take(shared).await;
        }
    }

    /// Puts one release in the shared history, or takes the history's attribution of it.
    async fn share(&self, release: &ReleaseSummary) -> Shared {
        let name = record_name(release.meta.id);
        if !crate::releases::written_through_admin(&release.meta.origin) {
            // Another replica's write, or the store's own change: the writer's record, if one comes.
            let deadline = tokio::time::Instant::now() + WAIT_FOR_WRITER;
            loop {
                if self.adopt(&name).await {
                    return Shared::Adopted;
                }
                if tokio::time::Instant::now() >= deadline {
                    break;
                }
                tokio::time::sleep(LOOK_EVERY).await;
            }
        }
        let Some(record) = self.record_of(release).await else { return Shared::Failed };
        let Ok(bytes) = serde_json::to_vec(&record) else { return Shared::Failed };
        match self.records.create(KIND, &name, &bytes).await {
            Ok(true) => Shared::Created,
            Ok(false) => {
                self.adopt(&name).await;
                Shared::Adopted
            }
            Err(error) => {
                tracing::warn!(release = release.meta.id, %error, "Cannot put a release in the shared history; it stays in this replica's.");
                Shared::Failed
            }
        }
    }

    /// Takes the attribution of record `name`, if there is one; whether there was.
    async fn adopt(&self, name: &str) -> bool {
        let Ok(Some(bytes)) = self.records.get(KIND, name).await else { return false };
        let Ok(shared) = serde_json::from_slice::<SharedRelease>(&bytes) else { return false };
        let releases = Arc::clone(&self.releases);
        let _ = tokio::task::spawn_blocking(move || releases.amend(shared.id, &shared)).await;
        true
    }

    /// The shared form of a kept release, with its text (read off the async threads).
    async fn record_of(&self, release: &ReleaseSummary) -> Option<SharedRelease> {
        let (releases, id) = (Arc::clone(&self.releases), release.meta.id);
        let document = tokio::task::spawn_blocking(move || releases.document(id)).await.ok()?.ok()??;
        Some(SharedRelease {
            id,
            at_ms: release.meta.at_ms,
            author: release.meta.author.clone(),
            message: release.meta.message.clone(),
            origin: release.meta.origin.clone(),
            rollback_of: release.meta.rollback_of,
            document,
        })
    }

    /// Deletes the records beyond the retention.
    async fn prune(&self) {
        let Ok(listed) = self.records.list(KIND).await else { return };
        let excess = listed.len().saturating_sub(self.releases.retention());
        for (name, _) in listed.into_iter().take(excess) {
            if let Err(error) = self.records.delete(KIND, &name).await {
                tracing::debug!(record = %name, %error, "Cannot prune a shared release record.");
            }
        }
    }
}

/// What became of one release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shared {
    /// This replica created its record.
    Created,
    /// Another replica's record was there; its attribution is taken.
    Adopted,
    /// The store could not be reached; the release stays local.
    Failed,
}
