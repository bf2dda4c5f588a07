//! Turns the agent-configurations value a store reports into installed tables: parse, validate,
//! install — or refuse and keep the last good table.
//!
//! Like the OAP, the reloader remembers the raw text it saw last (as a hash): a refused document is
//! not re-parsed until its text changes, and an unchanged document is not re-installed. It also
//! keeps the text it accepted last, which is what gets persisted as the last good configuration.
//!
//! # The fleet-reset guard
//!
//! A document that would reset most of the fleet at once (no services while some are served, or
//! at least half of the served services dropped, and at least two; see
//! [`skyconf_core::guard::would_reset_the_fleet`]) is not installed silently when it comes from
//! the store: a wiped or restored etcd, a truncated file. It is *held*: the last good table keeps
//! being served, a WARN is logged, and `/readyz`, `/api/v1/status` show it (`held`). It is
//! installed when the grace period ends (`--reset-grace`, default 10 minutes; `0` turns the guard
//! off) or is dropped when another document arrives that does not reset the fleet (that one is
//! installed normally). A document a writer announced ([`Announced`]: the publisher's, for an
//! operator's write through the admin API) is deliberate and never held.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use skyconf_core::AgentConfigurations;
use skyconf_core::guard::{ResetPolicy, would_reset_the_fleet};
use skyconf_core::reader::IncrementalReader;
use skyconf_core::store::{Revision, content_hash};

use crate::metrics::{Events, OriginEvents};
use crate::releases::{Attribution, ReleaseLog};
use crate::served::{Held, Rejection, ServedTable};

/// The default grace period before a held change is installed anyway.
pub const DEFAULT_RESET_GRACE: Duration = Duration::from_secs(600);

/// The fleet-reset guard's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Guard {
    /// When a change counts as resetting the fleet.
    pub policy: ResetPolicy,
    /// How long a held change waits before it is installed anyway; zero turns the guard off.
    pub grace: Duration,
}

impl Guard {
    /// Never holds anything.
    pub const OFF: Self = Self { policy: ResetPolicy::OFF, grace: Duration::ZERO };

    fn enabled(&self) -> bool {
        self.policy.enabled() && !self.grace.is_zero()
    }
}

impl Default for Guard {
    fn default() -> Self {
        Self { policy: ResetPolicy::default(), grace: DEFAULT_RESET_GRACE }
    }
}

/// A held change: the table and the text it came from (`None`: a delete).
#[derive(Debug)]
struct Pending {
    table: AgentConfigurations,
    text: Option<String>,
    revision: Option<Revision>,
    since: SystemTime,
    deadline: tokio::time::Instant,
}

/// The writes announced by a writer above the reloader (the publisher), keyed by their text:
/// the reloader attributes their releases and never holds them. The reloader owns this seam, so
/// it knows no writer.
pub trait Announced: std::fmt::Debug + Send + Sync {
    /// Whether a writer announced `text` (`None`: a delete) and the announcement is still live.
    fn is_announced(&self, text: Option<&str>) -> bool;

    /// Takes the attribution announced for `text` (`None`: a delete), if one is live.
    fn take(&self, text: Option<&str>) -> Option<Attribution>;
}

/// What became of one value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A new table is served, with this version.
    Installed(u64),
    /// The text is the one already seen; nothing to do.
    Unchanged,
    /// The document was refused; the previous table stays.
    Rejected(String),
    /// The document would reset the fleet: it is held and the previous table stays.
    Held(String),
    /// The store holds the served text again (after a refused or held document): the refusal or
    /// the held change is over, and nothing is installed or recorded, since agents would get
    /// exactly what they have.
    Restored,
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
    guard: Guard,
    held: Option<Pending>,
    /// The store revision of the value being applied.
    revision: Option<Revision>,
    /// Reads each document, re-reading only the services whose text changed since the last.
    reader: IncrementalReader,
    /// Writes announced by the publisher: their attribution, and that they are deliberate.
    pending: Option<Arc<dyn Announced>>,
}

