//! Whether a release is on disk: its file and, where the server keeps one, the last good copy
//! holding its document; writers wait on it ([`ReleaseLog::durable`]).

#[allow(clippy::wildcard_imports)]
use super::*;

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

/// The last good copy (`last-good.json`, see [`crate::persist`]) as far as durability goes: a
/// release is durable once its file is on disk *and* a copy that holds its document (or a newer
/// one) is, so a restart with the store away serves it.
#[derive(Debug, Default)]
pub(super) struct CopyState {
    /// The server keeps a copy ([`ReleaseLog::keep_last_good`]).
    pub(super) kept: bool,
    /// The newest release whose document (or a newer one) a copy on disk holds.
    pub(super) through: u64,
    /// The newest copy that could not be written: the release it was to hold, and why.
    pub(super) failed: Option<(u64, String)>,
}

impl ReleaseLog {
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
}
