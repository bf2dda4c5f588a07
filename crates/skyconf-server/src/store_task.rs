//! The store task: the single task that applies what a store reports. It keeps the raw store
//! content (every key, for the DCS server and operators), hands the agent-configurations value to
//! the [`Reloader`], records outages, and hands the last good content to the [`Persister`], which
//! writes it after the change is served; a release counts as durable only once that copy is on
//! disk, so a restart while the store is away serves every write acknowledged durable (N11).

use std::sync::Arc;

use skyconf_core::store::{AGENT_CONFIGURATIONS_KEY, StoreContent};
use skyconf_sources::Update;
use tokio::sync::{mpsc, oneshot};

use crate::metrics::Events;
use crate::persist::LastGood;
use crate::persister::Persister;
use crate::reload::{Outcome, Reloader};
use crate::store_view::StoreView;

/// An operator's decision about a change held by the fleet-reset guard (see [`crate::reload`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldDecision {
    /// Install it now.
    Confirm,
    /// Drop it and keep serving the last good table.
    Discard,
}

/// What became of a [`HeldDecision`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeldAnswer {
    /// Nothing is held (it was installed, replaced or dropped meanwhile).
    NothingHeld,
    /// A change is held, but not the one the operator saw (its `since_ms` differs).
    NotTheOneSeen {
        /// `since_ms` of the change held now.
        since_ms: u64,
    },
    /// The held change is installed as this version.
    Confirmed(Outcome),
    /// The held change is dropped.
    Discarded,
}

type HeldRequest = (HeldDecision, Option<u64>, oneshot::Sender<HeldAnswer>);

/// Hands operators' decisions about a held change to the store task, the only owner of the
/// [`Reloader`]. Cheap to clone.
#[derive(Debug, Clone)]
pub struct HeldControl {
    requests: mpsc::Sender<HeldRequest>,
}

impl HeldControl {
    /// Confirms or discards the held change, if it is still the one that arrived at `seen_ms`
    /// (`since_ms`; `None`: whichever is held). `None` when the store task has stopped.
    pub async fn decide(&self, decision: HeldDecision, seen_ms: Option<u64>) -> Option<HeldAnswer> {
        let (answer, answered) = oneshot::channel();
        self.requests.send((decision, seen_ms, answer)).await.ok()?;
        answered.await.ok()
    }
}

/// Applies store updates.
#[derive(Debug)]
pub struct StoreTask {
    store: Arc<StoreView>,
    reloader: Reloader,
    last_good: Option<(LastGood, Persister)>,
    events: Events,
    decisions: Option<mpsc::Receiver<HeldRequest>>,
}

impl StoreTask {
    /// A task feeding `store` and `reloader`, persisting to `last_good` through its persister if
    /// given. The reloader's release log then counts a release durable only once a copy holding
    /// its document is on disk (see [`ReleaseLog::keep_last_good`](crate::ReleaseLog::keep_last_good)).
    pub fn new(store: Arc<StoreView>, reloader: Reloader, last_good: Option<(LastGood, Persister)>) -> Self {
        if let (Some(_), Some(releases)) = (&last_good, reloader.releases()) {
            releases.keep_last_good();
        }
        Self { store, reloader, last_good, events: Events::default(), decisions: None }
    }

    /// A handle through which operators confirm or discard a held change while the task runs.
    pub fn held_control(&mut self) -> HeldControl {
        let (requests, decisions) = mpsc::channel(8);
        self.decisions = Some(decisions);
        HeldControl { requests }
    }

    /// Confirms or discards the held change if it is the one that arrived at `seen_ms` (any, when
    /// `None`).
    pub fn decide(&mut self, decision: HeldDecision, seen_ms: Option<u64>) -> HeldAnswer {
        let Some(since) = self.reloader.held_since() else { return HeldAnswer::NothingHeld };
        let since_ms = crate::unix_time::unix_ms(since);
        if seen_ms.is_some_and(|seen| seen != since_ms) {
            return HeldAnswer::NotTheOneSeen { since_ms };
        }
        match decision {
            HeldDecision::Confirm => match self.reloader.confirm_held() {
                Some(outcome) => {
                    self.persist(&self.store.content());
                    HeldAnswer::Confirmed(outcome)
                }
                None => HeldAnswer::NothingHeld,
            },
            HeldDecision::Discard => {
                if self.reloader.discard_held() {
                    HeldAnswer::Discarded
                } else {
                    HeldAnswer::NothingHeld
                }
            }
        }
    }