impl Reloader {
    /// A reloader for `served`, whose current table came from `accepted` (if a table is served).
    pub fn new(served: Arc<ServedTable>, origin: impl Into<String>, accepted: Option<&str>) -> Self {
        let origin = origin.into();
        // The served document's parts are remembered now, so the first edit after start reads
        // only what it changed (one more read of the document, once).
        let mut reader = IncrementalReader::new();
        if let Some(text) = accepted {
            let _ = reader.read(text);
            // Not a second copy of every setting: the parts hold the served table's.
            reader.share_with(&served.snapshot().table);
        }
        Self {
            events: Events::default().for_origin(&origin),
            served,
            origin,
            last_seen: accepted.map(|t| Some(content_hash(t))),
            accepted: accepted.map(str::to_owned),
            releases: None,
            guard: Guard::OFF,
            held: None,
            revision: None,
            reader,
            pending: None,
        }
    }

    /// Holds changes from the store that would reset the fleet, as `guard` says.
    pub fn with_guard(mut self, guard: Guard) -> Self {
        self.guard = guard;
        self
    }

    /// When the held change is due to be installed, if one is held.
    pub fn held_deadline(&self) -> Option<tokio::time::Instant> {
        self.held.as_ref().map(|p| p.deadline)
    }

    /// When the held change arrived (the `since_ms` that `/readyz` shows), if one is held.
    pub fn held_since(&self) -> Option<SystemTime> {
        self.held.as_ref().map(|p| p.since)
    }

    /// Installs the held change if its grace period is over.
    pub fn install_held_if_due(&mut self) -> Option<Outcome> {
        let due = self.held.as_ref()?.deadline <= tokio::time::Instant::now();
        due.then(|| self.install_held("its grace period is over"))?
    }

    /// Installs the held change now (an operator confirmed it).
    pub fn confirm_held(&mut self) -> Option<Outcome> {
        self.install_held("it was confirmed")
    }

    /// Drops the held change (an operator refused it): the last good table stays served, and the
    /// held text stays *seen*, so it is not held again until the store's document changes.
    /// Whether a change was held.
    pub fn discard_held(&mut self) -> bool {
        let Some(pending) = self.held.take() else { return false };
        self.served.set_held(None);
        tracing::warn!(
            origin = %self.origin,
            services_after = pending.table.len(),
            "Dropped the held change; the last good table is still served until the store's document changes."
        );
        true
    }

    fn install_held(&mut self, why: &str) -> Option<Outcome> {
        let pending = self.held.take()?;
        tracing::warn!(origin = %self.origin, services = pending.table.len(), why, "Installing the held change.");
        self.revision = pending.revision;
        Some(self.install(pending.table, pending.text))
    }

    /// Holds `table` instead of installing it if it would reset the fleet; returns the outcome if
    /// it was held.
    fn hold_if_reset(&mut self, table: &AgentConfigurations, text: Option<&str>) -> Option<Outcome> {
        if !self.guard.enabled() {
            return None;
        }
        if self.pending.as_ref().is_some_and(|p| p.is_announced(text)) {
            return None; // announced by an admin-API write: deliberate
        }
        let current = self.served.snapshot();
        if !current.ready() {
            return None;
        }
        let reason = would_reset_the_fleet(&current.table, table, self.guard.policy)?.to_string();
        tracing::warn!(
            origin = %self.origin,
            services_before = current.table.len(),
            services_after = table.len(),
            grace_s = self.guard.grace.as_secs(),
            %reason,
            "Holding a change that would reset the fleet; the last good table is still served."
        );
        let now = SystemTime::now();
        self.served.set_held(Some(Held {
            origin: self.origin.clone(),
            reason: reason.clone(),
            since: now,
            until: now + self.guard.grace,
            services_before: current.table.len(),
            services_after: table.len(),
        }));
        self.held = Some(Pending {
            table: table.clone(),
            text: text.map(str::to_owned),
            revision: self.revision,
            since: now,
            deadline: tokio::time::Instant::now() + self.guard.grace,
        });
        Some(Outcome::Held(reason))
    }

    fn install(&mut self, table: AgentConfigurations, text: Option<String>) -> Outcome {
        self.held = None;
        self.served.set_held(None);
        let services = table.len();
        self.record_release(&table, text.as_deref());
        // Before the install, so a write that sees the new table finds its revision.
        self.served.set_store_revision(self.served.snapshot().version + 1, self.revision);
        let version = self.served.install(table);
        self.served.clear_rejection();
        match &text {
            Some(_) => self.events.document_installed(version, services),
            None => self.events.document_deleted(version),
        }
        self.accepted = text;
        Outcome::Installed(version)
    }

