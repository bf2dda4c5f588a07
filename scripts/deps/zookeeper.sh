# ZooKeeper for the ZooKeeper store's integration tests (crates/skyconf-testkit/tests/stores/zookeeper.rs
# and crates/skyconf-server/tests/it/zookeeper.rs). Debian's `zookeeper` package (3.8, Java) ships
# /usr/share/java/zookeeper.jar and pulls in a JRE. The tests start their own server from that jar
# on loopback with an ephemeral port and a temp data dir, so a system ZooKeeper the package may
# have started on 2181 is neither used nor in the way.
apt_install zookeeper
export SKYCONF_REQUIRE_ZOOKEEPER=1