    /// Logs and counts store failures through `events`.
    pub fn with_events(mut self, events: Events) -> Self {
        self.events = events;
        self
    }

    /// Applies one update; the agent-configurations outcome if that key was touched.
    pub fn apply(&mut self, update: Update) -> Option<Outcome> {
        let (content, outcome) = match update {
            Update::Failed(error) => {
                let error = error.to_string();
                let status = self.store.status();
                // Not connected: this outage is said already (by start-up, or by the failure that
                // began it); one outage, one line.
                let logged = !status.connected;
                self.events.store_failed(&status.store, &error, self.reloader.served_services(), logged);
                self.store.mark_failed(error);
                return None;
            }
            Update::Snapshot(content) => {
                let revision = content.revision(AGENT_CONFIGURATIONS_KEY);
                let outcome = self.reloader.apply_at(content.agent_configurations(), revision);
                (content, Some(outcome))
            }
            Update::Single { key, value, revision } => {
                let outcome =
                    (key == AGENT_CONFIGURATIONS_KEY).then(|| self.reloader.apply_at(value.as_deref(), revision));
                let mut content = (*self.store.content()).clone();
                content.set_single_at(&key, value, revision);
                (content, outcome)
            }
            Update::Group { key, items } => {
                let mut content = (*self.store.content()).clone();
                content.set_group(&key, items);
                (content, None)
            }
        };
        self.persist(&content);
        self.store.replace(content);
        outcome
    }

    /// Hands the last good copy of `content` (with the served document) to the persister; the
    /// release log learns when the served release's document is on disk, or why it is not.
    fn persist(&self, content: &StoreContent) {
        let Some((last_good, persister)) = &self.last_good else { return };
        let bytes = LastGood::encode(&self.store.status().store, content, self.reloader.accepted_text());
        let path = last_good.path().to_owned();
        let done = match (self.reloader.releases(), self.reloader.served_release()) {
            (Some(releases), Some(through)) => {
                let (releases, shown) = (Arc::clone(releases), path.display().to_string());
                Some(Box::new(move |result: std::io::Result<()>| {
                    let result = result.map_err(|error| format!(
                        "the last good copy {shown} could not be written ({error}), so a restart while the store is away would serve an older configuration"
                    ));
                    releases.last_good_written(through, result);
                }) as crate::persister::WriteDone)
            }
            _ => None,
        };
        persister.write(path, bytes, done);
    }

    /// Installs a held change whose grace period is over (see [`crate::reload`]).
    pub fn install_held_if_due(&mut self) -> Option<Outcome> {
        let outcome = self.reloader.install_held_if_due()?;
        self.persist(&self.store.content());
        Some(outcome)
    }

    /// Applies updates until the channel closes, installing a held change when its grace period
    /// ends and answering operators' decisions ([`StoreTask::held_control`]).
    pub async fn run(mut self, mut updates: mpsc::Receiver<Update>) {
        let mut decisions = self.decisions.take();
        loop {
            let deadline = self.reloader.held_deadline();
            tokio::select! {
                update = updates.recv() => match update {
                    Some(update) => { self.apply(update); }
                    None => return,
                },
                () = sleep_until_some(deadline) => { self.install_held_if_due(); }
                request = next_decision(&mut decisions) => match request {
                    Some((decision, seen_ms, answer)) => { let _ = answer.send(self.decide(decision, seen_ms)); }
                    None => decisions = None,
                },
            }
        }
    }
}

