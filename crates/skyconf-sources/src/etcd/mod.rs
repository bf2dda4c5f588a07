//! The etcd store (v3 API), laid out as the OAP's `configuration: etcd` selector lays it out: a
//! single key at `{namespace}/{key}`, a group's sub-items under `{namespace}/{key}/` (see
//! the `layout` module for the details), values as text.
//!
//! Where the OAP polls each registered key every `period` (60 s), skyconf reads the whole
//! namespace once and then follows one prefix watch on it, so a change is reported as soon as etcd
//! commits it:
//!
//! - **First connection**: a range read of the namespace at revision R, then a watch from R + 1:
//!   nothing committed between the two is missed. The read goes out as an [`Update::Snapshot`].
//! - **Reconnection** (the stream broke, or a new [`Source::run`] on the same source): the watch
//!   resumes from the revision after the last one reported, *then* the namespace is read again for
//!   a fresh snapshot; events the read already reflects are skipped by revision. The watch and the
//!   reported state therefore never have a gap.
//! - **Compaction**: when etcd no longer keeps the revision a watch asks for, it cancels the watch
//!   with its compaction revision; the source then reads the namespace again (a full snapshot) and
//!   watches from the revision after that read.
//! - **Outage**: a connection that cannot be made, or a read or watch that fails, is reported as
//!   one [`Update::Failed`]; the source retries with backoff and jitter and sends a fresh snapshot
//!   when the store answers again. A watch that breaks while the store still answers is simply
//!   re-established.
//!
//! Values are decoded as UTF-8, with malformed bytes replaced as the OAP's JVM decoder replaces
//! them, so both compute the same digest. A value larger than [`Limits::max_value_bytes`] is not
//! reported (the key keeps its previous value) and an [`Update::Failed`] says why.
//!
//! **Writes** ([`Source::put`]) are compare-and-swaps: one `Txn` that writes (or deletes) the key
//! only if its `mod_revision` is still the one this source last saw for it — from a read, a watch
//! event or its own last write — or, for a key the source last saw absent, only if it still does
//! not exist (`version == 0`). When the key changed in between, nothing is written and `put` fails with
//! [`SourceError::Conflict`]. A write that timed out but was still on its way to a frozen etcd
//! therefore cannot overwrite a later write: whichever lands second finds the key changed. A source
//! that has not read its namespace yet reads the key first. A write that timed out is not retried
//! (it may yet land); one that failed to connect, or whose login expired, is retried once.
//!
//! With `authentication` on, the source logs in (`Auth.Authenticate`) on every connection and
//! sends the token with each request; a refused login is reported as [`SourceError::Refused`].
//! `https://` endpoints use rustls, with the CA, client certificate and key of the settings.
//!
//! skyconf's own records ([`Source::shared_records`]) live under `{namespace}/skyconf/`, which the
//! watch skips (the `records` module); session records hang on a lease the source keeps alive.

mod client;
mod layout;
mod records;
mod settings;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};

use skyconf_proto::etcd::mvccpb;
use tokio::sync::{Mutex, mpsc};
use tokio_util::sync::CancellationToken;

use self::client::{Connection, Connector, EtcdError, Swap};
use self::layout::{Layout, Slot};
use self::records::{DEFAULT_SESSION_TTL, EtcdRecords};
pub use self::settings::EtcdSettings;
use crate::{
    Backoff, Expect, KeySet, Limits, Reporter, Revision, Session, SessionEnd, SettingsError, Source, SourceError,
    StoreContent, Update, supervise,
};

/// Room for etcd's framing around the largest value accepted.
const MESSAGE_OVERHEAD: usize = 16 * 1024 * 1024;

