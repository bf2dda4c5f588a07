//! The `Source` contract, checked by one suite (`skyconf_testkit::conformance`) for every store
//! with a real server: etcd, ZooKeeper, Nacos (rnacos) and the file store's directory form. A store
//! whose server is not installed skips, unless its `SKYCONF_REQUIRE_*` variable is set.

use skyconf_testkit::conformance::{self, EtcdBackend, FileBackend, NacosBackend, ZookeeperBackend};

#[tokio::test]
async fn etcd_keeps_the_source_contract() {
    let Some(mut store) = EtcdBackend::start().await else { return };
    conformance::run_all(&mut store).await;
}

#[tokio::test]
async fn zookeeper_keeps_the_source_contract() {
    let Some(mut store) = ZookeeperBackend::start().await else { return };
    conformance::run_all(&mut store).await;
}

#[tokio::test]
async fn nacos_keeps_the_source_contract() {
    let Some(mut store) = NacosBackend::start().await else { return };
    conformance::run_all(&mut store).await;
}

#[tokio::test]
async fn the_file_directory_keeps_the_source_contract() {
    conformance::run_all(&mut FileBackend::new()).await;
}
