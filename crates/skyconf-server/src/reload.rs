//! Turns what sources report into installed tables: parse, validate, install — or refuse and keep
//! the last good table.
//!
//! Like the OAP, the reloader remembers the raw text it saw last (as a hash): a refused document is
//! not re-parsed until its text changes, and an unchanged document is not re-installed.

use std::sync::Arc;
use std::time::SystemTime;

use skyconf_core::AgentConfigurations;
use skyconf_sources::{AGENT_CONFIGURATIONS_KEY, Update, content_hash};
use tokio::sync::mpsc;

use crate::state::{Rejection, ServedTable};

/// What became of one update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A new table is served, with this version.
    Installed(u64),
    /// The text is the one already seen; nothing to do.
    Unchanged,
    /// The document was refused; the previous table stays.
    Rejected(String),
    /// The store failed; the previous table stays.
    SourceFailed(String),
    /// A key this server does not serve.
    Ignored,
}

/// Applies updates for the agent-configurations key to a [`ServedTable`].
#[derive(Debug)]
pub struct Reloader {
    served: Arc<ServedTable>,
    origin: String,
    last_seen: Option<[u8; 32]>,
}

impl Reloader {
    /// A reloader for `served`, whose current table came from `initial_text` (if any).
    pub fn new(
        served: Arc<ServedTable>,
        origin: impl Into<String>,
        initial_text: Option<&str>,
    ) -> Self {
        Self {
            served,
            origin: origin.into(),
            last_seen: initial_text.map(content_hash),
        }
    }

    /// Applies one update.
    pub fn apply(&mut self, update: Update) -> Outcome {
        match update {
            Update::Failed(error) => {
                tracing::error!(origin = %self.origin, %error, "The configuration store cannot be read; still serving the last good configuration.");
                Outcome::SourceFailed(error.to_string())
            }
            Update::Value { key, .. } if key != AGENT_CONFIGURATIONS_KEY => Outcome::Ignored,
            Update::Value { value: None, .. } => {
                // The OAP clears the table when the key is deleted: every agent gets EMPTY.
                self.last_seen = None;
                let version = self.served.install(AgentConfigurations::default());
                self.served.clear_rejection();
                tracing::warn!(origin = %self.origin, version, "The agent configurations were deleted; every service now gets the EMPTY answer.");
                Outcome::Installed(version)
            }
            Update::Value {
                value: Some(text), ..
            } => self.apply_text(&text),
        }
    }

    fn apply_text(&mut self, text: &str) -> Outcome {
        let hash = content_hash(text);
        if self.last_seen == Some(hash) {
            return Outcome::Unchanged;
        }
        self.last_seen = Some(hash);
        match skyconf_core::read(text) {
            Ok(table) => {
                let services = table.len();
                let version = self.served.install(table);
                self.served.clear_rejection();
                tracing::info!(origin = %self.origin, version, services, "Installed new agent configurations.");
                Outcome::Installed(version)
            }
            Err(error) => {
                let error = error.to_string();
                tracing::error!(origin = %self.origin, %error, "Refused agent configurations; still serving the last good configuration.");
                self.served.record_rejection(Rejection {
                    origin: self.origin.clone(),
                    error: error.clone(),
                    at: SystemTime::now(),
                });
                Outcome::Rejected(error)
            }
        }
    }

    /// Applies updates until the channel closes.
    pub async fn run(mut self, mut updates: mpsc::Receiver<Update>) {
        while let Some(update) = updates.recv().await {
            self.apply(update);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(text: &str) -> Update {
        Update::Value {
            key: AGENT_CONFIGURATIONS_KEY.to_owned(),
            value: Some(text.to_owned()),
        }
    }

    fn setup() -> (Arc<ServedTable>, Reloader) {
        let text = "configurations:\n  a: {k: v}\n";
        let served = Arc::new(ServedTable::new(skyconf_core::read(text).unwrap()));
        let reloader = Reloader::new(Arc::clone(&served), "test", Some(text));
        (served, reloader)
    }

    #[test]
    fn a_bad_document_keeps_the_last_good_table_until_the_text_changes() {
        let (served, mut reloader) = setup();
        let before = served.snapshot().answer("a").digest.clone();
        let outcome = reloader.apply(value("configurations:\n  a: {k: }\n"));
        assert!(
            matches!(&outcome, Outcome::Rejected(e) if e.contains("line 2")),
            "{outcome:?}"
        );
        assert_eq!(served.snapshot().answer("a").digest, before);
        assert!(served.last_rejection().is_some());
        assert_eq!(
            reloader.apply(value("configurations:\n  a: {k: }\n")),
            Outcome::Unchanged
        );
        assert_eq!(
            reloader.apply(value("configurations:\n  a: {k: w}\n")),
            Outcome::Installed(2)
        );
        assert!(served.last_rejection().is_none());
        assert_ne!(served.snapshot().answer("a").digest, before);
    }

    #[test]
    fn the_same_text_is_not_installed_twice_and_other_keys_are_ignored() {
        let (served, mut reloader) = setup();
        assert_eq!(
            reloader.apply(value("configurations:\n  a: {k: v}\n")),
            Outcome::Unchanged
        );
        let other = Update::Value {
            key: "alarm.default.alarm-settings".into(),
            value: Some("x".into()),
        };
        assert_eq!(reloader.apply(other), Outcome::Ignored);
        assert_eq!(served.snapshot().version, 1);
    }

    #[test]
    fn a_delete_clears_the_table_and_a_failure_keeps_it() {
        let (served, mut reloader) = setup();
        let failed = Update::Failed(skyconf_sources::SourceError::NotText { what: "x".into() });
        assert!(matches!(reloader.apply(failed), Outcome::SourceFailed(_)));
        assert_eq!(served.snapshot().table.len(), 1);
        let delete = Update::Value {
            key: AGENT_CONFIGURATIONS_KEY.into(),
            value: None,
        };
        assert_eq!(reloader.apply(delete), Outcome::Installed(2));
        assert!(served.snapshot().table.is_empty());
    }
}