/// An etcd namespace as a configuration store.
#[derive(Debug)]
pub struct EtcdSource {
    // Shared with the connector, and the writer's connection boxed: the source stays small
    // enough to sit in an enum of stores.
    settings: Arc<EtcdSettings>,
    endpoints: Vec<String>,
    prefix: String,
    connector: Connector,
    limits: Limits,
    backoff: Backoff,
    /// The last revision `run` reported (0: none), so the next watch resumes right after it.
    reported: AtomicI64,
    /// How many times the namespace was read again because the watch's history was gone.
    relists: AtomicU64,
    /// The connection `put` reuses.
    writer: Mutex<Option<Box<Connection>>>,
    /// Each key's last change as this source last saw it: what `put` compares against.
    seen: std::sync::Mutex<Seen>,
    /// skyconf's own records in the namespace, on their own connection.
    records: Arc<EtcdRecords>,
}

impl EtcdSource {
    /// A source for `settings`; nothing is contacted until it is used.
    pub fn new(settings: EtcdSettings) -> Result<Self, SettingsError> {
        settings.validate()?;
        let endpoints = settings.endpoint_list()?;
        let limits = Limits::default();
        let settings = Arc::new(settings);
        let prefix = settings.key_prefix();
        let records = records_for(&settings, &endpoints, &prefix, DEFAULT_SESSION_TTL);
        Ok(Self {
            records,
            connector: Connector::new(Arc::clone(&settings), endpoints.clone(), message_limit(&limits)),
            prefix,
            endpoints,
            settings,
            limits,
            backoff: Backoff::default(),
            reported: AtomicI64::new(0),
            relists: AtomicU64::new(0),
            writer: Mutex::new(None),
            seen: std::sync::Mutex::new(Seen::default()),
        })
    }

