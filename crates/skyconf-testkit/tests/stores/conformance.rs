//! The `Source` contract, checked by one suite (`skyconf_testkit::conformance`) for every store
//! with a real server: etcd, ZooKeeper, Nacos (rnacos) and the file store's directory form. A store
//! whose server is not installed skips, unless its `SKYCONF_REQUIRE_*` variable is set.

use skyconf_testkit::conformance::{self, EtcdBackend, FileBackend, NacosBackend, StoreBackend, ZookeeperBackend};

/// Runs the suite on a started store; nothing when its server is not installed (and not
/// required: the backend's `start` fails then).
async fn check(started: Option<impl StoreBackend>) {
    if let Some(mut store) = started {
        conformance::run_all(&mut store).await;
    }
}

#[tokio::test]
async fn etcd_keeps_the_source_contract() {
    check(EtcdBackend::start().await).await;
}

#[tokio::test]
async fn zookeeper_keeps_the_source_contract() {
    check(ZookeeperBackend::start().await).await;
}

#[tokio::test]
async fn nacos_keeps_the_source_contract() {
    check(NacosBackend::start().await).await;
}

#[tokio::test]
async fn the_file_directory_keeps_the_source_contract() {
    conformance::run_all(&mut FileBackend::new()).await;
}
