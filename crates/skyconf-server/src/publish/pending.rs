//! Writes on their way through the store: a writer announces the document it is about to put
//! (its author, message and origin), and the reloader, when the store reports that document
//! back, takes the announcement to attribute the release and to know the change is deliberate
//! (the fleet-reset guard does not hold it). Keyed by the document's hash, since the store
//! reports text, not who wrote it.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::releases::{Attribution, document_hash};

/// How long an announced author and message wait for their document.
const PENDING_FOR: Duration = Duration::from_secs(300);

/// The most announcements kept; the oldest gives way.
const MAX_PENDING: usize = 64;

#[derive(Debug)]
struct Pending {
    hash: Option<String>,
    attribution: Attribution,
    until: Instant,
}

/// Announced writes not yet reported back by the store. Share it in an `Arc` between the
/// publisher and the reloader; every method takes a short lock, never across an await.
#[derive(Debug, Default)]
pub struct PendingWrites {
    pending: Mutex<Vec<Pending>>,
}

impl PendingWrites {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Pending>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Announces a document about to be written (`None`: a delete), so its release carries
    /// `attribution`.
    pub fn announce(&self, text: Option<&str>, attribution: Attribution) {
        let now = Instant::now();
        let mut pending = self.lock();
        pending.retain(|p| p.until > now);
        if pending.len() >= MAX_PENDING {
            pending.remove(0);
        }
        pending.push(Pending { hash: text.map(document_hash), attribution, until: now + PENDING_FOR });
    }

    /// Whether a writer announced `text` (`None`: a delete) and the announcement is still live.
    pub fn is_announced(&self, text: Option<&str>) -> bool {
        let hash = text.map(document_hash);
        let now = Instant::now();
        self.lock().iter().any(|p| p.hash == hash && p.until > now)
    }

    /// Withdraws an announcement whose write failed.
    pub fn withdraw(&self, text: Option<&str>) {
        let hash = text.map(document_hash);
        let mut pending = self.lock();
        if let Some(i) = pending.iter().rposition(|p| p.hash == hash) {
            pending.remove(i);
        }
    }

    /// Takes the attribution announced for `text` (`None`: a delete), if one is live.
    pub fn take(&self, text: Option<&str>) -> Option<Attribution> {
        let hash = text.map(document_hash);
        let now = Instant::now();
        let mut pending = self.lock();
        pending.retain(|p| p.until > now);
        let i = pending.iter().position(|p| p.hash == hash)?;
        Some(pending.remove(i).attribution)
    }
}

impl crate::reload::Announced for PendingWrites {
    fn is_announced(&self, text: Option<&str>) -> bool {
        Self::is_announced(self, text)
    }

    fn take(&self, text: Option<&str>) -> Option<Attribution> {
        Self::take(self, text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_announcement_is_taken_once_and_a_withdrawn_one_is_gone() {
        let pending = PendingWrites::default();
        let ann = Attribution { author: Some("ann".into()), origin: "api".into(), ..Attribution::default() };
        pending.announce(Some("a"), ann.clone());
        pending.announce(None, Attribution::default());
        assert!(pending.is_announced(Some("a")) && pending.is_announced(None));
        assert!(!pending.is_announced(Some("b")));
        assert_eq!(pending.take(Some("a")), Some(ann));
        assert_eq!(pending.take(Some("a")), None);
        pending.withdraw(None);
        assert!(!pending.is_announced(None));
    }
}
