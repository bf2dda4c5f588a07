//! skyconf's shared records in ZooKeeper (see [`crate::shared`]): record `kind`/`name` is the
//! znode `{namespace}/skyconf/{kind}/{name}`. `skyconf` is not a key (the layout skips it), so
//! the namespace's watch never reports records.
//!
//! - `create` is ZooKeeper's `create`, which fails with `NodeExists` for all but one caller:
//!   atomic across replicas.
//! - A **session** record is an ephemeral znode of the records' own ZooKeeper session (one per
//!   source, beside the one that watches): ZooKeeper deletes it when the session closes (the source
//!   is dropped) or expires (the process died, or lost the ensemble for longer than the session
//!   timeout). A task owned by the source checks, every third of the session timeout, that the
//!   session is still the one the records were written in; after an expiry it opens a new session
//!   and writes every session record again.
//! - A put that changes a record's lifetime deletes and re-creates the znode (ZooKeeper cannot
//!   turn a persistent znode into an ephemeral one or back).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

use super::connect::{self, Connect, Failure, SessionSlot};
use crate::shared::{Lifetime, Listed, RECORDS_NODE, SharedRecords, check_name};
use crate::{SourceError, StoreFuture};

/// The records under one namespace, on their own session.
#[derive(Debug)]
pub(crate) struct ZkRecords {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The connect string and the session's timeouts: the source's.
    how: Connect,
    /// `{namespace}/skyconf`.
    base: String,
    store: String,
    client: SessionSlot,
    session: Mutex<Remembered>,
    keeper_started: AtomicBool,
    stop: CancellationToken,
}

/// The session records this source wrote and has not deleted, and the session they are in.
#[derive(Debug, Default)]
struct Remembered {
    session: Option<i64>,
    records: BTreeMap<String, Vec<u8>>,
}

impl Drop for ZkRecords {
    fn drop(&mut self) {
        self.inner.stop.cancel();
    }
}

impl ZkRecords {
    /// Records under the namespace znode `prefix` (without a trailing `/`; empty for the root).
    pub(super) fn new(how: Connect, prefix: &str, store: String) -> Self {
        Self {
            inner: Arc::new(Inner {
                how,
                base: format!("{prefix}/{RECORDS_NODE}"),
                store,
                client: SessionSlot::default(),
                session: Mutex::new(Remembered::default()),
                keeper_started: AtomicBool::new(false),
                stop: CancellationToken::new(),
            }),
        }
    }
}

/// Persistent znodes readable and writable by anyone, as the configuration's.
fn persistent() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

fn ephemeral() -> zk::CreateOptions<'static> {
    zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all())
}

impl Inner {
    fn path(&self, kind: &str, name: &str) -> String {
        format!("{}/{kind}/{name}", self.base)
    }

    fn error(&self, error: zk::Error) -> SourceError {
        Failure::Zk(error).into_error(self.store.clone())
    }

    /// Runs one request within the request timeout.
    async fn timed<T>(&self, request: impl Future<Output = Result<T, zk::Error>>) -> Result<T, SourceError> {
        connect::timed(self.how.request_timeout, request).await.map_err(|f| f.into_error(self.store.clone()))
    }

    /// Runs one request within the request timeout, keeping ZooKeeper's own error for the caller
    /// to look at; only a timeout is an error here.
    async fn raw<T>(
        &self,
        request: impl Future<Output = Result<T, zk::Error>>,
    ) -> Result<Result<T, zk::Error>, SourceError> {
        tokio::time::timeout(self.how.request_timeout, request)
            .await
            .map_err(|_| Failure::Timeout(self.how.request_timeout).into_error(self.store.clone()))
    }

    /// The records' session, opened if there is none or it has ended.
    async fn client(&self) -> Result<zk::Client, SourceError> {
        self.client
            .client(&self.how, &self.store, "skyconf's records")
            .await
            .map_err(|f| f.into_error(self.store.clone()))
    }

    /// Writes `value` at `path` as a znode of `lifetime`, creating its parents; an existing znode
    /// of the other lifetime (or an ephemeral one of another session) is replaced.
    async fn write(
        &self,
        client: &zk::Client,
        path: &str,
        value: &[u8],
        lifetime: Lifetime,
    ) -> Result<(), SourceError> {
        let parent = &path[..path.rfind('/').unwrap_or(0)];
        self.timed(client.mkdir(parent, &persistent())).await?;
        let options = match lifetime {
            Lifetime::Durable => persistent(),
            Lifetime::Session => ephemeral(),
        };
        let ours = match lifetime {
            Lifetime::Durable => 0,
            Lifetime::Session => client.session_id().0,
        };
        // A znode deleted or re-created by someone else meanwhile: try again, a few times.
        for _ in 0..4 {
            match self.raw(client.create(path, value, &options)).await? {
                Ok(_) => return Ok(()),
                Err(zk::Error::NodeExists) => {}
                Err(error) => return Err(self.error(error)),
            }
            match self.timed(client.check_stat(path)).await? {
                Some(stat) if stat.ephemeral_owner == ours => {
                    match self.raw(client.set_data(path, value, Some(stat.version))).await? {
                        Ok(_) => return Ok(()),
                        Err(zk::Error::BadVersion | zk::Error::NoNode) => {}
                        Err(error) => return Err(self.error(error)),
                    }
                }
                Some(stat) => match self.raw(client.delete(path, Some(stat.version))).await? {
                    Ok(()) | Err(zk::Error::BadVersion | zk::Error::NoNode) => {}
                    Err(error) => return Err(self.error(error)),
                },
                None => {}
            }
        }
        Err(SourceError::Conflict {
            store: self.store.clone(),
            message: format!("znode {path} kept changing under this write"),
        })
    }

