//! Releases other replicas recorded in the shared history ([`crate::shared_history`]): one this
//! replica never saw is imported in its place, and the attribution of one it recorded itself is
//! taken from the shared record.

#[allow(clippy::wildcard_imports)]
use super::*;

impl ReleaseLog {
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
            let position = state.releases.partition_point(|r| r.meta.id < shared.id);
            if state.releases.get(position).is_some_and(|r| r.meta.id == shared.id)
                || (position == 0 && !state.releases.is_empty())
            {
                return Ok(false);
            }
            (
                position.checked_sub(1).map(|i| state.releases[i].meta.id),
                state.releases.get(position).map(|r| r.meta.id),
            )
        };
        let table = match &shared.document {
            Some(text) => skyconf_core::read(text)?,
            None => AgentConfigurations::default(),
        };
        let previous = previous_id.and_then(|id| self.table_of(id)).unwrap_or_default();
        let release = Arc::new(Release {
            meta: ReleaseMeta {
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
            },
            digests: digests(&table),
            changes: diff(&previous, &table),
            opamp_changes: opamp_diff(&previous, &table),
        });
        let document = shared.document.as_deref();
        let chunked = self.chunk(document);
        let Some(next_id) = next_id else {
            let appended = {
                let mut state = self.lock();
                if state.releases.back().is_some_and(|l| l.meta.id >= shared.id) {
                    return Ok(false);
                }
                self.append(&mut state, &release, chunked)
            };
            self.save(&release, document, appended);
            tracing::info!(release = release.meta.id, origin = %release.meta.origin, "Imported a release from the shared history.");
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
        next.opamp_changes = opamp_diff(&table, &next_table);
        let next = Arc::new(next);
        let evicted = {
            let mut state = self.lock();
            let position = state.releases.partition_point(|r| r.meta.id < shared.id);
            if state.releases.get(position).map(|r| r.meta.id) != Some(next_id) {
                return Ok(false); // the log changed meanwhile; the next sync tries again
            }
            state.releases.insert(position, Arc::new(ReleaseSummary::of(&release)));
            state.releases[position + 1] = Arc::new(ReleaseSummary::of(&next));
            for change in &before {
                let still = next.changes.iter().any(|c| c.service == change.service);
                if !still && state.last_changes.get(&change.service).is_some_and(|(id, _)| *id == next.meta.id) {
                    state.last_changes.remove(&change.service);
                }
            }
            for change in &release.changes {
                let newer = state.last_changes.get(&change.service).is_some_and(|(id, _)| *id > release.meta.id);
                if !newer {
                    state.last_changes.insert(change.service.clone(), (release.meta.id, release.meta.at_ms));
                }
            }
            if let Some(kept) = state.documents.get_mut(&next.meta.id) {
                kept.release = Arc::new(next.without_digests());
            }
            state.documents.insert(release.meta.id, Kept::new(&release, chunked));
            state.next_id = state.next_id.max(release.meta.id.saturating_add(1));
            self.evict(&mut state)
        };
        let summary = Arc::new(ReleaseSummary::of(&release));
        self.save(&release, document, Appended { summary, evicted, reserve: None });
        if let (Some(dir), Some(persister)) = (&self.dir, &self.persister) {
            let file = ReleaseFile { format: 1, release: (*next).clone(), document: next_document };
            if let Ok(bytes) = serde_json::to_vec_pretty(&file) {
                persister.write(release_path(dir, next.meta.id), bytes, None);
            }
        }
        tracing::info!(release = release.meta.id, origin = %release.meta.origin, "Inserted a release this replica missed, from the shared history.");
        Ok(true)
    }

    /// Gives kept release `id` the attribution the shared history holds for it (who, when, why,
    /// from where), so every replica shows the same. False when it is not kept or already says so.
    /// Rewrites its file: call it off the async threads.
    pub fn amend(&self, id: u64, shared: &SharedRelease) -> bool {
        let apply = |meta: &mut ReleaseMeta| {
            meta.at_ms = shared.at_ms;
            meta.author.clone_from(&shared.author);
            meta.message.clone_from(&shared.message);
            meta.origin.clone_from(&shared.origin);
            meta.rollback_of = shared.rollback_of;
        };
        let kept = {
            let mut state = self.lock();
            let Ok(index) = state.releases.binary_search_by_key(&id, |r| r.meta.id) else { return false };
            let old = &state.releases[index];
            if (old.meta.at_ms, &old.meta.author, &old.meta.message, &old.meta.origin, old.meta.rollback_of)
                == (shared.at_ms, &shared.author, &shared.message, &shared.origin, shared.rollback_of)
            {
                return false;
            }
            let mut summary = (**old).clone();
            apply(&mut summary.meta);
            state.releases[index] = Arc::new(summary);
            for (changed_in, at_ms) in state.last_changes.values_mut() {
                if *changed_in == id {
                    *at_ms = shared.at_ms;
                }
            }
            state.documents.get_mut(&id).map(|kept| {
                let mut release = (*kept.release).clone();
                apply(&mut release.meta);
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
                    apply(&mut file.release.meta);
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
}
