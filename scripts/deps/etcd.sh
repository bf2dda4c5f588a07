# etcd for the etcd store's integration tests (crates/skyconf-testkit/tests/stores/etcd.rs and
# crates/skyconf-server/tests/it/etcd.rs). Debian's etcd-server ships the `etcd` binary (3.4.x). The
# tests start their own instance on loopback with ephemeral ports and a temp data dir, so a system
# etcd the package may have started on 2379 is neither used nor in the way. The TLS test makes its
# certificates with the openssl command line tool.
apt_install etcd-server openssl
export SKYCONF_REQUIRE_ETCD=1