    /// Sets the size limit for one value.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.connector = Connector::new(Arc::clone(&self.settings), self.endpoints.clone(), message_limit(&limits));
        self.limits = limits;
        self
    }

    /// Sets the TTL of the lease that carries session records (whole seconds; 15 s by default).
    /// etcd may raise a very short TTL to its minimum.
    pub fn with_session_ttl(mut self, ttl: std::time::Duration) -> Self {
        self.records = records_for(&self.settings, &self.endpoints, &self.prefix, ttl);
        self
    }

    /// Sets the reconnect backoff.
    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// The settings.
    pub fn settings(&self) -> &EtcdSettings {
        &self.settings
    }

    /// How many times the namespace was read again because etcd no longer had the history a
    /// watch needed (compaction, or a restored cluster).
    pub fn relists(&self) -> u64 {
        self.relists.load(Ordering::Relaxed)
    }

    /// What the source last saw of each key; never held across an await.
    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The store's error as a [`SourceError`]: refused (login, permissions, settings) or
    /// unavailable (everything else).
    fn error(&self, error: &EtcdError) -> SourceError {
        let (store, message) = (self.describe(), error.to_string());
        if error.is_refusal() {
            SourceError::Refused { store, message }
        } else {
            SourceError::Unavailable { store, message }
        }
    }

    /// Reads the whole namespace: the mirror, the revision it reflects, and the values it had to
    /// leave out.
    async fn read(
        &self,
        connection: &Connection,
        layout: &Layout,
    ) -> Result<(Mirror, i64, Vec<SourceError>), EtcdError> {
        let (key, range_end) = layout.range();
        let response = connection.range(key, range_end).await?;
        let revision = response.header.map(|h| h.revision).unwrap_or_default();
        self.seen().read(revision, response.kvs.iter().map(|kv| (kv.key.clone(), kv.mod_revision)));
        let mut mirror = Mirror { layout: layout.clone(), content: StoreContent::default(), last_revision: 0 };
        let problems =
            mirror.apply_all(response.kvs.into_iter().map(|kv| (Op::Put, kv)), self.limits.max_value_bytes).1;
        Ok((mirror, revision, problems))
    }

    /// Forgets the revision to resume from, so the next session reads the namespace afresh.
    fn relist(&self, reason: String) -> SessionEnd {
        self.reported.store(0, Ordering::Release);
        // The store may be a new or restored cluster: its revisions say nothing of the old ones.
        self.seen().forget();
        self.relists.fetch_add(1, Ordering::Relaxed);
        SessionEnd::Relist(reason)
    }

    /// One connection's life: connect, read and watch, report until the watch ends.
    async fn session(&self, layout: &Layout, reporter: &mut Reporter<'_>) -> SessionEnd {
        let failed = |error: &EtcdError| SessionEnd::Failed(self.error(error));
        let connection = match self.connector.connect().await {
            Ok(connection) => connection,
            Err(error) => return failed(&error),
        };
        let (key, range_end) = layout.range();
        let resume_after = self.reported.load(Ordering::Acquire);
        let established = if resume_after > 0 {
            // The watch first, so nothing after the last reported revision can be missed; then a
            // fresh read for the snapshot.
            let watch = match connection.watch(key, range_end, resume_after + 1).await {
                Ok(watch) => watch,
                Err(error @ EtcdError::Compacted { .. }) => return self.relist(error.to_string()),
                Err(error) => return failed(&error),
            };
            match self.read(&connection, layout).await {
                Ok((_, revision, _)) if revision < resume_after => {
                    return self.relist(format!(
                        "the store's revision {revision} is behind the last one seen, {resume_after}: a new or restored cluster"
                    ));
                }
                Ok(read) => (watch, read),
                Err(error) => return failed(&error),
            }
        } else {
            let read = match self.read(&connection, layout).await {
                Ok(read) => read,
                Err(error) => return failed(&error),
            };
            match connection.watch(key, range_end, read.1 + 1).await {
                Ok(watch) => (watch, read),
                Err(error) => return failed(&error),
            }
        };
        let (mut watch, (mut mirror, revision, problems)) = established;
        self.reported.fetch_max(revision, Ordering::AcqRel);
        reporter.established();
        tracing::info!(store = %self.describe(), revision, singles = mirror.content.singles.len(), groups = mirror.content.groups.len(), "Watching the etcd namespace.");
        let first = std::iter::once(Update::Snapshot(mirror.content.clone()));
        if let Err(gone) = reporter.send_all(first.chain(problems.into_iter().map(Update::Failed))).await {
            return gone.into();
        }
        loop {
            let response = match watch.next().await {
                Ok(response) => response,
                Err(error @ EtcdError::Compacted { .. }) => return self.relist(error.to_string()),
                Err(error) => return SessionEnd::Failed(self.error(&error)),
            };
            {
                let mut seen = self.seen();
                for event in &response.events {
                    let Some(kv) = &event.kv else { continue };
                    let deleted = event.r#type == mvccpb::event::EventType::Delete as i32;
                    seen.learn(&kv.key, kv.mod_revision, if deleted { 0 } else { kv.mod_revision });
                }
            }
            let events = response.events.into_iter().filter_map(|event| {
                let op = if event.r#type == mvccpb::event::EventType::Delete as i32 { Op::Delete } else { Op::Put };
                // Already in the snapshot when the watch resumed before the read.
                event.kv.filter(|kv| kv.mod_revision > revision).map(|kv| (op, kv))
            });
            let (batch, problems) = mirror.apply_all(events, self.limits.max_value_bytes);
            self.reported.fetch_max(mirror.last_revision, Ordering::AcqRel);
            if let Err(gone) =
                reporter.send_all(batch.into_iter().chain(problems.into_iter().map(Update::Failed))).await
            {
                return gone.into();
            }
        }
    }
}

/// The records of the namespace under `prefix`, with their own connector.
fn records_for(
    settings: &Arc<EtcdSettings>,
    endpoints: &[String],
    prefix: &str,
    ttl: std::time::Duration,
) -> Arc<EtcdRecords> {
    let connector = Connector::new(Arc::clone(settings), endpoints.to_vec(), message_limit(&Limits::default()));
    Arc::new(EtcdRecords::new(connector, prefix, describe(endpoints, prefix), ttl))
}

fn describe(endpoints: &[String], prefix: &str) -> String {
    let namespace = if prefix.is_empty() { "(none)" } else { prefix };
    format!("etcd {} namespace {namespace}", endpoints.join(","))
}

impl Source for EtcdSource {
    fn describe(&self) -> String {
        describe(&self.endpoints, &self.prefix)
    }

