//! The DCS store: skyconf as a client of a SkyWalking dynamic configuration service
//! (`/ConfigurationService/call` and `callGroup`), the `grpc` selector of the OAP's configuration
//! module. The server may be any DCS implementation, including another skyconf.
//!
//! The protocol can only be polled, so this is the one store skyconf polls (every `period`,
//! 20 s by default as in the OAP's application.yml). It follows the OAP's client (behaviour
//! reference §1.2) exactly:
//! - two remembered uuids, one for `call` and one for `callGroup`; a response whose uuid equals
//!   the remembered one is "no change" (an empty uuid included, once remembered);
//! - a changed response updates only the names it carries; an empty value is a value (`""`), never
//!   a delete, because proto3 strings cannot be null;
//! - a group present in a response replaces that group (missing sub-items are deleted); a group
//!   absent from it is left alone;
//! - on an error nothing changes and the uuid is kept, so the next round asks again (one
//!   [`Update::Failed`] per outage, through [`supervise()`]).
//!
//! Unlike the OAP, which drops names it has no watcher for, skyconf keeps every name: it carries
//! the whole store for its own DCS server and admin API.

mod settings;

use std::collections::BTreeMap;
use std::time::Duration;

use skyconf_proto::dcs::ConfigurationRequest;
use skyconf_proto::dcs::configuration_service_client::ConfigurationServiceClient;
use tokio::sync::{Mutex, mpsc};
use tokio_util::sync::CancellationToken;
use tonic::transport::{Channel, Endpoint};

pub use self::settings::DcsSettings;
use crate::{
    Backoff, Expect, KeySet, Reporter, Revision, Session, SessionEnd, SettingsError, Source, SourceError,
    StoreConfig as _, StoreContent, Update, supervise,
};

/// What a DCS client remembers between rounds.
#[derive(Debug, Default)]
struct Remembered {
    uuid: Option<String>,
    group_uuid: Option<String>,
}

/// A DCS server polled as a store.
#[derive(Debug)]
pub struct DcsSource {
    settings: DcsSettings,
    channel: Channel,
    remembered: Mutex<Remembered>,
}

impl DcsSource {
    /// A client for the server in `settings`; the connection is made lazily.
    pub fn new(settings: DcsSettings) -> Result<Self, SettingsError> {
        // The OAP's own messages.
        if settings.host.is_empty() {
            return Err(DcsSettings::invalid("No host setting."));
        }
        if settings.port == 0 {
            return Err(DcsSettings::invalid("No port setting."));
        }
        let endpoint = Endpoint::from_shared(format!("http://{}:{}", settings.host, settings.port))
            .map_err(|e| DcsSettings::invalid(e.to_string()))?
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(30));
        Ok(Self { channel: endpoint.connect_lazy(), settings, remembered: Mutex::new(Remembered::default()) })
    }

    fn client(&self) -> ConfigurationServiceClient<Channel> {
        ConfigurationServiceClient::new(self.channel.clone())
            .max_decoding_message_size(self.settings.max_inbound_message_size)
    }

    fn unavailable(&self, status: &tonic::Status) -> SourceError {
        SourceError::Unavailable {
            store: self.describe(),
            message: format!("{:?}: {}", status.code(), status.message()),
        }
    }

    fn request(&self, uuid: Option<&String>) -> ConfigurationRequest {
        ConfigurationRequest {
            cluster_name: self.settings.cluster_name.clone(),
            uuid: uuid.cloned().unwrap_or_default(),
        }
    }

    /// One sync round as the OAP runs it: `call`, then `callGroup`. Returns the updates of the
    /// changed responses; on an error nothing is returned and the uuids stay.
    pub async fn round(&self) -> Result<Vec<Update>, SourceError> {
        let mut remembered = self.remembered.lock().await;
        let mut client = self.client();
        let mut updates = Vec::new();
        let single = client.call(self.request(remembered.uuid.as_ref())).await.map_err(|s| self.unavailable(&s))?;
        let single = single.into_inner();
        if remembered.uuid.as_deref() != Some(single.uuid.as_str()) {
            updates.extend(single.config_table.into_iter().map(|c| Update::single(c.name, Some(c.value))));
            remembered.uuid = Some(single.uuid);
        }
        // An error in the single step skips the group step for this round, as in the OAP.
        let group = client
            .call_group(self.request(remembered.group_uuid.as_ref()))
            .await
            .map_err(|s| self.unavailable(&s))?
            .into_inner();
        if remembered.group_uuid.as_deref() != Some(group.uuid.as_str()) {
            updates.extend(group.group_config_table.into_iter().map(|g| Update::Group {
                key: g.group_name,
                items: Some(g.items.into_iter().map(|c| (c.name, c.value)).collect::<BTreeMap<_, _>>()),
            }));
            remembered.group_uuid = Some(group.uuid);
        }
        Ok(updates)
    }
}

impl Source for DcsSource {
    fn describe(&self) -> String {
        format!("dcs {}:{} (cluster {})", self.settings.host, self.settings.port, self.settings.cluster_name)
    }

    async fn load(&self, _keys: &KeySet) -> Result<StoreContent, SourceError> {
        // A fresh client's view: everything, without touching the remembered uuids.
        let mut client = self.client();
        let single = client.call(self.request(None)).await.map_err(|s| self.unavailable(&s))?.into_inner();
        let group = client.call_group(self.request(None)).await.map_err(|s| self.unavailable(&s))?.into_inner();
        Ok(StoreContent {
            singles: single.config_table.into_iter().map(|c| (c.name, c.value)).collect(),
            groups: group
                .group_config_table
                .into_iter()
                .map(|g| (g.group_name, g.items.into_iter().map(|c| (c.name, c.value)).collect()))
                .collect(),
            revisions: Default::default(),
        })
    }

    async fn run(&self, keys: KeySet, updates: mpsc::Sender<Update>, shutdown: CancellationToken) {
        // The session never ends on a failure, so the back-off is never waited.
        supervise(self, &keys, updates, Backoff::default(), shutdown).await;
    }

    async fn put(&self, _key: &str, _value: Option<&str>, _expect: Expect) -> Result<Option<Revision>, SourceError> {
        Err(SourceError::Unsupported("a DCS server is read-only; change the configuration at its source".into()))
    }
}

/// Polls, as the OAP does: a round every `period`, whether the last one failed or not. A failed
/// round is an outage that the next good round ends.
impl Session for DcsSource {
    async fn run_once(&self, _keys: &KeySet, reporter: &mut Reporter<'_>) -> SessionEnd {
        let period = Duration::from_secs(self.settings.period.max(1));
        loop {
            let sent = match self.round().await {
                Ok(batch) => {
                    reporter.established();
                    reporter.send_all(batch).await
                }
                Err(error) => reporter.outage(error).await,
            };
            if let Err(gone) = sent {
                return gone.into();
            }
            tokio::time::sleep(period).await;
        }
    }
}
