//! The releases in memory: a summary per kept release, the full release and its text until its
//! file is on disk (for good without a data directory, then in chunks shared between releases),
//! which release each served version is, and the queries over them.

#[allow(clippy::wildcard_imports)]
use super::*;

/// A release not (yet) on disk: all of them without a data directory, else those whose file is
/// not written (yet). Kept small, since without a data directory there are `retention` of them:
/// the digests are left out (they follow from the text, and at 10,000 services they are
/// megabytes, nearly the same in every release), and the text shares its chunks with the
/// release kept before it.
#[derive(Debug)]
pub(super) struct Kept {
    /// The release, with no digests.
    pub(super) release: Arc<Release>,
    pub(super) document: Option<ChunkedText>,
}

impl Kept {
    /// Keeps `release` and its text (chunked by [`ReleaseLog::chunk`], outside the lock).
    pub(super) fn new(release: &Release, document: Option<ChunkedText>) -> Self {
        Self { release: Arc::new(release.without_digests()), document }
    }

    /// The release in full, its digests read again from its text, the text and its table. Reads
    /// a whole document: call it without the log's lock, off the async threads.
    pub(super) fn full(
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
pub(super) fn digests(table: &AgentConfigurations) -> BTreeMap<String, String> {
    table.services().map(|s| (s.name().to_owned(), s.digest().to_string())).collect()
}

/// Where a release is: in memory (without its digests), in its file, or not kept.
pub(super) enum Stored {
    Gone,
    Memory(Arc<Release>, Option<ChunkedText>),
    File(PathBuf),
}

/// What [`ReleaseLog::append`] leaves for [`ReleaseLog::save`].
pub(super) struct Appended {
    pub(super) summary: Arc<ReleaseSummary>,
    pub(super) evicted: Vec<u64>,
    pub(super) reserve: Option<u64>,
}

impl ReleaseLog {
    /// Records an accepted document: `table` read from `text` (`None`: the key was deleted), to
    /// be served as `version`, replacing `previous`, found in the store at `store_revision` where
    /// it has revisions. `attribution` says who and why (a writer's announcement, see
    /// [`crate::publish::PendingWrites`]), or only where it came from (an origin naming the store).
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
        attribution: impl Into<Attribution>,
    ) -> Arc<ReleaseSummary> {
        let attribution = attribution.into();
        let hash = text.map(document_hash);
        let chunked = self.chunk(text);
        let (release, appended) = {
            let mut state = self.lock();
            // A store revision is unique by itself: it need only follow the kept releases (the
            // reservation ahead guards local ids, which a restart could otherwise reissue).
            let newest = state.releases.back().map_or(0, |r| r.meta.id);
            let id = match store_revision {
                Some(revision) if revision > newest && revision <= MAX_ID => revision,
                _ => state.next_id,
            };
            let release = Arc::new(Release {
                meta: ReleaseMeta {
                    id,
                    at_ms: now_ms(),
                    author: attribution.author,
                    message: attribution.message,
                    origin: attribution.origin,
                    rollback_of: attribution.rollback_of,
                    version,
                    document_sha256: hash,
                    store_revision,
                },
                digests: digests(table),
                changes: diff(previous, table),
                opamp_changes: opamp_diff(previous, table),
            });
            Self::serve_as(&mut state, version, release.meta.id, self.retention);
            let appended = self.append(&mut state, &release, chunked);
            (release, appended)
        };
        let summary = self.save(&release, text, appended);
        tracing::info!(release = release.meta.id, version, origin = %release.meta.origin, changed = release.changes.len(), "Recorded a release.");
        summary
    }

    /// Adds `release` (newer than every kept one) to the log; what [`ReleaseLog::save`] needs.
    pub(super) fn append(
        &self,
        state: &mut LogState,
        release: &Arc<Release>,
        document: Option<ChunkedText>,
    ) -> Appended {
        // Never wraps: ids above MAX_ID are refused at start-up, so this cannot saturate.
        state.next_id = state.next_id.max(release.meta.id.saturating_add(1));
        let summary = Arc::new(ReleaseSummary::of(release));
        state.releases.push_back(Arc::clone(&summary));
        for change in &release.changes {
            state.last_changes.insert(change.service.clone(), (release.meta.id, release.meta.at_ms));
        }
        // Until its file is on disk (for good without a data directory).
        state.documents.insert(release.meta.id, Kept::new(release, document));
        let reserve = self.reserve_more(state);
        Appended { summary, evicted: self.evict(state), reserve }
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
        if let Some(latest) = latest.as_ref().filter(|l| l.meta.document_sha256 == hash) {
            Self::serve_as(&mut self.lock(), version, latest.meta.id, self.retention);
            return;
        }
        let previous = latest.and_then(|l| self.table_of(l.meta.id)).unwrap_or_default();
        self.record(&previous, table, text, version, store_revision, origin);
    }

    pub(super) fn serve_as(state: &mut LogState, version: u64, id: u64, retention: usize) {
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

    pub(super) fn evict(&self, state: &mut LogState) -> Vec<u64> {
        let mut evicted = Vec::new();
        while state.releases.len() > self.retention {
            if let Some(old) = state.releases.pop_front() {
                state.documents.remove(&old.meta.id);
                state.unsaved.remove(&old.meta.id);
                evicted.push(old.meta.id);
            }
        }
        if let Some(oldest) = state.releases.front().map(|r| r.meta.id)
            && !evicted.is_empty()
        {
            state.last_changes.retain(|_, (id, _)| *id >= oldest);
        }
        evicted
    }

    pub(super) fn enforce_retention(&self) {
        let evicted = {
            let mut state = self.lock();
            self.evict(&mut state)
        };
        self.delete_files(&evicted);
    }

    /// Every release kept, newest first.
    pub fn list(&self) -> Vec<Arc<ReleaseSummary>> {
        self.lock().releases.iter().rev().cloned().collect()
    }

    /// A page of releases, newest first: at most `limit` with ids below `before` (all when
    /// `None`), and how many are kept in all.
    pub fn page(&self, before: Option<u64>, limit: usize) -> (Vec<Arc<ReleaseSummary>>, usize) {
        let state = self.lock();
        let end = before.map_or(state.releases.len(), |b| state.releases.partition_point(|r| r.meta.id < b));
        let page = state.releases.range(..end).rev().take(limit).cloned().collect();
        (page, state.releases.len())
    }

    /// One release's summary.
    pub fn get(&self, id: u64) -> Option<Arc<ReleaseSummary>> {
        let state = self.lock();
        let index = state.releases.binary_search_by_key(&id, |r| r.meta.id).ok()?;
        state.releases.get(index).cloned()
    }

    /// The newest release.
    pub fn latest(&self) -> Option<Arc<ReleaseSummary>> {
        self.lock().releases.back().cloned()
    }

    /// The release before `id`, if it is still kept.
    pub fn previous(&self, id: u64) -> Option<Arc<ReleaseSummary>> {
        let state = self.lock();
        let index = state.releases.partition_point(|r| r.meta.id < id);
        index.checked_sub(1).and_then(|i| state.releases.get(i).cloned())
    }

    /// The newest release after `after` whose document has `hash` (`None`: a delete).
    pub fn find_after(&self, after: u64, hash: Option<&str>) -> Option<Arc<ReleaseSummary>> {
        self.lock().releases.iter().rev().take_while(|r| r.meta.id > after).find(|r| r.hash() == hash).cloned()
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
    pub(super) fn kept(&self, id: u64) -> Stored {
        let state = self.lock();
        if state.releases.binary_search_by_key(&id, |r| r.meta.id).is_err() {
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
    pub(super) fn chunk(&self, text: Option<&str>) -> Option<ChunkedText> {
        let text = text?;
        if self.dir.is_some() {
            return Some(ChunkedText::whole(text));
        }
        let like = {
            let state = self.lock();
            state.releases.back().and_then(|r| state.documents.get(&r.meta.id)).and_then(|k| k.document.clone())
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
}
