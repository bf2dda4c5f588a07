//! The Nacos store, over Nacos' HTTP open API (the `client` module speaks the protocol).
//!
//! Key mapping, exactly as the OAP's Nacos register:
//! - a SINGLE key is the config with dataId `{key}` in the configured `group`, in the namespace
//!   (Nacos' `tenant`) `namespace`;
//! - a GROUP key is an *index*: the config with dataId `{key}` lists sub-item dataIds, one per line
//!   (`\n` or `\r\n`, trimmed, blank lines skipped), and each sub-item's value is the config with
//!   that dataId in the same group. Sub-item dataIds are not prefixed by the key. A group whose
//!   index is absent is reported as present and empty, as the OAP reads it (which deletes every
//!   sub-item a watcher held).
//!
//! Nacos cannot list keys, so the source watches a [`KeySet`]: the OAP's keys plus extras.
//!
//! Watching is push, not polling: one long-polling listener request names every watched config
//! (the keys, the group indexes and every sub-item an index lists) with the MD5 of the content we
//! hold, and the server answers as soon as any of them differs. The MD5s make the watch race-free:
//! a change made after a read and before the listener request is registered is reported at once,
//! because what the server holds no longer matches what the request says we hold. When an index
//! changes, the next listener request names its new sub-items. A slow full re-read every `period`
//! seconds is the safety net.
//!
//! An outage (the server cannot be reached or answers with an error) is reported once as
//! [`Update::Failed`]; the source retries with backoff and jitter and sends a fresh
//! [`Update::Snapshot`] once a full read succeeds again.
//!
//! skyconf's own records ([`Source::shared_records`]) are configs of the group `{group}.skyconf`,
//! which the watch never names; see the `records` module for what Nacos can and cannot promise
//! of them (session records expire by a timestamp; `create` is atomic within one process only).

mod client;
mod layout;
mod records;
mod settings;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use self::client::{Auth, Client, Listened};
use self::layout::{Held, is_valid_name};
use self::records::{DEFAULT_SESSION_TTL, NacosRecords};
pub use self::settings::NacosSettings;
use crate::{
    Backoff, Expect, KeySet, Limits, Reporter, Revision, Session, SessionEnd, SettingsError, Source, SourceError,
    StoreConfig as _, StoreContent, Update, supervise,
};

/// How long the server may hold a listener request before answering "no change".
const LONG_POLL: Duration = Duration::from_secs(30);

/// A Nacos store: one group in one namespace.
#[derive(Debug, Clone)]
pub struct NacosSource {
    settings: NacosSettings,
    client: Arc<Client>,
    describe: String,
    backoff: Backoff,
    /// skyconf's own records, in a group of their own.
    records: Arc<NacosRecords>,
    /// The MD5 of each config as this source last read or wrote it (`None`: absent), for the
    /// compare of a write.
    seen: Arc<Mutex<HashMap<String, Option<String>>>>,
}

impl NacosSource {
    /// A store with `settings`, checked as the OAP checks them.
    pub fn new(settings: NacosSettings) -> Result<Self, SettingsError> {
        Self::with_limits(settings, &Limits::default())
    }

    /// A store with `settings` and a size limit for values.
    pub fn with_limits(settings: NacosSettings, limits: &Limits) -> Result<Self, SettingsError> {
        let bases = settings.bases();
        if bases.is_empty() {
            return Err(NacosSettings::invalid("serverAddr cannot be empty"));
        }
        if let Some(bad) = bases.iter().find(|b| !b.starts_with("http://") && !b.starts_with("https://")) {
            return Err(NacosSettings::invalid(format!(
                "serverAddr `{bad}` must be host[:port], http://host[:port] or https://host[:port]"
            )));
        }
        if settings.group.is_empty() {
            return Err(NacosSettings::invalid("group cannot be empty"));
        }
        for (what, value) in [("group", &settings.group), ("namespace", &settings.namespace)] {
            if !value.is_empty() && !is_valid_name(value) {
                return Err(NacosSettings::invalid(format!(
                    "{what} `{value}` may only hold letters, digits, `_`, `-`, `.` and `:`"
                )));
            }
        }
        if !settings.username.is_empty() && !settings.access_key.is_empty() {
            // The OAP's own message.
            return Err(NacosSettings::invalid(
                "Nacos Auth method should choose either username or accessKey, not both",
            ));
        }
        let namespace = if settings.namespace.is_empty() { "public" } else { &settings.namespace };
        let describe = format!("nacos {} group {} namespace {namespace}", bases.join(","), settings.group);
        let client = Client::new(
            bases,
            settings.group.clone(),
            settings.namespace.clone(),
            auth(&settings),
            describe.clone(),
            limits.max_value_bytes,
        )
        .map_err(|e| NacosSettings::invalid(format!("cannot set up the client: {e}")))?;
        let records = records_for(&settings, &describe, DEFAULT_SESSION_TTL)?;
        Ok(Self {
            settings,
            client: Arc::new(client),
            describe,
            backoff: Backoff::default(),
            records,
            seen: Arc::default(),
        })
    }

