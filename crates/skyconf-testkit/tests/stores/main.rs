//! The stores of skyconf-sources against their real servers, one binary (`cargo test -p
//! skyconf-testkit --test stores`; a module's tests alone with a filter, e.g. `-- etcd::`): each
//! store against its real server (started by `skyconf_testkit::servers`), and the conformance
//! suite every store runs. They live here, not in skyconf-sources, so that the stores' crate
//! does not depend on the testkit that depends on it.

mod conformance;
mod dcs;
mod etcd;
mod nacos;
mod records;
mod zookeeper;
