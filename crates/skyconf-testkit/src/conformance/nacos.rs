//! The conformance backend of the Nacos store: a real rnacos, written through a second
//! `NacosSource` (Nacos' HTTP API is what both would use). A group key is an index config
//! listing its items, each item a config of its own (the OAP's layout).

use std::collections::BTreeSet;

use skyconf_sources::Source as _;
use skyconf_sources::nacos::NacosSource;
use skyconf_sources::{Expect, KeySet, SourceError};

use super::{Capabilities, StoreBackend};
use crate::servers::rnacos::Rnacos;

/// A real rnacos and a writer on it.
#[derive(Debug)]
pub struct NacosBackend {
    server: Rnacos,
    writer: NacosSource,
    /// The items of each group's index, as last written.
    indexes: std::collections::BTreeMap<String, BTreeSet<String>>,
}

const GROUP: &str = "skywalking";

impl NacosBackend {
    /// Starts an rnacos; `None` when it is not installed (and not required).
    pub async fn start() -> Option<Self> {
        let server = Rnacos::start("conformance").await?;
        let writer = NacosSource::new(server.settings(GROUP, "")).expect("valid settings");
        Some(Self { server, writer, indexes: Default::default() })
    }

    /// Writes behind the source's back, whatever the key holds now: the writer's own compare is
    /// satisfied by reading the key first when it has changed since the writer last saw it.
    async fn write(&self, key: &str, value: Option<&str>) {
        let written = match self.writer.put(key, value, Expect::Seen).await {
            Err(SourceError::Conflict { .. }) => {
                let keys = KeySet::oap_with([key.to_owned()]);
                self.writer.load(&keys).await.unwrap_or_else(|e| panic!("nacos read of {key}: {e}"));
                self.writer.put(key, value, Expect::Seen).await
            }
            other => other,
        };
        written.unwrap_or_else(|e| panic!("nacos write of {key}: {e}"));
    }

    async fn write_index(&self, group: &str) {
        let items = self.indexes.get(group).map(|i| i.iter().cloned().collect::<Vec<_>>().join("\n"));
        self.write(group, items.as_deref().filter(|i| !i.is_empty())).await;
    }
}

impl StoreBackend for NacosBackend {
    type Source = NacosSource;

    fn name(&self) -> &str {
        "nacos"
    }

    fn capabilities(&self) -> Capabilities {
        // The harness restarts rnacos empty and may start it more than once (see `Rnacos`).
        Capabilities { durable: false, flapping_restart: true, ..Capabilities::default() }
    }

    fn source(&self) -> NacosSource {
        NacosSource::new(self.server.settings(GROUP, "")).expect("valid settings")
    }

    async fn put(&mut self, key: &str, value: &str) {
        self.write(key, Some(value)).await;
    }

    async fn delete(&mut self, key: &str) {
        self.write(key, None).await;
    }

    async fn put_item(&mut self, group: &str, item: &str, value: &str) {
        self.write(item, Some(value)).await;
        if self.indexes.entry(group.to_owned()).or_default().insert(item.to_owned()) {
            self.write_index(group).await;
        }
    }

    async fn delete_item(&mut self, group: &str, item: &str) {
        self.indexes.entry(group.to_owned()).or_default().remove(item);
        self.write_index(group).await;
        self.write(item, None).await;
    }

    async fn stop(&mut self) {
        self.server.stop().await;
    }

    async fn restart(&mut self) {
        self.server.restart().await;
        self.indexes.clear();
    }
}
