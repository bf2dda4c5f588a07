//! The table being served and its answers.
//!
//! The current [`Snapshot`] sits behind an `ArcSwap`: the CDS hot path loads it without locks and
//! answers from its pre-encoded bytes ([`skyconf_core::answer`] decides which). Every install bumps the version on a `watch` channel, so
//! anything that wants to react to a change (push streams, metrics, tests) can wait for it.
//!
//! A staged rollout ([`crate::rollout`]) serves some instances from another table: its
//! [`Overlay`] sits beside the snapshot, and [`View`] is the one place that decides which answer an
//! instance gets (the overlay's for its waves' instances, else the snapshot's, each with its
//! targeting groups). Every install and every overlay change bumps a second channel,
//! [`ServedTable::subscribe_answers`], which held polls wait on.
//!
//! Before the first table is known (a remote store unreachable at start-up and nothing persisted)
//! the snapshot is *not ready*: every agent is answered "no change" and keeps what it has, rather
//! than the EMPTY answer that would reset it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use arc_swap::{ArcSwap, ArcSwapOption};
use skyconf_core::AgentConfigurations;
use skyconf_core::answer::{Answer, Answers, Chosen};
use skyconf_core::store::Revision;
use skyconf_core::targeting::{InstanceRef, Share};
use tokio::sync::watch;

/// How many served versions' store revisions are remembered.
const KNOWN_REVISIONS: usize = 4;

/// One accepted table with its answers encoded.
#[derive(Debug)]
pub struct Snapshot {
    /// Increases by one with every install; 1 is the table loaded at start-up.
    pub version: u64,
    /// The table.
    pub table: AgentConfigurations,
    /// When it was installed.
    pub installed_at: SystemTime,
    /// Every service's answer.
    pub answers: Answers,
}

impl Snapshot {
    fn new(version: u64, table: AgentConfigurations) -> Self {
        let answers = Answers::new(&table);
        Self { version, table, installed_at: SystemTime::now(), answers }
    }

    /// The snapshot after `self` serving `table`: the answers of unchanged services are kept.
    fn next(&self, table: AgentConfigurations) -> Self {
        let answers = Answers::updated(&table, &self.table, &self.answers);
        Self { version: self.version + 1, table, installed_at: SystemTime::now(), answers }
    }

    fn waiting() -> Self {
        let table = AgentConfigurations::default();
        Self { version: 0, table, installed_at: SystemTime::now(), answers: Answers::waiting() }
    }

    /// False until a first table is known: agents then get "no change".
    pub fn ready(&self) -> bool {
        self.answers.is_ready()
    }

    /// The answer for `service`: its own, or the EMPTY answer the OAP gives unknown services.
    pub fn answer(&self, service: &str) -> &Answer {
        self.answers.answer(service)
    }
}

/// Which instances of which services a rollout's waves have reached so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WaveMembers {
    /// Every instance within this share of its service (by [`skyconf_core::targeting::share_bucket`]).
    pub share: Option<Share>,
    /// And these instances by name, per service.
    pub named: HashMap<String, HashSet<String>>,
}

impl WaveMembers {
    /// Whether `instance` of `service` is reached.
    pub fn holds(&self, service: &str, instance: &str) -> bool {
        self.share.is_some_and(|share| share.holds(service, instance))
            || self.named.get(service).is_some_and(|names| names.contains(instance))
    }
}

/// One identified agent of a service a rollout changes, as the fleet lists it now (here, or in
/// another replica's summary), judged against the rollout's [`WaveMembers`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// Its service; for an OpAMP agent, its unit (`opamp:<group>`).
    pub service: String,
    /// Its instance name; for an OpAMP agent, its `service.instance.id`, else its instance uid (hex).
    pub instance: String,
    /// Whether it is served the candidate by the waves so far.
    pub reached: bool,
    /// Whether it holds the digest it is served now (an OpAMP agent: it reported APPLIED for the
    /// configuration it is offered now).
    pub applied: bool,
    /// An OpAMP agent that reported FAILED for the configuration it is offered now: its error
    /// message.
    pub failed: Option<String>,
    /// When its row was last seen (Unix milliseconds; a poll held now: now).
    pub last_seen_ms: u64,
    /// Seen at this very look: one of its polls is held here now, or arrived while the fleet was
    /// listed (this replica's rows only, which end with their connections; another replica's
    /// summary never says so).
    pub held: bool,
}

impl Observed {
    /// Whether it is live at `now_ms`: listed, and seen within `lost_after_ms`.
    pub fn is_live(&self, now_ms: u64, lost_after_ms: u64) -> bool {
        self.last_seen_ms.saturating_add(lost_after_ms) >= now_ms
    }
}