async fn next_decision(decisions: &mut Option<mpsc::Receiver<HeldRequest>>) -> Option<HeldRequest> {
    match decisions {
        Some(decisions) => decisions.recv().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until_some(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::served::ServedTable;

    const GOOD: &str = "configurations:\n  a: {k: v}\n";

    fn task(dir: &std::path::Path) -> (Arc<ServedTable>, Arc<StoreView>, StoreTask, Persister) {
        let served = Arc::new(ServedTable::waiting());
        let store = Arc::new(StoreView::new("test".into(), StoreContent::default(), false, false));
        let reloader = Reloader::new(Arc::clone(&served), "test", None);
        let persister = Persister::spawn();
        let task = StoreTask::new(Arc::clone(&store), reloader, Some((LastGood::in_dir(dir), persister.clone())));
        (served, store, task, persister)
    }

    fn single(key: &str, value: Option<&str>) -> Update {
        Update::single(key, value.map(str::to_owned))
    }

    #[test]
    fn persists_only_accepted_documents_and_carries_other_keys() {
        let dir = tempfile::tempdir().unwrap();
        let (served, store, mut applier, persister) = task(dir.path());
        assert_eq!(applier.apply(single(AGENT_CONFIGURATIONS_KEY, Some(GOOD))), Some(Outcome::Installed(1)));
        assert_eq!(applier.apply(single("alarm.default.alarm-settings", Some("rules"))), None);
        let bad = "configurations:\n  a: {k: }\n";
        assert!(matches!(applier.apply(single(AGENT_CONFIGURATIONS_KEY, Some(bad))), Some(Outcome::Rejected(_))));
        assert_eq!(store.content().agent_configurations(), Some(bad), "the view shows what the store holds");
        persister.flush();
        let persisted = LastGood::in_dir(dir.path()).load().unwrap().unwrap();
        assert_eq!(persisted.content.agent_configurations(), Some(GOOD), "a refused document is never persisted");
        assert_eq!(persisted.content.singles["alarm.default.alarm-settings"], "rules");
        assert!(served.snapshot().ready());
    }

    #[test]
    fn a_failure_keeps_everything_and_a_snapshot_recovers() {
        let dir = tempfile::tempdir().unwrap();
        let (served, store, mut applier, _) = task(dir.path());
        applier.apply(single(AGENT_CONFIGURATIONS_KEY, Some(GOOD)));
        applier.apply(Update::Failed(skyconf_sources::SourceError::Unavailable {
            store: "s".into(),
            message: "down".into(),
        }));
        assert!(!store.status().connected);
        assert_eq!(served.snapshot().table.len(), 1);
        let mut content = StoreContent::default();
        content.set_single(AGENT_CONFIGURATIONS_KEY, Some(GOOD.into()));
        assert_eq!(applier.apply(Update::Snapshot(content)), Some(Outcome::Unchanged));
        assert!(store.status().connected);
        assert_eq!(served.snapshot().version, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_wiped_store_snapshot_is_held_then_installed_after_the_grace_period() {
        let served = Arc::new(ServedTable::waiting());
        let store = Arc::new(StoreView::new("test".into(), StoreContent::default(), false, false));
        let reloader = Reloader::new(Arc::clone(&served), "test", None).with_guard(crate::reload::Guard::default());
        let mut applier = StoreTask::new(Arc::clone(&store), reloader, None);
        let two = "configurations:\n  a: {k: v}\n  b: {k: v}\n";
        applier.apply(single(AGENT_CONFIGURATIONS_KEY, Some(two)));
        // The store comes back wiped after an outage (F12): a snapshot without the key.
        assert!(matches!(applier.apply(Update::Snapshot(StoreContent::default())), Some(Outcome::Held(_))));
        assert_eq!(served.snapshot().table.len(), 2, "the last good table is still served");
        assert!(served.held().is_some());
        let (tx, rx) = mpsc::channel(1);
        let run = tokio::spawn(applier.run(rx));
        tokio::time::sleep(crate::reload::DEFAULT_RESET_GRACE + std::time::Duration::from_secs(1)).await;
        assert!(served.snapshot().table.is_empty(), "installed once the grace period is over");
        assert!(served.held().is_none());
        drop(tx);
        run.await.unwrap();
    }
}
