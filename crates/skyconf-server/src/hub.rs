//! The hub: the single task that applies what a store reports. It keeps the raw store content
//! (every key, for the DCS server and operators), hands the agent-configurations value to the
//! [`Reloader`], records outages, and persists the last good content.

use std::sync::Arc;

use skyconf_core::store::{AGENT_CONFIGURATIONS_KEY, StoreContent};
use skyconf_sources::Update;
use tokio::sync::mpsc;

use crate::metrics::Events;
use crate::persist::LastGood;
use crate::reload::{Outcome, Reloader};
use crate::store_view::StoreView;

/// Applies store updates.
#[derive(Debug)]
pub struct Hub {
    store: Arc<StoreView>,
    reloader: Reloader,
    last_good: Option<LastGood>,
    events: Events,
}

impl Hub {
    /// A hub feeding `store` and `reloader`, persisting to `last_good` if given.
    pub fn new(store: Arc<StoreView>, reloader: Reloader, last_good: Option<LastGood>) -> Self {
        Self { store, reloader, last_good, events: Events::default() }
    }

    /// Logs and counts store failures through `events`.
    pub fn with_events(mut self, events: Events) -> Self {
        self.events = events;
        self
    }

    /// Applies one update; the agent-configurations outcome if that key was touched.
    pub fn apply(&mut self, update: Update) -> Option<Outcome> {
        let mut content = (*self.store.content()).clone();
        let outcome = match update {
            Update::Failed(error) => {
                let error = error.to_string();
                self.events.store_failed(&self.store.status().store, &error);
                self.store.mark_failed(error);
                return None;
            }
            Update::Snapshot(new) => {
                content = new;
                Some(self.reloader.apply(content.agent_configurations()))
            }
            Update::Single { key, value } => {
                let outcome = (key == AGENT_CONFIGURATIONS_KEY).then(|| self.reloader.apply(value.as_deref()));
                content.set_single(&key, value);
                outcome
            }
            Update::Group { key, items } => {
                content.set_group(&key, items);
                None
            }
        };
        self.persist(&content);
        self.store.replace(content);
        outcome
    }

    fn persist(&self, content: &StoreContent) {
        let Some(last_good) = &self.last_good else { return };
        let mut accepted = content.clone();
        accepted.set_single(AGENT_CONFIGURATIONS_KEY, self.reloader.accepted_text().map(str::to_owned));
        if let Err(error) = last_good.save(&self.store.status().store, &accepted) {
            tracing::warn!(%error, "Cannot persist the last good configuration.");
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
    use crate::served::ServedTable;

    const GOOD: &str = "configurations:\n  a: {k: v}\n";

    fn hub(dir: &std::path::Path) -> (Arc<ServedTable>, Arc<StoreView>, Hub) {
        let served = Arc::new(ServedTable::waiting());
        let store = Arc::new(StoreView::new("test".into(), StoreContent::default(), false, false));
        let reloader = Reloader::new(Arc::clone(&served), "test", None);
        (Arc::clone(&served), Arc::clone(&store), Hub::new(store, reloader, Some(LastGood::in_dir(dir))))
    }

    fn single(key: &str, value: Option<&str>) -> Update {
        Update::Single { key: key.into(), value: value.map(str::to_owned) }
    }

    #[test]
    fn persists_only_accepted_documents_and_carries_other_keys() {
        let dir = tempfile::tempdir().unwrap();
        let (served, store, mut hub) = hub(dir.path());
        assert_eq!(hub.apply(single(AGENT_CONFIGURATIONS_KEY, Some(GOOD))), Some(Outcome::Installed(1)));
        assert_eq!(hub.apply(single("alarm.default.alarm-settings", Some("rules"))), None);
        let bad = "configurations:\n  a: {k: }\n";
        assert!(matches!(hub.apply(single(AGENT_CONFIGURATIONS_KEY, Some(bad))), Some(Outcome::Rejected(_))));
        assert_eq!(store.content().agent_configurations(), Some(bad), "the view shows what the store holds");
        let persisted = LastGood::in_dir(dir.path()).load().unwrap().unwrap();
        assert_eq!(persisted.content.agent_configurations(), Some(GOOD), "a refused document is never persisted");
        assert_eq!(persisted.content.singles["alarm.default.alarm-settings"], "rules");
        assert!(served.snapshot().ready());
    }

    #[test]
    fn a_failure_keeps_everything_and_a_snapshot_recovers() {
        let dir = tempfile::tempdir().unwrap();
        let (served, store, mut hub) = hub(dir.path());
        hub.apply(single(AGENT_CONFIGURATIONS_KEY, Some(GOOD)));
        hub.apply(Update::Failed(skyconf_sources::SourceError::Unavailable {
            store: "s".into(),
            message: "down".into(),
        }));
        assert!(!store.status().connected);
        assert_eq!(served.snapshot().table.len(), 1);
        let mut content = StoreContent::default();
        content.set_single(AGENT_CONFIGURATIONS_KEY, Some(GOOD.into()));
        assert_eq!(hub.apply(Update::Snapshot(content)), Some(Outcome::Unchanged));
        assert!(store.status().connected);
        assert_eq!(served.snapshot().version, 1);
    }
}