/// Instances served from another table than the snapshot's: a staged rollout's candidate, for
/// the instances its waves have reached, of the services it changes.
#[derive(Debug)]
pub struct Overlay {
    /// The rollout's id.
    pub rollout: String,
    /// The services the candidate changes.
    pub services: HashSet<String>,
    /// The candidate's answers (with its own targeting).
    pub candidate: Answers,
    /// The instances reached.
    pub members: WaveMembers,
    /// The candidate's `opamp:` section when the rollout changes OpAMP groups: offered to the
    /// OpAMP agents the waves reach whose files it changes (see [`crate::opamp::rollout`]).
    pub opamp: Option<skyconf_core::opamp::OpampSection>,
}

impl Overlay {
    /// Whether `instance` of `service` is served from the candidate.
    pub fn serves(&self, service: &str, instance: &InstanceRef<'_>) -> bool {
        self.services.contains(service) && self.members.holds(service, instance.name)
    }
}

/// What is served now: the snapshot, and the rollout overlay if any.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    /// The snapshot.
    pub snapshot: &'a Snapshot,
    /// The overlay.
    pub overlay: Option<&'a Overlay>,
}

/// An answer chosen for one poller, and why.
#[derive(Debug, Clone, Copy)]
pub struct Choice<'a> {
    /// The answers it was chosen from (the snapshot's or the rollout's candidate's).
    pub answers: &'a Answers,
    /// The answer, and its targeting group.
    pub chosen: Chosen<'a>,
    /// The rollout serving it, if it is one of a wave's instances.
    pub rollout: Option<&'a str>,
}

impl<'a> View<'a> {
    /// Whether instances of `service` may get different answers: targeting groups, or a rollout
    /// changing it. Only then is the poller's instance looked up.
    pub fn varies(&self, service: &str) -> bool {
        self.snapshot.answers.is_targeted(service) || self.overlay.is_some_and(|o| o.services.contains(service))
    }

    /// The answers `instance` of `service` is answered from.
    pub fn answers_for(&self, service: &str, instance: Option<&InstanceRef<'_>>) -> (&'a Answers, Option<&'a str>) {
        match (self.overlay, instance) {
            (Some(overlay), Some(instance)) if overlay.serves(service, instance) => {
                (&overlay.candidate, Some(overlay.rollout.as_str()))
            }
            _ => (&self.snapshot.answers, None),
        }
    }

    /// The answer for `instance` of `service` (`None`: not identified), and why.
    pub fn choose(&self, service: &str, instance: Option<&InstanceRef<'_>>) -> Choice<'a> {
        let (answers, rollout) = self.answers_for(service, instance);
        Choice { answers, chosen: answers.choose(service, instance), rollout }
    }
}

/// A [`View`] that owns what it looks at: for the admin API and the fleet summaries, which judge
/// every agent against what it is served.
#[derive(Debug, Clone)]
pub struct Serving {
    /// The snapshot.
    pub snapshot: Arc<Snapshot>,
    /// The overlay.
    pub overlay: Option<Arc<Overlay>>,
}

impl Serving {
    /// Borrowed.
    pub fn view(&self) -> View<'_> {
        View { snapshot: &self.snapshot, overlay: self.overlay.as_deref() }
    }
}

/// A document that was refused, kept for operators.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct Rejection {
    /// Where it came from (a path, a store key).
    pub origin: String,
    /// Why, with line and column where known ([`located`]: `FILE:LINE:COLUMN: message` for a
    /// file).
    pub error: String,
    /// When (`at_ms` in JSON).
    #[serde(rename = "at_ms", serialize_with = "crate::unix_time::serialize_ms")]
    #[schema(value_type = u64)]
    pub at: SystemTime,
    /// The hash of the refused text, to know it when the store still holds it.
    #[serde(skip)]
    pub document: Option<[u8; 32]>,
    /// The refused text (its first [`MAX_REJECTED_TEXT_BYTES`]), for operators
    /// (`GET /api/v1/status`).
    #[serde(skip)]
    pub text: Option<Arc<str>>,
    /// Whether [`Self::text`] was cut.
    #[serde(skip)]
    pub truncated: bool,
}

/// A refusal as every message gives it, `skyconf validate`'s form: `FILE:LINE:COLUMN: message`
/// where `origin` is a file store (`file PATH`, or a directory's document file), what editors
/// and terminals jump to; `LINE:COLUMN: message` for the other stores.
pub fn located(origin: &str, error: &skyconf_core::ReadError) -> String {
    if let Some(path) = origin.strip_prefix("file ") {
        format!("{path}:{error}")
    } else if let Some(dir) = origin.strip_prefix("directory ") {
        let sep = if dir.ends_with('/') { "" } else { "/" };
        format!("{dir}{sep}{}:{error}", skyconf_core::store::AGENT_CONFIGURATIONS_KEY)
    } else {
        error.to_string()
    }
}

