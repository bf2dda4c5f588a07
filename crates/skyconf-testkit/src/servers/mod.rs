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

use std::path::{Path, PathBuf};
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

/// Where the program `name` is: the path in the variable `var` when it is set (nothing else is
/// tried then), else the first `name` on `PATH`, else `fallback`; only an existing file counts.
pub(crate) fn find_program(var: Option<&str>, name: &str, fallback: Option<PathBuf>) -> Option<PathBuf> {
    if let Some(path) = var.and_then(std::env::var_os) {
        return Some(PathBuf::from(path)).filter(|p| p.is_file());
    }
    let on_path = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).map(|dir| dir.join(name)).collect::<Vec<_>>())
        .unwrap_or_default();
    on_path.into_iter().chain(fallback).find(|p| p.is_file())
}

/// A loopback port free now (the kernel's choice), for a store process to listen on.
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().unwrap().port()
}

/// Sends what `command`'s process prints, both streams, to the file `log`, appending: a restarted
/// process's log follows its earlier one.
pub(crate) fn output_to<'a>(command: &'a mut Command, log: &Path) -> &'a mut Command {
    let log = std::fs::OpenOptions::new().create(true).append(true).open(log).expect("a log file");
    command.stdout(log.try_clone().expect("a log file")).stderr(log)
}
