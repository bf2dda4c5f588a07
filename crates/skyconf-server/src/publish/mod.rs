//! The publishing service: the one way a document gets into the store. Every writer — the admin
//! API's write handlers, the rollout driver's last step, an operator's decision on a held change
//! — goes through [`Publisher`], which
//!
//! 1. checks the document with the reader that serves agents ([`Proposal`]);
//! 2. decides what the write replaces ([`Basis`]): a compare-and-swap on the store's revision of
//!    the document the proposal was built on, or the key as this server last saw it;
//! 3. announces the document ([`PendingWrites`]) so its release carries the writer's author and
//!    message, and writes it through the store ([`skyconf_sources::Source::put`]);
//! 4. waits until the store reported it back, the reloader recorded its release and served it,
//!    and the release is on disk ([`crate::releases::Durability`]).
//!
//! Writing through the store, rather than installing the table here, is what lets every replica
//! watching the same store follow. The result is typed ([`Published`], [`PublishError`]); the
//! admin API maps it to HTTP.
//!
//! Writes of one server run one at a time (a lock held from the check to the answer), and once
//! the store write is started it runs to its end even when the caller goes away: an abandoned
//! write would otherwise release the lock while its store write could still land after a later,
//! acknowledged one.
//!
//! A refused document in the store. A document put straight into the store that the reader
//! refuses is never served: the last good table stays. A write built on the served table (a
//! per-service edit) then replaces that refused document — conditioned on the store still
//! holding it, at its revision — and says so ([`ReplacedRefused`]); only a write that lost a race
//! against another good document is refused as [`PublishError::StoreMoved`]. The served text
//! itself is such a write too, not "unchanged": the store holds the served text again, the
//! reloader records no release for it, and the answer names the served release.

mod outcome;
mod pending;

use std::sync::Arc;
use std::time::{Duration, Instant};

use skyconf_core::AgentConfigurations;
use skyconf_core::diff::{ServiceChange, diff};
use skyconf_core::warnings::{Warning, warnings};
use skyconf_core::writer;
use skyconf_sources::{AGENT_CONFIGURATIONS_KEY, DynSource, Expect, Revision};
use tokio::sync::OwnedMutexGuard;

pub use outcome::{HeldDecided, PublishError, Published, ReplacedRefused};
pub use pending::PendingWrites;

use crate::releases::{Attribution, ReleaseLog, ReleaseSummary, document_hash};
use crate::served::{ServedTable, Snapshot};
use crate::store_task::{HeldAnswer, HeldControl, HeldDecision};
use crate::store_view::StoreView;

/// How many times a per-service write without `If-Match` is built again on a newer document
/// when the store changed under it (another replica's write, a hand edit).
pub const MAX_REBASES: usize = 16;

/// How long a per-service write waits for a recorded release to be installed before it builds
/// on the served table anyway.
const CATCH_UP: Duration = Duration::from_secs(2);

/// How long [`Publisher::write_planned`] waits for its document to be served, at least.
const PLANNED_WAIT: Duration = Duration::from_secs(30);

/// A document to write: its text (`None`: delete the key), the table it reads as, and its
/// warnings ([`skyconf_core::warnings`], the list `skyconf validate` prints).
#[derive(Debug)]
pub struct Proposal {
    text: Option<String>,
    table: AgentConfigurations,
    warnings: Vec<Warning>,
}

impl Proposal {
    /// Keeps the warnings about `service` and the whole document: a per-service write answers
    /// for what it changes, not for the other services' settings.
    fn warnings_of(mut self, service: &str) -> Self {
        self.warnings.retain(|w| w.service.as_deref().is_none_or(|s| s == service));
        self
    }

    /// Deleting the key: an empty table.
    pub fn delete() -> Self {
        Self { text: None, table: AgentConfigurations::default(), warnings: Vec::new() }
    }
}

