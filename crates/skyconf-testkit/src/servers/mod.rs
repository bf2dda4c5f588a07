//! Real store servers for tests, each a child process on ephemeral loopback ports with a
//! temporary data directory, killed when dropped; etcd and ZooKeeper also as three-member
//! clusters ([`etcd::EtcdCluster`], [`zookeeper::ZkEnsemble`]) for replica tests; and a
//! Prometheus ([`prometheus::PrometheusServer`]) for the rollout gate's tests.
//!
//! Each one skips (returns `None` after saying why) when its program is not installed, unless the
//! matching `SKYCONF_REQUIRE_*` variable is set (scripts/test.sh sets them), in which case it
//! panics: `SKYCONF_REQUIRE_ETCD`, `SKYCONF_REQUIRE_ZOOKEEPER`, `SKYCONF_REQUIRE_NACOS`,
//! `SKYCONF_REQUIRE_PROMETHEUS`.

pub mod etcd;
pub mod prometheus;
pub mod rnacos;
pub mod zookeeper;

use std::path::Path;
use std::process::Command;

/// One machine, shared by every test of a test binary: a test that loads it heavily (a cluster
/// of store processes and several servers) holds this shared, a test that measures latency holds
/// it exclusively, so the measurement does not count the other test's load.
pub static MACHINE: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// What a start does when something it needs is not there: panics saying `missing` when the
/// variable `require` is set, otherwise prints `skipping` (why the test skips). The caller then
/// returns `None`.
pub(crate) fn skip_unless_required(require: &str, missing: &str, skipping: &str) {
    assert!(std::env::var_os(require).is_none(), "{require} is set but {missing}");
    eprintln!("{skipping}");
}

/// Sends what `command`'s process prints, both streams, to the file `log`, appending: a restarted
/// process's log follows its earlier one.
pub(crate) fn output_to<'a>(command: &'a mut Command, log: &Path) -> &'a mut Command {
    let log = std::fs::OpenOptions::new().create(true).append(true).open(log).expect("a log file");
    command.stdout(log.try_clone().expect("a log file")).stderr(log)
}