    /// Sets how long a session record lives without renewal (30 s by default); the source renews
    /// its own every third of that.
    pub fn with_session_ttl(mut self, ttl: Duration) -> Self {
        if let Ok(records) = records_for(&self.settings, &self.describe, ttl) {
            self.records = records;
        }
        self
    }

    /// Sets the back-off between sessions.
    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// The settings.
    pub fn settings(&self) -> &NacosSettings {
        &self.settings
    }

    /// Reads one config, remembering its MD5 for the next write's compare.
    async fn read(&self, data_id: &str) -> Result<Option<String>, SourceError> {
        let value = self.client.get(data_id).await?;
        self.learn(data_id, value.as_deref());
        Ok(value)
    }

    fn learn(&self, data_id: &str, value: Option<&str>) {
        let md5 = value.map(client::content_md5);
        self.seen.lock().unwrap_or_else(PoisonError::into_inner).insert(data_id.to_owned(), md5);
    }

    /// Reads every watched config: the keys, the group indexes and the sub-items they list.
    async fn read_all(&self, keys: &KeySet) -> Result<Held, SourceError> {
        let mut held = Held::default();
        for data_id in keys.singles.iter().chain(&keys.groups) {
            if !held.configs.contains_key(data_id) {
                let value = self.read(data_id).await?;
                held.insert(data_id.clone(), value);
            }
        }
        self.read_sub_items(keys, &mut held).await?;
        Ok(held)
    }

    /// Reads the sub-items the indexes list that are not held yet, and forgets configs nothing
    /// refers to any more.
    async fn read_sub_items(&self, keys: &KeySet, held: &mut Held) -> Result<(), SourceError> {
        let wanted = held.watched(keys);
        for data_id in &wanted {
            if !held.configs.contains_key(data_id) {
                let value = self.read(data_id).await?;
                held.insert(data_id.clone(), value);
            }
        }
        held.configs.retain(|data_id, _| wanted.contains(data_id));
        Ok(())
    }

    /// Re-reads the configs the listener reported changed, then any sub-items new to an index.
    async fn refresh(&self, keys: &KeySet, held: &mut Held, changed: &[String]) -> Result<(), SourceError> {
        for data_id in changed {
            if held.configs.contains_key(data_id) {
                let value = self.read(data_id).await?;
                held.insert(data_id.clone(), value);
            }
        }
        self.read_sub_items(keys, held).await
    }

    /// Watches until the store fails or the receiver is gone.
    async fn watch(&self, keys: &KeySet, held: &mut Held, reporter: &Reporter<'_>) -> SessionEnd {
        let period = self.settings.safety_net();
        let mut safety_net = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        safety_net.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let before = held.content(keys);
            let listened = held.listened();
            let outcome = tokio::select! {
                _ = safety_net.tick() => self.read_all(keys).await.map(|fresh| *held = fresh),
                changed = listen(&self.client, &listened) => match changed {
                    Ok(changed) if changed.is_empty() => Ok(()),
                    Ok(changed) => {
                        tracing::debug!(store = %self.describe, changed = ?changed, "The store reported changes.");
                        self.refresh(keys, held, &changed).await
                    }
                    Err(error) => Err(error),
                },
            };
            if let Err(error) = outcome {
                return SessionEnd::Failed(error);
            }
            if let Err(gone) = reporter.send_all(crate::changes(&before, &held.content(keys))).await {
                return gone.into();
            }
        }
    }
}

/// How requests prove who they come from, by the settings.
fn auth(settings: &NacosSettings) -> Auth {
    if !settings.username.is_empty() {
        Auth::Password { username: settings.username.clone(), password: settings.password.clone() }
    } else if !settings.access_key.is_empty() {
        Auth::AccessKey { access_key: settings.access_key.clone(), secret_key: settings.secret_key.clone() }
    } else {
        Auth::None
    }
}

/// skyconf's records beside the configuration: the group `{group}.skyconf`, same namespace.
fn records_for(settings: &NacosSettings, describe: &str, ttl: Duration) -> Result<Arc<NacosRecords>, SettingsError> {
    let group = format!("{}.{}", settings.group, crate::shared::RECORDS_NODE);
    let client = Client::new(
        settings.bases(),
        group,
        settings.namespace.clone(),
        auth(settings),
        describe.to_owned(),
        Limits::default().max_value_bytes,
    )
    .map_err(|e| NacosSettings::invalid(format!("cannot set up the client: {e}")))?;
    Ok(Arc::new(NacosRecords::new(client, describe.to_owned(), ttl)))
}

/// Long-polls for `listened`, or waits forever when nothing is watched.
async fn listen(client: &Client, listened: &[(String, String)]) -> Result<Vec<String>, SourceError> {
    if listened.is_empty() {
        return std::future::pending().await;
    }
    let watched: Vec<Listened<'_>> = listened.iter().map(|(data_id, md5)| Listened { data_id, md5 }).collect();
    client.listen(&watched, LONG_POLL).await
}

