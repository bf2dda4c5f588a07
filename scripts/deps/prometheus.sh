# Prometheus for the rollout gate's integration test (crates/skyconf-server/tests/it/rollout_prometheus.rs).
# Debian's `prometheus` ships the binary; the test starts its own instance on loopback with an
# ephemeral port, a generated scrape configuration and a temp TSDB directory, so a system
# Prometheus the package may have started on 9090 is neither used nor in the way.
apt_install prometheus
export SKYCONF_PROMETHEUS_BIN="${SKYCONF_PROMETHEUS_BIN:-/usr/bin/prometheus}"
export SKYCONF_REQUIRE_PROMETHEUS=1