    /// Records every accepted document in `releases` (just before it is installed, so anyone
    /// woken by the install finds its release).
    pub fn with_releases(mut self, releases: Arc<ReleaseLog>) -> Self {
        self.releases = Some(releases);
        self
    }

    /// Attributes releases to the writes announced in `pending`, and never holds those.
    pub fn with_pending(mut self, pending: Arc<impl Announced + 'static>) -> Self {
        self.pending = Some(pending);
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
            let attribution = self
                .pending
                .as_ref()
                .and_then(|p| p.take(text))
                .unwrap_or_else(|| Attribution { origin: self.origin.clone(), ..Attribution::default() });
            releases.record(&current.table, table, text, current.version + 1, self.revision, attribution);
        }
    }

    /// The text of the table being served, if it came from a document.
    pub fn accepted_text(&self) -> Option<&str> {
        self.accepted.as_deref()
    }

    /// How many services are served; `None` while nothing is (no good document yet).
    pub fn served_services(&self) -> Option<usize> {
        let snapshot = self.served.snapshot();
        snapshot.ready().then(|| snapshot.table.len())
    }

    /// The release log, when accepted documents are recorded.
    pub fn releases(&self) -> Option<&Arc<ReleaseLog>> {
        self.releases.as_ref()
    }

    /// The release of the table being served, when it is recorded.
    pub fn served_release(&self) -> Option<u64> {
        self.releases.as_ref()?.served_as(self.served.snapshot().version)
    }

    /// The store holds the served text again after a refused or held one: both are over, the
    /// text's new revision is the one the next conditional write expects, and no release is
    /// recorded (it would change nothing).
    fn restored(&mut self, revision: Option<Revision>) -> Outcome {
        let held = self.held.take().is_some();
        self.served.set_held(None);
        let refused = self.served.last_rejection().is_some();
        self.served.clear_rejection();
        if revision.is_some() {
            self.served.set_store_revision(self.served.snapshot().version, revision);
        }
        let release = self.served_release();
        tracing::info!(
            origin = %self.origin,
            version = self.served.snapshot().version,
            release,
            refused,
            held,
            "The store holds the served document again; nothing to install."
        );
        Outcome::Restored
    }

    /// Applies the key's current value; `None` means the store holds no such key.
    pub fn apply(&mut self, value: Option<&str>) -> Outcome {
        self.apply_at(value, None)
    }

    /// Applies the key's current value, at the store's `revision` where it has revisions.
    pub fn apply_at(&mut self, value: Option<&str>, revision: Option<Revision>) -> Outcome {
        self.revision = revision;
        let hash = value.map(content_hash);
        if self.last_seen == Some(hash) {
            // The served text written again: the next conditional write must expect its new
            // revision.
            if revision.is_some() && self.held.is_none() && self.accepted.as_deref() == value {
                self.served.set_store_revision(self.served.snapshot().version, revision);
            }
            return Outcome::Unchanged;
        }
        self.last_seen = Some(hash);
        if let Some(text) = value
            && self.accepted.as_deref() == Some(text)
            && self.served.snapshot().ready()
        {
            return self.restored(revision);
        }
        let Some(text) = value else {
            // The OAP clears the table when the key is deleted: every agent gets EMPTY.
            let table = AgentConfigurations::default();
            return match self.hold_if_reset(&table, None) {
                Some(held) => held,
                None => self.install(table, None),
            };
        };
        match self.reader.read(text) {
            Ok(table) => match self.hold_if_reset(&table, Some(text)) {
                Some(held) => held,
                None => self.install(table, Some(text.to_owned())),
            },
            Err(error) => {
                let error = crate::served::located(&self.origin, &error);
                self.events.document_rejected(&error, self.served_services());
                self.served.record_rejection(Rejection::new(self.origin.clone(), error.clone(), Some(text)));
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
        assert!(matches!(&outcome, Outcome::Rejected(e) if e.starts_with("2:")), "{outcome:?}");
        assert_eq!(served.snapshot().answer("a").digest, before);
        assert!(served.last_rejection().is_some());
        assert_eq!(reloader.accepted_text(), Some(GOOD), "the accepted text is still the good one");
        assert_eq!(reloader.apply(Some("configurations:\n  a: {k: }\n")), Outcome::Unchanged);
        assert_eq!(reloader.apply(Some("configurations:\n  a: {k: w}\n")), Outcome::Installed(2));
        assert!(served.last_rejection().is_none());
        assert_ne!(served.snapshot().answer("a").digest, before);
    }

    #[test]
    fn the_served_text_written_back_after_a_refused_one_is_no_new_release() {
        let (served, reloader) = setup();
        let releases = Arc::new(ReleaseLog::in_memory(crate::releases::DEFAULT_RETENTION));
        let mut reloader = reloader.with_releases(Arc::clone(&releases));
        assert_eq!(reloader.apply(Some("configurations:\n  a: {k: w}\n")), Outcome::Installed(2));
        let (release, version) = (releases.latest().unwrap().meta.id, served.snapshot().version);
        assert!(matches!(reloader.apply(Some("configurations:\n  a: {k: }\n")), Outcome::Rejected(_)));
        assert_eq!(reloader.apply(Some("configurations:\n  a: {k: w}\n")), Outcome::Restored);
        assert!(served.last_rejection().is_none(), "the refusal is over");
        assert_eq!(releases.latest().unwrap().meta.id, release, "no release that changes nothing");
        assert_eq!(served.snapshot().version, version, "nor a new version");
        assert_eq!(reloader.apply(Some(GOOD)), Outcome::Installed(version + 1), "a real change still is one");
    }

    #[test]
    fn edits_serve_what_a_full_read_of_each_document_serves() {
        let (served, _) = setup();
        let mut text = String::from("configurations:\n");
        for i in 0..300 {
            text.push_str(&format!("  s{i}:\n    k: {i}\n    j: '{}'\n", i % 7));
        }
        let edits = [
            text.clone(),
            text.replacen("  s5:\n    k: 5\n", "  s5:\n    k: five\n", 1),
            text.replacen("  s9:\n", "  s9b:\n", 1),
            format!("{text}  s0:\n    k: again\n"),
            text.replacen("  s7:\n    k: 7\n", "  s7:\n    k: &a 7\n    m: *a\n", 1),
            text.replacen("  s3:\n", "  s3:\n    k: [\n", 1),
            text.replacen("  s2:\n    k: 2\n", "  s2:\n    k: 2\nother: 1\n", 1),
            text.clone(),
        ];
        let mut reloader = Reloader::new(Arc::clone(&served), "test", Some(&edits[0]));
        assert_eq!(reloader.apply(Some(&edits[1])), Outcome::Installed(2));
        let reuse = reloader.reader.last();
        assert_eq!(
            (reuse.reused, reuse.parsed, reuse.whole),
            (299, 1, false),
            "the accepted document's parts were remembered"
        );
        for edit in &edits {
            let expected = skyconf_core::read(edit);
            let outcome = reloader.apply(Some(edit));
            let snapshot = served.snapshot();
            match expected {
                Ok(table) => {
                    assert!(matches!(outcome, Outcome::Installed(_)), "{outcome:?}");
                    let want = skyconf_core::answer::Answers::new(&table);
                    let names: Vec<_> = table.services().map(|s| s.name().to_owned()).collect();
                    let got: Vec<_> = snapshot.table.services().map(|s| s.name().to_owned()).collect();
                    assert_eq!(got, names);
                    for name in names.iter().map(String::as_str).chain(["s9", "nope"]) {
                        assert_eq!(snapshot.table.get(name), table.get(name), "{name}");
                        let (a, b) = (snapshot.answer(name), want.answer(name));
                        assert_eq!(a.digest, b.digest, "{name}");
                        let serial = uuid::Uuid::nil();
                        assert_eq!(a.encoded.with_serial(serial), b.encoded.with_serial(serial), "{name}");
                    }
                }
                Err(error) => assert_eq!(outcome, Outcome::Rejected(crate::served::located("test", &error))),
            }
        }
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

    const TWO: &str = "configurations:\n  a: {k: v}\n  b: {k: v}\n";

    fn guarded() -> (Arc<ServedTable>, Reloader) {
        let served = Arc::new(ServedTable::new(skyconf_core::read(TWO).unwrap()));
        let reloader = Reloader::new(Arc::clone(&served), "test", Some(TWO)).with_guard(Guard::default());
        (served, reloader)
    }

    #[tokio::test(start_paused = true)]
    async fn an_empty_document_is_held_and_agents_keep_their_digests() {
        let (served, mut reloader) = guarded();
        let before = served.snapshot().answer("a").digest.clone();
        assert!(matches!(reloader.apply(Some("configurations: {}\n")), Outcome::Held(_)));
        assert!(matches!(reloader.apply(None), Outcome::Held(_)), "a delete is held too");
        assert_eq!(served.snapshot().answer("a").digest, before);
        assert_eq!(served.snapshot().version, 1);
        let held = served.held().expect("shown as held");
        assert_eq!((held.services_before, held.services_after), (2, 0));
        assert_eq!(reloader.accepted_text(), Some(TWO), "the last good text is still the one persisted");
        assert_eq!(reloader.apply(None), Outcome::Unchanged);
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_change_is_installed_after_the_grace_period() {
        let (served, mut reloader) = guarded();
        reloader.apply(None);
        tokio::time::advance(DEFAULT_RESET_GRACE - Duration::from_secs(1)).await;
        assert_eq!(reloader.install_held_if_due(), None);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(reloader.install_held_if_due(), Some(Outcome::Installed(2)));
        assert!(served.snapshot().table.is_empty());
        assert!(served.held().is_none());
        assert_eq!(reloader.held_deadline(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_change_is_installed_on_confirmation() {
        let (served, mut reloader) = guarded();
        reloader.apply(Some("configurations: {}\n"));
        assert_eq!(reloader.confirm_held(), Some(Outcome::Installed(2)));
        assert!(served.snapshot().table.is_empty());
        assert_eq!(reloader.accepted_text(), Some("configurations: {}\n"));
        assert_eq!(reloader.confirm_held(), None, "nothing left to confirm");
    }

    #[tokio::test(start_paused = true)]
    async fn a_discarded_change_keeps_the_last_good_table_until_the_store_changes() {
        let (served, mut reloader) = guarded();
        reloader.apply(Some("configurations: {}\n"));
        assert!(reloader.discard_held());
        assert!(served.held().is_none());
        assert_eq!(reloader.held_deadline(), None);
        assert_eq!(served.snapshot().table.len(), 2, "the last good table is still served");
        assert_eq!(reloader.accepted_text(), Some(TWO));
        assert_eq!(reloader.apply(Some("configurations: {}\n")), Outcome::Unchanged, "not held again");
        tokio::time::advance(DEFAULT_RESET_GRACE * 2).await;
        assert_eq!(reloader.install_held_if_due(), None, "nor installed later");
        assert!(!reloader.discard_held(), "nothing left to discard");
        assert!(matches!(reloader.apply(None), Outcome::Held(_)), "a new wipe is held again");
    }

    #[tokio::test(start_paused = true)]
    async fn an_ordinary_change_replaces_the_held_one() {
        let (served, mut reloader) = guarded();
        reloader.apply(None);
        let next = "configurations:\n  a: {k: w}\n  b: {k: v}\n";
        assert_eq!(reloader.apply(Some(next)), Outcome::Installed(2));
        assert!(served.held().is_none());
        assert_eq!(reloader.held_deadline(), None);
        tokio::time::advance(DEFAULT_RESET_GRACE * 2).await;
        assert_eq!(reloader.install_held_if_due(), None, "the dropped change never comes back");
        assert_eq!(served.snapshot().table.len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn an_announced_write_is_deliberate_and_not_held() {
        let (served, reloader) = guarded();
        let pending = Arc::new(crate::publish::PendingWrites::default());
        let mut reloader = reloader.with_pending(Arc::clone(&pending));
        pending.announce(Some("configurations: {}\n"), Default::default());
        assert_eq!(reloader.apply(Some("configurations: {}\n")), Outcome::Installed(2));
        assert!(served.snapshot().table.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_zero_grace_period_turns_the_guard_off() {
        let served = Arc::new(ServedTable::new(skyconf_core::read(TWO).unwrap()));
        let guard = Guard { grace: Duration::ZERO, ..Guard::default() };
        let mut reloader = Reloader::new(Arc::clone(&served), "test", Some(TWO)).with_guard(guard);
        assert_eq!(reloader.apply(None), Outcome::Installed(2));
    }
}