    /// Writes every remembered session record in `client`'s session, unless they already are.
    async fn restore_in(&self, remembered: &mut Remembered, client: &zk::Client) -> Result<(), SourceError> {
        if remembered.session == Some(client.session_id().0) {
            return Ok(());
        }
        for (path, value) in &remembered.records {
            self.write(client, path, value, Lifetime::Session).await?;
        }
        remembered.session = Some(client.session_id().0);
        Ok(())
    }

    /// Writes the session records again if the session they were written in has ended.
    async fn restore(&self) {
        let mut remembered = self.session.lock().await;
        if remembered.records.is_empty() {
            return;
        }
        let restored = match self.client().await {
            Ok(client) => {
                let new = remembered.session != Some(client.session_id().0);
                self.restore_in(&mut remembered, &client).await.map(|()| new.then(|| client.session_id()))
            }
            Err(error) => Err(error),
        };
        match restored {
            Ok(Some(session)) => {
                tracing::info!(store = %self.store, %session, records = remembered.records.len(), "Wrote skyconf's session records again in a new ZooKeeper session.");
            }
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(store = %self.store, %error, "Cannot keep skyconf's session records in ZooKeeper; retrying.");
            }
        }
    }

    /// Keeps the session records until stopped; then closes the session, which deletes them.
    async fn keep(self: Arc<Self>) {
        let interval = (self.how.session_timeout / 3).max(Duration::from_millis(100));
        crate::shared::renew_until_stopped(&self.stop, interval, || self.restore()).await;
        // The last handle on the client: dropping it closes the session.
        self.client.close().await;
    }
}

impl SharedRecords for ZkRecords {
    fn describe(&self) -> String {
        format!("{} records under {}", self.inner.store, self.inner.base)
    }

    fn create<'a>(&'a self, kind: &'a str, name: &'a str, value: &'a [u8]) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            check_name(kind, name)?;
            let inner = &self.inner;
            let client = inner.client().await?;
            inner.timed(client.mkdir(&format!("{}/{kind}", inner.base), &persistent())).await?;
            match inner.raw(client.create(&inner.path(kind, name), value, &persistent())).await? {
                Ok(_) => Ok(true),
                Err(zk::Error::NodeExists) => Ok(false),
                Err(error) => Err(inner.error(error)),
            }
        })
    }

    fn put<'a>(&'a self, kind: &'a str, name: &'a str, value: &'a [u8], lifetime: Lifetime) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            check_name(kind, name)?;
            let inner = &self.inner;
            let path = inner.path(kind, name);
            let mut remembered = inner.session.lock().await;
            let client = inner.client().await?;
            match lifetime {
                Lifetime::Durable => {
                    remembered.records.remove(&path);
                    inner.write(&client, &path, value, lifetime).await
                }
                Lifetime::Session => {
                    if !inner.keeper_started.swap(true, Ordering::AcqRel) {
                        tokio::spawn(Arc::clone(inner).keep());
                    }
                    remembered.records.insert(path.clone(), value.to_vec());
                    if remembered.session == Some(client.session_id().0) {
                        inner.write(&client, &path, value, lifetime).await
                    } else {
                        // The first session record, or the others are in a session that ended.
                        inner.restore_in(&mut remembered, &client).await
                    }
                }
            }
        })
    }

    fn get<'a>(&'a self, kind: &'a str, name: &'a str) -> StoreFuture<'a, Option<Vec<u8>>> {
        Box::pin(async move {
            check_name(kind, name)?;
            let client = self.inner.client().await?;
            match self.inner.raw(client.get_data(&self.inner.path(kind, name))).await? {
                Ok((data, _)) => Ok(Some(data)),
                Err(zk::Error::NoNode) => Ok(None),
                Err(error) => Err(self.inner.error(error)),
            }
        })
    }

    fn names<'a>(&'a self, kind: &'a str) -> StoreFuture<'a, Vec<String>> {
        Box::pin(async move {
            check_name(kind, "x")?;
            let inner = &self.inner;
            let client = inner.client().await?;
            let parent = format!("{}/{kind}", inner.base);
            let mut names = match inner.raw(client.get_children(&parent)).await? {
                Ok((names, _)) => names,
                Err(zk::Error::NoNode) => return Ok(Vec::new()),
                Err(error) => return Err(inner.error(error)),
            };
            names.sort();
            Ok(names)
        })
    }

    fn list<'a>(&'a self, kind: &'a str) -> StoreFuture<'a, Listed> {
        Box::pin(async move {
            let names = self.names(kind).await?;
            let inner = &self.inner;
            let client = inner.client().await?;
            // Every read is sent before any answer is awaited.
            let reads: Vec<_> = names.iter().map(|name| client.get_data(&inner.path(kind, name))).collect();
            let mut listed = Vec::with_capacity(names.len());
            for (name, read) in names.into_iter().zip(reads) {
                match inner.raw(read).await? {
                    Ok((data, _)) => listed.push((name, data)),
                    // Deleted (or its session ended) since the listing.
                    Err(zk::Error::NoNode) => {}
                    Err(error) => return Err(inner.error(error)),
                }
            }
            Ok(listed)
        })
    }

    fn delete<'a>(&'a self, kind: &'a str, name: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            check_name(kind, name)?;
            let inner = &self.inner;
            let path = inner.path(kind, name);
            let mut remembered = inner.session.lock().await;
            remembered.records.remove(&path);
            let client = inner.client().await?;
            match inner.raw(client.delete(&path, None)).await? {
                Ok(()) | Err(zk::Error::NoNode) => Ok(()),
                Err(error) => Err(inner.error(error)),
            }
        })
    }
}