/// What a write of the document expects to replace in the store: the compare of its
/// compare-and-swap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    /// The proposal is built on the served snapshot (a per-service edit) or the client named
    /// what it saw (`If-Match`): the store must still hold the document that snapshot was read
    /// from, at its revision — on every replica, since the revision is the store's own — or the
    /// refused document that replaced it there.
    Snapshot,
    /// The proposal stands on its own (a whole document or a rollback without `If-Match`): it
    /// replaces what this server last saw of the key.
    Standalone,
}

/// How a write is made: a dry run or not, how long to wait, and the release the caller saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOptions {
    /// Check and answer what would change; write nothing.
    pub dry_run: bool,
    /// How long to wait for the document to be served (zero: answer once the store took it).
    pub wait: Duration,
    /// The release the caller saw: refused unless it is still the newest and served.
    pub if_match: Option<u64>,
}

/// What a per-service write does to the service.
#[derive(Debug, Clone)]
pub enum ServiceEdit {
    /// Replace its settings (create it when new).
    Set(Vec<(String, String)>),
    /// Set (`Some`) or remove (`None`) the named keys, keeping the others.
    Merge(Vec<(String, Option<String>)>),
    /// Remove the service.
    Remove,
}

/// Limits of the publisher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest document accepted, in bytes.
    pub max_document_bytes: usize,
    /// How long a write waits, by default, for its document to be served.
    pub write_wait: Duration,
}

