//! The conformance backend of the ZooKeeper store: a real ZooKeeper of its own (the suite stops
//! it), written with its own session.

use std::time::Duration;

use skyconf_sources::zookeeper::{ZookeeperSettings, ZookeeperSource};
use zookeeper_client as zk;

use super::StoreBackend;
use crate::servers::zookeeper::{ZkServer, namespace, upsert};

/// A real ZooKeeper, a session of the test's own and a namespace.
#[derive(Debug)]
pub struct ZookeeperBackend {
    server: ZkServer,
    client: zk::Client,
    namespace: String,
}

impl ZookeeperBackend {
    /// Starts a ZooKeeper; `None` when it is not installed (and not required).
    pub async fn start() -> Option<Self> {
        let server = ZkServer::start()?;
        let client = server.client().await;
        Some(Self { server, client, namespace: namespace("conformance") })
    }

    fn path(&self, key: &str) -> String {
        format!("{}/{key}", self.namespace)
    }
}

impl StoreBackend for ZookeeperBackend {
    type Source = ZookeeperSource;

    fn name(&self) -> &str {
        "zookeeper"
    }

    fn source(&self) -> ZookeeperSource {
        let settings = ZookeeperSettings {
            host_port: self.server.addr(),
            namespace: self.namespace.clone(),
            base_sleep_time_ms: 50,
            max_retries: 2,
            ..ZookeeperSettings::default()
        };
        ZookeeperSource::new(settings).unwrap().with_request_timeout(Duration::from_secs(5))
    }

    async fn put(&mut self, key: &str, value: &str) {
        upsert(&self.client, &self.path(key), value).await;
    }

    async fn delete(&mut self, key: &str) {
        self.client.delete(&self.path(key), None).await.unwrap();
    }

    async fn put_item(&mut self, group: &str, item: &str, value: &str) {
        upsert(&self.client, &self.path(&format!("{group}/{item}")), value).await;
    }

    async fn delete_item(&mut self, group: &str, item: &str) {
        self.client.delete(&self.path(&format!("{group}/{item}")), None).await.unwrap();
    }

    async fn stop(&mut self) {
        self.server.kill();
    }

    async fn restart(&mut self) {
        self.server.restart();
        self.client = self.server.client().await;
    }
}
