//! skyconf's shared records in etcd (see [`crate::shared`]): record `kind`/`name` is the key
//! `{namespace}/skyconf/{kind}/{name}`, which the configuration layout skips, so records never
//! reach the watch's updates.
//!
//! - `create` is one `Txn` that puts the key only if it does not exist (`version == 0`, which is
//!   `create_revision == 0`): atomic across replicas.
//! - A **session** record is attached to one lease per source (TTL 15 s by default). A task owned
//!   by the source renews the lease every third of its TTL. When a renewal finds the lease gone
//!   (the store was out of reach for longer than the TTL), the task grants a new lease and writes
//!   every session record again. When the source is dropped, the task revokes the lease, so its
//!   records go at once; a process that dies leaves them to expire with the TTL.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use super::client::{Connection, Connector, EtcdError};
use super::layout::prefix_end;
use crate::shared::{Lifetime, Listed, RECORDS_NODE, SharedRecords, check_name};
use crate::{SourceError, StoreFuture};

/// The session lease's TTL unless set otherwise.
pub(crate) const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(15);

/// The records of one etcd namespace. Dropping the last handle stops the lease's keeper, which
/// revokes the lease.
#[derive(Debug)]
pub(crate) struct EtcdRecords {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    connector: Connector,
    /// `{namespace}/skyconf/`.
    base: String,
    store: String,
    ttl: Duration,
    connection: Mutex<Option<Connection>>,
    session: Mutex<Leased>,
    keeper_started: AtomicBool,
    stop: CancellationToken,
}

/// The lease and what is attached to it.
#[derive(Debug, Default)]
struct Leased {
    lease: Option<i64>,
    /// Key → value of every session record this source wrote and has not deleted.
    records: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl Drop for EtcdRecords {
    fn drop(&mut self) {
        self.inner.stop.cancel();
    }
}

impl EtcdRecords {
    /// Every record of `kind` as `(name, value)` in one range read (values left empty with
    /// `keys_only`), in byte order, which is name order for the names allowed.
    async fn range(&self, kind: &str, keys_only: bool) -> Result<Listed, SourceError> {
        check_name(kind, "x")?;
        let prefix = format!("{}{kind}/", self.inner.base).into_bytes();
        let (start, end) = (prefix.clone(), prefix_end(&prefix));
        let response = if keys_only {
            self.inner.with(|c| async move { c.range_keys(start, end).await }).await?
        } else {
            self.inner.with(|c| async move { c.range(start, end).await }).await?
        };
        Ok(response
            .kvs
            .into_iter()
            .filter_map(|kv| {
                let name = std::str::from_utf8(kv.key.strip_prefix(prefix.as_slice())?).ok()?;
                (!name.contains('/')).then(|| (name.to_owned(), kv.value))
            })
            .collect())
    }

    /// Records under namespace `prefix` (with its trailing `/`, or empty), session records on a
    /// lease of `ttl` (whole seconds, at least one).
    pub(crate) fn new(connector: Connector, prefix: &str, store: String, ttl: Duration) -> Self {
        Self {
            inner: Arc::new(Inner {
                connector,
                base: format!("{prefix}{RECORDS_NODE}/"),
                store,
                ttl: ttl.max(Duration::from_secs(1)),
                connection: Mutex::new(None),
                session: Mutex::new(Leased::default()),
                keeper_started: AtomicBool::new(false),
                stop: CancellationToken::new(),
            }),
        }
    }
}

impl Inner {
    fn key(&self, kind: &str, name: &str) -> Vec<u8> {
        format!("{}{kind}/{name}", self.base).into_bytes()
    }

    fn error(&self, error: &EtcdError) -> SourceError {
        let (store, message) = (self.store.clone(), error.to_string());
        if error.is_refusal() {
            SourceError::Refused { store, message }
        } else {
            SourceError::Unavailable { store, message }
        }
    }

    /// Runs `call` on the shared connection (made if needed); a failed call drops the connection
    /// so the next one reconnects.
    async fn with<T, F>(&self, call: impl FnOnce(Connection) -> F) -> Result<T, SourceError>
    where
        F: Future<Output = Result<T, EtcdError>>,
    {
        let connection = {
            let mut slot = self.connection.lock().await;
            match slot.as_ref() {
                Some(connection) => connection.clone(),
                None => {
                    let connection = self.connector.connect().await.map_err(|e| self.error(&e))?;
                    *slot = Some(connection.clone());
                    connection
                }
            }
        };
        match call(connection).await {
            Ok(value) => Ok(value),
            Err(error) => {
                *self.connection.lock().await = None;
                Err(self.error(&error))
            }
        }
    }

    /// Grants a fresh lease and writes every session record on it again; the lease is kept only
    /// when every record was written.
    async fn regrant(&self, leased: &mut Leased) -> Result<i64, SourceError> {
        let ttl = i64::try_from(self.ttl.as_secs()).unwrap_or(i64::MAX);
        leased.lease = None;
        let (id, granted) = self.with(|c| async move { c.lease_grant(ttl).await }).await?;
        for (key, value) in &leased.records {
            let (key, value) = (key.clone(), value.clone());
            // On failure the lease is left to expire; the keeper grants another.
            self.with(|c| async move { c.put(key, value, id).await }).await?;
        }
        leased.lease = Some(id);
        tracing::debug!(store = %self.store, lease = id, ttl = granted, records = leased.records.len(), "Granted a lease for skyconf's session records.");
        Ok(id)
    }

