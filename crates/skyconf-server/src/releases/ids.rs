//! Release ids: increasing by one within a run and never reused across restarts. The log reserves
//! ids ahead in `<data dir>/next-release-id` (a block of [`RESERVE`], renewed through the
//! persister when half of it is used; the first block is written at start-up, before anything is
//! served), so ids whose files were never written are not issued again after a restart.

#[allow(clippy::wildcard_imports)]
use super::*;

/// How many ids are reserved ahead on disk, so ids whose files could not be written are never
/// issued again after a restart.
pub(crate) const RESERVE: u64 = 32;

/// The reservation's file, in the data directory.
pub(super) const RESERVATION_FILE: &str = "next-release-id";

impl ReleaseLog {
    /// The next reservation to write, when less than half of the current one is left.
    pub(super) fn reserve_more(&self, state: &mut LogState) -> Option<u64> {
        self.dir.as_ref()?;
        if state.next_id.saturating_add(RESERVE / 2) <= state.reserving {
            return None;
        }
        state.reserving = state.next_id.saturating_add(RESERVE);
        Some(state.reserving)
    }

    pub(super) fn write_reservation(&self, dir: &Path, persister: &Persister, target: u64) {
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
}

/// The first id of a run and the reservation written for it at start-up: above every id a file
/// name claims (`highest_seen`) and above the reservation the last run left. Written before
/// anything is served; when it cannot be, ids of releases that never reach the disk may be
/// issued again after a restart, which is logged at error level.
pub(super) fn reserve_at_start(data_dir: &Path, highest_seen: u64) -> (u64, u64) {
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
    (next_id, reserved)
}