    fn shared_records(&self) -> Option<Arc<dyn crate::SharedRecords>> {
        Some(Arc::clone(&self.records) as Arc<dyn crate::SharedRecords>)
    }

    async fn load(&self, keys: &KeySet) -> Result<StoreContent, SourceError> {
        let layout = Layout::new(&self.prefix, keys);
        let connection = self.connector.connect().await.map_err(|e| self.error(&e))?;
        let (mirror, _, problems) = self.read(&connection, &layout).await.map_err(|e| self.error(&e))?;
        // Rather no view than a partial one.
        match problems.into_iter().next() {
            Some(problem) => Err(problem),
            None => Ok(mirror.content),
        }
    }

    async fn run(&self, keys: KeySet, updates: mpsc::Sender<Update>, shutdown: CancellationToken) {
        supervise(self, &keys, updates, self.backoff.clone(), shutdown).await;
    }

    fn revisions(&self) -> bool {
        true
    }

    async fn put(&self, key: &str, value: Option<&str>, expect: Expect) -> Result<Option<Revision>, SourceError> {
        if key.is_empty() || key.contains('/') {
            return Err(SourceError::Unsupported(format!(
                "`{key}` cannot be a single key: it must be non-empty, without `/`"
            )));
        }
        let etcd_key = layout::single_key(&self.prefix, key);
        let value = value.map(|text| text.as_bytes().to_vec());
        // One writer at a time; the lock is tokio's and may be held across the calls.
        let mut writer = self.writer.lock().await;
        let mut retried = false;
        loop {
            let connection = match writer.as_deref() {
                Some(connection) => connection.clone(),
                None => {
                    let connection = self.connector.connect().await.map_err(|e| self.error(&e))?;
                    *writer = Some(Box::new(connection.clone()));
                    connection
                }
            };
            let expected = match expect {
                Expect::Seen => self.expected(&connection, &etcd_key).await,
                // etcd compares a missing key's mod_revision as 0.
                Expect::At(revision) => Ok(revision.and_then(|r| i64::try_from(r).ok()).unwrap_or(0)),
            };
            let result = match expected {
                Ok(expected) => {
                    connection.swap(etcd_key.clone(), expected, value.clone()).await.map(|swap| (expected, swap))
                }
                Err(error) => Err(error),
            };
            match result {
                Ok((_, Swap::Written { revision })) => {
                    // So the next write expects this one, before the watch echoes it.
                    self.seen().learn(&etcd_key, revision, if value.is_some() { revision } else { 0 });
                    return Ok(value.as_ref().and_then(|_| u64::try_from(revision).ok()));
                }
                Ok((expected, Swap::Changed { current })) => {
                    let shown = String::from_utf8_lossy(&etcd_key);
                    let basis = match expect {
                        Expect::Seen => "when last seen",
                        Expect::At(_) => "in the version the write is based on",
                    };
                    let message = match expected {
                        0 => format!("key {shown} was absent {basis}; it now exists (mod revision {current})"),
                        _ if current == 0 => {
                            format!("key {shown} was at mod revision {expected} {basis}; it was deleted since")
                        }
                        _ => format!("key {shown} was at mod revision {expected} {basis}; it is now at {current}"),
                    };
                    tracing::warn!(store = %self.describe(), key = %shown, expected, current, "A write found the key changed since it was last seen; nothing was written.");
                    return Err(SourceError::Conflict { store: self.describe(), message });
                }
                // A stale connection or an expired token: once more on a fresh, logged-in one. Not
                // after a timeout: that write may still land, and a second one would then find
                // the key changed by the first.
                Err(error)
                    if !retried
                        && (error.is_token_problem()
                            || !(error.is_refusal() || matches!(error, EtcdError::Timeout { .. }))) =>
                {
                    tracing::debug!(store = %self.describe(), %error, "Retrying the write on a new connection.");
                    *writer = None;
                    retried = true;
                }
                Err(error) => return Err(self.error(&error)),
            }
        }
    }
}

