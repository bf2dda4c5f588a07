//! A replica's summary shared with the other replicas through the store: written as a session
//! record `<kind>/<replica id>`, the others' read back on the same tick, the own one deleted at
//! shutdown (a replica that dies leaves it to the store's session expiry). The fleet summary
//! ([`crate::fleet::replicas`]) and the OpAMP agents' ([`crate::opamp::replicas`]) are two kinds
//! of it.
//!
//! A summary that says what the last one written said (its times aside) is not written again
//! until [`REWRITE_EVERY`] periods passed: the store keeps the session record alive meanwhile (a
//! lease, an ephemeral znode, a renewed expiry), and its time says how fresh it is. While a
//! rollout is served the summaries are written every period: its driver reads when each agent was
//! last seen, and a row that stood still for [`REWRITE_EVERY`] periods (60 s by default) would
//! look like an agent gone past the rollout's `lost_after_s` (45 s by default).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde::de::DeserializeOwned;
use skyconf_sources::{Lifetime, SharedRecords};

/// The largest summary written: below ZooKeeper's default packet limit (1 MiB) and etcd's request
/// limit (1.5 MiB).
pub(crate) const MAX_SUMMARY_BYTES: usize = 900 * 1024;

/// An unchanged summary is written again after this many periods.
pub(crate) const REWRITE_EVERY: u32 = 6;

/// How long deleting the own summary at shutdown may take.
const DELETE_TIMEOUT: Duration = Duration::from_secs(2);

/// What one replica publishes of itself.
pub(crate) trait Published: Serialize + DeserializeOwned {
    /// The record kind the summaries are kept under.
    const KIND: &'static str;
    /// What it is, for logs ("fleet summary").
    const WHAT: &'static str;

    /// The replica it is of.
    fn replica(&self) -> &str;

    /// Whether `other` says the same, times aside.
    fn unchanged_from(&self, other: &Self) -> bool;

    /// The JSON written, at most [`MAX_SUMMARY_BYTES`]: the summary drops what it can until it fits.
    fn to_record(&mut self) -> Vec<u8>;
}

/// One replica's summaries of kind `S` in the store: the one it wrote last, and the others'.
#[derive(Debug)]
pub(crate) struct Board<S> {
    id: String,
    records: Arc<dyn SharedRecords>,
    rewrite_after: Duration,
    written: Option<(S, Instant)>,
}

impl<S: Published> Board<S> {
    /// Replica `id`'s board in `records`, published every `every`.
    pub(crate) fn new(id: &str, records: Arc<dyn SharedRecords>, every: Duration) -> Self {
        Self { id: id.to_owned(), records, rewrite_after: every * REWRITE_EVERY, written: None }
    }

    /// Writes `summary`, unless it says what the last one written said and that one is fresh.
    /// With `every_period` (a rollout's driver, on any replica, judges the rows by when each agent
    /// was last seen) it is written on every call: an unchanged summary's times still move.
    pub(crate) async fn publish(&mut self, mut summary: S, every_period: bool) {
        let fresh = !every_period
            && self
                .written
                .as_ref()
                .is_some_and(|(last, at)| summary.unchanged_from(last) && at.elapsed() < self.rewrite_after);
        if fresh {
            return;
        }
        let bytes = summary.to_record();
        match self.records.put(S::KIND, &self.id, &bytes, Lifetime::Session).await {
            Ok(()) => {
                tracing::debug!(replica = %self.id, bytes = bytes.len(), "Published the {}.", S::WHAT);
                self.written = Some((summary, Instant::now()));
            }
            // An outage of the store is reported once, by the store task.
            Err(error) if error.is_outage() => {
                tracing::debug!(replica = %self.id, %error, "Cannot publish the {}; retrying.", S::WHAT);
            }
            Err(error) => {
                tracing::warn!(replica = %self.id, %error, "Cannot publish the {}; retrying.", S::WHAT);
            }
        }
    }