/// The most of a refused document kept for operators to look at.
pub const MAX_REJECTED_TEXT_BYTES: usize = 1024 * 1024;

impl Rejection {
    /// `text` from `origin`, refused now for `error`.
    pub fn new(origin: impl Into<String>, error: impl Into<String>, text: Option<&str>) -> Self {
        let kept = text.map(|text| {
            let end = crate::text::floor_char_boundary(text, MAX_REJECTED_TEXT_BYTES);
            (Arc::<str>::from(&text[..end]), end < text.len())
        });
        Self {
            origin: origin.into(),
            error: error.into(),
            at: SystemTime::now(),
            document: text.map(skyconf_core::store::content_hash),
            truncated: kept.as_ref().is_some_and(|(_, cut)| *cut),
            text: kept.map(|(text, _)| text),
        }
    }

    /// Whether `text` is the refused document.
    pub fn is_of(&self, text: &str) -> bool {
        self.document == Some(skyconf_core::store::content_hash(text))
    }
}

/// A change from the store that would reset the fleet, held until confirmed or until its grace
/// period ends (see [`crate::reload`]).
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct Held {
    /// Where it came from (a path, a store key).
    pub origin: String,
    /// Why it is held.
    pub reason: String,
    /// When it arrived (`since_ms` in JSON).
    #[serde(rename = "since_ms", serialize_with = "crate::unix_time::serialize_ms")]
    #[schema(value_type = u64)]
    pub since: SystemTime,
    /// When it will be installed unless confirmed or replaced first (`until_ms` in JSON).
    #[serde(rename = "until_ms", serialize_with = "crate::unix_time::serialize_ms")]
    #[schema(value_type = u64)]
    pub until: SystemTime,
    /// Services served now.
    pub services_before: usize,
    /// Services in the held document.
    pub services_after: usize,
}

/// The served table plus operator-facing status.
#[derive(Debug)]
pub struct ServedTable {
    current: ArcSwap<Snapshot>,
    changes: watch::Sender<u64>,
    overlay: ArcSwapOption<Overlay>,
    /// Bumped by every install and every overlay change.
    answers_changed: watch::Sender<u64>,
    /// Bumped likewise, after the change is visible: a choice decided from what was served at
    /// a generation is valid while the generation stays.
    answers_generation: AtomicU64,
    // Short critical sections only, never held across an await.
    last_rejection: Mutex<Option<Rejection>>,
    held: Mutex<Option<Held>>,
    /// The newest served versions and the store revision of the document each was read from
    /// (the one being installed and those before it, so a writer holding a snapshot that is
    /// being replaced still learns its revision).
    store_revision: Mutex<VecDeque<(u64, Option<Revision>)>>,
}

impl ServedTable {
    /// Starts serving `table` as version 1.
    pub fn new(table: AgentConfigurations) -> Self {
        Self::from_snapshot(Snapshot::new(1, table))
    }

    /// Starts without a table (version 0, not ready) until the first [`Self::install`].
    pub fn waiting() -> Self {
        Self::from_snapshot(Snapshot::waiting())
    }

    fn from_snapshot(snapshot: Snapshot) -> Self {
        let (changes, _) = watch::channel(snapshot.version);
        Self {
            current: ArcSwap::from_pointee(snapshot),
            changes,
            overlay: ArcSwapOption::empty(),
            answers_changed: watch::channel(0).0,
            answers_generation: AtomicU64::new(0),
            last_rejection: Mutex::new(None),
            held: Mutex::new(None),
            store_revision: Mutex::new(VecDeque::new()),
        }
    }

    /// The current snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// Runs `f` on the current snapshot without touching its reference count (the hot path).
    pub fn with_snapshot<R>(&self, f: impl FnOnce(&Snapshot) -> R) -> R {
        f(&self.current.load())
    }

