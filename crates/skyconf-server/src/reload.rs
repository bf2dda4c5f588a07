//! Turns the agent-configurations value a store reports into installed tables: parse, validate,
//! install — or refuse and keep the last good table.
//!
//! Like the OAP, the reloader remembers the raw text it saw last (as a hash): a refused document is
//! not re-parsed until its text changes, and an unchanged document is not re-installed. It also
//! keeps the text it accepted last, which is what gets persisted as the last good configuration.

use std::sync::Arc;
use std::time::SystemTime;

use skyconf_core::AgentConfigurations;
use skyconf_core::store::content_hash;

use crate::metrics::{Events, OriginEvents};
use crate::releases::ReleaseLog;
use crate::served::{Rejection, ServedTable};

/// What became of one value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A new table is served, with this version.
    Installed(u64),
    /// The text is the one already seen; nothing to do.
    Unchanged,
    /// The document was refused; the previous table stays.
    Rejected(String),
}

/// Applies agent-configurations values to a [`ServedTable`].
#[derive(Debug)]
pub struct Reloader {
    served: Arc<ServedTable>,
    origin: String,
    /// Hash of the last text seen, accepted or not; `Some(None)` after a delete.
    last_seen: Option<Option<[u8; 32]>>,
    accepted: Option<String>,
    /// Where accepted documents are recorded as releases.
    releases: Option<Arc<ReleaseLog>>,
    /// Logs and counts installs and rejections.
    events: OriginEvents,
}

impl Reloader {
    /// A reloader for `served`, whose current table came from `accepted` (if a table is served).
    pub fn new(served: Arc<ServedTable>, origin: impl Into<String>, accepted: Option<&str>) -> Self {
        let origin = origin.into();
        Self {
            events: Events::default().for_origin(&origin),
            served,
            origin,
            last_seen: accepted.map(|t| Some(content_hash(t))),
            accepted: accepted.map(str::to_owned),
            releases: None,
        }
    }

    /// Records every accepted document in `releases` (just before it is installed, so anyone
    /// woken by the install finds its release).
    pub fn with_releases(mut self, releases: Arc<ReleaseLog>) -> Self {
        self.releases = Some(releases);
        self
    }

    /// Counts installs and rejections in `events`.
    pub fn with_events(mut self, events: &Events) -> Self {
        self.events = events.for_origin(&self.origin);
        self
    }

    fn record_release(&self, table: &AgentConfigurations, text: Option<&str>) {
        if let Some(releases) = &self.releases {
            let current = self.served.snapshot();
            releases.record(&current.table, table, text, current.version + 1, &self.origin);
            releases.clear_rejection();
        }
    }

    /// The text of the table being served, if it came from a document.
    pub fn accepted_text(&self) -> Option<&str> {
        self.accepted.as_deref()
    }

    /// Applies the key's current value; `None` means the store holds no such key.
    pub fn apply(&mut self, value: Option<&str>) -> Outcome {
        let hash = value.map(content_hash);
        if self.last_seen == Some(hash) {
            return Outcome::Unchanged;
        }
        self.last_seen = Some(hash);
        let Some(text) = value else {
            // The OAP clears the table when the key is deleted: every agent gets EMPTY.
            self.accepted = None;
            self.record_release(&AgentConfigurations::default(), None);
            let version = self.served.install(AgentConfigurations::default());
            self.served.clear_rejection();
            self.events.document_deleted(version);
            return Outcome::Installed(version);
        };
        match skyconf_core::read(text) {
            Ok(table) => {
                let services = table.len();
                self.record_release(&table, Some(text));
                let version = self.served.install(table);
                self.accepted = Some(text.to_owned());
                self.served.clear_rejection();
                self.events.document_installed(version, services);
                Outcome::Installed(version)
            }
            Err(error) => {
                let error = error.to_string();
                self.events.document_rejected(&error);
                if let Some(releases) = &self.releases {
                    releases.record_rejection(&self.origin, &error, text);
                }
                self.served.record_rejection(Rejection {
                    origin: self.origin.clone(),
                    error: error.clone(),
                    at: SystemTime::now(),
                });
                Outcome::Rejected(error)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "configurations:\n  a: {k: v}\n";

    fn setup() -> (Arc<ServedTable>, Reloader) {
        let served = Arc::new(ServedTable::new(skyconf_core::read(GOOD).unwrap()));
        let reloader = Reloader::new(Arc::clone(&served), "test", Some(GOOD));
        (served, reloader)
    }

    #[test]
    fn a_bad_document_keeps_the_last_good_table_until_the_text_changes() {
        let (served, mut reloader) = setup();
        let before = served.snapshot().answer("a").digest.clone();
        let outcome = reloader.apply(Some("configurations:\n  a: {k: }\n"));
        assert!(matches!(&outcome, Outcome::Rejected(e) if e.contains("line 2")), "{outcome:?}");
        assert_eq!(served.snapshot().answer("a").digest, before);
        assert!(served.last_rejection().is_some());
        assert_eq!(reloader.accepted_text(), Some(GOOD), "the accepted text is still the good one");
        assert_eq!(reloader.apply(Some("configurations:\n  a: {k: }\n")), Outcome::Unchanged);
        assert_eq!(reloader.apply(Some("configurations:\n  a: {k: w}\n")), Outcome::Installed(2));
        assert!(served.last_rejection().is_none());
        assert_ne!(served.snapshot().answer("a").digest, before);
    }

    #[test]
    fn the_same_text_is_not_installed_twice() {
        let (served, mut reloader) = setup();
        assert_eq!(reloader.apply(Some(GOOD)), Outcome::Unchanged);
        assert_eq!(served.snapshot().version, 1);
    }

    #[test]
    fn a_delete_clears_the_table_once() {
        let (served, mut reloader) = setup();
        assert_eq!(reloader.apply(None), Outcome::Installed(2));
        assert!(served.snapshot().table.is_empty());
        assert_eq!(reloader.apply(None), Outcome::Unchanged, "repeated absence does not re-fire");
        assert_eq!(reloader.accepted_text(), None);
    }

    #[test]
    fn a_waiting_server_becomes_ready_with_the_first_document() {
        let served = Arc::new(ServedTable::waiting());
        assert!(!served.snapshot().ready());
        let mut reloader = Reloader::new(Arc::clone(&served), "test", None);
        assert_eq!(reloader.apply(Some(GOOD)), Outcome::Installed(1));
        assert!(served.snapshot().ready());
    }
}