    /// The other replicas' summaries; `None` when they cannot be read (the last ones read stand).
    /// One that cannot be parsed, or names another replica than its record, is skipped.
    pub(crate) async fn others(&self) -> Option<Vec<S>> {
        let listed = match self.records.list(S::KIND).await {
            Ok(listed) => listed,
            Err(error) if error.is_outage() => {
                tracing::debug!(replica = %self.id, %error, "Cannot read the other replicas' {}s; showing the last ones read.", S::WHAT);
                return None;
            }
            Err(error) => {
                tracing::warn!(replica = %self.id, %error, "Cannot read the other replicas' {}s; showing the last ones read.", S::WHAT);
                return None;
            }
        };
        let parsed = listed
            .into_iter()
            .filter(|(name, _)| *name != self.id)
            .filter_map(|(name, bytes)| match serde_json::from_slice::<S>(&bytes) {
                Ok(summary) if summary.replica() == name => Some(summary),
                Ok(_) | Err(_) => {
                    tracing::debug!(record = %name, "Skipping a {} that cannot be read.", S::WHAT);
                    None
                }
            })
            .collect();
        Some(parsed)
    }

    /// Deletes the own summary, within [`DELETE_TIMEOUT`].
    pub(crate) async fn delete(&self) {
        match tokio::time::timeout(DELETE_TIMEOUT, self.records.delete(S::KIND, &self.id)).await {
            Ok(Ok(())) => tracing::debug!(replica = %self.id, "Deleted the {}.", S::WHAT),
            Ok(Err(error)) => {
                tracing::debug!(replica = %self.id, %error, "Cannot delete the {}; it expires with the session.", S::WHAT);
            }
            Err(_) => {
                tracing::debug!(replica = %self.id, "Deleting the {} timed out; it expires with the session.", S::WHAT);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde::Deserialize;
    use skyconf_sources::StoreFuture;
    use skyconf_sources::shared::Listed;

    use super::*;

    /// A store that counts the summaries written.
    #[derive(Debug, Default)]
    struct Counted(AtomicUsize);

    impl SharedRecords for Counted {
        fn describe(&self) -> String {
            "counted".into()
        }
        fn create<'a>(&'a self, _: &'a str, _: &'a str, _: &'a [u8]) -> StoreFuture<'a, bool> {
            Box::pin(async { Ok(true) })
        }
        fn put<'a>(&'a self, _: &'a str, _: &'a str, _: &'a [u8], _: Lifetime) -> StoreFuture<'a, ()> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Ok(()) })
        }
        fn get<'a>(&'a self, _: &'a str, _: &'a str) -> StoreFuture<'a, Option<Vec<u8>>> {
            Box::pin(async { Ok(None) })
        }
        fn list<'a>(&'a self, _: &'a str) -> StoreFuture<'a, Listed> {
            Box::pin(async { Ok(Listed::default()) })
        }
        fn delete<'a>(&'a self, _: &'a str, _: &'a str) -> StoreFuture<'a, ()> {
            Box::pin(async { Ok(()) })
        }
    }

    /// A summary whose only content is a time (which `unchanged_from` sets aside).
    #[derive(Debug, Serialize, Deserialize)]
    struct Seen {
        replica: String,
        last_seen_ms: u64,
    }

    impl Published for Seen {
        const KIND: &'static str = "seen";
        const WHAT: &'static str = "test summary";
        fn replica(&self) -> &str {
            &self.replica
        }
        fn unchanged_from(&self, _: &Self) -> bool {
            true
        }
        fn to_record(&mut self) -> Vec<u8> {
            serde_json::to_vec(self).unwrap()
        }
    }

    /// A rollout's driver on another replica reads when each agent was last seen: while one is
    /// served, a summary that changed only in its times is written on every period, where
    /// otherwise it waits [`REWRITE_EVERY`] periods (longer than a rollout's default `lost_after_s`).
    #[tokio::test]
    async fn an_unchanged_summary_is_written_every_period_only_while_a_rollout_is_served() {
        let store = Arc::new(Counted::default());
        let mut board = Board::new("a", Arc::clone(&store) as Arc<dyn SharedRecords>, Duration::from_secs(10));
        let seen = |ms| Seen { replica: "a".into(), last_seen_ms: ms };
        board.publish(seen(1), false).await;
        board.publish(seen(2), false).await;
        assert_eq!(store.0.load(Ordering::SeqCst), 1, "without a rollout the unchanged summary waits");
        board.publish(seen(3), true).await;
        board.publish(seen(4), true).await;
        assert_eq!(store.0.load(Ordering::SeqCst), 3, "with a rollout every period writes it");
    }
}