    /// One renewal of the lease; a lost lease is granted again with its records.
    async fn renew(&self) {
        let mut leased = self.session.lock().await;
        let Some(id) = leased.lease else {
            // A grant that failed earlier: try again while there are records to carry.
            if !leased.records.is_empty()
                && let Err(error) = self.regrant(&mut leased).await
            {
                if error.is_outage() {
                    tracing::debug!(store = %self.store, %error, "Cannot grant a lease for the session records; retrying.");
                } else {
                    tracing::warn!(store = %self.store, %error, "Cannot grant a lease for the session records; retrying.");
                }
            }
            return;
        };
        match self.with(|c| async move { c.lease_keep_alive(id).await }).await {
            Ok(ttl) if ttl > 0 => {}
            Ok(_) => {
                tracing::info!(store = %self.store, lease = id, records = leased.records.len(), "The session lease expired; granting a new one and writing the session records again.");
                if let Err(error) = self.regrant(&mut leased).await {
                    tracing::warn!(store = %self.store, %error, "Cannot restore the session records; retrying.");
                }
            }
            Err(error) => {
                tracing::warn!(store = %self.store, lease = id, %error, "Cannot renew the session lease; retrying.");
            }
        }
    }

    /// Renews the lease until stopped, then revokes it.
    async fn keep(self: Arc<Self>) {
        let interval = self.ttl / 3;
        crate::shared::renew_until_stopped(&self.stop, interval, || self.renew()).await;
        let lease = self.session.lock().await.lease.take();
        if let Some(id) = lease {
            match self.with(|c| async move { c.lease_revoke(id).await }).await {
                Ok(()) => tracing::debug!(store = %self.store, lease = id, "Revoked the session lease."),
                Err(error) => {
                    tracing::debug!(store = %self.store, lease = id, %error, "Cannot revoke the session lease; it expires with its TTL.");
                }
            }
        }
    }

    async fn put_session(self: &Arc<Self>, key: Vec<u8>, value: Vec<u8>) -> Result<(), SourceError> {
        if !self.keeper_started.swap(true, Ordering::AcqRel) {
            tokio::spawn(Arc::clone(self).keep());
        }
        let mut leased = self.session.lock().await;
        leased.records.insert(key.clone(), value.clone());
        let Some(id) = leased.lease else { return self.regrant(&mut leased).await.map(drop) };
        let (k, v) = (key.clone(), value.clone());
        match self.with(|c| async move { c.put(k, v, id).await }).await {
            Ok(()) => Ok(()),
            // The lease expired before the keeper noticed: a new one carries every record.
            Err(error) if error.to_string().contains("lease not found") => self.regrant(&mut leased).await.map(drop),
            Err(error) => Err(error),
        }
    }
}

impl SharedRecords for EtcdRecords {
    fn describe(&self) -> String {
        format!("{} records under {}", self.inner.store, self.inner.base)
    }

    fn create<'a>(&'a self, kind: &'a str, name: &'a str, value: &'a [u8]) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            check_name(kind, name)?;
            let key = self.inner.key(kind, name);
            let value = value.to_vec();
            let swap = self.inner.with(|c| async move { c.swap(key, 0, Some(value)).await }).await?;
            Ok(matches!(swap, super::client::Swap::Written { .. }))
        })
    }

    fn put<'a>(&'a self, kind: &'a str, name: &'a str, value: &'a [u8], lifetime: Lifetime) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            check_name(kind, name)?;
            let key = self.inner.key(kind, name);
            match lifetime {
                Lifetime::Session => self.inner.put_session(key, value.to_vec()).await,
                Lifetime::Durable => {
                    let mut leased = self.inner.session.lock().await;
                    leased.records.remove(&key);
                    let value = value.to_vec();
                    self.inner.with(|c| async move { c.put(key, value, 0).await }).await
                }
            }
        })
    }

    fn get<'a>(&'a self, kind: &'a str, name: &'a str) -> StoreFuture<'a, Option<Vec<u8>>> {
        Box::pin(async move {
            check_name(kind, name)?;
            let key = self.inner.key(kind, name);
            let response = self.inner.with(|c| async move { c.range(key, Vec::new()).await }).await?;
            Ok(response.kvs.into_iter().next().map(|kv| kv.value))
        })
    }

    fn list<'a>(&'a self, kind: &'a str) -> StoreFuture<'a, Listed> {
        Box::pin(self.range(kind, false))
    }

    fn names<'a>(&'a self, kind: &'a str) -> StoreFuture<'a, Vec<String>> {
        Box::pin(async move { Ok(self.range(kind, true).await?.into_iter().map(|(name, _)| name).collect()) })
    }

    fn delete<'a>(&'a self, kind: &'a str, name: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            check_name(kind, name)?;
            let key = self.inner.key(kind, name);
            let mut leased = self.inner.session.lock().await;
            leased.records.remove(&key);
            self.inner.with(|c| async move { c.delete(key).await }).await
        })
    }
}