/// The publishing service. Cheap to clone; clones share the write lock and the announcements.
#[derive(Clone)]
pub struct Publisher {
    served: Arc<ServedTable>,
    store: Arc<StoreView>,
    releases: Arc<ReleaseLog>,
    writer: Option<Arc<dyn DynSource>>,
    held: Option<HeldControl>,
    pending: Arc<PendingWrites>,
    lock: Arc<tokio::sync::Mutex<()>>,
    limits: Limits,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("writable", &self.writer.is_some())
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Publisher {
    /// A publisher over `served` and `store` recording in `releases`, with no writer (every
    /// write is a [`PublishError::Conflict`]) until [`Self::with_writer`].
    pub fn new(served: Arc<ServedTable>, store: Arc<StoreView>, releases: Arc<ReleaseLog>, limits: Limits) -> Self {
        Self {
            served,
            store,
            releases,
            writer: None,
            held: None,
            pending: Arc::default(),
            lock: Arc::default(),
            limits,
        }
    }

    /// Writes through `writer`.
    pub fn with_writer(mut self, writer: Option<Arc<dyn DynSource>>) -> Self {
        self.writer = writer;
        self
    }

    /// Decides on held changes through `held`.
    pub fn with_held_control(mut self, held: Option<HeldControl>) -> Self {
        self.held = held;
        self
    }

    /// Records in `releases`.
    pub fn with_releases(mut self, releases: Arc<ReleaseLog>) -> Self {
        self.releases = releases;
        self
    }

    /// Announces writes in `pending`, which the reloader reads ([`crate::reload::Reloader::with_pending`]).
    pub fn with_pending(mut self, pending: Arc<PendingWrites>) -> Self {
        self.pending = pending;
        self
    }

    /// Uses these limits.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// The announcements the reloader must read to attribute this publisher's writes.
    pub fn pending(&self) -> &Arc<PendingWrites> {
        &self.pending
    }

    /// The limits.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Reads `text` as a proposal: refused when over the size limit or when the reader refuses it.
    pub fn read(&self, text: String) -> Result<Proposal, PublishError> {
        if text.len() > self.limits.max_document_bytes {
            return Err(PublishError::TooLarge(format!(
                "the document is {} bytes, more than the limit of {} bytes",
                text.len(),
                self.limits.max_document_bytes
            )));
        }
        let reading = skyconf_core::read_with_warnings(&text)?;
        let warnings = warnings(&reading, &text);
        Ok(Proposal { text: Some(text), table: reading.table, warnings })
    }

    /// Whether release `id` is kept.
    pub fn has_release(&self, id: u64) -> bool {
        self.releases.get(id).is_some()
    }

    /// The text of release `id` (`None`: a delete). Reads its file off the async threads.
    pub async fn release_document(&self, id: u64) -> Result<Option<String>, PublishError> {
        let releases = Arc::clone(&self.releases);
        let text = tokio::task::spawn_blocking(move || releases.document(id))
            .await
            .map_err(|e| PublishError::Internal(format!("reading release {id}: {e}")))?
            .map_err(|e| PublishError::Unavailable(e.to_string()))?;
        text.ok_or_else(|| PublishError::NotFound(format!("release {id} is not kept")))
    }

    /// Publishes a whole document (or a rollback's), on `basis`.
    pub async fn write(
        &self,
        proposal: Proposal,
        attribution: Attribution,
        options: WriteOptions,
        basis: Basis,
    ) -> Result<Published, PublishError> {
        let guard = Arc::clone(&self.lock).lock_owned().await;
        let snapshot = self.served.snapshot();
        self.apply(guard, snapshot, proposal, attribution, options, basis).await
    }

    /// Applies `edit` to service `name` of the served document and publishes the result,
    /// conditioned on the store still holding that document: no concurrent write is lost,
    /// whether from this server (the write lock) or from another replica (the store's
    /// compare-and-swap). Without `If-Match`, a write that lost the race is built again on the
    /// newer document, up to [`MAX_REBASES`] times.
    pub async fn write_service(
        &self,
        name: &str,
        edit: ServiceEdit,
        attribution: Attribution,
        options: WriteOptions,
    ) -> Result<Published, PublishError> {
        let mut rebases = 0;
        loop {
            let guard = Arc::clone(&self.lock).lock_owned().await;
            // A conditional write need not wait: `apply` refuses it while the served table lags.
            let current = if options.if_match.is_some() { self.served.snapshot() } else { self.newest_served().await };
            let existing = current.table.get(name);
            let entries = match &edit {
                ServiceEdit::Set(entries) => Some(entries.clone()),
                ServiceEdit::Merge(patch) => {
                    Some(writer::merge_entries(existing.map_or(&[], |s| s.own_entries()), patch))
                }
                ServiceEdit::Remove if existing.is_none() => {
                    return Err(PublishError::NotFound(format!("no service `{name}` is configured")));
                }
                ServiceEdit::Remove => None,
            };
            let proposal = self.read(writer::with_service(&current.table, name, entries))?.warnings_of(name);
            let (version, expected) = (current.version, self.served.store_revision_of(current.version));
            let refused = self.refused_revision();
            match self.apply(guard, current, proposal, attribution.clone(), options, Basis::Snapshot).await {
                Err(PublishError::StoreMoved(why)) if options.if_match.is_none() && rebases < MAX_REBASES => {
                    rebases += 1;
                    tracing::info!(service = name, rebases, %why, "The store changed under a per-service write; building it again on the newer document.");
                    if !self.newer_than(version, expected, refused).await {
                        return Err(PublishError::StoreMoved(format!(
                            "{why}; the store holds a document this server does not serve (held, see \
                             GET /api/v1/status): confirm or discard it (POST /api/v1/held/confirm or /discard), \
                             or replace it with PUT /api/v1/configurations"
                        )));
                    }
                }
                answer => return answer,
            }
        }
    }

    /// Writes `text` as the whole document on release `base` (a rollout's last step), waiting
    /// for it to be served: the release it became. Refused when the configuration changed since
    /// `base`, and when the document was not served and recorded within the wait.
    pub async fn write_planned(&self, text: String, attribution: Attribution, base: u64) -> Result<u64, PublishError> {
        let proposal = self.read(text)?;
        let hash = proposal.text.as_deref().map(document_hash);
        let wait = self.limits.write_wait.max(PLANNED_WAIT);
        let options = WriteOptions { dry_run: false, wait, if_match: Some(base) };
        match self.write(proposal, attribution, options, Basis::Snapshot).await? {
            Published::Served { durability: crate::releases::Durability::Failed(why), .. } => {
                return Err(PublishError::NotServed(format!(
                    "the store took the document and it is served, but it is not on disk: {why}"
                )));
            }
            Published::Accepted { waited, .. } => {
                return Err(PublishError::NotServed(format!(
                    "the store took the document but it was not served within {waited:?}"
                )));
            }
            Published::DryRun { .. } | Published::Unchanged { .. } | Published::Served { .. } => {}
        }
        self.releases.find_after(base, hash.as_deref()).map(|release| release.meta.id).ok_or_else(|| {
            PublishError::NotServed("the document was served but its release is not in the history".into())
        })
    }

    /// Confirms (installs) or discards the change held by the fleet-reset guard; with
    /// `since_ms`, only the change that arrived then.
    pub async fn decide_held(
        &self,
        decision: HeldDecision,
        since_ms: Option<u64>,
    ) -> Result<HeldDecided, PublishError> {
        let control = self
            .held
            .as_ref()
            .ok_or_else(|| PublishError::Conflict("nothing is held: this server holds no store changes".into()))?;
        let _guard = Arc::clone(&self.lock).lock_owned().await;
        let answer = control.decide(decision, since_ms).await.ok_or_else(|| {
            PublishError::Unavailable("the store task has stopped; the server is shutting down".into())
        })?;
        let snapshot = self.served.snapshot();
        match answer {
            HeldAnswer::NothingHeld => Err(PublishError::Conflict(
                "nothing is held: the change was installed, replaced or discarded meanwhile, or never held".into(),
            )),
            HeldAnswer::NotTheOneSeen { since_ms } => Err(PublishError::Conflict(format!(
                "the change held now is not the one named by since_ms (it arrived at {since_ms}); nothing was changed"
            ))),
            // The reloader logs both decisions.
            HeldAnswer::Confirmed(_) => Ok(HeldDecided::Confirmed {
                version: snapshot.version,
                services: snapshot.table.len(),
                release: self.releases.latest(),
            }),
            HeldAnswer::Discarded => {
                Ok(HeldDecided::Discarded { version: snapshot.version, services: snapshot.table.len() })
            }
        }
    }

    /// Checks, writes, waits; `guard` keeps writes of this server one at a time. `snapshot` is
    /// the served table the proposal was built from (taken under the guard).
    async fn apply(
        &self,
        guard: OwnedMutexGuard<()>,
        snapshot: Arc<Snapshot>,
        proposal: Proposal,
        attribution: Attribution,
        options: WriteOptions,
        basis: Basis,
    ) -> Result<Published, PublishError> {
        let latest = self.releases.latest();
        let latest_id = latest.as_ref().map_or(0, |r| r.meta.id);
        // The newest release must be the one served: a release is recorded just before its table
        // is installed, and an If-Match on a table about to be replaced must not pass.
        let served_id = self.releases.served_as(snapshot.version).unwrap_or(0);
        if let Some(expected) = options.if_match
            && (expected != latest_id || served_id != latest_id)
        {
            return Err(PublishError::Conflict(format!(
                "the configuration changed: If-Match names release {expected}, the newest is {latest_id}"
            )));
        }
        let changes = diff(&snapshot.table, &proposal.table);
        let hash = proposal.text.as_deref().map(document_hash);
        if options.dry_run {
            return Ok(Published::DryRun {
                changes,
                opamp_changes: skyconf_core::opamp_diff::opamp_diff(&snapshot.table, &proposal.table),
                document: proposal.text,
                document_sha256: hash,
                base_release: latest.map(|r| r.meta.id),
                warnings: proposal.warnings,
            });
        }
        // The served text is a write while the store holds a refused document: it replaces it.
        let served_text = snapshot.ready()
            && latest.as_ref().is_some_and(|l| l.meta.document_sha256 == hash)
            && snapshot.table == proposal.table;
        if served_text && self.refused_in_store().is_none() {
            return Ok(Published::Unchanged {
                changes,
                release: latest,
                version: snapshot.version,
                warnings: proposal.warnings,
            });
        }
        let basis = if options.if_match.is_some() { Basis::Snapshot } else { basis };
        let (expect, replaced_refused) = self.expect(basis, &snapshot)?;
        // From here the write runs to its end even when the caller goes away (see the header).
        let publisher = self.clone();
        tokio::spawn(async move {
            let _guard = guard;
            let restores = if served_text && replaced_refused.is_some() { latest } else { None };
            let write = Write { proposal, changes, hash, latest_id, attribution, expect, replaced_refused, restores };
            publisher.write_and_wait(write, options.wait).await
        })
        .await
        .map_err(|error| PublishError::Internal(format!("the write task failed: {error}")))?
    }

    /// The store's expectation for a write on `basis` built from `snapshot`, and the refused
    /// document it replaces, if the store holds one. A snapshot whose revision is unknown (the
    /// store was not read since start-up, or the table was replaced several times since the
    /// snapshot was taken) cannot be written on: the write is refused as if the store had moved
    /// on. Never "as last seen" instead: the source may have seen a newer document than the
    /// snapshot, and a write on the snapshot would then undo it.
    fn expect(&self, basis: Basis, snapshot: &Snapshot) -> Result<(Expect, Option<ReplacedRefused>), PublishError> {
        let revisions = self.writer.as_ref().is_some_and(|w| w.revisions_boxed());
        let refused = self.refused_in_store();
        match basis {
            Basis::Snapshot if revisions => {
                // The refused document was never served. Read after the store's view, a served
                // version that is still the snapshot's is the newest good document before the
                // refused one (the reloader installs a document before the view shows the next),
                // so the write replaces exactly the refused one and undoes nothing.
                if let Some((revision, replaced)) = refused
                    && self.served.snapshot().version == snapshot.version
                {
                    return Ok((Expect::At(revision), Some(replaced)));
                }
                self.served.store_revision_of(snapshot.version).map(|r| (Expect::At(r), None)).ok_or_else(|| {
                    PublishError::StoreMoved(
                        "the served document is being replaced, or was not read from the store since start-up; read it again"
                            .into(),
                    )
                })
            }
            _ => Ok((Expect::Seen, refused.map(|(_, replaced)| replaced))),
        }
    }

    /// The refused document the store holds now, with its revision there: the store's document
    /// is the one the reader refused last (by its hash), and nothing good came after it.
    fn refused_in_store(&self) -> Option<(Option<Revision>, ReplacedRefused)> {
        // The store's view is updated after the reloader read the same document, so a rejection
        // of a newer document than the view shows does not match it.
        let content = self.store.content();
        let text = content.agent_configurations()?;
        let rejection = self.served.last_rejection()?;
        if !rejection.is_of(text) {
            return None;
        }
        let revision = content.revision(AGENT_CONFIGURATIONS_KEY);
        Some((revision, ReplacedRefused { origin: rejection.origin, error: rejection.error, revision }))
    }

    /// Writes the proposal to the store and waits (up to `wait`) for it to be served and its
    /// release to be durable.
    async fn write_and_wait(&self, write: Write, wait: Duration) -> Result<Published, PublishError> {
        let Write { proposal, changes, hash, latest_id, attribution, expect, replaced_refused, restores } = write;
        let writer = self
            .writer
            .as_ref()
            .ok_or_else(|| PublishError::Conflict("this server has no store to write to".into()))?;
        let mut served_changes = self.served.subscribe();
        let mut store_changes = self.store.subscribe();
        let started = Instant::now();
        let rollout = attribution.origin.strip_prefix(crate::releases::ORIGIN_ROLLOUT).map(str::to_owned);
        self.pending.announce(proposal.text.as_deref(), attribution);
        if let Err(error) = writer.put_boxed(AGENT_CONFIGURATIONS_KEY, proposal.text.as_deref(), expect).await {
            self.pending.withdraw(proposal.text.as_deref());
            tracing::warn!(%error, "The store refused a write.");
            return Err(error.into());
        }
        match (&rollout, &replaced_refused) {
            (Some(rollout), _) => tracing::info!(
                changed = changes.len(),
                %rollout,
                "The rollout driver wrote agent configurations to the store: the rollout's candidate."
            ),
            (None, Some(refused)) => tracing::info!(
                changed = changes.len(),
                refused_revision = ?refused.revision,
                "Wrote agent configurations to the store from the admin API, replacing a refused document."
            ),
            (None, None) => {
                tracing::info!(changed = changes.len(), "Wrote agent configurations to the store from the admin API.")
            }
        }
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // The served text written over a refused document records no release: it is served
            // again once the store holds it and the refusal is over.
            let restored = restores.as_ref().filter(|_| {
                self.served.last_rejection().is_none()
                    && self.store.content().agent_configurations() == proposal.text.as_deref()
            });
            if let Some(release) = restored.cloned().or_else(|| self.releases.find_after(latest_id, hash.as_deref()))
                && self.served.snapshot().version >= release.meta.version
            {
                let served_after = started.elapsed();
                let durability = self.releases.durable(release.meta.id, deadline).await;
                return Ok(Published::Served {
                    changes,
                    release,
                    durability,
                    served_after,
                    warnings: proposal.warnings,
                    replaced_refused,
                });
            }
            let changed = async {
                tokio::select! {
                    changed = served_changes.changed() => changed,
                    changed = store_changes.changed() => changed,
                }
            };
            match tokio::time::timeout_at(deadline, changed).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => break,
            }
        }
        Ok(Published::Accepted { waited: wait, changes, warnings: proposal.warnings, replaced_refused })
    }

    /// The store's revision of the refused document it holds, if it holds one.
    fn refused_revision(&self) -> Option<Option<Revision>> {
        self.refused_in_store().map(|(revision, _)| revision)
    }

    /// Waits (at most [`CATCH_UP`]) until this server has seen the store move past the served
    /// `version` read at `revision` (and past the `refused` document it held, if any): a newer
    /// table, the same text at a newer revision, or another refused document. False when it did
    /// not.
    async fn newer_than(
        &self,
        version: u64,
        revision: Option<Option<Revision>>,
        refused: Option<Option<Revision>>,
    ) -> bool {
        let mut changes = self.store.subscribe();
        let deadline = tokio::time::Instant::now() + CATCH_UP;
        loop {
            if self.served.snapshot().version != version
                || self.served.store_revision_of(version) != revision
                || self.refused_revision().is_some_and(|now| Some(now) != refused)
            {
                return true;
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => return false,
            }
        }
    }

    /// The served snapshot, once it is the newest release's: a release is recorded just before
    /// its table is installed, and a per-service write built on the table before it would undo it.
    async fn newest_served(&self) -> Arc<Snapshot> {
        let mut changes = self.served.subscribe();
        let deadline = tokio::time::Instant::now() + CATCH_UP;
        loop {
            let snapshot = self.served.snapshot();
            let behind = match (self.releases.served_as(snapshot.version), self.releases.latest()) {
                (Some(served), Some(latest)) => served < latest.meta.id,
                _ => false,
            };
            if !behind {
                return snapshot;
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => return self.served.snapshot(),
            }
        }
    }
}

/// A checked write, ready for the store.
struct Write {
    proposal: Proposal,
    changes: Vec<ServiceChange>,
    /// The proposal's document hash.
    hash: Option<String>,
    /// The newest release when the write was checked.
    latest_id: u64,
    attribution: Attribution,
    expect: Expect,
    replaced_refused: Option<ReplacedRefused>,
    /// The served release, when the write is its text over a refused document: the reloader
    /// restores it rather than recording a release.
    restores: Option<Arc<ReleaseSummary>>,
}