impl EtcdSource {
    /// The mod revision `put` expects `etcd_key` at (0: absent): as last seen, or, before the
    /// namespace was ever read, as the store has it now.
    async fn expected(&self, connection: &Connection, etcd_key: &[u8]) -> Result<i64, EtcdError> {
        if let Some(expected) = self.seen().expected(etcd_key) {
            return Ok(expected);
        }
        let response = connection.range(etcd_key.to_vec(), Vec::new()).await?;
        Ok(response.kvs.first().map_or(0, |kv| kv.mod_revision))
    }
}

impl Session for EtcdSource {
    async fn run_once(&self, keys: &KeySet, reporter: &mut Reporter<'_>) -> SessionEnd {
        self.session(&Layout::new(&self.prefix, keys), reporter).await
    }
}

/// The largest gRPC message accepted: a whole namespace read can hold several large values.
fn message_limit(limits: &Limits) -> usize {
    usize::try_from(limits.max_value_bytes).unwrap_or(usize::MAX).saturating_mul(2).saturating_add(MESSAGE_OVERHEAD)
}

/// Each key's last change as the source last saw it, newest knowledge winning: a read, a watch
/// event or an own write only replaces what was learnt at an earlier revision.
#[derive(Debug, Default)]
struct Seen {
    /// The revision of the newest full read of the namespace (0: none yet); a key without an
    /// entry was absent then.
    read_at: i64,
    /// etcd key → (the revision this was learnt at, the key's mod revision then, 0 if absent).
    keys: HashMap<Vec<u8>, (i64, i64)>,
}

impl Seen {
    /// A full read of the namespace at revision `at`: every key it holds, with its mod revision.
    fn read(&mut self, at: i64, kvs: impl Iterator<Item = (Vec<u8>, i64)>) {
        if at < self.read_at {
            // Older than what is known: it can only fill in keys learnt even earlier.
            for (key, mod_revision) in kvs {
                self.learn(&key, at, mod_revision);
            }
            return;
        }
        let mut keys: HashMap<Vec<u8>, (i64, i64)> = kvs.map(|(key, m)| (key, (at, m))).collect();
        // What was learnt after the read (a watch event, an own write) stays.
        keys.extend(self.keys.drain().filter(|(_, (learnt, _))| *learnt > at));
        self.keys = keys;
        self.read_at = at;
    }

    /// `key`'s mod revision (0: deleted) as of revision `at`.
    fn learn(&mut self, key: &[u8], at: i64, mod_revision: i64) {
        let known = self.keys.get(key).copied().unwrap_or((self.read_at, 0));
        if at > known.0 {
            self.keys.insert(key.to_vec(), (at, mod_revision));
        }
    }

    /// The mod revision a write of `key` expects (0: absent); `None` before any full read.
    fn expected(&self, key: &[u8]) -> Option<i64> {
        match self.keys.get(key) {
            Some(&(_, mod_revision)) => Some(mod_revision),
            None if self.read_at > 0 => Some(0),
            None => None,
        }
    }

    /// Forgets everything: the next write reads its key first.
    fn forget(&mut self) {
        *self = Self::default();
    }
}

/// What happened to a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Put,
    Delete,
}

/// The namespace's content as last reported, kept current with the watch's events.
#[derive(Debug)]
struct Mirror {
    layout: Layout,
    content: StoreContent,
    last_revision: i64,
}

