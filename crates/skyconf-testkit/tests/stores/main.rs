//! skyconf-sources' integration tests, one binary (`cargo test -p skyconf-sources --test it`;
//! a module's tests alone with a filter, e.g. `-- etcd::`): each store against its real server
//! (started by `skyconf_testkit::servers`), and the conformance suite every store runs.

mod conformance;
mod dcs;
mod etcd;
mod nacos;
mod records;
mod zookeeper;
