//! The conformance backend of the etcd store: a real etcd, written with its own client.

use std::time::Duration;

use skyconf_sources::Backoff;
use skyconf_sources::etcd::{EtcdSettings, EtcdSource};

use super::StoreBackend;
use crate::servers::etcd::{Admin, EtcdServer};

/// A real etcd and a client of its own; keys under `/skywalking/`, the OAP's namespace.
#[derive(Debug)]
pub struct EtcdBackend {
    server: EtcdServer,
    admin: Admin,
}

impl EtcdBackend {
    /// Starts an etcd; `None` when it is not installed (and not required).
    pub async fn start() -> Option<Self> {
        let server = EtcdServer::start().await?;
        let admin = server.admin().await;
        Some(Self { server, admin })
    }
}

fn key(key: &str) -> String {
    format!("/skywalking/{key}")
}

impl StoreBackend for EtcdBackend {
    type Source = EtcdSource;

    fn name(&self) -> &str {
        "etcd"
    }

    fn source(&self) -> EtcdSource {
        let settings = EtcdSettings { endpoints: self.server.url(), ..EtcdSettings::default() };
        EtcdSource::new(settings)
            .unwrap()
            .with_backoff(Backoff::new(Duration::from_millis(50), Duration::from_millis(500)))
    }

    async fn put(&mut self, k: &str, value: &str) {
        self.admin.put(&key(k), value).await;
    }

    async fn delete(&mut self, k: &str) {
        self.admin.delete(&key(k)).await;
    }

    async fn put_item(&mut self, group: &str, item: &str, value: &str) {
        self.admin.put(&key(&format!("{group}/{item}")), value).await;
    }

    async fn delete_item(&mut self, group: &str, item: &str) {
        self.admin.delete(&key(&format!("{group}/{item}"))).await;
    }

    async fn stop(&mut self) {
        self.server.kill();
    }

    async fn restart(&mut self) {
        self.server.restart().await;
        self.admin = self.server.admin().await;
    }
}