impl Source for NacosSource {
    fn describe(&self) -> String {
        self.describe.clone()
    }

    async fn load(&self, keys: &KeySet) -> Result<StoreContent, SourceError> {
        Ok(self.read_all(keys).await?.content(keys))
    }

    async fn run(&self, keys: KeySet, updates: mpsc::Sender<Update>, shutdown: CancellationToken) {
        supervise(self, &keys, updates, self.backoff.clone(), shutdown).await;
    }

    fn shared_records(&self) -> Option<Arc<dyn crate::SharedRecords>> {
        Some(Arc::clone(&self.records) as Arc<dyn crate::SharedRecords>)
    }

    async fn put(&self, key: &str, value: Option<&str>, expect: Expect) -> Result<Option<Revision>, SourceError> {
        crate::only_seen(&self.describe, expect)?;
        if !is_valid_name(key) {
            return Err(SourceError::Unsupported(format!(
                "`{key}` cannot be a Nacos dataId (letters, digits, `_`, `-`, `.` and `:` only)"
            )));
        }
        if value == Some("") {
            return Err(SourceError::Unsupported(format!("Nacos cannot hold an empty value; delete {key} instead")));
        }
        // The compare: the config must still hold what this source last saw. Nacos' open API has
        // no conditional delete, and its `casMd5` is honoured by some servers only, so the
        // source checks first; where the server honours `casMd5` the publish itself is atomic.
        // A config found absent is written: Nacos cannot tell a deleted config from a server
        // that came back empty, and refusing would leave the second unwritable.
        let expected = self.seen.lock().unwrap_or_else(PoisonError::into_inner).get(key).cloned();
        if let Some(expected) = &expected {
            let now = self.client.get(key).await?.map(|text| client::content_md5(&text));
            if now.is_some() && &now != expected {
                let was = |md5: &Option<String>| md5.as_deref().map_or("absent".to_owned(), |m| format!("at MD5 {m}"));
                return Err(SourceError::Conflict {
                    store: self.describe.clone(),
                    message: format!("config {key} was {} when last seen; it is now {}", was(expected), was(&now)),
                });
            }
        }
        match value {
            Some(text) => self.client.publish(key, text, expected.flatten().as_deref()).await?,
            None => self.client.remove(key).await?,
        }
        self.learn(key, value);
        Ok(None)
    }
}

impl Session for NacosSource {
    async fn run_once(&self, keys: &KeySet, reporter: &mut Reporter<'_>) -> SessionEnd {
        let mut held = match self.read_all(keys).await {
            Ok(held) => held,
            Err(error) => return SessionEnd::Failed(error),
        };
        reporter.established();
        // The listener compares MD5s with what this read got, so nothing changed since the read
        // can be missed: the snapshot may go out first.
        if let Err(gone) = reporter.send(Update::Snapshot(held.content(keys))).await {
            return gone.into();
        }
        self.watch(keys, &mut held, reporter).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_the_password_and_the_secret_key() {
        let settings =
            NacosSettings { password: "pw-s3cret".into(), secret_key: "sk-s3cret".into(), ..NacosSettings::default() };
        let printed = format!("{settings:?}");
        assert!(!printed.contains("s3cret") && printed.contains("<redacted>"), "{printed}");
        let auth = client::Auth::Password { username: "u".into(), password: "pw-s3cret".into() };
        assert!(!format!("{auth:?}").contains("s3cret"));
    }

    #[test]
    fn refuses_settings_the_oap_refuses() {
        let both = NacosSettings { username: "u".into(), access_key: "k".into(), ..NacosSettings::default() };
        let error = NacosSource::new(both).unwrap_err();
        assert_eq!(error.message, "Nacos Auth method should choose either username or accessKey, not both");
        let no_group = NacosSettings { group: String::new(), ..NacosSettings::default() };
        assert!(NacosSource::new(no_group).unwrap_err().message.contains("group cannot be empty"));
        let no_server = NacosSettings { server_addr: " , ".into(), ..NacosSettings::default() };
        assert!(NacosSource::new(no_server).unwrap_err().message.contains("serverAddr cannot be empty"));
        let bad_scheme = NacosSettings { server_addr: "ftp://x".into(), ..NacosSettings::default() };
        assert!(NacosSource::new(bad_scheme).unwrap_err().message.contains("serverAddr `ftp://x"));
        let bad_ns = NacosSettings { namespace: "a/b".into(), ..NacosSettings::default() };
        assert!(NacosSource::new(bad_ns).unwrap_err().message.starts_with("namespace `a/b`"));
        let source = NacosSource::new(NacosSettings::default()).unwrap();
        assert_eq!(source.describe(), "nacos http://127.0.0.1:8848/nacos group skywalking namespace public");
    }
}