impl Mirror {
    /// Applies a batch of changes (a read or one watch response); the updates that report the
    /// keys whose value changed, once each with its final value, and the values left out.
    fn apply_all(
        &mut self,
        changes: impl Iterator<Item = (Op, mvccpb::KeyValue)>,
        max_value_bytes: u64,
    ) -> (Vec<Update>, Vec<SourceError>) {
        type Before = (Option<String>, Option<Revision>);
        let mut singles_before: BTreeMap<String, Before> = BTreeMap::new();
        let mut groups_before: BTreeMap<String, Option<BTreeMap<String, String>>> = BTreeMap::new();
        let mut problems = Vec::new();
        for (op, kv) in changes {
            self.last_revision = self.last_revision.max(kv.mod_revision);
            let Some(slot) = self.layout.slot(&kv.key) else { continue };
            let value = match op {
                Op::Delete => None,
                Op::Put if kv.value.len() as u64 > max_value_bytes => {
                    problems.push(SourceError::TooLarge {
                        what: format!("etcd key {}", String::from_utf8_lossy(&kv.key)),
                        size: kv.value.len() as u64,
                        limit: max_value_bytes,
                    });
                    continue;
                }
                Op::Put => Some(String::from_utf8_lossy(&kv.value).into_owned()),
            };
            match slot {
                Slot::Single(key) => {
                    singles_before
                        .entry(key.clone())
                        .or_insert_with(|| (self.content.singles.get(&key).cloned(), self.content.revision(&key)));
                    let revision = u64::try_from(kv.mod_revision).ok().filter(|r| *r > 0);
                    self.content.set_single_at(&key, value, revision);
                }
                Slot::Item(group, item) => {
                    groups_before.entry(group.clone()).or_insert_with(|| self.content.groups.get(&group).cloned());
                    match value {
                        Some(value) => {
                            self.content.groups.entry(group).or_default().insert(item, value);
                        }
                        None => {
                            if let Some(items) = self.content.groups.get_mut(&group) {
                                items.remove(&item);
                                // A group is its sub-items: with none left it is absent.
                                if items.is_empty() {
                                    self.content.groups.remove(&group);
                                }
                            }
                        }
                    }
                }
            }
        }
        let mut updates = Vec::new();
        // A rewrite of the same text is reported too: its revision is what the next conditional
        // write must expect.
        for (key, before) in singles_before {
            let now = (self.content.singles.get(&key).cloned(), self.content.revision(&key));
            if now != before {
                updates.push(Update::Single { key, value: now.0, revision: now.1 });
            }
        }
        for (key, before) in groups_before {
            let now = self.content.groups.get(&key).cloned();
            if now != before {
                updates.push(Update::Group { key, items: now });
            }
        }
        (updates, problems)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &str, value: &str, revision: i64) -> mvccpb::KeyValue {
        mvccpb::KeyValue { key: key.into(), value: value.into(), mod_revision: revision, ..Default::default() }
    }

    fn mirror() -> Mirror {
        Mirror { layout: Layout::new("/sw/", &KeySet::oap()), content: StoreContent::default(), last_revision: 0 }
    }

    #[test]
    fn a_batch_reports_each_changed_key_once_with_its_final_value() {
        let mut m = mirror();
        let (updates, problems) = m.apply_all(
            [
                (Op::Put, kv("/sw/a", "1", 2)),
                (Op::Put, kv("/sw/a", "2", 3)),
                (Op::Put, kv("/sw/g/x", "v", 3)),
                (Op::Put, kv("/other", "x", 3)),
            ]
            .into_iter(),
            100,
        );
        assert!(problems.is_empty());
        assert_eq!(updates.len(), 2, "{updates:?}");
        assert!(
            matches!(&updates[0], Update::Single { key, value: Some(v), revision: Some(3) } if key == "a" && v == "2")
        );
        assert!(matches!(&updates[1], Update::Group { key, items: Some(items) } if key == "g" && items["x"] == "v"));
        assert_eq!(m.last_revision, 3);

        // The same text at a new revision is reported: a conditional write must expect it.
        let (updates, _) = m.apply_all([(Op::Put, kv("/sw/a", "2", 4))].into_iter(), 100);
        assert!(matches!(&updates[..], [Update::Single { value: Some(v), revision: Some(4), .. }] if v == "2"));
        let (updates, _) =
            m.apply_all([(Op::Put, kv("/sw/a", "3", 5)), (Op::Put, kv("/sw/a", "2", 6))].into_iter(), 100);
        assert!(
            matches!(&updates[..], [Update::Single { value: Some(v), revision: Some(6), .. }] if v == "2"),
            "a change undone within the batch is reported once, at its final revision: {updates:?}"
        );
        let (updates, _) = m.apply_all([(Op::Put, kv("/other", "x", 7))].into_iter(), 100);
        assert!(updates.is_empty(), "keys outside the namespace are no change");
    }

