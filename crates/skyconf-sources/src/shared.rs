//! skyconf's own records, kept in the store beside the configuration so that several replicas
//! share them: the fleet summaries each replica publishes, the release history. A store that can
//! hold them hands out a [`SharedRecords`] through [`Source::shared_records`](crate::Source::shared_records);
//! the file store does not (it serves one replica).
//!
//! Records are grouped by a `kind` (`fleet`, `releases`, ...) and named within it; a value is
//! bytes (skyconf writes JSON). They never reach a source's [`Update`](crate::Update)s nor its
//! `load()`: they are not configuration keys.
//!
//! Where each store keeps them (the namespace being the configuration's):
//!
//! | store | record `kind`/`name` | session records |
//! |---|---|---|
//! | etcd | key `{namespace}/skyconf/{kind}/{name}` (the configuration watch skips `skyconf/`) | attached to a lease (TTL 15 s) the source keeps alive |
//! | ZooKeeper | znode `{namespace}/skyconf/{kind}/{name}` (`skyconf` is not a key) | ephemeral znodes of the source's session |
//! | Nacos | dataId `{kind}.{name}` in group `{group}.skyconf`, same namespace | an `expires_ms` in the record, renewed by the source; `list` drops expired ones |
//!
//! The name `skyconf` under the namespace is therefore reserved: it is not a configuration key in
//! any store (OAP keys are `module.provider.item`).

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::{SourceError, StoreFuture};

/// The sub-path (etcd, ZooKeeper) or group suffix (Nacos) under which records live.
pub const RECORDS_NODE: &str = "skyconf";

/// How long a record lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifetime {
    /// Until deleted.
    Durable,
    /// Until deleted, or until this process stops or loses the store for longer than the store's
    /// session lifetime (etcd: the lease TTL; ZooKeeper: the session timeout; Nacos: the record's
    /// expiry). While the process runs and reaches the store, the source keeps it alive and writes
    /// it again if the store lost it (a new lease, a new ZooKeeper session).
    Session,
}

/// skyconf's records in a shared store. Object safe: `Arc<dyn SharedRecords>`.
///
/// Every operation fails with the store's usual [`SourceError`]s (unavailable, refused), and with
/// [`SourceError::Unsupported`] for a kind or name [`check_name`] refuses.
pub trait SharedRecords: Send + Sync + fmt::Debug + 'static {
    /// Names the store and where the records are, for logs.
    fn describe(&self) -> String;

    /// Whether [`SharedRecords::create`] is atomic across processes (true for etcd and ZooKeeper;
    /// Nacos' open API has no compare-and-set, so there it is only atomic within one process).
    fn create_is_atomic(&self) -> bool {
        true
    }

    /// Creates a durable record only if none of that name exists: `true` when this call created it,
    /// `false` when it already existed (nothing written). Atomic where
    /// [`SharedRecords::create_is_atomic`] says so: of concurrent creates, exactly one returns true.
    fn create<'a>(&'a self, kind: &'a str, name: &'a str, value: &'a [u8]) -> StoreFuture<'a, bool>;

    /// Writes a record, replacing any of that name (last writer wins), with `lifetime`.
    fn put<'a>(&'a self, kind: &'a str, name: &'a str, value: &'a [u8], lifetime: Lifetime) -> StoreFuture<'a, ()>;

    /// One record's value; `None` when there is none (or, on Nacos, it has expired).
    fn get<'a>(&'a self, kind: &'a str, name: &'a str) -> StoreFuture<'a, Option<Vec<u8>>>;

    /// Every live record of `kind`, sorted by name. Read in one request where the store allows
    /// (etcd: one range read, a consistent snapshot); ZooKeeper and Nacos read record by record, so
    /// a record written during the listing may or may not be in it.
    fn list<'a>(&'a self, kind: &'a str) -> StoreFuture<'a, Listed>;

    /// The names of every live record of `kind`, sorted, without their values: cheaper than
    /// [`SharedRecords::list`] where the store can list names alone (etcd, ZooKeeper).
    fn names<'a>(&'a self, kind: &'a str) -> StoreFuture<'a, Vec<String>> {
        Box::pin(async move { Ok(self.list(kind).await?.into_iter().map(|(name, _)| name).collect()) })
    }

    /// Deletes a record; deleting an absent one succeeds. A session record deleted is also no longer
    /// kept alive.
    fn delete<'a>(&'a self, kind: &'a str, name: &'a str) -> StoreFuture<'a, ()>;
}

/// Records as [`SharedRecords::list`] returns them: `(name, value)`, sorted by name.
pub type Listed = Vec<(String, Vec<u8>)>;

/// A shared handle to a store's records.
pub type Records = Arc<dyn SharedRecords>;

/// Refuses a kind or name that cannot be a path segment and a Nacos dataId in every store: a kind
/// is 1–64 of `a-z 0-9 -`, a name 1–200 of `A-Z a-z 0-9 - _ .`, not `.` or `..`.
pub fn check_name(kind: &str, name: &str) -> Result<(), SourceError> {
    let kind_ok = !kind.is_empty()
        && kind.len() <= 64
        && kind.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !kind_ok {
        return Err(SourceError::Unsupported(format!("`{kind}` cannot be a record kind: 1 to 64 of a-z, 0-9 and `-`")));
    }
    let name_ok = !name.is_empty()
        && name.len() <= 200
        && name != "."
        && name != ".."
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !name_ok {
        return Err(SourceError::Unsupported(format!(
            "`{name}` cannot be a record name: 1 to 200 of A-Z, a-z, 0-9, `-`, `_` and `.`, not `.` or `..`"
        )));
    }
    Ok(())
}

/// Runs `renew` every `interval` until `stop` is cancelled, also in the middle of a renewal: how
/// each store keeps its session records alive.
#[cfg_attr(not(any(feature = "etcd", feature = "zookeeper", feature = "nacos")), allow(dead_code))]
pub(crate) async fn renew_until_stopped<F: Future<Output = ()>>(
    stop: &CancellationToken,
    interval: std::time::Duration,
    mut renew: impl FnMut() -> F,
) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = renew() => {}
        }
    }
}

/// Milliseconds since the Unix epoch, by the system clock.
#[cfg_attr(not(feature = "nacos"), allow(dead_code))]
pub(crate) fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_path_segments_and_data_ids() {
        assert!(check_name("fleet", "replica-1.a_b").is_ok());
        assert!(check_name("releases", "000042").is_ok());
        for (kind, name) in [
            ("", "a"),
            ("Fleet", "a"),
            ("a/b", "a"),
            ("fleet", ""),
            ("fleet", ".."),
            ("fleet", "a/b"),
            ("fleet", "a b"),
        ] {
            assert!(matches!(check_name(kind, name), Err(SourceError::Unsupported(_))), "{kind:?} {name:?}");
        }
    }
}
