//! skyconf's shared records in Nacos (see [`crate::shared`]): record `kind`/`name` is the config
//! with dataId `{kind}.{name}` in the group `{group}.skyconf` of the configuration's namespace, a
//! group the configuration watch never names. Its content is a small JSON envelope:
//! `{"expires_ms": <ms since the epoch, or null>, "value": "<the record, UTF-8>"}` (or
//! `"value_base64"` for a record that is not UTF-8).
//!
//! Nacos' open API has neither leases, ephemeral configs nor a compare-and-set, so:
//!
//! - a **session** record carries an `expires_ms` (now + TTL, 30 s by default), which a task owned
//!   by the source pushes forward every third of the TTL; `get` and `list` treat an expired record
//!   as absent (and `list` deletes records expired for more than one TTL more). When the source is
//!   dropped the task deletes its session records; a process that dies leaves them to expire. The
//!   expiry is read against the reader's clock: replicas' clocks must agree within a few seconds.
//! - `create` reads, then publishes if the record is absent: atomic among the callers of one source
//!   (a lock serializes them), **not** across replicas ([`SharedRecords::create_is_atomic`] is
//!   false), where two racing creates can both report true and the last publish wins.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use base64::Engine as _;
use base64::prelude::BASE64_STANDARD;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use super::client::Client;
use crate::StoreFuture;
use crate::shared::{Lifetime, Listed, SharedRecords, check_name, unix_ms};

/// A session record's lifetime unless set otherwise.
pub(crate) const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(30);

/// The records of one Nacos group and namespace.
#[derive(Debug)]
pub(crate) struct NacosRecords {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    client: Client,
    store: String,
    ttl: Duration,
    /// Serializes writes, so creates within this process are atomic; and holds the session
    /// records this source keeps alive: dataId → value.
    session: Mutex<BTreeMap<String, Vec<u8>>>,
    keeper_started: AtomicBool,
    stop: CancellationToken,
}

impl Drop for NacosRecords {
    fn drop(&mut self) {
        self.inner.stop.cancel();
    }
}

/// A record as stored.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Envelope {
    expires_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    value_base64: Option<String>,
}

impl Envelope {
    fn encode(value: &[u8], expires_ms: Option<u64>) -> String {
        let envelope = match std::str::from_utf8(value) {
            Ok(text) => Self { expires_ms, value: Some(text.to_owned()), value_base64: None },
            Err(_) => Self { expires_ms, value: None, value_base64: Some(BASE64_STANDARD.encode(value)) },
        };
        serde_json::to_string(&envelope).unwrap_or_default()
    }

    /// The record's value, unless it expired before `now_ms` (or is not an envelope of ours).
    fn live(content: &str, now_ms: u64) -> Option<Vec<u8>> {
        let envelope: Self = serde_json::from_str(content).ok()?;
        if envelope.expires_ms.is_some_and(|at| at <= now_ms) {
            return None;
        }
        match (envelope.value, envelope.value_base64) {
            (Some(text), _) => Some(text.into_bytes()),
            (None, Some(encoded)) => BASE64_STANDARD.decode(encoded).ok(),
            (None, None) => None,
        }
    }

    /// Whether the record expired before `before_ms`.
    fn expired_before(content: &str, before_ms: u64) -> bool {
        serde_json::from_str::<Self>(content).is_ok_and(|e| e.expires_ms.is_some_and(|at| at < before_ms))
    }
}

impl NacosRecords {
    /// Records through `client` (set up for the records' group), session records living `ttl`.
    pub(crate) fn new(client: Client, store: String, ttl: Duration) -> Self {
        Self {
            inner: Arc::new(Inner {
                client,
                store,
                ttl: ttl.max(Duration::from_secs(1)),
                session: Mutex::new(BTreeMap::new()),
                keeper_started: AtomicBool::new(false),
                stop: CancellationToken::new(),
            }),
        }
    }
}

fn data_id(kind: &str, name: &str) -> String {
    format!("{kind}.{name}")
}

impl Inner {
    fn expiry(&self) -> u64 {
        unix_ms().saturating_add(u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX))
    }

    /// Pushes every session record's expiry forward.
    async fn renew(&self) {
        let session = self.session.lock().await;
        let expires = self.expiry();
        for (data_id, value) in session.iter() {
            if let Err(error) = self.client.publish(data_id, &Envelope::encode(value, Some(expires)), None).await {
                tracing::warn!(store = %self.store, data_id = %data_id, %error, "Cannot renew a session record; retrying.");
                return;
            }
        }
    }

    /// Renews until stopped, then deletes the session records.
    async fn keep(self: Arc<Self>) {
        let interval = self.ttl / 3;
        crate::shared::renew_until_stopped(&self.stop, interval, || self.renew()).await;
        let session = std::mem::take(&mut *self.session.lock().await);
        for data_id in session.keys() {
            if let Err(error) = self.client.remove(data_id).await {
                tracing::debug!(store = %self.store, data_id = %data_id, %error, "Cannot delete a session record; it expires on its own.");
            }
        }
    }
}