    #[test]
    fn deletes_remove_singles_and_empty_groups() {
        let mut m = mirror();
        m.apply_all([(Op::Put, kv("/sw/a", "1", 2)), (Op::Put, kv("/sw/g/x", "v", 3))].into_iter(), 100);
        let (updates, _) =
            m.apply_all([(Op::Delete, kv("/sw/a", "", 4)), (Op::Delete, kv("/sw/g/x", "", 4))].into_iter(), 100);
        assert!(matches!(&updates[0], Update::Single { value: None, .. }));
        assert!(matches!(&updates[1], Update::Group { items: None, .. }), "{updates:?}");
        assert_eq!(m.content, StoreContent::default());
        let (updates, _) = m.apply_all([(Op::Delete, kv("/sw/a", "", 5))].into_iter(), 100);
        assert!(updates.is_empty(), "deleting what is not there is no change");
    }

    #[test]
    fn oversized_and_malformed_values() {
        let mut m = mirror();
        m.apply_all([(Op::Put, kv("/sw/a", "ok", 2))].into_iter(), 5);
        let (updates, problems) = m.apply_all([(Op::Put, kv("/sw/a", "too large", 3))].into_iter(), 5);
        assert!(updates.is_empty());
        assert!(matches!(&problems[..], [SourceError::TooLarge { size: 9, limit: 5, .. }]));
        assert_eq!(m.content.singles["a"], "ok", "the key keeps its value");
        let bad =
            mvccpb::KeyValue { key: b"/sw/a".to_vec(), value: vec![b'x', 0xff], mod_revision: 4, ..Default::default() };
        let (updates, _) = m.apply_all([(Op::Put, bad)].into_iter(), 5);
        assert!(
            matches!(&updates[0], Update::Single { value: Some(v), .. } if v == "x\u{fffd}"),
            "decoded as a JVM would"
        );
    }

    #[test]
    fn seen_keeps_the_newest_knowledge_of_each_key() {
        let mut seen = Seen::default();
        assert_eq!(seen.expected(b"/sw/a"), None, "nothing read yet");
        seen.learn(b"/sw/a", 3, 3);
        assert_eq!(seen.expected(b"/sw/a"), Some(3), "an own write before any read counts");
        seen.read(5, [(b"/sw/a".to_vec(), 4), (b"/sw/b".to_vec(), 5)].into_iter());
        assert_eq!((seen.expected(b"/sw/a"), seen.expected(b"/sw/c")), (Some(4), Some(0)));
        seen.learn(b"/sw/a", 7, 7);
        seen.learn(b"/sw/a", 6, 6);
        assert_eq!(seen.expected(b"/sw/a"), Some(7), "a late echo of an older change is ignored");
        seen.learn(b"/sw/b", 8, 0);
        assert_eq!(seen.expected(b"/sw/b"), Some(0), "deleted");
        seen.read(4, [(b"/sw/a".to_vec(), 4), (b"/sw/c".to_vec(), 2)].into_iter());
        assert_eq!(seen.expected(b"/sw/a"), Some(7), "an older read does not undo newer knowledge");
        assert_eq!(seen.expected(b"/sw/c"), Some(0), "nor revive what the newer read found absent");
        seen.read(9, [(b"/sw/c".to_vec(), 9)].into_iter());
        assert_eq!((seen.expected(b"/sw/a"), seen.expected(b"/sw/c")), (Some(0), Some(9)));
        seen.forget();
        assert_eq!(seen.expected(b"/sw/c"), None);
    }

    #[test]
    fn refuses_settings_that_cannot_work() {
        assert!(EtcdSource::new(EtcdSettings { endpoints: String::new(), ..Default::default() }).is_err());
        let source = EtcdSource::new(EtcdSettings::default()).unwrap();
        assert_eq!(source.describe(), "etcd http://localhost:2379 namespace /skywalking/");
    }
}
