# rnacos, a Nacos-protocol server written in Rust, for the Nacos store's integration tests
# (crates/skyconf-testkit/tests/stores/nacos.rs and crates/skyconf-server/tests/it/nacos.rs). There is no
# Nacos server in Debian, so it is built from crates.io into ~/.cargo/bin when `rnacos` is not on
# PATH; that takes several minutes on a 2-core machine, once. It is built unoptimised (--debug):
# that halves the build (about 6 minutes instead of 12 or more on 2 cores, which matters in CI's
# time budget) and is fast enough for tests. The tests start their own server on
# loopback with ephemeral ports and a temp data dir.
RNACOS_VERSION=0.8.8
if ! command -v rnacos >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/rnacos" ]; then
  echo "test.sh: installing rnacos $RNACOS_VERSION (cargo install --debug, several minutes)" >&2
  # Without CARGO_TARGET_DIR, cargo install builds in a temporary directory it removes afterwards.
  env -u CARGO_TARGET_DIR cargo install rnacos --version "$RNACOS_VERSION" --locked --debug --quiet
fi
export PATH="$HOME/.cargo/bin:$PATH"
export SKYCONF_REQUIRE_NACOS=1