impl SharedRecords for NacosRecords {
    fn describe(&self) -> String {
        format!("{} records", self.inner.store)
    }

    fn create_is_atomic(&self) -> bool {
        false
    }

    fn create<'a>(&'a self, kind: &'a str, name: &'a str, value: &'a [u8]) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            check_name(kind, name)?;
            let id = data_id(kind, name);
            let mut session = self.inner.session.lock().await;
            let existing = self.inner.client.get(&id).await?;
            if existing.is_some_and(|content| Envelope::live(&content, unix_ms()).is_some()) {
                return Ok(false);
            }
            session.remove(&id);
            self.inner.client.publish(&id, &Envelope::encode(value, None), None).await?;
            Ok(true)
        })
    }

    fn put<'a>(&'a self, kind: &'a str, name: &'a str, value: &'a [u8], lifetime: Lifetime) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            check_name(kind, name)?;
            let inner = &self.inner;
            let id = data_id(kind, name);
            let mut session = inner.session.lock().await;
            let expires = match lifetime {
                Lifetime::Durable => {
                    session.remove(&id);
                    None
                }
                Lifetime::Session => {
                    if !inner.keeper_started.swap(true, Ordering::AcqRel) {
                        tokio::spawn(Arc::clone(inner).keep());
                    }
                    session.insert(id.clone(), value.to_vec());
                    Some(inner.expiry())
                }
            };
            inner.client.publish(&id, &Envelope::encode(value, expires), None).await
        })
    }

    fn get<'a>(&'a self, kind: &'a str, name: &'a str) -> StoreFuture<'a, Option<Vec<u8>>> {
        Box::pin(async move {
            check_name(kind, name)?;
            let content = self.inner.client.get(&data_id(kind, name)).await?;
            Ok(content.and_then(|content| Envelope::live(&content, unix_ms())))
        })
    }

    fn list<'a>(&'a self, kind: &'a str) -> StoreFuture<'a, Listed> {
        Box::pin(async move {
            check_name(kind, "x")?;
            let inner = &self.inner;
            let prefix = format!("{kind}.");
            let now = unix_ms();
            let stale_before = now.saturating_sub(u64::try_from(inner.ttl.as_millis()).unwrap_or(u64::MAX));
            let mut listed = Vec::new();
            for (id, content) in inner.client.list_group().await? {
                let Some(name) = id.strip_prefix(&prefix) else { continue };
                match Envelope::live(&content, now) {
                    Some(value) => listed.push((name.to_owned(), value)),
                    None if Envelope::expired_before(&content, stale_before) => {
                        // Left by a process that is gone: tidy up, best effort.
                        if let Err(error) = inner.client.remove(&id).await {
                            tracing::debug!(store = %inner.store, data_id = %id, %error, "Cannot delete an expired record.");
                        }
                    }
                    None => {}
                }
            }
            listed.sort_by(|a, b| a.0.cmp(&b.0));
            Ok(listed)
        })
    }

    fn delete<'a>(&'a self, kind: &'a str, name: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            check_name(kind, name)?;
            let id = data_id(kind, name);
            let mut session = self.inner.session.lock().await;
            session.remove(&id);
            self.inner.client.remove(&id).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_carry_text_or_bytes_and_expire() {
        let text = Envelope::encode(b"{\"a\":1}", Some(1000));
        assert_eq!(text, r#"{"expires_ms":1000,"value":"{\"a\":1}"}"#);
        assert_eq!(Envelope::live(&text, 999).as_deref(), Some(&b"{\"a\":1}"[..]));
        assert_eq!(Envelope::live(&text, 1000), None, "expired");
        assert!(Envelope::expired_before(&text, 1001) && !Envelope::expired_before(&text, 1000));
        let bytes = Envelope::encode(&[0xff, 0], None);
        assert_eq!(Envelope::live(&bytes, u64::MAX).as_deref(), Some(&[0xff, 0][..]), "durable: never expires");
        assert_eq!(Envelope::live("not ours", 0), None);
    }
}