    /// Runs `f` on what is served now without touching reference counts (the hot path).
    pub fn with_view<R>(&self, f: impl FnOnce(&View<'_>) -> R) -> R {
        let snapshot = self.current.load();
        let overlay = self.overlay.load();
        f(&View { snapshot: &snapshot, overlay: overlay.as_deref() })
    }

    /// What is served now, owned.
    pub fn serving(&self) -> Serving {
        Serving { snapshot: self.current.load_full(), overlay: self.overlay.load_full() }
    }

    /// Installs a new table and returns its version.
    pub fn install(&self, table: AgentConfigurations) -> u64 {
        let next = self.current.load().next(table);
        let version = next.version;
        self.current.store(Arc::new(next));
        self.answers_generation.fetch_add(1, Ordering::AcqRel);
        self.changes.send_replace(version);
        self.answers_changed.send_modify(|n| *n += 1);
        version
    }

    /// Serves a rollout's candidate to its waves' instances (`None`: to nobody any more); held
    /// polls are woken to see it.
    pub fn set_overlay(&self, overlay: Option<Arc<Overlay>>) {
        self.overlay.store(overlay);
        self.answers_generation.fetch_add(1, Ordering::AcqRel);
        self.answers_changed.send_modify(|n| *n += 1);
    }

    /// Changes with every install and every overlay change, after it is served: read it before
    /// [`Self::with_view`], and what the view says holds for that generation.
    pub fn answers_generation(&self) -> u64 {
        self.answers_generation.load(Ordering::Acquire)
    }

    /// The rollout overlay served now.
    pub fn overlay(&self) -> Option<Arc<Overlay>> {
        self.overlay.load_full()
    }

    /// A receiver that sees every change of any answer: installs and overlay changes.
    pub fn subscribe_answers(&self) -> watch::Receiver<u64> {
        self.answers_changed.subscribe()
    }

    /// Says that the table served as `version` was read from the store's document at `revision`
    /// (`None`: the key was absent). Said again when the same text is written anew, so a write
    /// conditioned on it expects the store's newest revision of that text.
    pub fn set_store_revision(&self, version: u64, revision: Option<Revision>) {
        let mut known = self.store_revision.lock().unwrap_or_else(|p| p.into_inner());
        known.retain(|&(v, _)| v != version);
        known.push_back((version, revision));
        while known.len() > KNOWN_REVISIONS {
            known.pop_front();
        }
    }

    /// The store revision of the document the table served as `version` was read from: `None`
    /// when unknown (several versions were installed since, or the store has no revisions, or
    /// nothing was read from it yet), `Some(None)` when the key was absent.
    pub fn store_revision_of(&self, version: u64) -> Option<Option<Revision>> {
        let known = self.store_revision.lock().unwrap_or_else(|p| p.into_inner());
        known.iter().rev().find(|&&(v, _)| v == version).map(|&(_, revision)| revision)
    }

    /// A receiver that sees every new version.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Remembers a refused document.
    pub fn record_rejection(&self, rejection: Rejection) {
        *self.last_rejection.lock().unwrap_or_else(|p| p.into_inner()) = Some(rejection);
    }

    /// Forgets the refused document once a good one is installed.
    pub fn clear_rejection(&self) {
        *self.last_rejection.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Shows a held change (`None`: nothing is held any more).
    pub fn set_held(&self, held: Option<Held>) {
        *self.held.lock().unwrap_or_else(|p| p.into_inner()) = held;
    }

    /// The change held now, if any.
    pub fn held(&self) -> Option<Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The document refused last, unless a good one came after it.
    pub fn last_rejection(&self) -> Option<Rejection> {
        self.last_rejection.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skyconf_core::Digest;

    fn table(text: &str) -> AgentConfigurations {
        skyconf_core::read(text).unwrap()
    }

    #[test]
    fn unknown_services_get_the_empty_answer() {
        let served = ServedTable::new(table("configurations:\n  a: {k: v}\n"));
        let snap = served.snapshot();
        assert_eq!(snap.answer("nope").digest, Digest::empty());
        assert_ne!(snap.answer("a").digest, Digest::empty());
    }

    #[tokio::test]
    async fn installs_bump_the_version_and_notify() {
        let served = ServedTable::new(AgentConfigurations::default());
        let mut changes = served.subscribe();
        assert_eq!(served.install(table("configurations:\n  a: {k: v}\n")), 2);
        changes.changed().await.unwrap();
        assert_eq!(*changes.borrow(), 2);
        assert_eq!(served.snapshot().table.len(), 1);
    }

    #[test]
    fn a_rejection_keeps_the_first_mib_of_its_text_and_knows_the_whole() {
        let long = "é".repeat(MAX_REJECTED_TEXT_BYTES);
        let rejection = Rejection::new("f", "line 1, column 1: bad", Some(&long));
        let kept = rejection.text.as_deref().unwrap();
        assert!(rejection.truncated && kept.len() <= MAX_REJECTED_TEXT_BYTES && long.starts_with(kept));
        assert!(rejection.is_of(&long) && !rejection.is_of(kept));
        let short = Rejection::new("f", "bad", Some("configurations: [1]\n"));
        assert_eq!((short.text.as_deref(), short.truncated), (Some("configurations: [1]\n"), false));
        assert_eq!(Rejection::new("f", "bad", None).text, None);
    }
}
